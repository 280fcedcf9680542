/* bench_net.c: what one C4-Socket connection costs against the plain alternative, measured in
 * the same run. `throughput`: one plugin connection (loaded with dlopen and driven through
 * ncclNetPlugin_v12, one sender and one receiver thread, 8 x 4 MiB in flight) against a plain
 * TCP socket pair over loopback doing the same transfer with blocking send/recv; rounds
 * alternate and the median is reported. `setup`: connect+accept time of N connections in the
 * environment the caller set (agent off, absent, or present), printed as p50/mean/p99. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netdrv.h"

#define MSG (4u << 20)
#define INFLIGHT 8

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static void die(const char *what) { fprintf(stderr, "bench_net: %s\n", what); exit(1); }

static net_t net;

static void pair(void **sc, void **rc) {
  char h[NCCL_NET_HANDLE_MAXSIZE];
  void *lc;
  if (net_listen(&net, 0, h, &lc)) die("listen");
  *sc = *rc = NULL;
  while (!*sc || !*rc) {
    if (!*sc && net_connect(&net, 0, h, sc)) die("connect");
    if (!*rc && net_accept(&net, lc, rc)) die("accept");
  }
  net_close_listen(&net, lc);
}

typedef struct { void *comm; int send; size_t total; } side_t;

static void *drive(void *arg) {
  side_t *s = arg;
  char *buf = malloc((size_t)MSG * INFLIGHT);
  memset(buf, 1, (size_t)MSG * INFLIGHT);
  void *mh, *req[INFLIGHT] = {0};
  net_regmr(&net, s->comm, buf, (size_t)MSG * INFLIGHT, &mh);
  size_t nmsg = s->total / MSG, posted = 0, done = 0;
  while (done < nmsg) {
    size_t before = done;
    for (int k = 0; k < INFLIGHT; k++) {
      if (!req[k] && posted < nmsg) {
        char *b = buf + (size_t)k * MSG;
        if (s->send ? net_isend(&net, s->comm, b, MSG, 0, mh, &req[k])
                    : net_irecv(&net, s->comm, b, MSG, 0, mh, &req[k]))
          die("post");
        if (req[k]) posted++;
      }
      if (req[k]) {
        int d = 0, sz;
        if (net_test(&net, req[k], &d, &sz)) die("test");
        if (d) { req[k] = NULL; done++; }
      }
    }
    if (done == before) sched_yield(); /* as NCCL's proxy thread does when a pass was idle */
  }
  free(buf);
  return NULL;
}

static double plugin_round(void *sc, void *rc, size_t total) {
  side_t a = {sc, 1, total}, b = {rc, 0, total};
  pthread_t ta, tb;
  uint64_t t0 = now_ns();
  pthread_create(&tb, NULL, drive, &b);
  pthread_create(&ta, NULL, drive, &a);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  return (double)total / (double)(now_ns() - t0); /* GB/s */
}

typedef struct { int fd; size_t total; int send, spin; } plain_t;
static void *plain_drive(void *arg) {
  plain_t *p = arg;
  /* The same buffer footprint as the plugin run (INFLIGHT x 4 MiB, used in turn), so cache
   * effects do not favour either side. */
  char *buf = malloc((size_t)MSG * INFLIGHT);
  memset(buf, 1, (size_t)MSG * INFLIGHT);
  size_t left = p->total;
  while (left) {
    int fl = p->spin ? MSG_DONTWAIT : 0;
    size_t pos = (p->total - left) % ((size_t)MSG * INFLIGHT), room = (size_t)MSG * INFLIGHT - pos;
    size_t want = left < room ? left : room;
    if (want > MSG) want = MSG;
    ssize_t k = p->send ? send(p->fd, buf + pos, want, MSG_NOSIGNAL | fl)
                        : recv(p->fd, buf + pos, want, fl);
    if (k < 0 && p->spin && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      sched_yield();
      continue;
    }
    if (k <= 0) die("plain io");
    left -= (size_t)k;
  }
  free(buf);
  return NULL;
}

static double plain_round(size_t total, int spin) {
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(l, (struct sockaddr *)&sa, sl) || listen(l, 1) || getsockname(l, (struct sockaddr *)&sa, &sl)) die("plain listen");
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, (struct sockaddr *)&sa, sl)) die("plain connect");
  int a = accept(l, NULL, NULL);
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  plain_t s = {c, total, 1, spin}, r = {a, total, 0, spin};
  pthread_t ts, tr;
  uint64_t t0 = now_ns();
  pthread_create(&tr, NULL, plain_drive, &r);
  pthread_create(&ts, NULL, plain_drive, &s);
  pthread_join(ts, NULL);
  pthread_join(tr, NULL);
  double gbs = (double)total / (double)(now_ns() - t0);
  close(a); close(c); close(l);
  return gbs;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: bench_net <lib> throughput [GiB] [rounds] | setup <label> [n]\n"); return 2; }
  void *dl;
  if (net_load(argv[1], 12, &net, &dl) || net_init(&net, 0xbe4c)) die("load");
  if (!strcmp(argv[2], "throughput")) {
    size_t total = (size_t)((argc > 3 ? atof(argv[3]) : 1.0) * (double)(1u << 30));
    int rounds = argc > 4 ? atoi(argv[4]) : 5;
    void *sc, *rc;
    pair(&sc, &rc);
    double p[32], q[32], r[32];
    for (int i = 0; i < rounds; i++) {
      p[i] = plugin_round(sc, rc, total);
      q[i] = plain_round(total, 0);
      r[i] = plain_round(total, 1);
    }
    qsort(p, (size_t)rounds, sizeof p[0], cmp_d);
    qsort(q, (size_t)rounds, sizeof q[0], cmp_d);
    qsort(r, (size_t)rounds, sizeof r[0], cmp_d);
    double mp = p[rounds / 2], mq = q[rounds / 2], mr = r[rounds / 2];
    printf("throughput  c4 connection %6.2f GB/s   plain pair, blocking %6.2f GB/s (ratio %.2f)"
           "   plain pair, polling %6.2f GB/s (ratio %.2f)\n"
           "            (medians of %d alternating rounds of %zu MiB in 4 MiB messages; the c4 "
           "threads poll in test() as NCCL's proxy does)\n",
           mp, mq, mp / mq, mr, mp / mr, rounds, total >> 20);
    net_close_send(&net, sc);
    net_close_recv(&net, rc);
  } else if (!strcmp(argv[2], "setup")) {
    const char *label = argc > 3 ? argv[3] : "?";
    int n = argc > 4 ? atoi(argv[4]) : 200;
    double *us = malloc(sizeof(double) * (size_t)n), sum = 0;
    for (int i = 0; i < n; i++) {
      void *sc, *rc;
      uint64_t t0 = now_ns();
      pair(&sc, &rc);
      us[i] = (double)(now_ns() - t0) / 1e3;
      sum += us[i];
      net_close_send(&net, sc);
      net_close_recv(&net, rc);
    }
    qsort(us, (size_t)n, sizeof us[0], cmp_d);
    printf("setup %-28s p50 %8.1f us   mean %8.1f us   p99 %8.1f us   (%d connections)\n", label,
           us[n / 2], sum / n, us[(n * 99) / 100], n);
  }
  net_finalize(&net);
  return 0;
}
