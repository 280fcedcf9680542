/* c4_proto.c: encoder/decoder for the shim's formats (nccl_shim/FORMAT.md): little-endian,
 * fixed-size bodies, counts bounded, so a decoder can reject garbage from a broken or hostile
 * peer without ever trusting a length it read. */
#include "c4_proto.h"

#include <string.h>

enum { LOOKUP_LEN = 144, ASSIGN_FIXED = 68, FLOW_LEN = 40, COLL_FIXED = 68, PEER_LEN = 48,
       CONN_FIXED = 128, SOCK_LEN = 32, STATS_LEN = 160, HANDOFF_LEN = 8 + C4P_HELLO_LEN };

typedef struct { uint8_t *p; } wr;
typedef struct { const uint8_t *p; } rd;

static void w8(wr *w, uint8_t v) { *w->p++ = v; }
static void w16(wr *w, uint16_t v) { w8(w, (uint8_t)v); w8(w, (uint8_t)(v >> 8)); }
static void w32(wr *w, uint32_t v) { w16(w, (uint16_t)v); w16(w, (uint16_t)(v >> 16)); }
static void w64(wr *w, uint64_t v) { w32(w, (uint32_t)v); w32(w, (uint32_t)(v >> 32)); }
static void wi32(wr *w, int32_t v) { w32(w, (uint32_t)v); }
static void waddr(wr *w, const c4p_addr *a) { memcpy(w->p, a->b, 16); w->p += 16; }
static void wzero(wr *w, size_t n) { memset(w->p, 0, n); w->p += n; }
static void wjob(wr *w, const char *job) {
  size_t n = strnlen(job, C4P_JOB_LEN);
  memcpy(w->p, job, n);
  memset(w->p + n, 0, C4P_JOB_LEN - n);
  w->p += C4P_JOB_LEN;
}
static uint8_t r8(rd *r) { return *r->p++; }
static uint16_t r16(rd *r) { uint16_t v = r8(r); return (uint16_t)(v | (uint16_t)r8(r) << 8); }
static uint32_t r32(rd *r) { uint32_t v = r16(r); return v | (uint32_t)r16(r) << 16; }
static uint64_t r64(rd *r) { uint64_t v = r32(r); return v | (uint64_t)r32(r) << 32; }
static int32_t ri32(rd *r) { return (int32_t)r32(r); }
static void raddr(rd *r, c4p_addr *a) { memcpy(a->b, r->p, 16); r->p += 16; }
static void rskip(rd *r, size_t n) { r->p += n; }
/* A job name field: text, then NUL padding only (so one name has one encoding). */
static int rjob(rd *r, char *out) {
  size_t n = strnlen((const char *)r->p, C4P_JOB_LEN);
  for (size_t i = n; i < C4P_JOB_LEN; i++)
    if (r->p[i]) return -1;
  memcpy(out, r->p, n);
  out[n] = 0;
  r->p += C4P_JOB_LEN;
  return 0;
}

static void whdr(wr *w, uint8_t type, size_t len) {
  w8(w, C4P_MAGIC0); w8(w, C4P_MAGIC1); w8(w, C4P_VERSION); w8(w, type);
  w16(w, (uint16_t)len); w16(w, 0);
}

size_t c4p_encode_lookup(const c4p_lookup *m, uint8_t *buf, size_t cap) {
  if (cap < LOOKUP_LEN) return 0;
  wr w = {buf};
  whdr(&w, C4P_LOOKUP, LOOKUP_LEN);
  w32(&w, m->req_id); w32(&w, m->pid); w64(&w, m->comm_id);
  waddr(&w, &m->local); waddr(&w, &m->remote);
  w16(&w, m->remote_port); w16(&w, m->conn_index); w16(&w, m->kind); w16(&w, m->max_flows);
  w32(&w, m->version); wi32(&w, m->src_rank); wi32(&w, m->dst_rank); w32(&w, 0);
  wjob(&w, m->job);
  return LOOKUP_LEN;
}

size_t c4p_encode_assign(const c4p_assign *m, uint8_t *buf, size_t cap) {
  size_t len = ASSIGN_FIXED + (size_t)m->nflows * FLOW_LEN;
  if (m->nflows > C4P_MAX_FLOWS || cap < len) return 0;
  wr w = {buf};
  whdr(&w, C4P_ASSIGN, len);
  w32(&w, m->req_id); w32(&w, m->version); w64(&w, m->comm_id);
  waddr(&w, &m->local); waddr(&w, &m->remote);
  w16(&w, m->conn_index); w8(&w, m->status); w8(&w, m->nflows);
  wi32(&w, m->src_rank); wi32(&w, m->dst_rank);
  for (int i = 0; i < m->nflows; i++) {
    w16(&w, m->flows[i].sport); w16(&w, 0); w32(&w, m->flows[i].weight_ppm);
    waddr(&w, &m->flows[i].src); waddr(&w, &m->flows[i].dst);
  }
  return len;
}

size_t c4p_encode_coll(const c4p_coll *m, uint8_t *buf, size_t cap) {
  size_t len = COLL_FIXED + (size_t)m->npeers * PEER_LEN;
  if (m->npeers > C4P_MAX_PEERS || cap < len) return 0;
  wr w = {buf};
  whdr(&w, C4P_COLL, len);
  w64(&w, m->comm_hash); w64(&w, m->seq); w64(&w, m->bytes);
  w64(&w, m->t_start_us); w64(&w, m->t_end_us);
  wi32(&w, m->rank); wi32(&w, m->nranks); w32(&w, m->pid); wi32(&w, m->job_rank);
  w8(&w, m->op); w8(&w, m->flags); w8(&w, m->npeers); w8(&w, 0);
  for (int i = 0; i < m->npeers; i++) {
    const c4p_peer *p = &m->peers[i];
    wi32(&w, p->peer); wi32(&w, p->peer_job_rank); w8(&w, p->dir); w8(&w, p->done);
    w16(&w, p->flags); w32(&w, 0);
    w64(&w, p->bytes); w64(&w, p->t_first_us); w64(&w, p->t_last_us); w64(&w, p->net_us);
  }
  return len;
}

size_t c4p_encode_conn(const c4p_conn *m, uint8_t *buf, size_t cap) {
  size_t len = CONN_FIXED + (size_t)m->nsocks * SOCK_LEN;
  if (m->nsocks > C4P_MAX_FLOWS || cap < len) return 0;
  wr w = {buf};
  whdr(&w, C4P_CONN, len);
  w64(&w, m->comm_id); waddr(&w, &m->local); waddr(&w, &m->remote);
  w16(&w, m->remote_port); w16(&w, m->conn_index); w8(&w, m->dir); w8(&w, m->nsocks);
  w16(&w, 0);
  wi32(&w, m->peer_rank); w32(&w, m->pid); w32(&w, m->flags);
  wi32(&w, m->peer_job_rank); wi32(&w, m->job_rank); wi32(&w, m->peer_comm_rank);
  w64(&w, m->bytes); w64(&w, m->msgs); w64(&w, m->t_first_us); w64(&w, m->t_last_us);
  w64(&w, m->pending_since_us); w64(&w, m->net_us);
  for (int i = 0; i < m->nsocks; i++) {
    const c4p_sock *s = &m->socks[i];
    w16(&w, s->sport); w16(&w, 0); w32(&w, s->weight_ppm);
    w64(&w, s->bytes); w64(&w, s->t_last_us); w64(&w, s->net_us);
  }
  return len;
}

size_t c4p_encode_stats(const c4p_stats *m, uint8_t *buf, size_t cap) {
  if (cap < STATS_LEN) return 0;
  wr w = {buf};
  whdr(&w, C4P_STATS, STATS_LEN);
  w32(&w, m->pid); wi32(&w, m->job_rank);
  w64(&w, m->ring_drops); w64(&w, m->send_drops); w64(&w, m->lookups);
  w64(&w, m->lookup_timeouts); w64(&w, m->lookup_failures); w64(&w, m->bind_fallbacks);
  w64(&w, m->records_sent); w64(&w, m->handoffs); w64(&w, m->route_fallbacks); w64(&w, 0);
  wjob(&w, m->job);
  return STATS_LEN;
}

size_t c4p_encode_handoff(const c4p_hello *h, uint8_t *buf, size_t cap) {
  if (cap < HANDOFF_LEN) return 0;
  wr w = {buf};
  whdr(&w, C4P_HANDOFF, HANDOFF_LEN);
  c4p_encode_hello(h, w.p);
  return HANDOFF_LEN;
}

int c4p_peek_type(const uint8_t *buf, size_t len) {
  if (len < C4P_HDR_LEN || buf[0] != C4P_MAGIC0 || buf[1] != C4P_MAGIC1 ||
      buf[2] != C4P_VERSION || buf[6] != 0 || buf[7] != 0)
    return 0;
  size_t declared = (size_t)buf[4] | (size_t)buf[5] << 8;
  if (declared != len) return 0;
  int t = buf[3];
  return (t >= C4P_LOOKUP && t <= C4P_BATCH) ? t : 0;
}

size_t c4p_batch_begin(uint8_t *buf, size_t cap) {
  if (cap < C4P_HDR_LEN) return 0;
  wr w = {buf};
  whdr(&w, C4P_BATCH, C4P_HDR_LEN);
  return C4P_HDR_LEN;
}

int c4p_batch_add(uint8_t *buf, size_t *len, size_t cap, const uint8_t *msg, size_t msg_len) {
  int t = c4p_peek_type(msg, msg_len);
  if ((t != C4P_COLL && t != C4P_CONN) || *len + msg_len > cap || *len + msg_len > C4P_MAX_BATCH)
    return 0;
  memcpy(buf + *len, msg, msg_len);
  *len += msg_len;
  return 1;
}

size_t c4p_batch_end(uint8_t *buf, size_t len) {
  buf[4] = (uint8_t)len;
  buf[5] = (uint8_t)(len >> 8);
  return len;
}

int c4p_batch_next(const uint8_t *buf, size_t len, size_t *off, const uint8_t **msg,
                   size_t *msg_len) {
  if (*off == 0) {
    if (c4p_peek_type(buf, len) != C4P_BATCH) return -1;
    *off = C4P_HDR_LEN;
  }
  if (*off == len) return 0;
  if (len - *off < C4P_HDR_LEN) return -1;
  size_t n = (size_t)buf[*off + 4] | (size_t)buf[*off + 5] << 8;
  if (n < C4P_HDR_LEN || n > len - *off) return -1;
  int t = c4p_peek_type(buf + *off, n);
  if (t != C4P_COLL && t != C4P_CONN) return -1;
  *msg = buf + *off;
  *msg_len = n;
  *off += n;
  return 1;
}

static int check(const uint8_t *buf, size_t len, int type, size_t min_len) {
  return (c4p_peek_type(buf, len) == type && len >= min_len) ? 0 : -1;
}

int c4p_decode_lookup(const uint8_t *buf, size_t len, c4p_lookup *m) {
  if (check(buf, len, C4P_LOOKUP, LOOKUP_LEN) || len != LOOKUP_LEN) return -1;
  rd r = {buf + C4P_HDR_LEN};
  m->req_id = r32(&r); m->pid = r32(&r); m->comm_id = r64(&r);
  raddr(&r, &m->local); raddr(&r, &m->remote);
  m->remote_port = r16(&r); m->conn_index = r16(&r); m->kind = r16(&r); m->max_flows = r16(&r);
  m->version = r32(&r); m->src_rank = ri32(&r); m->dst_rank = ri32(&r); rskip(&r, 4);
  if (m->kind > C4P_KIND_ROCE) return -1;
  return rjob(&r, m->job);
}

int c4p_decode_assign(const uint8_t *buf, size_t len, c4p_assign *m) {
  if (check(buf, len, C4P_ASSIGN, ASSIGN_FIXED)) return -1;
  rd r = {buf + C4P_HDR_LEN};
  m->req_id = r32(&r); m->version = r32(&r); m->comm_id = r64(&r);
  raddr(&r, &m->local); raddr(&r, &m->remote);
  m->conn_index = r16(&r); m->status = r8(&r); m->nflows = r8(&r);
  m->src_rank = ri32(&r); m->dst_rank = ri32(&r);
  if (m->nflows > C4P_MAX_FLOWS || len != ASSIGN_FIXED + (size_t)m->nflows * FLOW_LEN)
    return -1;
  if (m->status > C4P_ERROR) return -1;
  for (int i = 0; i < m->nflows; i++) {
    m->flows[i].sport = r16(&r); (void)r16(&r); m->flows[i].weight_ppm = r32(&r);
    raddr(&r, &m->flows[i].src); raddr(&r, &m->flows[i].dst);
    if (m->flows[i].weight_ppm > 1000000u) return -1;
  }
  return 0;
}

int c4p_decode_coll(const uint8_t *buf, size_t len, c4p_coll *m) {
  if (check(buf, len, C4P_COLL, COLL_FIXED)) return -1;
  rd r = {buf + C4P_HDR_LEN};
  m->comm_hash = r64(&r); m->seq = r64(&r); m->bytes = r64(&r);
  m->t_start_us = r64(&r); m->t_end_us = r64(&r);
  m->rank = ri32(&r); m->nranks = ri32(&r); m->pid = r32(&r); m->job_rank = ri32(&r);
  m->op = r8(&r); m->flags = r8(&r); m->npeers = r8(&r); (void)r8(&r);
  if (m->npeers > C4P_MAX_PEERS || len != COLL_FIXED + (size_t)m->npeers * PEER_LEN) return -1;
  for (int i = 0; i < m->npeers; i++) {
    c4p_peer *p = &m->peers[i];
    p->peer = ri32(&r); p->peer_job_rank = ri32(&r); p->dir = r8(&r); p->done = r8(&r);
    p->flags = r16(&r); rskip(&r, 4);
    p->bytes = r64(&r); p->t_first_us = r64(&r); p->t_last_us = r64(&r); p->net_us = r64(&r);
    if (p->dir > C4P_RECV || p->done > 1) return -1;
  }
  return 0;
}

int c4p_decode_conn(const uint8_t *buf, size_t len, c4p_conn *m) {
  if (check(buf, len, C4P_CONN, CONN_FIXED)) return -1;
  rd r = {buf + C4P_HDR_LEN};
  m->comm_id = r64(&r); raddr(&r, &m->local); raddr(&r, &m->remote);
  m->remote_port = r16(&r); m->conn_index = r16(&r); m->dir = r8(&r); m->nsocks = r8(&r);
  (void)r16(&r);
  m->peer_rank = ri32(&r); m->pid = r32(&r); m->flags = r32(&r);
  m->peer_job_rank = ri32(&r); m->job_rank = ri32(&r); m->peer_comm_rank = ri32(&r);
  m->bytes = r64(&r); m->msgs = r64(&r); m->t_first_us = r64(&r); m->t_last_us = r64(&r);
  m->pending_since_us = r64(&r); m->net_us = r64(&r);
  if (m->nsocks > C4P_MAX_FLOWS || len != CONN_FIXED + (size_t)m->nsocks * SOCK_LEN) return -1;
  if (m->dir > C4P_RECV) return -1;
  for (int i = 0; i < m->nsocks; i++) {
    c4p_sock *s = &m->socks[i];
    s->sport = r16(&r); (void)r16(&r); s->weight_ppm = r32(&r);
    s->bytes = r64(&r); s->t_last_us = r64(&r); s->net_us = r64(&r);
  }
  return 0;
}

int c4p_decode_stats(const uint8_t *buf, size_t len, c4p_stats *m) {
  if (check(buf, len, C4P_STATS, STATS_LEN) || len != STATS_LEN) return -1;
  rd r = {buf + C4P_HDR_LEN};
  m->pid = r32(&r); m->job_rank = ri32(&r);
  m->ring_drops = r64(&r); m->send_drops = r64(&r); m->lookups = r64(&r);
  m->lookup_timeouts = r64(&r); m->lookup_failures = r64(&r); m->bind_fallbacks = r64(&r);
  m->records_sent = r64(&r); m->handoffs = r64(&r); m->route_fallbacks = r64(&r); rskip(&r, 8);
  return rjob(&r, m->job);
}

int c4p_decode_handoff(const uint8_t *buf, size_t len, c4p_hello *h) {
  if (check(buf, len, C4P_HANDOFF, HANDOFF_LEN) || len != HANDOFF_LEN) return -1;
  return c4p_decode_hello(buf + C4P_HDR_LEN, h);
}

/* ---- shim <-> shim ---- */
void c4p_encode_handle(const c4p_handle *h, uint8_t *buf) {
  wr w = {buf};
  w32(&w, C4P_HANDLE_MAGIC); w16(&w, 2); w16(&w, h->port); w16(&w, h->fallback_port);
  wzero(&w, 6);
  waddr(&w, &h->addr); w64(&w, h->uuid); w64(&w, h->key);
  wi32(&w, h->job_rank); wi32(&w, h->comm_rank);
  wzero(&w, 16);
}

int c4p_decode_handle(const uint8_t *buf, c4p_handle *h) {
  rd r = {buf};
  if (r32(&r) != C4P_HANDLE_MAGIC || r16(&r) != 2) return -1;
  h->port = r16(&r); h->fallback_port = r16(&r); rskip(&r, 6);
  raddr(&r, &h->addr); h->uuid = r64(&r); h->key = r64(&r);
  h->job_rank = ri32(&r); h->comm_rank = ri32(&r);
  return h->port ? 0 : -1;
}

void c4p_encode_hello(const c4p_hello *h, uint8_t *buf) {
  wr w = {buf};
  w32(&w, C4P_HELLO_MAGIC); w16(&w, 2); w16(&w, h->sock_index); w16(&w, h->nsocks);
  w16(&w, h->conn_index); w64(&w, h->uuid); w64(&w, h->key);
  wi32(&w, h->job_rank); wi32(&w, h->comm_rank); w64(&w, h->comm_id); w32(&w, 0);
}

int c4p_decode_hello(const uint8_t *buf, c4p_hello *h) {
  rd r = {buf};
  if (r32(&r) != C4P_HELLO_MAGIC || r16(&r) != 2) return -1;
  h->sock_index = r16(&r); h->nsocks = r16(&r); h->conn_index = r16(&r);
  h->uuid = r64(&r); h->key = r64(&r); h->job_rank = ri32(&r); h->comm_rank = ri32(&r);
  h->comm_id = r64(&r);
  return (h->nsocks >= 1 && h->nsocks <= C4P_MAX_FLOWS && h->sock_index < h->nsocks) ? 0 : -1;
}

void c4p_encode_data_hdr(uint64_t total, uint64_t offset, uint64_t length, uint8_t *buf) {
  wr w = {buf};
  w64(&w, total); w64(&w, offset); w64(&w, length);
}

void c4p_decode_data_hdr(const uint8_t *buf, uint64_t *total, uint64_t *offset, uint64_t *length) {
  rd r = {buf};
  *total = r64(&r); *offset = r64(&r); *length = r64(&r);
}

static const char *const op_names[C4P_OP_COUNT] = {
    "Other", "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv",
    "AllToAll"};

uint8_t c4p_op_from_name(const char *name) {
  if (!name) return C4P_OP_OTHER;
  for (uint8_t i = 1; i < C4P_OP_COUNT; i++)
    if (strcmp(name, op_names[i]) == 0) return i;
  return C4P_OP_OTHER;
}

const char *c4p_op_name(uint8_t op) { return op < C4P_OP_COUNT ? op_names[op] : "Other"; }
