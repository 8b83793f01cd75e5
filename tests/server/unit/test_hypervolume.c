/* Unit tests of hypervolume (server/core/hypervolume.c) against definitions
 * written independently: inclusion-exclusion over every subset of a small
 * random set (the volume of a union of boxes), a count of the unit cells an
 * integer grid's points dominate, the volume of each prefix recomputed for
 * the series, and non-dominated sorting by peeling fronts off one at a time.
 * NaN and infinite objectives, max objectives and points outside the
 * reference box are in the random sets. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hypervolume.h"
#include "rng.h"

static double sgn(const enum spec_mode *modes, int j) { return modes[j] == SPEC_MODE_MAX ? -1 : 1; }

static int finite_row(const double *v, int k) {
  for (int j = 0; j < k; j++)
    if (isnan(v[j]) || isinf(v[j])) return 0;
  return 1;
}

/* Inclusion-exclusion: sum over non-empty subsets S of the counted points of
 * (-1)^(|S|+1) times the volume of the intersection of their boxes. */
static double brute_ie(const double *v, size_t n, int k, const enum spec_mode *modes,
                       const double *ref) {
  size_t idx[16], m = 0;
  for (size_t i = 0; i < n; i++) {
    int in = finite_row(v + i * k, k);
    for (int j = 0; in && j < k; j++) in = sgn(modes, j) * v[i * k + j] < sgn(modes, j) * ref[j];
    if (in) idx[m++] = i;
  }
  double total = 0;
  for (unsigned long mask = 1; mask < (1ul << m); mask++) {
    double vol = 1;
    int bits = 0;
    for (int j = 0; j < k; j++) {
      double hi = -INFINITY;
      for (size_t b = 0; b < m; b++)
        if (mask >> b & 1) hi = fmax(hi, sgn(modes, j) * v[idx[b] * k + j]);
      vol *= sgn(modes, j) * ref[j] - hi;
    }
    for (size_t b = 0; b < m; b++) bits += (int)(mask >> b & 1);
    total += bits % 2 ? vol : -vol;
  }
  return total;
}

/* Unit cells [c, c+1) of the grid below ref that some counted point
 * weakly dominates (minimised form: p <= c on every objective). */
static double brute_cells(const double *v, size_t n, int k, const enum spec_mode *modes,
                          const double *ref) {
  int hi[SPEC_MAX_OBJECTIVES], c[SPEC_MAX_OBJECTIVES], start[SPEC_MAX_OBJECTIVES];
  /* Minimised coordinates run from the lowest any point has to hi - 1. */
  for (int j = 0; j < k; j++) {
    hi[j] = (int)(sgn(modes, j) * ref[j]);
    start[j] = hi[j];
    for (size_t i = 0; i < n; i++)
      if (finite_row(v + i * k, k)) start[j] = (int)fmin(start[j], sgn(modes, j) * v[i * k + j]);
    if (start[j] >= hi[j]) return 0; /* no cell of the box is dominated */
    c[j] = start[j];
  }
  double count = 0;
  for (;;) {
    int j = 0;
    for (size_t i = 0; i < n; i++) {
      if (!finite_row(v + i * k, k)) continue;
      int dom = 1;
      for (int d = 0; dom && d < k; d++) dom = sgn(modes, d) * v[i * k + d] <= c[d];
      if (dom) {
        count += 1;
        break;
      }
    }
    while (j < k && ++c[j] >= hi[j]) {
      c[j] = start[j];
      j++;
    }
    if (j == k) break;
  }
  return count;
}

static void random_modes(struct rng *g, int k, enum spec_mode *modes) {
  for (int j = 0; j < k; j++) modes[j] = rng_uniform(g) < 0.5 ? SPEC_MODE_MIN : SPEC_MODE_MAX;
}

/* A value, NaN or an infinity now and then. */
static double random_value(struct rng *g, double x) {
  double u = rng_uniform(g);
  return u < 0.04 ? NAN : u < 0.06 ? INFINITY : u < 0.07 ? -INFINITY : x;
}

START_TEST(hand_checked) {
  /* (1,5) (2,2) (3,1) minimised, ref (4,6): strips 3x1 + 2x3 + 1x1 = 10;
   * (3,3) is dominated and NaN rows count nothing. */
  const double v[] = {1, 5, 2, 2, 3, 1, 3, 3, NAN, 0};
  const enum spec_mode mm[] = {SPEC_MODE_MIN, SPEC_MODE_MIN};
  const double ref[] = {4, 6};
  double hv = -1;
  ck_assert_int_eq(hypervolume_compute(v, 5, 2, mm, ref, &hv), 0);
  ck_assert_double_eq(hv, 10);
  /* Maximising the second with ref 0 below it: (1,5) dominates (2,2),
   * (3,3) and (3,1): box 3 x 5 = 15. */
  const enum spec_mode mx[] = {SPEC_MODE_MIN, SPEC_MODE_MAX};
  const double ref2[] = {4, 0};
  ck_assert_int_eq(hypervolume_compute(v, 5, 2, mx, ref2, &hv), 0);
  ck_assert_double_eq(hv, 15);
  /* A point on or beyond the reference adds nothing; none at all is 0. */
  const double ref3[] = {1, 6};
  ck_assert_int_eq(hypervolume_compute(v, 5, 2, mm, ref3, &hv), 0);
  ck_assert_double_eq(hv, 0);
  ck_assert_int_eq(hypervolume_compute(v, 0, 2, mm, ref, &hv), 0);
  ck_assert_double_eq(hv, 0);
  /* 3 objectives: unit cube corners (0,1,1) (1,0,1) (1,1,0), ref (2,2,2):
   * 3 boxes of 2 minus 3 pairwise overlaps of 1 plus the triple's 1 = 4. */
  const double c3[] = {0, 1, 1, 1, 0, 1, 1, 1, 0};
  const enum spec_mode m3[] = {SPEC_MODE_MIN, SPEC_MODE_MIN, SPEC_MODE_MIN};
  const double r3[] = {2, 2, 2};
  ck_assert_int_eq(hypervolume_compute(c3, 3, 3, m3, r3, &hv), 0);
  ck_assert_double_eq(hv, 4);
  /* Bad input. */
  const double bad[] = {4, NAN};
  ck_assert_int_eq(hypervolume_compute(v, 5, 2, mm, bad, &hv), -EINVAL);
  ck_assert_int_eq(hypervolume_compute(v, 5, 0, mm, ref, &hv), -EINVAL);
  ck_assert_int_eq(hypervolume_compute(v, 5, SPEC_MAX_OBJECTIVES + 1, mm, ref, &hv), -EINVAL);
}
END_TEST

START_TEST(reference_point_rule) {
  const double v[] = {1, 5, 2, 2, 3, 1, NAN, 99};
  const enum spec_mode mm[] = {SPEC_MODE_MIN, SPEC_MODE_MIN};
  double ref[2];
  /* worst (3, 5) plus 10% of the ranges (2, 4); the NaN row is ignored. */
  ck_assert_int_eq(hypervolume_reference(v, 4, 2, mm, ref), 0);
  ck_assert_double_eq_tol(ref[0], 3.2, 1e-12);
  ck_assert_double_eq_tol(ref[1], 5.4, 1e-12);
  /* Maximised: the worst is the lowest, moved lower. */
  const enum spec_mode mx[] = {SPEC_MODE_MIN, SPEC_MODE_MAX};
  ck_assert_int_eq(hypervolume_reference(v, 4, 2, mx, ref), 0);
  ck_assert_double_eq_tol(ref[1], 1 - 0.4, 1e-12);
  /* One point: 10% of max(|worst|, 1). */
  const double one[] = {-3, 10};
  ck_assert_int_eq(hypervolume_reference(one, 1, 2, mx, ref), 0);
  ck_assert_double_eq_tol(ref[0], -2.7, 1e-12);
  ck_assert_double_eq_tol(ref[1], 9, 1e-12);
  const double zero[] = {0, 0};
  ck_assert_int_eq(hypervolume_reference(zero, 1, 2, mm, ref), 0);
  ck_assert_double_eq_tol(ref[0], 0.1, 1e-12);
  /* Every extreme point adds volume under the derived point. */
  double hv;
  ck_assert_int_eq(hypervolume_reference(v, 4, 2, mm, ref), 0);
  ck_assert_int_eq(hypervolume_compute(v, 1, 2, mm, ref, &hv), 0);
  ck_assert(hv > 0);
  ck_assert_int_eq(hypervolume_reference(v + 6, 1, 2, mm, ref), -ENOENT);
}
END_TEST

START_TEST(random_sets_match_inclusion_exclusion) {
  struct rng g;
  rng_seed(&g, 20261127);
  for (int iter = 0; iter < 1500; iter++) {
    int k = (int)rng_int_range(&g, 1, SPEC_MAX_OBJECTIVES + 1);
    size_t n = (size_t)rng_int_range(&g, 0, 12);
    enum spec_mode modes[SPEC_MAX_OBJECTIVES];
    double v[12 * SPEC_MAX_OBJECTIVES], ref[SPEC_MAX_OBJECTIVES], hv = -1;
    random_modes(&g, k, modes);
    for (size_t i = 0; i < n * (size_t)k; i++)
      v[i] = random_value(&g, sgn(modes, (int)(i % (size_t)k)) * rng_uniform(&g));
    /* Mostly beyond every point, sometimes cutting through them. */
    for (int j = 0; j < k; j++) ref[j] = sgn(modes, j) * (rng_uniform(&g) < 0.8 ? 1.05 : 0.6);
    ck_assert_int_eq(hypervolume_compute(v, n, k, modes, ref, &hv), 0);
    double want = brute_ie(v, n, k, modes, ref);
    ck_assert_msg(fabs(hv - want) <= 1e-9 * fmax(1, fabs(want)),
                  "iteration %d (k=%d n=%zu): %.17g, inclusion-exclusion %.17g", iter, k, n, hv,
                  want);
  }
}
END_TEST

START_TEST(integer_grids_match_cell_count) {
  struct rng g;
  rng_seed(&g, 1127);
  for (int iter = 0; iter < 400; iter++) {
    int k = (int)rng_int_range(&g, 2, SPEC_MAX_OBJECTIVES + 1);
    int grid = k == 4 ? 6 : 9;
    size_t n = (size_t)rng_int_range(&g, 0, 40);
    enum spec_mode modes[SPEC_MAX_OBJECTIVES];
    double *v = malloc((n ? n : 1) * (size_t)k * sizeof *v), ref[SPEC_MAX_OBJECTIVES], hv = -1;
    ck_assert_ptr_nonnull(v);
    random_modes(&g, k, modes);
    for (size_t i = 0; i < n * (size_t)k; i++)
      v[i] =
          random_value(&g, sgn(modes, (int)(i % (size_t)k)) * (double)rng_int_range(&g, 0, grid));
    /* Duplicates and ties are common on a small grid; ref sometimes cuts. */
    for (int j = 0; j < k; j++)
      ref[j] = sgn(modes, j) * (double)rng_int_range(&g, grid - 2, grid + 1);
    ck_assert_int_eq(hypervolume_compute(v, n, k, modes, ref, &hv), 0);
    double want = brute_cells(v, n, k, modes, ref);
    ck_assert_msg(hv == want, "iteration %d (k=%d n=%zu): %.17g, cells %.17g", iter, k, n, hv,
                  want);
    free(v);
  }
}
END_TEST

START_TEST(series_is_each_prefix) {
  struct rng g;
  rng_seed(&g, 7);
  for (int iter = 0; iter < 300; iter++) {
    int k = (int)rng_int_range(&g, 1, SPEC_MAX_OBJECTIVES + 1);
    size_t n = (size_t)rng_int_range(&g, 0, 30);
    enum spec_mode modes[SPEC_MAX_OBJECTIVES];
    double *v = malloc((n ? n : 1) * (size_t)k * sizeof *v), ref[SPEC_MAX_OBJECTIVES];
    double *pre = malloc((n ? n : 1) * (size_t)k * sizeof *pre);
    double *hv = malloc((n ? n : 1) * sizeof *hv);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    ck_assert(v && pre && hv && order);
    random_modes(&g, k, modes);
    for (size_t i = 0; i < n * (size_t)k; i++)
      v[i] = random_value(&g, sgn(modes, (int)(i % (size_t)k)) * (double)rng_int_range(&g, 0, 6));
    for (int j = 0; j < k; j++) ref[j] = sgn(modes, j) * 6;
    /* A shuffled order. */
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n; i > 1; i--) {
      size_t r = (size_t)rng_int_range(&g, 0, (int64_t)i), t = order[i - 1];
      order[i - 1] = order[r];
      order[r] = t;
    }
    ck_assert_int_eq(hypervolume_series(v, order, n, k, modes, ref, hv), 0);
    for (size_t i = 0; i < n; i++) {
      double want;
      memcpy(pre + i * k, v + order[i] * k, (size_t)k * sizeof *v);
      ck_assert_int_eq(hypervolume_compute(pre, i + 1, k, modes, ref, &want), 0);
      ck_assert_msg(hv[i] == want, "iteration %d step %zu: %g, prefix %g", iter, i, hv[i], want);
    }
    free(v);
    free(pre);
    free(hv);
    free(order);
  }
}
END_TEST

/* Peeling: the points no remaining point dominates get the next rank. */
static void brute_ranks(const double *v, size_t n, int k, const enum spec_mode *modes, int *rank) {
  for (size_t i = 0; i < n; i++) rank[i] = finite_row(v + i * k, k) ? -1 : 0;
  for (int r = 1;; r++) {
    int any = 0;
    for (size_t i = 0; i < n; i++) {
      if (rank[i] != -1) continue;
      int dominated = 0;
      for (size_t o = 0; o < n && !dominated; o++) {
        if (o == i || (rank[o] != -1 && rank[o] != -2)) continue;
        int le = 1, lt = 0;
        for (int j = 0; j < k; j++) {
          double a = sgn(modes, j) * v[o * k + j], b = sgn(modes, j) * v[i * k + j];
          le &= a <= b;
          lt |= a < b;
        }
        dominated = le && lt;
      }
      if (!dominated) {
        rank[i] = -2; /* this round's front, still counted as remaining */
        any = 1;
      }
    }
    for (size_t i = 0; i < n; i++)
      if (rank[i] == -2) rank[i] = r;
    if (!any) return;
  }
}

START_TEST(ranks_match_peeling) {
  struct rng g;
  rng_seed(&g, 24);
  for (int iter = 0; iter < 1000; iter++) {
    int k = (int)rng_int_range(&g, 1, SPEC_MAX_OBJECTIVES + 1);
    size_t n = (size_t)rng_int_range(&g, 0, 50);
    enum spec_mode modes[SPEC_MAX_OBJECTIVES];
    double *v = malloc((n ? n : 1) * (size_t)k * sizeof *v);
    int *rank = malloc((n ? n : 1) * sizeof *rank), *want = malloc((n ? n : 1) * sizeof *want);
    ck_assert(v && rank && want);
    random_modes(&g, k, modes);
    for (size_t i = 0; i < n * (size_t)k; i++)
      v[i] = random_value(&g, (double)rng_int_range(&g, 0, 5));
    ck_assert_int_eq(hypervolume_ranks(v, n, k, modes, rank), 0);
    brute_ranks(v, n, k, modes, want);
    for (size_t i = 0; i < n; i++) {
      int one = -1;
      ck_assert_msg(rank[i] == want[i], "iteration %d point %zu: rank %d, peeling %d", iter, i,
                    rank[i], want[i]);
      ck_assert_int_eq(hypervolume_rank_of(v, n, k, modes, i, &one), 0);
      ck_assert_int_eq(one, want[i]);
    }
    free(v);
    free(rank);
    free(want);
  }
  const enum spec_mode mm[] = {SPEC_MODE_MIN};
  int r;
  ck_assert_int_eq(hypervolume_rank_of((const double[]){1}, 1, 1, mm, 1, &r), -EINVAL);
}
END_TEST

START_TEST(four_objectives_bounded) {
  size_t n = HYPERVOLUME_MAX_4D + 1;
  double *v = malloc(n * 4 * sizeof *v), hv, ref[] = {1e6, 1e6, 1, 1};
  ck_assert_ptr_nonnull(v);
  const enum spec_mode m[] = {SPEC_MODE_MIN, SPEC_MODE_MIN, SPEC_MODE_MIN, SPEC_MODE_MIN};
  for (size_t i = 0; i < n; i++) {
    v[i * 4] = (double)i;
    v[i * 4 + 1] = (double)(n - i);
    v[i * 4 + 2] = v[i * 4 + 3] = 0;
  }
  ck_assert_int_eq(hypervolume_compute(v, n, 4, m, ref, &hv), -E2BIG);
  ck_assert_int_eq(hypervolume_compute(v, n - 1, 4, m, ref, &hv), 0);
  /* hypervolume_min (the TPE searcher's, already minimised) has no cap. */
  double hv_min = -1;
  ck_assert_int_eq(hypervolume_min(v, n, 4, ref, &hv_min), 0);
  ck_assert(hv_min >= hv);
  ck_assert_int_eq(hypervolume_min(v, n, 0, ref, &hv_min), -EINVAL);
  /* The series of a 4-objective front that keeps growing: past its budget
   * (the sum of f^3 over the fronts it measures; these points make each
   * measure cheap, the budget counts it all the same) it stops; two
   * objectives have no budget (one strip a point). */
  n = 300;
  double *series = malloc(n * sizeof *series);
  size_t *order = malloc(n * sizeof *order);
  ck_assert(series && order);
  for (size_t i = 0; i < n; i++) order[i] = i;
  ck_assert_int_eq(hypervolume_series(v, order, n, 4, m, ref, series), -E2BIG);
  for (size_t i = 0; i < n; i++) v[i * 2] = (double)i, v[i * 2 + 1] = (double)(n - i);
  ck_assert_int_eq(hypervolume_series(v, order, n, 2, m, ref, series), 0);
  ck_assert_int_eq(hypervolume_compute(v, n, 2, m, ref, &hv), 0);
  ck_assert_double_eq(series[n - 1], hv);
  free(v);
  free(series);
  free(order);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hypervolume");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, hand_checked);
  tcase_add_test(tc, reference_point_rule);
  tcase_add_test(tc, random_sets_match_inclusion_exclusion);
  tcase_add_test(tc, integer_grids_match_cell_count);
  tcase_add_test(tc, series_is_each_prefix);
  tcase_add_test(tc, ranks_match_peeling);
  tcase_add_test(tc, four_objectives_bounded);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
