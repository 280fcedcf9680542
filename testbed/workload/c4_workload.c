/* c4_workload.c: one rank of an NCCL-like job, driving a net plugin (libnccl-net-c4.so) and its
 * profiler exactly as NCCL's proxy does, so the plugin's own code produces the telemetry.
 *
 * Physics (what makes it NCCL-like, and what the diagnosis work must cope with):
 * - Loading: dlopen(RTLD_NOW|RTLD_LOCAL) of $NCCL_NET_PLUGIN, ncclNetPlugin_v12 .. _v8 newest
 *   first (nccl_shim/tests/netdrv.c); the profiler from $NCCL_PROFILER_PLUGIN or, as NCCL >=
 *   2.28 does, from the net plugin library, newest version this build declares first (v5, v4).
 * - Connections: one per (peer, channel, direction), channel c on the plugin's device
 *   c % ndevices (several NIC ports: $C4_SHIM_ADDR lists them), set up on a service thread (listen,
 *   handle to the sender through the bootstrap, connect/accept retried with the same handle),
 *   channel by channel, so the shim's connection index is the channel. The bootstrap is a
 *   rendezvous directory (handles and a start barrier as files).
 * - Data: on a separate proxy thread. Each connection moves a message as chunks through
 *   NCCL_STEPS (8) slot buffers: at most 8 chunks posted and not completed per connection;
 *   a receive slot is freed only once its chunk was consumed (reduced, copied, forwarded), and
 *   forwarding needs a free send slot, so back-pressure travels upstream.
 * - Ring all-reduce: per channel, the data in nranks slices; reduce-scatter (nranks-1 steps)
 *   then all-gather (nranks-1 steps); chunk q of step k is sent only after chunk q of step k-1
 *   arrived (forward only after arrival), so one slow connection paces the whole ring.
 *   Integers are summed (wrapping), so the result is checked exactly on every rank.
 * - All-to-all and pairs: grouped sends and receives, uncoupled, as nccl-tests does them.
 * - Profiler: Coll (all-reduce) or P2p (send/recv) start and stop on the application thread
 *   ("enqueued"); ProxyOp per connection with nSteps/chunkSize, ProxyStep per chunk with its
 *   states (send: GPU wait, then network wait with transSize; receive: network wait, then GPU
 *   wait with the received size) and KernelCh per channel, on the proxy thread; only event
 *   types the plugin switched on in the activation mask are emitted.
 *
 * Fault knobs (per rank): --late-ms (enter each collective late: slow compute), --hang-at
 * (stop entering at that iteration: a non-communication hang). Every wait is bounded by
 * --timeout-s. Output: JSON lines on stdout (ready, one per iteration, done). Exit codes:
 * 0 ok, 2 usage, 3 hung on purpose (--hang-at), 4 timeout, 5 data mismatch, 6 plugin error. */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "netdrv.h"

#define STEPS 8 /* NCCL_STEPS: slot buffers per connection */
#define MAX_STREAMS 256

enum { PAT_RING, PAT_ALLTOALL, PAT_PAIRS };

typedef struct {
  int rank, nranks, pattern, channels, iters, warmup, verify_all;
  size_t bytes, chunk;
  double late_ms, compute_ms, timeout_s;
  int late_from, hang_at;
  const char *rdv, *plugin, *job;
  uint64_t comm_id;
  int pair_src[MAX_STREAMS], pair_dst[MAX_STREAMS], npairs;
} opts_t;

static opts_t O;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static uint64_t real_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}
static void sleep_ms(double ms) {
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (double)(long)(ms / 1000) * 1000) * 1e6)};
  nanosleep(&ts, NULL);
}

static void die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "c4-workload rank %d: ", O.rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stdout);
  _exit(code);
}
#define NCCLOK(call)                                                                           \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    if (r_ != ncclSuccess) die(6, "%s returned %d (line %d)", #call, r_, __LINE__);            \
  } while (0)

/* ---------------- profiler: NCCL's side of the ABI ---------------- */
typedef struct {
  int version; /* 0 = none */
  void *tab, *ctx;
  int mask;
} prof_t;
static prof_t P;

static void prof_load(void *net_dl) {
  const char *path = getenv("NCCL_PROFILER_PLUGIN");
  void *dl = net_dl;
  if (path && *path && strcmp(path, "none") != 0) {
    dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) die(6, "dlopen %s: %s", path, dlerror());
  } else if (path && strcmp(path, "none") == 0) {
    return;
  }
  /* Newest first among the versions this build declares (nccl_abi.h). */
  static const int versions[] = {5, 4};
  for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclProfiler_v%d", versions[i]);
    void *t = dlsym(dl, sym);
    if (t) { P.version = versions[i]; P.tab = t; return; }
  }
}

static void prof_init(void) {
  if (!P.version) return;
  ncclResult_t r;
  char name[64];
  snprintf(name, sizeof name, "%s", O.job ? O.job : "c4-workload");
  if (P.version == 5)
    r = ((ncclProfiler_v5_t *)P.tab)->init(&P.ctx, O.comm_id, &P.mask, name, O.nranks, O.nranks, O.rank, NULL);
  else
    r = ((ncclProfiler_v4_t *)P.tab)->init(&P.ctx, &P.mask, name, O.comm_id, O.nranks, O.nranks, O.rank, NULL);
  if (r != ncclSuccess) P.version = 0; /* NCCL disables a profiler whose init fails */
}

static int prof_on(int type) { return P.version && (__atomic_load_n(&P.mask, __ATOMIC_RELAXED) & type); }

typedef ncclProfilerEventDescr_v5_t D5;
/* The v4 and v5 descriptors agree from offset 8 on up to coll.proto (nccl_abi.h pins it); only
 * the type field's width differs, so one v5 descriptor is filled and converted for v4. */
static void *pstart(D5 *d) {
  void *eh = NULL;
  if (!prof_on((int)d->type)) return NULL;
  if (P.version == 5) {
    ((ncclProfiler_v5_t *)P.tab)->startEvent(P.ctx, &eh, d);
  } else {
    ncclProfilerEventDescr_v4_t d4;
    memcpy(&d4, d, sizeof d4);
    d4.type = (uint8_t)d->type;
    ((ncclProfiler_v4_t *)P.tab)->startEvent(P.ctx, &eh, &d4);
  }
  return eh;
}
static void pstop(void *eh) {
  if (eh) ((ncclProfiler_v5_t *)P.tab)->stopEvent(eh);
}
static void precord(void *eh, int state, size_t trans) {
  if (!eh) return;
  ncclProfilerEventStateArgs_t a = {.proxyStep = {trans}};
  ((ncclProfiler_v5_t *)P.tab)->recordEventState(eh, state, &a);
}

/* ---------------- data patterns (exactly checkable) ---------------- */
static uint32_t val(int rank, int iter, size_t j) {
  uint32_t x = (uint32_t)rank * 2654435761u ^ (uint32_t)j * 40503u ^ (uint32_t)iter * 2246822519u;
  return x ^ (x >> 15);
}
/* All-to-all / pairs: the block rank `src` sends to `dst`. */
static uint32_t pval(int src, int dst, int iter, size_t j) { return val(src * 4099 + dst, iter, j); }

/* ---------------- connections ---------------- */
typedef struct {
  int peer, channel, is_send;
  size_t base; /* byte offset of this peer's block in the input (send) or output (receive) */
  void *comm, *mh;
  void *parent_ev; /* the Coll or P2p event this connection's ProxyOps belong to */
  uint8_t *slab; /* STEPS slots of O.chunk bytes */
  /* per collective */
  int nchunks;
  size_t *len;  /* chunk lengths */
  size_t *off;  /* chunk offset in the stream's data region (pattern-specific meaning) */
  int staged, posted, done, consumed; /* counters over chunk indices, each in order */
  int arrived[STEPS];                 /* recv: slot holds an arrived, unconsumed chunk */
  void *req[STEPS];
  void *op_ev, *step_ev[STEPS];
  size_t got[STEPS];
} stream_t;

static net_t NET;
static stream_t S[MAX_STREAMS];
static int NS;
static int NDEV = 1; /* the plugin's devices (NIC ports); channel c uses device c % NDEV, as
                      * NCCL spreads channels over a node's NICs */

static stream_t *add_stream(int peer, int channel, int is_send) {
  if (NS == MAX_STREAMS) die(2, "too many connections");
  stream_t *s = &S[NS++];
  memset(s, 0, sizeof *s);
  s->peer = peer;
  s->channel = channel;
  s->is_send = is_send;
  return s;
}

static void write_file(const char *path, const void *data, size_t n) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s.tmp%d", path, getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0 || rename(tmp, path) != 0)
    die(6, "cannot write %s: %s", path, strerror(errno));
}

static int read_file(const char *path, void *data, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t k = fread(data, 1, n, f);
  fclose(f);
  return k == n;
}

/* The service thread's work: listen for every receive connection and publish its handle,
 * then connect and accept until every connection exists, channel by channel. */
static void setup_connections(void) {
  char path[1024], handles[MAX_STREAMS][NCCL_NET_HANDLE_MAXSIZE];
  void *lc[MAX_STREAMS] = {0};
  int have_handle[MAX_STREAMS] = {0};
  for (int i = 0; i < NS; i++) {
    if (S[i].is_send) continue;
    char h[NCCL_NET_HANDLE_MAXSIZE];
    NCCLOK(net_listen(&NET, S[i].channel % NDEV, h, &lc[i]));
    snprintf(path, sizeof path, "%s/handle.%d.%d.%d", O.rdv, S[i].peer, O.rank, S[i].channel);
    write_file(path, h, sizeof h);
  }
  uint64_t deadline = now_ns() + (uint64_t)(O.timeout_s * 1e9);
  int left = NS;
  while (left) {
    left = 0;
    /* Streams are ordered by channel, so first connect calls (which take the shim's
     * connection index) happen in channel order for each peer. */
    for (int i = 0; i < NS; i++) {
      stream_t *s = &S[i];
      if (s->comm) continue;
      if (s->is_send) {
        if (!have_handle[i]) {
          snprintf(path, sizeof path, "%s/handle.%d.%d.%d", O.rdv, O.rank, s->peer, s->channel);
          have_handle[i] = read_file(path, handles[i], NCCL_NET_HANDLE_MAXSIZE);
        }
        if (have_handle[i]) NCCLOK(net_connect(&NET, s->channel % NDEV, handles[i], &s->comm));
      } else {
        NCCLOK(net_accept(&NET, lc[i], &s->comm));
        if (s->comm) { NCCLOK(net_close_listen(&NET, lc[i])); lc[i] = NULL; }
      }
      if (!s->comm) left++;
    }
    if (left) {
      if (now_ns() > deadline) die(4, "connection set-up timed out (%d of %d left)", left, NS);
      sleep_ms(1);
    }
  }
  for (int i = 0; i < NS; i++) {
    S[i].slab = malloc(STEPS * O.chunk + 64);
    if (!S[i].slab) die(6, "out of memory");
    NCCLOK(net_regmr(&NET, S[i].comm, S[i].slab, STEPS * O.chunk, &S[i].mh));
  }
}

static void *setup_thread(void *arg) {
  (void)arg;
  setup_connections();
  return NULL;
}

static void barrier(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.%d", O.rdv, name, O.rank);
  write_file(path, "1", 1);
  uint64_t deadline = now_ns() + (uint64_t)(O.timeout_s * 1e9);
  for (int r = 0; r < O.nranks; r++) {
    snprintf(path, sizeof path, "%s/%s.%d", O.rdv, name, r);
    struct stat st;
    while (stat(path, &st) != 0) {
      if (now_ns() > deadline) die(4, "barrier %s: rank %d never arrived", name, r);
      sleep_ms(2);
    }
  }
}

/* ---------------- one collective ---------------- */
typedef struct {
  int iter;
  uint32_t *in, *out; /* in: this rank's input; out: result / received blocks */
  size_t nwords, in_words, out_words;
  void *coll_ev; /* parent of this collective's proxy events (Coll or P2p) */
  void *kch[64];
} coll_t;

static coll_t C;
static size_t SLICE; /* ring: bytes per slice per channel */
static int Q;        /* ring: chunks per slice */

/* Ring geometry for rank r at step k (0 .. 2n-3). */
static int ring_send_slice(int k) {
  int n = O.nranks, r = O.rank;
  return k <= n - 2 ? ((r - k) % n + n) % n : ((r + 1 - (k - (n - 1))) % n + n) % n;
}
static int ring_recv_slice(int k) {
  int n = O.nranks, r = O.rank;
  return k <= n - 2 ? ((r - k - 1) % n + n) % n : ((r - (k - (n - 1))) % n + n) % n;
}
/* Word offset of (channel, slice, chunk q) in the data arrays. */
static size_t ring_word(int channel, int slice, int q) {
  size_t chan_bytes = SLICE * (size_t)O.nranks;
  return ((size_t)channel * chan_bytes + (size_t)slice * SLICE + (size_t)q * O.chunk) / 4;
}

static uint8_t *slot(stream_t *s, int i) { return s->slab + (size_t)(i % STEPS) * O.chunk; }

static stream_t *ring_stream(int channel, int is_send) {
  for (int i = 0; i < NS; i++)
    if (S[i].channel == channel && S[i].is_send == is_send) return &S[i];
  return NULL;
}

/* Fill the next send chunk of a stream from `src` (words); requires a free slot. */
static void stage(stream_t *s, const uint32_t *src, const uint32_t *add) {
  int i = s->staged;
  size_t w = s->len[i] / 4;
  uint32_t *dst = (uint32_t *)slot(s, i);
  if (add)
    for (size_t j = 0; j < w; j++) dst[j] = src[j] + add[j];
  else
    memcpy(dst, src, s->len[i]);
  s->staged++;
}
static int can_stage(stream_t *s) { return s->staged < s->nchunks && s->staged - s->done < STEPS; }

/* Ring connections carry chunks column by column, as NCCL's ring kernels loop: for column q
 * (a chunk-sized piece of every slice), steps k = 0 .. 2n-3, so stream index i is
 * (q = i / (2n-2), k = i % (2n-2)). Every dependency (send (k,q) needs receive (k-1,q)) and
 * every held slot then points to an earlier index in one order shared by all connections,
 * which is what keeps bounded slots from deadlocking. Step 0 of each column sends this rank's
 * own input slice; it is staged as soon as it is next in order and a slot is free. */
static int ring_steps(void) { return 2 * O.nranks - 2; }

static int ring_produce_step0(void) {
  int moved = 0, ks = ring_steps();
  for (int c = 0; c < O.channels; c++) {
    stream_t *s = ring_stream(c, 1);
    while (can_stage(s) && s->staged % ks == 0) {
      int q = s->staged / ks;
      stage(s, C.in + ring_word(c, ring_send_slice(0), q), NULL);
      moved = 1;
    }
  }
  return moved;
}

/* Consume arrived receive chunks in order; forward where the pattern says so. */
static int consume(stream_t *r) {
  int moved = 0;
  while (r->consumed < r->done) {
    int i = r->consumed;
    const uint32_t *data = (const uint32_t *)slot(r, i);
    size_t w = r->len[i] / 4;
    if (O.pattern == PAT_RING) {
      int ks = ring_steps(), q = i / ks, k = i % ks, n = O.nranks;
      stream_t *s = ring_stream(r->channel, 1);
      uint32_t *in = C.in + ring_word(r->channel, ring_recv_slice(k), q);
      uint32_t *out = C.out + ring_word(r->channel, ring_recv_slice(k), q);
      int forward = k < 2 * n - 3;
      /* Forwarding needs a free send slot (back-pressure) and its turn on the connection. */
      if (forward && (!can_stage(s) || s->staged != i + 1)) break;
      if (k <= n - 2) {
        if (k == n - 2) { /* fully reduced: this rank's result slice, and step n-1's send */
          for (size_t j = 0; j < w; j++) out[j] = data[j] + in[j];
          stage(s, out, NULL);
        } else {
          stage(s, data, in);
        }
      } else {
        memcpy(out, data, r->len[i]);
        if (forward) stage(s, out, NULL);
      }
    } else {
      memcpy(C.out + r->off[i] / 4, data, r->len[i]);
    }
    (void)w;
    pstop(r->step_ev[i % STEPS]);
    r->step_ev[i % STEPS] = NULL;
    r->consumed++;
    moved = 1;
  }
  return moved;
}

/* Post what can be posted and test what is in flight on one stream. */
static int progress_stream(stream_t *s) {
  int moved = 0;
  if (s->is_send) {
    while (s->posted < s->staged) {
      int i = s->posted, k = i % STEPS;
      if (!s->step_ev[k]) {
        D5 d = {.type = ncclProfileProxyStep, .parentObj = s->op_ev, .rank = O.rank};
        d.proxyStep.step = i;
        s->step_ev[k] = s->op_ev ? pstart(&d) : NULL;
        precord(s->step_ev[k], ncclProfilerProxyStepSendGPUWait, 0);
      }
      void *req = NULL;
      NCCLOK(net_isend(&NET, s->comm, slot(s, i), s->len[i], O.rank, s->mh, &req));
      if (!req) break; /* the plugin is full: retry later, as NCCL does */
      precord(s->step_ev[k], ncclProfilerProxyStepSendWait, s->len[i]);
      s->req[k] = req;
      s->posted++;
      moved = 1;
    }
    /* Announce the next steps the proxy waits on (GPU data not there yet). */
    for (int i = s->posted; i < s->nchunks && i < s->done + STEPS; i++) {
      int k = i % STEPS;
      if (!s->step_ev[k] && i >= s->staged) {
        D5 d = {.type = ncclProfileProxyStep, .parentObj = s->op_ev, .rank = O.rank};
        d.proxyStep.step = i;
        s->step_ev[k] = s->op_ev ? pstart(&d) : NULL;
        precord(s->step_ev[k], ncclProfilerProxyStepSendGPUWait, 0);
      }
    }
    while (s->done < s->posted) {
      int k = s->done % STEPS, done = 0, size = 0;
      NCCLOK(net_test(&NET, s->req[k], &done, &size));
      if (!done) break;
      if ((size_t)size != s->len[s->done]) die(6, "send size %d != %zu", size, s->len[s->done]);
      pstop(s->step_ev[k]);
      s->step_ev[k] = NULL;
      s->req[k] = NULL;
      s->done++;
      moved = 1;
    }
  } else {
    while (s->posted < s->nchunks && s->posted - s->consumed < STEPS) {
      int i = s->posted, k = i % STEPS;
      void *req = NULL;
      NCCLOK(net_irecv(&NET, s->comm, slot(s, i), O.chunk, s->peer, s->mh, &req));
      if (!req) break;
      D5 d = {.type = ncclProfileProxyStep, .parentObj = s->op_ev, .rank = O.rank};
      d.proxyStep.step = i;
      s->step_ev[k] = s->op_ev ? pstart(&d) : NULL;
      precord(s->step_ev[k], ncclProfilerProxyStepRecvWait, 0);
      s->req[k] = req;
      s->posted++;
      moved = 1;
    }
    while (s->done < s->posted) {
      int k = s->done % STEPS, done = 0, size = 0;
      NCCLOK(net_test(&NET, s->req[k], &done, &size));
      if (!done) break;
      if ((size_t)size != s->len[s->done]) die(5, "received %d bytes for a %zu-byte chunk", size, s->len[s->done]);
      /* Arrived: the GPU now has to consume it (host memory needs no flush). */
      precord(s->step_ev[k], ncclProfilerProxyStepRecvGPUWait, (size_t)size);
      s->req[k] = NULL;
      s->done++;
      moved = 1;
    }
    moved |= consume(s);
  }
  return moved;
}

static void plan_streams(void) {
  for (int i = 0; i < NS; i++) {
    stream_t *s = &S[i];
    free(s->len);
    free(s->off);
    if (O.pattern == PAT_RING) {
      s->nchunks = ring_steps() * Q;
      s->len = calloc((size_t)s->nchunks, sizeof *s->len);
      s->off = calloc((size_t)s->nchunks, sizeof *s->off);
      for (int j = 0; j < s->nchunks; j++) {
        int q = j / ring_steps();
        size_t rest = SLICE - (size_t)q * O.chunk;
        s->len[j] = rest < O.chunk ? rest : O.chunk;
      }
    } else {
      /* Block for this peer, split evenly over channels, cut into chunks. */
      size_t block = O.pattern == PAT_ALLTOALL ? O.bytes / (size_t)O.nranks : O.bytes;
      size_t per = block / (size_t)O.channels;
      size_t start = s->base + (size_t)s->channel * per;
      s->nchunks = (int)((per + O.chunk - 1) / O.chunk);
      s->len = calloc((size_t)s->nchunks + 1, sizeof *s->len);
      s->off = calloc((size_t)s->nchunks + 1, sizeof *s->off);
      for (int j = 0; j < s->nchunks; j++) {
        s->off[j] = start + (size_t)j * O.chunk;
        size_t rest = per - (size_t)j * O.chunk;
        s->len[j] = rest < O.chunk ? rest : O.chunk;
      }
    }
  }
}

/* The proxy thread runs one collective from start to completion. */
static void run_collective(void) {
  for (int i = 0; i < NS; i++) {
    stream_t *s = &S[i];
    s->staged = s->posted = s->done = s->consumed = 0;
    memset(s->step_ev, 0, sizeof s->step_ev);
    D5 d = {.type = ncclProfileProxyOp, .parentObj = s->parent_ev, .rank = O.rank};
    d.proxyOp.pid = getpid();
    d.proxyOp.channelId = (uint8_t)s->channel;
    d.proxyOp.peer = s->peer;
    d.proxyOp.nSteps = s->nchunks;
    d.proxyOp.chunkSize = (int)O.chunk;
    d.proxyOp.isSend = s->is_send;
    s->op_ev = s->parent_ev ? pstart(&d) : NULL;
  }
  for (int c = 0; c < O.channels && c < 64; c++) {
    D5 d = {.type = ncclProfileKernelCh, .parentObj = C.coll_ev, .rank = O.rank};  /* Coll only */
    d.kernelCh.channelId = (uint8_t)c;
    C.kch[c] = C.coll_ev ? pstart(&d) : NULL;
  }
  uint64_t deadline = now_ns() + (uint64_t)(O.timeout_s * 1e9);
  int chan_left[64], left = NS;
  for (int c = 0; c < 64; c++) chan_left[c] = 0;
  for (int i = 0; i < NS; i++) chan_left[S[i].channel]++;
  int finished[MAX_STREAMS] = {0};
  long idle_ns = 0;
  while (left) {
    int moved = 0;
    if (O.pattern == PAT_RING) {
      moved |= ring_produce_step0();
    } else {
      for (int i = 0; i < NS; i++) {
        stream_t *s = &S[i];
        while (s->is_send && can_stage(s)) {
          /* The send data for this peer comes straight from the input. */
          stage(s, C.in + s->off[s->staged] / 4, NULL);
          moved = 1;
        }
      }
    }
    for (int i = 0; i < NS; i++) {
      stream_t *s = &S[i];
      if (finished[i]) continue;
      moved |= progress_stream(s);
      int complete = s->is_send ? s->done == s->nchunks : s->consumed == s->nchunks;
      if (complete) {
        finished[i] = 1;
        left--;
        pstop(s->op_ev);
        s->op_ev = NULL;
        if (--chan_left[s->channel] == 0 && s->channel < 64) {
          pstop(C.kch[s->channel]);
          C.kch[s->channel] = NULL;
        }
      }
    }
    if (!moved && left) {
      if (now_ns() > deadline) {
        fprintf(stdout, "{\"event\":\"timeout\",\"rank\":%d,\"iter\":%d,\"streams\":[", O.rank, C.iter);
        for (int i = 0; i < NS; i++)
          fprintf(stdout, "%s{\"peer\":%d,\"channel\":%d,\"send\":%d,\"done\":%d,\"of\":%d}", i ? "," : "",
                  S[i].peer, S[i].channel, S[i].is_send, S[i].is_send ? S[i].done : S[i].consumed, S[i].nchunks);
        fprintf(stdout, "]}\n");
        die(4, "iteration %d timed out after %.0f s", C.iter, O.timeout_s);
      }
      /* A polling proxy thread, backing off while nothing moves (NCCL's spins; here many
       * ranks share a few cores, and the sockets keep the links busy meanwhile). */
      idle_ns = idle_ns ? (idle_ns * 2 > 500000 ? 500000 : idle_ns * 2) : 10000;
      struct timespec ts = {0, idle_ns};
      nanosleep(&ts, NULL);
    } else {
      idle_ns = 0;
    }
  }
}

/* ---------------- proxy thread hand-off ---------------- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int work_gen, done_gen, quit;

static void *proxy_thread(void *arg) {
  (void)arg;
  int seen = 0;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (work_gen == seen && !quit) pthread_cond_wait(&cv, &mu);
    if (quit) { pthread_mutex_unlock(&mu); return NULL; }
    seen = work_gen;
    pthread_mutex_unlock(&mu);
    run_collective();
    pthread_mutex_lock(&mu);
    done_gen = seen;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
}

/* ---------------- verification ---------------- */
static int verify(int iter) {
  size_t n = C.nwords;
  if (O.pattern == PAT_RING) {
    for (size_t j = 0; j < n; j++) {
      uint32_t want = 0;
      for (int r = 0; r < O.nranks; r++) want += val(r, iter, j);
      if (C.out[j] != want) {
        fprintf(stderr, "c4-workload rank %d: word %zu is %u, want %u\n", O.rank, j, C.out[j], want);
        return 0;
      }
    }
    return 1;
  }
  for (int i = 0; i < NS; i++) {
    stream_t *s = &S[i];
    if (s->is_send) continue;
    for (int j = 0; j < s->nchunks; j++)
      for (size_t w = 0; w < s->len[j] / 4; w++) {
        size_t at = s->off[j] / 4 + w, idx = at - s->base / 4;
        uint32_t want = pval(s->peer, O.rank, iter, idx);
        if (C.out[at] != want) {
          fprintf(stderr, "c4-workload rank %d: from %d word %zu is %u, want %u\n", O.rank, s->peer, idx, C.out[at], want);
          return 0;
        }
      }
  }
  return 1;
}

static void fill_input(int iter) {
  if (O.pattern == PAT_RING) {
    for (size_t j = 0; j < C.nwords; j++) C.in[j] = val(O.rank, iter, j);
    return;
  }
  /* all-to-all / pairs: the block for each destination peer */
  for (int i = 0; i < NS; i++) {
    stream_t *s = &S[i];
    if (!s->is_send) continue;
    for (int j = 0; j < s->nchunks; j++)
      for (size_t w = 0; w < s->len[j] / 4; w++) {
        size_t at = s->off[j] / 4 + w;
        C.in[at] = pval(O.rank, s->peer, iter, at - s->base / 4);
      }
  }
}

/* ---------------- options ---------------- */
static void usage(void) {
  fprintf(stderr,
          "usage: c4-workload --rendezvous DIR [--rank R --nranks N] [--pattern ring|alltoall|pairs]\n"
          "  [--bytes B] [--iters N] [--warmup W] [--channels C] [--chunk-bytes S] [--pairs 0:1,2:3]\n"
          "  [--late-ms MS --late-from I] [--hang-at I] [--compute-ms MS] [--timeout-s T]\n"
          "  [--comm-id HEX] [--verify all|first]\n"
          "environment: NCCL_NET_PLUGIN (the net plugin), NCCL_PROFILER_PLUGIN, RANK/C4_RANK,\n"
          "  WORLD_SIZE, C4_JOB; the plugin reads C4_AGENT_SOCKET, C4_SHIM_PORT, C4_SHIM_ADDR\n");
  exit(2);
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static void parse(int argc, char **argv) {
  O.rank = env_int("C4_RANK", env_int("RANK", -1));
  O.nranks = env_int("WORLD_SIZE", -1);
  O.pattern = PAT_RING;
  O.channels = 2;
  O.iters = 5;
  O.warmup = 1;
  O.bytes = 8u << 20;
  O.chunk = 128u << 10;
  O.timeout_s = 60;
  O.late_from = 0;
  O.hang_at = -1;
  O.verify_all = 1;
  O.job = getenv("C4_JOB");
  O.plugin = getenv("NCCL_NET_PLUGIN");
  static struct option lo[] = {
      {"rank", 1, 0, 'r'}, {"nranks", 1, 0, 'n'}, {"pattern", 1, 0, 'p'}, {"bytes", 1, 0, 'b'},
      {"iters", 1, 0, 'i'}, {"warmup", 1, 0, 'w'}, {"channels", 1, 0, 'c'}, {"chunk-bytes", 1, 0, 'k'},
      {"rendezvous", 1, 0, 'R'}, {"pairs", 1, 0, 'P'}, {"late-ms", 1, 0, 'L'}, {"late-from", 1, 0, 'F'},
      {"hang-at", 1, 0, 'H'}, {"compute-ms", 1, 0, 'M'}, {"timeout-s", 1, 0, 'T'}, {"comm-id", 1, 0, 'C'},
      {"verify", 1, 0, 'V'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (ch) {
      case 'r': O.rank = atoi(optarg); break;
      case 'n': O.nranks = atoi(optarg); break;
      case 'p':
        if (!strcmp(optarg, "ring")) O.pattern = PAT_RING;
        else if (!strcmp(optarg, "alltoall")) O.pattern = PAT_ALLTOALL;
        else if (!strcmp(optarg, "pairs")) O.pattern = PAT_PAIRS;
        else usage();
        break;
      case 'b': O.bytes = (size_t)strtoull(optarg, NULL, 0); break;
      case 'i': O.iters = atoi(optarg); break;
      case 'w': O.warmup = atoi(optarg); break;
      case 'c': O.channels = atoi(optarg); break;
      case 'k': O.chunk = (size_t)strtoull(optarg, NULL, 0); break;
      case 'R': O.rdv = optarg; break;
      case 'P': {
        char *save = NULL, *tok, *copy = strdup(optarg);
        for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
          if (O.npairs == MAX_STREAMS || sscanf(tok, "%d:%d", &O.pair_src[O.npairs], &O.pair_dst[O.npairs]) != 2) usage();
          O.npairs++;
        }
        free(copy);
        break;
      }
      case 'L': O.late_ms = atof(optarg); break;
      case 'F': O.late_from = atoi(optarg); break;
      case 'H': O.hang_at = atoi(optarg); break;
      case 'M': O.compute_ms = atof(optarg); break;
      case 'T': O.timeout_s = atof(optarg); break;
      case 'C': O.comm_id = strtoull(optarg, NULL, 16); break;
      case 'V': O.verify_all = strcmp(optarg, "first") != 0; break;
      default: usage();
    }
  }
  if (!O.rdv || O.rank < 0 || O.nranks < 1 || O.rank >= O.nranks || O.channels < 1 || O.channels > 32 ||
      O.chunk < 4096 || O.chunk % 4 || O.iters < 1 || O.warmup < 0)
    usage();
  if (!O.plugin) O.plugin = "libnccl-net.so"; /* NCCL's default name */
  if (!O.comm_id) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the job name: the same on every rank */
    for (const char *p = O.job ? O.job : "c4-workload"; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    O.comm_id = h;
  }
  size_t unit;
  if (O.pattern == PAT_RING) {
    unit = 4u * (size_t)O.nranks * (size_t)O.channels;
  } else {
    unit = 4u * (size_t)O.channels * (O.pattern == PAT_ALLTOALL ? (size_t)O.nranks : 1u);
    if (O.pattern == PAT_PAIRS && O.npairs == 0) { /* default: each rank to the one half a ring away */
      for (int r = 0; r < O.nranks && O.nranks > 1; r++) {
        O.pair_src[O.npairs] = r;
        O.pair_dst[O.npairs++] = (r + O.nranks / 2) % O.nranks;
      }
    }
  }
  O.bytes -= O.bytes % unit; /* whole words per channel, slice and peer */
  if (O.bytes == 0) die(2, "--bytes too small for %d ranks and %d channels", O.nranks, O.channels);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  parse(argc, argv);
  void *dl;
  if (net_load(O.plugin, 0, &NET, &dl) != 0) die(6, "cannot load a net plugin from %s", O.plugin);
  NCCLOK(net_init(&NET, O.comm_id));
  NCCLOK(net_devices(&NET, &NDEV));
  if (NDEV < 1) die(6, "the plugin has no device");
  for (int dev = 0; dev < NDEV; dev++) { /* NCCL reads every device's properties at init */
    int ptr, maxr, speed;
    NCCLOK(net_props(&NET, dev, &ptr, &maxr, &speed));
  }
  prof_load(dl);
  prof_init();

  /* Connections, ordered by channel so each peer's are set up channel by channel. */
  for (int c = 0; c < O.channels; c++) {
    if (O.pattern == PAT_RING) {
      if (O.nranks == 1) break;
      add_stream((O.rank + 1) % O.nranks, c, 1);
      add_stream((O.rank - 1 + O.nranks) % O.nranks, c, 0);
    } else if (O.pattern == PAT_ALLTOALL) {
      for (int k = 1; k < O.nranks; k++) {
        add_stream((O.rank + k) % O.nranks, c, 1);
        add_stream((O.rank - k + O.nranks) % O.nranks, c, 0);
      }
    } else {
      for (int p = 0; p < O.npairs; p++) {
        if (O.pair_src[p] == O.rank && O.pair_dst[p] != O.rank) add_stream(O.pair_dst[p], c, 1);
        if (O.pair_dst[p] == O.rank && O.pair_src[p] != O.rank) add_stream(O.pair_src[p], c, 0);
      }
    }
  }
  uint64_t t0 = now_ns();
  pthread_t svc;
  pthread_create(&svc, NULL, setup_thread, NULL);
  pthread_join(svc, NULL);
  double setup_ms = (double)(now_ns() - t0) / 1e6;

  /* Peer blocks: all-to-all uses one `bytes` buffer cut in nranks blocks; pairs give each
   * peer a whole `bytes` block of its own, numbered per direction. */
  int nsend_peers = 0, nrecv_peers = 0;
  for (int i = 0; i < NS; i++) {
    stream_t *s = &S[i];
    if (O.pattern == PAT_ALLTOALL) {
      s->base = (size_t)s->peer * (O.bytes / (size_t)O.nranks);
    } else if (O.pattern == PAT_PAIRS) {
      int idx = -1;
      for (int j = 0; j < i; j++)
        if (S[j].peer == s->peer && S[j].is_send == s->is_send) { idx = (int)(S[j].base / O.bytes); break; }
      if (idx < 0) idx = s->is_send ? nsend_peers++ : nrecv_peers++;
      s->base = (size_t)idx * O.bytes;
    }
  }
  C.nwords = O.bytes / 4;
  C.in_words = C.nwords * (size_t)(O.pattern == PAT_PAIRS ? (nsend_peers ? nsend_peers : 1) : 1);
  C.out_words = C.nwords * (size_t)(O.pattern == PAT_PAIRS ? (nrecv_peers ? nrecv_peers : 1) : 1);
  C.in = calloc(C.in_words + 1, 4);
  C.out = calloc(C.out_words + 1, 4);
  if (!C.in || !C.out) die(6, "out of memory");
  SLICE = O.bytes / (size_t)O.channels / (size_t)O.nranks;
  Q = (int)((SLICE + O.chunk - 1) / O.chunk);
  plan_streams();

  pthread_t proxy;
  pthread_create(&proxy, NULL, proxy_thread, NULL);
  barrier("ready");
  printf("{\"event\":\"ready\",\"rank\":%d,\"nranks\":%d,\"connections\":%d,\"devices\":%d,\"setup_ms\":%.1f,"
         "\"net_version\":%d,\"profiler_version\":%d,\"profiler_mask\":%d,\"bytes\":%zu,\"t_us\":%llu}\n",
         O.rank, O.nranks, NS, NDEV, setup_ms, NET.version, P.version, P.mask, O.bytes,
         (unsigned long long)real_us());

  uint64_t seq = 0;
  int total = O.warmup + O.iters;
  for (int it = 0; it < total; it++) {
    if (it == O.hang_at) {
      printf("{\"event\":\"hang\",\"rank\":%d,\"iter\":%d}\n", O.rank, it);
      /* Stops entering collectives; stays alive (holding its connections) past the others'
       * timeout, as a stuck process does, then leaves (every load loop is bounded). */
      sleep_ms(2 * O.timeout_s * 1000);
      _exit(3);
    }
    fill_input(it);
    memset(C.out, 0, C.out_words * 4);
    sleep_ms(O.compute_ms + (it >= O.late_from ? O.late_ms : 0));
    C.iter = it;
    uint64_t t_start = real_us();
    /* Application thread: the collective is enqueued (Coll start/stop, or P2p for grouped
     * send/recv), then the proxy runs it. */
    D5 d = {.rank = O.rank};
    if (O.pattern == PAT_RING) {
      d.type = ncclProfileColl;
      d.coll.seqNumber = seq++;
      d.coll.func = "AllReduce";
      d.coll.count = O.bytes / 4;
      d.coll.datatype = "ncclUint32";
      d.coll.nChannels = (uint8_t)O.channels;
      d.coll.algo = "RING";
      d.coll.proto = "SIMPLE";
      C.coll_ev = pstart(&d);
      pstop(C.coll_ev);
      for (int i = 0; i < NS; i++) S[i].parent_ev = C.coll_ev;
    } else {
      /* Grouped sends and receives: one P2p event per (peer, direction), as nccl-tests'
       * all-to-all issues them; each connection's ProxyOps hang off its op's event. */
      void *ev[MAX_STREAMS] = {0};
      for (int i = 0; i < NS; i++) {
        S[i].parent_ev = NULL;
        if (S[i].channel != 0) continue;
        d.type = ncclProfileP2p;
        d.p2p.func = S[i].is_send ? "Send" : "Recv";
        d.p2p.count = (O.pattern == PAT_ALLTOALL ? O.bytes / (size_t)O.nranks : O.bytes) / 4;
        d.p2p.datatype = "ncclUint32";
        d.p2p.peer = S[i].peer;
        d.p2p.nChannels = (uint8_t)O.channels;
        ev[i] = pstart(&d);
        pstop(ev[i]);
      }
      for (int i = 0; i < NS; i++)
        for (int j = 0; j < NS; j++)
          if (S[j].channel == 0 && S[j].peer == S[i].peer && S[j].is_send == S[i].is_send) S[i].parent_ev = ev[j];
      C.coll_ev = NULL;
    }
    if (O.nranks > 1 && NS > 0) {
      pthread_mutex_lock(&mu);
      int want = ++work_gen;
      pthread_cond_broadcast(&cv);
      while (done_gen != want) pthread_cond_wait(&cv, &mu);
      pthread_mutex_unlock(&mu);
    } else if (O.pattern == PAT_RING) {
      memcpy(C.out, C.in, O.bytes);
    }
    uint64_t t_end = real_us();
    if (O.pattern == PAT_ALLTOALL) { /* the block to itself never crosses the network */
      size_t block = O.bytes / (size_t)O.nranks;
      memcpy((char *)C.out + (size_t)O.rank * block, (char *)C.in + (size_t)O.rank * block, block);
    }
    int checked = O.verify_all || it == 0;
    int ok = checked ? verify(it) : -1;
    printf("{\"event\":\"iter\",\"rank\":%d,\"iter\":%d,\"warmup\":%s,\"t_start_us\":%llu,\"t_end_us\":%llu,"
           "\"bytes\":%zu,\"verified\":%s}\n",
           O.rank, it, it < O.warmup ? "true" : "false", (unsigned long long)t_start,
           (unsigned long long)t_end, O.bytes, ok < 0 ? "null" : ok ? "true" : "false");
    if (ok == 0) die(5, "iteration %d: data mismatch", it);
  }
  pthread_mutex_lock(&mu);
  quit = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(proxy, NULL);
  barrier("done"); /* nobody closes while a peer may still read */
  for (int i = 0; i < NS; i++) {
    NCCLOK(net_deregmr(&NET, S[i].comm, S[i].mh));
    NCCLOK(S[i].is_send ? net_close_send(&NET, S[i].comm) : net_close_recv(&NET, S[i].comm));
  }
  NCCLOK(net_finalize(&NET));
  if (P.version) ((ncclProfiler_v5_t *)P.tab)->finalize(P.ctx);
  printf("{\"event\":\"done\",\"rank\":%d,\"iters\":%d}\n", O.rank, O.iters);
  return 0;
}
