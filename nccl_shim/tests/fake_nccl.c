/* fake_nccl.c: the test driver that plays NCCL against libnccl-net-c4.so. It loads the library
 * as NCCL does, drives every net call in NCCL's order and threading (set-up on a "service"
 * thread, data on a "progress" thread, the same-thread loopback probe, 32 requests in flight,
 * receive buffers larger than the message, tags = ranks, pre-set optional-completion
 * requests), replays profiler event sequences, and injects agent faults. Every scenario checks
 * real outcomes: bytes compared one by one, per-socket kernel byte counters, telemetry
 * received by a fake agent. Usage: fake_nccl <lib> <scenario> [args]; exit 0 = pass. */
#include <dirent.h>
#include <limits.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* glibc's tcp_info lacks the byte counters */
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_agent.h"
#include "netdrv.h"

static const char *lib_path;
static const char *scenario;

static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s: ", scenario);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}
#define CHECK(cond, ...) do { if (!(cond)) fail(__VA_ARGS__); } while (0)
#define OK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) fail("%s = %d (line %d)", #call, r_, __LINE__); } while (0)

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static uint64_t real_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}
static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static uint8_t pattern(uint32_t seed, size_t j) { return (uint8_t)(seed * 131u + j * 7u + (j >> 9)); }
static void fill(uint8_t *b, size_t n, uint32_t seed) { for (size_t j = 0; j < n; j++) b[j] = pattern(seed, j); }
static size_t verify(const uint8_t *b, size_t n, uint32_t seed) {
  for (size_t j = 0; j < n; j++) if (b[j] != pattern(seed, j)) return j + 1;
  return 0;
}

static net_t load(int force, void **dl) {
  net_t n;
  CHECK(net_load(lib_path, force, &n, dl) == 0, "cannot load %s (v%d)", lib_path, force);
  return n;
}

/* NCCL's same-thread loopback pattern: listen, then alternate connect/accept until both are
 * non-NULL, passing the same handle buffer each time; closeListen right after accept. */
static void connect_pair(net_t *n, int dev, void **sc, void **rc) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *lc = NULL;
  OK(net_listen(n, dev, handle, &lc));
  CHECK(lc != NULL, "listen returned NULL comm");
  *sc = *rc = NULL;
  uint64_t t0 = now_ns();
  while (!*sc || !*rc) {
    if (!*sc) OK(net_connect(n, dev, handle, sc));
    if (!*rc) OK(net_accept(n, lc, rc));
    sched_yield(); /* a polling proxy thread, not a spinning one: leave the agent some CPU */
    CHECK(now_ns() - t0 < 10000000000ull, "connect/accept did not finish in 10 s");
  }
  OK(net_close_listen(n, lc));
}

typedef struct {
  net_t *n;
  void *sc, *rc;
  int nmsgs;
  size_t maxsize;
  uint32_t seed;
  int tag;
} xfer_t;

/* Up to 32 sends and 32 receives in flight, random sizes (including 0), receive buffers
 * larger than the message; sizes and every byte checked. Returns bytes moved. */
static size_t xfer(xfer_t *x) {
  enum { W = NCCL_NET_MAX_REQUESTS };
  uint8_t *sbuf[W], *rbuf[W];
  void *sreq[W] = {0}, *rreq[W] = {0}, *smh, *rmh;
  size_t ssz[W], rsz[W];
  uint32_t rseed[W];
  for (int i = 0; i < W; i++) {
    sbuf[i] = malloc(x->maxsize + 1);
    rbuf[i] = malloc(x->maxsize + 4096);
  }
  OK(net_regmr(x->n, x->sc, sbuf[0], x->maxsize, &smh));
  OK(net_regmr(x->n, x->rc, rbuf[0], x->maxsize, &rmh));
  int posted_s = 0, posted_r = 0, done_s = 0, done_r = 0;
  size_t bytes = 0;
  unsigned rng = x->seed * 2654435761u + 1;
  size_t sizes[4096];
  CHECK(x->nmsgs <= 4096, "too many messages");
  for (int i = 0; i < x->nmsgs; i++) {
    rng = rng * 1103515245u + 12345u;
    sizes[i] = (i % 17 == 3) ? 0 : (rng >> 8) % (x->maxsize + 1);
  }
  uint64_t t0 = now_ns();
  while (done_s < x->nmsgs || done_r < x->nmsgs) {
    if (posted_r < x->nmsgs && !rreq[posted_r % W]) {
      int k = posted_r % W;
      void *req = NULL;
      OK(net_irecv(x->n, x->rc, rbuf[k], x->maxsize + 4096, x->tag, rmh, &req));
      if (req) {
        CHECK(req != (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION, "request left at 0x1");
        rreq[k] = req; rsz[k] = sizes[posted_r]; rseed[k] = x->seed + (uint32_t)posted_r;
        posted_r++;
      }
    }
    if (posted_s < x->nmsgs && !sreq[posted_s % W]) {
      int k = posted_s % W;
      ssz[k] = sizes[posted_s];
      fill(sbuf[k], ssz[k], x->seed + (uint32_t)posted_s);
      void *req = NULL;
      OK(net_isend(x->n, x->sc, sbuf[k], ssz[k], x->tag, smh, &req));
      if (req) { sreq[k] = req; posted_s++; }
    }
    for (int k = 0; k < W; k++) {
      int done = 0, sz = -1;
      if (sreq[k]) {
        OK(net_test(x->n, sreq[k], &done, &sz));
        if (done) { CHECK((size_t)sz == ssz[k], "send size %d != %zu", sz, ssz[k]); sreq[k] = NULL; done_s++; }
      }
      if (rreq[k]) {
        OK(net_test(x->n, rreq[k], &done, &sz));
        if (done) {
          CHECK((size_t)sz == rsz[k], "received size %d, sent %zu", sz, rsz[k]);
          size_t bad = verify(rbuf[k], rsz[k], rseed[k]);
          CHECK(!bad, "byte %zu of a %zu-byte message differs", bad - 1, rsz[k]);
          void *freq = (void *)1;
          OK(net_iflush(x->n, x->rc, rbuf[k], sz, rmh, &freq));
          CHECK(freq == NULL, "host-memory flush should need no request");
          bytes += rsz[k];
          rreq[k] = NULL;
          done_r++;
        }
      }
    }
    CHECK(now_ns() - t0 < 60000000000ull, "transfer stuck (%d/%d sent, %d/%d received)", done_s, x->nmsgs, done_r, x->nmsgs);
  }
  OK(net_deregmr(x->n, x->sc, smh));
  OK(net_deregmr(x->n, x->rc, rmh));
  for (int i = 0; i < W; i++) { free(sbuf[i]); free(rbuf[i]); }
  return bytes;
}

/* ---------------- abi ---------------- */
static int scen_abi(void) {
  void *dl;
  for (int v = 12; v >= 8; v--) {
    net_t n = load(v, &dl);
    CHECK(n.version == v, "loaded v%d, wanted v%d", n.version, v);
    CHECK(strcmp(net_name(&n), "C4-Socket") == 0, "name %s", net_name(&n));
    OK(net_init(&n, 0xabc0 + (uint64_t)v));
    int nd = 0;
    OK(net_devices(&n, &nd));
    CHECK(nd >= 1, "no devices");
    for (int d = 0; d < nd; d++) {
      int ptr, maxr, speed;
      OK(net_props(&n, d, &ptr, &maxr, &speed));
      CHECK(ptr == NCCL_PTR_HOST && maxr == 1 && speed > 0, "v%d props ptr=%d maxRecvs=%d", v, ptr, maxr);
    }
    OK(net_finalize(&n));
  }
  net_t n = load(0, &dl);
  CHECK(n.version == 12, "probe order should pick v12 first, got v%d", n.version);
  const ncclProfiler_v6_t *p6 = dlsym(dl, "ncclProfiler_v6");
  const ncclProfiler_v5_t *p5 = dlsym(dl, "ncclProfiler_v5");
  const ncclProfiler_v4_t *p4 = dlsym(dl, "ncclProfiler_v4");
  CHECK(p6 && p5 && p4 && p6->init && p5->init && p4->startEvent, "profiler symbols missing");
  CHECK(!dlsym(dl, "ncclProfiler_v7"), "v7 is not declared (README: Profiler versions)");
  CHECK(!dlsym(dl, "c4t_isend") && !dlsym(dl, "c4_rt_init"), "internal symbols are exported");
  printf("PASS abi (v12..v8 init/devices/getProperties, profiler v6/v5/v4 present)\n");
  return 0;
}

/* ---------------- loopback, every version ---------------- */
static int scen_loopback(int version) {
  void *dl;
  net_t n = load(version, &dl);
  OK(net_init(&n, 0x5eed0000 + (uint64_t)version));
  void *sc, *rc;
  connect_pair(&n, 0, &sc, &rc);
  xfer_t x = {&n, sc, rc, 300, 300000, 7u + (uint32_t)version, 1};
  size_t b = xfer(&x);
  xfer_t big = {&n, sc, rc, 6, 8u << 20, 99, 1};
  b += xfer(&big);
  /* NCCL_NET_MAX_REQUESTS: 32 sends in flight are accepted, the 33rd is "retry later". */
  static uint8_t small[NCCL_NET_MAX_REQUESTS][64], rbuf[64];
  void *reqs[NCCL_NET_MAX_REQUESTS], *extra = (void *)1, *mh;
  OK(net_regmr(&n, sc, small, sizeof small, &mh));
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    fill(small[i], 64, 500u + (uint32_t)i);
    reqs[i] = NULL;
    OK(net_isend(&n, sc, small[i], 64, 1, mh, &reqs[i]));
    CHECK(reqs[i], "send %d of 32 refused", i);
  }
  OK(net_isend(&n, sc, small[0], 64, 1, mh, &extra));
  CHECK(extra == NULL, "a 33rd request was accepted");
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) {
    void *rr = NULL;
    int done = 0, sz = 0;
    OK(net_irecv(&n, rc, rbuf, sizeof rbuf, 1, mh, &rr));
    while (!done) OK(net_test(&n, rr, &done, &sz));
    CHECK(sz == 64 && !verify(rbuf, 64, 500u + (uint32_t)i), "message %d of the 32", i);
    done = 0;
    while (!done) OK(net_test(&n, reqs[i], &done, &sz));
  }
  OK(net_close_send(&n, sc));
  OK(net_close_recv(&n, rc));
  OK(net_finalize(&n));
  printf("PASS loopback v%d (%zu bytes verified)\n", n.version, b);
  return 0;
}

/* ---------------- two ranks in two processes ---------------- */
/* written: bytes the application handed the socket (sent once, or still unsent), by the
 * kernel's count; acked: bytes the peer acknowledged. */
typedef struct { uint16_t lport, rport; uint64_t acked, received, written; } sockinfo;
static int list_sockets(sockinfo *out, int cap);
typedef struct {
  net_t *n;
  int rank, peer, nch, msgs;
  size_t maxsize;
  int wfd, rfd;
  void *sc[16], *rc[16];
} rank_t;

static void *service_thread(void *arg) {
  rank_t *r = arg;
  char mine[16][NCCL_NET_HANDLE_MAXSIZE], theirs[16][NCCL_NET_HANDLE_MAXSIZE];
  void *lc[16];
  for (int c = 0; c < r->nch; c++) OK(net_listen(r->n, 0, mine[c], &lc[c]));
  /* The bootstrap stand-in: handles cross a pipe, as NCCL's bootstrap would carry them. */
  CHECK(write(r->wfd, mine, sizeof(mine[0]) * (size_t)r->nch) == (ssize_t)(sizeof(mine[0]) * (size_t)r->nch), "pipe write");
  size_t want = sizeof(theirs[0]) * (size_t)r->nch, got = 0;
  while (got < want) {
    ssize_t k = read(r->rfd, (char *)theirs + got, want - got);
    CHECK(k > 0, "pipe read");
    got += (size_t)k;
  }
  uint64_t t0 = now_ns();
  int left = 2 * r->nch;
  while (left) {
    left = 0;
    for (int c = 0; c < r->nch; c++) {
      if (!r->sc[c]) OK(net_connect(r->n, 0, theirs[c], &r->sc[c]));
      if (!r->rc[c] && lc[c]) {
        OK(net_accept(r->n, lc[c], &r->rc[c]));
        if (r->rc[c]) { OK(net_close_listen(r->n, lc[c])); lc[c] = NULL; }
      }
      left += !r->sc[c] + !r->rc[c];
    }
    sched_yield();
    CHECK(now_ns() - t0 < 20000000000ull, "rank %d set-up stuck", r->rank);
  }
  return NULL;
}

typedef struct { rank_t *r; int c; size_t bytes; } chan_t;

/* One progress thread per rank drives all channels: each channel sends to and receives from
 * the peer; pairs of (send comm of rank A, recv comm of rank B) carry rank A's seeds. */
static void *progress_thread(void *arg) {
  rank_t *r = arg;
  enum { W = 8 };
  for (int c = 0; c < r->nch; c++) {
    /* Interleave a send stream and a receive stream on this channel. */
    uint8_t *sb = malloc(r->maxsize), *rb = malloc(r->maxsize + 512);
    void *smh, *rmh;
    OK(net_regmr(r->n, r->sc[c], sb, r->maxsize, &smh));
    OK(net_regmr(r->n, r->rc[c], rb, r->maxsize + 512, &rmh));
    for (int m = 0; m < r->msgs; m++) {
      size_t ss = (size_t)(m * 7919 + c * 31 + r->rank * 3) % (r->maxsize + 1);
      size_t rs = (size_t)(m * 7919 + c * 31 + r->peer * 3) % (r->maxsize + 1);
      fill(sb, ss, (uint32_t)(r->rank * 100000 + c * 1000 + m));
      void *sreq = NULL, *rreq = NULL;
      while (!sreq) OK(net_isend(r->n, r->sc[c], sb, ss, r->rank, smh, &sreq));
      while (!rreq) OK(net_irecv(r->n, r->rc[c], rb, r->maxsize + 512, r->peer, rmh, &rreq));
      int sd = 0, rd = 0, sz = 0;
      uint64_t t0 = now_ns();
      while (!sd || !rd) {
        if (!sd) OK(net_test(r->n, sreq, &sd, &sz));
        if (!rd) {
          OK(net_test(r->n, rreq, &rd, &sz));
          if (rd) {
            CHECK((size_t)sz == rs, "rank %d ch %d msg %d size %d != %zu", r->rank, c, m, sz, rs);
            size_t bad = verify(rb, rs, (uint32_t)(r->peer * 100000 + c * 1000 + m));
            CHECK(!bad, "rank %d ch %d msg %d byte %zu differs", r->rank, c, m, bad - 1);
          }
        }
        CHECK(now_ns() - t0 < 20000000000ull, "rank %d stuck", r->rank);
      }
    }
    free(sb);
    free(rb);
  }
  return NULL;
}

static int run_rank(int rank, int nch, int msgs, size_t maxsize, int wfd, int rfd, int version) {
  void *dl;
  net_t n = load(version, &dl);
  OK(net_init(&n, 0x7777));
  rank_t r = {.n = &n, .rank = rank, .peer = 1 - rank, .nch = nch, .msgs = msgs,
              .maxsize = maxsize, .wfd = wfd, .rfd = rfd};
  pthread_t svc, prog;
  pthread_create(&svc, NULL, service_thread, &r);
  pthread_join(svc, NULL);
  const char *dport = getenv("C4_EXPECT_DPORT");
  if (dport) { /* every data flow to or from this process uses the host's fixed port */
    uint16_t p = (uint16_t)atoi(dport);
    int to = 0, from = 0;
    sockinfo si[256];
    int k = list_sockets(si, 256);
    for (int i = 0; i < k; i++) { to += si[i].rport == p; from += si[i].lport == p; }
    CHECK(to == nch && from == nch, "rank %d: %d sockets to port %u and %d on it, want %d each",
          rank, to, p, from, nch);
  }
  pthread_create(&prog, NULL, progress_thread, &r);
  pthread_join(prog, NULL);
  for (int c = 0; c < nch; c++) {
    OK(net_close_send(&n, r.sc[c]));
    OK(net_close_recv(&n, r.rc[c]));
  }
  OK(net_finalize(&n));
  return 0;
}

/* Fork the two ranks while this process has no other thread (a fork while, say, a fake-agent
 * thread holds the allocator's lock deadlocks the child under ASan); `before_go` then starts
 * whatever the parent runs beside them, and only then are the ranks let go. */
typedef int (*rank_fn)(int rank, int wfd, int rfd);
static void fork_ranks(rank_fn fn, void (*before_go)(void), pid_t kids[2]) {
  int p01[2], p10[2], go[2];
  CHECK(pipe(p01) == 0 && pipe(p10) == 0 && pipe(go) == 0, "pipe");
  for (int rank = 0; rank < 2; rank++) {
    kids[rank] = fork();
    if (kids[rank] == 0) {
      alarm(60);
      char b;
      close(go[1]);
      CHECK(read(go[0], &b, 1) == 1, "no go");
      exit(fn(rank, rank == 0 ? p01[1] : p10[1], rank == 0 ? p10[0] : p01[0]));
    }
  }
  if (before_go) before_go();
  CHECK(write(go[1], "gg", 2) == 2, "go");
  close(go[1]);
}

static int tw_nch, tw_msgs, tw_version;
static size_t tw_maxsize;
static int tworank_fn(int rank, int wfd, int rfd) {
  return run_rank(rank, tw_nch, tw_msgs, tw_maxsize, wfd, rfd, tw_version);
}

static int scen_tworank_with(int nch, int msgs, size_t maxsize, int version, void (*before_go)(void)) {
  tw_nch = nch; tw_msgs = msgs; tw_maxsize = maxsize; tw_version = version;
  pid_t kids[2];
  fork_ranks(tworank_fn, before_go, kids);
  int ok = 1;
  for (int rank = 0; rank < 2; rank++) {
    int st;
    waitpid(kids[rank], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      ok = 0;
      fprintf(stderr, "rank %d: %s %d\n", rank, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
  }
  CHECK(ok, "a rank failed");
  printf("PASS tworank (2 processes, %d channels x %d messages each way, data verified)\n", nch, msgs);
  return 0;
}

static int scen_tworank(int nch, int msgs, size_t maxsize, int version) {
  return scen_tworank_with(nch, msgs, maxsize, version, NULL);
}

/* ---------------- multi-socket weights, checked with the kernel's own counters ---------------- */

/* Find this process's TCP sockets and read their byte counters from TCP_INFO: an account of
 * what crossed each socket that does not rely on the plugin's word. */
static int list_sockets(sockinfo *out, int cap) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) && n < cap) {
    int fd = atoi(e->d_name);
    if (fd <= 2) continue;
    struct sockaddr_in6 me, peer;
    socklen_t ml = sizeof me, pl = sizeof peer;
    int type = 0;
    socklen_t tl = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) continue;
    if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 || getpeername(fd, (struct sockaddr *)&peer, &pl) != 0) continue;
    struct tcp_info ti;
    socklen_t il = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &il) != 0) continue;
    out[n++] = (sockinfo){ntohs(me.sin6_port), ntohs(peer.sin6_port), ti.tcpi_bytes_acked,
                          ti.tcpi_bytes_received,
                          ti.tcpi_bytes_sent - ti.tcpi_bytes_retrans + ti.tcpi_notsent_bytes};
  }
  if (d) closedir(d);
  return n;
}

static uint64_t acked_from(uint16_t lport) {
  sockinfo s[256];
  int k = list_sockets(s, 256);
  for (int i = 0; i < k; i++) if (s[i].lport == lport) return s[i].acked;
  return UINT64_MAX;
}

static void check_split(const uint16_t *ports, const uint64_t *before, const double *w, int k,
                        size_t total, const char *what) {
  for (int i = 0; i < k; i++) {
    uint64_t now = acked_from(ports[i]);
    CHECK(now != UINT64_MAX, "%s: no socket bound to assigned port %u", what, ports[i]);
    double got = (double)(now - before[i]), want = w[i] * (double)total;
    CHECK(got >= want && got <= want + 0.01 * (double)total + 65536,
          "%s: socket %d (port %u) carried %.0f bytes, weight %.2f of %zu wants %.0f", what, i,
          ports[i], got, w[i], total, want);
  }
}

static char agent_path[108];
static void agent_path_init(void) {
  snprintf(agent_path, sizeof agent_path, "/tmp/c4-fake-agent-%d.sock", (int)getpid());
  setenv("C4_AGENT_SOCKET", agent_path, 1);
}

static int scen_weights(void) {
  agent_path_init();
  uint16_t base = (uint16_t)(20000 + (getpid() % 400) * 32);
  agent_cfg ac = {.mode = AGENT_OK, .nflows = 3, .base_port = base,
                  .weight_ppm = {500000, 300000, 200000}};
  CHECK(agent_start(agent_path, &ac) == 0, "agent start");
  void *dl;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0xfeed));
  /* Two connections in one process share the acceptor (one listen port) yet stay apart. */
  char h1[NCCL_NET_HANDLE_MAXSIZE], h2[NCCL_NET_HANDLE_MAXSIZE];
  void *l1, *l2, *s1 = NULL, *s2 = NULL, *r1 = NULL, *r2 = NULL;
  OK(net_listen(&n, 0, h1, &l1));
  OK(net_listen(&n, 0, h2, &l2));
  CHECK(!memcmp(h1 + 6, h2 + 6, 2), "two listen comms should share the process's port");
  uint64_t t0 = now_ns();
  while (!s1 || !s2 || !r1 || !r2) {
    if (!s2) OK(net_connect(&n, 0, h2, &s2)); /* connect in the opposite order on purpose */
    if (!s1 && s2) OK(net_connect(&n, 0, h1, &s1));
    if (!r1) OK(net_accept(&n, l1, &r1));
    if (!r2) OK(net_accept(&n, l2, &r2));
    sched_yield();
    CHECK(now_ns() - t0 < 5000000000ull, "set-up stuck");
  }
  OK(net_close_listen(&n, l1));
  OK(net_close_listen(&n, l2));
  /* s2 connected first: conn_index 0 -> ports base..base+2; s1 got index 1 -> base+16.. */
  uint16_t p0[3] = {base, (uint16_t)(base + 1), (uint16_t)(base + 2)};
  uint16_t p1[3] = {(uint16_t)(base + 16), (uint16_t)(base + 17), (uint16_t)(base + 18)};
  uint64_t b0[3], b1[3];
  for (int i = 0; i < 3; i++) { b0[i] = acked_from(p0[i]); b1[i] = acked_from(p1[i]); }
  for (int i = 0; i < 3; i++) CHECK(b0[i] != UINT64_MAX && b1[i] != UINT64_MAX, "assigned port %d not bound", i);
  xfer_t x = {&n, s2, r2, 64, 1 << 20, 3, 0};
  size_t total = xfer(&x);
  sleep_ms(20); /* let the last ACKs arrive */
  double w[3] = {0.5, 0.3, 0.2};
  check_split(p0, b0, w, 3, total, "weights 0.5/0.3/0.2");
  xfer_t y = {&n, s1, r1, 16, 1 << 20, 4, 0};
  size_t t1 = xfer(&y);
  sleep_ms(20);
  check_split(p1, b1, w, 3, t1, "second connection");
  /* New weights for the first connection apply from the next message. */
  c4p_lookup lk[64];
  int nl = agent_lookups(lk, 64);
  CHECK(nl >= 2, "agent saw %d lookups", nl);
  c4p_assign upd = {.req_id = 0, .version = 2, .comm_id = 0xfeed, .local = lk[0].local,
                    .remote = lk[0].remote, .conn_index = 0, .status = C4P_OK, .nflows = 3,
                    .src_rank = C4P_NO_RANK, .dst_rank = C4P_NO_RANK};
  uint32_t nw[3] = {100000, 100000, 800000};
  for (int i = 0; i < 3; i++) upd.flows[i] = (c4p_flow){.sport = p0[i], .weight_ppm = nw[i]};
  CHECK(agent_push(&upd) == 0, "push");
  sleep_ms(50); /* the background thread polls the agent socket every 2 ms */
  for (int i = 0; i < 3; i++) b0[i] = acked_from(p0[i]);
  xfer_t z = {&n, s2, r2, 64, 1 << 20, 5, 0};
  total = xfer(&z);
  sleep_ms(20);
  double w2[3] = {0.1, 0.1, 0.8};
  check_split(p0, b0, w2, 3, total, "updated weights 0.1/0.1/0.8");
  /* Live send connections ask again every C4_REFRESH_MS with the version they run on, also
   * when the watchdog's report falls on the same tick (both periods are 100 ms here). */
  sleep_ms(350);
  static c4p_lookup all[4096];
  int na = agent_lookups(all, 4096), refreshed = 0;
  for (int i = 0; i < na; i++)
    if (all[i].req_id == 0 && all[i].conn_index == 0 && all[i].version == 2) refreshed++;
  CHECK(refreshed >= 2, "%d refreshes of connection 0 on version 2 in 350 ms (every 100 ms)", refreshed);
  /* New ports apply from the next connection: the controller moved this pair's flows. */
  agent_cfg moved = ac;
  moved.base_port = (uint16_t)(base + 100);
  moved.nflows = 2;
  moved.weight_ppm[0] = moved.weight_ppm[1] = 500000;
  agent_stop();
  CHECK(agent_start(agent_path, &moved) == 0, "agent restart");
  void *s3, *r3;
  connect_pair(&n, 0, &s3, &r3); /* conn_index 2 */
  uint16_t p3[2] = {(uint16_t)(base + 100 + 32), (uint16_t)(base + 100 + 33)};
  uint64_t b3[2] = {acked_from(p3[0]), acked_from(p3[1])};
  CHECK(b3[0] != UINT64_MAX && b3[1] != UINT64_MAX, "the next connection did not use the new ports");
  xfer_t v = {&n, s3, r3, 16, 1 << 20, 6, 0};
  size_t t3 = xfer(&v);
  sleep_ms(20);
  double w3[2] = {0.5, 0.5};
  check_split(p3, b3, w3, 2, t3, "new ports on the next connection");
  OK(net_close_send(&n, s3)); OK(net_close_recv(&n, r3));
  OK(net_close_send(&n, s1)); OK(net_close_recv(&n, r1));
  OK(net_close_send(&n, s2)); OK(net_close_recv(&n, r2));
  OK(net_finalize(&n)); /* flushes final connection records */
  sleep_ms(50);
  /* The plugin's own account (CONN records) must agree with the assignment. */
  static c4p_conn cs[4096];
  int nc = agent_conns(cs, 4096), finals = 0;
  for (int i = 0; i < nc; i++) {
    if (!(cs[i].flags & C4P_CONN_CLOSED) || cs[i].dir != C4P_SEND || cs[i].conn_index != 0) continue;
    finals++;
    CHECK(cs[i].nsocks == 3 && cs[i].socks[0].sport == p0[0] && cs[i].socks[2].sport == p0[2], "conn record ports");
    CHECK(cs[i].socks[2].weight_ppm == 800000, "conn record weight %u", cs[i].socks[2].weight_ppm);
    CHECK(cs[i].peer_rank == 0 && cs[i].msgs == 128 && cs[i].t_last_us >= cs[i].t_first_us && cs[i].t_first_us > 0, "conn record counters");
    uint64_t sum = 0, span = cs[i].t_last_us - cs[i].t_first_us;
    for (int k = 0; k < 3; k++) {
      sum += cs[i].socks[k].bytes;
      CHECK(cs[i].socks[k].net_us > 0 && cs[i].socks[k].net_us <= cs[i].net_us &&
                cs[i].socks[k].t_last_us >= cs[i].t_first_us && cs[i].socks[k].t_last_us <= cs[i].t_last_us,
            "socket %d: net %llu us of the connection's %llu, last %llu", k,
            (unsigned long long)cs[i].socks[k].net_us, (unsigned long long)cs[i].net_us,
            (unsigned long long)cs[i].socks[k].t_last_us);
    }
    CHECK(sum == cs[i].bytes, "per-socket bytes %llu != %llu", (unsigned long long)sum, (unsigned long long)cs[i].bytes);
    CHECK((cs[i].flags & C4P_CONN_NET) && cs[i].net_us > 0 && cs[i].net_us <= span + 1000,
          "net time %llu us over a %llu us span", (unsigned long long)cs[i].net_us, (unsigned long long)span);
  }
  CHECK(finals == 1, "expected one final send record for connection 0, got %d", finals);
  int recv_finals = 0;
  for (int i = 0; i < nc; i++)
    if ((cs[i].flags & C4P_CONN_CLOSED) && cs[i].dir == C4P_RECV) {
      recv_finals++;
      CHECK(cs[i].comm_id == 0xfeed && cs[i].nsocks >= 2 && cs[i].bytes > 0 && cs[i].peer_rank == 0,
            "receive-side record: comm %llx, %d sockets", (unsigned long long)cs[i].comm_id, cs[i].nsocks);
    }
  CHECK(recv_finals == 3, "expected 3 final receive records, got %d", recv_finals);
  c4p_stats st;
  CHECK(agent_last_stats(&st) && st.lookups >= 2 && st.bind_fallbacks == 0, "stats");
  agent_stop();
  printf("PASS weights (3 sockets/connection on assigned ports, split 0.5/0.3/0.2 then 0.1/0.1/0.8 by TCP_INFO; new ports on the next connection; telemetry agrees)\n");
  return 0;
}

/* ---------------- agent faults ---------------- */
static int assigned_ports_used(uint16_t base) {
  sockinfo s[256];
  int k = list_sockets(s, 256), used = 0;
  for (int i = 0; i < k; i++) if (s[i].lport >= base && s[i].lport < base + 64) used++;
  return used;
}

static uint64_t setup_and_move(net_t *n, uint32_t seed, uint64_t *setup_ns) {
  void *sc, *rc;
  uint64_t t0 = now_ns();
  connect_pair(n, 0, &sc, &rc);
  if (setup_ns) *setup_ns = now_ns() - t0;
  xfer_t x = {n, sc, rc, 40, 100000, seed, 0};
  uint64_t b = xfer(&x);
  OK(net_close_send(n, sc));
  OK(net_close_recv(n, rc));
  return b;
}

static int scen_fault(const char *kind) {
  agent_path_init();
  uint16_t base = (uint16_t)(61000 + (getpid() % 68) * 64); /* above the ephemeral range */
  agent_cfg ac = {.mode = AGENT_OK, .nflows = 2, .base_port = base, .weight_ppm = {500000, 500000}};
  int with_agent = 1;
  if (!strcmp(kind, "absent")) {
    with_agent = 0;
    setenv("C4_AGENT_SOCKET", "/nonexistent/c4/agent.sock", 1);
  } else if (!strcmp(kind, "slow")) {
    ac.mode = AGENT_SLOW; ac.slow_ms = 300;
    setenv("C4_LOOKUP_TIMEOUT_MS", "20", 1);
  } else if (!strcmp(kind, "garbage")) {
    ac.mode = AGENT_GARBAGE;
    setenv("C4_LOOKUP_TIMEOUT_MS", "20", 1);
  } else if (!strcmp(kind, "dies")) {
    ac.mode = AGENT_DIE_AFTER; ac.die_after = 1;
    setenv("C4_WATCHDOG_MS", "50", 1);
  } else if (!strcmp(kind, "busyport")) {
    /* The agent assigns a port another socket already listens on, and port 0 ("any"). */
    int busy = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    CHECK(busy >= 0 && bind(busy, (struct sockaddr *)&sa, sl) == 0 && listen(busy, 1) == 0 &&
          getsockname(busy, (struct sockaddr *)&sa, &sl) == 0, "busy socket");
    ac.ports[0] = ntohs(sa.sin_port);
    ac.ports[1] = 0;
    setenv("C4_SHIM_ADDR", "127.0.0.1", 1);
  } else {
    fail("unknown fault %s", kind);
  }
  if (with_agent) CHECK(agent_start(agent_path, &ac) == 0, "agent start");
  void *dl;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0xfa017));
  uint64_t setup_ns = 0;
  uint64_t b = setup_and_move(&n, 11, &setup_ns);
  if (!strcmp(kind, "absent")) {
    /* Absent agent: one failed sendto, no deadline (the set-up-time figure is in bench/). */
    CHECK(setup_ns < 200000000ull, "set-up took %llu ns", (unsigned long long)setup_ns);
  } else if (!strcmp(kind, "slow") || !strcmp(kind, "garbage")) {
    CHECK(setup_ns < 250000000ull, "set-up waited %llu ns, past the 20 ms deadline", (unsigned long long)setup_ns);
  }
  if (!strcmp(kind, "dies")) {
    /* The first lookup was answered; the agent is gone now. */
    sleep_ms(100);
    uint64_t b2 = setup_and_move(&n, 12, NULL); /* default ports, still works */
    b += b2;
    sleep_ms(150); /* records for the agent are made meanwhile: they wait in the ring */
    CHECK(agent_start(agent_path, &(agent_cfg){.mode = AGENT_OK}) == 0, "agent restart");
    c4p_stats st = {0};
    static c4p_conn cs[4096];
    int kept = 0;
    uint64_t t0 = now_ns();
    while (!kept && now_ns() - t0 < 3000000000ull) {
      sleep_ms(20);
      int nc = agent_conns(cs, 4096);
      for (int i = 0; i < nc; i++) /* the final record of the connection made while it was dead */
        kept |= cs[i].dir == C4P_SEND && cs[i].conn_index == 1 && (cs[i].flags & C4P_CONN_CLOSED);
    }
    CHECK(kept, "records made while the agent was away did not reach it once it was back");
    t0 = now_ns();
    while (!agent_last_stats(&st) && now_ns() - t0 < 3000000000ull) sleep_ms(20);
    CHECK(st.send_drops == 0 && st.ring_drops == 0, "records lost while the agent restarted: %llu sent, %llu ring",
          (unsigned long long)st.send_drops, (unsigned long long)st.ring_drops);
    CHECK(st.lookups >= 1, "lookup count");
  } else if (with_agent) {
    sleep_ms(400); /* the slow agent answers late; the answer must be ignored */
    CHECK(assigned_ports_used(base) == 0, "late or garbage reply was applied");
  }
  OK(net_finalize(&n));
  if (!strcmp(kind, "busyport")) {
    sleep_ms(100);
    c4p_stats st;
    static c4p_conn cs[4096];
    int nc = agent_conns(cs, 4096), seen = 0;
    for (int i = 0; i < nc; i++) {
      if (cs[i].dir != C4P_SEND || !(cs[i].flags & C4P_CONN_CLOSED)) continue;
      seen++;
      CHECK(cs[i].nsocks == 2 && cs[i].socks[0].sport != ac.ports[0] && cs[i].socks[0].sport &&
                cs[i].socks[1].sport && cs[i].socks[0].bytes && cs[i].socks[1].bytes,
            "busy/zero ports: %d sockets, ports %u/%u", cs[i].nsocks, cs[i].socks[0].sport, cs[i].socks[1].sport);
    }
    CHECK(seen == 1, "final connection record missing");
    CHECK(agent_last_stats(&st) && st.bind_fallbacks >= 1, "bind fallback not counted");
  }
  if (!strcmp(kind, "slow") || !strcmp(kind, "garbage")) {
    c4p_stats st;
    sleep_ms(100);
    CHECK(agent_last_stats(&st) && st.lookup_timeouts >= 1, "lookup timeouts not counted");
  }
  if (with_agent) agent_stop();
  printf("PASS fault-%s (NCCL calls succeeded, %llu bytes verified, set-up %.2f ms)\n", kind,
         (unsigned long long)b, (double)setup_ns / 1e6);
  return 0;
}

/* Peer closes: in-flight requests must fail with an error code, never hang; closes succeed. */
static int scen_peer_close(void) {
  setenv("C4_AGENT_SOCKET", "off", 1);
  void *dl;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0xc105e));
  void *sc, *rc, *mh, *req = NULL;
  static uint8_t buf[8 << 20];
  connect_pair(&n, 0, &sc, &rc);
  OK(net_close_recv(&n, rc));
  uint64_t t0 = now_ns();
  ncclResult_t res = ncclSuccess;
  OK(net_regmr(&n, sc, buf, sizeof buf, &mh));
  while (res == ncclSuccess && now_ns() - t0 < 5000000000ull) {
    req = NULL;
    res = net_isend(&n, sc, buf, sizeof buf, 0, mh, &req);
    int done = 0, sz;
    while (res == ncclSuccess && req && !done && now_ns() - t0 < 5000000000ull)
      res = net_test(&n, req, &done, &sz);
  }
  CHECK(res == ncclRemoteError, "sending to a closed peer gave %d, want RemoteError", res);
  OK(net_close_send(&n, sc));
  connect_pair(&n, 0, &sc, &rc);
  OK(net_close_send(&n, sc));
  res = net_irecv(&n, rc, buf, sizeof buf, 0, mh, &req);
  int done = 0, sz;
  t0 = now_ns();
  while (res == ncclSuccess && !done && now_ns() - t0 < 5000000000ull) res = net_test(&n, req, &done, &sz);
  CHECK(res == ncclRemoteError && !done, "receiving from a closed peer gave %d", res);
  OK(net_close_recv(&n, rc));
  OK(net_finalize(&n));
  printf("PASS peer-close (in-flight requests report RemoteError; closes succeed)\n");
  return 0;
}

/* ---------------- profiler ---------------- */
typedef struct {
  int version;
  void *tab, *ctx;
} prof_t;

static void *pstart(prof_t *p, uint64_t type, void *parent, int rank, void (*fill_u)(void *u, void *arg), void *arg) {
  void *eh = NULL;
  if (p->version == 6) {
    ncclProfilerEventDescr_v6_t d;
    memset(&d, 0, sizeof d);
    d.type = type; d.parentObj = parent; d.rank = rank;
    fill_u(&d.coll, arg);
    ((ncclProfiler_v6_t *)p->tab)->startEvent(p->ctx, &eh, &d);
  } else if (p->version == 5) {
    ncclProfilerEventDescr_v5_t d;
    memset(&d, 0, sizeof d);
    d.type = type; d.parentObj = parent; d.rank = rank;
    fill_u(&d.coll, arg);
    ((ncclProfiler_v5_t *)p->tab)->startEvent(p->ctx, &eh, &d);
  } else {
    ncclProfilerEventDescr_v4_t d;
    memset(&d, 0, sizeof d);
    d.type = (uint8_t)type; d.parentObj = parent; d.rank = rank;
    fill_u(&d.coll, arg);
    ((ncclProfiler_v4_t *)p->tab)->startEvent(p->ctx, &eh, &d);
  }
  return eh;
}
static void pstop(prof_t *p, void *eh) { ((ncclProfiler_v5_t *)p->tab)->stopEvent(eh); }
static void precord(prof_t *p, void *eh, int state, size_t trans) {
  ncclProfilerEventStateArgs_t a = {.proxyStep = {trans}};
  ((ncclProfiler_v5_t *)p->tab)->recordEventState(eh, state, &a);
}

/* Descriptor unions are laid out identically in v4 and v5 up to coll.proto; fill through v5's. */
typedef ncclProfilerEventDescr_v5_t D5;
static uint8_t coll_nchannels = 2; /* NCCL starts one KernelCh event per channel */
static void fill_coll(void *u, void *arg) {
  D5 *d = (D5 *)((char *)u - offsetof(D5, coll));
  d->coll.seqNumber = (uint64_t)(uintptr_t)arg;
  d->coll.func = "AllReduce";
  d->coll.datatype = "ncclFloat32";
  d->coll.count = 1024;
  d->coll.nChannels = coll_nchannels;
}
typedef struct { int peer, is_send; } popt;
static void fill_proxy(void *u, void *arg) {
  D5 *d = (D5 *)((char *)u - offsetof(D5, coll));
  popt *o = arg;
  d->proxyOp.pid = getpid();
  d->proxyOp.channelId = 0;
  d->proxyOp.peer = o->peer;
  d->proxyOp.nSteps = 4;
  d->proxyOp.chunkSize = 1024;
  d->proxyOp.isSend = o->is_send;
}
static void fill_none(void *u, void *arg) { (void)u; (void)arg; }

typedef struct { prof_t *p; void *colls[16]; int n; } replay_t;

/* The proxy thread's share: ProxyOps and their steps, then the kernel channels. */
static void *proxy_side(void *arg) {
  replay_t *r = arg;
  for (int i = 0; i < r->n; i++) {
    popt snd = {3, 1}, rcv = {1, 0};
    void *os = pstart(r->p, ncclProfileProxyOp, r->colls[i], 2, fill_proxy, &snd);
    void *orr = pstart(r->p, ncclProfileProxyOp, r->colls[i], 2, fill_proxy, &rcv);
    CHECK(os && orr, "no proxy op handle");
    for (int s = 0; s < 4; s++) {
      void *st = pstart(r->p, ncclProfileProxyStep, os, 2, fill_none, NULL);
      precord(r->p, st, ncclProfilerProxyStepSendWait, 1024);
      pstop(r->p, st);
      void *rt = pstart(r->p, ncclProfileProxyStep, orr, 2, fill_none, NULL);
      precord(r->p, rt, ncclProfilerProxyStepRecvWait, 1024);
      precord(r->p, rt, ncclProfilerProxyStepRecvFlushWait, 1024); /* same step: counted once */
      pstop(r->p, rt);
    }
    void *k0 = pstart(r->p, ncclProfileKernelCh, r->colls[i], 2, fill_none, NULL);
    void *k1 = pstart(r->p, ncclProfileKernelCh, r->colls[i], 2, fill_none, NULL);
    pstop(r->p, os);
    pstop(r->p, orr);
    pstop(r->p, k0);
    pstop(r->p, k1);
  }
  return NULL;
}

static int scen_profiler(int version) {
  agent_path_init();
  setenv("C4_WATCHDOG_MS", "100", 1);
  agent_cfg ac = {.mode = AGENT_OK};
  CHECK(agent_start(agent_path, &ac) == 0, "agent start");
  void *dl = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  CHECK(dl, "dlopen");
  prof_t p = {.version = version};
  char sym[32];
  snprintf(sym, sizeof sym, "ncclProfiler_v%d", version);
  p.tab = dlsym(dl, sym);
  CHECK(p.tab, "%s missing", sym);
  static int mask = 0;
  uint64_t hash = 0x7f3a9c01ull;
  if (version >= 5) OK(((ncclProfiler_v5_t *)p.tab)->init(&p.ctx, hash, &mask, "c", 2, 4, 2, NULL));
  else OK(((ncclProfiler_v4_t *)p.tab)->init(&p.ctx, &mask, "c", hash, 2, 4, 2, NULL));
  CHECK((mask & (ncclProfileColl | ncclProfileProxyOp | ncclProfileKernelCh)) ==
            (ncclProfileColl | ncclProfileProxyOp | ncclProfileKernelCh), "mask %x", mask);
  CHECK(!(mask & (ncclProfileCeColl | ncclProfileCeSync | ncclProfileCeBatch)), "asked for copy-engine events");
  if (version == 6) /* copy-engine collectives get no handle: nothing to complete, nothing sent */
    CHECK(pstart(&p, ncclProfileCeColl, NULL, 2, fill_coll, (void *)(uintptr_t)5) == NULL, "CE handle");
  /* App thread: 10 collectives enqueued (Coll stop = enqueued, not complete). */
  replay_t r = {.p = &p, .n = 10};
  for (int i = 0; i < r.n; i++) {
    r.colls[i] = pstart(&p, ncclProfileColl, NULL, 2, fill_coll, (void *)(uintptr_t)(100 + i));
    CHECK(r.colls[i], "no coll handle");
    pstop(&p, r.colls[i]);
  }
  pthread_t th;
  pthread_create(&th, NULL, proxy_side, &r);
  pthread_join(th, NULL);
  /* One collective that never completes: its proxy op starts and stays. */
  void *hung = pstart(&p, ncclProfileColl, NULL, 2, fill_coll, (void *)(uintptr_t)999);
  pstop(&p, hung);
  popt snd = {3, 1};
  void *hop = pstart(&p, ncclProfileProxyOp, hung, 2, fill_proxy, &snd);
  sleep_ms(450);
  static c4p_coll cs[4096];
  int nc = agent_colls(cs, 4096), complete = 0, inflight = 0;
  uint32_t seen = 0;
  for (int i = 0; i < nc; i++) {
    c4p_coll *c = &cs[i];
    CHECK(c->comm_hash == hash && c->rank == 2 && c->nranks == 4 && c->op == C4P_OP_ALLREDUCE && c->bytes == 4096,
          "record identity: hash %llx rank %d/%d op %d bytes %llu", (unsigned long long)c->comm_hash, c->rank, c->nranks, c->op, (unsigned long long)c->bytes);
    if (c->seq == 999) {
      CHECK(c->flags & C4P_COLL_INFLIGHT && c->t_end_us == 0 && c->npeers == 1 && !c->peers[0].done && c->peers[0].peer == 3, "in-flight record");
      inflight++;
      continue;
    }
    CHECK(c->seq >= 100 && c->seq < 110 && c->t_end_us >= c->t_start_us && c->t_start_us > 1600000000000000ull, "completed record times/seq");
    CHECK(c->npeers == 2, "peers %d", c->npeers);
    for (int k = 0; k < 2; k++) {
      c4p_peer *q = &c->peers[k];
      int want_peer = q->dir == C4P_SEND ? 3 : 1;
      CHECK(q->peer == want_peer && q->bytes == 4096 && q->done && q->t_last_us >= q->t_first_us && q->t_first_us >= c->t_start_us,
            "peer %d dir %d bytes %llu done %d", q->peer, q->dir, (unsigned long long)q->bytes, q->done);
    }
    seen |= 1u << (c->seq - 100);
    complete++;
  }
  CHECK(complete == 10 && seen == 0x3ff, "completed records %d (mask %x)", complete, seen);
  CHECK(inflight >= 2, "watchdog re-reported the hung collective %d times in 450 ms at 100 ms", inflight);
  pstop(&p, hop);
  OK(((ncclProfiler_v5_t *)p.tab)->finalize(p.ctx));
  agent_stop();
  printf("PASS profiler v%d (10 collectives with per-peer bytes, hung one re-reported %d times)\n", version, inflight);
  return 0;
}

/* Ring overflow: a tiny ring drained rarely; every record is either delivered or counted. */
static int scen_overflow(void) {
  agent_path_init();
  setenv("C4_RING_SLOTS", "8", 1);
  setenv("C4_DRAIN_US", "400000", 1);
  CHECK(agent_start(agent_path, &(agent_cfg){.mode = AGENT_OK}) == 0, "agent");
  void *dl = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  prof_t p = {.version = 5, .tab = dlsym(dl, "ncclProfiler_v5")};
  static int mask;
  OK(((ncclProfiler_v5_t *)p.tab)->init(&p.ctx, 42, &mask, "c", 1, 2, 0, NULL));
  mask &= ~ncclProfileKernelCh; /* completion by ProxyOp alone */
  int total = 200;
  for (int i = 0; i < total; i++) {
    void *c = pstart(&p, ncclProfileColl, NULL, 0, fill_coll, (void *)(uintptr_t)i);
    pstop(&p, c);
    popt o = {1, 1};
    void *op = pstart(&p, ncclProfileProxyOp, c, 0, fill_proxy, &o);
    pstop(&p, op);
  }
  OK(((ncclProfiler_v5_t *)p.tab)->finalize(p.ctx)); /* flush: drains ring, sends stats */
  sleep_ms(100);
  c4p_stats st;
  static c4p_coll cs[4096];
  int got = agent_colls(cs, 4096);
  CHECK(agent_last_stats(&st), "no stats");
  CHECK(st.ring_drops > 0, "ring of 8 never overflowed");
  CHECK((uint64_t)got + st.ring_drops == (uint64_t)total, "delivered %d + dropped %llu != %d", got,
        (unsigned long long)st.ring_drops, total);
  agent_stop();
  printf("PASS overflow (%d delivered + %llu dropped and counted = %d)\n", got, (unsigned long long)st.ring_drops, total);
  return 0;
}


/* ---------------- the host's fixed port, owned by the agent ---------------- */
static uint16_t free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(s, (struct sockaddr *)&a, &l) == 0, "free port");
  close(s);
  return ntohs(a.sin_port);
}

/* ok: the agent hands every socket over, so flows go to the fixed port; refuse: the agent
 * answers "C4NO" and absent: nothing listens there; both fall back to the listener's own
 * port, counted once per connection, and the data still flows. */
static int scen_handoff(const char *mode) {
  agent_path_init();
  uint16_t fixed = free_port(), base = (uint16_t)(61000 + (getpid() % 280) * 16);
  char pbuf[16];
  snprintf(pbuf, sizeof pbuf, "%u", fixed);
  setenv("C4_SHIM_PORT", pbuf, 1);
  setenv("C4_LOOKUP_TIMEOUT_MS", "2000", 1);
  int ok = !strcmp(mode, "ok"), refuse = !strcmp(mode, "refuse");
  agent_cfg ac = {.mode = AGENT_OK, .nflows = 2, .base_port = base, .weight_ppm = {500000, 500000},
                  .handoff_port = ok || refuse ? fixed : 0, .handoff_refuse = refuse};
  CHECK(agent_start(agent_path, &ac) == 0, "agent start");
  void *dl;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0x4a0d));
  char h[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *sc = NULL, *rc = NULL;
  OK(net_listen(&n, 0, h, &lc));
  c4p_handle hd;
  CHECK(c4p_decode_handle((uint8_t *)h, &hd) == 0 && hd.port == fixed && hd.fallback_port &&
            hd.fallback_port != fixed, "handle ports %u/%u, fixed %u", hd.port, hd.fallback_port, fixed);
  uint64_t t0 = now_ns();
  while (!sc || !rc) {
    if (!sc) OK(net_connect(&n, 0, h, &sc));
    if (!rc) OK(net_accept(&n, lc, &rc));
    sched_yield();
    CHECK(now_ns() - t0 < 10000000000ull, "set-up stuck");
  }
  OK(net_close_listen(&n, lc));
  uint16_t want = ok ? fixed : hd.fallback_port;
  sockinfo si[256];
  int k = list_sockets(si, 256), to = 0;
  for (int i = 0; i < k; i++)
    if (si[i].lport == base || si[i].lport == base + 1) {
      CHECK(si[i].rport == want, "assigned port %u goes to %u, want %u", si[i].lport, si[i].rport, want);
      to++;
    }
  CHECK(to == 2, "%d sockets on the assigned ports", to);
  xfer_t x = {&n, sc, rc, 40, 200000, 11, 0};
  size_t b = xfer(&x);
  OK(net_close_send(&n, sc));
  OK(net_close_recv(&n, rc));
  OK(net_finalize(&n));
  sleep_ms(50);
  c4p_stats st;
  CHECK(agent_last_stats(&st), "no stats");
  CHECK(st.route_fallbacks == (uint64_t)(ok ? 0 : 1) && st.handoffs == (uint64_t)(ok ? 2 : 0),
        "route fallbacks %llu, hand-offs %llu", (unsigned long long)st.route_fallbacks,
        (unsigned long long)st.handoffs);
  CHECK(agent_handoffs() == (ok || refuse ? 2 : 0), "agent saw %d sockets", agent_handoffs());
  agent_stop();
  printf("PASS handoff-%s (flows to port %u, %zu bytes verified, %llu fallback)\n", mode, want, b,
         (unsigned long long)st.route_fallbacks);
  return 0;
}

/* Two NCCL processes on one address: both listen "on" the fixed port through the agent, so
 * every flow between them has the same destination port (run_rank checks C4_EXPECT_DPORT). */
static uint16_t ht_fixed;
static void ht_start_agent(void) {
  agent_cfg ac = {.mode = AGENT_OK, .nflows = 0, .handoff_port = ht_fixed};
  CHECK(agent_start(agent_path, &ac) == 0, "agent start");
}

static int scen_handoff_tworank(void) {
  agent_path_init();
  uint16_t fixed = ht_fixed = free_port();
  char pbuf[16];
  snprintf(pbuf, sizeof pbuf, "%u", fixed);
  setenv("C4_SHIM_PORT", pbuf, 1);
  setenv("C4_EXPECT_DPORT", pbuf, 1);
  scen_tworank_with(4, 20, 100000, 0, ht_start_agent);
  CHECK(agent_handoffs() == 8, "agent handed over %d sockets, want 8", agent_handoffs());
  agent_stop();
  printf("PASS handoff-tworank (2 processes, 8 flows, all to fixed port %u)\n", fixed);
  return 0;
}

/* More sockets waiting for their hello than the acceptor tracks: the extra ones wait in the
 * kernel's backlog (not closed), and every connection completes once the hellos arrive. */
static int scen_backlog(void) {
  setenv("C4_AGENT_SOCKET", "off", 1);
  setenv("C4_SHIM_PORT", "0", 1);
  enum { NL = 20, NS = 16 };
  void *dl;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0xbac));
  static char hs[NL][NCCL_NET_HANDLE_MAXSIZE];
  void *lc[NL], *rc[NL] = {0};
  int fds[NL][NS];
  for (int l = 0; l < NL; l++) OK(net_listen(&n, 0, hs[l], &lc[l]));
  for (int l = 0; l < NL; l++) {
    c4p_handle hd;
    CHECK(c4p_decode_handle((uint8_t *)hs[l], &hd) == 0, "handle");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(hd.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < NS; i++) {
      fds[l][i] = socket(AF_INET, SOCK_STREAM, 0);
      CHECK(connect(fds[l][i], (struct sockaddr *)&a, sizeof a) == 0, "raw connect %d/%d", l, i);
    }
  }
  for (int l = 0; l < NL; l++) OK(net_accept(&n, lc[l], &rc[l])); /* 256 taken, 64 queued */
  sleep_ms(20);
  for (int l = 0; l < NL; l++) {
    c4p_handle hd;
    c4p_decode_handle((uint8_t *)hs[l], &hd);
    for (int i = 0; i < NS; i++) {
      struct pollfd pf = {.fd = fds[l][i], .events = POLLIN};
      CHECK(poll(&pf, 1, 0) == 0, "socket %d/%d was closed before its hello", l, i);
      uint8_t hello[C4P_HELLO_LEN];
      c4p_hello hl = {.sock_index = (uint16_t)i, .nsocks = NS, .uuid = hd.uuid, .key = hd.key,
                      .job_rank = C4P_NO_RANK, .comm_rank = C4P_NO_RANK};
      c4p_encode_hello(&hl, hello);
      CHECK(write(fds[l][i], hello, sizeof hello) == (ssize_t)sizeof hello, "hello");
    }
  }
  uint64_t t0 = now_ns();
  for (int done = 0; done < NL;) {
    done = 0;
    for (int l = 0; l < NL; l++) {
      if (!rc[l]) OK(net_accept(&n, lc[l], &rc[l]));
      done += rc[l] != NULL;
    }
    CHECK(now_ns() - t0 < 10000000000ull, "only %d of %d connections completed", done, NL);
  }
  for (int l = 0; l < NL; l++) {
    for (int i = 0; i < NS; i++) {
      char v[C4P_VERDICT_LEN];
      CHECK(read(fds[l][i], v, sizeof v) == (ssize_t)sizeof v && !memcmp(v, C4P_VERDICT_OK, 4), "verdict");
      close(fds[l][i]);
    }
    OK(net_close_listen(&n, lc[l]));
    OK(net_close_recv(&n, rc[l]));
  }
  OK(net_finalize(&n));
  printf("PASS backlog (%d sockets waiting for hellos at once, none closed, all attached)\n", NL * NS);
  return 0;
}

/* ---------------- job identity and time on the network (two processes) ---------------- */

#define ID_HASH 0x1d0000c0ull
static uint64_t *id_window_ns; /* shared with the ranks: each one's SendWait..stop, measured here */
static int identity_rank(int rank, int wfd, int rfd) {
  char v[16];
  snprintf(v, sizeof v, "%d", 10 + rank);
  setenv("RANK", v, 1);
  setenv("C4_JOB", "jobx", 1);
  void *dl;
  net_t n = load(12, &dl);
  prof_t p = {.version = 6, .tab = dlsym(dl, "ncclProfiler_v6")};
  static int mask;
  CHECK(p.tab, "ncclProfiler_v6 missing");
  /* NCCL initialises the profiler before it sets up any connection of the communicator. */
  OK(((ncclProfiler_v6_t *)p.tab)->init(&p.ctx, ID_HASH, &mask, "c", 2, 2, rank, NULL));
  OK(net_init(&n, ID_HASH));
  rank_t r = {.n = &n, .rank = rank, .peer = 1 - rank, .nch = 1, .msgs = 5, .maxsize = 50000,
              .wfd = wfd, .rfd = rfd};
  pthread_t svc, prog;
  pthread_create(&svc, NULL, service_thread, &r);
  pthread_join(svc, NULL);
  pthread_create(&prog, NULL, progress_thread, &r);
  pthread_join(prog, NULL);
  /* One collective: send and receive steps to the other rank, a send step on the network for
   * 30 ms; the receive's RecvWait carries a stale size NCCL leaves from the previous step. */
  void *coll = pstart(&p, ncclProfileColl, NULL, rank, fill_coll, (void *)(uintptr_t)7);
  pstop(&p, coll);
  popt snd = {1 - rank, 1}, rcv = {1 - rank, 0};
  void *os = pstart(&p, ncclProfileProxyOp, coll, rank, fill_proxy, &snd);
  void *orr = pstart(&p, ncclProfileProxyOp, coll, rank, fill_proxy, &rcv);
  void *st = pstart(&p, ncclProfileProxyStep, os, rank, fill_none, NULL);
  precord(&p, st, ncclProfilerProxyStepSendGPUWait, 999);
  sleep_ms(20); /* waiting for the GPU: not network time */
  uint64_t ta = now_ns();
  precord(&p, st, ncclProfilerProxyStepSendWait, 4096);
  sleep_ms(30);
  pstop(&p, st);
  id_window_ns[rank] = now_ns() - ta;
  void *rt = pstart(&p, ncclProfileProxyStep, orr, rank, fill_none, NULL);
  precord(&p, rt, ncclProfilerProxyStepRecvWait, 999);
  precord(&p, rt, ncclProfilerProxyStepRecvFlushWait, 4096);
  pstop(&p, rt);
  void *k0 = pstart(&p, ncclProfileKernelCh, coll, rank, fill_none, NULL);
  void *k1 = pstart(&p, ncclProfileKernelCh, coll, rank, fill_none, NULL);
  pstop(&p, os);
  pstop(&p, orr);
  pstop(&p, k0);
  pstop(&p, k1);
  OK(net_close_send(&n, r.sc[0]));
  OK(net_close_recv(&n, r.rc[0]));
  OK(net_finalize(&n));
  OK(((ncclProfiler_v6_t *)p.tab)->finalize(p.ctx));
  return 0;
}

static void id_start_agent(void) {
  agent_cfg ac = {.mode = AGENT_OK, .nflows = 0};
  CHECK(agent_start(agent_path, &ac) == 0, "agent start");
}

static int scen_identity(void) {
  agent_path_init();
  setenv("C4_SHIM_PORT", "0", 1);
  setenv("C4_LOOKUP_TIMEOUT_MS", "2000", 1);
  id_window_ns = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(id_window_ns != MAP_FAILED, "mmap");
  pid_t kids[2];
  fork_ranks(identity_rank, id_start_agent, kids);
  int ok = 1;
  for (int rank = 0; rank < 2; rank++) {
    int stt;
    waitpid(kids[rank], &stt, 0);
    if (!WIFEXITED(stt) || WEXITSTATUS(stt) != 0) ok = 0;
  }
  CHECK(ok, "a rank failed");
  sleep_ms(50);
  static c4p_coll cs[64];
  static c4p_conn ks[256];
  static c4p_lookup ls[64];
  int nc = agent_colls(cs, 64), nk = agent_conns(ks, 256), nl = agent_lookups(ls, 64), done = 0;
  for (int i = 0; i < nc; i++) {
    c4p_coll *c = &cs[i];
    if (c->flags & C4P_COLL_INFLIGHT) continue;
    int me = c->job_rank - 10, other = 10 + (1 - me);
    CHECK(c->comm_hash == ID_HASH && (me == 0 || me == 1) && c->rank == me && c->npeers == 2,
          "record: hash %llx job rank %d comm rank %d", (unsigned long long)c->comm_hash, c->job_rank, c->rank);
    for (int q = 0; q < 2; q++) {
      c4p_peer *e = &c->peers[q];
      CHECK(e->peer == 1 - me && e->peer_job_rank == other, "peer %d -> job rank %d, want %d",
            e->peer, e->peer_job_rank, other);
      CHECK(e->bytes == 4096, "peer bytes %llu (stale sizes counted?)", (unsigned long long)e->bytes);
      if (e->dir == C4P_SEND)
        CHECK((e->flags & C4P_PEER_NET) && e->net_us >= 29000 && e->net_us <= id_window_ns[me] / 1000 + 500,
              "send net time %llu us, want 30000..%llu (SendWait to stop; GPU wait excluded)",
              (unsigned long long)e->net_us, (unsigned long long)id_window_ns[me] / 1000);
      else
        CHECK(!(e->flags & C4P_PEER_NET), "receive entries carry no net time from the profiler");
    }
    done++;
  }
  CHECK(done == 2, "%d completed records", done);
  int finals = 0;
  for (int i = 0; i < nk; i++) {
    c4p_conn *k = &ks[i];
    if (!(k->flags & C4P_CONN_CLOSED)) continue;
    int me = k->job_rank - 10;
    CHECK((me == 0 || me == 1) && k->peer_job_rank == 10 + (1 - me) && k->peer_comm_rank == 1 - me &&
              k->comm_id == ID_HASH,
          "conn: job rank %d peer job %d comm %d", k->job_rank, k->peer_job_rank, k->peer_comm_rank);
    finals++;
  }
  CHECK(finals == 4, "%d final connection records", finals);
  int seen = 0;
  for (int i = 0; i < nl; i++) {
    if (!ls[i].req_id) continue;
    CHECK(!strcmp(ls[i].job, "jobx") && ls[i].src_rank >= 10 && ls[i].dst_rank == 21 - ls[i].src_rank &&
              ls[i].conn_index == 0 && ls[i].comm_id == ID_HASH,
          "lookup: job %s ranks %d->%d index %u", ls[i].job, ls[i].src_rank, ls[i].dst_rank, ls[i].conn_index);
    seen++;
  }
  CHECK(seen == 2, "%d lookups", seen);
  c4p_stats stt;
  CHECK(agent_last_stats(&stt) && !strcmp(stt.job, "jobx") && stt.job_rank >= 10, "stats identity");
  agent_stop();
  printf("PASS identity (job ranks in lookups, connections and collectives; send net time from SendWait)\n");
  return 0;
}

/* Time on the network from the transport (FORMAT.md "Network time in the transport"): over
 * TCP a send is on the network until its bytes are acknowledged, less the time the receiver's
 * window held them. A connection whose receiver stops reading (it waits on its own downstream)
 * is window-limited, so it reads a small share of its span, though its sends stay pending the
 * whole time (post-to-completion would read it as on the network throughout); one whose
 * sender is the slow side (idle between messages) reads a small share too. */
static int scen_netclock(void) {
  agent_path_init();
  setenv("C4_SHIM_PORT", "0", 1);
  agent_cfg ac = {.mode = AGENT_OK, .nflows = 0};
  CHECK(agent_start(agent_path, &ac) == 0, "agent start");
  void *dl;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0xc10c));
  void *sa, *ra, *sb, *rb, *mh;
  connect_pair(&n, 0, &sa, &ra); /* conn_index 0: the receiver stalls, then drains */
  connect_pair(&n, 0, &sb, &rb); /* conn_index 1: sender-paced */
  enum { M = 12 };
  size_t big = 4u << 20;
  uint8_t *sbuf = malloc(big), *rbuf = malloc(big);
  memset(sbuf, 7, big);
  OK(net_regmr(&n, sa, sbuf, big, &mh));
  void *sreq[M];
  for (int m = 0; m < M; m++) { sreq[m] = NULL; OK(net_isend(&n, sa, sbuf, big, 0, mh, &sreq[m])); CHECK(sreq[m], "send %d", m); }
  /* 300 ms with no receive posted: the sender keeps writing what the window lets through. */
  uint64_t stall_end = now_ns() + 300000000ull;
  int pending_after_stall = 0;
  while (now_ns() < stall_end) {
    for (int k = 0; k < M; k++) {
      int d2 = 0, sz;
      if (sreq[k]) { OK(net_test(&n, sreq[k], &d2, &sz)); if (d2) sreq[k] = NULL; }
    }
    sleep_ms(1);
  }
  for (int k = 0; k < M; k++) pending_after_stall += sreq[k] != NULL;
  CHECK(pending_after_stall > 0, "the stalled receiver's window should hold some sends pending");
  for (int m = 0; m < M; m++) {
    void *rq = NULL;
    int done = 0, sz;
    OK(net_irecv(&n, ra, rbuf, big, 0, mh, &rq));
    while (!done) {
      OK(net_test(&n, rq, &done, &sz));
      for (int k = 0; k < M; k++) {
        int d2 = 0;
        if (sreq[k]) { OK(net_test(&n, sreq[k], &d2, &sz)); if (d2) sreq[k] = NULL; }
      }
    }
  }
  for (int k = 0; k < M; k++) {
    int d2 = 0, sz;
    while (sreq[k] && !d2) OK(net_test(&n, sreq[k], &d2, &sz));
  }
  for (int m = 0; m < M; m++) {
    void *rq = NULL, *sq = NULL;
    int rd = 0, sd = 0, sz;
    OK(net_irecv(&n, rb, rbuf, big, 0, mh, &rq));
    sleep_ms(15);
    OK(net_isend(&n, sb, sbuf, 65536, 0, mh, &sq));
    while (!rd || !sd) {
      if (!sd) OK(net_test(&n, sq, &sd, &sz));
      if (!rd) OK(net_test(&n, rq, &rd, &sz));
    }
  }
  OK(net_close_send(&n, sa)); OK(net_close_recv(&n, ra));
  OK(net_close_send(&n, sb)); OK(net_close_recv(&n, rb));
  OK(net_finalize(&n));
  sleep_ms(50);
  static c4p_conn cs[256];
  int nc = agent_conns(cs, 256);
  double ratio[2] = {-1, -1};
  for (int i = 0; i < nc; i++) {
    c4p_conn *k = &cs[i];
    if (!(k->flags & C4P_CONN_CLOSED) || k->dir != C4P_SEND || k->conn_index > 1) continue;
    ratio[k->conn_index] = (double)k->net_us / (double)(k->t_last_us - k->t_first_us);
  }
  CHECK(ratio[0] >= 0 && ratio[0] < 0.5, "connection held by its receiver's window on the network %.2f of its span, want < 0.5", ratio[0]);
  CHECK(ratio[1] >= 0 && ratio[1] < 0.2, "sender-paced connection on the network %.2f of its span, want < 0.2", ratio[1]);
  agent_stop();
  free(sbuf);
  free(rbuf);
  printf("PASS netclock (net time / span: receiver-stalled %.2f, sender-paced %.2f)\n", ratio[0], ratio[1]);
  return 0;
}

/* ---------------- PCI path of each device ---------------- */
static int scen_pci(void) {
  char root[] = "/tmp/c4-sysfs-XXXXXX", path[512], dev[512], real[PATH_MAX];
  CHECK(mkdtemp(root), "mkdtemp");
  snprintf(dev, sizeof dev, "%s/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0", root);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p %s %s/class/net/lo && ln -s %s %s/class/net/lo/device && echo 200000 > %s/class/net/lo/speed",
           dev, root, dev, root, root);
  CHECK(system(cmd) == 0, "fake sysfs");
  CHECK(realpath(dev, real), "realpath");
  setenv("C4_SYSFS", root, 1);
  setenv("C4_AGENT_SOCKET", "off", 1);
  void *dl;
  net_t n = load(12, &dl);
  OK(net_init(&n, 0x9c1));
  const char *pci = net_pci_path(&n, 0);
  int ptr, maxr, speed;
  OK(net_props(&n, 0, &ptr, &maxr, &speed));
  CHECK(pci && !strcmp(pci, real), "pciPath %s, want %s", pci ? pci : "(null)", real);
  CHECK(speed == 200000, "speed %d", speed);
  for (int v = 8; v <= 11; v++) {
    net_t m = load(v, &dl);
    CHECK(net_pci_path(&m, 0) && !strcmp(net_pci_path(&m, 0), real), "v%d pciPath", v);
  }
  OK(net_finalize(&n));
  snprintf(path, sizeof path, "rm -rf %s", root);
  CHECK(system(path) == 0, "cleanup");
  printf("PASS pci-path (getProperties names %s, every version)\n", real);
  return 0;
}

/* ---------------- a two-rank job against a real node agent ----------------
 * fake_nccl <lib> job <collectives per communicator>
 * Child r is job rank C4_TEST_JOB_RANKS[r] ("5,9": RANK is set from it) of job C4_JOB, talks
 * to the agent at C4_AGENT_SOCKET_<r> (else C4_AGENT_SOCKET), and joins two communicators:
 * the world (hash C4_TEST_WORLD, comm rank r) and a sub-communicator with the ranks reversed
 * (hash C4_TEST_SUB, comm rank 1 - r), each with C4_TEST_CHANNELS connections per direction,
 * made through the net plugin as NCCL makes them. Each collective moves C4_TEST_COLL_BYTES
 * (64 KiB) per channel and direction with the profiler events NCCL would emit around those
 * transfers, C4_TEST_COLL_GAP_MS apart. C4_TEST_COMMS=1 leaves out the sub-communicator;
 * C4_TEST_HOLD_FILE holds the ranks halfway while that file exists, C4_TEST_HOLD_END before
 * they finalize (a test's gates). Prints one JSON line per rank: its job rank and the
 * (local port, remote port) of every data socket. */
static int env_i(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

typedef struct { net_t n; prof_t p; uint64_t hash; int comm_rank; rank_t r; } job_comm;

static void job_collective(job_comm *jc, uint64_t seq, int nch) {
  prof_t *p = &jc->p;
  static size_t SZ;
  static uint8_t *sb, *rb;
  if (!sb) {
    SZ = (size_t)env_i("C4_TEST_COLL_BYTES", 65536);
    sb = calloc(1, SZ);
    rb = calloc(1, SZ);
  }
  void *coll = pstart(p, ncclProfileColl, NULL, jc->comm_rank, fill_coll, (void *)(uintptr_t)seq);
  pstop(p, coll);
  for (int c = 0; c < nch; c++) {
    popt snd = {1 - jc->comm_rank, 1}, rcv = {1 - jc->comm_rank, 0};
    void *os = pstart(p, ncclProfileProxyOp, coll, jc->comm_rank, fill_proxy, &snd);
    void *orr = pstart(p, ncclProfileProxyOp, coll, jc->comm_rank, fill_proxy, &rcv);
    void *st = pstart(p, ncclProfileProxyStep, os, jc->comm_rank, fill_none, NULL);
    void *rt = pstart(p, ncclProfileProxyStep, orr, jc->comm_rank, fill_none, NULL);
    void *mh, *sq = NULL, *rq = NULL;
    OK(net_regmr(&jc->n, jc->r.sc[c], sb, SZ, &mh));
    precord(p, rt, ncclProfilerProxyStepRecvWait, 0);
    while (!rq) OK(net_irecv(&jc->n, jc->r.rc[c], rb, SZ, 1 - jc->comm_rank, mh, &rq));
    precord(p, st, ncclProfilerProxyStepSendGPUWait, 0);
    while (!sq) OK(net_isend(&jc->n, jc->r.sc[c], sb, SZ, jc->comm_rank, mh, &sq));
    precord(p, st, ncclProfilerProxyStepSendWait, SZ);
    int sd = 0, rd = 0, sz;
    uint64_t t0 = now_ns();
    while (!sd || !rd) {
      if (!sd) { OK(net_test(&jc->n, sq, &sd, &sz)); if (sd) pstop(p, st); }
      if (!rd) {
        OK(net_test(&jc->n, rq, &rd, &sz));
        if (rd) { precord(p, rt, ncclProfilerProxyStepRecvFlushWait, (size_t)sz); pstop(p, rt); }
      }
      CHECK(now_ns() - t0 < 20000000000ull, "collective %llu stuck", (unsigned long long)seq);
    }
    pstop(p, os);
    pstop(p, orr);
  }
  for (int c = 0; c < nch; c++) {
    void *k = pstart(p, ncclProfileKernelCh, coll, jc->comm_rank, fill_none, NULL);
    pstop(p, k);
  }
}

/* Per-rank settings: <VAR>_<rank> overrides VAR for that rank (the agent socket and the
 * shim's address of its host), and C4_TEST_NETNS_<rank> moves the rank into that network
 * namespace first (a testbed host), as if it had been started there. */
static void rank_env(int rank) {
  static const char *const vars[] = {"C4_AGENT_SOCKET", "C4_SHIM_ADDR"};
  char name[64];
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    snprintf(name, sizeof name, "%s_%d", vars[i], rank);
    if (getenv(name)) setenv(vars[i], getenv(name), 1);
  }
  snprintf(name, sizeof name, "C4_TEST_NETNS_%d", rank);
  const char *ns = getenv(name);
  if (ns && *ns) {
    char path[256];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0, "rank %d: cannot enter namespace %s", rank, ns);
    close(fd);
  }
}

static int job_rank_fn(int rank, int wfd, int rfd) {
  char v[32];
  rank_env(rank);
  const char *ranks = getenv("C4_TEST_JOB_RANKS");
  int jr[2] = {0, 1};
  if (ranks) CHECK(sscanf(ranks, "%d,%d", &jr[0], &jr[1]) == 2, "C4_TEST_JOB_RANKS");
  snprintf(v, sizeof v, "%d", jr[rank]);
  setenv("RANK", v, 1);
  int nch = env_i("C4_TEST_CHANNELS", 2), ncoll = env_i("C4_TEST_COLLS_N", 3);
  int ncomm = env_i("C4_TEST_COMMS", 2) == 1 ? 1 : 2; /* 1: the world only */
  coll_nchannels = (uint8_t)nch;
  static job_comm comms[2];
  uint64_t hashes[2] = {(uint64_t)strtoull(getenv("C4_TEST_WORLD") ? getenv("C4_TEST_WORLD") : "0xc4a11", NULL, 0),
                        (uint64_t)strtoull(getenv("C4_TEST_SUB") ? getenv("C4_TEST_SUB") : "0xc4b22", NULL, 0)};
  void *dl;
  for (int k = 0; k < ncomm; k++) {
    job_comm *jc = &comms[k];
    jc->hash = hashes[k];
    jc->comm_rank = k == 0 ? rank : 1 - rank;
    jc->n = load(12, &dl);
    jc->p = (prof_t){.version = 6, .tab = dlsym(dl, "ncclProfiler_v6")};
    static int mask;
    OK(((ncclProfiler_v6_t *)jc->p.tab)->init(&jc->p.ctx, jc->hash, &mask, "c", 2, 2, jc->comm_rank, NULL));
    OK(net_init(&jc->n, jc->hash));
    jc->r = (rank_t){.n = &jc->n, .rank = jc->comm_rank, .peer = 1 - jc->comm_rank, .nch = nch,
                     .msgs = 0, .maxsize = 1, .wfd = wfd, .rfd = rfd};
    pthread_t svc;
    pthread_create(&svc, NULL, service_thread, &jc->r);
    pthread_join(svc, NULL);
  }
  int gap_ms = env_i("C4_TEST_COLL_GAP_MS", 0);
  const char *hold = getenv("C4_TEST_HOLD_FILE"); /* halfway, wait while this file exists */
  for (int i = 0; i < ncoll; i++) {
    for (int k = 0; k < ncomm; k++) job_collective(&comms[k], (uint64_t)(100 + i), nch);
    if (gap_ms) sleep_ms(gap_ms);
    uint64_t t0 = now_ns();
    while (hold && i == ncoll / 2 && access(hold, F_OK) == 0) {
      CHECK(now_ns() - t0 < 120000000000ull, "held for 120 s by %s", hold);
      sleep_ms(20);
    }
  }
  const char *hold_end = getenv("C4_TEST_HOLD_END"); /* before finalizing, likewise */
  uint64_t t_hold = now_ns();
  while (hold_end && access(hold_end, F_OK) == 0) {
    CHECK(now_ns() - t_hold < 120000000000ull, "held for 120 s by %s", hold_end);
    sleep_ms(20);
  }
  sockinfo si[256];
  int ns = list_sockets(si, 256);
  char out[8192];
  int o = snprintf(out, sizeof out, "{\"rank\": %d, \"sockets\": [", jr[rank]);
  for (int i = 0; i < ns && o < (int)sizeof out - 64; i++)
    o += snprintf(out + o, sizeof out - (size_t)o, "%s[%u, %u]", i ? ", " : "", si[i].lport, si[i].rport);
  printf("%s]}\n", out);
  fflush(stdout);
  for (int k = 0; k < ncomm; k++) {
    for (int c = 0; c < nch; c++) {
      OK(net_close_send(&comms[k].n, comms[k].r.sc[c]));
      OK(net_close_recv(&comms[k].n, comms[k].r.rc[c]));
    }
    OK(net_finalize(&comms[k].n));
    OK(((ncclProfiler_v6_t *)comms[k].p.tab)->finalize(comms[k].p.ctx));
  }
  return 0;
}

static int scen_job(int ncoll) {
  char v[16];
  snprintf(v, sizeof v, "%d", ncoll);
  setenv("C4_TEST_COLLS_N", v, 1);
  pid_t kids[2];
  fork_ranks(job_rank_fn, NULL, kids);
  int ok = 1;
  for (int rank = 0; rank < 2; rank++) {
    int st;
    waitpid(kids[rank], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  CHECK(ok, "a rank failed");
  return 0;
}

/* ---------------- a live connection, for weight changes ----------------
 * fake_nccl <lib> live <seconds> <message bytes> <period ms>
 * Two ranks as in `job` (same environment), one communicator, C4_TEST_CHANNELS connections
 * each way. Rank 0 sends a message on every connection every period and prints, per message
 * of channel 0, a JSON line with the time and, per socket, the bytes acknowledged by the peer
 * while it was sent ("socks": what the wire carried, lagging by what the socket had queued)
 * and the bytes the plugin wrote into the socket for it ("written": the weights the plugin
 * applied), both read from the kernel (TCP_INFO), not from the plugin:
 * {"t_us": ..., "socks": [[sport, bytes], ...], "written": [[sport, bytes], ...],
 *  "acked_total": [[sport, bytes], ...], "written_total": [[sport, bytes], ...]}, the last two
 * the sockets' running totals at the message's end.
 * Rank 1 receives. */
static int live_rank_fn(int rank, int wfd, int rfd) {
  char v[32];
  rank_env(rank);
  const char *ranks = getenv("C4_TEST_JOB_RANKS");
  int jr[2] = {0, 1};
  if (ranks) CHECK(sscanf(ranks, "%d,%d", &jr[0], &jr[1]) == 2, "C4_TEST_JOB_RANKS");
  snprintf(v, sizeof v, "%d", jr[rank]);
  setenv("RANK", v, 1);
  int nch = env_i("C4_TEST_CHANNELS", 1);
  double seconds = atof(getenv("C4_TEST_LIVE_S"));
  size_t size = (size_t)atol(getenv("C4_TEST_LIVE_BYTES"));
  int period = env_i("C4_TEST_LIVE_MS", 20);
  void *dl;
  net_t n = load(12, &dl);
  prof_t p = {.version = 6, .tab = dlsym(dl, "ncclProfiler_v6")};
  static int mask;
  uint64_t hash = (uint64_t)strtoull(getenv("C4_TEST_WORLD") ? getenv("C4_TEST_WORLD") : "0xc4a11", NULL, 0);
  OK(((ncclProfiler_v6_t *)p.tab)->init(&p.ctx, hash, &mask, "c", 2, 2, rank, NULL));
  OK(net_init(&n, hash));
  rank_t r = {.n = &n, .rank = rank, .peer = 1 - rank, .nch = nch, .msgs = 0, .maxsize = 1,
              .wfd = wfd, .rfd = rfd};
  pthread_t svc;
  pthread_create(&svc, NULL, service_thread, &r);
  pthread_join(svc, NULL);
  uint8_t *buf = malloc(size);
  memset(buf, 1, size);
  void *mh;
  OK(net_regmr(&n, rank == 0 ? r.sc[0] : r.rc[0], buf, size, &mh));
  uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
  int running = 1;
  while (running) {
    uint64_t t_next = now_ns() + (uint64_t)period * 1000000ull;
    void *reqs[16] = {0};
    uint64_t before[64] = {0}, wbefore[64] = {0};
    sockinfo si[256];
    int ns = 0;
    if (rank == 0) {
      ns = list_sockets(si, 256);
      for (int i = 0; i < ns && i < 64; i++) { before[i] = si[i].acked; wbefore[i] = si[i].written; }
    }
    for (int c = 0; c < nch; c++) {
      while (!reqs[c]) {
        if (rank == 0) OK(net_isend(&n, r.sc[c], buf, size, rank, mh, &reqs[c]));
        else OK(net_irecv(&n, r.rc[c], buf, size, 0, mh, &reqs[c]));
      }
    }
    for (int c = 0; c < nch; c++) {
      int done = 0, sz;
      uint64_t t0 = now_ns();
      while (!done) {
        OK(net_test(&n, reqs[c], &done, &sz));
        CHECK(now_ns() - t0 < 20000000000ull, "live message stuck");
      }
    }
    if (rank == 0) {
      sleep_ms(2); /* the last ACKs */
      sockinfo after[256];
      int na = list_sockets(after, 256);
      char out[4096];
      int o = snprintf(out, sizeof out, "{\"t_us\": %llu, \"socks\": [", (unsigned long long)real_now_us());
      int first = 1;
      for (int i = 0; i < na && i < ns && o < (int)sizeof out - 64; i++) {
        if (after[i].lport != si[i].lport) continue;
        o += snprintf(out + o, sizeof out - (size_t)o, "%s[%u, %llu]", first ? "" : ", ", after[i].lport,
                      (unsigned long long)(after[i].acked - before[i]));
        first = 0;
      }
      o += snprintf(out + o, sizeof out - (size_t)o, "], \"written\": [");
      first = 1;
      for (int i = 0; i < na && i < ns && i < 64 && o < (int)sizeof out - 64; i++) {
        if (after[i].lport != si[i].lport) continue;
        o += snprintf(out + o, sizeof out - (size_t)o, "%s[%u, %llu]", first ? "" : ", ", after[i].lport,
                      (unsigned long long)(after[i].written - wbefore[i]));
        first = 0;
      }
      /* The same sockets' running totals (since the socket opened), so a reader can count
       * what was acknowledged between messages too: "socks" misses what the peer acknowledged
       * while this rank slept, which is most of a slow socket's bytes. */
      o += snprintf(out + o, sizeof out - (size_t)o, "], \"acked_total\": [");
      first = 1;
      for (int i = 0; i < na && o < (int)sizeof out - 64; i++) {
        o += snprintf(out + o, sizeof out - (size_t)o, "%s[%u, %llu]", first ? "" : ", ", after[i].lport,
                      (unsigned long long)after[i].acked);
        first = 0;
      }
      o += snprintf(out + o, sizeof out - (size_t)o, "], \"written_total\": [");
      first = 1;
      for (int i = 0; i < na && o < (int)sizeof out - 64; i++) {
        o += snprintf(out + o, sizeof out - (size_t)o, "%s[%u, %llu]", first ? "" : ", ", after[i].lport,
                      (unsigned long long)after[i].written);
        first = 0;
      }
      printf("%s]}\n", out);
      fflush(stdout);
    }
    running = now_ns() < end;
    /* Both ranks stop after the same number of messages: rank 0 decides and tells rank 1 by
     * the next message's size (0 = stop). */
    if (rank == 0) {
      void *q = NULL;
      int done = 0, sz;
      uint8_t more = (uint8_t)running;
      static uint8_t flag;
      flag = more;
      while (!q) OK(net_isend(&n, r.sc[0], &flag, 1, rank, mh, &q));
      while (!done) OK(net_test(&n, q, &done, &sz));
    } else {
      void *q = NULL;
      int done = 0, sz;
      static uint8_t flag;
      while (!q) OK(net_irecv(&n, r.rc[0], &flag, 1, 0, mh, &q));
      while (!done) OK(net_test(&n, q, &done, &sz));
      running = flag;
    }
    while (now_ns() < t_next) sleep_ms(1);
  }
  for (int c = 0; c < nch; c++) {
    OK(net_close_send(&n, r.sc[c]));
    OK(net_close_recv(&n, r.rc[c]));
  }
  OK(net_finalize(&n));
  free(buf);
  return 0;
}

static int scen_live(double seconds, size_t size, int period_ms) {
  char v[32];
  snprintf(v, sizeof v, "%.3f", seconds);
  setenv("C4_TEST_LIVE_S", v, 1);
  snprintf(v, sizeof v, "%zu", size);
  setenv("C4_TEST_LIVE_BYTES", v, 1);
  snprintf(v, sizeof v, "%d", period_ms);
  setenv("C4_TEST_LIVE_MS", v, 1);
  pid_t kids[2];
  fork_ranks(live_rank_fn, NULL, kids);
  int ok = 1;
  for (int rank = 0; rank < 2; rank++) {
    int st;
    waitpid(kids[rank], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = 0;
  }
  CHECK(ok, "a rank failed");
  return 0;
}

/* ---------------- ECMP in network namespaces (driven by tests/netns_ecmp.sh) ---------------- */
/* Receiver: listen (fixed port), publish the handle through a file (the bootstrap stand-in
 * across namespaces), accept, receive and verify. */
static int scen_ecmp_recv(const char *hfile, int nmsgs, size_t size) {
  void *dl;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0xec30));
  char h[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *rc = NULL, *mh;
  OK(net_listen(&n, 0, h, &lc));
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.tmp", hfile);
  FILE *f = fopen(tmp, "wb");
  CHECK(f && fwrite(h, sizeof h, 1, f) == 1 && fclose(f) == 0 && rename(tmp, hfile) == 0, "write handle");
  uint64_t t0 = now_ns();
  while (!rc) {
    OK(net_accept(&n, lc, &rc));
    sched_yield();
    CHECK(now_ns() - t0 < 20000000000ull, "accept timed out");
  }
  OK(net_close_listen(&n, lc));
  uint8_t *buf = malloc(size);
  OK(net_regmr(&n, rc, buf, size, &mh));
  for (int m = 0; m < nmsgs; m++) {
    void *req = NULL;
    while (!req) OK(net_irecv(&n, rc, buf, size, 1, mh, &req));
    int done = 0, sz = 0;
    while (!done) OK(net_test(&n, req, &done, &sz));
    CHECK((size_t)sz == size, "size %d", sz);
    size_t bad = verify(buf, size, (uint32_t)m);
    CHECK(!bad, "message %d byte %zu differs", m, bad - 1);
  }
  OK(net_close_recv(&n, rc));
  OK(net_finalize(&n));
  free(buf);
  printf("PASS ecmp-recv (%d x %zu bytes verified)\n", nmsgs, size);
  return 0;
}

/* Sender: a fake agent in this process assigns `port:weight` flows; send, then report which
 * local ports the sockets really used. */
static int scen_ecmp_send(const char *hfile, int nmsgs, size_t size, int k, char **flows) {
  agent_path_init();
  agent_cfg ac = {.mode = AGENT_OK, .nflows = k};
  for (int i = 0; i < k; i++) {
    ac.ports[i] = (uint16_t)atoi(flows[i]);
    const char *w = strchr(flows[i], ':');
    ac.weight_ppm[i] = (uint32_t)(w ? atof(w + 1) * 1e6 : 1e6 / k);
  }
  CHECK(agent_start(agent_path, &ac) == 0, "agent");
  char h[NCCL_NET_HANDLE_MAXSIZE];
  uint64_t t0 = now_ns();
  FILE *f = NULL;
  while (!(f = fopen(hfile, "rb"))) {
    CHECK(now_ns() - t0 < 20000000000ull, "no handle from the receiver");
    sleep_ms(10);
  }
  CHECK(fread(h, sizeof h, 1, f) == 1, "read handle");
  fclose(f);
  void *dl, *sc = NULL, *mh;
  net_t n = load(0, &dl);
  OK(net_init(&n, 0xec30));
  while (!sc) { OK(net_connect(&n, 0, h, &sc)); sched_yield(); }
  for (int i = 0; i < k; i++) CHECK(acked_from(ac.ports[i]) != UINT64_MAX, "no socket on assigned port %u", ac.ports[i]);
  uint8_t *buf = malloc(size);
  OK(net_regmr(&n, sc, buf, size, &mh));
  for (int m = 0; m < nmsgs; m++) {
    fill(buf, size, (uint32_t)m);
    void *req = NULL;
    while (!req) OK(net_isend(&n, sc, buf, size, 0, mh, &req));
    int done = 0, sz;
    while (!done) OK(net_test(&n, req, &done, &sz));
  }
  OK(net_close_send(&n, sc));
  OK(net_finalize(&n));
  agent_stop();
  free(buf);
  printf("PASS ecmp-send (%d sockets on assigned ports)\n", k);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <libnccl-net-c4.so> <scenario> [args]\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  lib_path = argv[1];
  scenario = argv[2];
  alarm(90);
  if (!strcmp(scenario, "abi")) return scen_abi();
  if (!strcmp(scenario, "loopback")) return scen_loopback(argc > 3 ? atoi(argv[3]) : 0);
  if (!strcmp(scenario, "tworank"))
    return scen_tworank(argc > 3 ? atoi(argv[3]) : 4, argc > 4 ? atoi(argv[4]) : 50,
                        argc > 5 ? (size_t)atol(argv[5]) : 200000, argc > 6 ? atoi(argv[6]) : 0);
  if (!strcmp(scenario, "weights")) return scen_weights();
  if (!strcmp(scenario, "fault")) return scen_fault(argc > 3 ? argv[3] : "absent");
  if (!strcmp(scenario, "peer-close")) return scen_peer_close();
  if (!strcmp(scenario, "profiler")) return scen_profiler(argc > 3 ? atoi(argv[3]) : 5);
  if (!strcmp(scenario, "overflow")) return scen_overflow();
  if (!strcmp(scenario, "handoff")) return scen_handoff(argc > 3 ? argv[3] : "ok");
  if (!strcmp(scenario, "handoff-tworank")) return scen_handoff_tworank();
  if (!strcmp(scenario, "backlog")) return scen_backlog();
  if (!strcmp(scenario, "identity")) return scen_identity();
  if (!strcmp(scenario, "netclock")) return scen_netclock();
  if (!strcmp(scenario, "pci")) return scen_pci();
  if (!strcmp(scenario, "job")) return scen_job(argc > 3 ? atoi(argv[3]) : 3);
  if (!strcmp(scenario, "live") && argc == 6)
    return scen_live(atof(argv[3]), (size_t)atol(argv[4]), atoi(argv[5]));
  if (!strcmp(scenario, "ecmp-recv") && argc == 6)
    return scen_ecmp_recv(argv[3], atoi(argv[4]), (size_t)atol(argv[5]));
  if (!strcmp(scenario, "ecmp-send") && argc >= 7)
    return scen_ecmp_send(argv[3], atoi(argv[4]), (size_t)atol(argv[5]), argc - 6, argv + 6);
  fprintf(stderr, "unknown scenario %s\n", scenario);
  return 2;
}
