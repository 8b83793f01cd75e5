/* Unit tests of stoprule (the "stop" dict) and of the validation of "stop"
 * and "time_budget_s" (docs/protocol.md#stop-rules-and-time-budget). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stoprule.h"
#include "validate.h"

#define TRAIN "\"trainable\": {\"type\": \"builtin\", \"model\": \"mlp\", \"dataset\": \"mnist\"}"

static int reached(const char *stop, int has_metric, const char *metric, enum spec_mode mode,
                   const char *result, char *why) {
  cJSON *s = cJSON_Parse(stop), *r = cJSON_Parse(result);
  ck_assert_ptr_nonnull(s);
  ck_assert_ptr_nonnull(r);
  why[0] = 0;
  int hit = stoprule_reached(s, has_metric, metric, mode, r, why, 256);
  cJSON_Delete(s);
  cJSON_Delete(r);
  return hit;
}

START_TEST(metric_by_mode_others_ge) {
  char why[256];
  const char *stop = "{\"training_iteration\": 20, \"accuracy\": 0.95}";
  ck_assert_int_eq(reached(stop, 1, "accuracy", SPEC_MODE_MAX,
                           "{\"training_iteration\": 3, \"accuracy\": 0.5}", why),
                   0);
  ck_assert_str_eq(why, "");
  ck_assert_int_eq(reached(stop, 1, "accuracy", SPEC_MODE_MAX,
                           "{\"training_iteration\": 3, \"accuracy\": 0.951}", why),
                   1);
  ck_assert_str_eq(why, "stop rule: accuracy 0.951 >= 0.95");
  ck_assert_int_eq(reached(stop, 1, "accuracy", SPEC_MODE_MAX,
                           "{\"training_iteration\": 20, \"accuracy\": 0.1}", why),
                   1);
  ck_assert_str_eq(why, "stop rule: training_iteration 20 >= 20");
  /* min mode: the metric is reached from above. */
  ck_assert_int_eq(reached("{\"loss\": 0.1}", 1, "loss", SPEC_MODE_MIN, "{\"loss\": 0.5}", why), 0);
  ck_assert_int_eq(reached("{\"loss\": 0.1}", 1, "loss", SPEC_MODE_MIN, "{\"loss\": 0.09}", why),
                   1);
  ck_assert_str_eq(why, "stop rule: loss 0.09 <= 0.1");
  /* Not the metric: >= whatever the mode. */
  ck_assert_int_eq(reached("{\"loss\": 0.1}", 1, "acc", SPEC_MODE_MIN, "{\"loss\": 0.09}", why), 0);
  ck_assert_int_eq(reached("{\"loss\": 0.1}", 0, NULL, SPEC_MODE_MIN, "{\"loss\": 0.2}", why), 1);
  /* Missing keys and nulls reach nothing; booleans are 0/1. */
  ck_assert_int_eq(reached("{\"a\": 1}", 0, NULL, SPEC_MODE_MAX, "{\"b\": 5, \"a\": null}", why),
                   0);
  ck_assert_int_eq(reached("{\"done\": 1}", 0, NULL, SPEC_MODE_MAX, "{\"done\": true}", why), 1);
  ck_assert_int_eq(reached("{\"done\": 1}", 0, NULL, SPEC_MODE_MAX, "{\"done\": false}", why), 0);
  ck_assert_int_eq(stoprule_reached(NULL, 0, NULL, SPEC_MODE_MAX, NULL, why, sizeof why), 0);
}
END_TEST

static int check(const char *json, struct experiment_spec *spec, struct validate_error *err) {
  cJSON *c = cJSON_Parse(json);
  ck_assert_ptr_nonnull(c);
  memset(err, 0, sizeof *err);
  int rc = validate_experiment(c, spec, err);
  cJSON_Delete(c);
  return rc;
}

START_TEST(validation) {
  struct experiment_spec s;
  struct validate_error err;
  ck_assert_int_eq(check("{\"stop\": {\"training_iteration\": 20}, \"time_budget_s\": 2.5, " TRAIN
                         "}",
                         &s, &err),
                   0);
  ck_assert_ptr_nonnull(s.stop);
  ck_assert_double_eq(s.time_budget_s, 2.5);
  validate_spec_free(&s);
  ck_assert_ptr_null(s.stop);
  ck_assert_int_eq(check("{" TRAIN "}", &s, &err), 0);
  ck_assert_ptr_null(s.stop);
  ck_assert_double_eq(s.time_budget_s, 0);
  validate_spec_free(&s);

  ck_assert_int_eq(check("{\"stop\": 3, " TRAIN "}", &s, &err), -EINVAL);
  ck_assert_str_eq(err.path, "stop");
  ck_assert_int_eq(check("{\"stop\": {}, " TRAIN "}", &s, &err), -EINVAL);
  ck_assert_str_eq(err.path, "stop");
  ck_assert_int_eq(check("{\"stop\": {\"acc\": \"high\"}, " TRAIN "}", &s, &err), -EINVAL);
  ck_assert_str_eq(err.path, "stop.acc");
  ck_assert_str_eq(err.message, "must be a finite number (the threshold)");
  ck_assert_int_eq(check("{\"time_budget_s\": 0, " TRAIN "}", &s, &err), -EINVAL);
  ck_assert_str_eq(err.path, "time_budget_s");
  ck_assert_int_eq(check("{\"time_budget_s\": \"1h\", " TRAIN "}", &s, &err), -EINVAL);
  ck_assert_str_eq(err.path, "time_budget_s");
}
END_TEST

int main(void) {
  Suite *s = suite_create("stoprule");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, metric_by_mode_others_ge);
  tcase_add_test(tc, validation);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
