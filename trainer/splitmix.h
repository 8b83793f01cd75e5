/* A small deterministic RNG (splitmix64) whose whole state is one uint64, so
 * checkpoints can save it and a resumed run draws the same numbers. */
#ifndef CTUNE_TRAINER_SPLITMIX_H
#define CTUNE_TRAINER_SPLITMIX_H

#include <stdint.h>

struct splitmix {
  uint64_t s;
};

void splitmix_seed(struct splitmix *r, uint64_t seed);
uint64_t splitmix_next(struct splitmix *r);
/* Uniform in [0, 1). */
double splitmix_uniform(struct splitmix *r);
/* Uniform integer in [0, n), n >= 1, without modulo bias. */
uint64_t splitmix_below(struct splitmix *r, uint64_t n);
/* Fisher-Yates shuffle of idx[0..n). */
void splitmix_shuffle(struct splitmix *r, int32_t *idx, int64_t n);

#endif
