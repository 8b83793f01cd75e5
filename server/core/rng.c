/* rng: splitmix64 seeding xoshiro256** (Blackman and Vigna's published
 * algorithms, written out here); all arithmetic is on uint64_t so every
 * machine produces the same bits. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rng_seed(struct rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
  /* splitmix64 never yields four zero words in a row, but be explicit:
   * the all-zero state is the one xoshiro cannot leave. */
  if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3])) r->s[0] = 1;
}

uint64_t rng_mix(uint64_t a, uint64_t b) {
  uint64_t x = a;
  uint64_t h = splitmix64(&x);
  x = h ^ b;
  return splitmix64(&x);
}

uint64_t rng_next(struct rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rng_uniform(struct rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

double rng_uniform_range(struct rng *r, double lower, double upper) {
  double v = lower + (upper - lower) * rng_uniform(r);
  /* Rounding can land exactly on upper for wide ranges; keep it half-open. */
  return v < upper ? v : lower;
}

int64_t rng_int_range(struct rng *r, int64_t lower, int64_t upper) {
  uint64_t span = (uint64_t)upper - (uint64_t)lower;
  if (upper <= lower) return lower;
  /* Rejection sampling: drop the top partial block so each value is
   * equally likely. */
  uint64_t limit = UINT64_MAX - (UINT64_MAX % span);
  uint64_t x;
  do x = rng_next(r);
  while (x >= limit);
  return (int64_t)((uint64_t)lower + x % span);
}

double rng_normal(struct rng *r, double mean, double sd) {
  /* Box-Muller with u1 in (0, 1] so log never sees 0; one value per call
   * keeps the stream position independent of call history. */
  double u1 = 1.0 - rng_uniform(r);
  double u2 = rng_uniform(r);
  double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) /* 2 pi */;
  return mean + sd * z;
}
