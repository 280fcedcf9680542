/* stub_ibverbs.c: a recording stand-in for libibverbs.so.1 (same SONAME and symbol version),
 * so the interposer can be tested on hosts without RDMA hardware: ibv_modify_qp records what
 * reached "the driver" and returns a scripted result; ibv_query_gid serves a scripted table. */
#include <infiniband/verbs.h>
#include <string.h>

static int calls, result;
static struct ibv_qp_attr last;
static int last_mask;
static union ibv_gid gids[8];

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  (void)qp;
  calls++;
  last = *attr;
  last_mask = mask;
  return result;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) {
  (void)ctx; (void)port;
  if (index < 0 || index >= 8) return EINVAL;
  *gid = gids[index];
  return 0;
}

int stub_modify_calls(void) { return calls; }
int stub_last_attr(struct ibv_qp_attr *out) { *out = last; return last_mask; }
void stub_set_result(int r) { result = r; }
void stub_set_gid(int index, const union ibv_gid *g) { gids[index] = *g; }
