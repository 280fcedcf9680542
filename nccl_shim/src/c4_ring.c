/* c4_ring.c: the telemetry ring. A bounded multi-producer queue (per-slot sequence numbers,
 * after D. Vyukov's bounded MPMC design) with one consumer, the background thread. Producers
 * run on NCCL's threads, so a push is a CAS plus a copy: no lock, no syscall, and a full ring
 * drops the record (the caller counts it) instead of waiting. */
#include <stdlib.h>
#include <string.h>

#include "c4_rt.h"

typedef struct {
  atomic_size_t seq;
  uint16_t len;
  uint8_t data[C4_SLOT_BYTES];
} slot;

struct c4_ring {
  size_t mask;
  _Alignas(64) atomic_size_t head; /* producers */
  _Alignas(64) atomic_size_t tail; /* consumer */
  slot *slots;
};

c4_ring *c4_ring_create(unsigned slots_pow2) {
  size_t n = 2;
  while (n < slots_pow2) n <<= 1;
  c4_ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->slots = calloc(n, sizeof(slot));
  if (!r->slots) { free(r); return NULL; }
  r->mask = n - 1;
  for (size_t i = 0; i < n; i++) atomic_init(&r->slots[i].seq, i);
  atomic_init(&r->head, 0);
  atomic_init(&r->tail, 0);
  return r;
}

void c4_ring_destroy(c4_ring *r) {
  if (!r) return;
  free(r->slots);
  free(r);
}

int c4_ring_push(c4_ring *r, const void *data, size_t len) {
  if (!r || len > C4_SLOT_BYTES) return -1;
  size_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
  for (;;) {
    slot *s = &r->slots[pos & r->mask];
    size_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    intptr_t dif = (intptr_t)seq - (intptr_t)pos;
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        memcpy(s->data, data, len);
        s->len = (uint16_t)len;
        atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
        return 0;
      }
    } else if (dif < 0) {
      return -1; /* full: the consumer has not freed this slot yet */
    } else {
      pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    }
  }
}

size_t c4_ring_pop(c4_ring *r, void *out, size_t cap) {
  if (!r) return 0;
  size_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
  slot *s = &r->slots[pos & r->mask];
  size_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
  if ((intptr_t)seq - (intptr_t)(pos + 1) < 0) return 0; /* empty or still being written */
  size_t len = s->len <= cap ? s->len : cap;
  memcpy(out, s->data, len);
  atomic_store_explicit(&r->tail, pos + 1, memory_order_relaxed);
  atomic_store_explicit(&s->seq, pos + r->mask + 1, memory_order_release);
  return len;
}
