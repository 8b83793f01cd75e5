/* A small deterministic RNG (splitmix64) whose whole state is one uint64, so
 * checkpoints can save it and a resumed run draws the same numbers. */
#ifndef CTUNE_TRAINER_RNG_H
#define CTUNE_TRAINER_RNG_H

#include <stdint.h>

struct rng {
  uint64_t s;
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* Uniform in [0, 1). */
double rng_uniform(struct rng *r);
/* Uniform integer in [0, n), n >= 1, without modulo bias. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* Fisher-Yates shuffle of idx[0..n). */
void rng_shuffle(struct rng *r, int32_t *idx, int64_t n);

#endif
