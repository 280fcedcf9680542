/* c4_profiler.c: the exported ncclProfiler_v6, _v5 and _v4 plugins. One record per
 * collective, keyed (comm hash, op, seq) like NCCL itself, with our own host timestamps (NCCL
 * gives none). A Coll event's stop only means "enqueued"; completion is when all of its kernel
 * channels have stopped (KernelCh events, nChannels of them) and no proxy operation of it is
 * active, or, without KernelCh events, when its last ProxyOp stops. ProxyOp (peer, direction)
 * and ProxyStep transfer sizes give per-peer bytes and first/last times; a send step's time
 * between its SendWait state (the chunk handed to the network) and its stop (the network
 * completed it) is its time on the network, summed per peer with overlaps counted once
 * (`net_us`, for NCCL's own transports too). Each record carries our job rank and each peer's,
 * from the rank table the transport fills (c4_rt.h). Events use fixed pools with atomic claim
 * flags: no lock and no syscall on NCCL's threads, only clock reads. A full pool drops the
 * event (counted with the ring drops). The background thread's watchdog re-reports
 * collectives in flight for longer than C4_WATCHDOG_MS. Copy-engine collectives (v6) are not
 * reported: NCCL gives no host-side completion for them and they never cross the network. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c4_rt.h"
#include "nccl_abi.h"

#define C4_EXPORT __attribute__((visibility("default")))
#define NCOLL 512
#define NPROXY 2048
#define NSTEP 4096
#define NKCH 1024

enum { K_COLL = 1, K_PROXY = 2, K_STEP = 3, K_KCH = 4 };

typedef struct prof_ctx prof_ctx;

/* A (peer, direction) slot, claimed by one CAS on `key` so that concurrent ProxyOp starts for
 * the same peer share it and different peers never overwrite each other. */
typedef struct {
  atomic_uint_fast64_t key; /* 0 = free, else PEER_KEY(peer, dir) */
  atomic_uint_fast64_t bytes, t_first, t_last;
  atomic_int active, stopped;
  /* time on the network: send steps between SendWait and their stop, overlaps once */
  atomic_int in_net, has_net;
  atomic_uint_fast64_t net_since, net_ns;
} peer_slot;
#define PEER_KEY(peer, dir) ((1ull << 63) | ((uint64_t)(uint32_t)(peer) << 8) | (dir))

typedef struct {
  uint8_t kind;
  atomic_int used, refs;
  atomic_uint gen;
  prof_ctx *ctx; /* fixed when the pool is created: slots never change owner */
  /* Read by the watchdog while a slot may be recycled (a seqlock on `gen`), hence atomic. */
  atomic_uint_fast64_t seq, bytes, t_start;
  atomic_uchar op;
  uint8_t nchannels;
  atomic_uint_fast64_t t_end;
  atomic_int coll_stopped, kch_stops, proxy_active, proxy_seen, truncated;
  peer_slot peers[C4P_MAX_PEERS];
} coll_ev;

typedef struct {
  uint8_t kind;
  atomic_int used, refs;
  coll_ev *coll;
  peer_slot *peer;
  uint64_t planned_bytes;
  atomic_uint_fast64_t step_bytes;
} proxy_ev;

typedef struct {
  uint8_t kind;
  atomic_int used;
  proxy_ev *op;
  atomic_uint_fast64_t trans;
  atomic_int on_net; /* SendWait seen: counted in its peer's in_net until the stop */
} step_ev;

typedef struct {
  uint8_t kind;
  atomic_int used;
  coll_ev *coll;
} kch_ev;

struct prof_ctx {
  uint64_t comm_hash;
  int rank, nranks;
  int *mask;
  prof_ctx *next;
  atomic_uint hint_c, hint_p, hint_s, hint_k;
  coll_ev colls[NCOLL];
  proxy_ev proxies[NPROXY];
  step_ev steps[NSTEP];
  kch_ev kchs[NKCH];
};

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static prof_ctx *ctxs;

#define CLAIM(arr, n, hint)                                                                    \
  ({                                                                                           \
    __typeof__(&(arr)[0]) got_ = NULL;                                                         \
    unsigned h_ = atomic_fetch_add_explicit(&(hint), 1, memory_order_relaxed);                 \
    for (unsigned i_ = 0; i_ < (n) && !got_; i_++) {                                           \
      __typeof__(&(arr)[0]) e_ = &(arr)[(h_ + i_) % (n)];                                      \
      int z_ = 0;                                                                              \
      if (atomic_load_explicit(&e_->used, memory_order_relaxed) == 0 &&                        \
          atomic_compare_exchange_strong(&e_->used, &z_, 1))                                   \
        got_ = e_;                                                                             \
    }                                                                                          \
    if (!got_) atomic_fetch_add(&c4_stat.ring_drops, 1);                                       \
    got_;                                                                                      \
  })

/* Element sizes by NCCL's datatype names; an unknown name counts as bytes. */
static size_t dtype_size(const char *dt) {
  static const struct { const char *name; size_t size; } t[] = {
      {"ncclInt8", 1}, {"ncclChar", 1}, {"ncclUint8", 1}, {"ncclFloat8e4m3", 1},
      {"ncclFloat8e5m2", 1}, {"ncclFloat16", 2}, {"ncclHalf", 2}, {"ncclBfloat16", 2},
      {"ncclInt32", 4}, {"ncclInt", 4}, {"ncclUint32", 4}, {"ncclFloat32", 4}, {"ncclFloat", 4},
      {"ncclInt64", 8}, {"ncclUint64", 8}, {"ncclFloat64", 8}, {"ncclDouble", 8}};
  if (dt)
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
      if (strcmp(dt, t[i].name) == 0) return t[i].size;
  return 1;
}

static uint64_t peer_net_us(peer_slot *p, uint64_t now) {
  uint64_t t = atomic_load(&p->net_ns), s = atomic_load(&p->net_since);
  return (t + (atomic_load(&p->in_net) > 0 && s && now > s ? now - s : 0)) / 1000u;
}

static void build_coll(coll_ev *c, uint64_t t_end, uint8_t flags, c4p_coll *out) {
  uint64_t now = c4_now_ns();
  c4p_coll m = {.comm_hash = c->ctx->comm_hash, .job_rank = c4_cfg.job_rank,
                .seq = atomic_load_explicit(&c->seq, memory_order_relaxed),
                .bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed),
                .t_start_us = c4_mono_to_real_us(atomic_load_explicit(&c->t_start, memory_order_relaxed)),
                .t_end_us = t_end ? c4_mono_to_real_us(t_end) : 0, .rank = c->ctx->rank,
                .nranks = c->ctx->nranks, .pid = c4_pid(),
                .op = atomic_load_explicit(&c->op, memory_order_relaxed),
                .flags = flags};
  if (atomic_load(&c->truncated)) m.flags |= C4P_COLL_TRUNCATED;
  for (int i = 0; i < C4P_MAX_PEERS; i++) {
    peer_slot *p = &c->peers[i];
    uint64_t key = atomic_load(&p->key);
    if (!key) continue;
    uint64_t tf = atomic_load(&p->t_first), tl = atomic_load(&p->t_last);
    int32_t peer = (int32_t)(uint32_t)(key >> 8);
    int net = atomic_load(&p->has_net);
    m.peers[m.npeers++] = (c4p_peer){
        .peer = peer, .peer_job_rank = c4_comm_job_rank(c->ctx->comm_hash, peer),
        .dir = (uint8_t)(key & 0xff),
        .done = (uint8_t)(atomic_load(&p->active) == 0 && atomic_load(&p->stopped) > 0),
        .flags = net ? C4P_PEER_NET : 0, .net_us = net ? peer_net_us(p, now) : 0,
        .bytes = atomic_load(&p->bytes), .t_first_us = tf ? c4_mono_to_real_us(tf) : 0,
        .t_last_us = tl ? c4_mono_to_real_us(tl) : 0};
  }
  *out = m;
}

static void push_coll(const c4p_coll *m) {
  uint8_t buf[C4P_MAX_DGRAM];
  size_t n = c4p_encode_coll(m, buf, sizeof buf);
  if (n) c4_emit(buf, n);
}

static void emit_coll(coll_ev *c, uint64_t t_end, uint8_t flags) {
  c4p_coll m;
  build_coll(c, t_end, flags, &m);
  push_coll(&m);
}

static void coll_release(coll_ev *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) {
    atomic_fetch_add(&c->gen, 1);
    atomic_store_explicit(&c->used, 0, memory_order_release);
  }
}

/* Called after every stop that might finish the collective; the CAS on t_end makes exactly
 * one thread emit the final record. */
static void coll_maybe_complete(coll_ev *c) {
  if (!atomic_load(&c->coll_stopped) || atomic_load(&c->proxy_active) > 0) return;
  int kch_on = c->ctx->mask && (*c->ctx->mask & ncclProfileKernelCh);
  int done = kch_on && c->nchannels ? atomic_load(&c->kch_stops) >= c->nchannels
                                    : atomic_load(&c->proxy_seen) > 0;
  if (!done) return;
  uint64_t now = c4_now_ns(), zero = 0;
  if (atomic_compare_exchange_strong(&c->t_end, &zero, now)) {
    emit_coll(c, now, 0);
    coll_release(c); /* the collective's own reference, held from start to completion */
  }
}

static peer_slot *peer_get(coll_ev *c, int peer, uint8_t dir) {
  uint64_t want = PEER_KEY(peer, dir);
  for (int i = 0; i < C4P_MAX_PEERS; i++) {
    peer_slot *p = &c->peers[i];
    uint64_t cur = atomic_load(&p->key);
    if (cur == want) return p;
    if (cur == 0) {
      if (atomic_compare_exchange_strong(&p->key, &cur, want)) return p;
      if (cur == want) return p; /* another thread claimed it for the same peer */
    }
  }
  atomic_store(&c->truncated, 1);
  return NULL;
}

static ncclResult_t prof_init_common(void **ctx, uint64_t hash, int *mask, int nranks,
                                     int rank) {
  c4_rt_init();
  prof_ctx *c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->comm_hash = hash;
  c->rank = rank;
  c->nranks = nranks;
  c->mask = mask;
  for (int i = 0; i < NCOLL; i++) { c->colls[i].kind = K_COLL; c->colls[i].ctx = c; }
  for (int i = 0; i < NPROXY; i++) c->proxies[i].kind = K_PROXY;
  for (int i = 0; i < NSTEP; i++) c->steps[i].kind = K_STEP;
  for (int i = 0; i < NKCH; i++) c->kchs[i].kind = K_KCH;
  if (mask) *mask |= ncclProfileColl | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh;
  /* Our rank in this communicator, and its job rank, for the transport's handles and hellos
   * and for the agent's mapping (FORMAT.md "Job identity"). */
  c4_comm_set_self(hash, rank);
  c4_comm_learn(hash, rank, c4_cfg.job_rank);
  pthread_mutex_lock(&ctx_mu);
  c->next = ctxs;
  ctxs = c;
  pthread_mutex_unlock(&ctx_mu);
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t init_v5(void **ctx, uint64_t comm_id, int *mask, const char *name,
                            int nnodes, int nranks, int rank, ncclDebugLogger_t log) {
  (void)name; (void)nnodes;
  c4_set_logger(log);
  return prof_init_common(ctx, comm_id, mask, nranks, rank);
}

static ncclResult_t init_v4(void **ctx, int *mask, const char *name, uint64_t hash, int nnodes,
                            int nranks, int rank, ncclDebugLogger_t log) {
  (void)name; (void)nnodes;
  c4_set_logger(log);
  return prof_init_common(ctx, hash, mask, nranks, rank);
}

/* The shared part of v4 and v5 descriptors, extracted by the version entry points. */
typedef struct {
  uint64_t type;
  void *parent;
  uint64_t seq;
  const char *func, *dtype;
  size_t count;
  uint8_t nchannels;
  pid_t pid;
  int peer, nsteps, chunk, is_send;
} ev_desc;

static ncclResult_t start(prof_ctx *ctx, void **eh, const ev_desc *d) {
  *eh = NULL;
  if (!ctx) return ncclSuccess;
  if (d->type == ncclProfileColl) {
    coll_ev *c = CLAIM(ctx->colls, NCOLL, ctx->hint_c);
    if (!c) return ncclSuccess;
    atomic_store_explicit(&c->seq, d->seq, memory_order_relaxed);
    atomic_store_explicit(&c->op, c4p_op_from_name(d->func), memory_order_relaxed);
    atomic_store_explicit(&c->bytes, d->count * dtype_size(d->dtype), memory_order_relaxed);
    c->nchannels = d->nchannels;
    atomic_store_explicit(&c->t_start, c4_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&c->t_end, 0, memory_order_relaxed);
    atomic_store_explicit(&c->coll_stopped, 0, memory_order_relaxed);
    atomic_store_explicit(&c->kch_stops, 0, memory_order_relaxed);
    atomic_store_explicit(&c->proxy_active, 0, memory_order_relaxed);
    atomic_store_explicit(&c->proxy_seen, 0, memory_order_relaxed);
    atomic_store_explicit(&c->truncated, 0, memory_order_relaxed);
    /* Relaxed: nobody else can reach the slot until the release on `gen` below publishes it. */
    for (int i = 0; i < C4P_MAX_PEERS; i++) {
      peer_slot *p = &c->peers[i];
      atomic_store_explicit(&p->key, 0, memory_order_relaxed);
      atomic_store_explicit(&p->bytes, 0, memory_order_relaxed);
      atomic_store_explicit(&p->t_first, 0, memory_order_relaxed);
      atomic_store_explicit(&p->t_last, 0, memory_order_relaxed);
      atomic_store_explicit(&p->active, 0, memory_order_relaxed);
      atomic_store_explicit(&p->stopped, 0, memory_order_relaxed);
      atomic_store_explicit(&p->in_net, 0, memory_order_relaxed);
      atomic_store_explicit(&p->has_net, 0, memory_order_relaxed);
      atomic_store_explicit(&p->net_since, 0, memory_order_relaxed);
      atomic_store_explicit(&p->net_ns, 0, memory_order_relaxed);
    }
    atomic_store_explicit(&c->refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->gen, 1, memory_order_release); /* odd = live and complete */
    *eh = c;
  } else if (d->type == ncclProfileProxyOp) {
    coll_ev *parent = d->parent;
    /* Another process's proxy (PXN) hands us a parent pointer from its address space. */
    if (!parent || (uint32_t)d->pid != c4_pid() || parent->kind != K_COLL) return ncclSuccess;
    proxy_ev *p = CLAIM(ctx->proxies, NPROXY, ctx->hint_p);
    if (!p) return ncclSuccess;
    p->coll = parent;
    atomic_fetch_add(&parent->refs, 1);
    atomic_fetch_add(&parent->proxy_active, 1);
    atomic_fetch_add(&parent->proxy_seen, 1);
    p->peer = peer_get(parent, d->peer, d->is_send ? C4P_SEND : C4P_RECV);
    p->planned_bytes = (uint64_t)(d->nsteps > 0 ? d->nsteps : 0) * (uint64_t)(d->chunk > 0 ? d->chunk : 0);
    atomic_store(&p->step_bytes, 0);
    atomic_store(&p->refs, 1);
    if (p->peer) {
      uint64_t now = c4_now_ns(), zero = 0;
      atomic_fetch_add(&p->peer->active, 1);
      atomic_compare_exchange_strong(&p->peer->t_first, &zero, now);
    }
    *eh = p;
  } else if (d->type == ncclProfileProxyStep) {
    proxy_ev *op = d->parent;
    if (!op || op->kind != K_PROXY) return ncclSuccess;
    step_ev *s = CLAIM(ctx->steps, NSTEP, ctx->hint_s);
    if (!s) return ncclSuccess;
    s->op = op;
    atomic_store(&s->trans, 0);
    atomic_store(&s->on_net, 0);
    atomic_fetch_add(&op->refs, 1);
    *eh = s;
  } else if (d->type == ncclProfileKernelCh) {
    coll_ev *parent = d->parent;
    if (!parent || parent->kind != K_COLL) return ncclSuccess;
    kch_ev *k = CLAIM(ctx->kchs, NKCH, ctx->hint_k);
    if (!k) return ncclSuccess;
    k->coll = parent;
    atomic_fetch_add(&parent->refs, 1);
    *eh = k;
  }
  return ncclSuccess;
}

static void proxy_release(proxy_ev *p) {
  if (atomic_fetch_sub(&p->refs, 1) == 1) {
    coll_ev *c = p->coll;
    atomic_store_explicit(&p->used, 0, memory_order_release);
    coll_release(c);
  }
}

static ncclResult_t stop(void *eh) {
  if (!eh) return ncclSuccess;
  uint8_t kind = *(uint8_t *)eh;
  if (kind == K_COLL) {
    coll_ev *c = eh;
    /* Enqueued only: the slot stays ours until completion, since NCCL starts the ProxyOp and
     * KernelCh children after this stop. */
    atomic_store(&c->coll_stopped, 1);
    coll_maybe_complete(c);
  } else if (kind == K_PROXY) {
    proxy_ev *p = eh;
    coll_ev *c = p->coll;
    if (p->peer) {
      /* Without ProxyStep events the planned size is the best estimate of what moved. */
      if (!atomic_load(&p->step_bytes)) atomic_fetch_add(&p->peer->bytes, p->planned_bytes);
      atomic_store(&p->peer->t_last, c4_now_ns());
      atomic_fetch_add(&p->peer->stopped, 1);
      atomic_fetch_sub(&p->peer->active, 1);
    }
    atomic_fetch_sub(&c->proxy_active, 1);
    coll_maybe_complete(c);
    proxy_release(p);
  } else if (kind == K_STEP) {
    step_ev *s = eh;
    proxy_ev *op = s->op;
    uint64_t t = atomic_load(&s->trans), now = c4_now_ns();
    if (t && op->peer) {
      atomic_fetch_add(&op->step_bytes, t);
      atomic_fetch_add(&op->peer->bytes, t);
      atomic_store(&op->peer->t_last, now);
    }
    if (atomic_load(&s->on_net) && op->peer && atomic_fetch_sub(&op->peer->in_net, 1) == 1) {
      uint64_t since = atomic_load(&op->peer->net_since);
      atomic_fetch_add(&op->peer->net_ns, now - since);
    }
    atomic_store_explicit(&s->used, 0, memory_order_release);
    proxy_release(op);
  } else if (kind == K_KCH) {
    kch_ev *k = eh;
    coll_ev *c = k->coll;
    atomic_fetch_add(&c->kch_stops, 1);
    atomic_store_explicit(&k->used, 0, memory_order_release);
    coll_maybe_complete(c);
    coll_release(c);
  }
  return ncclSuccess;
}

static void keep_max(atomic_uint_fast64_t *v, uint64_t t) {
  uint64_t cur = atomic_load(v);
  while (t > cur && !atomic_compare_exchange_weak(v, &cur, t)) {}
}

/* NCCL passes the connection's latest transfer size with every state of a step; it belongs to
 * this step only from SendWait (send: set just before the isend) and from RecvFlushWait
 * (receive: set when the data arrived). Earlier states carry the previous step's size. */
static ncclResult_t record(void *eh, int state, ncclProfilerEventStateArgs_t *args) {
  if (!eh || *(uint8_t *)eh != K_STEP) return ncclSuccess;
  step_ev *s = eh;
  if (state == ncclProfilerProxyStepSendWait) {
    if (args) keep_max(&s->trans, args->proxyStep.transSize);
    peer_slot *p = s->op->peer;
    int zero = 0;
    if (p && atomic_compare_exchange_strong(&s->on_net, &zero, 1)) {
      /* The chunk is on the network from now until the step stops. */
      uint64_t now = c4_now_ns();
      atomic_store(&p->has_net, 1);
      if (atomic_fetch_add(&p->in_net, 1) == 0) atomic_store(&p->net_since, now);
    }
  } else if (state == ncclProfilerProxyStepRecvFlushWait ||
             state == ncclProfilerProxyStepRecvGPUWait) {
    if (args) keep_max(&s->trans, args->proxyStep.transSize);
  }
  return ncclSuccess;
}

static ncclResult_t start_v5(void *ctx, void **eh, ncclProfilerEventDescr_v5_t *d) {
  ev_desc e = {.type = d->type, .parent = d->parentObj};
  if (d->type == ncclProfileColl) {
    e.seq = d->coll.seqNumber; e.func = d->coll.func; e.dtype = d->coll.datatype;
    e.count = d->coll.count; e.nchannels = d->coll.nChannels;
  } else if (d->type == ncclProfileProxyOp) {
    e.pid = d->proxyOp.pid; e.peer = d->proxyOp.peer; e.nsteps = d->proxyOp.nSteps;
    e.chunk = d->proxyOp.chunkSize; e.is_send = d->proxyOp.isSend;
  }
  return start(ctx, eh, &e);
}

static ncclResult_t start_v4(void *ctx, void **eh, ncclProfilerEventDescr_v4_t *d) {
  ev_desc e = {.type = d->type, .parent = d->parentObj};
  if (d->type == ncclProfileColl) {
    e.seq = d->coll.seqNumber; e.func = d->coll.func; e.dtype = d->coll.datatype;
    e.count = d->coll.count; e.nchannels = d->coll.nChannels;
  } else if (d->type == ncclProfileProxyOp) {
    e.pid = d->proxyOp.pid; e.peer = d->proxyOp.peer; e.nsteps = d->proxyOp.nSteps;
    e.chunk = d->proxyOp.chunkSize; e.is_send = d->proxyOp.isSend;
  }
  return start(ctx, eh, &e);
}

/* v6's descriptor has v5's members at v5's offsets (nccl_abi.h pins both); copy-engine
 * collectives get no handle, so their state changes and stops never reach us. */
static ncclResult_t start_v6(void *ctx, void **eh, ncclProfilerEventDescr_v6_t *d) {
  ev_desc e = {.type = d->type, .parent = d->parentObj};
  if (d->type == ncclProfileColl) {
    e.seq = d->coll.seqNumber; e.func = d->coll.func; e.dtype = d->coll.datatype;
    e.count = d->coll.count; e.nchannels = d->coll.nChannels;
  } else if (d->type == ncclProfileProxyOp) {
    e.pid = d->proxyOp.pid; e.peer = d->proxyOp.peer; e.nsteps = d->proxyOp.nSteps;
    e.chunk = d->proxyOp.chunkSize; e.is_send = d->proxyOp.isSend;
  } else if (d->type & (ncclProfileCeColl | ncclProfileCeSync | ncclProfileCeBatch)) {
    *eh = NULL;
    return ncclSuccess;
  }
  return start(ctx, eh, &e);
}

/* Watchdog, on the background thread: re-report collectives in flight for a period or more. */
void c4_profiler_tick(uint64_t now_ns) {
  uint64_t age = (uint64_t)c4_cfg.watchdog_ms * 1000000ull;
  pthread_mutex_lock(&ctx_mu);
  for (prof_ctx *x = ctxs; x; x = x->next) {
    for (int i = 0; i < NCOLL; i++) {
      coll_ev *c = &x->colls[i];
      unsigned g = atomic_load_explicit(&c->gen, memory_order_acquire);
      if (!(g & 1)) continue; /* free, being set up or being released */
      if (atomic_load(&c->t_end) ||
          now_ns < atomic_load_explicit(&c->t_start, memory_order_relaxed) + age)
        continue;
      /* Copy first, then check the slot was not recycled meanwhile (same generation). */
      c4p_coll m;
      build_coll(c, 0, C4P_COLL_INFLIGHT, &m);
      if (atomic_load_explicit(&c->gen, memory_order_acquire) == g && !atomic_load(&c->t_end))
        push_coll(&m);
    }
  }
  pthread_mutex_unlock(&ctx_mu);
}

static ncclResult_t finalize(void *ctx) {
  prof_ctx *c = ctx;
  c4_rt_flush();
  pthread_mutex_lock(&ctx_mu);
  for (prof_ctx **pp = &ctxs; *pp; pp = &(*pp)->next)
    if (*pp == c) { *pp = c->next; break; }
  pthread_mutex_unlock(&ctx_mu);
  free(c);
  return ncclSuccess;
}

C4_EXPORT const ncclProfiler_v6_t ncclProfiler_v6 = {
    .name = "C4-Profiler", .init = init_v5, .startEvent = start_v6, .stopEvent = stop,
    .recordEventState = record, .finalize = finalize};

C4_EXPORT const ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "C4-Profiler", .init = init_v5, .startEvent = start_v5, .stopEvent = stop,
    .recordEventState = record, .finalize = finalize};

C4_EXPORT const ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "C4-Profiler", .init = init_v4, .startEvent = start_v4, .stopEvent = stop,
    .recordEventState = record, .finalize = finalize};
