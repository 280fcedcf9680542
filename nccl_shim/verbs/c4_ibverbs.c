/* c4_ibverbs.c: libc4-ibverbs.so, for RoCE deployments that keep NCCL's own IB transport.
 * NCCL (>= 2.30.3) opens $NCCL_IBVERBS_LIB and resolves each verb with
 * dlvsym(handle, name, "IBVERBS_1.1"); this library defines only ibv_modify_qp@IBVERBS_1.1 and
 * lists the real libibverbs.so.1 as DT_NEEDED, so every other verb resolves to the real one.
 * At RTR on an RC/UC QP with a global route it asks the node agent for the QP's source port
 * (key: local GID address, remote GID address, QP ordinal for that pair) and sets the GRH flow
 * label from which mlx5 derives exactly that UDP source port; after RTS it also calls
 * mlx5dv_modify_qp_udp_sport when libmlx5 has it. Any doubt (no agent, no answer within the
 * deadline, a port outside 49152..65535, a loopback QP) passes the call through untouched,
 * and every error of the real call is returned as is.
 * The wait for the agent is bounded per communicator, not per QP: NCCL gives all QPs of one
 * communicator on one device the same completion queue, so the QPs sharing (context, send CQ)
 * share one budget of C4_VERBS_BUDGET_MS (default: the lookup timeout). Once it is spent, a
 * QP still asks but takes only an answer that is already there. */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "c4_rt.h"
#include "sport.h"

#define C4_EXPORT __attribute__((visibility("default")))
#define MAX_QPS 4096
#define MAX_PAIRS 1024
#define MAX_GROUPS 256

typedef int (*modify_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);
typedef int (*query_gid_fn)(struct ibv_context *, uint8_t, int, union ibv_gid *);
typedef int (*udp_sport_fn)(struct ibv_qp *, uint16_t);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static modify_fn real_modify;
static query_gid_fn real_query_gid;
static udp_sport_fn mlx5_udp_sport;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { const struct ibv_qp *qp; uint32_t qpn; uint16_t sport; } qps[MAX_QPS];
static struct { c4p_addr l, r; uint16_t next; } pairs[MAX_PAIRS];
static int npairs;
/* Set-up time spent waiting for the agent, per (context, send CQ): one communicator. */
static struct { const void *ctx, *cq; uint64_t spent_ns, last_ns; } groups[MAX_GROUPS];

static void resolve(void) {
  /* Our own DT_NEEDED copy; dlvsym on its handle searches it, never this library. */
  void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libibverbs.so.1", RTLD_NOW);
  if (h) {
    real_modify = (modify_fn)dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1");
    real_query_gid = (query_gid_fn)dlvsym(h, "ibv_query_gid", "IBVERBS_1.1");
  }
  void *m = dlopen("libmlx5.so.1", RTLD_NOW);
  if (m) mlx5_udp_sport = (udp_sport_fn)dlvsym(m, "mlx5dv_modify_qp_udp_sport", "MLX5_1.17");
  c4_rt_init();
}

static uint16_t next_index(const c4p_addr *l, const c4p_addr *r) {
  int i;
  for (i = 0; i < npairs; i++)
    if (!memcmp(&pairs[i].l, l, 16) && !memcmp(&pairs[i].r, r, 16)) break;
  if (i == npairs) {
    if (npairs == MAX_PAIRS) return 0;
    pairs[npairs].l = *l;
    pairs[npairs].r = *r;
    pairs[npairs].next = 0;
    npairs++;
  }
  return pairs[i].next++;
}

/* The budget left to the QP's communicator (under mu). Slots are reused least recently used
 * first, so a long-lived process that creates many communicators keeps working. */
static int group_of(const struct ibv_qp *qp) {
  int lru = 0;
  for (int i = 0; i < MAX_GROUPS; i++) {
    if (groups[i].ctx == qp->context && groups[i].cq == qp->send_cq) return i;
    if (groups[i].last_ns < groups[lru].last_ns) lru = i;
  }
  groups[lru].ctx = qp->context;
  groups[lru].cq = qp->send_cq;
  groups[lru].spent_ns = 0;
  return lru;
}

static void remember(const struct ibv_qp *qp, uint16_t sport) {
  pthread_mutex_lock(&mu);
  int free_slot = -1;
  for (int i = 0; i < MAX_QPS; i++) {
    if (qps[i].qp == qp && qps[i].qpn == qp->qp_num) { qps[i].sport = sport; free_slot = -2; break; }
    if (!qps[i].qp && free_slot == -1) free_slot = i;
  }
  if (free_slot >= 0) {
    qps[free_slot].qp = qp;
    qps[free_slot].qpn = qp->qp_num;
    qps[free_slot].sport = sport;
  }
  pthread_mutex_unlock(&mu);
}

/* Returns and forgets the port remembered for this QP at RTR (0 if none). */
static uint16_t take(const struct ibv_qp *qp) {
  uint16_t s = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_QPS; i++)
    if (qps[i].qp == qp && qps[i].qpn == qp->qp_num) {
      s = qps[i].sport;
      qps[i].qp = NULL;
      break;
    }
  pthread_mutex_unlock(&mu);
  return s;
}

/* The source port the agent assigned to this QP, or 0 for "leave it alone". */
static uint16_t assigned_sport(struct ibv_qp *qp, const struct ibv_qp_attr *attr) {
  if (qp->qp_type != IBV_QPT_RC && qp->qp_type != IBV_QPT_UC) return 0;
  if (!attr->ah_attr.is_global || !real_query_gid) return 0;
  union ibv_gid sgid;
  if (real_query_gid(qp->context, attr->ah_attr.port_num, attr->ah_attr.grh.sgid_index, &sgid))
    return 0;
  /* NCCL's GPU-flush QP talks to itself and never crosses the fabric. */
  if (!memcmp(&sgid, &attr->ah_attr.grh.dgid, sizeof sgid) && attr->dest_qp_num == qp->qp_num)
    return 0;
  c4p_lookup key = {.remote_port = 4791, .kind = C4P_KIND_ROCE, .max_flows = 1,
                    .dst_rank = C4P_NO_RANK};
  memcpy(key.local.b, sgid.raw, 16);
  memcpy(key.remote.b, attr->ah_attr.grh.dgid.raw, 16);
  uint64_t budget = (uint64_t)c4_cfg.verbs_budget_ms * 1000000ull, left;
  pthread_mutex_lock(&mu);
  key.conn_index = next_index(&key.local, &key.remote);
  int g = group_of(qp);
  left = groups[g].spent_ns < budget ? budget - groups[g].spent_ns : 0;
  pthread_mutex_unlock(&mu);
  uint64_t t0 = c4_now_ns();
  c4p_assign a;
  int ok = c4_lookup_wait(&key, &a, left);
  uint64_t t1 = c4_now_ns();
  pthread_mutex_lock(&mu);
  if (groups[g].ctx == qp->context && groups[g].cq == qp->send_cq) {
    groups[g].spent_ns += t1 - t0;
    groups[g].last_ns = t1;
  }
  pthread_mutex_unlock(&mu);
  if (!ok || a.nflows < 1) return 0;
  return c4_sport_to_flow_label(a.flows[0].sport) ? a.flows[0].sport : 0;
}

C4_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask) {
  pthread_once(&once, resolve);
  if (!real_modify) return ENOSYS;
  int state = (attr_mask & IBV_QP_STATE) ? (int)attr->qp_state : -1;
  if (state == IBV_QPS_RTR && (attr_mask & IBV_QP_AV)) {
    uint16_t sport = assigned_sport(qp, attr);
    if (sport) {
      struct ibv_qp_attr mine = *attr; /* the caller's attributes stay as NCCL set them */
      mine.ah_attr.grh.flow_label = c4_sport_to_flow_label(sport);
      int rc = real_modify(qp, &mine, attr_mask);
      if (rc == 0) remember(qp, sport);
      return rc;
    }
  }
  int rc = real_modify(qp, attr, attr_mask);
  if (rc == 0 && state == IBV_QPS_RTS) {
    uint16_t sport = take(qp);
    /* Belt and braces for kernels without the flow-label mapping; failure (no capability, no
     * DEVX) leaves the port the flow label already chose. */
    if (sport && mlx5_udp_sport) (void)mlx5_udp_sport(qp, sport);
  }
  return rc;
}
