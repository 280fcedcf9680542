/* stub_mlx5.c: a recording stand-in for libmlx5.so.1's mlx5dv_modify_qp_udp_sport@MLX5_1.17. */
#include <stdint.h>

struct ibv_qp;
static int calls;
static uint16_t last_sport;
static const struct ibv_qp *last_qp;

int mlx5dv_modify_qp_udp_sport(struct ibv_qp *qp, uint16_t sport) {
  calls++;
  last_qp = qp;
  last_sport = sport;
  return 0;
}

int stub_mlx5_calls(const struct ibv_qp **qp, uint16_t *sport) {
  if (qp) *qp = last_qp;
  if (sport) *sport = last_sport;
  return calls;
}
