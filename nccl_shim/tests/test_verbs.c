/* test_verbs.c: drives libc4-ibverbs.so the way NCCL does (dlopen, then
 * dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1")) over the recording stub libibverbs/libmlx5, with
 * a fake node agent assigning ports. Checks: the flow label reaching the driver maps back to
 * the assigned port; only RC/UC QPs at RTR with a global AV are touched; the loopback QP, other
 * transitions and non-RoCE ports are left alone; RTS triggers mlx5dv_modify_qp_udp_sport with
 * the same port; errors pass through; an absent agent costs no wait; a silent agent costs one
 * communicator (QPs sharing a send CQ) at most the set-up budget in all, not per QP.
 * Usage (stubs first on the search path): LD_LIBRARY_PATH=build/stub test_verbs <shim.so> */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_agent.h"
#include "sport.h"

static int failures;
#define CHECK(c, ...) do { if (!(c)) { failures++; fprintf(stderr, "FAIL verbs: " __VA_ARGS__); fprintf(stderr, " (line %d)\n", __LINE__); } } while (0)

typedef int (*modify_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);
static modify_fn modify;
static int (*calls)(void);
static int (*last_attr)(struct ibv_qp_attr *);
static void (*set_result)(int);
static void (*set_gid)(int, const union ibv_gid *);
static int (*mlx5_calls)(const struct ibv_qp **, uint16_t *);

static union ibv_gid v4gid(int a, int b, int c, int d) {
  union ibv_gid g;
  memset(&g, 0, sizeof g);
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = (uint8_t)a; g.raw[13] = (uint8_t)b; g.raw[14] = (uint8_t)c; g.raw[15] = (uint8_t)d;
  return g;
}

static struct ibv_qp_attr rtr(union ibv_gid dgid, uint32_t dest_qpn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = dest_qpn;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = dgid;
  a.ah_attr.grh.sgid_index = 3;
  a.ah_attr.grh.hop_limit = 255;
  a.ah_attr.grh.flow_label = 0; /* what NCCL always sends */
  a.ah_attr.port_num = 1;
  return a;
}
#define RTR_MASK (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)

static uint32_t label_after(struct ibv_qp *qp, struct ibv_qp_attr a, int mask, int *rc) {
  *rc = modify(qp, &a, mask);
  CHECK(a.ah_attr.grh.flow_label == 0, "caller's attributes were modified");
  struct ibv_qp_attr seen;
  last_attr(&seen);
  return seen.ah_attr.grh.flow_label;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: test_verbs <libc4-ibverbs.so>\n"); return 2; }
  char path[108];
  snprintf(path, sizeof path, "/tmp/c4-verbs-agent-%d.sock", (int)getpid());
  setenv("C4_AGENT_SOCKET", path, 1);
  setenv("C4_LOOKUP_TIMEOUT_MS", "50", 1);
  agent_cfg ac = {.mode = AGENT_OK, .nflows = 1, .base_port = 50000, .weight_ppm = {1000000}};
  if (agent_start(path, &ac)) { fprintf(stderr, "agent\n"); return 1; }

  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  modify = (modify_fn)dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1");
  Dl_info di;
  CHECK(modify && dladdr((void *)modify, &di) && strstr(di.dli_fname, "c4-ibverbs"),
        "dlvsym(IBVERBS_1.1) did not resolve to the interposer");
  CHECK(dlvsym(h, "ibv_query_gid", "IBVERBS_1.1") != NULL, "other verbs must still resolve (to the real library)");
  void *stub = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  void *m5 = dlopen("libmlx5.so.1", RTLD_NOW);
  CHECK(stub && m5, "stubs not loaded (LD_LIBRARY_PATH?)");
  if (!stub || !m5 || !modify) return 1;
  calls = (int (*)(void))dlsym(stub, "stub_modify_calls");
  last_attr = (int (*)(struct ibv_qp_attr *))dlsym(stub, "stub_last_attr");
  set_result = (void (*)(int))dlsym(stub, "stub_set_result");
  set_gid = (void (*)(int, const union ibv_gid *))dlsym(stub, "stub_set_gid");
  mlx5_calls = (int (*)(const struct ibv_qp **, uint16_t *))dlsym(m5, "stub_mlx5_calls");
  CHECK(calls && last_attr && set_result && set_gid && mlx5_calls, "stub accessors missing");

  union ibv_gid me = v4gid(10, 0, 0, 2), peer = v4gid(10, 0, 1, 2);
  set_gid(3, &me);
  struct ibv_qp q1 = {.qp_num = 0x101, .qp_type = IBV_QPT_RC}, q2 = {.qp_num = 0x102, .qp_type = IBV_QPT_RC};
  int rc;

  /* INIT: untouched, no lookup. */
  struct ibv_qp_attr init;
  memset(&init, 0, sizeof init);
  init.qp_state = IBV_QPS_INIT;
  int before = calls();
  CHECK(modify(&q1, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0 && calls() == before + 1, "INIT pass-through");

  /* RTR: first QP of the pair gets base_port, the second base_port + 16 (fake agent's rule). */
  uint32_t fl = label_after(&q1, rtr(peer, 0x201), RTR_MASK, &rc);
  CHECK(rc == 0 && fl && c4_flow_label_to_sport(fl) == 50000, "QP1 label %#x -> port %u, want 50000", fl, c4_flow_label_to_sport(fl));
  fl = label_after(&q2, rtr(peer, 0x202), RTR_MASK, &rc);
  CHECK(rc == 0 && c4_flow_label_to_sport(fl) == 50016, "QP2 label %#x -> port %u, want 50016", fl, c4_flow_label_to_sport(fl));
  c4p_lookup lk[8];
  int nl = agent_lookups(lk, 8);
  CHECK(nl == 2 && lk[0].kind == C4P_KIND_ROCE && lk[0].remote_port == 4791 && lk[1].conn_index == 1 &&
            !memcmp(lk[0].local.b, me.raw, 16) && !memcmp(lk[0].remote.b, peer.raw, 16), "lookup keys");

  /* RTS: passes through, then the mlx5 hook pins the same port. */
  struct ibv_qp_attr rts;
  memset(&rts, 0, sizeof rts);
  rts.qp_state = IBV_QPS_RTS;
  rts.timeout = 20; rts.retry_cnt = 7; rts.rnr_retry = 7;
  CHECK(modify(&q1, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0, "RTS");
  const struct ibv_qp *mq;
  uint16_t ms;
  CHECK(mlx5_calls(&mq, &ms) == 1 && mq == &q1 && ms == 50000, "mlx5dv_modify_qp_udp_sport(q1, 50000) not called");

  /* Loopback flush QP (own GID, own QPN), UD QPs and RTR without AV: untouched, not looked up. */
  struct ibv_qp ql = {.qp_num = 0x300, .qp_type = IBV_QPT_RC}, qu = {.qp_num = 0x301, .qp_type = IBV_QPT_UD};
  fl = label_after(&ql, rtr(me, 0x300), RTR_MASK, &rc);
  CHECK(rc == 0 && fl == 0, "loopback QP got label %#x", fl);
  fl = label_after(&qu, rtr(peer, 0x9), RTR_MASK, &rc);
  CHECK(rc == 0 && fl == 0, "UD QP got label %#x", fl);
  fl = label_after(&q1, rtr(peer, 0x9), IBV_QP_STATE | IBV_QP_PATH_MTU, &rc);
  CHECK(rc == 0 && fl == 0, "RTR without AV got label");
  struct ibv_qp_attr nog = rtr(peer, 0x9);
  nog.ah_attr.is_global = 0;
  fl = label_after(&q1, nog, RTR_MASK, &rc);
  CHECK(rc == 0 && fl == 0, "non-global AV got label");
  CHECK(agent_lookups(lk, 8) == 2, "untouched QPs must not be looked up");

  /* Errors pass through, and a failed RTR leaves nothing for RTS to apply. */
  struct ibv_qp q3 = {.qp_num = 0x103, .qp_type = IBV_QPT_RC};
  set_result(EINVAL);
  label_after(&q3, rtr(peer, 0x203), RTR_MASK, &rc);
  CHECK(rc == EINVAL, "RTR error %d not passed through", rc);
  CHECK(modify(&q3, &rts, IBV_QP_STATE) == EINVAL, "RTS error not passed through");
  set_result(0);
  CHECK(modify(&q3, &rts, IBV_QP_STATE) == 0 && mlx5_calls(NULL, NULL) == 1, "mlx5 called for a QP whose RTR failed");

  /* A port below 49152 cannot be expressed as a flow label: leave the QP alone. */
  agent_stop();
  ac.base_port = 4000;
  agent_start(path, &ac);
  struct ibv_qp q4 = {.qp_num = 0x104, .qp_type = IBV_QPT_RC};
  fl = label_after(&q4, rtr(peer, 0x204), RTR_MASK, &rc);
  CHECK(rc == 0 && fl == 0, "non-RoCE port produced label %#x", fl);

  /* Agent gone: no label, and no waiting for the deadline. */
  agent_stop();
  struct ibv_qp q5 = {.qp_num = 0x105, .qp_type = IBV_QPT_RC};
  uint64_t t0 = now_ns();
  fl = label_after(&q5, rtr(peer, 0x205), RTR_MASK, &rc);
  uint64_t dt = now_ns() - t0;
  CHECK(rc == 0 && fl == 0 && dt < 5000000ull, "absent agent: label %#x after %llu ns", fl, (unsigned long long)dt);

  /* A silent agent: 16 QPs of one communicator (one send CQ) wait 50 ms in all, not 16 x 50;
   * another communicator's QPs have a budget of their own. */
  ac.mode = AGENT_SILENT;
  ac.base_port = 50000;
  agent_start(path, &ac);
  int cq_a, cq_b;
  struct ibv_qp qs[17];
  t0 = now_ns();
  for (int i = 0; i < 16; i++) {
    qs[i] = (struct ibv_qp){.qp_num = 0x400 + (uint32_t)i, .qp_type = IBV_QPT_RC,
                            .send_cq = (struct ibv_cq *)(void *)&cq_a};
    fl = label_after(&qs[i], rtr(peer, 0x500 + (uint32_t)i), RTR_MASK, &rc);
    CHECK(rc == 0 && fl == 0, "silent agent: QP %d got label %#x", i, fl);
  }
  dt = now_ns() - t0;
  CHECK(dt >= 45000000ull && dt < 150000000ull, "16 QPs of one communicator waited %.1f ms, want ~50", dt / 1e6);
  qs[16] = (struct ibv_qp){.qp_num = 0x420, .qp_type = IBV_QPT_RC, .send_cq = (struct ibv_cq *)(void *)&cq_b};
  t0 = now_ns();
  label_after(&qs[16], rtr(peer, 0x520), RTR_MASK, &rc);
  uint64_t dt2 = now_ns() - t0;
  CHECK(dt2 >= 45000000ull && dt2 < 150000000ull, "another communicator's first QP waited %.1f ms, want ~50", dt2 / 1e6);
  agent_stop();

  if (failures) { fprintf(stderr, "FAIL verbs: %d checks failed\n", failures); return 1; }
  printf("PASS verbs (flow label -> assigned port at RTR, mlx5 sport at RTS, pass-through cases, errors, absent agent, %.0f ms budget per communicator)\n", dt / 1e6);
  return 0;
}
