/* c4_rt.c: configuration and identity, clocks, logging, the node-agent client, the
 * communicator rank table and the background thread. The agent is reached over a Unix
 * datagram socket (C4_AGENT_SOCKET). Our own socket is bound to the abstract name
 * "c4-shim-<key>" (the key is random per process and travels in our listen handles), so the
 * agent can reply with sendto() and hand us the sockets it accepted on the host's fixed port
 * for us (SCM_RIGHTS). Every send is MSG_DONTWAIT so a slow or dead agent costs a failed
 * syscall, never a wait. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "c4_rt.h"

c4_config c4_cfg;
c4_counters c4_stat;
int c4_cached_pid;

static void refresh_pid(void) { c4_cached_pid = (int)getpid(); }

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int64_t real_minus_mono_ns;
static int log_level = 1; /* warnings only unless C4_SHIM_DEBUG */
static c4_ring *ring;
static int agent_fd = -1;
static struct sockaddr_un agent_sa;
static socklen_t agent_salen;
static pthread_mutex_t flush_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- lookups in flight ---- */
#define MAX_TICKETS 128
typedef struct {
  int used, answered;
  uint32_t req_id;
  uint64_t deadline_ns;
  c4p_assign reply;
  size_t unsent; /* > 0: the agent's queue was full; the request waits in `req` */
  uint8_t req[C4P_MAX_DGRAM];
} ticket_t;
static ticket_t tickets[MAX_TICKETS];
static pthread_mutex_t agent_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_req_id = 1;

uint64_t c4_mono_to_real_us(uint64_t mono_ns) {
  return (uint64_t)((int64_t)mono_ns + real_minus_mono_ns) / 1000u;
}

static _Atomic(c4_logger_fn) nccl_logger;

void c4_set_logger(c4_logger_fn fn) {
  if (fn) atomic_store(&nccl_logger, fn);
}

void c4_log(int level, const char *fmt, ...) {
  c4_logger_fn fn = atomic_load(&nccl_logger);
  if (!fn && level > log_level) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (fn) /* NCCL levels: 2 WARN, 3 INFO; subsystem NET (0x10) */
    fn(level <= 2 ? 2 : 3, 0x10, __FILE__, __LINE__, "c4-shim: %s", line);
  else
    fprintf(stderr, "c4-shim[%d]: %s\n", (int)c4_pid(), line);
}

static int env_int(const char *name, int dflt, int lo, int hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < lo || x > hi) {
    c4_log(1, "ignoring %s=%s (want %d..%d)", name, v, lo, hi);
    return dflt;
  }
  return (int)x;
}

/* ---- addresses ---- */
int c4_addr_is_v4(const c4p_addr *a) {
  static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(a->b, pfx, 12) == 0;
}

void c4_addr_from_sockaddr(c4p_addr *a, const struct sockaddr_storage *ss) {
  memset(a, 0, sizeof *a);
  if (ss->ss_family == AF_INET) {
    a->b[10] = a->b[11] = 0xff;
    memcpy(&a->b[12], &((const struct sockaddr_in *)ss)->sin_addr, 4);
  } else if (ss->ss_family == AF_INET6) {
    memcpy(a->b, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
  }
}

unsigned c4_addr_to_sockaddr(const c4p_addr *a, uint16_t port, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof *ss);
  if (c4_addr_is_v4(a)) {
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    memcpy(&s4->sin_addr, &a->b[12], 4);
    return sizeof *s4;
  }
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
  s6->sin6_family = AF_INET6;
  s6->sin6_port = htons(port);
  memcpy(&s6->sin6_addr, a->b, 16);
  return sizeof *s6;
}

void c4_addr_str(const c4p_addr *a, char *out, size_t cap) {
  if (c4_addr_is_v4(a)) inet_ntop(AF_INET, &a->b[12], out, (socklen_t)cap);
  else inet_ntop(AF_INET6, a->b, out, (socklen_t)cap);
}

int c4_addr_parse(const char *s, c4p_addr *a) {
  memset(a, 0, sizeof *a);
  if (inet_pton(AF_INET, s, &a->b[12]) == 1) { a->b[10] = a->b[11] = 0xff; return 0; }
  return inet_pton(AF_INET6, s, a->b) == 1 ? 0 : -1;
}

static const char *sysfs_root(void) {
  const char *s = getenv("C4_SYSFS"); /* tests point this at a fake tree */
  return s && *s ? s : "/sys";
}

static int read_speed(const char *ifname) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/class/net/%s/speed", sysfs_root(), ifname);
  FILE *f = fopen(path, "r");
  int mbps = 0;
  if (f) {
    if (fscanf(f, "%d", &mbps) != 1) mbps = 0;
    fclose(f);
  }
  return mbps > 0 ? mbps : 10000;
}

/* The PCI function behind an interface, as NCCL's topology code wants it: the resolved
 * /sys/devices/... path of /sys/class/net/<if>/device. Virtual interfaces (veth, loopback)
 * have none and report "". */
static void read_pci(const char *ifname, char *out) {
  char path[PATH_MAX], real[PATH_MAX];
  out[0] = 0;
  snprintf(path, sizeof path, "%s/class/net/%s/device", sysfs_root(), ifname);
  if (!realpath(path, real)) return;
  size_t n = strlen(real);
  if (n < C4_PCI_PATH_LEN) memcpy(out, real, n + 1); /* a longer path is no path we can report */
}

static void add_dev(const c4p_addr *a, const char *ifname) {
  int d = c4_cfg.ndevs++;
  c4_cfg.dev_addr[d] = *a;
  snprintf(c4_cfg.dev_name[d], sizeof c4_cfg.dev_name[d], "%s", ifname);
  c4_cfg.dev_speed_mbps[d] = read_speed(ifname);
  read_pci(ifname, c4_cfg.dev_pci[d]);
}

/* The interface that holds `a`, or "" (an address of another namespace, or a typo). */
static void ifname_of(struct ifaddrs *ifa, const c4p_addr *a, char *out, size_t cap) {
  out[0] = 0;
  for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    c4p_addr x;
    c4_addr_from_sockaddr(&x, (const struct sockaddr_storage *)(void *)i->ifa_addr);
    if (!memcmp(&x, a, sizeof x)) { snprintf(out, cap, "%s", i->ifa_name); return; }
  }
}

/* Devices: C4_SHIM_ADDR (comma list) or the IPv4 addresses of C4_SHIM_IFNAME, else of every
 * up non-loopback interface, else loopback so a single host still works. */
static void find_devices(void) {
  struct ifaddrs *ifa = NULL;
  if (getifaddrs(&ifa) != 0) ifa = NULL;
  const char *addrs = getenv("C4_SHIM_ADDR");
  if (addrs && *addrs) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", addrs);
    for (char *save, *t = strtok_r(tmp, ",", &save); t && c4_cfg.ndevs < C4_MAX_DEVS;
         t = strtok_r(NULL, ",", &save)) {
      c4p_addr a;
      char ifname[IF_NAMESIZE + 1];
      if (c4_addr_parse(t, &a) != 0) {
        c4_log(1, "C4_SHIM_ADDR: cannot parse '%s'", t);
        continue;
      }
      ifname_of(ifa, &a, ifname, sizeof ifname);
      if (!ifname[0]) snprintf(ifname, sizeof ifname, "c4addr%d", c4_cfg.ndevs);
      add_dev(&a, ifname);
    }
  }
  const char *want = getenv("C4_SHIM_IFNAME");
  if (!c4_cfg.ndevs) {
    for (struct ifaddrs *i = ifa; i && c4_cfg.ndevs < C4_MAX_DEVS; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      if (want && *want ? strcmp(i->ifa_name, want) != 0 : (i->ifa_flags & IFF_LOOPBACK) != 0)
        continue;
      c4p_addr a;
      c4_addr_from_sockaddr(&a, (const struct sockaddr_storage *)(void *)i->ifa_addr);
      add_dev(&a, i->ifa_name);
    }
  }
  if (ifa) freeifaddrs(ifa);
  if (!c4_cfg.ndevs) {
    c4p_addr lo;
    c4_addr_parse("127.0.0.1", &lo);
    add_dev(&lo, "lo");
  }
}

/* Who we are in the job: the launcher's rank variable (C4_RANK overrides, then torchrun's RANK,
 * Open MPI's, Slurm's) and C4_JOB. Unset or malformed values leave the rank unknown (-1): the
 * agent then drops our records rather than guess (node_agent/README.md). */
static void find_identity(void) {
  static const char *const vars[] = {"C4_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"};
  c4_cfg.job_rank = C4P_NO_RANK;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (!v || !*v) continue;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > INT32_MAX) {
      c4_log(1, "ignoring %s=%s (not a rank)", vars[i], v);
      continue;
    }
    c4_cfg.job_rank = (int32_t)x;
    break;
  }
  const char *job = getenv("C4_JOB");
  if (job && strlen(job) > C4P_JOB_LEN) c4_log(1, "ignoring C4_JOB: longer than %d bytes", C4P_JOB_LEN);
  else if (job) snprintf(c4_cfg.job, sizeof c4_cfg.job, "%s", job);
  if (getrandom(&c4_cfg.key, sizeof c4_cfg.key, GRND_NONBLOCK) != (ssize_t)sizeof c4_cfg.key)
    c4_cfg.key = c4_now_ns() ^ ((uint64_t)getpid() << 32);
  if (!c4_cfg.key) c4_cfg.key = 1;
}

/* ---- background thread ---- */
/* What the agent's queue had no room for: sent first on the next attempt. A datagram is one
 * record, or a BATCH of the records that fit together in C4P_MAX_BATCH (one send per drain
 * round instead of one per record, on both sides of the socket). */
static uint8_t stash[C4P_MAX_BATCH];
static size_t stash_len;
static unsigned stash_records;
static uint8_t next_rec[C4_SLOT_BYTES]; /* popped, but did not fit in the last batch */
static size_t next_len;
static uint64_t absent_until; /* the agent's socket had no listener: try again after this */
#define ABSENT_RETRY_NS (100ull * 1000000ull)

static size_t pop_next(uint8_t *out) {
  if (next_len) {
    size_t n = next_len;
    memcpy(out, next_rec, n);
    next_len = 0;
    return n;
  }
  return c4_ring_pop(ring, out, C4_SLOT_BYTES);
}

/* Fill the stash with the next datagram: a lone record, or a batch of several. */
static void fill_stash(void) {
  uint8_t rec[C4_SLOT_BYTES];
  static uint8_t batch[C4P_MAX_BATCH]; /* background thread (or under flush_mu) only */
  size_t n = pop_next(rec);
  if (!n) return;
  size_t len = c4p_batch_begin(batch, sizeof batch), first = n;
  if (!c4p_batch_add(batch, &len, sizeof batch, rec, n)) { /* not batchable: alone */
    memcpy(stash, rec, n);
    stash_len = n;
    stash_records = 1;
    return;
  }
  unsigned count = 1;
  while ((n = pop_next(rec)) && c4p_batch_add(batch, &len, sizeof batch, rec, n)) count++;
  if (n) { /* did not fit: the first record of the next datagram */
    memcpy(next_rec, rec, n);
    next_len = n;
  }
  if (count == 1) {
    memcpy(stash, batch + C4P_HDR_LEN, first);
    stash_len = first;
  } else {
    memcpy(stash, batch, len);
    stash_len = c4p_batch_end(stash, len);
  }
  stash_records = count;
}

/* Send what the ring holds. A full agent queue (the kernel's net.unix.max_dgram_qlen, 10 on
 * hosts without systemd's 512) is back-pressure, not loss: we retry for up to `budget_ns`
 * while the agent catches up, and then leave the rest in the ring. An agent that is not
 * there (restarting) is waited for too, with one attempt every 100 ms. Records are lost only
 * when the ring itself is full (counted in ring_drops) or a send fails otherwise (counted in
 * send_drops). Background thread only (or under flush_mu). */
static int drain_ring(uint64_t budget_ns) { /* 1: the ring is empty now */
  uint64_t now = c4_now_ns(), give_up = now + budget_ns;
  if (now < absent_until) return 0;
  for (;;) {
    if (!stash_len) fill_stash();
    if (!stash_len) return 1;
    int r = c4_agent_send(stash, stash_len);
    if (r == C4_SEND_ABSENT) {
      absent_until = c4_now_ns() + ABSENT_RETRY_NS;
      return 0;
    }
    if (r == C4_SEND_FULL) {
      if (c4_now_ns() >= give_up) return 0;
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
      continue;
    }
    atomic_fetch_add(r == 0 ? &c4_stat.records_sent : &c4_stat.send_drops, stash_records);
    stash_len = 0;
  }
}

static void send_stats(void) {
  c4p_stats s = {
      .pid = c4_pid(),
      .job_rank = c4_cfg.job_rank,
      .ring_drops = atomic_load(&c4_stat.ring_drops),
      .send_drops = atomic_load(&c4_stat.send_drops),
      .lookups = atomic_load(&c4_stat.lookups),
      .lookup_timeouts = atomic_load(&c4_stat.lookup_timeouts),
      .lookup_failures = atomic_load(&c4_stat.lookup_failures),
      .bind_fallbacks = atomic_load(&c4_stat.bind_fallbacks),
      .records_sent = atomic_load(&c4_stat.records_sent),
      .handoffs = atomic_load(&c4_stat.handoffs),
      .route_fallbacks = atomic_load(&c4_stat.route_fallbacks),
  };
  memcpy(s.job, c4_cfg.job, sizeof s.job);
  uint8_t buf[C4P_MAX_DGRAM];
  size_t n = c4p_encode_stats(&s, buf, sizeof buf);
  (void)c4_agent_send(buf, n);
}

void c4_rt_flush(void) {
  pthread_mutex_lock(&flush_mu);
  if (c4_transport_tick) c4_transport_tick(c4_now_ns(), 1);
  if (c4_profiler_tick) c4_profiler_tick(c4_now_ns());
  absent_until = 0;
  drain_ring(100000000ull); /* finalize: give a busy agent up to 100 ms */
  send_stats();
  pthread_mutex_unlock(&flush_mu);
}

/* Records pushed since the background thread last sent the ring: a quarter of the ring sends
 * it before its period is over. */
static atomic_uint unsent;

static void *bg_main(void *arg) {
  (void)arg;
  uint64_t next_report = c4_now_ns(), next_refresh = next_report, next_send = next_report;
  for (;;) {
    struct timespec ts = {0, (long)c4_cfg.drain_us * 1000};
    nanosleep(&ts, NULL);
    uint64_t now = c4_now_ns();
    c4_agent_pump();
    pthread_mutex_lock(&flush_mu);
    int report = now >= next_report;
    int refresh = now >= next_refresh;
    if (report) next_report = now + (uint64_t)c4_cfg.watchdog_ms * 1000000ull;
    if (refresh) next_refresh = now + (uint64_t)c4_cfg.refresh_ms * 1000000ull;
    /* The transport's tick emits connection snapshots (report) and re-asks the agent for live
     * connections' weights (refresh); the profiler's tick is the in-flight watchdog. */
    if (c4_transport_tick && (report || refresh))
      c4_transport_tick(now, (report ? 1 : 0) | (refresh ? 2 : 0)); /* both when both are due */
    if (c4_profiler_tick && report) c4_profiler_tick(now);
    /* Records go out every C4_SEND_US (10 ms), not every turn: the agent pays per datagram
     * and per wake-up, and an 8-GPU host has eight of us (bench/agent). Sooner when a quarter
     * of the ring is waiting, and with every watchdog report (in-flight records). */
    if (report || now >= next_send || atomic_load(&unsent) >= c4_cfg.ring_slots / 4) {
      atomic_store(&unsent, 0);
      /* what a full agent queue left in the ring is tried again on the next turn */
      if (drain_ring((uint64_t)c4_cfg.drain_us * 1000u))
        next_send = now + (uint64_t)c4_cfg.send_us * 1000u;
    }
    if (report) send_stats();
    pthread_mutex_unlock(&flush_mu);
  }
  return NULL;
}

static void init_once(void) {
  refresh_pid();
  pthread_atfork(NULL, NULL, refresh_pid);
  struct timespec rt, mo;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mo);
  real_minus_mono_ns = ((int64_t)rt.tv_sec - mo.tv_sec) * 1000000000ll + (rt.tv_nsec - mo.tv_nsec);
  log_level = env_int("C4_SHIM_DEBUG", 1, 0, 5);
  const char *sock = getenv("C4_AGENT_SOCKET");
  if (!sock) sock = C4_DEFAULT_AGENT_SOCKET;
  if (strcmp(sock, "off") == 0) sock = "";
  snprintf(c4_cfg.agent_socket, sizeof c4_cfg.agent_socket, "%s", sock);
  c4_cfg.shim_port = env_int("C4_SHIM_PORT", C4_DEFAULT_SHIM_PORT, 0, 65535);
  /* With an agent, the agent owns the fixed port for every process of the host (FORMAT.md
   * "Listening"); C4_SHIM_HANDOFF=0 brings back one acceptor per process on that port. */
  c4_cfg.handoff = c4_cfg.agent_socket[0] && c4_cfg.shim_port && env_int("C4_SHIM_HANDOFF", 1, 0, 1);
  c4_cfg.lookup_timeout_ms = env_int("C4_LOOKUP_TIMEOUT_MS", 10, 0, 10000);
  c4_cfg.verbs_budget_ms = env_int("C4_VERBS_BUDGET_MS", c4_cfg.lookup_timeout_ms, 0, 60000);
  c4_cfg.refresh_ms = env_int("C4_REFRESH_MS", 1000, 10, 3600000);
  c4_cfg.watchdog_ms = env_int("C4_WATCHDOG_MS", 1000, 10, 3600000);
  c4_cfg.drain_us = env_int("C4_DRAIN_US", 2000, 100, 1000000);
  c4_cfg.send_us = env_int("C4_SEND_US", 10000, 100, 1000000);
  c4_cfg.ring_slots = (unsigned)env_int("C4_RING_SLOTS", 4096, 2, 1 << 20);
  c4_cfg.telemetry = env_int("C4_TELEMETRY", 1, 0, 1);
  find_identity();
  find_devices();
  ring = c4_ring_create(c4_cfg.ring_slots);

  if (c4_cfg.agent_socket[0]) {
    agent_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (agent_fd >= 0) {
      /* An abstract name derived from our key: the agent replies to it and hands us sockets
       * through it, even after the agent itself restarted and forgot us. */
      struct sockaddr_un self = {.sun_family = AF_UNIX};
      int len = snprintf(self.sun_path + 1, sizeof self.sun_path - 1, "c4-shim-%016llx",
                         (unsigned long long)c4_cfg.key);
      if (bind(agent_fd, (struct sockaddr *)&self,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len)) != 0) {
        c4_log(1, "cannot bind the agent socket (%s)", strerror(errno));
        close(agent_fd);
        agent_fd = -1;
      }
      int sz = 1 << 20;
      if (agent_fd >= 0) setsockopt(agent_fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    }
    agent_sa.sun_family = AF_UNIX;
    snprintf(agent_sa.sun_path, sizeof agent_sa.sun_path, "%s", c4_cfg.agent_socket);
    agent_salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(agent_sa.sun_path) + 1);
  }
  if (agent_fd < 0) c4_cfg.handoff = 0;
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  /* Block signals in the helper so the application's handlers keep running on its threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  if (pthread_create(&th, &at, bg_main, NULL) != 0) c4_log(1, "no background thread");
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&at);
}

void c4_rt_init(void) { pthread_once(&once, init_once); }

void c4_emit(const void *dgram, size_t len) {
  if (!c4_cfg.telemetry) return;
  if (c4_ring_push(ring, dgram, len) != 0) atomic_fetch_add(&c4_stat.ring_drops, 1);
  else atomic_fetch_add_explicit(&unsent, 1, memory_order_relaxed);
}

/* ---- agent client ---- */
int c4_agent_send(const void *buf, size_t len) {
  if (agent_fd < 0) return -1;
  ssize_t n = sendto(agent_fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL,
                     (struct sockaddr *)&agent_sa, agent_salen);
  if (n == (ssize_t)len) return 0;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) return C4_SEND_FULL;
  if (n < 0 && (errno == ENOENT || errno == ECONNREFUSED)) return C4_SEND_ABSENT;
  return -1;
}

static void close_fds(const int *fds, int n) {
  for (int i = 0; i < n; i++) close(fds[i]);
}

static void pump_locked(void) {
  uint8_t buf[C4P_MAX_DGRAM];
  union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 4)]; } cm;
  for (;;) {
    struct iovec iov = {buf, sizeof buf};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                        .msg_controllen = sizeof cm.b};
    ssize_t n = recvmsg(agent_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    int fds[4], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < k && nfds < 4; i++) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    int type = c4p_peek_type(buf, (size_t)n);
    if (type == C4P_HANDOFF) {
      c4p_hello h;
      if (nfds == 1 && c4p_decode_handoff(buf, (size_t)n, &h) == 0 && c4_on_handoff) {
        atomic_fetch_add(&c4_stat.handoffs, 1);
        c4_on_handoff(fds[0], &h); /* the transport owns the socket from here */
      } else {
        close_fds(fds, nfds);
      }
      continue;
    }
    close_fds(fds, nfds); /* descriptors never come with anything else */
    c4p_assign a;
    if (type != C4P_ASSIGN || c4p_decode_assign(buf, (size_t)n, &a) != 0) {
      c4_log(3, "ignoring malformed datagram from agent (%zd bytes)", n);
      continue; /* garbage from the agent is dropped, never trusted */
    }
    int matched = 0;
    if (a.req_id != 0) {
      for (int i = 0; i < MAX_TICKETS; i++) {
        if (tickets[i].used && !tickets[i].answered && tickets[i].req_id == a.req_id) {
          tickets[i].reply = a;
          tickets[i].answered = 1;
          matched = 1;
          break;
        }
      }
    }
    if (!matched && a.status == C4P_OK && c4_on_assign_update) c4_on_assign_update(&a);
  }
}

void c4_agent_pump(void) {
  if (agent_fd < 0) return;
  pthread_mutex_lock(&agent_mu);
  pump_locked();
  pthread_mutex_unlock(&agent_mu);
}

int c4_lookup_start(const c4p_lookup *key) {
  if (agent_fd < 0) {
    atomic_fetch_add(&c4_stat.lookup_failures, 1);
    return -1;
  }
  atomic_fetch_add(&c4_stat.lookups, 1);
  pthread_mutex_lock(&agent_mu);
  int t = -1;
  for (int i = 0; i < MAX_TICKETS; i++)
    if (!tickets[i].used) { t = i; break; }
  if (t < 0) {
    pthread_mutex_unlock(&agent_mu);
    atomic_fetch_add(&c4_stat.lookup_failures, 1);
    return -1;
  }
  c4p_lookup k = *key;
  c4_lookup_identity(&k);
  k.req_id = next_req_id++;
  if (next_req_id == 0) next_req_id = 1; /* 0 is reserved for pushes and refreshes */
  uint8_t buf[C4P_MAX_DGRAM];
  size_t n = c4p_encode_lookup(&k, buf, sizeof buf);
  int r = c4_agent_send(buf, n);
  if (r != 0 && r != C4_SEND_FULL) {
    /* No agent listening (ENOENT/ECONNREFUSED): answer "default" now so an absent agent costs
     * one failed sendto, not a deadline. */
    pthread_mutex_unlock(&agent_mu);
    atomic_fetch_add(&c4_stat.lookup_failures, 1);
    return -1;
  }
  /* A full queue: the request is retried by every poll until the deadline. */
  tickets[t] = (ticket_t){.used = 1, .req_id = k.req_id,
                          .deadline_ns = c4_now_ns() + (uint64_t)c4_cfg.lookup_timeout_ms * 1000000ull,
                          .unsent = r == C4_SEND_FULL ? n : 0};
  if (r == C4_SEND_FULL) memcpy(tickets[t].req, buf, n);
  pthread_mutex_unlock(&agent_mu);
  return t;
}

int c4_lookup_poll(int t, c4p_assign *out) {
  if (t < 0 || t >= MAX_TICKETS) return 1;
  pthread_mutex_lock(&agent_mu);
  if (tickets[t].unsent) {
    int r = c4_agent_send(tickets[t].req, tickets[t].unsent);
    if (r == 0) tickets[t].unsent = 0;
    else if (r != C4_SEND_FULL) tickets[t].deadline_ns = 0; /* the agent went away: default now */
  }
  pump_locked();
  int done = 0;
  if (tickets[t].answered) {
    *out = tickets[t].reply;
    done = 1;
  } else if (c4_now_ns() >= tickets[t].deadline_ns) {
    memset(out, 0, sizeof *out);
    out->status = C4P_UNKNOWN;
    atomic_fetch_add(&c4_stat.lookup_timeouts, 1);
    done = 1;
  }
  if (done) tickets[t].used = 0;
  pthread_mutex_unlock(&agent_mu);
  return done;
}

void c4_lookup_cancel(int t) {
  if (t < 0 || t >= MAX_TICKETS) return;
  pthread_mutex_lock(&agent_mu);
  tickets[t].used = 0;
  pthread_mutex_unlock(&agent_mu);
}

int c4_lookup_wait(const c4p_lookup *key, c4p_assign *out, uint64_t max_ns) {
  int t = c4_lookup_start(key);
  if (t < 0) return 0;
  uint64_t give_up = c4_now_ns() + max_ns;
  for (;;) {
    if (c4_lookup_poll(t, out)) return out->status == C4P_OK;
    if (c4_now_ns() >= give_up) {
      c4_lookup_cancel(t);
      atomic_fetch_add(&c4_stat.lookup_timeouts, 1);
      return 0;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

void c4_lookup_identity(c4p_lookup *key) {
  key->pid = c4_pid();
  key->src_rank = c4_cfg.job_rank;
  memcpy(key->job, c4_cfg.job, sizeof key->job);
}

/* ---- communicator rank table ----
 * Fixed-size open addressing, claimed with CAS and never freed: a process has a handful of
 * communicators and talks over the network to a few peers in each. Values are stored +1 so
 * that a zeroed slot reads as "unknown" even between the key's claim and the value's store. */
#define COMMS 128
#define RANKS_PER_COMM 1024
typedef struct {
  atomic_uint_fast64_t hash; /* 0 = free */
  atomic_int self;           /* our rank + 1 */
  struct { atomic_int key, val; } ranks[RANKS_PER_COMM]; /* comm rank + 1 -> job rank + 1 */
} comm_slot;
static comm_slot comms[COMMS];

static comm_slot *comm_find(uint64_t hash, int create) {
  if (!hash) return NULL;
  for (unsigned i = 0; i < COMMS; i++) {
    comm_slot *c = &comms[(hash + i) % COMMS];
    uint_fast64_t cur = atomic_load(&c->hash);
    if (cur == hash) return c;
    if (cur == 0) {
      if (!create) return NULL;
      if (atomic_compare_exchange_strong(&c->hash, &cur, hash) || cur == hash) return c;
    }
  }
  return NULL;
}

void c4_comm_set_self(uint64_t comm_hash, int comm_rank) {
  comm_slot *c = comm_find(comm_hash, 1);
  if (c && comm_rank >= 0) atomic_store(&c->self, comm_rank + 1);
}

int c4_comm_self(uint64_t comm_hash) {
  comm_slot *c = comm_find(comm_hash, 0);
  return c ? atomic_load(&c->self) - 1 : C4P_NO_RANK;
}

void c4_comm_learn(uint64_t comm_hash, int comm_rank, int job_rank) {
  if (comm_rank < 0 || job_rank < 0) return;
  comm_slot *c = comm_find(comm_hash, 1);
  if (!c) return;
  for (unsigned i = 0; i < RANKS_PER_COMM; i++) {
    unsigned k = ((unsigned)comm_rank + i) % RANKS_PER_COMM;
    int cur = atomic_load(&c->ranks[k].key);
    if (cur == 0 && !atomic_compare_exchange_strong(&c->ranks[k].key, &cur, comm_rank + 1) &&
        cur != comm_rank + 1)
      continue; /* lost the slot to another rank: probe on */
    if (cur != 0 && cur != comm_rank + 1) continue;
    atomic_store(&c->ranks[k].val, job_rank + 1);
    return;
  }
}

int c4_comm_job_rank(uint64_t comm_hash, int comm_rank) {
  comm_slot *c = comm_find(comm_hash, 0);
  if (!c || comm_rank < 0) return C4P_NO_RANK;
  for (unsigned i = 0; i < RANKS_PER_COMM; i++) {
    unsigned k = ((unsigned)comm_rank + i) % RANKS_PER_COMM;
    int cur = atomic_load(&c->ranks[k].key);
    if (cur == 0) return C4P_NO_RANK;
    if (cur == comm_rank + 1) return atomic_load(&c->ranks[k].val) - 1;
  }
  return C4P_NO_RANK;
}
