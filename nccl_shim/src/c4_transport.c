/* c4_transport.c: the C4-Socket transport. Each NCCL connection is K TCP sockets (K = the
 * number of flows the node agent assigned, at least 1), each bound to its assigned source
 * port before connect, so the fabric's ECMP hash puts it on the planned path. Every socket
 * carries, per message, a 24-byte header (total, offset, length) and its share of the bytes,
 * split by the assigned weights read at isend time; so new weights apply from the next
 * message and need no agreement with the receiver.
 *
 * Listening (FORMAT.md "Listening"): every data flow's destination port is the host's fixed
 * port C4_SHIM_PORT, whatever the number of NCCL processes on the host, so that the flows'
 * 5-tuples are the ones the controller plans and probes. The node agent owns that port; it
 * reads each new socket's hello and hands the socket to the process the hello names
 * (SCM_RIGHTS, received in c4_rt.c). Each process also listens on its own ephemeral port: the
 * handle names both, and a sender whose socket the fixed port refuses (no agent) or rejects
 * (verdict "C4NO") connects to that fallback instead, counted in STATS.route_fallbacks.
 * Without an agent the process listens on the fixed port itself when it is free.
 * A 48-byte hello (connection UUID, socket index, the sender's job and communicator ranks)
 * routes each socket to its listen comm, which answers a 4-byte verdict.
 *
 * Progress happens inside test(); every socket is non-blocking; nothing here waits. */
#include "c4_transport.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define NREQ NCCL_NET_MAX_REQUESTS
#define MAX_PENDING_ACCEPT 256
#define ACCEPT_TIMEOUT_NS (30ull * 1000000000ull)
#define VERDICT_TIMEOUT_NS (30ull * 1000000000ull)
#define CONNECT_RETRY_NS (20ull * 1000000ull)
#define CONNECT_MAX_TRIES 200 /* ~4 s of refused connects before we give up */
#define HANDLE_STAGE_OFF C4P_HANDLE_LEN /* the sender's set-up pointer, after the handle */
static_assert(C4P_HANDLE_LEN + 8 <= NCCL_NET_HANDLE_MAXSIZE, "handle fits NCCL's 128 bytes");

typedef struct {
  int fd;
  uint16_t want;  /* the port the agent assigned (0 = any); retries ask for it again */
  uint16_t sport; /* the port actually bound */
  int assigned;   /* sport == want != 0 (not an ephemeral fallback) */
  c4p_addr src, dst; /* where the plan puts this flow: bind to src, connect to dst */
  /* set-up */
  int route; /* 0: the handle's port, 1: its fallback port */
  int connected, hello_sent, verdict_got, tries;
  uint64_t retry_at, verdict_deadline;
  uint8_t hello[C4P_HELLO_LEN], verdict[C4P_VERDICT_LEN];
  /* data */
  uint64_t cur; /* sequence number of the message this socket works on */
  uint8_t hdr[C4P_DATA_HDR_LEN];
  size_t hdr_done, off, len, done;
  int in_msg;
  /* telemetry: written by the progress thread, read by the background thread */
  int inflight; /* chunks handed to the network and not complete (progress thread only) */
  atomic_uint_fast64_t bytes, t_last, net_ns, net_since;
  /* send side: the kernel's network time when the connection opened (tcp_net_us), so the
   * hello and verdict are not counted; UINT64_MAX where the kernel does not keep it */
  uint64_t tcp_base_us;
} c4_sock;

struct c4_comm;
typedef struct {
  int state; /* 0 free, 1 posted, 2 complete */
  struct c4_comm *comm;
  uint64_t seq;
  char *data;
  size_t size, total;
  int socks_done;
  uint64_t t_post;
  size_t cut[C4P_MAX_FLOWS + 1];
} c4_req;

enum { SEND = 0, RECV = 1 };

typedef struct c4_comm {
  int dir;
  int nsocks;
  c4_sock socks[C4P_MAX_FLOWS];
  c4_req reqs[NREQ];
  uint64_t next_seq, done_seq;
  ncclResult_t error;
  atomic_uint weight_ppm[C4P_MAX_FLOWS];
  /* identity and telemetry (read by the background thread) */
  uint64_t comm_id, uuid;
  c4p_addr local, remote;
  uint16_t remote_port, conn_index;
  int32_t peer_job_rank, peer_comm_rank;
  uint32_t version;
  atomic_int peer_rank;
  atomic_uint_fast64_t bytes, msgs, t_first, t_last, pending_since, net_ns, net_since;
  int net_active; /* sockets with a chunk on the network (progress thread only) */
  uint64_t reported_msgs;
  uint64_t reported_net_us; /* send side over TCP: the net_us of the latest record */
  struct c4_comm *next;
  /* connect set-up */
  int stage, ticket, dev, routed_fallback;
  c4p_handle h;
} c4_comm;

typedef struct lcomm {
  uint64_t uuid, comm_id;
  int nsocks, got;
  int fds[C4P_MAX_FLOWS];
  uint16_t conn_index;
  int32_t peer_job_rank, peer_comm_rank;
  struct lcomm *next;
} lcomm;

typedef struct {
  int fd, got;
  uint8_t buf[C4P_HELLO_LEN];
  uint64_t t;
} pending_sock;

typedef struct acceptor {
  c4p_addr addr;
  uint16_t port;
  int fd;
  pending_sock pend[MAX_PENDING_ACCEPT];
  int npend;
  struct acceptor *next;
} acceptor;

/* acc_mu guards the acceptors and the listen comms; it is taken after the agent client's lock
 * (hand-offs arrive from c4_agent_pump), so nothing holding it may pump the agent socket. */
static pthread_mutex_t acc_mu = PTHREAD_MUTEX_INITIALIZER;
static acceptor *acceptors;
static lcomm *lcomms;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static c4_comm *live;
static atomic_uint_fast64_t uuid_counter;

/* conn_index (FORMAT.md "LOOKUP"): this process's connections to one peer job rank in set-up
 * order, or, when either job rank is unknown, to one (local, remote) address pair. */
#define MAX_PAIRS 1024
static struct { int by_rank; int32_t rank; c4p_addr l, r; uint16_t next; } pairs[MAX_PAIRS];
static int npairs;

static uint16_t next_conn_index(const c4p_addr *l, const c4p_addr *r, int32_t dst_rank) {
  int by_rank = c4_cfg.job_rank >= 0 && dst_rank >= 0;
  pthread_mutex_lock(&reg_mu);
  uint16_t idx = 0;
  int i;
  for (i = 0; i < npairs; i++) {
    if (pairs[i].by_rank != by_rank) continue;
    if (by_rank ? pairs[i].rank == dst_rank
                : !memcmp(&pairs[i].l, l, 16) && !memcmp(&pairs[i].r, r, 16))
      break;
  }
  if (i == npairs && npairs < MAX_PAIRS) {
    pairs[i].by_rank = by_rank;
    pairs[i].rank = dst_rank;
    pairs[i].l = *l;
    pairs[i].r = *r;
    pairs[i].next = 0;
    npairs++;
  }
  if (i < npairs) idx = pairs[i].next++;
  pthread_mutex_unlock(&reg_mu);
  return idx;
}

static uint64_t sock_port(int fd, int peer) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if ((peer ? getpeername : getsockname)(fd, (struct sockaddr *)&ss, &sl) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

int c4t_devices(void) { return c4_cfg.ndevs; }

void c4t_props_get(int dev, c4t_props *p) {
  p->name = c4_cfg.dev_name[dev];
  p->pci_path = c4_cfg.dev_pci[dev][0] ? c4_cfg.dev_pci[dev] : NULL;
  p->speed_mbps = c4_cfg.dev_speed_mbps[dev];
  p->guid = (uint64_t)dev;
}

/* ---------------- telemetry: time on the network ----------------
 * A socket is "on the network" while at least one of its chunks has been handed to the
 * kernel and not completed (send: from isend until the slice is written; receive: from the
 * slice's first header byte until its last byte arrived); a connection while any of its
 * sockets is. Overlaps count once (API.md `net_us`). Progress thread only, except the
 * atomics the background thread reads. */
static void net_begin(c4_comm *c, c4_sock *s, uint64_t now) {
  if (s->inflight++ == 0) {
    atomic_store_explicit(&s->net_since, now, memory_order_relaxed);
    if (c->net_active++ == 0) atomic_store_explicit(&c->net_since, now, memory_order_relaxed);
  }
}

static void net_end(c4_comm *c, c4_sock *s, uint64_t now) {
  if (s->inflight <= 0 || --s->inflight > 0) return;
  uint64_t since = atomic_load_explicit(&s->net_since, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->net_ns, now - since, memory_order_relaxed);
  atomic_store_explicit(&s->net_since, 0, memory_order_relaxed);
  if (--c->net_active == 0) {
    since = atomic_load_explicit(&c->net_since, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->net_ns, now - since, memory_order_relaxed);
    atomic_store_explicit(&c->net_since, 0, memory_order_relaxed);
  }
}

/* ---------------- TCP: time until the bytes were acknowledged ----------------
 * A TCP send "completes" when its bytes are in the socket buffer, so post-to-completion time
 * is back-pressure, not the network: a connection queued behind a slow link and one whose
 * receiver stopped reading look alike. The kernel already keeps the figure we want, per
 * socket, in TCP_INFO's "chrono" counters (Linux >= 4.10): tcpi_busy_time is the time the
 * socket had data written and not yet acknowledged (its write or retransmit queue
 * non-empty), of which tcpi_rwnd_limited is the time it was stalled by the receiver's window
 * (the receiving process not reading: waiting on its downstream, not on this path). So the
 * send side's network time is busy - rwnd_limited: time the bytes were on their way and the
 * path, not the receiver, held them (sndbuf-limited time stays in: the path could not drain
 * what the process wrote). Read by the background thread at each CONN snapshot (one
 * getsockopt per socket per C4_WATCHDOG_MS); the data path makes no extra call. The kernel
 * counts in jiffies (1-10 ms) per interval, unbiased over many intervals.
 *
 * The struct is declared here (only the prefix we read), pinned to Linux's UAPI layout
 * (<linux/tcp.h> struct tcp_info; the offsets are ABI and never move); tests/test_units.c
 * checks them against the system header. */
typedef struct {
  uint8_t state, ca_state, retransmits, probes, backoff, options, wscale, flags8;
  uint32_t u32s[24]; /* tcpi_rto .. tcpi_total_retrans */
  uint64_t pacing_rate, max_pacing_rate, bytes_acked, bytes_received;
  uint32_t segs_out, segs_in, notsent_bytes, min_rtt, data_segs_in, data_segs_out;
  uint64_t delivery_rate, busy_time, rwnd_limited, sndbuf_limited;
} c4_tcp_info;
static_assert(offsetof(c4_tcp_info, bytes_acked) == 120, "tcpi_bytes_acked offset (UAPI)");
static_assert(offsetof(c4_tcp_info, delivery_rate) == 160, "tcpi_delivery_rate offset (UAPI)");
static_assert(offsetof(c4_tcp_info, busy_time) == 168, "tcpi_busy_time offset (UAPI)");
static_assert(offsetof(c4_tcp_info, rwnd_limited) == 176, "tcpi_rwnd_limited offset (UAPI)");
static_assert(offsetof(c4_tcp_info, sndbuf_limited) == 184, "tcpi_sndbuf_limited offset (UAPI)");
static_assert(sizeof(c4_tcp_info) == 192, "prefix of struct tcp_info up to tcpi_sndbuf_limited");

/* The socket's network time so far in µs (busy - rwnd_limited), UINT64_MAX when the kernel
 * does not report the chrono counters (short optlen) or the call fails. */
static uint64_t c4_tcp_net_us(int fd) {
  c4_tcp_info ti;
  socklen_t len = sizeof ti;
  memset(&ti, 0, sizeof ti);
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(c4_tcp_info, rwnd_limited) + sizeof ti.rwnd_limited)
    return UINT64_MAX;
  return ti.busy_time > ti.rwnd_limited ? ti.busy_time - ti.rwnd_limited : 0;
}

/* Accumulated plus the interval still open; read the total first so a concurrent close of the
 * interval can only make this reading short, never count an interval twice. */
static uint64_t net_read(atomic_uint_fast64_t *total, atomic_uint_fast64_t *since, uint64_t now) {
  uint64_t t = atomic_load_explicit(total, memory_order_relaxed);
  uint64_t s = atomic_load_explicit(since, memory_order_relaxed);
  return t + (s && now > s ? now - s : 0);
}

/* ---------------- listen / accept ---------------- */

static acceptor *acceptor_get(int dev) {
  const c4p_addr *a = &c4_cfg.dev_addr[dev];
  for (acceptor *x = acceptors; x; x = x->next)
    if (!memcmp(&x->addr, a, sizeof *a)) return x;
  struct sockaddr_storage ss;
  int fd = -1;
  /* With the hand-off the agent holds the fixed port and ours is only the fallback, so it is
   * ephemeral. Without it: the fixed port first; if another process on this address holds it,
   * or it is 0, an ephemeral one (the handle carries whichever we got). */
  for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
    uint16_t port = attempt == 0 && !c4_cfg.handoff ? (uint16_t)c4_cfg.shim_port : 0;
    if (attempt == 0 && port == 0) continue;
    unsigned sl = c4_addr_to_sockaddr(a, port, &ss);
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return NULL;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 4096) != 0) {
      if (attempt == 0)
        c4_log(2, "cannot listen on fixed port %u (%s); using an ephemeral port", port,
               strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) return NULL;
  acceptor *x = calloc(1, sizeof *x);
  if (!x) { close(fd); return NULL; }
  x->addr = *a;
  x->fd = fd;
  x->port = (uint16_t)sock_port(fd, 0);
  x->next = acceptors;
  acceptors = x;
  return x;
}

ncclResult_t c4t_listen(uint64_t comm_id, int dev, void *handle, void **listen_comm) {
  if (dev < 0 || dev >= c4_cfg.ndevs) return ncclInvalidArgument;
  pthread_mutex_lock(&acc_mu);
  acceptor *acc = acceptor_get(dev);
  if (!acc) {
    pthread_mutex_unlock(&acc_mu);
    c4_log(1, "listen failed on device %d", dev);
    return ncclSystemError;
  }
  lcomm *lc = calloc(1, sizeof *lc);
  if (!lc) { pthread_mutex_unlock(&acc_mu); return ncclSystemError; }
  lc->uuid = (c4_now_ns() << 16) ^ ((uint64_t)c4_pid() << 40) ^
             atomic_fetch_add(&uuid_counter, 1) * 0x9e3779b97f4a7c15ull;
  lc->comm_id = comm_id;
  lc->nsocks = -1;
  lc->peer_job_rank = lc->peer_comm_rank = C4P_NO_RANK;
  for (int i = 0; i < C4P_MAX_FLOWS; i++) lc->fds[i] = -1;
  lc->next = lcomms;
  lcomms = lc;
  int via_agent = c4_cfg.handoff && c4_cfg.shim_port;
  c4p_handle h = {.port = via_agent ? (uint16_t)c4_cfg.shim_port : acc->port,
                  .fallback_port = via_agent ? acc->port : 0, .addr = acc->addr,
                  .uuid = lc->uuid, .key = c4_cfg.key, .job_rank = c4_cfg.job_rank,
                  .comm_rank = c4_comm_self(comm_id)};
  pthread_mutex_unlock(&acc_mu);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  c4p_encode_handle(&h, handle);
  *listen_comm = lc;
  return ncclSuccess;
}

static void send_verdict(int fd, const char *v) {
  (void)send(fd, v, C4P_VERDICT_LEN, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Give a socket whose hello we have to the listen comm it names (under acc_mu). The verdict
 * tells the sender whether to keep it; a refused socket is closed. */
static void attach(int fd, const c4p_hello *h) {
  lcomm *lc = NULL;
  if (h->key == c4_cfg.key)
    for (lc = lcomms; lc && lc->uuid != h->uuid; lc = lc->next) {}
  if (!lc || (lc->nsocks >= 0 && lc->nsocks != h->nsocks) || lc->fds[h->sock_index] >= 0) {
    send_verdict(fd, C4P_VERDICT_NO);
    close(fd);
    return;
  }
  /* A fresh socket's send buffer is empty: 4 bytes always fit, and a failure means the
   * sender is already gone. */
  if (send(fd, C4P_VERDICT_OK, C4P_VERDICT_LEN, MSG_DONTWAIT | MSG_NOSIGNAL) != C4P_VERDICT_LEN) {
    close(fd);
    return;
  }
  lc->nsocks = h->nsocks;
  lc->conn_index = h->conn_index;
  lc->peer_job_rank = h->job_rank;
  lc->peer_comm_rank = h->comm_rank;
  lc->fds[h->sock_index] = fd;
  lc->got++;
}

/* A socket the agent accepted on the fixed port and passed to us (c4_rt.c's pump). */
void c4_on_handoff(int fd, const c4p_hello *h) {
  pthread_mutex_lock(&acc_mu);
  attach(fd, h);
  pthread_mutex_unlock(&acc_mu);
}

static void pend_drop(acceptor *acc, int i) {
  close(acc->pend[i].fd);
  acc->pend[i] = acc->pend[--acc->npend];
}

/* Accept what the kernel has queued (as many as we track; the rest wait in the kernel's
 * backlog until a slot frees up), read hellos, and attach complete ones. */
static void acceptor_pump(acceptor *acc) {
  while (acc->npend < MAX_PENDING_ACCEPT) {
    int fd = accept4(acc->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    acc->pend[acc->npend++] = (pending_sock){.fd = fd, .got = 0, .t = c4_now_ns()};
  }
  uint64_t now = c4_now_ns();
  for (int i = 0; i < acc->npend;) {
    pending_sock *p = &acc->pend[i];
    ssize_t n = recv(p->fd, p->buf + p->got, (size_t)(C4P_HELLO_LEN - p->got), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        now - p->t > ACCEPT_TIMEOUT_NS) {
      pend_drop(acc, i);
      continue;
    }
    if (n > 0) p->got += (int)n;
    if (p->got < C4P_HELLO_LEN) { i++; continue; }
    c4p_hello h;
    int fd = p->fd, bad = c4p_decode_hello(p->buf, &h) != 0;
    acc->pend[i] = acc->pend[--acc->npend]; /* p now names the entry moved here */
    if (bad) {
      send_verdict(fd, C4P_VERDICT_NO);
      close(fd);
      continue;
    }
    attach(fd, &h);
  }
}

static c4_comm *comm_new(int dir) {
  c4_comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->dir = dir;
  c->ticket = -1;
  c->peer_job_rank = c->peer_comm_rank = C4P_NO_RANK;
  atomic_init(&c->peer_rank, -1);
  for (int i = 0; i < C4P_MAX_FLOWS; i++) c->socks[i].fd = -1;
  return c;
}

static void comm_register(c4_comm *c) {
  for (int i = 0; i < c->nsocks; i++)
    c->socks[i].tcp_base_us = c->dir == SEND ? c4_tcp_net_us(c->socks[i].fd) : UINT64_MAX;
  pthread_mutex_lock(&reg_mu);
  c->next = live;
  live = c;
  pthread_mutex_unlock(&reg_mu);
}

static void set_sockopts(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

ncclResult_t c4t_accept(void *listen_comm, void **recv_comm) {
  lcomm *lc = listen_comm;
  *recv_comm = NULL;
  c4_agent_pump(); /* sockets the agent handed over for us (before acc_mu: lock order) */
  pthread_mutex_lock(&acc_mu);
  for (acceptor *acc = acceptors; acc; acc = acc->next) acceptor_pump(acc);
  int ready = lc->nsocks > 0 && lc->got == lc->nsocks;
  pthread_mutex_unlock(&acc_mu);
  if (!ready) return ncclSuccess;
  c4_comm *c = comm_new(RECV);
  if (!c) return ncclSystemError;
  c->nsocks = lc->nsocks;
  c->uuid = lc->uuid;
  c->comm_id = lc->comm_id;
  c->conn_index = lc->conn_index;
  c->peer_job_rank = lc->peer_job_rank;
  c->peer_comm_rank = lc->peer_comm_rank;
  c4_comm_learn(lc->comm_id, lc->peer_comm_rank, lc->peer_job_rank);
  for (int i = 0; i < c->nsocks; i++) {
    c->socks[i].fd = lc->fds[i];
    lc->fds[i] = -1;
    set_sockopts(c->socks[i].fd);
    /* Our verdict right after the sender's hello looked like an interactive exchange to TCP,
     * which then delays ACKs hoping to piggyback them: leave that mode for bulk data. */
    int one = 1;
    setsockopt(c->socks[i].fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
    c->socks[i].sport = (uint16_t)sock_port(c->socks[i].fd, 1);
  }
  lc->got = 0;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(c->socks[0].fd, (struct sockaddr *)&ss, &sl) == 0) c4_addr_from_sockaddr(&c->local, &ss);
  sl = sizeof ss;
  if (getpeername(c->socks[0].fd, (struct sockaddr *)&ss, &sl) == 0) c4_addr_from_sockaddr(&c->remote, &ss);
  c->remote_port = c->socks[0].sport;
  comm_register(c);
  *recv_comm = c;
  return ncclSuccess;
}

ncclResult_t c4t_close_listen(void *listen_comm) {
  lcomm *lc = listen_comm;
  if (!lc) return ncclSuccess;
  pthread_mutex_lock(&acc_mu);
  for (lcomm **pp = &lcomms; *pp; pp = &(*pp)->next)
    if (*pp == lc) { *pp = lc->next; break; }
  pthread_mutex_unlock(&acc_mu);
  for (int i = 0; i < C4P_MAX_FLOWS; i++)
    if (lc->fds[i] >= 0) close(lc->fds[i]);
  free(lc);
  return ncclSuccess;
}

/* ---------------- connect ---------------- */

static uint16_t route_port(const c4_comm *c, const c4_sock *s) {
  return s->route ? c->h.fallback_port : c->h.port;
}

/* The fallback port is the listener's own, bound to the handle's address only. */
static const c4p_addr *route_addr(const c4_comm *c, const c4_sock *s) {
  return s->route ? &c->h.addr : &s->dst;
}

/* 0 = connecting, 1 = refused (retry later), -1 = failed. */
static int open_bound(c4_comm *c, c4_sock *s) {
  struct sockaddr_storage me, peer;
  for (int attempt = 0; attempt < 2; attempt++) {
    uint16_t want = attempt == 0 ? s->want : 0;
    if (attempt == 1 && s->want == 0) break;
    unsigned ml = c4_addr_to_sockaddr(&s->src, want, &me);
    int fd = socket(me.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    /* SO_REUSEADDR lets an assigned port be bound again while an old connection on it sits in
     * TIME_WAIT; connect() then fails with EADDRNOTAVAIL only for the exact same 4-tuple. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    set_sockopts(fd);
    if (bind(fd, (struct sockaddr *)&me, ml) != 0) {
      close(fd);
      if (want) { atomic_fetch_add(&c4_stat.bind_fallbacks, 1); continue; }
      return -1;
    }
    unsigned pl = c4_addr_to_sockaddr(route_addr(c, s), route_port(c, s), &peer);
    if (connect(fd, (struct sockaddr *)&peer, pl) != 0 && errno != EINPROGRESS) {
      int e = errno;
      close(fd);
      if (want && (e == EADDRNOTAVAIL || e == EADDRINUSE)) {
        atomic_fetch_add(&c4_stat.bind_fallbacks, 1);
        continue;
      }
      return e == ECONNREFUSED ? 1 : -1;
    }
    s->fd = fd;
    s->sport = (uint16_t)sock_port(fd, 0);
    s->assigned = want != 0 && s->sport == want;
    return 0;
  }
  return -1;
}

static int is_zero(const c4p_addr *a) {
  static const c4p_addr z;
  return !memcmp(a, &z, sizeof z);
}

static int is_local_dev(const c4p_addr *a) {
  for (int d = 0; d < c4_cfg.ndevs; d++)
    if (!memcmp(&c4_cfg.dev_addr[d], a, sizeof *a)) return 1;
  return 0;
}

/* Where each socket goes. A planned source address is used when it is one of our devices
 * (of the same family); a planned destination only when the fixed port answers on every
 * address of the receiving host (the agent's wildcard listener, i.e. the handle names a
 * fallback), since a process's own listener is bound to the handle's address alone. */
static void apply_assignment(c4_comm *c, const c4p_assign *a, uint16_t *ports) {
  if (a && a->status == C4P_OK && a->nflows >= 1) {
    c->nsocks = a->nflows;
    c->version = a->version;
    for (int i = 0; i < c->nsocks; i++) {
      const c4p_flow *f = &a->flows[i];
      c4_sock *s = &c->socks[i];
      ports[i] = f->sport;
      atomic_store(&c->weight_ppm[i], f->weight_ppm);
      s->src = !is_zero(&f->src) && is_local_dev(&f->src) &&
                       c4_addr_is_v4(&f->src) == c4_addr_is_v4(&c->local) ? f->src : c->local;
      s->dst = !is_zero(&f->dst) && c->h.fallback_port &&
                       c4_addr_is_v4(&f->dst) == c4_addr_is_v4(&c->h.addr) ? f->dst : c->h.addr;
    }
  } else {
    c->nsocks = 1;
    ports[0] = 0;
    atomic_store(&c->weight_ppm[0], 1000000u);
    c->socks[0].src = c->local;
    c->socks[0].dst = c->h.addr;
  }
}

static void sock_reset_setup(c4_sock *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->connected = s->hello_sent = s->verdict_got = 0;
  s->retry_at = 0;
}

static ncclResult_t start_sockets(c4_comm *c, const uint16_t *ports) {
  for (int i = 0; i < c->nsocks; i++) {
    c4_sock *s = &c->socks[i];
    s->want = s->sport = ports[i];
    c4p_hello hello = {.sock_index = (uint16_t)i, .nsocks = (uint16_t)c->nsocks,
                       .conn_index = c->conn_index, .uuid = c->h.uuid, .key = c->h.key,
                       .job_rank = c4_cfg.job_rank, .comm_rank = c4_comm_self(c->comm_id),
                       .comm_id = c->comm_id};
    c4p_encode_hello(&hello, s->hello);
    int r = open_bound(c, s);
    if (r < 0) return ncclSystemError;
    if (r == 1) { s->fd = -1; s->retry_at = 0; s->tries = 0; } /* refused: handled below */
  }
  return ncclSuccess;
}

/* The fixed port refused or rejected this socket: go to the listener's own port, if it has
 * one. 1 = switched, 0 = no fallback left. */
static int take_fallback(c4_comm *c, c4_sock *s, const char *why) {
  if (s->route || !c->h.fallback_port) return 0;
  c4_log(3, "port %u %s; connecting to the listener's own port %u", c->h.port, why,
         c->h.fallback_port);
  sock_reset_setup(s);
  s->route = 1;
  s->tries = 0;
  if (!c->routed_fallback) {
    c->routed_fallback = 1;
    atomic_fetch_add(&c4_stat.route_fallbacks, 1);
  }
  return 1;
}

/* One pass over the sockets: finish connects, send hellos, read verdicts.
 * 1 = all done, 0 = not yet (or *err set). */
static int progress_connect(c4_comm *c, ncclResult_t *err) {
  int all = 1;
  uint64_t now = c4_now_ns();
  for (int i = 0; i < c->nsocks; i++) {
    c4_sock *s = &c->socks[i];
    if (s->verdict_got == C4P_VERDICT_LEN) continue;
    all = 0;
    if (s->fd < 0) {
      if (now < s->retry_at) continue;
      int r = open_bound(c, s);
      if (r == 1 && take_fallback(c, s, "refused the connection")) r = open_bound(c, s);
      if (r < 0 || (r == 1 && ++s->tries > CONNECT_MAX_TRIES)) { *err = ncclSystemError; return 0; }
      if (r == 1) { s->fd = -1; s->retry_at = now + CONNECT_RETRY_NS; continue; }
    }
    if (!s->connected) {
      struct pollfd pf = {.fd = s->fd, .events = POLLOUT};
      if (poll(&pf, 1, 0) <= 0) continue;
      int e = 0;
      socklen_t el = sizeof e;
      getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &e, &el);
      if (e) {
        if (take_fallback(c, s, strerror(e))) continue;
        sock_reset_setup(s);
        s->retry_at = now + CONNECT_RETRY_NS;
        if (++s->tries > CONNECT_MAX_TRIES) { *err = ncclSystemError; return 0; }
        continue;
      }
      s->connected = 1;
    }
    if (s->hello_sent < C4P_HELLO_LEN) {
      ssize_t n = send(s->fd, s->hello + s->hello_sent, (size_t)(C4P_HELLO_LEN - s->hello_sent),
                       MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) s->hello_sent += (int)n;
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        if (take_fallback(c, s, "closed during the hello")) continue;
        *err = ncclSystemError;
        return 0;
      }
      if (s->hello_sent < C4P_HELLO_LEN) continue;
      s->verdict_deadline = now + VERDICT_TIMEOUT_NS;
    }
    ssize_t n = recv(s->fd, s->verdict + s->verdict_got, (size_t)(C4P_VERDICT_LEN - s->verdict_got),
                     MSG_DONTWAIT);
    int bad = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
              (n < 0 && now > s->verdict_deadline);
    if (n > 0) s->verdict_got += (int)n;
    if (s->verdict_got == C4P_VERDICT_LEN && memcmp(s->verdict, C4P_VERDICT_OK, C4P_VERDICT_LEN))
      bad = 1;
    if (bad) {
      if (take_fallback(c, s, n == 0 ? "closed without a verdict" : "rejected the hello")) continue;
      c4_log(1, "connect: the listener refused socket %d (verdict %.4s)", i,
             s->verdict_got == C4P_VERDICT_LEN ? (const char *)s->verdict : "none");
      *err = ncclSystemError;
      return 0;
    }
  }
  return all;
}

static void comm_free(c4_comm *c) {
  for (int i = 0; i < C4P_MAX_FLOWS; i++)
    if (c->socks[i].fd >= 0) close(c->socks[i].fd);
  free(c);
}

ncclResult_t c4t_connect(uint64_t comm_id, int dev, void *handle, void **send_comm) {
  uint8_t *hb = handle;
  *send_comm = NULL;
  uint64_t stage;
  memcpy(&stage, hb + HANDLE_STAGE_OFF, sizeof stage);
  c4_comm *c = (c4_comm *)(uintptr_t)stage;
  if (!c) {
    c4p_handle h;
    if (c4p_decode_handle(hb, &h) != 0 || dev < 0 || dev >= c4_cfg.ndevs) return ncclInvalidArgument;
    c = comm_new(SEND);
    if (!c) return ncclSystemError;
    c->h = h;
    c->comm_id = comm_id;
    c->dev = dev;
    c->uuid = h.uuid;
    c->local = c4_cfg.dev_addr[dev];
    c->remote = h.addr;
    c->remote_port = h.port;
    c->peer_job_rank = h.job_rank;
    c->peer_comm_rank = h.comm_rank;
    c4_comm_learn(comm_id, h.comm_rank, h.job_rank);
    c->conn_index = next_conn_index(&c->local, &c->remote, h.job_rank);
    c4p_lookup key = {.comm_id = comm_id, .local = c->local, .remote = c->remote,
                      .remote_port = h.port, .conn_index = c->conn_index,
                      .kind = C4P_KIND_TCP, .max_flows = C4P_MAX_FLOWS, .dst_rank = h.job_rank};
    c->ticket = c4_lookup_start(&key);
    c->stage = 1;
    stage = (uint64_t)(uintptr_t)c;
    memcpy(hb + HANDLE_STAGE_OFF, &stage, sizeof stage);
  }
  ncclResult_t err = ncclSuccess;
  if (c->stage == 1) {
    c4p_assign a;
    uint16_t ports[C4P_MAX_FLOWS];
    if (c->ticket >= 0) {
      if (!c4_lookup_poll(c->ticket, &a)) return ncclSuccess; /* NCCL calls us again */
      c->ticket = -1;
      apply_assignment(c, &a, ports);
    } else {
      apply_assignment(c, NULL, ports); /* agent absent: default port, no waiting */
    }
    err = start_sockets(c, ports);
    c->stage = 2;
  }
  if (err == ncclSuccess && progress_connect(c, &err)) {
    memset(hb + HANDLE_STAGE_OFF, 0, 8);
    comm_register(c);
    *send_comm = c;
    return ncclSuccess;
  }
  if (err != ncclSuccess) {
    memset(hb + HANDLE_STAGE_OFF, 0, 8);
    c4_log(1, "connect failed");
    comm_free(c);
    return err;
  }
  return ncclSuccess;
}

/* ---------------- data path ---------------- */

static void complete_req(c4_comm *c, c4_req *r, uint64_t now) {
  r->state = 2;
  c->done_seq++;
  if (!c4_cfg.telemetry) return;
  size_t n = c->dir == SEND ? r->size : r->total;
  atomic_fetch_add_explicit(&c->bytes, n, memory_order_relaxed);
  atomic_fetch_add_explicit(&c->msgs, 1, memory_order_relaxed);
  if (!atomic_load_explicit(&c->t_first, memory_order_relaxed))
    atomic_store_explicit(&c->t_first, r->t_post, memory_order_relaxed);
  atomic_store_explicit(&c->t_last, now, memory_order_relaxed);
  uint64_t next = c->done_seq < c->next_seq ? c->reqs[c->done_seq % NREQ].t_post : 0;
  atomic_store_explicit(&c->pending_since, next, memory_order_relaxed);
}

static int io_again(void) { return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR; }

static void chunk_done(c4_comm *c, c4_sock *s, c4_req *r) {
  uint64_t now = c4_cfg.telemetry ? c4_now_ns() : 0;
  atomic_fetch_add_explicit(&s->bytes, s->len, memory_order_relaxed);
  if (c4_cfg.telemetry) {
    atomic_store_explicit(&s->t_last, now, memory_order_relaxed);
    net_end(c, s, now);
  }
  s->in_msg = 0;
  s->hdr_done = 0;
  s->cur++;
  if (++r->socks_done == c->nsocks) complete_req(c, r, now);
}

static void progress_send_sock(c4_comm *c, c4_sock *s, int i) {
  while (s->cur < c->next_seq && c->error == ncclSuccess) {
    c4_req *r = &c->reqs[s->cur % NREQ];
    if (!s->in_msg) {
      s->off = r->cut[i];
      s->len = r->cut[i + 1] - r->cut[i];
      s->done = 0;
      s->hdr_done = 0;
      c4p_encode_data_hdr(r->size, s->off, s->len, s->hdr);
      s->in_msg = 1;
    }
    struct iovec iov[2];
    int n = 0;
    if (s->hdr_done < C4P_DATA_HDR_LEN) iov[n++] = (struct iovec){s->hdr + s->hdr_done, C4P_DATA_HDR_LEN - s->hdr_done};
    if (s->done < s->len) iov[n++] = (struct iovec){r->data + s->off + s->done, s->len - s->done};
    if (n) {
      struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
      ssize_t k = sendmsg(s->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k < 0) {
        if (io_again()) return;
        c->error = ncclRemoteError;
        return;
      }
      size_t hk = C4P_DATA_HDR_LEN - s->hdr_done;
      if ((size_t)k < hk) hk = (size_t)k;
      s->hdr_done += hk;
      s->done += (size_t)k - hk;
      if (s->hdr_done < C4P_DATA_HDR_LEN || s->done < s->len) return; /* socket buffer full */
    }
    chunk_done(c, s, r);
  }
}

static void progress_recv_sock(c4_comm *c, c4_sock *s) {
  while (s->cur < c->next_seq && c->error == ncclSuccess) {
    c4_req *r = &c->reqs[s->cur % NREQ];
    if (s->hdr_done < C4P_DATA_HDR_LEN) {
      ssize_t k = recv(s->fd, s->hdr + s->hdr_done, C4P_DATA_HDR_LEN - s->hdr_done, MSG_DONTWAIT);
      if (k == 0) { c->error = ncclRemoteError; return; } /* peer closed mid-stream */
      if (k < 0) {
        if (!io_again()) c->error = ncclRemoteError;
        return;
      }
      if (s->hdr_done == 0 && c4_cfg.telemetry) net_begin(c, s, c4_now_ns()); /* slice arriving */
      s->hdr_done += (size_t)k;
      if (s->hdr_done < C4P_DATA_HDR_LEN) return;
      uint64_t total, off, len;
      c4p_decode_data_hdr(s->hdr, &total, &off, &len);
      /* The sender's message must fit the posted buffer (NCCL guarantees it; a violation
       * means a corrupted stream, which we report rather than write out of bounds). */
      if (total > r->size || off > total || len > total - off ||
          (r->socks_done > 0 && total != r->total)) {
        c4_log(1, "protocol error: message %llu bytes into a %zu-byte buffer",
               (unsigned long long)total, r->size);
        c->error = ncclInternalError;
        return;
      }
      r->total = total;
      s->off = off;
      s->len = len;
      s->done = 0;
    }
    while (s->done < s->len) {
      ssize_t k = recv(s->fd, r->data + s->off + s->done, s->len - s->done, MSG_DONTWAIT);
      if (k == 0) { c->error = ncclRemoteError; return; }
      if (k < 0) {
        if (!io_again()) c->error = ncclRemoteError;
        return;
      }
      s->done += (size_t)k;
    }
    chunk_done(c, s, r);
  }
}

static void progress(c4_comm *c) {
  for (int i = 0; i < c->nsocks; i++) {
    if (c->dir == SEND) progress_send_sock(c, &c->socks[i], i);
    else progress_recv_sock(c, &c->socks[i]);
  }
}

static c4_req *post(c4_comm *c, void *data, size_t size) {
  c4_req *r = &c->reqs[c->next_seq % NREQ];
  if (r->state != 0) return NULL; /* 32 in flight: NCCL retries later */
  r->state = 1;
  r->comm = c;
  r->seq = c->next_seq;
  r->data = data;
  r->size = size;
  r->total = 0;
  r->socks_done = 0;
  r->t_post = 0;
  if (c4_cfg.telemetry) {
    r->t_post = c4_now_ns();
    if (c->done_seq == c->next_seq)
      atomic_store_explicit(&c->pending_since, r->t_post, memory_order_relaxed);
  }
  return r;
}

ncclResult_t c4t_isend(void *send_comm, void *data, size_t size, int tag, void **request) {
  c4_comm *c = send_comm;
  *request = NULL;
  if (c->error) return c->error;
  c4_req *r = post(c, data, size);
  if (!r) return ncclSuccess;
  /* Split by the weights as they are now; a concurrent update may mix old and new entries,
   * which only skews this one message's split (offsets are normalised by their sum). */
  uint64_t w[C4P_MAX_FLOWS], sum = 0;
  for (int i = 0; i < c->nsocks; i++) {
    w[i] = atomic_load_explicit(&c->weight_ppm[i], memory_order_relaxed);
    sum += w[i];
  }
  uint64_t cum = 0;
  r->cut[0] = 0;
  for (int i = 0; i < c->nsocks; i++) {
    cum += sum ? w[i] : 1;
    uint64_t den = sum ? sum : (uint64_t)c->nsocks;
    r->cut[i + 1] = (size_t)((unsigned __int128)size * cum / den);
  }
  r->cut[c->nsocks] = size;
  /* Every socket carries a slice (at least its header) of every message: all are handed to
   * the network now. */
  if (c4_cfg.telemetry)
    for (int i = 0; i < c->nsocks; i++) net_begin(c, &c->socks[i], r->t_post);
  if (atomic_load_explicit(&c->peer_rank, memory_order_relaxed) != tag)
    atomic_store_explicit(&c->peer_rank, tag, memory_order_relaxed);
  c->next_seq++;
  progress(c);
  *request = r;
  return ncclSuccess;
}

ncclResult_t c4t_irecv(void *recv_comm, int n, void **data, const size_t *sizes,
                       const int *tags, void **request) {
  c4_comm *c = recv_comm;
  *request = NULL;
  if (n != 1) return ncclInternalError; /* maxRecvs is 1 */
  if (c->error) return c->error;
  c4_req *r = post(c, data[0], sizes[0]);
  if (!r) return ncclSuccess;
  if (tags && atomic_load_explicit(&c->peer_rank, memory_order_relaxed) != tags[0])
    atomic_store_explicit(&c->peer_rank, tags[0], memory_order_relaxed);
  c->next_seq++;
  progress(c);
  *request = r;
  return ncclSuccess;
}

ncclResult_t c4t_test(void *request, int *done, size_t *size) {
  c4_req *r = request;
  c4_comm *c = r->comm;
  *done = 0;
  if (r->state == 1) progress(c);
  if (r->state == 2) {
    *done = 1;
    if (size) *size = c->dir == SEND ? r->size : r->total;
    r->state = 0;
    return ncclSuccess;
  }
  return c->error;
}

/* ---------------- telemetry and live weight updates ---------------- */

/* Send side over TCP: each socket's time until acknowledged (c4_tcp_net_us) since the
 * connection opened, and the connection's: its busiest socket's (a lower bound on "any socket
 * on the network", exact for one; its sockets carry slices of the same messages at once).
 * 0 where the kernel does not tell (then: post to completion, as elsewhere). */
static int tcp_net(c4_comm *c, uint64_t *per_sock, uint64_t *conn) {
  if (c->dir != SEND || c->nsocks <= 0) return 0;
  *conn = 0;
  for (int i = 0; i < c->nsocks; i++) {
    uint64_t v = c->socks[i].tcp_base_us == UINT64_MAX ? UINT64_MAX : c4_tcp_net_us(c->socks[i].fd);
    if (v == UINT64_MAX) return 0;
    per_sock[i] = v > c->socks[i].tcp_base_us ? v - c->socks[i].tcp_base_us : 0;
    /* The kernel counts whole jiffies per interval, so a socket whose few transfers each fit
     * inside one may read 0: a socket that carried bytes was on the network, at least 1 µs. */
    if (!per_sock[i] && atomic_load_explicit(&c->socks[i].bytes, memory_order_relaxed))
      per_sock[i] = 1;
    if (per_sock[i] > *conn) *conn = per_sock[i];
  }
  return 1;
}

static void snapshot(c4_comm *c, uint32_t flags) {
  uint64_t now = c4_now_ns();
  c4p_conn m = {
      .comm_id = c->comm_id, .local = c->local, .remote = c->remote,
      .remote_port = c->remote_port, .conn_index = c->conn_index,
      .dir = c->dir == SEND ? C4P_SEND : C4P_RECV, .nsocks = (uint8_t)c->nsocks,
      .peer_rank = atomic_load_explicit(&c->peer_rank, memory_order_relaxed),
      .pid = c4_pid(), .flags = flags | C4P_CONN_NET,
      .peer_job_rank = c->peer_job_rank, .job_rank = c4_cfg.job_rank,
      .peer_comm_rank = c->peer_comm_rank,
      .bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed),
      .msgs = atomic_load_explicit(&c->msgs, memory_order_relaxed),
      .net_us = net_read(&c->net_ns, &c->net_since, now) / 1000u};
  uint64_t tf = atomic_load_explicit(&c->t_first, memory_order_relaxed);
  uint64_t tl = atomic_load_explicit(&c->t_last, memory_order_relaxed);
  uint64_t tp = atomic_load_explicit(&c->pending_since, memory_order_relaxed);
  m.t_first_us = tf ? c4_mono_to_real_us(tf) : 0;
  m.t_last_us = tl ? c4_mono_to_real_us(tl) : 0;
  m.pending_since_us = tp ? c4_mono_to_real_us(tp) : 0;
  uint64_t tcp_us[C4P_MAX_FLOWS], conn_tcp = 0;
  int acked = tcp_net(c, tcp_us, &conn_tcp);
  if (acked) m.net_us = conn_tcp;
  for (int i = 0; i < c->nsocks; i++) {
    c4_sock *s = &c->socks[i];
    uint64_t st = atomic_load_explicit(&s->t_last, memory_order_relaxed);
    m.socks[i] = (c4p_sock){.sport = s->sport, .weight_ppm = atomic_load(&c->weight_ppm[i]),
                            .bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed),
                            .t_last_us = st ? c4_mono_to_real_us(st) : 0,
                            .net_us = acked ? tcp_us[i]
                                            : net_read(&s->net_ns, &s->net_since, now) / 1000u};
  }
  uint8_t buf[C4P_MAX_DGRAM];
  size_t n = c4p_encode_conn(&m, buf, sizeof buf);
  if (n) c4_emit(buf, n);
  c->reported_msgs = m.msgs;
  c->reported_net_us = m.net_us;
}

static void refresh_key(const c4_comm *c, c4p_lookup *key) {
  *key = (c4p_lookup){.req_id = 0, .comm_id = c->comm_id, .local = c->local,
                      .remote = c->remote, .remote_port = c->remote_port,
                      .conn_index = c->conn_index, .kind = C4P_KIND_TCP,
                      .max_flows = C4P_MAX_FLOWS, .version = c->version,
                      .dst_rank = c->peer_job_rank};
  c4_lookup_identity(key);
}

void c4_transport_tick(uint64_t now_ns, int mode) {
  (void)now_ns;
  pthread_mutex_lock(&reg_mu);
  for (c4_comm *c = live; c; c = c->next) {
    if (mode & 1) {
      /* Report connections that moved bytes or are stuck with work pending, and, over TCP,
       * send connections whose bytes are still unacknowledged: every send completed into the
       * socket buffer, but the network time keeps growing (a dead path under a stalled ring,
       * where nothing is pending: the stuck-connection signal of sockets). */
      uint64_t per[C4P_MAX_FLOWS], net = 0;
      if (atomic_load_explicit(&c->msgs, memory_order_relaxed) != c->reported_msgs ||
          atomic_load_explicit(&c->pending_since, memory_order_relaxed) ||
          (tcp_net(c, per, &net) && net / 1000u != c->reported_net_us / 1000u))
        snapshot(c, 0);
    }
    if ((mode & 2) && c->dir == SEND) {
      c4p_lookup key;
      refresh_key(c, &key);
      uint8_t buf[C4P_MAX_DGRAM];
      size_t n = c4p_encode_lookup(&key, buf, sizeof buf);
      (void)c4_agent_send(buf, n);
    }
  }
  pthread_mutex_unlock(&reg_mu);
}

/* An assignment for a live connection: new weights take effect from the next message when
 * the flows are the same sockets (same count and ports); new ports or a new flow count can
 * only apply to the next connection, which will look them up afresh. */
void c4_on_assign_update(const c4p_assign *a) {
  pthread_mutex_lock(&reg_mu);
  for (c4_comm *c = live; c; c = c->next) {
    if (c->dir != SEND || c->comm_id != a->comm_id || c->conn_index != a->conn_index ||
        memcmp(&c->local, &a->local, 16) || memcmp(&c->remote, &a->remote, 16) ||
        a->dst_rank != c->peer_job_rank)
      continue;
    if (a->nflows != c->nsocks) continue;
    int same = 1;
    for (int i = 0; i < c->nsocks; i++)
      if (c->socks[i].assigned && a->flows[i].sport != c->socks[i].sport) same = 0;
    if (!same) continue;
    for (int i = 0; i < c->nsocks; i++)
      atomic_store_explicit(&c->weight_ppm[i], a->flows[i].weight_ppm, memory_order_relaxed);
    c->version = a->version;
  }
  pthread_mutex_unlock(&reg_mu);
}

static ncclResult_t close_comm(c4_comm *c) {
  if (!c) return ncclSuccess;
  pthread_mutex_lock(&reg_mu);
  for (c4_comm **pp = &live; *pp; pp = &(*pp)->next)
    if (*pp == c) { *pp = c->next; break; }
  if (c4_cfg.telemetry) snapshot(c, C4P_CONN_CLOSED);
  pthread_mutex_unlock(&reg_mu);
  comm_free(c);
  return ncclSuccess;
}

ncclResult_t c4t_close_send(void *send_comm) { return close_comm(send_comm); }
ncclResult_t c4t_close_recv(void *recv_comm) { return close_comm(recv_comm); }
