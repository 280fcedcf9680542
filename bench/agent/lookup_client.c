/* lookup_client.c: LOOKUP latency as a shim sees it. Sends N lookups one after the other to the
 * agent's socket, each for a random connection of a random job (jobs "bjob<j>", job ranks
 * 0..ranks-1 on this host sending to rank + ranks, channels 0..channels-1), waits for the
 * ASSIGN and takes the round trip with CLOCK_MONOTONIC. Prints one JSON line: count, hits
 * (answers with flows), and round-trip percentiles in microseconds.
 * Usage: lookup_client <socket> <n> <jobs> <ranks> <channels> */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "c4_proto.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 6) { fprintf(stderr, "usage: lookup_client <socket> <n> <jobs> <ranks> <channels>\n"); return 2; }
  int n = atoi(argv[2]), jobs = atoi(argv[3]), ranks = atoi(argv[4]), chans = atoi(argv[5]);
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un self = {.sun_family = AF_UNIX}, agent = {.sun_family = AF_UNIX};
  int len = snprintf(self.sun_path + 1, sizeof self.sun_path - 1, "c4-bench-lookup-%d", (int)getpid());
  if (bind(fd, (struct sockaddr *)&self, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len))) { perror("bind"); return 1; }
  snprintf(agent.sun_path, sizeof agent.sun_path, "%s", argv[1]);
  uint64_t *rtt = calloc((size_t)n, sizeof *rtt);
  int hits = 0, lost = 0;
  srand(7);
  for (int i = 0; i < n; i++) {
    int j = rand() % jobs, r = rand() % ranks, c = rand() % chans;
    c4p_lookup l = {.req_id = (uint32_t)i + 1, .pid = (uint32_t)getpid(), .comm_id = 0x1234,
                    .remote_port = 4792, .conn_index = (uint16_t)c, .kind = C4P_KIND_TCP,
                    .max_flows = 16, .src_rank = r, .dst_rank = r + ranks};
    l.local.b[10] = l.local.b[11] = 0xff; l.local.b[12] = 10; l.local.b[15] = 2;
    l.remote.b[10] = l.remote.b[11] = 0xff; l.remote.b[12] = 10; l.remote.b[15] = 3;
    snprintf(l.job, sizeof l.job, "bjob%d", j);
    uint8_t buf[C4P_MAX_DGRAM];
    size_t m = c4p_encode_lookup(&l, buf, sizeof buf);
    uint64_t t0 = now_ns();
    if (sendto(fd, buf, m, 0, (struct sockaddr *)&agent, sizeof agent) != (ssize_t)m) { perror("sendto"); return 1; }
    for (;;) {
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      if (poll(&pf, 1, 1000) != 1) { lost++; break; }
      ssize_t k = recv(fd, buf, sizeof buf, 0);
      c4p_assign a;
      if (k > 0 && c4p_decode_assign(buf, (size_t)k, &a) == 0 && a.req_id == l.req_id) {
        rtt[i] = now_ns() - t0;
        hits += a.status == C4P_OK && a.nflows > 0;
        break;
      }
    }
  }
  qsort(rtt, (size_t)n, sizeof *rtt, cmp);
  printf("{\"count\": %d, \"hits\": %d, \"lost\": %d, \"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f}\n",
         n, hits, lost, rtt[n / 2] / 1e3, rtt[n * 9 / 10] / 1e3, rtt[n * 99 / 100] / 1e3, rtt[n - 1] / 1e3);
  return 0;
}
