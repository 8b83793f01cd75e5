/* Unit tests of sched: fifo decisions, dispatch to asha, results without
 * the metric, and the state JSON shape of docs/protocol.md#experiment-json. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "validate.h"

static struct sched *from_config(const char *json, uint64_t seed) {
  cJSON *c = cJSON_Parse(json);
  struct experiment_spec spec;
  struct validate_error err;
  struct sched *s = NULL;
  ck_assert_ptr_nonnull(c);
  ck_assert_msg(validate_experiment(c, &spec, &err) == 0, "%s: %s", err.path, err.message);
  ck_assert_int_eq(sched_create(&spec.sched, spec.mode, seed, &s), 0);
  validate_spec_free(&spec);
  cJSON_Delete(c);
  return s;
}

#define TRAIN "\"trainable\": {\"type\": \"builtin\", \"model\": \"mlp\", \"dataset\": \"mnist\"}"

START_TEST(fifo_runs_to_the_end) {
  struct sched *s = from_config("{" TRAIN "}", 0);
  struct sched_outcome o;
  double v = 0.1, nan = NAN;
  ck_assert_int_eq(sched_type(s), SPEC_SCHED_FIFO);
  ck_assert_int_eq(sched_bracket_for(s, 5), 0);
  ck_assert_int_eq(sched_add_trial(s, 1, 0, NULL), 0);
  for (int t = 1; t <= 1000; t += 100) {
    ck_assert_int_eq(sched_on_result(s, 1, t, &v, &o), 0);
    ck_assert_int_eq(o.action, SCHED_CONTINUE);
    ck_assert_int_eq(o.asha.recorded, 0);
  }
  /* fifo does not look at the metric, even NaN or missing. */
  ck_assert_int_eq(sched_on_result(s, 1, 5, &nan, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(sched_on_result(s, 1, 5, NULL, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(sched_on_trial_end(s, 1, 1, 5, &v, &o), 0);
  ck_assert_int_eq(o.asha.recorded, 0);
  ck_assert_int_eq(sched_restore_record(s, 1, 0, 1, 1, 0), -EINVAL);
  ck_assert_int_eq(sched_on_result(s, 1, NAN, &v, &o), -EINVAL);
  cJSON *st;
  ck_assert_int_eq(sched_state_json(s, &st), 0);
  char *j = cJSON_PrintUnformatted(st);
  ck_assert_str_eq(j, "{\"type\":\"fifo\",\"time_attr\":\"training_iteration\",\"max_t\":null}");
  free(j);
  cJSON_Delete(st);
  sched_free(s);
}
END_TEST

START_TEST(fifo_stops_at_max_t) {
  struct sched *s =
      from_config("{\"scheduler\": {\"type\": \"fifo\", \"max_t\": 3}, " TRAIN "}", 0);
  struct sched_outcome o;
  double v = 1;
  sched_add_trial(s, 1, 0, NULL);
  ck_assert_int_eq(sched_on_result(s, 1, 2, &v, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(sched_on_result(s, 1, 3, &v, &o), 0);
  ck_assert_int_eq(o.action, SCHED_STOP);
  ck_assert_int_eq(o.asha.reason, ASHA_REASON_MAX_T);
  ck_assert_int_eq(o.stopped_early, 0);
  ck_assert_str_eq(o.reason, "reached max_t 3 (training_iteration 3)");
  ck_assert_ptr_null(o.record);
  sched_free(s);
}
END_TEST

START_TEST(asha_through_sched) {
  struct sched *s = from_config(
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"asha\", \"max_t\": 10,"
      " \"grace_period\": 1, \"reduction_factor\": 2}, " TRAIN "}",
      3);
  struct sched_outcome o;
  double two = 2, four = 4, one = 1;
  ck_assert_int_eq(sched_type(s), SPEC_SCHED_ASHA);
  for (int id = 1; id <= 3; id++) ck_assert_int_eq(sched_add_trial(s, id, id - 1, NULL), 0);
  ck_assert_int_eq(sched_on_result(s, 1, 1, &two, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  /* Without the metric: continue, nothing recorded (Ray skips it). */
  ck_assert_int_eq(sched_on_result(s, 2, 1, NULL, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(o.asha.recorded, 0);
  ck_assert_int_eq(sched_on_result(s, 99, 1, NULL, &o), -ENOENT);
  ck_assert_int_eq(sched_on_result(s, 2, 1, &four, &o), 0);
  ck_assert_int_eq(o.asha.recorded, 1);
  ck_assert_int_eq(sched_on_result(s, 3, 1, &one, &o), 0);
  ck_assert_int_eq(o.action, SCHED_STOP);
  ck_assert_int_eq(o.stopped_early, 1);
  /* Visible decisions: the stop says why, in the metric's sign. */
  ck_assert_str_eq(o.reason, "stopped at t=1: 1 worse than cutoff 3 of 3 trials at rung 1");
  ck_assert_int_eq(sched_on_trial_end(s, 3, 1, 1, &one, &o), 0);
  ck_assert_int_eq(sched_on_trial_end(s, 2, 0, 0, NULL, &o), 0);
  ck_assert_int_eq(o.asha.recorded, 0);
  ck_assert_int_eq(sched_on_trial_end(s, 2, 0, 0, NULL, NULL), -ENOENT);
  ck_assert_int_eq(sched_restore_record(s, 50, 0, 2, 9.0, 0), 0);

  cJSON *st;
  ck_assert_int_eq(sched_state_json(s, &st), 0);
  char *j = cJSON_PrintUnformatted(st);
  ck_assert_str_eq(
      j,
      "{\"type\":\"asha\",\"time_attr\":\"training_iteration\",\"max_t\":10,"
      "\"grace_period\":1,\"reduction_factor\":2,\"brackets\":[{\"index\":0,\"stopped\":1,"
      "\"milestones\":[{\"t\":1,\"recorded\":3,\"cutoff\":2},{\"t\":2,\"recorded\":1,\"cutoff\":9},"
      "{\"t\":4,\"recorded\":0,\"cutoff\":null},{\"t\":8,\"recorded\":0,\"cutoff\":null}]}]}");
  free(j);
  cJSON_Delete(st);
  sched_free(s);
}
END_TEST

/* Bounded memory: a scheduler's memory follows its spec and its records, not the
 * caps. A fixed 16-bracket x 64-milestone table made every ASHA experiment
 * cost about 41 KB before any result; the default spec needs a few hundred
 * bytes, and the state grows with the values recorded. */
START_TEST(memory_follows_spec_and_records) {
  static const char *const defaults[] = {
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"asha\"}, " TRAIN "}",
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"asha\","
      " \"promotion\": true}, " TRAIN "}",
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": "
      "\"median_stopping\"}, " TRAIN "}",
      "{" TRAIN "}",
  };
  for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
    struct sched *s = from_config(defaults[i], 1);
    size_t b = sched_mem_bytes(s);
    ck_assert_msg(b > 0 && b < 4096, "%s: %zu bytes", defaults[i], b);
    sched_free(s);
  }
  ck_assert_uint_eq(sched_mem_bytes(NULL), 0);

  /* Default asha (max_t 100, grace 1, rf 4): 2000 trials each record at
   * t=1; the state grows with them (a double per value, a slot and an
   * id-map entry per trial), by doubling, not by much more. */
  struct sched *s = from_config(defaults[0], 1);
  struct sched_outcome o;
  size_t fresh = sched_mem_bytes(s), prev = fresh;
  int grew = 0;
  for (int id = 1; id <= 2000; id++) {
    double v = (double)(id % 97);
    ck_assert_int_eq(sched_add_trial(s, id, id - 1, NULL), 0);
    ck_assert_int_eq(sched_on_result(s, id, 1, &v, &o), 0);
    ck_assert_int_eq(o.asha.recorded, 1);
    sched_outcome_clear(&o);
    size_t now = sched_mem_bytes(s);
    ck_assert_uint_ge(now, prev);
    grew += now > prev;
    prev = now;
  }
  ck_assert_uint_ge(prev, fresh + 2000 * sizeof(double));
  ck_assert_msg(prev < fresh + 2000 * 128, "%zu bytes for 2000 trials", prev);
  ck_assert_int_le(grew, 40); /* amortized: a few reallocations, not one per record */
  sched_free(s);
}
END_TEST

/* mode min: the sentence shows the metric as reported, not asha's flipped
 * values. */
START_TEST(asha_reason_min_mode) {
  struct sched *s = from_config(
      "{\"metric\": \"loss\", \"mode\": \"min\", \"scheduler\": {\"type\": \"asha\", \"max_t\": 10,"
      " \"grace_period\": 4, \"reduction_factor\": 2}, " TRAIN "}",
      3);
  struct sched_outcome o;
  double v[3] = {0.39, 0.30, 0.41};
  for (int id = 1; id <= 3; id++) ck_assert_int_eq(sched_add_trial(s, id, id - 1, NULL), 0);
  for (int id = 1; id <= 3; id++) ck_assert_int_eq(sched_on_result(s, id, 4, &v[id - 1], &o), 0);
  ck_assert_int_eq(o.action, SCHED_STOP);
  ck_assert_str_eq(o.reason, "stopped at t=4: 0.41 worse than cutoff 0.345 of 3 trials at rung 4");
  sched_outcome_clear(&o);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  struct sched_choice c;
  ck_assert_int_eq(sched_choose(s, 1, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, SCHED_CHOOSE_NEW);
  ck_assert_int_eq(sched_choose(s, 0, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, SCHED_CHOOSE_WAIT);
  sched_choice_clear(&c);
  ck_assert_int_eq(sched_restore(s, 1, NULL), -EINVAL);
  sched_free(s);
}
END_TEST

/* The "of N trials" of a cutoff stop counts every record at the rung, a
 * null metric's included (it is recorded, never cut). */
START_TEST(asha_reason_counts_nonfinite_records) {
  struct sched *s = from_config(
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"asha\", \"max_t\": 10,"
      " \"grace_period\": 4, \"reduction_factor\": 2}, " TRAIN "}",
      3);
  struct sched_outcome o;
  double v[4] = {0.5, NAN, 0.6, 0.1};
  for (int id = 1; id <= 4; id++) ck_assert_int_eq(sched_add_trial(s, id, id - 1, NULL), 0);
  for (int id = 1; id <= 4; id++) {
    ck_assert_int_eq(sched_on_result(s, id, 4, &v[id - 1], &o), 0);
    if (id < 4) sched_outcome_clear(&o);
  }
  ck_assert_int_eq(o.action, SCHED_STOP);
  ck_assert_str_eq(o.reason, "stopped at t=4: 0.1 worse than cutoff 0.55 of 4 trials at rung 4");
  sched_outcome_clear(&o);
  sched_free(s);
}
END_TEST

/* Only fifo's plan does not depend on max_t: it alone may raise it. */
START_TEST(raise_max_t_fifo_only) {
  static const char *const others[] = {
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"asha\"}, " TRAIN "}",
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"asha\","
      " \"promotion\": true}, " TRAIN "}",
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"hyperband\"}, " TRAIN
      "}",
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": "
      "\"median_stopping\"}, " TRAIN "}",
  };
  struct sched *s =
      from_config("{\"scheduler\": {\"type\": \"fifo\", \"max_t\": 5}, " TRAIN "}", 0);
  struct sched_outcome o;
  double v = 1;
  ck_assert_int_eq(sched_raise_max_t(s, 4), -EINVAL);
  ck_assert_int_eq(sched_raise_max_t(s, 8), 0);
  ck_assert_int_eq(sched_add_trial(s, 1, 0, NULL), 0);
  ck_assert_int_eq(sched_on_result(s, 1, 5, &v, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(sched_on_result(s, 1, 8, &v, &o), 0);
  ck_assert_int_eq(o.action, SCHED_STOP);
  sched_outcome_clear(&o);
  sched_free(s);
  for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
    s = from_config(others[i], 1);
    ck_assert_int_eq(sched_raise_max_t(s, 1000), -EOPNOTSUPP);
    sched_free(s);
  }
}
END_TEST

START_TEST(create_errors) {
  struct sched_params p;
  struct sched *s = (struct sched *)1;
  memset(&p, 0, sizeof p);
  p.type = (enum spec_sched_type)7;
  ck_assert_int_eq(sched_create(&p, SPEC_MODE_MIN, 0, &s), -EINVAL);
  ck_assert_ptr_null(s);
  p.type = SPEC_SCHED_ASHA; /* zero max_t: invalid */
  ck_assert_int_eq(sched_create(&p, SPEC_MODE_MIN, 0, &s), -EINVAL);
  ck_assert_ptr_null(s);
  sched_free(NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sched");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, fifo_runs_to_the_end);
  tcase_add_test(tc, fifo_stops_at_max_t);
  tcase_add_test(tc, asha_through_sched);
  tcase_add_test(tc, asha_reason_min_mode);
  tcase_add_test(tc, asha_reason_counts_nonfinite_records);
  tcase_add_test(tc, raise_max_t_fifo_only);
  tcase_add_test(tc, create_errors);
  tcase_add_test(tc, memory_follows_spec_and_records);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
