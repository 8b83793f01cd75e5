/* Ray's reporting habits on the worker (docs/protocol.md#trainables): the trial environment,
 * "stdout": "pipe", the worker's placeholders, results without the time
 * attribute, the filled-in fields and the missing-metric message. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "result.h"
#include "trainable.h"

static char *base_env[] = {"PATH=/usr/bin:/bin", "PYTHONUNBUFFERED=0", NULL};

static const char *env_get(char **env, const char *name) {
  size_t n = strlen(name);
  const char *found = NULL;
  int count = 0;
  for (; *env; env++)
    if (!strncmp(*env, name, n) && (*env)[n] == '=') {
      found = *env + n + 1;
      count++;
    }
  ck_assert_int_le(count, 1);
  return found;
}

static const char *lease_text =
    "{\"id\": 7, \"experiment_id\": 3, \"name\": \"exp_00006\", \"config\": {\"lr\": 0.5},"
    " \"metric\": \"loss\", \"mode\": \"min\", \"time_attr\": \"training_iteration\","
    " \"has_checkpoint\": true, \"checkpoint_iteration\": 4, \"start_time_total_s\": 12.25,"
    " \"trainable\": %s}";

static cJSON *lease(const char *trainable) {
  char buf[1024];
  snprintf(buf, sizeof buf, lease_text, trainable);
  cJSON *t = cJSON_Parse(buf);
  ck_assert_ptr_nonnull(t);
  return t;
}

static void check_env(const char *trainable, int resume) {
  cJSON *t = lease(trainable);
  struct trainable_ctx c = {"/opt/ctune-train", "/w/trials/7", resume, 1, "", 0, 0, base_env, NULL};
  struct trainable_cmd cmd;
  char err[256] = "";
  ck_assert_msg(trainable_build(t, &c, &cmd, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_TRIAL_NAME"), "exp_00006");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_EXPERIMENT_ID"), "3");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_TIME_ATTR"), "training_iteration");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_METRIC"), "loss");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_MODE"), "min");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_START_ITERATION"), resume ? "4" : "0");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_START_TIME_TOTAL_S"), resume ? "12.25" : "0");
  ck_assert_str_eq(env_get(cmd.env, "PYTHONUNBUFFERED"), "1"); /* over the worker's own */
  ck_assert_int_eq(cmd.stdout_pipe, 0);
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}

START_TEST(trial_env_builtin_and_command) {
  for (int resume = 0; resume < 2; resume++) {
    check_env("{\"type\": \"builtin\"}", resume);
    check_env("{\"type\": \"command\", \"argv\": [\"prog\"]}", resume);
  }
}
END_TEST

START_TEST(no_metric_is_empty) {
  cJSON *t = cJSON_Parse("{\"id\": 1, \"config\": {}, \"metric\": null, \"mode\": null,"
                         " \"trainable\": {\"type\": \"command\", \"argv\": [\"p\"]}}");
  struct trainable_ctx c = {"/t", "/w/1", 0, 1, "", 0, 0, base_env, NULL};
  struct trainable_cmd cmd;
  ck_assert_int_eq(trainable_build(t, &c, &cmd, NULL, 0), 0);
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_METRIC"), "");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_MODE"), "");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_START_ITERATION"), "0");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}
END_TEST

START_TEST(trainable_env_may_turn_unbuffered_off) {
  cJSON *t =
      lease("{\"type\": \"command\", \"argv\": [\"p\"], \"env\": {\"PYTHONUNBUFFERED\": \"\"}}");
  struct trainable_ctx c = {"/t", "/w/7", 0, 1, "", 0, 0, base_env, NULL};
  struct trainable_cmd cmd;
  ck_assert_int_eq(trainable_build(t, &c, &cmd, NULL, 0), 0);
  ck_assert_str_eq(env_get(cmd.env, "PYTHONUNBUFFERED"), "");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}
END_TEST

START_TEST(stdout_key) {
  struct trainable_ctx c = {"/t", "/w/7", 0, 1, "", 0, 0, base_env, NULL};
  struct trainable_cmd cmd;
  char err[256] = "";
  cJSON *t = lease("{\"type\": \"command\", \"argv\": [\"p\"], \"stdout\": \"pipe\"}");
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  ck_assert_int_eq(cmd.stdout_pipe, 1);
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
  t = lease("{\"type\": \"command\", \"argv\": [\"p\"], \"stdout\": \"pty\"}");
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  ck_assert_int_eq(cmd.stdout_pipe, 0);
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
  t = lease("{\"type\": \"command\", \"argv\": [\"p\"], \"stdout\": \"file\"}");
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "trainable.stdout"));
  cJSON_Delete(t);
}
END_TEST

START_TEST(worker_placeholders) {
  cJSON *t = lease("{\"type\": \"command\", \"argv\": [\"p\", \"{trial_name}\", \"{trial_id}\","
                   " \"{experiment_id}\", \"{checkpoint_dir}\", \"{lr}\"]}");
  struct trainable_ctx c = {"/t", "/w/trials/7", 0, 1, "", 0, 0, base_env, NULL};
  struct trainable_cmd cmd;
  char err[256] = "";
  ck_assert_msg(trainable_build(t, &c, &cmd, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(cmd.argv[1], "exp_00006");
  ck_assert_str_eq(cmd.argv[2], "7");
  ck_assert_str_eq(cmd.argv[3], "3");
  ck_assert_str_eq(cmd.argv[4], "/w/trials/7");
  ck_assert_str_eq(cmd.argv[5], "0.5");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
  /* env values and cwd take placeholders too (docs/protocol.md#submission-checks). */
  t = lease("{\"type\": \"command\", \"argv\": [\"p\"], \"env\": {\"RUN\": \"{trial_name}-{lr}\","
            " \"N\": 3}, \"cwd\": \"/runs/{experiment_id}/{trial_id}\"}");
  ck_assert_msg(trainable_build(t, &c, &cmd, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(env_get(cmd.env, "RUN"), "exp_00006-0.5");
  ck_assert_str_eq(env_get(cmd.env, "N"), "3");
  ck_assert_str_eq(cmd.cwd, "/runs/3/7");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
  t = lease("{\"type\": \"command\", \"argv\": [\"p\"], \"cwd\": \"/x/{nope}\"}");
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "trainable.cwd: unknown placeholder {nope}"));
  cJSON_Delete(t);
  t = lease("{\"type\": \"command\", \"argv\": [\"p\"], \"env\": {\"A\": \"{nope}\"}}");
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "trainable.env.A: unknown placeholder {nope}"));
  cJSON_Delete(t);
}
END_TEST

static cJSON *parse(const char *line, int allow, int want_rc, double *tv) {
  cJSON *out = NULL;
  ck_assert_int_eq(result_parse_line_opt(line, strlen(line), "training_iteration", allow, &out, tv),
                   want_rc);
  return out;
}

START_TEST(results_without_time_attr) {
  double tv = 0;
  ck_assert_ptr_null(parse("{\"loss\": 0.5}", 0, 0, &tv)); /* the old reading */
  cJSON *r = parse("{\"loss\": 0.5}", 1, 1, &tv);
  ck_assert(isnan(tv));
  cJSON_Delete(r);
  ck_assert_ptr_null(parse("{\"level\": \"info\", \"msg\": \"hi\"}", 1, 0, &tv)); /* a log line */
  ck_assert_ptr_null(parse("{\"loss\": 0.5} junk", 1, RESULT_MALFORMED, &tv));
  ck_assert_ptr_null(
      parse("{\"training_iteration\": \"x\", \"loss\": 1}", 1, RESULT_MALFORMED, &tv));
  r = parse("{\"loss\": NaN}", 1, 1, &tv);
  ck_assert(cJSON_IsNull(cJSON_GetObjectItem(r, "loss")));
  cJSON_Delete(r);
}
END_TEST

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  ck_assert_msg(cJSON_IsNumber(v), "%s missing", k);
  return v->valuedouble;
}

START_TEST(fill_numbers_and_clocks) {
  struct result_clock c = {
      .start_total = 10, .started_mono = 100, .prev_mono = 100, .prev_iter = 4};
  double tv = 0;
  cJSON *r = cJSON_Parse("{\"loss\": 1}");
  ck_assert_int_eq(result_fill(r, "training_iteration", &c, 101.5, 1700000000.7, &tv), 0);
  ck_assert(tv == 5 && num(r, "training_iteration") == 5);
  ck_assert(num(r, "time_this_iter_s") == 1.5);
  ck_assert(num(r, "time_total_s") == 11.5);
  ck_assert(num(r, "timestamp") == 1700000000);
  cJSON_Delete(r);
  /* What the trial reports stays; numbering follows its own iteration. */
  r = cJSON_Parse("{\"loss\": 1, \"training_iteration\": 9, \"time_total_s\": 3,"
                  " \"timestamp\": 5, \"time_this_iter_s\": 0.25}");
  ck_assert_int_eq(result_fill(r, "training_iteration", &c, 102, 1700000001, &tv), 0);
  ck_assert(tv == 9 && num(r, "time_total_s") == 3 && num(r, "timestamp") == 5 &&
            num(r, "time_this_iter_s") == 0.25);
  cJSON_Delete(r);
  r = cJSON_Parse("{\"loss\": 1}");
  ck_assert_int_eq(result_fill(r, "training_iteration", &c, 103, 1700000002, &tv), 0);
  ck_assert(tv == 10 && num(r, "time_this_iter_s") == 1 && num(r, "time_total_s") == 13);
  cJSON_Delete(r);
  /* Another time attribute: nothing is numbered; a result without it is refused. */
  r = cJSON_Parse("{\"loss\": 1}");
  ck_assert_int_eq(result_fill(r, "epoch", &c, 104, 1700000003, &tv), -EINVAL);
  ck_assert_ptr_null(cJSON_GetObjectItem(r, "training_iteration"));
  cJSON_Delete(r);
}
END_TEST

START_TEST(missing_metric_message) {
  cJSON *r = cJSON_Parse("{\"acc\": 0.5, \"training_iteration\": 1}");
  ck_assert_ptr_null(result_missing_metric(r, NULL));
  ck_assert_ptr_null(result_missing_metric(r, "acc"));
  char *m = result_missing_metric(r, "accuracy");
  ck_assert_str_eq(m, "result has no metric 'accuracy' (the experiment's metric); it reported: "
                      "acc, training_iteration");
  free(m);
  cJSON_Delete(r);
  r = cJSON_Parse("{\"accuracy\": null}"); /* reported, without a finite value */
  ck_assert_ptr_null(result_missing_metric(r, "accuracy"));
  cJSON_Delete(r);
}
END_TEST

/* Several objectives: the lease's metrics become CTUNE_METRICS/CTUNE_MODES
 * (comma-separated; CTUNE_METRIC/CTUNE_MODE stay the first), and the first
 * result must carry every one: the first missing is named. */
START_TEST(several_metrics) {
  cJSON *t = cJSON_Parse("{\"id\": 1, \"config\": {}, \"metric\": \"loss\", \"mode\": \"min\","
                         " \"metrics\": [\"loss\", \"lat\"], \"modes\": [\"min\", \"max\"],"
                         " \"trainable\": {\"type\": \"command\", \"argv\": [\"p\"]}}");
  struct trainable_ctx c = {"/t", "/w/1", 0, 1, "", 0, 0, base_env, NULL};
  struct trainable_cmd cmd;
  ck_assert_int_eq(trainable_build(t, &c, &cmd, NULL, 0), 0);
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_METRIC"), "loss");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_MODE"), "min");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_METRICS"), "loss,lat");
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_MODES"), "min,max");
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
  /* One metric: neither list is set (as before several objectives). */
  t = cJSON_Parse("{\"id\": 1, \"config\": {}, \"metric\": \"loss\", \"mode\": \"min\","
                  " \"trainable\": {\"type\": \"command\", \"argv\": [\"p\"]}}");
  ck_assert_int_eq(trainable_build(t, &c, &cmd, NULL, 0), 0);
  ck_assert_ptr_null(env_get(cmd.env, "CTUNE_METRICS"));
  ck_assert_ptr_null(env_get(cmd.env, "CTUNE_MODES"));
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);

  char *list = NULL;
  cJSON *a = cJSON_Parse("[\"loss\", \"lat\", \"acc\"]");
  ck_assert_int_eq(result_join_names(a, &list), 0);
  ck_assert_str_eq(list, "loss,lat,acc");
  cJSON *r = cJSON_Parse("{\"loss\": 0.5, \"acc\": 1}");
  char *m = result_missing_metric(r, list);
  ck_assert_str_eq(m, "result has no metric 'lat' (one of the experiment's metrics loss, lat, "
                      "acc); it reported: loss, acc");
  free(m);
  cJSON_AddNumberToObject(r, "lat", 3);
  ck_assert_ptr_null(result_missing_metric(r, list));
  /* A name that is a prefix of a key is not that key. */
  cJSON *r2 = cJSON_Parse("{\"loss\": 0.5, \"latency\": 1, \"acc\": 1}");
  m = result_missing_metric(r2, list);
  ck_assert_ptr_nonnull(m);
  free(m);
  free(list);
  cJSON_Delete(r);
  cJSON_Delete(r2);
  cJSON_Delete(a);
}
END_TEST

/* Outcome constraints: the lease's constraint_metrics must be in the first
 * result too (after the objectives, each once), and reach the trainable. */
START_TEST(constraint_metrics_required) {
  const char *leases[][2] = {
      {"{\"metric\": \"loss\", \"constraint_metrics\": [\"mem\", \"loss\", \"lat\"]}",
       "loss,mem,lat"},
      {"{\"metric\": \"a\", \"metrics\": [\"a\", \"b\"], \"constraint_metrics\": "
       "[\"b\", \"c\"]}",
       "a,b,c"},
      {"{\"metric\": \"loss\"}", "loss"},
      {"{\"constraint_metrics\": [\"mem\"]}", "mem"},
  };
  for (size_t i = 0; i < sizeof leases / sizeof *leases; i++) {
    cJSON *l = cJSON_Parse(leases[i][0]);
    char *list = NULL;
    ck_assert_int_eq(result_required_metrics(l, &list), 0);
    ck_assert_str_eq(list, leases[i][1]);
    free(list);
    cJSON_Delete(l);
  }
  cJSON *r = cJSON_Parse("{\"loss\": 0.5, \"lat\": 3}");
  char *m = result_missing_metric(r, "loss,mem,lat");
  ck_assert_str_eq(m, "result has no metric 'mem' (one of the experiment's metrics loss, mem, "
                      "lat); it reported: loss, lat");
  free(m);
  cJSON_Delete(r);
  cJSON *t = cJSON_Parse("{\"id\": 1, \"config\": {}, \"metric\": \"loss\", \"mode\": \"min\","
                         " \"constraint_metrics\": [\"mem\", \"lat\"],"
                         " \"trainable\": {\"type\": \"command\", \"argv\": [\"p\"]}}");
  struct trainable_ctx c = {"/t", "/w/1", 0, 1, "", 0, 0, base_env, NULL};
  struct trainable_cmd cmd;
  ck_assert_int_eq(trainable_build(t, &c, &cmd, NULL, 0), 0);
  ck_assert_str_eq(env_get(cmd.env, "CTUNE_CONSTRAINT_METRICS"), "mem,lat");
  ck_assert_ptr_null(env_get(cmd.env, "CTUNE_METRICS"));
  trainable_cmd_free(&cmd);
  cJSON_Delete(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("habits");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, trial_env_builtin_and_command);
  tcase_add_test(tc, no_metric_is_empty);
  tcase_add_test(tc, trainable_env_may_turn_unbuffered_off);
  tcase_add_test(tc, stdout_key);
  tcase_add_test(tc, worker_placeholders);
  tcase_add_test(tc, results_without_time_attr);
  tcase_add_test(tc, fill_numbers_and_clocks);
  tcase_add_test(tc, missing_metric_message);
  tcase_add_test(tc, several_metrics);
  tcase_add_test(tc, constraint_metrics_required);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
