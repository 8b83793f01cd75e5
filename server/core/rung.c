/* rung: see rung.h. */
#include "rung.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pareto.h"
#include "rng.h"
#include "spec.h"

double rung_t(double grace, double rf, int s, int k) { return grace * pow(rf, k + s); }

int rung_ray_count(double max_t, double grace, double rf, int s, int *n) {
  double nd = log(max_t / grace) / log(rf) - s + 1;
  if (!(nd < SPEC_ASHA_MAX_MILESTONES + 1)) /* also NaN and inf */
    return -EINVAL;
  *n = nd < 0 ? 0 : (int)nd; /* truncates toward zero, as Python's int() */
  return 0;
}

int rung_pause_count(double max_t, double grace, double rf, int s) {
  int n = 0;
  while (n < SPEC_ASHA_MAX_MILESTONES && rung_t(grace, rf, s, n) < max_t) n++;
  return n;
}

uint64_t rung_bracket_seed(uint64_t seed) {
  return rng_mix(seed, 0x4153484142524b54ULL); /* "ASHABRKT" */
}

int rung_bracket_draw(uint64_t bracket_seed, const int *n, int nb, int64_t idx) {
  double w[SPEC_ASHA_MAX_BRACKETS], sum = 0, u;
  int nmax = 0;
  struct rng r;

  if (nb <= 1) return 0;
  /* The variants' create refuses more; this keeps w in bounds anyway. */
  if (nb > SPEC_ASHA_MAX_BRACKETS) nb = SPEC_ASHA_MAX_BRACKETS;
  for (int s = 0; s < nb; s++)
    if (n[s] > nmax) nmax = n[s];
  for (int s = 0; s < nb; s++) {
    /* e^(n - nmax): the same proportions as e^n without overflow. */
    w[s] = exp((double)(n[s] - nmax));
    sum += w[s];
  }
  rng_seed(&r, rng_mix(bracket_seed, (uint64_t)idx));
  u = rng_uniform(&r) * sum;
  for (int s = 0; s < nb; s++) {
    if (u < w[s]) return s;
    u -= w[s];
  }
  return nb - 1;
}

void *rung_grow(void *arr, size_t *cap, size_t size, size_t first) {
  size_t n = *cap ? *cap * 2 : first;
  void *na;
  if (size == 0 || n < *cap || n > SIZE_MAX / size) return NULL;
  na = realloc(arr, n * size);
  if (na) *cap = n;
  return na;
}

void rung_slots_init(struct rung_slots *t, size_t size) {
  memset(t, 0, sizeof *t);
  t->size = size;
}

void rung_slots_free(struct rung_slots *t) {
  free(t->v);
  idmap_free(&t->ids);
  rung_slots_init(t, t->size);
}

size_t rung_slots_mem_bytes(const struct rung_slots *t) {
  return t->cap * t->size + t->ids.cap * sizeof *t->ids.e;
}

void *rung_slot_find(const struct rung_slots *t, int64_t id) {
  size_t i;
  return idmap_get(&t->ids, id, &i) ? NULL : t->v + i * t->size;
}

int rung_slot_get(struct rung_slots *t, int64_t id, void **out, int *created) {
  void *s = rung_slot_find(t, id);
  *created = 0;
  if (!s) {
    if (t->n == t->cap) {
      /* From 8 slots, as each variant's own table grew. */
      unsigned char *nv = rung_grow(t->v, &t->cap, t->size, 8);
      if (!nv) return -ENOMEM;
      t->v = nv;
    }
    if (idmap_put(&t->ids, id, t->n)) return -ENOMEM;
    s = t->v + t->n++ * t->size;
    memset(s, 0, t->size);
    *created = 1;
  }
  *out = s;
  return 0;
}

/* The Euclidean distance as numpy's linalg.norm sums it: the squares in
 * order, then the square root, so that equal distances tie as they do in
 * Syne Tune. */
static double rung_mo_dist(const double *a, const double *b, int k) {
  double s = 0;
  for (int j = 0; j < k; j++) s += (a[j] - b[j]) * (a[j] - b[j]);
  return sqrt(s);
}

/* Places the front's m points (indices f[0..m-1], ascending) in epsilon-net
 * order from position *next on; gap is m doubles of scratch. */
static void rung_mo_spread(const double *x, int k, const size_t *f, size_t m, double *gap,
                           size_t *pos, size_t *next) {
  size_t first = 0, last;
  for (size_t j = 1; j < m; j++)
    if (x[f[j] * (size_t)k] < x[f[first] * (size_t)k]) first = j;
  for (size_t j = 0; j < m; j++) gap[j] = INFINITY;
  pos[f[first]] = (*next)++;
  gap[first] = -1; /* placed */
  last = first;
  for (size_t placed = 1; placed < m; placed++) {
    size_t pick = m;
    for (size_t j = 0; j < m; j++) {
      if (gap[j] < 0) continue;
      double d = rung_mo_dist(x + f[j] * (size_t)k, x + f[last] * (size_t)k, k);
      if (d < gap[j]) gap[j] = d;
      if (pick == m || gap[j] > gap[pick]) pick = j;
    }
    pos[f[pick]] = (*next)++;
    gap[pick] = -1;
    last = pick;
  }
}

int rung_mo_order(const double *x, size_t n, int k, size_t *pos, int *front, int *nfronts) {
  static const enum spec_mode mins[SPEC_MAX_OBJECTIVES] = {SPEC_MODE_MIN};
  size_t nrem = n, next = 0, nf;
  int f = 0, rc = 0;
  if (k < 1 || k > SPEC_MAX_OBJECTIVES) return -EINVAL;
  size_t cap = n ? n : 1;
  size_t *rem = malloc(cap * sizeof *rem), *fr = malloc(cap * sizeof *fr);
  double *sub = malloc(cap * (size_t)k * sizeof *sub), *gap = malloc(cap * sizeof *gap);
  unsigned char *on = malloc(cap);
  if (!rem || !fr || !sub || !gap || !on) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < n; i++) rem[i] = i;
  while (nrem > 0) {
    size_t m = 0, keep = 0;
    for (size_t j = 0; j < nrem; j++)
      memcpy(sub + j * (size_t)k, x + rem[j] * (size_t)k, (size_t)k * sizeof *sub);
    if ((rc = pareto_front(sub, nrem, k, mins, on, &nf))) goto out;
    for (size_t j = 0; j < nrem; j++) {
      if (on[j]) {
        fr[m++] = rem[j];
        front[rem[j]] = f;
      } else {
        rem[keep++] = rem[j];
      }
    }
    rung_mo_spread(x, k, fr, m, gap, pos, &next);
    nrem = keep;
    f++;
  }
  *nfronts = f;
out:
  free(rem);
  free(fr);
  free(sub);
  free(gap);
  free(on);
  return rc;
}

size_t rung_mo_keep(size_t n, double rf) {
  size_t keep = 0;
  while (keep < n && !((double)keep / (double)n > 1.0 / rf)) keep++;
  return keep;
}

int rung_mo_flips(const struct sched_params *params, enum spec_mode mode, double *flip) {
  int k = params->nobjectives > 1 ? params->nobjectives : 1;
  if (k > SPEC_MAX_OBJECTIVES) k = SPEC_MAX_OBJECTIVES;
  for (int j = 0; j < k; j++)
    flip[j] = (k > 1 ? params->modes[j] : mode) == SPEC_MODE_MAX ? -1.0 : 1.0;
  return k;
}
