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
 * order from position *next on, up to point `until` (SIZE_MAX: all); gap is
 * m doubles of scratch. */
static void rung_mo_spread(const double *x, int k, const size_t *f, size_t m, double *gap,
                           size_t *pos, size_t *next, size_t until) {
  size_t first = 0, last;
  for (size_t j = 1; j < m; j++)
    if (x[f[j] * (size_t)k] < x[f[first] * (size_t)k]) first = j;
  for (size_t j = 0; j < m; j++) gap[j] = INFINITY;
  pos[f[first]] = (*next)++;
  gap[first] = -1; /* placed */
  last = first;
  for (size_t placed = 1; placed < m && f[last] != until; placed++) {
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

/* Fronts by peeling, for any k: pareto_front() on what is left, again and
 * again. O(n x front x fronts). */
static int rung_mo_peel(const double *x, size_t n, int k, int *front, int *nfronts) {
  static const enum spec_mode mins[SPEC_MAX_OBJECTIVES] = {SPEC_MODE_MIN};
  size_t nrem = n, nf, cap = n ? n : 1;
  int f = 0, rc = 0;
  size_t *rem = malloc(cap * sizeof *rem);
  double *sub = malloc(cap * (size_t)k * sizeof *sub);
  unsigned char *on = malloc(cap);
  if (!rem || !sub || !on) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < n; i++) rem[i] = i;
  while (nrem > 0) {
    size_t keep = 0;
    for (size_t j = 0; j < nrem; j++)
      memcpy(sub + j * (size_t)k, x + rem[j] * (size_t)k, (size_t)k * sizeof *sub);
    if ((rc = pareto_front(sub, nrem, k, mins, on, &nf))) goto out;
    for (size_t j = 0; j < nrem; j++) {
      if (on[j])
        front[rem[j]] = f;
      else
        rem[keep++] = rem[j];
    }
    nrem = keep;
    f++;
  }
  *nfronts = f;
out:
  free(rem);
  free(sub);
  free(on);
  return rc;
}

struct rung_pt2 {
  double a, b;
  size_t i;
};

static int rung_pt2_cmp(const void *pa, const void *pb) {
  const struct rung_pt2 *p = pa, *q = pb;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  if (p->b != q->b) return p->b < q->b ? -1 : 1;
  return p->i < q->i ? -1 : p->i > q->i;
}

/* The same fronts for two objectives in O(n log n). In lexicographic order
 * a point's dominators all come before it, so its front is one past the
 * last front holding an earlier point whose second objective is no larger
 * (the front a peel would give: the longest chain of dominators), unless
 * that point equals it (equal points share a front). tail[L] is the least
 * second objective in front L so far, non-decreasing in L; who[L] a point
 * that has it. */
static int rung_mo_fronts2(const double *x, size_t n, int *front, int *nfronts) {
  size_t cap = n ? n : 1, nt = 0;
  struct rung_pt2 *p = malloc(cap * sizeof *p);
  double *tail = malloc(cap * sizeof *tail);
  size_t *who = malloc(cap * sizeof *who);
  if (!p || !tail || !who) {
    free(p);
    free(tail);
    free(who);
    return -ENOMEM;
  }
  for (size_t i = 0; i < n; i++) p[i] = (struct rung_pt2){x[2 * i], x[2 * i + 1], i};
  qsort(p, n, sizeof *p, rung_pt2_cmp);
  for (size_t j = 0; j < n; j++) {
    size_t lo = 0, hi = nt; /* fronts [0, lo) have tail <= b */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (tail[mid] <= p[j].b)
        lo = mid + 1;
      else
        hi = mid;
    }
    size_t f = lo; /* one past the last front with an earlier point no larger */
    if (lo > 0 && x[2 * who[lo - 1]] == p[j].a && x[2 * who[lo - 1] + 1] == p[j].b) f = lo - 1;
    front[p[j].i] = (int)f;
    if (f == nt) {
      tail[nt] = p[j].b;
      who[nt++] = p[j].i;
    } else if (p[j].b < tail[f]) {
      tail[f] = p[j].b;
      who[f] = p[j].i;
    }
  }
  *nfronts = (int)nt;
  free(p);
  free(tail);
  free(who);
  return 0;
}

/* rung_mo_order, or with `of` < n only point of's position (pos[of]) and
 * the fronts: the epsilon-net runs in of's front alone, up to it. */
static int rung_mo_place(const double *x, size_t n, int k, size_t of, size_t *pos, int *front,
                         int *nfronts) {
  size_t next = 0, cap = n ? n : 1;
  int rc;
  if (k < 1 || k > SPEC_MAX_OBJECTIVES) return -EINVAL;
  rc = k == 2 ? rung_mo_fronts2(x, n, front, nfronts) : rung_mo_peel(x, n, k, front, nfronts);
  if (rc) return rc;
  /* Each front's points in index order (a counting sort by front), then
   * each front's epsilon-net. */
  size_t *start = calloc((size_t)*nfronts + 1, sizeof *start), *fr = malloc(cap * sizeof *fr);
  double *gap = malloc(cap * sizeof *gap);
  if (!start || !fr || !gap) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < n; i++) start[front[i] + 1]++;
  for (int f = 0; f < *nfronts; f++) start[f + 1] += start[f];
  for (size_t i = 0; i < n; i++) fr[start[front[i]]++] = i;
  for (int f = 0; f < *nfronts; f++) {
    size_t lo = f ? start[f - 1] : 0;
    if (of < n && f < front[of]) {
      next += start[f] - lo; /* a whole front before of's */
    } else if (of >= n || f == front[of]) {
      rung_mo_spread(x, k, fr + lo, start[f] - lo, gap, pos, &next, of < n ? of : SIZE_MAX);
      if (of < n) break;
    }
  }
out:
  free(start);
  free(fr);
  free(gap);
  return rc;
}

int rung_mo_order(const double *x, size_t n, int k, size_t *pos, int *front, int *nfronts) {
  return rung_mo_place(x, n, k, SIZE_MAX, pos, front, nfronts);
}

int rung_mo_rank(const double *x, size_t n, int k, size_t of, size_t *pos, int *front,
                 int *nfronts) {
  int *fr = malloc((n ? n : 1) * sizeof *fr), rc;
  size_t *ps = malloc((n ? n : 1) * sizeof *ps);
  if (of >= n)
    rc = -EINVAL;
  else if (!fr || !ps)
    rc = -ENOMEM;
  else
    rc = rung_mo_place(x, n, k, of, ps, fr, nfronts);
  if (!rc) {
    *pos = ps[of];
    *front = fr[of];
  }
  free(fr);
  free(ps);
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
