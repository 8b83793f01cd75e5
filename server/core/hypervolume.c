/* hypervolume: see hypervolume.h. Every objective is turned into one to
 * minimise first (a max objective and its reference negated). Two
 * objectives: one sweep in x order, O(n log n). More: slices along the last
 * objective (Hypervolume by Slicing Objectives, While et al. 2006): between
 * two consecutive values of it, the volume is the (k-1)-objective volume of
 * the points below the slice times its thickness, O(n^(k-1) log n); the
 * points dominated in the smaller problem are dropped before each slice. */
#include "hypervolume.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sort keys: pointers to rows, compared on one coordinate (then the next
 * ones, so equal keys sort the same way every time). */
#define HV_CMP(d)                                                                                  \
  static int hv_cmp##d(const void *a, const void *b) {                                             \
    const double *x = *(const double *const *)a;                                                   \
    const double *y = *(const double *const *)b;                                                   \
    for (int j = (d); j >= 0; j--)                                                                 \
      if (x[j] != y[j]) return x[j] < y[j] ? -1 : 1;                                               \
    return 0;                                                                                      \
  }
HV_CMP(0)
HV_CMP(1)
HV_CMP(2)
HV_CMP(3)
static int (*const hv_cmp[])(const void *, const void *) = {hv_cmp0, hv_cmp1, hv_cmp2, hv_cmp3};

/* x (minimised form) weakly dominates y: x <= y on each of k. */
static int hv_weakly_dominates(const double *x, const double *y, int k) {
  for (int j = 0; j < k; j++)
    if (x[j] > y[j]) return 0;
  return 1;
}

/* The volume of m rows of k minimised values (each strictly below r on
 * every objective), rows[i] pointing at row i. The rows are reordered. */
static int hv_min(const double **rows, size_t m, int k, const double *r, double *out) {
  *out = 0;
  if (!m) return 0;
  if (k == 1) {
    double lo = r[0];
    for (size_t i = 0; i < m; i++) lo = fmin(lo, rows[i][0]);
    *out = r[0] - lo;
    return 0;
  }
  if (k == 2) {
    /* x ascending (y ascending on ties): each point whose y is below every
     * earlier one adds the strip [x, r0] x [y, y_best). */
    qsort(rows, m, sizeof *rows, hv_cmp[0]);
    double ybest = r[1], v = 0;
    for (size_t i = 0; i < m; i++)
      if (rows[i][1] < ybest) {
        v += (r[0] - rows[i][0]) * (ybest - rows[i][1]);
        ybest = rows[i][1];
      }
    *out = v;
    return 0;
  }
  /* Slices along objective k-1, lowest first. The rows of the slice, kept
   * non-dominated on the first k-1 objectives, point into the same rows. */
  qsort(rows, m, sizeof *rows, hv_cmp[k - 1]);
  const double **slice = malloc(m * sizeof *slice), **work = malloc(m * sizeof *work);
  if (!slice || !work) {
    free(slice);
    free(work);
    return -ENOMEM;
  }
  size_t ns = 0;
  double v = 0;
  int rc = 0;
  for (size_t i = 0; i < m && !rc; i++) {
    const double *p = rows[i];
    int covered = 0;
    for (size_t s = 0; s < ns && !covered; s++) covered = hv_weakly_dominates(slice[s], p, k - 1);
    if (!covered) {
      size_t keep = 0;
      for (size_t s = 0; s < ns; s++)
        if (!hv_weakly_dominates(p, slice[s], k - 1)) slice[keep++] = slice[s];
      ns = keep;
      slice[ns++] = p;
    }
    double top = i + 1 < m ? rows[i + 1][k - 1] : r[k - 1];
    if (top <= p[k - 1]) continue; /* the next row starts the same slice */
    double area;
    memcpy(work, slice, ns * sizeof *work);
    rc = hv_min(work, ns, k - 1, r, &area);
    v += area * (top - p[k - 1]);
  }
  free(slice);
  free(work);
  if (!rc) *out = v;
  return rc;
}

/* Row i of values in minimised form into dst (modes NULL: already so); 1
 * when it counts (all finite and strictly below r), else 0. */
static int hv_row(const double *values, size_t i, int k, const enum spec_mode *modes,
                  const double *r, double *dst) {
  for (int j = 0; j < k; j++) {
    double x = values[i * (size_t)k + (size_t)j];
    dst[j] = modes && modes[j] == SPEC_MODE_MAX ? -x : x;
    if (!isfinite(x) || !(dst[j] < r[j])) return 0;
  }
  return 1;
}

static int hv_ref_min(int k, const enum spec_mode *modes, const double *ref, double *r) {
  if (k < 1 || k > SPEC_MAX_OBJECTIVES) return -EINVAL;
  for (int j = 0; j < k; j++) {
    if (!isfinite(ref[j])) return -EINVAL;
    r[j] = modes && modes[j] == SPEC_MODE_MAX ? -ref[j] : ref[j];
  }
  return 0;
}

/* hypervolume_compute and hypervolume_min: modes NULL when values are
 * minimised already; cap: refuse more than HYPERVOLUME_MAX_4D points in 4-D. */
static int hv_volume(const double *values, size_t n, int k, const enum spec_mode *modes,
                     const double *ref, int cap, double *hv) {
  double r[SPEC_MAX_OBJECTIVES];
  int rc = hv_ref_min(k, modes, ref, r);
  if (rc) return rc;
  double *mins = malloc((n ? n : 1) * (size_t)k * sizeof *mins);
  const double **rows = malloc((n ? n : 1) * sizeof *rows);
  size_t m = 0;
  rc = mins && rows ? 0 : -ENOMEM;
  for (size_t i = 0; !rc && i < n; i++)
    if (hv_row(values, i, k, modes, r, mins + m * (size_t)k)) {
      rows[m] = mins + m * (size_t)k;
      m++;
    }
  if (!rc && cap && k == SPEC_MAX_OBJECTIVES && m > HYPERVOLUME_MAX_4D) rc = -E2BIG;
  if (!rc) rc = hv_min(rows, m, k, r, hv);
  free(mins);
  free(rows);
  return rc;
}

int hypervolume_compute(const double *values, size_t n, int k, const enum spec_mode *modes,
                        const double *ref, double *hv) {
  return hv_volume(values, n, k, modes, ref, 1, hv);
}

int hypervolume_min(const double *pts, size_t n, int k, const double *ref, double *hv) {
  *hv = 0;
  return hv_volume(pts, n, k, NULL, ref, 0, hv);
}

int hypervolume_reference(const double *values, size_t n, int k, const enum spec_mode *modes,
                          double *ref) {
  if (k < 1 || k > SPEC_MAX_OBJECTIVES) return -EINVAL;
  double worst[SPEC_MAX_OBJECTIVES], best[SPEC_MAX_OBJECTIVES];
  size_t seen = 0;
  for (size_t i = 0; i < n; i++) {
    const double *p = values + i * (size_t)k;
    int finite = 1;
    for (int j = 0; j < k; j++) finite &= isfinite(p[j]) != 0;
    if (!finite) continue;
    for (int j = 0; j < k; j++) {
      double x = modes[j] == SPEC_MODE_MAX ? -p[j] : p[j];
      worst[j] = seen ? fmax(worst[j], x) : x;
      best[j] = seen ? fmin(best[j], x) : x;
    }
    seen++;
  }
  if (!seen) return -ENOENT;
  for (int j = 0; j < k; j++) {
    double span = worst[j] - best[j];
    double r = worst[j] + 0.1 * (span > 0 ? span : fmax(fabs(worst[j]), 1.0));
    ref[j] = modes[j] == SPEC_MODE_MAX ? -r : r;
  }
  return 0;
}

/* Two objectives: the front kept sorted by x (so y falls along it); a new
 * point adds the strip between it and the staircase above it, from its x to
 * the first front point below it, and replaces the points it dominates. O(f)
 * a point for a front of f. 1 when p changed the front. */
static int hv_series_2d(const double **front, size_t *nf, const double *p, const double *r,
                        double *cur) {
  size_t lo = 0, hi = *nf;
  while (lo < hi) { /* the first point with x > p's */
    size_t mid = lo + (hi - lo) / 2;
    if (front[mid][0] <= p[0])
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo > 0 && front[lo - 1][1] <= p[1]) return 0; /* weakly dominated */
  size_t i = lo;
  while (i > 0 && front[i - 1][0] == p[0]) i--; /* same x, higher y: p dominates them */
  double ytop = i > 0 ? front[i - 1][1] : r[1], x = p[0], add = 0;
  size_t j = i;
  for (; j < *nf && front[j][1] >= p[1]; j++) {
    add += (front[j][0] - x) * (ytop - p[1]);
    x = front[j][0];
    ytop = front[j][1];
  }
  add += ((j < *nf ? front[j][0] : r[0]) - x) * (ytop - p[1]);
  memmove(front + i + 1, front + j, (*nf - j) * sizeof *front);
  front[i] = p;
  *nf = *nf - (j - i) + 1;
  *cur += add;
  return 1;
}

int hypervolume_series(const double *values, const size_t *order, size_t n, int k,
                       const enum spec_mode *modes, const double *ref, double *hv) {
  double r[SPEC_MAX_OBJECTIVES];
  int rc = hv_ref_min(k, modes, ref, r);
  if (rc) return rc;
  /* The front so far (minimised rows); the volume changes only when a new
   * point is not weakly dominated by it. */
  double *mins = malloc((n ? n : 1) * (size_t)k * sizeof *mins);
  const double **front = malloc((n ? n : 1) * sizeof *front);
  const double **work = malloc((n ? n : 1) * sizeof *work);
  rc = mins && front && work ? 0 : -ENOMEM;
  size_t nf = 0;
  double cur = 0, spent = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    double *p = mins + i * (size_t)k;
    int counts = hv_row(values, order[i], k, modes, r, p);
    if (counts && k == 2) {
      hv_series_2d(front, &nf, p, r, &cur);
    } else if (counts) {
      for (size_t f = 0; counts && f < nf; f++)
        if (hv_weakly_dominates(front[f], p, k)) counts = 0;
    }
    if (counts && k != 2) {
      size_t keep = 0;
      for (size_t f = 0; f < nf; f++)
        if (!hv_weakly_dominates(p, front[f], k)) front[keep++] = front[f];
      nf = keep;
      front[nf++] = p;
      /* Each volume costs about nf^(k-1): a bounded total. */
      spent += pow((double)nf, k - 1);
      if (spent > HYPERVOLUME_SERIES_WORK) rc = -E2BIG;
      memcpy(work, front, nf * sizeof *work);
      if (!rc) rc = hv_min(work, nf, k, r, &cur);
    }
    hv[i] = cur;
  }
  free(mins);
  free(front);
  free(work);
  return rc;
}

/* One front of the non-dominated sort: its rows, in the order they came. */
struct hv_layer {
  const double **rows;
  size_t n, cap;
};

/* Some row of the layer dominates p (the latest first: the likeliest). */
static int hv_layer_dominates(const struct hv_layer *l, const double *p, int k) {
  for (size_t i = l->n; i-- > 0;)
    if (hypervolume_dominates(l->rows[i], p, k)) return 1;
  return 0;
}

int hypervolume_ranks(const double *values, size_t n, int k, const enum spec_mode *modes,
                      int *rank) {
  if (k < 1 || k > SPEC_MAX_OBJECTIVES) return -EINVAL;
  /* Efficient non-dominated sort (ENS-BS, Zhang et al. 2015): in
   * lexicographic order (minimised form) a point's dominators all come
   * before it; it joins the first front none of whose points dominates it,
   * found by binary search (a front with a dominator of it has every front
   * before it holding one too). */
  double *mins = malloc((n ? n : 1) * (size_t)k * sizeof *mins);
  const double **rows = malloc((n ? n : 1) * sizeof *rows);
  struct hv_layer *layers = calloc(n ? n : 1, sizeof *layers);
  int rc = mins && rows && layers ? 0 : -ENOMEM;
  double inf[SPEC_MAX_OBJECTIVES];
  for (int j = 0; j < k; j++) inf[j] = INFINITY;
  size_t m = 0, nl = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    rank[i] = 0;
    /* hv_row with an infinite reference: all finite is all it asks. */
    if (hv_row(values, i, k, modes, inf, mins + i * (size_t)k)) rows[m++] = mins + i * (size_t)k;
  }
  if (!rc) qsort(rows, m, sizeof *rows, hv_cmp[k - 1]);
  for (size_t a = 0; !rc && a < m; a++) {
    size_t lo = 0, hi = nl;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (hv_layer_dominates(&layers[mid], rows[a], k))
        lo = mid + 1;
      else
        hi = mid;
    }
    struct hv_layer *l = &layers[lo];
    if (l->n == l->cap) {
      size_t cap = l->cap ? l->cap * 2 : 8;
      const double **nr = realloc(l->rows, cap * sizeof *nr);
      if (!nr) {
        rc = -ENOMEM;
        break;
      }
      l->rows = nr;
      l->cap = cap;
    }
    l->rows[l->n++] = rows[a];
    if (lo == nl) nl++;
    rank[(size_t)(rows[a] - mins) / (size_t)k] = (int)lo + 1;
  }
  for (size_t i = 0; layers && i < nl; i++) free(layers[i].rows);
  free(layers);
  free(mins);
  free(rows);
  return rc;
}

int hypervolume_rank_of(const double *values, size_t n, int k, const enum spec_mode *modes,
                        size_t i, int *rank) {
  if (k < 1 || k > SPEC_MAX_OBJECTIVES || i >= n) return -EINVAL;
  double inf[SPEC_MAX_OBJECTIVES], p[SPEC_MAX_OBJECTIVES], q[SPEC_MAX_OBJECTIVES];
  for (int j = 0; j < k; j++) inf[j] = INFINITY;
  *rank = 0;
  if (!hv_row(values, i, k, modes, inf, p)) return 0;
  /* Only the points that dominate i decide its rank (their own dominators
   * dominate i too): rank them alone. */
  double *sub = malloc((n ? n : 1) * (size_t)k * sizeof *sub);
  int *rk = malloc((n ? n : 1) * sizeof *rk);
  int rc = sub && rk ? 0 : -ENOMEM;
  size_t m = 0;
  for (size_t o = 0; !rc && o < n; o++)
    if (hv_row(values, o, k, modes, inf, q) && hypervolume_dominates(q, p, k))
      memcpy(sub + m++ * (size_t)k, values + o * (size_t)k, (size_t)k * sizeof *sub);
  if (!rc) rc = hypervolume_ranks(sub, m, k, modes, rk);
  for (size_t o = 0; !rc && o < m; o++) *rank = rk[o] > *rank ? rk[o] : *rank;
  if (!rc) *rank += 1;
  free(sub);
  free(rk);
  return rc;
}
