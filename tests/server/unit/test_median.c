/* Unit tests of server/core/median.c: Ray's MedianStoppingRule decisions
 * (vectors from gen_median_vectors.py), restore from records, pausing
 * (hard_stop false) and the checks of the scheduler object. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "median.h"
#include "scheduler.h"
#include "validate.h"
#include "vectors.h"

static cJSON *parse(const char *s) {
  cJSON *j = cJSON_Parse(s);
  ck_assert_msg(j != NULL, "bad JSON in test: %s", s);
  return j;
}

static struct median *rebuild(const struct median_params *p, enum spec_mode mode,
                              const cJSON *recs) {
  struct median *m;
  const cJSON *r;
  ck_assert_int_eq(median_create(p, mode, &m), 0);
  cJSON_ArrayForEach(r, recs) ck_assert_int_eq(
      median_restore(m, (int64_t)cJSON_GetArrayItem(r, 0)->valuedouble, cJSON_GetArrayItem(r, 1)),
      0);
  return m;
}

static void keep(cJSON *recs, int64_t id, cJSON **rec) {
  cJSON *pair;
  if (!*rec) return;
  pair = cJSON_CreateArray();
  cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)id));
  cJSON_AddItemToArray(pair, *rec);
  cJSON_AddItemToArray(recs, pair);
  *rec = NULL;
}

/* Every decision of a Python transcription of Ray's rule (numpy median and
 * mean) must agree; medians to 1e-9. Run uninterrupted and restarted from
 * the records every 23 events. */
static void run_vectors(int restart_every) {
  cJSON *doc = vectors_load(MEDIAN_RAY_VECTORS), *c;
  int compared = 0, stops = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
    struct median_params p;
    struct median *m;
    enum spec_mode mode = strcmp(cJSON_GetObjectItem(c, "mode")->valuestring, "max") == 0
                              ? SPEC_MODE_MAX
                              : SPEC_MODE_MIN;
    cJSON *recs = cJSON_CreateArray(), *e;
    int k = 0;
    median_params_default(&p);
    p.grace_period = cJSON_GetObjectItem(c, "grace_period")->valuedouble;
    p.min_samples_required = cJSON_GetObjectItem(c, "min_samples_required")->valueint;
    p.hard_stop = cJSON_IsTrue(cJSON_GetObjectItem(c, "hard_stop"));
    ck_assert_int_eq(median_create(&p, mode, &m), 0);
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
      const cJSON *end = cJSON_GetObjectItem(e, "end");
      const cJSON *t = cJSON_GetObjectItem(e, "t"), *v = cJSON_GetObjectItem(e, "value");
      struct median_outcome o;
      k++;
      if (restart_every && k % restart_every == 0) {
        median_free(m);
        m = rebuild(&p, mode, recs);
      }
      if (end) {
        int64_t id = (int64_t)end->valuedouble;
        ck_assert_int_eq(median_on_trial_end(m, id, cJSON_IsNumber(t),
                                             cJSON_IsNumber(t) ? t->valuedouble : 0,
                                             cJSON_IsNumber(v) ? v->valuedouble : 0, &o),
                         0);
        keep(recs, id, &o.record);
        median_outcome_clear(&o);
        continue;
      }
      int64_t id = (int64_t)cJSON_GetObjectItem(e, "trial")->valuedouble;
      const char *want = cJSON_GetObjectItem(e, "decision")->valuestring;
      const cJSON *med = cJSON_GetObjectItem(e, "median");
      ck_assert_int_eq(
          median_on_result(m, id, t->valuedouble, cJSON_IsNumber(v) ? v->valuedouble : NAN, &o), 0);
      ck_assert_msg(o.action == (strcmp(want, "stop") == 0    ? MEDIAN_STOP
                                 : strcmp(want, "pause") == 0 ? MEDIAN_PAUSE
                                                              : MEDIAN_CONTINUE),
                    "event %d (trial %lld, t=%g): %d, Ray's transcription %s", k, (long long)id,
                    t->valuedouble, o.action, want);
      ck_assert_int_eq(o.compared, cJSON_IsNumber(med));
      if (o.compared) {
        ck_assert_double_eq_tol(o.median, med->valuedouble, 1e-9 * fmax(1, fabs(med->valuedouble)));
        compared++;
      }
      if (o.action != MEDIAN_CONTINUE) {
        stops++;
        const char *pre = o.action == MEDIAN_STOP ? "stopped at t=" : "paused at t=";
        ck_assert_msg(strncmp(o.reason, pre, strlen(pre)) == 0, "reason: %s", o.reason);
      }
      keep(recs, id, &o.record);
      median_outcome_clear(&o);
    }
    median_free(m);
    cJSON_Delete(recs);
  }
  cJSON_Delete(doc);
  ck_assert_int_gt(compared, 150);
  ck_assert_int_gt(stops, 25);
}

START_TEST(agrees_with_ray_reference) { run_vectors(0); }
END_TEST

START_TEST(restart_decides_like_uninterrupted) { run_vectors(23); }
END_TEST

static void res(struct median *m, int64_t id, double t, double v, enum median_action want) {
  struct median_outcome o;
  ck_assert_int_eq(median_on_result(m, id, t, v, &o), 0);
  ck_assert_msg(o.action == want, "trial %lld t=%g: %d, want %d (%s)", (long long)id, t, o.action,
                want, o.reason);
  median_outcome_clear(&o);
}

/* Ray's rule by hand: three trials report 1, 2, 3 at t=1 and t=2 (with
 * fewer than min_samples_required 3 others, they continue); a fourth
 * reporting 0.5 at t=2 is worse than the median (2) of their running
 * averages -> stop, and the reason says so. */
START_TEST(worked_example) {
  struct median_params p;
  struct median *m;
  struct median_outcome o;
  median_params_default(&p);
  p.grace_period = 1;
  ck_assert_int_eq(median_create(&p, SPEC_MODE_MAX, &m), 0);
  for (int id = 1; id <= 3; id++) {
    res(m, id, 1, id, MEDIAN_CONTINUE);
    res(m, id, 2, id, MEDIAN_CONTINUE);
  }
  ck_assert_int_eq(median_on_result(m, 4, 2, 0.5, &o), 0);
  ck_assert_int_eq(o.action, MEDIAN_STOP);
  ck_assert_int_eq(o.others, 3);
  ck_assert_double_eq(o.median, 2);
  ck_assert_double_eq(o.best, 0.5);
  ck_assert_str_eq(o.reason,
                   "stopped at t=2: best 0.5 worse than median 2 of 3 trials' running averages");
  median_outcome_clear(&o);
  /* Equal to the median is not worse. */
  res(m, 5, 1, 2, MEDIAN_CONTINUE);
  res(m, 5, 2, 2, MEDIAN_CONTINUE);
  median_free(m);
}
END_TEST

/* hard_stop false pauses (Ray's PAUSE); the paused trial is resumed, in
 * pause order, only when asked (no new trial can start), once; its later
 * results are not judged again. */
START_TEST(soft_stop_pauses_and_resumes_once) {
  struct median_params p;
  struct median *m;
  cJSON *rec;
  int64_t id = 0;
  median_params_default(&p);
  p.grace_period = 0;
  p.min_samples_required = 1;
  p.hard_stop = 0;
  ck_assert_int_eq(median_create(&p, SPEC_MODE_MIN, &m), 0);
  res(m, 1, 1, 0.1, MEDIAN_CONTINUE);
  res(m, 2, 1, 0.9, MEDIAN_PAUSE);
  res(m, 3, 1, 0.8, MEDIAN_PAUSE);
  ck_assert_int_eq(median_choose_resume(m, NULL, NULL, &id, &rec), 1);
  ck_assert_int_eq(id, 2);
  ck_assert_ptr_nonnull(rec);
  cJSON_Delete(rec);
  ck_assert_int_eq(median_choose_resume(m, NULL, NULL, &id, &rec), 1);
  ck_assert_int_eq(id, 3);
  cJSON_Delete(rec);
  ck_assert_int_eq(median_choose_resume(m, NULL, NULL, &id, &rec), 0);
  res(m, 2, 2, 5.0, MEDIAN_CONTINUE);
  median_free(m);
}
END_TEST

START_TEST(nonfinite_past_grace_stops) {
  struct median_params p;
  struct median *m;
  median_params_default(&p);
  p.grace_period = 2;
  ck_assert_int_eq(median_create(&p, SPEC_MODE_MAX, &m), 0);
  res(m, 1, 1, NAN, MEDIAN_CONTINUE);
  res(m, 1, 2, INFINITY, MEDIAN_STOP);
  median_free(m);
}
END_TEST

static void check_err(const char *sched, const char *path, const char *part) {
  cJSON *s = parse(sched);
  struct median_params p;
  struct validate_error err = {{0}, {0}};
  ck_assert_int_ne(median_check(s, "scheduler", &p, &err), 0);
  ck_assert_str_eq(err.path, path);
  ck_assert_msg(strstr(err.message, part), "'%s' lacks '%s'", err.message, part);
  cJSON_Delete(s);
}

START_TEST(check_fields) {
  struct median_params p;
  struct validate_error err = {{0}, {0}};
  cJSON *s = parse("{\"type\": \"median_stopping\", \"grace_period\": 4, "
                   "\"min_samples_required\": 2, \"hard_stop\": false}");
  ck_assert_int_eq(median_check(s, "scheduler", &p, &err), 0);
  ck_assert_double_eq(p.grace_period, 4);
  ck_assert_int_eq(p.min_samples_required, 2);
  ck_assert_int_eq(p.hard_stop, 0);
  cJSON_Delete(s);
  s = parse("{\"type\": \"median_stopping\"}");
  ck_assert_int_eq(median_check(s, "scheduler", &p, &err), 0);
  ck_assert_double_eq(p.grace_period, 60);
  ck_assert_int_eq(p.min_samples_required, 3);
  ck_assert_int_eq(p.hard_stop, 1);
  cJSON_Delete(s);
  check_err("{\"type\": \"median_stopping\", \"grace_period\": -1}", "scheduler.grace_period",
            ">= 0");
  check_err("{\"type\": \"median_stopping\", \"min_samples_required\": 0}",
            "scheduler.min_samples_required", "integer");
  check_err("{\"type\": \"median_stopping\", \"hard_stop\": 1}", "scheduler.hard_stop",
            "true or false");
  check_err("{\"type\": \"median_stopping\", \"max_t\": 1}", "scheduler.max_t", "unknown field");
}
END_TEST

/* validate -> sched_create -> results -> choose: hard_stop false pauses,
 * and sched_choose resumes the paused trial only when no new one can start;
 * the restored scheduler (records) has it resumed already. */
START_TEST(dispatch_through_scheduler) {
  cJSON *c = parse("{\"metric\": \"loss\", \"mode\": \"min\", \"num_samples\": 3, "
                   "\"scheduler\": {\"type\": \"median_stopping\", \"grace_period\": 0, "
                   "\"min_samples_required\": 1, \"hard_stop\": false}, "
                   "\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"]}}");
  struct experiment_spec spec;
  struct validate_error err = {{0}, {0}};
  struct sched *s, *s2;
  struct sched_outcome o;
  struct sched_choice ch;
  double a = 0.1, b = 0.9;
  cJSON *recs = cJSON_CreateArray(), *r;
  ck_assert_int_eq(validate_experiment(c, &spec, &err), 0);
  cJSON_Delete(c);
  ck_assert_int_eq(spec.sched.type, SPEC_SCHED_MEDIAN);
  ck_assert_int_eq(spec.sched.median.hard_stop, 0);
  ck_assert_int_eq(sched_create(&spec.sched, spec.mode, 1, &s), 0);
  ck_assert_int_eq(sched_add_trial(s, 1, 0, NULL), 0);
  ck_assert_int_eq(sched_add_trial(s, 2, 1, NULL), 0);
  ck_assert_int_eq(sched_on_result(s, 1, 1, &a, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  cJSON_AddItemToArray(recs, o.record);
  o.record = NULL;
  sched_outcome_clear(&o);
  ck_assert_int_eq(sched_on_result(s, 2, 1, &b, &o), 0);
  ck_assert_int_eq(o.action, SCHED_PAUSE);
  ck_assert_ptr_nonnull(strstr(o.reason, "paused at t=1: best 0.9 worse than median 0.1"));
  cJSON_AddItemToArray(recs, o.record);
  o.record = NULL;
  sched_outcome_clear(&o);
  ck_assert_int_eq(sched_choose(s, 1, NULL, NULL, &ch), 0);
  ck_assert_int_eq(ch.kind, SCHED_CHOOSE_NEW);
  sched_choice_clear(&ch);
  ck_assert_int_eq(sched_choose(s, 0, NULL, NULL, &ch), 0);
  ck_assert_int_eq(ch.kind, SCHED_CHOOSE_RESUME);
  ck_assert_int_eq(ch.trial_id, 2);
  ck_assert_ptr_nonnull(ch.record);
  cJSON_AddItemToArray(recs, ch.record);
  ch.record = NULL;
  sched_choice_clear(&ch);
  /* A restart replays the three records: trial 2 is not resumed twice. */
  ck_assert_int_eq(sched_create(&spec.sched, spec.mode, 1, &s2), 0);
  int i = 0;
  cJSON_ArrayForEach(r, recs) ck_assert_int_eq(sched_restore(s2, i++ < 1 ? 1 : 2, r), 0);
  ck_assert_int_eq(sched_choose(s2, 0, NULL, NULL, &ch), 0);
  ck_assert_int_eq(ch.kind, SCHED_CHOOSE_WAIT);
  sched_choice_clear(&ch);
  sched_free(s2);
  sched_free(s);
  cJSON_Delete(recs);
  validate_spec_free(&spec);
}
END_TEST

int main(void) {
  Suite *s = suite_create("median");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, agrees_with_ray_reference);
  tcase_add_test(tc, restart_decides_like_uninterrupted);
  tcase_add_test(tc, worked_example);
  tcase_add_test(tc, soft_stop_pauses_and_resumes_once);
  tcase_add_test(tc, nonfinite_past_grace_stops);
  tcase_add_test(tc, check_fields);
  tcase_add_test(tc, dispatch_through_scheduler);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
