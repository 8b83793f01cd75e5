/* Unit tests of best: Ray's scopes, NaN/inf handling, ties, and the
 * 10,000 trials x 10 results speed bound. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "best.h"
#include "rng.h"

START_TEST(scope_parse) {
  enum best_scope s;
  ck_assert_int_eq(best_scope_parse(NULL, &s), 0);
  ck_assert_int_eq(s, BEST_SCOPE_LAST);
  ck_assert_int_eq(best_scope_parse("", &s), 0);
  ck_assert_int_eq(s, BEST_SCOPE_LAST);
  ck_assert_int_eq(best_scope_parse("avg", &s), 0);
  ck_assert_int_eq(s, BEST_SCOPE_AVG);
  ck_assert_int_eq(best_scope_parse("last-5-avg", &s), 0);
  ck_assert_int_eq(s, BEST_SCOPE_LAST_5_AVG);
  ck_assert_int_eq(best_scope_parse("last-10-avg", &s), 0);
  ck_assert_int_eq(s, BEST_SCOPE_LAST_10_AVG);
  ck_assert_int_eq(best_scope_parse("all", &s), 0);
  ck_assert_int_eq(s, BEST_SCOPE_ALL);
  ck_assert_int_eq(best_scope_parse("last", &s), 0);
  ck_assert_int_eq(s, BEST_SCOPE_LAST);
  ck_assert_int_eq(best_scope_parse("best", &s), -EINVAL);
  ck_assert_int_eq(best_scope_parse("LAST", &s), -EINVAL);
  ck_assert_str_eq(best_scope_name(BEST_SCOPE_LAST_10_AVG), "last-10-avg");
}
END_TEST

START_TEST(scores) {
  double v[12] = {12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  double s;
  ck_assert_int_eq(best_score(v, 12, BEST_SCOPE_LAST, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 1);
  ck_assert_int_eq(best_score(v, 12, BEST_SCOPE_AVG, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 6.5);
  ck_assert_int_eq(best_score(v, 12, BEST_SCOPE_LAST_5_AVG, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 3);
  ck_assert_int_eq(best_score(v, 12, BEST_SCOPE_LAST_10_AVG, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 5.5);
  ck_assert_int_eq(best_score(v, 3, BEST_SCOPE_LAST_5_AVG, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 11); /* fewer than 5: all of them */
  ck_assert_int_eq(best_score(v, 12, BEST_SCOPE_ALL, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 1);
  ck_assert_int_eq(best_score(v, 12, BEST_SCOPE_ALL, SPEC_MODE_MAX, &s), 0);
  ck_assert(s == 12);
  ck_assert_int_eq(best_score(v, 0, BEST_SCOPE_LAST, SPEC_MODE_MIN, &s), -ENOENT);
}
END_TEST

START_TEST(nonfinite) {
  double v[4] = {1, NAN, 3, INFINITY};
  double w[3] = {NAN, NAN, NAN};
  double s;
  /* The last value is inf: no score for last, avg, last-5-avg. */
  ck_assert_int_eq(best_score(v, 4, BEST_SCOPE_LAST, SPEC_MODE_MAX, &s), -ENOENT);
  ck_assert_int_eq(best_score(v, 4, BEST_SCOPE_AVG, SPEC_MODE_MAX, &s), -ENOENT);
  ck_assert_int_eq(best_score(v, 3, BEST_SCOPE_LAST_5_AVG, SPEC_MODE_MAX, &s), -ENOENT);
  /* all: the best finite value ever. */
  ck_assert_int_eq(best_score(v, 4, BEST_SCOPE_ALL, SPEC_MODE_MAX, &s), 0);
  ck_assert(s == 3);
  ck_assert_int_eq(best_score(v, 4, BEST_SCOPE_ALL, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 1);
  ck_assert_int_eq(best_score(w, 3, BEST_SCOPE_ALL, SPEC_MODE_MIN, &s), -ENOENT);
  ck_assert_int_eq(best_score(v, 3, BEST_SCOPE_LAST, SPEC_MODE_MIN, &s), 0);
  ck_assert(s == 3);
}
END_TEST

START_TEST(pick_ties_and_skips) {
  double a[] = {0.5, 0.3}, b[] = {0.9, NAN}, c[] = {0.1, 0.3}, d[] = {0.7};
  struct best_series t[] = {
      {10, a, 2, NULL}, {11, b, 2, NULL}, {12, c, 2, NULL}, {13, NULL, 0, NULL}, {14, d, 1, NULL}};
  size_t at;
  double s;
  /* min/last: a and c tie at 0.3; the earlier (a) wins; b is skipped. */
  ck_assert_int_eq(best_pick(t, 5, BEST_SCOPE_LAST, SPEC_MODE_MIN, &at, &s), 0);
  ck_assert_int_eq(at, 0);
  ck_assert(s == 0.3);
  ck_assert_int_eq(best_pick(t, 5, BEST_SCOPE_LAST, SPEC_MODE_MAX, &at, &s), 0);
  ck_assert_int_eq(at, 4);
  ck_assert(s == 0.7);
  ck_assert_int_eq(best_pick(t, 5, BEST_SCOPE_AVG, SPEC_MODE_MIN, &at, &s), 0);
  ck_assert_int_eq(at, 2);
  ck_assert(s == 0.2);
  ck_assert_int_eq(best_pick(t, 5, BEST_SCOPE_ALL, SPEC_MODE_MAX, &at, &s), 0);
  ck_assert_int_eq(at, 1); /* b's 0.9 counts under all */
  ck_assert_int_eq(best_pick(t + 3, 1, BEST_SCOPE_LAST, SPEC_MODE_MIN, &at, &s), -ENOENT);
  ck_assert_int_eq(best_pick(t, 0, BEST_SCOPE_LAST, SPEC_MODE_MIN, &at, &s), -ENOENT);
  /* The later of two tied trials never wins, whatever the order of ids. */
  struct best_series u[] = {{20, c, 2, NULL}, {5, a, 2, NULL}};
  ck_assert_int_eq(best_pick(u, 2, BEST_SCOPE_LAST, SPEC_MODE_MIN, &at, &s), 0);
  ck_assert_int_eq(at, 0);
}
END_TEST

START_TEST(ten_thousand_trials_fast) {
  const size_t T = 10000, R = 10;
  double *vals = malloc(sizeof *vals * T * R);
  struct best_series *t = malloc(sizeof *t * T);
  struct rng g;
  struct timespec t0, t1;
  size_t at;
  double s, ms = 0;
  rng_seed(&g, 1);
  for (size_t i = 0; i < T * R; i++) vals[i] = rng_uniform(&g);
  vals[1234 * R + R - 1] = -1; /* the planted best under "last" */
  for (size_t i = 0; i < T; i++) t[i] = (struct best_series){(int64_t)i, vals + i * R, R, NULL};
  for (int scope = BEST_SCOPE_LAST; scope <= BEST_SCOPE_ALL; scope++) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(best_pick(t, T, (enum best_scope)scope, SPEC_MODE_MIN, &at, &s), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms += (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (scope == BEST_SCOPE_LAST || scope == BEST_SCOPE_ALL) ck_assert_int_eq(at, 1234);
  }
  /* All five scopes together, even under ASan, stay far below 50 ms. */
  ck_assert_msg(ms < 50, "%.2f ms", ms);
  free(vals);
  free(t);
}
END_TEST

/* A summary (what an ended trial keeps, ARCHITECTURE.md#bounded-memory)
 * answers every scope and mode exactly as the values it was made from,
 * NaN and inf included, and best_pick mixes both kinds. */
START_TEST(summary_matches_values) {
  struct rng g;
  rng_seed(&g, 7);
  for (int round = 0; round < 2000; round++) {
    double v[24], sum[BEST_SUM_N];
    size_t n = (size_t)(rng_uniform(&g) * 24);
    for (size_t i = 0; i < n; i++) {
      double u = rng_uniform(&g);
      v[i] = u < 0.05 ? NAN : u < 0.08 ? INFINITY : u < 0.1 ? -INFINITY : rng_uniform(&g) * 10 - 5;
    }
    best_summarize(v, n, sum);
    for (int scope = BEST_SCOPE_LAST; scope <= BEST_SCOPE_ALL; scope++)
      for (int mode = SPEC_MODE_MIN; mode <= SPEC_MODE_MAX; mode++) {
        double a = 0, b = 0;
        int ra = best_score(v, n, (enum best_scope)scope, (enum spec_mode)mode, &a);
        int rb = best_score_summary(sum, (enum best_scope)scope, (enum spec_mode)mode, &b);
        ck_assert_int_eq(ra, rb);
        if (!ra) ck_assert(a == b);
      }
  }
  /* Mixed: trial 1 (a summary) beats trial 0 (values); a tie keeps the earlier. */
  double v0[] = {3, 2}, v1[] = {5, 1}, s1[BEST_SUM_N];
  best_summarize(v1, 2, s1);
  struct best_series t[3] = {{10, v0, 2, NULL}, {11, NULL, 0, s1}, {12, v1, 2, NULL}};
  size_t at;
  double sc;
  ck_assert_int_eq(best_pick(t, 3, BEST_SCOPE_LAST, SPEC_MODE_MIN, &at, &sc), 0);
  ck_assert_int_eq(at, 1);
  ck_assert(sc == 1);
  ck_assert_int_eq(best_pick(t, 3, BEST_SCOPE_ALL, SPEC_MODE_MAX, &at, &sc), 0);
  ck_assert_int_eq(at, 1);
  ck_assert(sc == 5);
}
END_TEST

int main(void) {
  Suite *s = suite_create("best");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, scope_parse);
  tcase_add_test(tc, scores);
  tcase_add_test(tc, nonfinite);
  tcase_add_test(tc, pick_ties_and_skips);
  tcase_add_test(tc, ten_thousand_trials_fast);
  tcase_add_test(tc, summary_matches_values);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
