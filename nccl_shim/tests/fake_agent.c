/* fake_agent.c: see fake_agent.h. Deliberately simple and single-threaded: one receive loop
 * with a short timeout so agent_stop() is prompt. */
#include "fake_agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CAP 4096

static pthread_t th, hth;
static int fd = -1, joinable, hjoinable, lfd = -1, nhand;
static atomic_int running;
static char sock_path[108];
static agent_cfg cfg;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static c4p_coll colls[CAP];
static c4p_conn conns[CAP];
static c4p_lookup lookups[CAP];
static int ncoll, nconn, nlook, nbad, have_stats, answered;
static c4p_stats stats;
static struct sockaddr_un last_peer;
static socklen_t last_peer_len;

static void reply(const c4p_lookup *l, const struct sockaddr_un *peer, socklen_t plen) {
  uint8_t buf[C4P_MAX_DGRAM];
  size_t n;
  if (cfg.mode == AGENT_GARBAGE) {
    /* A mix of wrong magic, a truncated reply and a reply whose flow count lies. */
    static int k;
    memset(buf, 0xA5, sizeof buf);
    n = (size_t)(7 + (k++ % 3) * 30);
    if (k % 3 == 0) {
      c4p_assign a = {.req_id = l->req_id, .status = C4P_OK, .nflows = 1};
      n = c4p_encode_assign(&a, buf, sizeof buf);
      buf[C4P_HDR_LEN + 51] = 9; /* nflows no longer matches the length */
    }
    sendto(fd, buf, n, MSG_DONTWAIT, (const struct sockaddr *)peer, plen);
    return;
  }
  c4p_assign a = {.req_id = l->req_id, .version = 1, .comm_id = l->comm_id, .local = l->local,
                  .remote = l->remote, .conn_index = l->conn_index, .src_rank = l->src_rank,
                  .dst_rank = l->dst_rank};
  if (cfg.nflows <= 0) {
    a.status = C4P_UNKNOWN;
  } else {
    a.status = C4P_OK;
    a.nflows = (uint8_t)cfg.nflows;
    for (int i = 0; i < cfg.nflows; i++) {
      a.flows[i].sport = cfg.ports[0] ? cfg.ports[i] : (uint16_t)(cfg.base_port + 16 * l->conn_index + i);
      a.flows[i].weight_ppm = cfg.weight_ppm[i];
    }
  }
  n = c4p_encode_assign(&a, buf, sizeof buf);
  sendto(fd, buf, n, MSG_DONTWAIT, (const struct sockaddr *)peer, plen);
}

static void telemetry(const uint8_t *buf, size_t n);

static void *loop(void *arg) {
  (void)arg;
  static uint8_t buf[C4P_MAX_BATCH];
  while (running) {
    struct sockaddr_un peer;
    socklen_t plen = sizeof peer;
    ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&peer, &plen);
    if (n < 0) continue; /* timeout: check running */
    int t = c4p_peek_type(buf, (size_t)n);
    if (t == C4P_BATCH) { /* several records in one datagram */
      size_t off = 0, mlen;
      const uint8_t *msg;
      int r;
      while ((r = c4p_batch_next(buf, (size_t)n, &off, &msg, &mlen)) == 1) telemetry(msg, mlen);
      if (r < 0) { pthread_mutex_lock(&mu); nbad++; pthread_mutex_unlock(&mu); }
      continue;
    }
    if (t == C4P_COLL || t == C4P_CONN) {
      telemetry(buf, (size_t)n);
      continue;
    }
    pthread_mutex_lock(&mu);
    if (t == C4P_LOOKUP) {
      c4p_lookup l;
      if (c4p_decode_lookup(buf, (size_t)n, &l) == 0) {
        if (nlook < CAP) lookups[nlook++] = l;
        last_peer = peer;
        last_peer_len = plen;
        pthread_mutex_unlock(&mu);
        if (cfg.mode == AGENT_SLOW) {
          struct timespec ts = {cfg.slow_ms / 1000, (long)(cfg.slow_ms % 1000) * 1000000};
          nanosleep(&ts, NULL);
        }
        if (cfg.mode != AGENT_SILENT && l.req_id != 0) reply(&l, &peer, plen);
        pthread_mutex_lock(&mu);
        if (l.req_id != 0 && cfg.mode == AGENT_DIE_AFTER && ++answered >= cfg.die_after) {
          /* Die: stop reading and remove the socket, like a crashed agent. */
          close(fd);
          fd = -1;
          unlink(sock_path);
          running = 0;
        }
      } else {
        nbad++;
      }
    } else if (t == C4P_STATS) {
      if (c4p_decode_stats(buf, (size_t)n, &stats) == 0) have_stats = 1;
      else nbad++;
    } else {
      nbad++;
    }
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

/* The fixed-port owner: read a hello, pass the socket to "\0c4-shim-<key>" with a HANDOFF
 * datagram, as node_agent/handoff.py does. */
static void handoff_one(int s) {
  uint8_t hello[C4P_HELLO_LEN];
  size_t got = 0;
  struct pollfd pf = {.fd = s, .events = POLLIN};
  while (got < sizeof hello && poll(&pf, 1, 2000) == 1) {
    ssize_t k = recv(s, hello + got, sizeof hello - got, 0);
    if (k <= 0) break;
    got += (size_t)k;
  }
  c4p_hello h;
  if (getenv("FAKE_NCCL_LOG") && (got < sizeof hello || c4p_decode_hello(hello, &h) != 0))
    fprintf(stderr, "fake agent: hello of %zu bytes refused\n", got);
  if (got < sizeof hello || c4p_decode_hello(hello, &h) != 0 || cfg.handoff_refuse) {
    (void)send(s, C4P_VERDICT_NO, C4P_VERDICT_LEN, MSG_NOSIGNAL);
    close(s);
    pthread_mutex_lock(&mu);
    nhand++;
    pthread_mutex_unlock(&mu);
    return;
  }
  uint8_t buf[C4P_MAX_DGRAM];
  size_t n = c4p_encode_handoff(&h, buf, sizeof buf);
  struct sockaddr_un to = {.sun_family = AF_UNIX};
  int len = snprintf(to.sun_path + 1, sizeof to.sun_path - 1, "c4-shim-%016llx", (unsigned long long)h.key);
  union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } cm;
  struct iovec iov = {buf, n};
  struct msghdr mh = {.msg_name = &to,
                      .msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len),
                      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof cm.b};
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &s, sizeof s);
  int hs = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (hs < 0 || sendmsg(hs, &mh, 0) != (ssize_t)n) {
    if (getenv("FAKE_NCCL_LOG")) fprintf(stderr, "fake agent: hand-off failed: %s\n", strerror(errno));
    (void)send(s, C4P_VERDICT_NO, C4P_VERDICT_LEN, MSG_NOSIGNAL);
  }
  if (hs >= 0) close(hs);
  close(s); /* the receiving process holds its own copy now */
  pthread_mutex_lock(&mu);
  nhand++;
  pthread_mutex_unlock(&mu);
}

static void *handoff_loop(void *arg) {
  (void)arg;
  while (running) {
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    if (poll(&pf, 1, 20) != 1) continue;
    int s = accept(lfd, NULL, NULL);
    if (s >= 0) handoff_one(s);
  }
  return NULL;
}

static void telemetry(const uint8_t *buf, size_t n) {
  int t = c4p_peek_type(buf, n);
  pthread_mutex_lock(&mu);
  if (t == C4P_COLL && ncoll < CAP && c4p_decode_coll(buf, n, &colls[ncoll]) == 0) ncoll++;
  else if (t == C4P_CONN && nconn < CAP && c4p_decode_conn(buf, n, &conns[nconn]) == 0) nconn++;
  else nbad++;
  pthread_mutex_unlock(&mu);
}

/* A test that returns early (a failed CHECK) never calls agent_stop: the socket file goes at
   exit instead, but only in the process that bound it (a forked child's exit must not). */
static pid_t bound_by;
static void unlink_at_exit(void) {
  if (bound_by == getpid() && sock_path[0]) unlink(sock_path);
}

int agent_start(const char *path, const agent_cfg *c) {
  if (!bound_by) atexit(unlink_at_exit);
  bound_by = getpid();
  if (joinable) { /* an agent that died on its own: reap its thread before reusing state */
    pthread_join(th, NULL);
    joinable = 0;
  }
  cfg = *c;
  snprintf(sock_path, sizeof sock_path, "%s", path);
  unlink(path);
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) return -1;
  int sz = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  struct timeval tv = {0, 20000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ncoll = nconn = nlook = nbad = have_stats = answered = nhand = 0;
  running = 1;
  if (cfg.handoff_port) {
    struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(cfg.handoff_port)};
    la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&la, sizeof la) != 0 || listen(lfd, 128) != 0) return -1;
    hjoinable = pthread_create(&hth, NULL, handoff_loop, NULL) == 0;
  }
  int rc = pthread_create(&th, NULL, loop, NULL);
  joinable = rc == 0;
  return rc;
}

void agent_stop(void) {
  running = 0;
  if (hjoinable) { pthread_join(hth, NULL); hjoinable = 0; }
  if (lfd >= 0) { close(lfd); lfd = -1; }
  if (!joinable) return;
  pthread_join(th, NULL);
  joinable = 0;
  if (fd >= 0) close(fd);
  fd = -1;
  unlink(sock_path);
}

int agent_push(const c4p_assign *a) {
  uint8_t buf[C4P_MAX_DGRAM];
  size_t n = c4p_encode_assign(a, buf, sizeof buf);
  pthread_mutex_lock(&mu);
  ssize_t k = fd >= 0 && last_peer_len
                  ? sendto(fd, buf, n, 0, (struct sockaddr *)&last_peer, last_peer_len)
                  : -1;
  pthread_mutex_unlock(&mu);
  return k == (ssize_t)n ? 0 : -1;
}

#define COPY_OUT(arr, cnt)                                                                     \
  pthread_mutex_lock(&mu);                                                                     \
  int k = cnt < cap ? cnt : cap;                                                               \
  memcpy(out, arr, (size_t)k * sizeof arr[0]);                                                 \
  pthread_mutex_unlock(&mu);                                                                   \
  return k;

int agent_colls(c4p_coll *out, int cap) { COPY_OUT(colls, ncoll) }
int agent_conns(c4p_conn *out, int cap) { COPY_OUT(conns, nconn) }
int agent_lookups(c4p_lookup *out, int cap) { COPY_OUT(lookups, nlook) }

int agent_last_stats(c4p_stats *out) {
  pthread_mutex_lock(&mu);
  int h = have_stats;
  *out = stats;
  pthread_mutex_unlock(&mu);
  return h;
}

int agent_handoffs(void) {
  pthread_mutex_lock(&mu);
  int n = nhand;
  pthread_mutex_unlock(&mu);
  return n;
}

int agent_bad_datagrams(void) {
  pthread_mutex_lock(&mu);
  int n = nbad;
  pthread_mutex_unlock(&mu);
  return n;
}
