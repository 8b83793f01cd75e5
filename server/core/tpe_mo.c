/* tpe_mo: the multi-objective split of the TPE searcher (see tpe_mo.h). */
#include "tpe_mo.h"

#include "hypervolume.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TPE_MO_EPS 1e-12 /* Optuna's EPS: a reference coordinate of 0 becomes this */

struct tpe_mo_key {
  const double *p; /* the point's coordinates */
  int d;           /* compared from coordinate `from` on, then by index */
  int from;
  size_t i;
};

static int mo_cmp(const void *a, const void *b) {
  const struct tpe_mo_key *x = a, *y = b;
  for (int j = x->from; j < x->d; j++) {
    if (x->p[j] < y->p[j]) return -1;
    if (x->p[j] > y->p[j]) return 1;
  }
  return x->i < y->i ? -1 : x->i > y->i;
}

/* Greedy hypervolume subset selection (Optuna's _solve_hssp): marks
 * `subset` of the m points mem[] (indexes into loss) in below[]. */
static int mo_hssp(const double *loss, int d, const size_t *mem, size_t m, size_t subset,
                   unsigned char *below) {
  struct tpe_mo_key *k = malloc(m * sizeof *k);
  double *contrib = malloc(m * sizeof *contrib),
         *sel = malloc((subset + 1) * (size_t)d * sizeof *sel);
  size_t *stamp = malloc(m * sizeof *stamp), nu = 0;
  unsigned char *uniq = malloc(m), *taken = calloc(m, 1);
  double ref[SPEC_MAX_OBJECTIVES], hv_sel = 0;
  int rc = -ENOMEM, finite = 1;

  if (!k || !contrib || !sel || !stamp || !uniq || !taken) goto out;
  for (size_t i = 0; i < m; i++)
    k[i] = (struct tpe_mo_key){loss + mem[i] * (size_t)d, d, 0, mem[i]};
  qsort(k, m, sizeof *k, mo_cmp);
  for (size_t i = 0; i < m; i++) {
    uniq[i] = i == 0 || memcmp(k[i].p, k[i - 1].p, (size_t)d * sizeof *k[i].p) != 0;
    nu += uniq[i];
  }
  if (nu < subset) {
    /* Every distinct point, then later copies in index order (mem[] is). */
    size_t left = subset - nu;
    for (size_t i = 0; i < m; i++)
      if (uniq[i]) below[k[i].i] = 1;
    for (size_t i = 0; i < m && left; i++)
      if (!below[mem[i]]) below[mem[i]] = 1, left--;
    rc = 0;
    goto out;
  }
  for (int j = 0; j < d; j++) {
    double w = -INFINITY;
    for (size_t i = 0; i < m; i++) w = fmax(w, k[i].p[j]);
    ref[j] = fmax(1.1 * w, 0.9 * w);
    if (ref[j] == 0) ref[j] = TPE_MO_EPS;
    finite &= isfinite(ref[j]);
  }
  /* Contributions only shrink as the selection grows (submodularity): a
   * stale one is an upper bound, recomputed only when it leads. */
  for (size_t i = 0; i < m; i++) {
    contrib[i] = 1;
    for (int j = 0; j < d; j++) contrib[i] *= ref[j] - k[i].p[j];
    stamp[i] = 0;
  }
  for (size_t s = 0; s < subset;) {
    size_t best = m;
    for (size_t i = 0; i < m; i++)
      if (uniq[i] && !taken[i] && (best == m || contrib[i] > contrib[best])) best = i;
    if (finite && stamp[best] != s) {
      double hv;
      memcpy(sel + s * (size_t)d, k[best].p, (size_t)d * sizeof *sel);
      if ((rc = hypervolume_min(sel, s + 1, d, ref, &hv))) goto out;
      rc = -ENOMEM;
      contrib[best] = hv - hv_sel;
      stamp[best] = s;
      continue;
    }
    taken[best] = 1;
    below[k[best].i] = 1;
    memcpy(sel + s * (size_t)d, k[best].p, (size_t)d * sizeof *sel);
    hv_sel += contrib[best];
    s++;
  }
  rc = 0;
out:
  free(k), free(contrib), free(sel), free(stamp), free(uniq), free(taken);
  return rc;
}

int tpe_mo_split(const double *loss, size_t n, int d, size_t n_below, unsigned char *below) {
  int *rank = NULL;
  struct tpe_mo_key *k = NULL;
  size_t *rest = NULL, *fr = NULL, *mem = NULL, nrest = n, assigned = 0, kept = 0, m = 0;
  int r = 0, rc = -ENOMEM;

  if (d < 1 || d > SPEC_MAX_OBJECTIVES) return -EINVAL;
  memset(below, 0, n);
  if (n_below > n) n_below = n;
  if (n_below == 0) return 0;
  if (n_below == n) {
    memset(below, 1, n);
    return 0;
  }
  rank = malloc(n * sizeof *rank);
  k = malloc(n * sizeof *k);
  rest = malloc(n * sizeof *rest);
  fr = malloc(n * sizeof *fr);
  mem = malloc(n * sizeof *mem);
  if (!rank || !k || !rest || !fr || !mem) goto out;
  /* Peel fronts until they hold n_below points. In lexicographic order a
   * point is dominated only by earlier ones, and if by any remaining one
   * then by one of the current front found before it (dominance is
   * transitive): each pass costs O(remaining x front x d). */
  for (size_t i = 0; i < n; i++) k[i] = (struct tpe_mo_key){loss + i * (size_t)d, d, 0, i};
  qsort(k, n, sizeof *k, mo_cmp);
  for (size_t i = 0; i < n; i++) rest[i] = k[i].i, rank[i] = -1;
  for (; assigned < n_below; r++) {
    size_t nfr = 0, left = 0;
    for (size_t a = 0; a < nrest; a++) {
      const double *p = loss + rest[a] * (size_t)d;
      int dominated = 0;
      for (size_t b = 0; b < nfr && !dominated; b++)
        dominated = hypervolume_dominates(loss + fr[b] * (size_t)d, p, d);
      if (dominated)
        rest[left++] = rest[a];
      else
        fr[nfr++] = rest[a], rank[rest[a]] = r;
    }
    assigned += nfr;
    nrest = left;
  }
  /* Whole ranks while they fit. */
  for (int q = 0; q < r; q++) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += rank[i] == q;
    if (kept + c > n_below) {
      for (size_t i = 0; i < n; i++)
        if (rank[i] == q) mem[m++] = i;
      rc = mo_hssp(loss, d, mem, m, n_below - kept, below);
      goto out;
    }
    for (size_t i = 0; i < n; i++)
      if (rank[i] == q) below[i] = 1;
    kept += c;
  }
  rc = 0;
out:
  free(rank), free(k), free(rest), free(fr), free(mem);
  return rc;
}

int tpe_mo_weights(const double *loss, size_t n, int d, double *w) {
  double *front = NULL, *ref = NULL, hv_all, hv_loo, mx = 0;
  size_t *idx = NULL, m = 0;
  int rc = -ENOMEM;

  for (size_t i = 0; i < n; i++) w[i] = 1;
  if (n <= 1) return 0;
  front = malloc(n * (size_t)d * sizeof *front);
  ref = malloc((size_t)d * sizeof *ref);
  idx = malloc(n * sizeof *idx);
  if (!front || !ref || !idx) goto out;
  for (int j = 0; j < d; j++) {
    double v = -INFINITY;
    for (size_t i = 0; i < n; i++) v = fmax(v, loss[i * (size_t)d + j]);
    ref[j] = fmax(1.1 * v, 0.9 * v);
    if (ref[j] == 0) ref[j] = TPE_MO_EPS;
    if (!isfinite(ref[j])) { /* past DBL_MAX / 1.1: no volume to share, all weigh 1 */
      rc = 0;
      goto out;
    }
  }
  for (size_t i = 0; i < n; i++) {
    int on = 1;
    for (size_t k = 0; k < n && on; k++)
      if (hypervolume_dominates(loss + k * (size_t)d, loss + i * (size_t)d, d)) on = 0;
    w[i] = TPE_MO_EPS;
    if (on) {
      memcpy(front + m * (size_t)d, loss + i * (size_t)d, (size_t)d * sizeof *front);
      idx[m++] = i;
    }
  }
  if ((rc = hypervolume_min(front, m, d, ref, &hv_all))) goto out;
  for (size_t a = 0; a < m; a++) {
    /* Leave a out: swap it to the end, measure the rest, swap back. */
    double tmp[SPEC_MAX_OBJECTIVES];
    memcpy(tmp, front + a * (size_t)d, (size_t)d * sizeof *tmp);
    memcpy(front + a * (size_t)d, front + (m - 1) * (size_t)d, (size_t)d * sizeof *tmp);
    if ((rc = hypervolume_min(front, m - 1, d, ref, &hv_loo))) goto out;
    memcpy(front + (m - 1) * (size_t)d, front + a * (size_t)d, (size_t)d * sizeof *tmp);
    memcpy(front + a * (size_t)d, tmp, (size_t)d * sizeof *tmp);
    w[idx[a]] = hv_all - hv_loo;
    mx = fmax(mx, w[idx[a]]);
  }
  for (size_t a = 0; a < m; a++) w[idx[a]] = fmax(w[idx[a]] / fmax(mx, TPE_MO_EPS), TPE_MO_EPS);
  rc = 0;
out:
  free(front), free(ref), free(idx);
  return rc;
}
