/* c4_rt.h: process-wide runtime shared by the transport, the profiler and the verbs
 * interposer: configuration and identity from the environment, clocks, drop/lookup counters,
 * the telemetry ring, the node-agent client (including the sockets the agent hands over), the
 * communicator rank table and the background thread that drains the ring. Nothing here may
 * block NCCL or fail it because the agent is missing: every agent path degrades to defaults. */
#ifndef C4_RT_H
#define C4_RT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "c4_proto.h"

#define C4_HIDDEN __attribute__((visibility("hidden")))
#define C4_DEFAULT_AGENT_SOCKET "/run/c4/shim.sock"
#define C4_DEFAULT_SHIM_PORT 4792 /* like RoCEv2's 4791: one fixed destination port per host */
#define C4_MAX_DEVS 8
#define C4_PCI_PATH_LEN 256

typedef struct {
  char agent_socket[108]; /* empty = agent disabled */
  int shim_port;          /* the host's fixed data port; 0 = an ephemeral port per process */
  int handoff;            /* 1: the agent owns shim_port and hands accepted sockets over */
  int lookup_timeout_ms;
  int verbs_budget_ms; /* verbs interposer: total wait per communicator (QPs sharing a CQ) */
  int refresh_ms;
  int watchdog_ms;
  int drain_us; /* the background thread's period: the agent socket is read this often */
  int send_us;  /* the ring's records go to the agent at least this often */
  unsigned ring_slots;
  int telemetry; /* 0 = no records at all (bench baseline) */
  int ndevs;
  c4p_addr dev_addr[C4_MAX_DEVS];
  char dev_name[C4_MAX_DEVS][32];
  char dev_pci[C4_MAX_DEVS][C4_PCI_PATH_LEN]; /* "" when the device has no PCI function */
  int dev_speed_mbps[C4_MAX_DEVS];
  /* who this process is in its job (FORMAT.md "Job identity") */
  char job[C4P_JOB_LEN + 1];
  int32_t job_rank;
  uint64_t key; /* random; names our agent socket, so the agent can hand us sockets */
} c4_config;

typedef struct {
  atomic_uint_fast64_t ring_drops, send_drops, lookups, lookup_timeouts, lookup_failures,
      bind_fallbacks, records_sent, handoffs, route_fallbacks;
} c4_counters;

extern C4_HIDDEN c4_config c4_cfg;
extern C4_HIDDEN c4_counters c4_stat;

/* Idempotent, thread-safe; reads the environment once and starts the background thread. */
C4_HIDDEN void c4_rt_init(void);
/* Push everything queued so far to the agent now (used at finalize so records are not lost). */
C4_HIDDEN void c4_rt_flush(void);

static inline uint64_t c4_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no syscall */
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* This process's id without a syscall (glibc no longer caches getpid); kept right across fork. */
extern C4_HIDDEN int c4_cached_pid;
static inline uint32_t c4_pid(void) { return (uint32_t)c4_cached_pid; }

/* Realtime microseconds for a monotonic reading (offset captured once at init). */
C4_HIDDEN uint64_t c4_mono_to_real_us(uint64_t mono_ns);

/* Levels: 1 error, 2 warning, 3 info. With NCCL's logger (given at init) messages go to NCCL
 * and NCCL_DEBUG filters them; otherwise to stderr up to C4_SHIM_DEBUG. */
C4_HIDDEN void c4_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
typedef void (*c4_logger_fn)(int level, unsigned long flags, const char *file, int line,
                             const char *fmt, ...);
C4_HIDDEN void c4_set_logger(c4_logger_fn fn);

/* ---- telemetry ring (lock-free, multi-producer, one consumer) ---- */
#define C4_SLOT_BYTES C4P_MAX_DGRAM
typedef struct c4_ring c4_ring;
C4_HIDDEN c4_ring *c4_ring_create(unsigned slots_pow2);
C4_HIDDEN void c4_ring_destroy(c4_ring *r);
/* 0 on success, -1 when full (the caller counts the drop). Never blocks, no syscall. */
C4_HIDDEN int c4_ring_push(c4_ring *r, const void *data, size_t len);
/* Consumer side; returns length copied or 0 when empty. */
C4_HIDDEN size_t c4_ring_pop(c4_ring *r, void *out, size_t cap);
/* Encode-and-push helper that counts drops in c4_stat.ring_drops. */
C4_HIDDEN void c4_emit(const void *dgram, size_t len);

/* ---- node-agent client ---- */
/* Send one datagram to the agent: 0 sent, C4_SEND_FULL when its queue has no room right now,
 * C4_SEND_ABSENT when nothing is bound to its socket (not started, or restarting), -1 when
 * the agent is off or the send failed otherwise. Never blocks. */
#define C4_SEND_FULL (-2)
#define C4_SEND_ABSENT (-3)
C4_HIDDEN int c4_agent_send(const void *buf, size_t len);
/* Start a lookup; returns a ticket >= 0, or -1 when the agent cannot be asked (absent). */
C4_HIDDEN int c4_lookup_start(const c4p_lookup *key);
/* 1 = answered (out filled; status may be C4P_UNKNOWN), 0 = still waiting. Frees the ticket on
 * a return of 1. */
C4_HIDDEN int c4_lookup_poll(int ticket, c4p_assign *out);
C4_HIDDEN void c4_lookup_cancel(int ticket);
/* Bounded wait for set-up paths outside NCCL's retry contract (verbs interposer): waits at most
 * `max_ns`. Returns 1 with out filled, 0 on timeout or an absent agent. */
C4_HIDDEN int c4_lookup_wait(const c4p_lookup *key, c4p_assign *out, uint64_t max_ns);
/* Receive whatever the agent sent; unsolicited assignments go to c4_on_assign_update, sockets
 * the agent hands over (SCM_RIGHTS) to c4_on_handoff. */
C4_HIDDEN void c4_agent_pump(void);
/* Fills the identity fields every lookup carries (pid, job, src_rank). */
C4_HIDDEN void c4_lookup_identity(c4p_lookup *key);

/* Hooks the background thread calls; the transport and the profiler provide them. Weak so the
 * verbs interposer, which has neither, links without them. */
C4_HIDDEN void c4_on_assign_update(const c4p_assign *a) __attribute__((weak));
C4_HIDDEN void c4_on_handoff(int fd, const c4p_hello *h) __attribute__((weak));
C4_HIDDEN void c4_transport_tick(uint64_t now_ns, int report) __attribute__((weak));
C4_HIDDEN void c4_profiler_tick(uint64_t now_ns) __attribute__((weak));

/* ---- communicator ranks -> job ranks (FORMAT.md "Job identity") ----
 * Filled by the profiler (our own rank in each communicator) and by the transport (each peer's
 * communicator and job rank from the handle and the hello); read on NCCL's threads without a
 * lock. A communicator hash of 0 (net v8..v10) is never recorded. */
C4_HIDDEN void c4_comm_set_self(uint64_t comm_hash, int comm_rank);
C4_HIDDEN int c4_comm_self(uint64_t comm_hash); /* our rank in it, or C4P_NO_RANK */
C4_HIDDEN void c4_comm_learn(uint64_t comm_hash, int comm_rank, int job_rank);
C4_HIDDEN int c4_comm_job_rank(uint64_t comm_hash, int comm_rank); /* or C4P_NO_RANK */

/* ---- address helpers ---- */
struct sockaddr_storage;
C4_HIDDEN void c4_addr_from_sockaddr(c4p_addr *a, const struct sockaddr_storage *ss);
/* Fills ss with addr:port; returns the sockaddr length. */
C4_HIDDEN unsigned c4_addr_to_sockaddr(const c4p_addr *a, uint16_t port,
                                       struct sockaddr_storage *ss);
C4_HIDDEN int c4_addr_is_v4(const c4p_addr *a);
C4_HIDDEN void c4_addr_str(const c4p_addr *a, char *out, size_t cap);
C4_HIDDEN int c4_addr_parse(const char *s, c4p_addr *a);

#endif
