/* test_units.c: unit tests below the plugin interface: the datagram codec against the shared
 * example files (nccl_shim/examples/, also read by the node agent's Python tests), the ring
 * under concurrent producers, and the flow-label <-> RoCEv2 port mapping over all 16,384
 * ports. Usage: test_units <examples-dir> | test_units --write-examples <dir>. */
#include <assert.h>
#include <linux/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c4_proto.h"
#include "c4_rt.h"
#include "sport.h"

static int failures;
#define CHECK(c, ...) do { if (!(c)) { failures++; fprintf(stderr, "FAIL units: " __VA_ARGS__); fprintf(stderr, " (line %d)\n", __LINE__); } } while (0)

/* Stubs for what c4_ring.c's neighbours would provide in the plugin. */
c4_counters c4_stat;

static c4p_addr v4(int a, int b, int c, int d) {
  c4p_addr x = {{0}};
  x.b[10] = x.b[11] = 0xff;
  x.b[12] = (uint8_t)a; x.b[13] = (uint8_t)b; x.b[14] = (uint8_t)c; x.b[15] = (uint8_t)d;
  return x;
}

/* The canonical example messages; FORMAT.md and the .json files describe the same values. */
static size_t ex_lookup(uint8_t *b) {
  c4p_lookup m = {.req_id = 7, .pid = 4242, .comm_id = 0x7f3a9c0100000001ull, .local = v4(10, 0, 0, 2),
                  .remote = v4(10, 0, 1, 2), .remote_port = 4792, .conn_index = 3,
                  .kind = C4P_KIND_TCP, .max_flows = 16, .version = 0, .src_rank = 3,
                  .dst_rank = 4, .job = "gpt-22b-run7"};
  return c4p_encode_lookup(&m, b, C4P_MAX_DGRAM);
}
static size_t ex_assign(uint8_t *b) {
  c4p_assign m = {.req_id = 7, .version = 12, .comm_id = 0x7f3a9c0100000001ull, .local = v4(10, 0, 0, 2),
                  .remote = v4(10, 0, 1, 2), .conn_index = 3, .status = C4P_OK, .nflows = 2,
                  .src_rank = 3, .dst_rank = 4,
                  .flows = {{50021, 750000, v4(10, 0, 0, 2), v4(10, 0, 1, 2)},
                            {50022, 250000, v4(10, 0, 128, 2), v4(10, 0, 129, 2)}}};
  return c4p_encode_assign(&m, b, C4P_MAX_DGRAM);
}
static size_t ex_unknown(uint8_t *b) {
  c4p_assign m = {.req_id = 8, .version = 0, .comm_id = 0, .local = v4(10, 0, 0, 2),
                  .remote = v4(10, 0, 9, 9), .conn_index = 0, .status = C4P_UNKNOWN, .nflows = 0,
                  .src_rank = C4P_NO_RANK, .dst_rank = C4P_NO_RANK};
  return c4p_encode_assign(&m, b, C4P_MAX_DGRAM);
}
static size_t ex_coll(uint8_t *b) {
  c4p_coll m = {.comm_hash = 0x7f3a9c01, .seq = 1042, .bytes = 268435456, .t_start_us = 1764430000000000ull,
                .t_end_us = 1764430000180000ull, .rank = 3, .nranks = 16, .pid = 4242, .job_rank = 11,
                .op = C4P_OP_ALLREDUCE, .flags = 0, .npeers = 2,
                .peers = {{4, 12, C4P_SEND, 1, C4P_PEER_NET, 33554432, 1764430000001000ull, 1764430000179000ull, 170000},
                          {2, 10, C4P_RECV, 1, 0, 33554432, 1764430000000500ull, 1764430000178000ull, 0}}};
  return c4p_encode_coll(&m, b, C4P_MAX_DGRAM);
}
static size_t ex_inflight(uint8_t *b) {
  c4p_coll m = {.comm_hash = 0x7f3a9c01, .seq = 1043, .bytes = 268435456, .t_start_us = 1764430001000000ull,
                .t_end_us = 0, .rank = 3, .nranks = 16, .pid = 4242, .job_rank = 11, .op = C4P_OP_ALLREDUCE,
                .flags = C4P_COLL_INFLIGHT, .npeers = 1,
                .peers = {{4, C4P_NO_RANK, C4P_SEND, 0, 0, 0, 0, 0, 0}}};
  return c4p_encode_coll(&m, b, C4P_MAX_DGRAM);
}
static size_t ex_conn(uint8_t *b) {
  c4p_conn m = {.comm_id = 0x7f3a9c0100000001ull, .local = v4(10, 0, 0, 2), .remote = v4(10, 0, 1, 2),
                .remote_port = 4792, .conn_index = 3, .dir = C4P_SEND, .nsocks = 2, .peer_rank = 11,
                .pid = 4242, .flags = C4P_CONN_NET, .peer_job_rank = 12, .job_rank = 11,
                .peer_comm_rank = 4, .bytes = 1073741824, .msgs = 256,
                .t_first_us = 1764430000001000ull, .t_last_us = 1764430000179000ull,
                .pending_since_us = 0, .net_us = 176000,
                .socks = {{50021, 750000, 805306368, 1764430000179000ull, 175000},
                          {50022, 250000, 268435456, 1764430000120000ull, 60000}}};
  return c4p_encode_conn(&m, b, C4P_MAX_DGRAM);
}
static size_t ex_stats(uint8_t *b) {
  c4p_stats m = {.pid = 4242, .job_rank = 11, .ring_drops = 3, .send_drops = 17, .lookups = 64,
                 .lookup_timeouts = 1, .lookup_failures = 0, .bind_fallbacks = 2, .records_sent = 9000,
                 .handoffs = 32, .route_fallbacks = 1, .job = "gpt-22b-run7"};
  return c4p_encode_stats(&m, b, C4P_MAX_DGRAM);
}
static size_t ex_handoff(uint8_t *b) {
  c4p_hello h = {.sock_index = 1, .nsocks = 2, .conn_index = 3, .uuid = 0x0123456789abcdefull,
                 .key = 0x5eed5eed5eed5eedull, .job_rank = 11, .comm_rank = 3,
                 .comm_id = 0x7f3a9c0100000001ull};
  return c4p_encode_handoff(&h, b, C4P_MAX_DGRAM);
}
static size_t ex_batch(uint8_t *b) {
  uint8_t m[C4P_MAX_DGRAM];
  size_t len = c4p_batch_begin(b, C4P_MAX_DGRAM); /* the example fits the callers' buffers */
  if (!c4p_batch_add(b, &len, C4P_MAX_DGRAM, m, ex_coll(m))) return 0;
  if (!c4p_batch_add(b, &len, C4P_MAX_DGRAM, m, ex_conn(m))) return 0;
  return c4p_batch_end(b, len);
}

typedef struct { const char *name; size_t (*make)(uint8_t *); } example;
static const example examples[] = {
    {"lookup", ex_lookup}, {"assign", ex_assign}, {"assign_unknown", ex_unknown},
    {"coll", ex_coll}, {"coll_inflight", ex_inflight}, {"conn", ex_conn}, {"stats", ex_stats},
    {"handoff", ex_handoff}, {"batch", ex_batch}};
#define NEX (sizeof examples / sizeof examples[0])

static size_t read_hex(const char *path, uint8_t *out, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return (size_t)-1;
  size_t n = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#') continue;
    for (char *p = strtok(line, " \t\r\n"); p; p = strtok(NULL, " \t\r\n"))
      if (n < cap) out[n++] = (uint8_t)strtoul(p, NULL, 16);
  }
  fclose(f);
  return n;
}

static void write_hex(const char *dir, const char *name, const uint8_t *b, size_t n, const char *comment) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.hex", dir, name);
  FILE *f = fopen(path, "w");
  fprintf(f, "# %s\n", comment);
  for (size_t i = 0; i < n; i++) fprintf(f, "%02x%s", b[i], (i % 16 == 15 || i + 1 == n) ? "\n" : " ");
  fclose(f);
}

static int decode_any(const uint8_t *b, size_t n) {
  union { c4p_lookup l; c4p_assign a; c4p_coll c; c4p_conn k; c4p_stats s; c4p_hello h; } u;
  switch (c4p_peek_type(b, n)) {
    case C4P_LOOKUP: return c4p_decode_lookup(b, n, &u.l);
    case C4P_ASSIGN: return c4p_decode_assign(b, n, &u.a);
    case C4P_COLL: return c4p_decode_coll(b, n, &u.c);
    case C4P_CONN: return c4p_decode_conn(b, n, &u.k);
    case C4P_STATS: return c4p_decode_stats(b, n, &u.s);
    case C4P_HANDOFF: return c4p_decode_handoff(b, n, &u.h);
    case C4P_BATCH: {
      size_t off = 0, mlen, count = 0;
      const uint8_t *msg;
      int r;
      while ((r = c4p_batch_next(b, n, &off, &msg, &mlen)) == 1) {
        if (decode_any(msg, mlen)) return -1;
        count++;
      }
      return (r == 0 && count) ? 0 : -1;
    }
    default: return -1;
  }
}

static void test_examples(const char *dir) {
  uint8_t want[C4P_MAX_DGRAM], got[C4P_MAX_DGRAM];
  for (size_t i = 0; i < NEX; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.hex", dir, examples[i].name);
    size_t n = read_hex(path, got, sizeof got);
    size_t m = examples[i].make(want);
    CHECK(n == m && !memcmp(got, want, m), "%s: file differs from the encoder", examples[i].name);
    CHECK(decode_any(got, n) == 0, "%s: does not decode", examples[i].name);
  }
  /* Field-level checks of the decoded examples (the .json files hold the same values). */
  c4p_assign a;
  size_t n;
  char path[512];
  snprintf(path, sizeof path, "%s/assign.hex", dir);
  n = read_hex(path, got, sizeof got);
  CHECK(c4p_decode_assign(got, n, &a) == 0 && a.nflows == 2 && a.flows[0].sport == 50021 &&
            a.flows[1].weight_ppm == 250000 && a.conn_index == 3 && a.version == 12, "assign fields");
  c4p_coll c;
  snprintf(path, sizeof path, "%s/coll.hex", dir);
  n = read_hex(path, got, sizeof got);
  CHECK(c4p_decode_coll(got, n, &c) == 0 && c.seq == 1042 && c.peers[0].peer == 4 &&
            c.peers[0].peer_job_rank == 12 && c.peers[0].net_us == 170000 && c.job_rank == 11 &&
            c.peers[1].dir == C4P_RECV && !strcmp(c4p_op_name(c.op), "AllReduce"), "coll fields");
  c4p_lookup l;
  snprintf(path, sizeof path, "%s/lookup.hex", dir);
  n = read_hex(path, got, sizeof got);
  CHECK(c4p_decode_lookup(got, n, &l) == 0 && !strcmp(l.job, "gpt-22b-run7") && l.src_rank == 3 &&
            l.dst_rank == 4, "lookup fields");
  /* A job name must be NUL-padded: a byte after the terminator is refused. */
  got[8 + 72 + 20] = 'x';
  CHECK(c4p_decode_lookup(got, n, &l) != 0, "job name with garbage after its end accepted");
  /* Malformed inputs, shared with the Python tests, must all be rejected. */
  static const char *bad[] = {"bad_magic", "bad_length", "bad_nflows", "bad_weight", "truncated",
                              "bad_version"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(path, sizeof path, "%s/%s.hex", dir, bad[i]);
    n = read_hex(path, got, sizeof got);
    CHECK(n != (size_t)-1, "%s missing", bad[i]);
    CHECK(decode_any(got, n) != 0, "%s was accepted", bad[i]);
  }
  /* Every truncation of every example is rejected, and so is every single-byte header flip. */
  for (size_t i = 0; i < NEX; i++) {
    size_t m = examples[i].make(want);
    for (size_t k = 0; k < m; k++) CHECK(decode_any(want, k) != 0, "%s truncated to %zu accepted", examples[i].name, k);
    for (size_t k = 0; k < 6; k++) {
      memcpy(got, want, m);
      got[k] ^= 0x40;
      CHECK(decode_any(got, m) != 0, "%s with header byte %zu flipped accepted", examples[i].name, k);
    }
  }
}

static void write_examples(const char *dir) {
  uint8_t b[C4P_MAX_DGRAM];
  for (size_t i = 0; i < NEX; i++) {
    size_t n = examples[i].make(b);
    write_hex(dir, examples[i].name, b, n, "see the .json file beside this one and FORMAT.md");
  }
  size_t n = ex_assign(b);
  b[0] = 'X';
  write_hex(dir, "bad_magic", b, n, "assign with a wrong magic byte: reject");
  n = ex_assign(b);
  b[4] = (uint8_t)(n + 8);
  write_hex(dir, "bad_length", b, n, "assign whose header length disagrees with the datagram: reject");
  n = ex_assign(b);
  b[8 + 51] = 3;
  write_hex(dir, "bad_nflows", b, n, "assign claiming 3 flows but carrying 2: reject");
  n = ex_assign(b);
  b[68 + 7] = 0x7f; /* flow 0's weight_ppm (offset 72), high byte */
  write_hex(dir, "bad_weight", b, n, "assign with a weight above 1,000,000 ppm: reject");
  n = ex_coll(b);
  b[4] = (uint8_t)(n - 10);
  write_hex(dir, "truncated", b, n - 10, "coll record cut short by 10 bytes: reject");
  n = ex_lookup(b);
  b[2] = 1;
  write_hex(dir, "bad_version", b, n, "lookup of format version 1: reject (shim and agent ship together)");
}

/* ---- shim <-> shim: handle and hello round trips, and what their decoders refuse ---- */
static void test_wire(void) {
  uint8_t b[128];
  c4p_handle h = {.port = 4792, .fallback_port = 40001, .addr = v4(10, 0, 1, 2), .uuid = 77,
                  .key = 0xabcdef, .job_rank = 5, .comm_rank = 2}, h2;
  c4p_encode_handle(&h, b);
  CHECK(c4p_decode_handle(b, &h2) == 0 && h2.port == 4792 && h2.fallback_port == 40001 &&
            h2.uuid == 77 && h2.key == 0xabcdef && h2.job_rank == 5 && h2.comm_rank == 2 &&
            !memcmp(&h2.addr, &h.addr, 16), "handle round trip");
  b[0] ^= 1;
  CHECK(c4p_decode_handle(b, &h2) != 0, "handle with a bad magic accepted");
  c4p_hello y = {.sock_index = 2, .nsocks = 3, .conn_index = 9, .uuid = 1, .key = 2, .job_rank = -1,
                 .comm_rank = 4, .comm_id = 5}, y2;
  c4p_encode_hello(&y, b);
  CHECK(c4p_decode_hello(b, &y2) == 0 && y2.sock_index == 2 && y2.nsocks == 3 && y2.conn_index == 9 &&
            y2.job_rank == -1 && y2.comm_rank == 4 && y2.comm_id == 5, "hello round trip");
  y.sock_index = 3;
  c4p_encode_hello(&y, b);
  CHECK(c4p_decode_hello(b, &y2) != 0, "hello with socket index >= count accepted");
  y.sock_index = 0; y.nsocks = 17;
  c4p_encode_hello(&y, b);
  CHECK(c4p_decode_hello(b, &y2) != 0, "hello with 17 sockets accepted");
  uint64_t t, o, l;
  c4p_encode_data_hdr(1000, 250, 750, b);
  c4p_decode_data_hdr(b, &t, &o, &l);
  CHECK(t == 1000 && o == 250 && l == 750, "data header round trip");
  printf("wire: handle, hello and data header round trip; bad handles and hellos refused\n");
}

/* ---- ring: 4 producers, 1 consumer; every record arrives once or is counted as a drop ---- */
typedef struct { c4_ring *r; int id; atomic_int pushed, dropped; } prod;
static void *producer(void *arg) {
  prod *p = arg;
  for (int i = 0; i < 20000; i++) {
    uint32_t v[2] = {(uint32_t)p->id, (uint32_t)i};
    if (c4_ring_push(p->r, v, sizeof v) == 0) p->pushed++;
    else p->dropped++;
  }
  return NULL;
}

static void test_ring(void) {
  c4_ring *r = c4_ring_create(64);
  prod ps[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    ps[i].r = r;
    ps[i].id = i;
    atomic_init(&ps[i].pushed, 0);
    atomic_init(&ps[i].dropped, 0);
    pthread_create(&th[i], NULL, producer, &ps[i]);
  }
  int got[4] = {0}, last[4] = {-1, -1, -1, -1}, order_ok = 1, running = 4;
  uint8_t buf[C4_SLOT_BYTES];
  while (running) {
    size_t n = c4_ring_pop(r, buf, sizeof buf);
    if (n == 8) {
      uint32_t v[2];
      memcpy(v, buf, 8);
      if ((int)v[1] <= last[v[0]]) order_ok = 0;
      last[v[0]] = (int)v[1];
      got[v[0]]++;
    } else if (n == 0) {
      running = 0;
      for (int i = 0; i < 4; i++) if (ps[i].pushed + ps[i].dropped < 20000) running = 1;
    }
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  while (c4_ring_pop(r, buf, sizeof buf) == 8) {
    uint32_t v[2];
    memcpy(v, buf, 8);
    got[v[0]]++;
  }
  int drops = 0;
  for (int i = 0; i < 4; i++) {
    CHECK(got[i] == ps[i].pushed, "producer %d: pushed %d, consumed %d", i, ps[i].pushed, got[i]);
    drops += ps[i].dropped;
  }
  CHECK(order_ok, "per-producer order not kept");
  /* A full ring refuses instead of blocking. */
  for (int i = 0; i < 64; i++) c4_ring_push(r, buf, 8);
  CHECK(c4_ring_push(r, buf, 8) == -1, "push into a full ring succeeded");
  CHECK(c4_ring_push(r, buf, C4_SLOT_BYTES + 1) == -1, "oversize record accepted");
  c4_ring_destroy(r);
  printf("ring: 4x20000 records, %d dropped when full, all others delivered in order\n", drops);
}

static void test_sport(void) {
  int seen[65536] = {0}, n = 0;
  for (uint32_t sport = C4_ROCE_SPORT_MIN; sport <= 0xFFFF; sport++) {
    uint32_t fl = c4_sport_to_flow_label((uint16_t)sport);
    CHECK(fl != 0 && fl <= 0xFFFFF, "port %u: label %u", sport, fl);
    CHECK(c4_flow_label_to_sport(fl) == sport, "port %u -> label %#x -> port %u", sport, fl, c4_flow_label_to_sport(fl));
    seen[fl & 0xFFFF]++;
    n++;
  }
  CHECK(n == 16384, "port count %d", n);
  for (int i = 0; i < 65536; i++) CHECK(seen[i] <= 1, "label %#x used twice", i);
  /* Worked values from the kernel's description of the mapping. */
  CHECK(c4_flow_label_to_sport(0x4001) == 0xC000, "0x4001");
  CHECK(c4_flow_label_to_sport(0xFFFFF) == 0xC000 + (0x3FFF ^ 0x3F), "0xFFFFF");
  CHECK(c4_sport_to_flow_label(4791) == 0, "non-RoCE port must not map");
  printf("sport: all 16384 RoCEv2 ports map to distinct non-zero flow labels and back\n");
}

/* c4_transport.c declares the prefix of TCP_INFO's struct it reads with these offsets
 * (its own static_asserts); the system's UAPI header must agree. */
static_assert(offsetof(struct tcp_info, tcpi_bytes_acked) == 120, "tcpi_bytes_acked");
static_assert(offsetof(struct tcp_info, tcpi_delivery_rate) == 160, "tcpi_delivery_rate");
static_assert(offsetof(struct tcp_info, tcpi_busy_time) == 168, "tcpi_busy_time");
static_assert(offsetof(struct tcp_info, tcpi_rwnd_limited) == 176, "tcpi_rwnd_limited");
static_assert(offsetof(struct tcp_info, tcpi_sndbuf_limited) == 184, "tcpi_sndbuf_limited");

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write-examples")) { write_examples(argv[2]); return 0; }
  if (argc != 2) { fprintf(stderr, "usage: test_units <examples-dir>\n"); return 2; }
  test_examples(argv[1]);
  test_wire();
  test_ring();
  test_sport();
  if (failures) { fprintf(stderr, "FAIL units: %d checks failed\n", failures); return 1; }
  printf("PASS units (codec examples, wire formats, ring, flow-label mapping)\n");
  return 0;
}
