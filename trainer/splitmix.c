/* splitmix64: tiny, fast, well-distributed; good enough for shuffles and
 * weight initialisation. */
#include "splitmix.h"

void splitmix_seed(struct splitmix *r, uint64_t seed) { r->s = seed ^ 0x6a09e667f3bcc909ull; }

uint64_t splitmix_next(struct splitmix *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double splitmix_uniform(struct splitmix *r) {
  return (double)(splitmix_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t splitmix_below(struct splitmix *r, uint64_t n) {
  /* reject the short top range so every residue is equally likely */
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = splitmix_next(r);
  } while (x >= limit);
  return x % n;
}

void splitmix_shuffle(struct splitmix *r, int32_t *idx, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)splitmix_below(r, (uint64_t)i + 1);
    int32_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}
