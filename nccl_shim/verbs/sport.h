/* sport.h: RoCEv2 UDP source port <-> GRH flow label. The upstream mlx5/RDMA core derive the
 * source port from a non-zero flow label as 0xC000 | (low 14 bits XOR bits 14..19); we choose
 * the flow label whose image is the assigned port. Ports outside 0xC000..0xFFFF cannot be
 * expressed (the mapping sets the two top bits), so they return 0 = "leave the QP alone". */
#ifndef C4_SPORT_H
#define C4_SPORT_H

#include <stdint.h>

#define C4_ROCE_SPORT_MIN 0xC000u

static inline uint16_t c4_flow_label_to_sport(uint32_t fl) {
  fl &= 0xFFFFFu;
  return (uint16_t)(C4_ROCE_SPORT_MIN | ((fl & 0x3FFFu) ^ ((fl >> 14) & 0x3Fu)));
}

static inline uint32_t c4_sport_to_flow_label(uint16_t sport) {
  if (sport < C4_ROCE_SPORT_MIN) return 0;
  uint32_t fl = sport & 0x3FFFu;
  /* Label 0 means "no label" to the driver, so 0xC000 needs a label with equal halves. */
  return fl ? fl : 0x4001u;
}

#endif
