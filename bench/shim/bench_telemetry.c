/* bench_telemetry.c: the telemetry cost on the transport's hot path, measured on the shim's own
 * code (its sources are compiled into this program, so the internal switch c4_cfg.telemetry can
 * be flipped between rounds of the same process). Each round sends 0-byte messages over one
 * loopback connection (isend + irecv + test until both complete); rounds alternate telemetry
 * off/on; the medians and their difference per isend are printed, together with the cost of the
 * isend call alone. Also: profiler cost per collective (Coll + 2 ProxyOps + 2 KernelCh events). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "c4_rt.h"
#include "c4_transport.h"

extern const ncclProfiler_v5_t ncclProfiler_v5;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void round_trip(void *sc, void *rc, int n, double *per_msg, double *per_isend) {
  static char sbuf[64], rbuf[64];
  uint64_t in_isend = 0, t0 = now_ns();
  for (int i = 0; i < n; i++) {
    void *sr = NULL, *rr = NULL;
    size_t rsz = sizeof rbuf;
    void *d[1] = {rbuf};
    int tags[1] = {0};
    c4t_irecv(rc, 1, d, &rsz, tags, &rr);
    uint64_t a = now_ns();
    c4t_isend(sc, sbuf, 0, 0, &sr);
    in_isend += now_ns() - a;
    int sd = 0, rd = 0;
    size_t s;
    while (!sd || !rd) {
      if (!sd) c4t_test(sr, &sd, &s);
      if (!rd) c4t_test(rr, &rd, &s);
    }
  }
  *per_msg = (double)(now_ns() - t0) / n;
  *per_isend = (double)in_isend / n;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 21, n = argc > 2 ? atoi(argv[2]) : 50000;
  setenv("C4_AGENT_SOCKET", "off", 1);
  setenv("C4_SHIM_PORT", "0", 1);
  c4_rt_init();
  char h[NCCL_NET_HANDLE_MAXSIZE];
  void *lc, *sc = NULL, *rc = NULL;
  c4t_listen(1, 0, h, &lc);
  while (!sc || !rc) {
    if (!sc) c4t_connect(1, 0, h, &sc);
    if (!rc) c4t_accept(lc, &rc);
  }
  double on_m[64], off_m[64], on_i[64], off_i[64];
  for (int r = 0; r < rounds; r++) {
    c4_cfg.telemetry = 0;
    round_trip(sc, rc, n, &off_m[r], &off_i[r]);
    c4_cfg.telemetry = 1;
    round_trip(sc, rc, n, &on_m[r], &on_i[r]);
  }
  qsort(on_m, (size_t)rounds, sizeof(double), cmp_d);
  qsort(off_m, (size_t)rounds, sizeof(double), cmp_d);
  qsort(on_i, (size_t)rounds, sizeof(double), cmp_d);
  qsort(off_i, (size_t)rounds, sizeof(double), cmp_d);
  int m = rounds / 2;
  printf("telemetry   per message (isend+irecv+tests): off %7.0f ns   on %7.0f ns   cost %+6.0f ns\n",
         off_m[m], on_m[m], on_m[m] - off_m[m]);
  printf("telemetry   isend call alone:                off %7.0f ns   on %7.0f ns   cost %+6.0f ns"
         "   (medians of %d alternating rounds x %d messages)\n",
         off_i[m], on_i[m], on_i[m] - off_i[m], rounds, n);

  /* Profiler: one collective = Coll start/stop + 2 ProxyOps + 2 KernelCh, completed. */
  void *ctx;
  static int mask;
  ncclProfiler_v5.init(&ctx, 7, &mask, "bench", 1, 2, 0, NULL);
  int ncoll = 200000;
  uint64_t t0 = now_ns();
  for (int i = 0; i < ncoll; i++) {
    ncclProfilerEventDescr_v5_t d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileColl; d.coll.seqNumber = (uint64_t)i; d.coll.func = "AllReduce";
    d.coll.datatype = "ncclFloat32"; d.coll.count = 1024; d.coll.nChannels = 2;
    void *c, *o1, *o2, *k1, *k2;
    ncclProfiler_v5.startEvent(ctx, &c, &d);
    ncclProfiler_v5.stopEvent(c);
    memset(&d, 0, sizeof d);
    d.type = ncclProfileProxyOp; d.parentObj = c; d.proxyOp.pid = getpid(); d.proxyOp.peer = 1;
    d.proxyOp.nSteps = 1; d.proxyOp.chunkSize = 4096; d.proxyOp.isSend = 1;
    ncclProfiler_v5.startEvent(ctx, &o1, &d);
    d.proxyOp.isSend = 0;
    ncclProfiler_v5.startEvent(ctx, &o2, &d);
    memset(&d, 0, sizeof d);
    d.type = ncclProfileKernelCh; d.parentObj = c;
    ncclProfiler_v5.startEvent(ctx, &k1, &d);
    ncclProfiler_v5.startEvent(ctx, &k2, &d);
    ncclProfiler_v5.stopEvent(o1);
    ncclProfiler_v5.stopEvent(o2);
    ncclProfiler_v5.stopEvent(k1);
    ncclProfiler_v5.stopEvent(k2);
  }
  double per = (double)(now_ns() - t0) / ncoll;
  printf("profiler    per collective (Coll + 2 ProxyOp + 2 KernelCh events, record queued): %6.0f ns"
         "   (ring drops when the agent is off are counted, not waited for)\n", per);
  ncclProfiler_v5.finalize(ctx);
  c4t_close_send(sc);
  c4t_close_recv(rc);
  c4t_close_listen(lc);
  return 0;
}
