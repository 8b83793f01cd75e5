/* rng: a portable seeded PRNG (splitmix64 seeding xoshiro256**). The same
 * seed gives the same numbers on every machine; no global state. */
#ifndef CTUNE_RNG_H
#define CTUNE_RNG_H

#include <stdint.h>

struct rng {
  uint64_t s[4];
};

/* Seeds the generator; every seed (0 included) gives a valid state. */
void rng_seed(struct rng *r, uint64_t seed);
/* Mixes two 64-bit values into one seed: rng_mix(experiment seed, index)
 * gives each trial its own independent stream, so trial i's draws do not
 * depend on how many other trials there are. */
uint64_t rng_mix(uint64_t a, uint64_t b);
uint64_t rng_next(struct rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double rng_uniform(struct rng *r);
/* Uniform double in [lower, upper). */
double rng_uniform_range(struct rng *r, double lower, double upper);
/* Uniform integer in [lower, upper) without modulo bias; lower < upper. */
int64_t rng_int_range(struct rng *r, int64_t lower, int64_t upper);
/* Normal with the given mean and standard deviation (Box-Muller). */
double rng_normal(struct rng *r, double mean, double sd);

#endif
