/* firehose.c: collective records into the agent's socket as a shim's background thread sends
 * them, at a fixed rate or as fast as the agent takes them. Like the shim, it wakes every 10 ms
 * (C4_SEND_US) and sends what is due, packed into BATCH datagrams of at most <batch> records
 * that fit in one datagram (FORMAT.md; batch 1 = one record per datagram). A full agent queue
 * (EAGAIN) is waited out, as the shim does, so every record is delivered and the rate achieved
 * is the agent's. The process says who it is first (a STATS record, and again every second).
 * Usage: firehose <socket> <records> <records per second, 0 = as fast as taken> <job> <rank>
 *                 [batch [send period in µs, default 10000]]
 * Prints one JSON line: records sent, datagrams, the start (µs since the epoch), seconds, and
 * how many sends had to wait. */
#include <errno.h>
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
static uint64_t real_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000;
}

static int fd;
static struct sockaddr_un agent = {.sun_family = AF_UNIX};
static long waits;

static void send_all(const uint8_t *buf, size_t n) {
  while (sendto(fd, buf, n, MSG_DONTWAIT, (struct sockaddr *)&agent, sizeof agent) != (ssize_t)n) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS) { perror("sendto"); exit(1); }
    waits++;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

static void stats(const char *job, int rank) {
  c4p_stats s = {.pid = (uint32_t)getpid(), .job_rank = rank};
  snprintf(s.job, sizeof s.job, "%s", job);
  uint8_t buf[C4P_MAX_DGRAM];
  send_all(buf, c4p_encode_stats(&s, buf, sizeof buf));
}

static long datagrams;

static size_t record(uint8_t *buf, long i, int rank) {
  uint64_t t = real_us();
  /* One ring communicator of the job's 16 ranks: this process is communicator rank <rank>,
   * its ring neighbour rank + 1 (as NCCL's ranks of one communicator: every process names
   * itself and its peers consistently, so the agent's rank table never conflicts). */
  int next = (rank + 1) % 16;
  c4p_coll c = {.comm_hash = 0xbe9c, .seq = (uint64_t)i, .bytes = 1 << 20, .t_start_us = t - 900,
                .t_end_us = t, .rank = rank, .nranks = 16, .pid = (uint32_t)getpid(), .job_rank = rank,
                .op = C4P_OP_ALLREDUCE, .npeers = 2,
                .peers = {{next, next, C4P_SEND, 1, C4P_PEER_NET, 1 << 19, t - 800, t - 10, 700},
                          {next, next, C4P_RECV, 1, 0, 1 << 19, t - 850, t - 20, 0}}};
  return c4p_encode_coll(&c, buf, C4P_MAX_DGRAM);
}

/* Records [from, to) as datagrams of at most `batch` records each (the shim's fill_stash). */
static void send_range(long from, long to, int rank, long batch) {
  static uint8_t rec[C4P_MAX_DGRAM], out[C4P_MAX_BATCH];
  for (long i = from; i < to;) {
    size_t len = c4p_batch_begin(out, sizeof out), first = 0;
    long k = 0;
    while (i < to && k < batch) {
      size_t n = record(rec, i, rank);
      if (!c4p_batch_add(out, &len, sizeof out, rec, n)) break;
      if (k++ == 0) first = n;
      i++;
    }
    if (k == 1) send_all(out + C4P_HDR_LEN, first);
    else send_all(out, c4p_batch_end(out, len));
    datagrams++;
  }
}

int main(int argc, char **argv) {
  if (argc < 6 || argc > 8) {
    fprintf(stderr, "usage: firehose <socket> <records> <rate> <job> <rank> [batch [send_us]]\n");
    return 2;
  }
  long total = atol(argv[2]);
  double rate = atof(argv[3]);
  const char *job = argv[4];
  int rank = atoi(argv[5]);
  long batch = argc >= 7 ? atol(argv[6]) : 64;
  long send_us = argc >= 8 ? atol(argv[7]) : 10000; /* the shim's C4_SEND_US */
  fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  struct sockaddr_un self = {.sun_family = AF_UNIX};
  int len = snprintf(self.sun_path + 1, sizeof self.sun_path - 1, "c4-bench-fire-%d", (int)getpid());
  if (bind(fd, (struct sockaddr *)&self, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len))) { perror("bind"); return 1; }
  snprintf(agent.sun_path, sizeof agent.sun_path, "%s", argv[1]);
  stats(job, rank);
  usleep(200000); /* the agent knows us before the first record */
  uint64_t t0 = now_ns(), last_stats = t0, t0_us = real_us();
  long sent = 0;
  while (sent < total) {
    long due = total;
    if (rate > 0) {
      struct timespec ts = {send_us / 1000000, (send_us % 1000000) * 1000}; /* the shim's drain period */
      nanosleep(&ts, NULL);
      due = (long)((double)(now_ns() - t0) * rate / 1e9);
      if (due > total) due = total;
    } else if (due > sent + 4096) {
      due = sent + 4096;
    }
    send_range(sent, due, rank, batch);
    sent = due;
    if (now_ns() - last_stats > 1000000000ull) { stats(job, rank); last_stats = now_ns(); }
  }
  double secs = (now_ns() - t0) / 1e9;
  printf("{\"sent\": %ld, \"datagrams\": %ld, \"t0_us\": %llu, \"seconds\": %.3f, \"rate\": %.0f, "
         "\"waits\": %ld}\n", total, datagrams, (unsigned long long)t0_us, secs, total / secs, waits);
  return 0;
}
