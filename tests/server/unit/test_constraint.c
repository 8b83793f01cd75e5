/* Unit tests of outcome constraints (server/core/constraint.c): each
 * constraint's violation, the total of a result, and the best trial and the
 * Pareto front with infeasible trials left out, against fronts and picks
 * worked out by hand. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "best.h"
#include "constraint.h"
#include "pareto.h"

/* gpu_mem_mb <= 2000 and acc >= 0.5. */
static struct experiment_spec two_constraints(void) {
  struct experiment_spec s;
  memset(&s, 0, sizeof s);
  s.nconstraints = 2;
  s.constraints[0] = (struct spec_constraint){"gpu_mem_mb", SPEC_CON_LE, 2000};
  s.constraints[1] = (struct spec_constraint){"acc", SPEC_CON_GE, 0.5};
  return s;
}

START_TEST(violations) {
  struct experiment_spec s = two_constraints();
  ck_assert(constraint_violation(&s.constraints[0], 2000) == 0);
  ck_assert(constraint_violation(&s.constraints[0], 1500) == 0);
  ck_assert(constraint_violation(&s.constraints[0], 2500) == 500);
  ck_assert(constraint_violation(&s.constraints[1], 0.5) == 0);
  ck_assert(constraint_violation(&s.constraints[1], 0.25) == 0.25);
  ck_assert(isinf(constraint_violation(&s.constraints[1], NAN)));
  ck_assert(isinf(constraint_violation(&s.constraints[0], INFINITY)));
  ck_assert(constraint_total(&s, (double[]){2100, 0.25}) == 100.25);
  ck_assert(constraint_total(&s, (double[]){100, 0.75}) == 0);
  ck_assert_int_eq(constraint_mode(&s.constraints[0]), SPEC_MODE_MIN);
  ck_assert_int_eq(constraint_mode(&s.constraints[1]), SPEC_MODE_MAX);

  cJSON *r = cJSON_Parse("{\"gpu_mem_mb\": 2600, \"acc\": 0.5, \"loss\": 1}");
  ck_assert(constraint_of_result(&s, r) == 600);
  cJSON_ReplaceItemInObject(r, "acc", cJSON_CreateNull()); /* null: violated */
  ck_assert(isinf(constraint_of_result(&s, r)));
  cJSON_DeleteItemFromObject(r, "acc"); /* absent: violated */
  ck_assert(isinf(constraint_of_result(&s, r)));
  ck_assert(isnan(constraint_of_result(&s, NULL))); /* no result: unknown */
  struct experiment_spec none;
  memset(&none, 0, sizeof none);
  ck_assert(constraint_of_result(&none, r) == 0);
  cJSON_Delete(r);
}
END_TEST

/* Five trials on loss (min): the best is infeasible, so the best feasible
 * one wins; unknown feasibility (NaN) is left out too. */
START_TEST(best_skips_infeasible) {
  double v[5][2] = {{0.9, 0.8}, {0.1, 0.1}, {0.5, 0.4}, {0.3, 0.2}, {0.2, 0.2}};
  double viol[5] = {0, 12.5, 0, INFINITY, NAN};
  struct best_series ser[5];
  for (int i = 0; i < 5; i++) ser[i] = (struct best_series){10 + i, v[i], 2, NULL};
  size_t idx;
  double score;
  ck_assert_int_eq(best_pick(ser, 5, BEST_SCOPE_LAST, SPEC_MODE_MIN, &idx, &score), 0);
  ck_assert_int_eq(ser[idx].trial_id, 11); /* unconstrained: the infeasible one */
  constraint_drop_series(ser, 5, viol);
  ck_assert_int_eq(best_pick(ser, 5, BEST_SCOPE_LAST, SPEC_MODE_MIN, &idx, &score), 0);
  ck_assert_int_eq(ser[idx].trial_id, 12);
  ck_assert(score == 0.4);
  ck_assert_int_eq(ser[1].trial_id, 11); /* ids kept */
  /* None feasible: no best. */
  double all_bad[5] = {1, 1, 1, 1, 1};
  constraint_drop_series(ser, 5, all_bad);
  ck_assert_int_eq(best_pick(ser, 5, BEST_SCOPE_LAST, SPEC_MODE_MIN, &idx, &score), -ENOENT);
}
END_TEST

/* Two objectives (min, max): point 1 dominates every other one but is
 * infeasible; 3 dominates 2; no feasible point dominates 0: the front is
 * {0, 3}. */
START_TEST(pareto_skips_infeasible) {
  enum spec_mode modes[2] = {SPEC_MODE_MIN, SPEC_MODE_MAX};
  double pts[4 * 2] = {1, 5, 0.5, 9, 3, 6, 2, 7};
  double viol[4] = {0, 3, 0, 0};
  unsigned char on[4];
  size_t nf;
  ck_assert_int_eq(pareto_front(pts, 4, 2, modes, on, &nf), 0);
  ck_assert_int_eq(nf, 1); /* unconstrained: point 1 alone */
  ck_assert_int_eq(on[1], 1);
  constraint_drop_points(pts, 4, 2, viol);
  ck_assert(isnan(pts[2]) && isnan(pts[3]));
  ck_assert(pts[0] == 1 && pts[7] == 7);
  ck_assert_int_eq(pareto_front(pts, 4, 2, modes, on, &nf), 0);
  ck_assert_int_eq(nf, 2);
  ck_assert_int_eq(on[0], 1);
  ck_assert_int_eq(on[1], 0);
  ck_assert_int_eq(on[2], 0);
  ck_assert_int_eq(on[3], 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("constraint");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, violations);
  tcase_add_test(tc, best_skips_infeasible);
  tcase_add_test(tc, pareto_skips_infeasible);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
