/* c4_proto.h: every format that crosses a process boundary from the shim (nccl_shim/FORMAT.md):
 * the shim <-> node agent datagrams, and the shim <-> shim handle, hello, verdict and data
 * header. C values with an encoder and a strict decoder each; the byte layout lives only here
 * and in FORMAT.md. The Python twin of the datagrams is node_agent/shim_protocol.py, and both
 * are tested on nccl_shim/examples/. Pure: no I/O, no allocation, so the transport can encode
 * on its own stack. */
#ifndef C4_PROTO_H
#define C4_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define C4P_MAGIC0 'C'
#define C4P_MAGIC1 '4'
#define C4P_VERSION 2
#define C4P_HDR_LEN 8
#define C4P_MAX_FLOWS 16 /* sockets (TCP) or QPs per connection we accept from the agent */
#define C4P_MAX_PEERS 8  /* per-peer progress entries carried in one collective record */
#define C4P_MAX_DGRAM 1024 /* any single message */
#define C4P_MAX_BATCH 8192 /* a BATCH datagram (several messages) */
#define C4P_JOB_LEN 64   /* job name bytes, NUL-padded (a longer C4_JOB is refused) */
#define C4P_NO_RANK (-1) /* a job or communicator rank nobody told us */

enum c4p_type {
  C4P_LOOKUP = 1, C4P_ASSIGN = 2, C4P_COLL = 3, C4P_CONN = 4, C4P_STATS = 5, C4P_HANDOFF = 6,
  C4P_BATCH = 7
};
enum c4p_kind { C4P_KIND_TCP = 0, C4P_KIND_ROCE = 1 };
enum c4p_status { C4P_OK = 0, C4P_UNKNOWN = 1, C4P_ERROR = 2 };
enum c4p_dir { C4P_SEND = 0, C4P_RECV = 1 };
enum c4p_op {
  C4P_OP_OTHER = 0, C4P_OP_ALLREDUCE = 1, C4P_OP_ALLGATHER = 2, C4P_OP_REDUCESCATTER = 3,
  C4P_OP_BROADCAST = 4, C4P_OP_REDUCE = 5, C4P_OP_SEND = 6, C4P_OP_RECV = 7,
  C4P_OP_ALLTOALL = 8, C4P_OP_COUNT = 9
};
#define C4P_COLL_INFLIGHT 0x1  /* watchdog re-report: t_end_us is 0 */
#define C4P_COLL_TRUNCATED 0x2 /* more peers than C4P_MAX_PEERS; the extra ones were left out */
#define C4P_PEER_NET 0x1       /* peer entry: net_us is known */
#define C4P_CONN_CLOSED 0x1    /* final record of a connection */
#define C4P_CONN_NET 0x2       /* connection record: net_us values are known */

/* Addresses are 16 bytes: IPv6, or IPv4 written as ::ffff:a.b.c.d. */
typedef struct { uint8_t b[16]; } c4p_addr;

typedef struct {
  uint32_t req_id, pid;
  uint64_t comm_id;
  c4p_addr local, remote;
  uint16_t remote_port, conn_index, kind, max_flows;
  uint32_t version;          /* the version the connection runs on; 0 for a new connection */
  int32_t src_rank, dst_rank; /* job ranks of the two ends, C4P_NO_RANK when unknown */
  char job[C4P_JOB_LEN + 1];  /* C4_JOB of the asking process, "" when unset */
} c4p_lookup;

/* One flow of an answer: its source port and share, and the NIC port addresses the plan puts
 * it on (dual-port NICs spread a connection's flows over both ports); an all-zero address
 * means "the connection's own". */
typedef struct { uint16_t sport; uint32_t weight_ppm; c4p_addr src, dst; } c4p_flow;

typedef struct {
  uint32_t req_id, version;
  uint64_t comm_id;
  c4p_addr local, remote;
  uint16_t conn_index;
  uint8_t status, nflows;
  int32_t src_rank, dst_rank;
  c4p_flow flows[C4P_MAX_FLOWS];
} c4p_assign;

typedef struct {
  int32_t peer, peer_job_rank; /* communicator rank; job rank or C4P_NO_RANK */
  uint8_t dir, done;
  uint16_t flags; /* C4P_PEER_NET */
  uint64_t bytes, t_first_us, t_last_us, net_us;
} c4p_peer;

typedef struct {
  uint64_t comm_hash, seq, bytes, t_start_us, t_end_us;
  int32_t rank, nranks; /* in the communicator */
  uint32_t pid;
  int32_t job_rank; /* this process's job rank, C4P_NO_RANK when unknown */
  uint8_t op, flags, npeers;
  c4p_peer peers[C4P_MAX_PEERS];
} c4p_coll;

typedef struct { uint16_t sport; uint32_t weight_ppm; uint64_t bytes, t_last_us, net_us; } c4p_sock;

typedef struct {
  uint64_t comm_id;
  c4p_addr local, remote;
  uint16_t remote_port, conn_index;
  uint8_t dir, nsocks;
  int32_t peer_rank; /* NCCL's tag */
  uint32_t pid, flags;
  int32_t peer_job_rank, job_rank, peer_comm_rank;
  uint64_t bytes, msgs, t_first_us, t_last_us, pending_since_us, net_us;
  c4p_sock socks[C4P_MAX_FLOWS];
} c4p_conn;

typedef struct {
  uint32_t pid;
  int32_t job_rank;
  uint64_t ring_drops, send_drops, lookups, lookup_timeouts, lookup_failures, bind_fallbacks,
      records_sent, handoffs, route_fallbacks;
  char job[C4P_JOB_LEN + 1];
} c4p_stats;

/* ---- shim <-> shim (TCP) ---- */
#define C4P_HANDLE_MAGIC 0x43344e48u /* "HN4C" */
#define C4P_HELLO_MAGIC 0x53483443u  /* "C4HS" */
#define C4P_HANDLE_LEN 72
#define C4P_HELLO_LEN 48
#define C4P_VERDICT_LEN 4
#define C4P_DATA_HDR_LEN 24
#define C4P_VERDICT_OK "C4OK"
#define C4P_VERDICT_NO "C4NO"

/* What a listen comm publishes through NCCL's bootstrap (in NCCL's 128-byte handle). */
typedef struct {
  uint16_t port;          /* where to connect first: the host's fixed port (the agent's) */
  uint16_t fallback_port; /* the listening process's own port; 0 = none */
  c4p_addr addr;
  uint64_t uuid; /* names the listen comm inside its process */
  uint64_t key;  /* names the listening process (its agent-socket name, for the hand-off) */
  int32_t job_rank, comm_rank;
} c4p_handle;

/* First bytes on every data socket, sender -> receiver. */
typedef struct {
  uint16_t sock_index, nsocks, conn_index;
  uint64_t uuid, key;
  int32_t job_rank, comm_rank; /* the sender's */
  uint64_t comm_id;
} c4p_hello;

/* Encoders return the datagram length, or 0 if cap is too small or a count is out of range. */
size_t c4p_encode_lookup(const c4p_lookup *m, uint8_t *buf, size_t cap);
size_t c4p_encode_assign(const c4p_assign *m, uint8_t *buf, size_t cap);
size_t c4p_encode_coll(const c4p_coll *m, uint8_t *buf, size_t cap);
size_t c4p_encode_conn(const c4p_conn *m, uint8_t *buf, size_t cap);
size_t c4p_encode_stats(const c4p_stats *m, uint8_t *buf, size_t cap);
/* The agent's hand-off datagram: the hello it read from a socket it then passes (SCM_RIGHTS). */
size_t c4p_encode_handoff(const c4p_hello *h, uint8_t *buf, size_t cap);

/* BATCH (shim -> agent): several whole telemetry messages (COLL, CONN) in one datagram of at
 * most C4P_MAX_BATCH bytes, each with its own header, so a busy shim sends one datagram per
 * drain instead of one per record.
 * Build: c4p_batch_begin, then c4p_batch_add while it returns 1, then c4p_batch_end. Read:
 * c4p_batch_next yields each message in turn (0 at the end, -1 on a malformed batch). */
size_t c4p_batch_begin(uint8_t *buf, size_t cap);
int c4p_batch_add(uint8_t *buf, size_t *len, size_t cap, const uint8_t *msg, size_t msg_len);
size_t c4p_batch_end(uint8_t *buf, size_t len);
int c4p_batch_next(const uint8_t *buf, size_t len, size_t *off, const uint8_t **msg,
                   size_t *msg_len);

/* Returns the message type if the header is valid and the datagram is exactly one whole
 * message of a known type, else 0. */
int c4p_peek_type(const uint8_t *buf, size_t len);
/* Decoders return 0 on success, -1 on any malformed input (never read past len). */
int c4p_decode_lookup(const uint8_t *buf, size_t len, c4p_lookup *m);
int c4p_decode_assign(const uint8_t *buf, size_t len, c4p_assign *m);
int c4p_decode_coll(const uint8_t *buf, size_t len, c4p_coll *m);
int c4p_decode_conn(const uint8_t *buf, size_t len, c4p_conn *m);
int c4p_decode_stats(const uint8_t *buf, size_t len, c4p_stats *m);
int c4p_decode_handoff(const uint8_t *buf, size_t len, c4p_hello *h);

/* Shim <-> shim: fixed sizes (C4P_HANDLE_LEN, C4P_HELLO_LEN, C4P_DATA_HDR_LEN). */
void c4p_encode_handle(const c4p_handle *h, uint8_t *buf);
int c4p_decode_handle(const uint8_t *buf, c4p_handle *h);
void c4p_encode_hello(const c4p_hello *h, uint8_t *buf);
int c4p_decode_hello(const uint8_t *buf, c4p_hello *h);
void c4p_encode_data_hdr(uint64_t total, uint64_t offset, uint64_t length, uint8_t *buf);
void c4p_decode_data_hdr(const uint8_t *buf, uint64_t *total, uint64_t *offset, uint64_t *length);

/* op name <-> code ("AllReduce" -> C4P_OP_ALLREDUCE); unknown names map to C4P_OP_OTHER. */
uint8_t c4p_op_from_name(const char *name);
const char *c4p_op_name(uint8_t op);

#endif
