/* Unit tests of pareto (server/core/pareto.c): hand-checked fronts, and
 * random sets (small integer grids, so ties and duplicates are common; NaN
 * and infinities) against a brute-force definition written independently:
 * a point is on the front when it is all finite and no other all-finite
 * point is <= on every objective (after turning max into min) and < on one. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pareto.h"
#include "rng.h"

static int brute_on_front(const double *v, size_t n, int k, const enum spec_mode *modes, size_t i) {
  for (int j = 0; j < k; j++)
    if (isnan(v[i * k + j]) || isinf(v[i * k + j])) return 0;
  for (size_t o = 0; o < n; o++) {
    int finite = 1, all_le = 1, one_lt = 0;
    for (int j = 0; j < k; j++) finite &= !isnan(v[o * k + j]) && !isinf(v[o * k + j]);
    if (!finite || o == i) continue;
    for (int j = 0; j < k; j++) {
      double s = modes[j] == SPEC_MODE_MAX ? -1 : 1;
      double a = s * v[o * k + j], b = s * v[i * k + j];
      if (a > b) all_le = 0;
      if (a < b) one_lt = 1;
    }
    if (all_le && one_lt) return 0;
  }
  return 1;
}

START_TEST(hand_checked) {
  /* (loss min, latency min): (1,5) (2,2) (3,1) on it; (3,3) dominated by
   * (2,2); (2,2) twice: both; NaN out. */
  const double v[] = {1, 5, 2, 2, 3, 3, 3, 1, 2, 2, NAN, 0};
  const enum spec_mode m[] = {SPEC_MODE_MIN, SPEC_MODE_MIN};
  unsigned char on[6];
  size_t nf = 99;
  ck_assert_int_eq(pareto_front(v, 6, 2, m, on, &nf), 0);
  const unsigned char want[] = {1, 1, 0, 1, 1, 0};
  ck_assert_int_eq(nf, 4);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(on[i], want[i]);
  /* Maximising the second flips it: (1,5) dominates all but (3,3), (3,1)'s
   * loss ties (3,3) whose latency is larger. */
  const enum spec_mode m2[] = {SPEC_MODE_MIN, SPEC_MODE_MAX};
  ck_assert_int_eq(pareto_front(v, 6, 2, m2, on, &nf), 0);
  const unsigned char want2[] = {1, 0, 0, 0, 0, 0};
  ck_assert_int_eq(nf, 1);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(on[i], want2[i]);
  /* Nothing, and bad k. */
  ck_assert_int_eq(pareto_front(v, 0, 2, m, on, &nf), 0);
  ck_assert_int_eq(nf, 0);
  ck_assert_int_eq(pareto_front(v, 6, 0, m, on, &nf), -EINVAL);
  ck_assert_int_eq(pareto_front(v, 6, SPEC_MAX_OBJECTIVES + 1, m, on, &nf), -EINVAL);
}
END_TEST

START_TEST(random_sets_match_brute_force) {
  struct rng g;
  rng_seed(&g, 20261127);
  for (int iter = 0; iter < 3000; iter++) {
    int k = (int)rng_int_range(&g, 1, SPEC_MAX_OBJECTIVES + 1);
    size_t n = (size_t)rng_int_range(&g, 0, 60);
    int grid = (int)rng_int_range(&g, 2, 8); /* few distinct values: ties */
    enum spec_mode modes[SPEC_MAX_OBJECTIVES];
    double *v = malloc((n ? n : 1) * (size_t)k * sizeof *v);
    unsigned char *on = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(on);
    for (int j = 0; j < k; j++) modes[j] = rng_uniform(&g) < 0.5 ? SPEC_MODE_MIN : SPEC_MODE_MAX;
    for (size_t i = 0; i < n * (size_t)k; i++) {
      double u = rng_uniform(&g);
      v[i] = u < 0.04   ? NAN
             : u < 0.06 ? INFINITY
             : u < 0.07 ? -INFINITY
                        : (double)rng_int_range(&g, 0, grid);
    }
    /* Exact duplicates of earlier points. */
    for (size_t i = 1; i < n; i++)
      if (rng_uniform(&g) < 0.15)
        memcpy(v + i * k, v + (size_t)rng_int_range(&g, 0, (int64_t)i) * k, (size_t)k * sizeof *v);
    size_t nf = 0, want_nf = 0;
    ck_assert_int_eq(pareto_front(v, n, k, modes, on, &nf), 0);
    for (size_t i = 0; i < n; i++) {
      int want = brute_on_front(v, n, k, modes, i);
      want_nf += (size_t)want;
      ck_assert_msg(on[i] == want, "iteration %d: point %zu on_front %d, brute force %d", iter, i,
                    on[i], want);
    }
    ck_assert_int_eq(nf, want_nf);
    free(v);
    free(on);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("pareto");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, hand_checked);
  tcase_add_test(tc, random_sets_match_brute_force);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
