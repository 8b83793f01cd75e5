/* Unit tests of the searcher (server/core/searcher.c): random and grid give
 * exactly the configs `ctune sample` printed before trials were created on
 * demand (searcher_pinned.json, captured from the code of 96a7124), TPE's
 * startup is the random list and its later suggestions are not, grid x tpe
 * keeps the grid, points_to_evaluate (partial, completed by sampling) come
 * first and are checked against the space with paths, warm_start trials are
 * observed, a searcher rebuilt from the same observations in another
 * order suggests the same config (what a restart relies on), and a tpe
 * config stored before today's defaults replays with the old ones
 * (searcher_pinned.json entry 3, made by the code of af4cfeb). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "searcher.h"
#include "validate.h"
#include "vectors.h"

static cJSON *pinned;

static cJSON *parse(const char *s) {
  cJSON *j = cJSON_Parse(s);
  ck_assert_msg(j != NULL, "bad JSON in test: %s", s);
  return j;
}

static void spec_of(const cJSON *cfg, struct experiment_spec *spec) {
  struct validate_error err = {{0}, {0}};
  int rc = validate_experiment_stored(cfg, spec, &err);
  ck_assert_msg(rc == 0, "%s: %s", err.path, err.message);
}

static struct searcher *make(const cJSON *cfg) {
  struct experiment_spec spec;
  struct validate_error err = {{0}, {0}};
  struct searcher *s = NULL;
  spec_of(cfg, &spec);
  ck_assert_int_eq(searcher_create(&spec, &s, &err), 0);
  validate_spec_free(&spec);
  return s;
}

static const cJSON *pin(int i, const char *what) {
  return cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(pinned, i), what);
}

static void assert_same(const cJSON *a, const cJSON *b, int i) {
  char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
  ck_assert_msg(cJSON_Compare(a, b, 1), "trial %d: %s != %s", i, x, y);
  free(x);
  free(y);
}

/* Trials 0..n-1 of a searcher equal the pinned list, in order. */
static void check_pinned(int which, const char *type) {
  struct searcher *s = make(pin(which, "config"));
  const cJSON *want = pin(which, "trials"), *w;
  ck_assert_str_eq(searcher_type_name(s), type);
  int i = 0;
  cJSON_ArrayForEach(w, want) {
    cJSON *c = NULL;
    ck_assert_int_eq(searcher_suggest(s, i, &c), 0);
    assert_same(c, w, i);
    cJSON_Delete(c);
    i++;
  }
  cJSON *c = (cJSON *)1;
  ck_assert_int_eq(searcher_suggest(s, i, &c), -ENOENT);
  ck_assert_ptr_null(c);
  searcher_free(s);
}

START_TEST(random_is_todays) { check_pinned(0, "random"); }
END_TEST

START_TEST(grid_is_todays) { check_pinned(1, "grid"); }
END_TEST

/* Bounded memory: the configs already made are dropped (a live experiment
 * holds only the rest of its plan), and every order of asking still gives
 * the pinned configs: the same index twice (a creation that failed and is
 * tried again), a fresh searcher asked from the middle (a restart), and an
 * index before the dropped ones (a dry run going back). */
START_TEST(made_configs_are_dropped_any_order_same_configs) {
  for (int which = 0; which < 2; which++) {
    const cJSON *want = pin(which, "trials");
    int n = cJSON_GetArraySize(want);
    int order[] = {0, 0, 1, n - 1, n - 1, 2, 0, n / 2};
    struct searcher *s = make(pin(which, "config"));
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
      cJSON *c = NULL;
      ck_assert_int_eq(searcher_suggest(s, order[k], &c), 0);
      assert_same(c, cJSON_GetArrayItem(want, order[k]), order[k]);
      cJSON_Delete(c);
      ck_assert_int_eq(searcher_configs_held(s), n - order[k]);
    }
    searcher_free(s);
  }
}
END_TEST

START_TEST(known_lists_everything_for_random_and_grid) {
  for (int which = 0; which < 2; which++) {
    struct searcher *s = make(pin(which, "config"));
    cJSON *known = NULL;
    int64_t later = -1;
    ck_assert_int_eq(searcher_known(s, &known, &later), 0);
    ck_assert_int_eq(later, 0);
    ck_assert(cJSON_Compare(known, pin(which, "trials"), 1));
    cJSON_Delete(known);
    searcher_free(s);
  }
}
END_TEST

static double objective(const cJSON *c) {
  double x = cJSON_GetObjectItemCaseSensitive(c, "x")->valuedouble;
  const char *k = cJSON_GetObjectItemCaseSensitive(c, "k")->valuestring;
  return (x - 1) * (x - 1) + (k[0] == 'b' ? 0 : 3);
}

START_TEST(tpe_startup_is_random_then_learns) {
  struct searcher *s = make(pin(2, "config"));
  const cJSON *rand = pin(2, "trials");
  cJSON *known = NULL;
  int64_t later = 0;
  ck_assert_str_eq(searcher_type_name(s), "tpe");
  ck_assert_int_eq(searcher_known(s, &known, &later), 0);
  ck_assert_int_eq(cJSON_GetArraySize(known), 10);
  ck_assert_int_eq(later, 4);
  cJSON_Delete(known);
  for (int i = 0; i < 14; i++) {
    cJSON *c = NULL;
    ck_assert_int_eq(searcher_suggest(s, i, &c), 0);
    if (i < 10) {
      assert_same(c, cJSON_GetArrayItem(rand, i), i);
    } else {
      /* Past startup: the model's, not the random draw. */
      ck_assert(!cJSON_Compare(c, cJSON_GetArrayItem(rand, i), 1));
    }
    ck_assert_int_eq(searcher_observe(s, 100 + i, i, c, objective(c), 1), 0);
    cJSON_Delete(c);
  }
  searcher_free(s);
}
END_TEST

START_TEST(tpe_rebuilt_in_any_order_suggests_the_same) {
  const cJSON *rand = pin(2, "trials");
  struct searcher *a = make(pin(2, "config")), *b = make(pin(2, "config"));
  for (int i = 0; i < 12; i++) {
    const cJSON *c = cJSON_GetArrayItem(rand, i);
    /* a sees them in order, as they came; b as a reload might, reversed,
     * with a running entry first replaced by its end. */
    ck_assert_int_eq(searcher_observe(a, 10 + i, i, c, objective(c), 1), 0);
    const cJSON *d = cJSON_GetArrayItem(rand, 11 - i);
    ck_assert_int_eq(searcher_observe(b, 10 + 11 - i, 11 - i, d, NAN, 0), 0);
    ck_assert_int_eq(searcher_observe(b, 10 + 11 - i, 11 - i, d, objective(d), 1), 0);
  }
  cJSON *x = NULL, *y = NULL;
  ck_assert_int_eq(searcher_suggest(a, 12, &x), 0);
  ck_assert_int_eq(searcher_suggest(b, 12, &y), 0);
  assert_same(x, y, 12);
  cJSON_Delete(x);
  cJSON_Delete(y);
  searcher_free(a);
  searcher_free(b);
}
END_TEST

/* The trials of a searcher made from spec, one trial in flight at each
 * suggestion (trial i-1 still running when i is asked, the objective above
 * once it ends): 1 when all num_trials equal want's. */
static int tpe_in_flight_matches(const struct experiment_spec *spec, const cJSON *want) {
  struct validate_error err = {{0}, {0}};
  struct searcher *s = NULL;
  cJSON *prev = NULL;
  int same = 1;
  ck_assert_int_eq(searcher_create(spec, &s, &err), 0);
  for (int i = 0; i < spec->num_trials; i++) {
    cJSON *c = NULL;
    ck_assert_int_eq(searcher_suggest(s, i, &c), 0);
    same = same && cJSON_Compare(c, cJSON_GetArrayItem(want, i), 1);
    ck_assert_int_eq(searcher_observe(s, 100 + i, i, c, NAN, 0), 0);
    if (prev) ck_assert_int_eq(searcher_observe(s, 99 + i, i - 1, prev, objective(prev), 1), 0);
    cJSON_Delete(prev);
    prev = c;
  }
  cJSON_Delete(prev);
  searcher_free(s);
  return same;
}

/* A tpe config stored before the defaults followed Optuna 5.0 (no
 * "multivariate", no "constant_liar") replays exactly as it ran: pinned
 * entry 3 was made by the code of af4cfeb (independent model, running
 * trials ignored). The same config submitted today gets the defaults in
 * force written into its search_alg, and so suggests differently. */
START_TEST(tpe_stored_config_replays_old_defaults) {
  const cJSON *cfg = pin(3, "config"), *want = pin(3, "trials");
  struct experiment_spec spec;
  struct validate_error err = {{0}, {0}};
  ck_assert(!cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "search_alg"),
                                              "multivariate"));
  spec_of(cfg, &spec);
  ck_assert(!cJSON_GetObjectItemCaseSensitive(spec.search_alg, "multivariate"));
  ck_assert(tpe_in_flight_matches(&spec, want));
  validate_spec_free(&spec);

  ck_assert_int_eq(validate_experiment(cfg, &spec, &err), 0);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec.search_alg, "multivariate")));
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec.search_alg, "constant_liar")));
  ck_assert(!tpe_in_flight_matches(&spec, want));
  validate_spec_free(&spec);
  /* random is left as submitted. */
  cJSON *rnd = cJSON_Duplicate(pin(0, "config"), 1);
  cJSON_AddItemToObject(rnd, "search_alg", parse("{\"type\": \"random\"}"));
  ck_assert_int_eq(validate_experiment(rnd, &spec, &err), 0);
  ck_assert_int_eq(cJSON_GetArraySize(spec.search_alg), 1);
  validate_spec_free(&spec);
  cJSON_Delete(rnd);
}
END_TEST

START_TEST(grid_times_tpe_keeps_the_grid) {
  cJSON *cfg = parse("{\"num_samples\": 5, \"seed\": 1, \"metric\": \"m\", \"mode\": \"min\","
                     "\"search_alg\": {\"type\": \"tpe\", \"n_startup_trials\": 2},"
                     "\"param_space\": {\"g\": {\"grid_search\": [10, 20, 30]},"
                     "\"x\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}},"
                     "\"trainable\": {\"type\": \"command\", \"argv\": [\"true\"]}}");
  struct searcher *s = make(cfg);
  ck_assert_str_eq(searcher_type_name(s), "tpe");
  for (int i = 0; i < 15; i++) {
    cJSON *c = NULL;
    ck_assert_int_eq(searcher_suggest(s, i, &c), 0);
    ck_assert_int_eq((int)cJSON_GetObjectItemCaseSensitive(c, "g")->valuedouble, 10 * (1 + i % 3));
    double x = cJSON_GetObjectItemCaseSensitive(c, "x")->valuedouble;
    ck_assert_int_eq(searcher_observe(s, i + 1, i, c, x, 1), 0);
    cJSON_Delete(c);
  }
  searcher_free(s);
  cJSON_Delete(cfg);
}
END_TEST

START_TEST(points_first_completed_by_sampling) {
  cJSON *cfg = cJSON_Duplicate(pin(0, "config"), 1);
  cJSON_AddItemToObject(cfg, "points_to_evaluate",
                        parse("[{\"lr\": 0.01, \"opt\": {\"beta\": 0.9}}, {\"l1\": 128}]"));
  struct searcher *s = make(cfg);
  const cJSON *rand = pin(0, "trials");
  for (int i = 0; i < 4; i++) {
    cJSON *c = NULL, *want = cJSON_Duplicate(cJSON_GetArrayItem(rand, i), 1);
    ck_assert_int_eq(searcher_suggest(s, i, &c), 0);
    if (i == 0) {
      cJSON_ReplaceItemInObject(want, "lr", cJSON_CreateNumber(0.01));
      cJSON_ReplaceItemInObject(cJSON_GetObjectItem(want, "opt"), "beta", cJSON_CreateNumber(0.9));
    } else if (i == 1) {
      cJSON_ReplaceItemInObject(want, "l1", cJSON_CreateNumber(128));
    }
    assert_same(c, want, i);
    cJSON_Delete(c);
    cJSON_Delete(want);
  }
  searcher_free(s);
  /* tpe: the point's keys are fixed, the rest is the random draw. */
  cJSON *t = cJSON_Duplicate(pin(2, "config"), 1);
  cJSON_AddItemToObject(t, "points_to_evaluate", parse("[{\"k\": \"b\"}]"));
  s = make(t);
  cJSON *c = NULL, *want = cJSON_Duplicate(cJSON_GetArrayItem(pin(2, "trials"), 0), 1);
  cJSON_ReplaceItemInObject(want, "k", cJSON_CreateString("b"));
  ck_assert_int_eq(searcher_suggest(s, 0, &c), 0);
  assert_same(c, want, 0);
  cJSON_Delete(c);
  cJSON_Delete(want);
  searcher_free(s);
  cJSON_Delete(t);
  cJSON_Delete(cfg);
}
END_TEST

static void refused(const char *extra, const char *path, const char *msg_part) {
  cJSON *cfg = cJSON_Duplicate(pin(0, "config"), 1);
  cJSON *x = parse(extra);
  for (cJSON *c = x->child; c; c = c->next)
    cJSON_AddItemToObject(cfg, c->string, cJSON_Duplicate(c, 1));
  struct experiment_spec spec;
  struct validate_error err = {{0}, {0}};
  ck_assert_int_eq(validate_experiment(cfg, &spec, &err), -EINVAL);
  ck_assert_msg(!strcmp(err.path, path), "path %s, want %s (%s)", err.path, path, err.message);
  ck_assert_msg(strstr(err.message, msg_part), "message '%s' lacks '%s'", err.message, msg_part);
  cJSON_Delete(x);
  cJSON_Delete(cfg);
}

START_TEST(validation_has_paths) {
  refused("{\"points_to_evaluate\": [{\"lr\": 0.1}, {\"opt\": {\"gamma\": 1}}]}",
          "points_to_evaluate[1].opt.gamma", "not a parameter");
  refused("{\"points_to_evaluate\": [{\"momentum\": 0.5}]}", "points_to_evaluate[0].momentum",
          "constant");
  refused("{\"points_to_evaluate\": {\"lr\": 1}}", "points_to_evaluate", "array");
  refused("{\"points_to_evaluate\": [1]}", "points_to_evaluate[0]", "object");
  refused("{\"points_to_evaluate\": [{},{},{},{},{},{},{}]}", "points_to_evaluate", "plans only 6");
  refused("{\"search_alg\": {\"type\": \"bohb\"}}", "search_alg.type", "random");
  refused("{\"search_alg\": {\"type\": \"random\", \"n\": 1}}", "search_alg.n", "unknown");
  refused("{\"search_alg\": {\"type\": \"tpe\", \"n_startup_trials\": -1}}",
          "search_alg.n_startup_trials", "");
  refused("{\"search_alg\": {\"type\": \"tpe\"}}", "metric", "tpe");
  refused("{\"metric\": \"m\", \"mode\": \"min\", \"warm_start\": {\"experiment\": 1}}",
          "warm_start", "tpe");
  refused("{\"metric\": \"m\", \"mode\": \"min\", \"search_alg\": {\"type\": \"tpe\"},"
          " \"warm_start\": {\"experiment\": 0}}",
          "warm_start.experiment", "");
  /* The trials are the server's to fill in. */
  refused("{\"metric\": \"m\", \"mode\": \"min\", \"search_alg\": {\"type\": \"tpe\"},"
          " \"warm_start\": {\"experiment\": 1, \"trials\": []}}",
          "warm_start.trials", "unknown field");
}
END_TEST

START_TEST(warm_start_trials_are_observed) {
  cJSON *cfg = cJSON_Duplicate(pin(2, "config"), 1);
  cJSON *ws = parse("{\"experiment\": 1, \"trials\": []}");
  cJSON *arr = cJSON_GetObjectItem(ws, "trials");
  const cJSON *rand = pin(2, "trials");
  for (int i = 0; i < 10; i++) {
    const cJSON *c = cJSON_GetArrayItem(rand, i);
    cJSON *t = cJSON_CreateObject();
    cJSON_AddItemToObject(t, "config", cJSON_Duplicate(c, 1));
    cJSON_AddNumberToObject(t, "value", objective(c));
    cJSON_AddItemToArray(arr, t);
  }
  cJSON_AddItemToObject(cfg, "warm_start", ws);
  struct searcher *s = make(cfg);
  cJSON *known = NULL, *c = NULL;
  int64_t later = 0;
  /* Ten finished trials already: nothing is random, nothing known. */
  ck_assert_int_eq(searcher_known(s, &known, &later), 0);
  ck_assert_int_eq(cJSON_GetArraySize(known), 0);
  ck_assert_int_eq(later, 14);
  ck_assert_int_eq(searcher_suggest(s, 0, &c), 0);
  ck_assert(!cJSON_Compare(c, cJSON_GetArrayItem(rand, 0), 1));
  cJSON_Delete(c);
  cJSON_Delete(known);
  searcher_free(s);
  cJSON_Delete(cfg);
}
END_TEST

/* Several objectives: a warm_start trial counts as finished for tpe only
 * with "values" (every objective, in metric's order); with "value" alone
 * the second objective is unknown and the searcher is still random. */
static struct searcher *mo_warm(int with_values) {
  cJSON *cfg = cJSON_Duplicate(pin(2, "config"), 1);
  cJSON_ReplaceItemInObject(cfg, "metric", parse("[\"loss\", \"lat\"]"));
  cJSON_ReplaceItemInObject(cfg, "mode", parse("[\"min\", \"max\"]"));
  cJSON *ws = parse("{\"experiment\": 1, \"trials\": []}");
  cJSON *arr = cJSON_GetObjectItem(ws, "trials");
  const cJSON *rand = pin(2, "trials");
  for (int i = 0; i < 10; i++) {
    const cJSON *c = cJSON_GetArrayItem(rand, i);
    cJSON *t = cJSON_CreateObject(), *vs = cJSON_CreateArray();
    cJSON_AddItemToObject(t, "config", cJSON_Duplicate(c, 1));
    cJSON_AddNumberToObject(t, "value", objective(c));
    cJSON_AddItemToArray(vs, cJSON_CreateNumber(objective(c)));
    cJSON_AddItemToArray(vs, cJSON_CreateNumber(i));
    if (with_values)
      cJSON_AddItemToObject(t, "values", vs);
    else
      cJSON_Delete(vs);
    cJSON_AddItemToArray(arr, t);
  }
  cJSON_AddItemToObject(cfg, "warm_start", ws);
  struct searcher *s = make(cfg);
  cJSON_Delete(cfg);
  return s;
}

START_TEST(tpe_several_objectives_warm_start) {
  for (int with = 0; with < 2; with++) {
    struct searcher *s = mo_warm(with);
    cJSON *known = NULL, *c = NULL;
    int64_t later = 0;
    ck_assert_int_eq(searcher_objectives(s), 2);
    ck_assert_int_eq(searcher_known(s, &known, &later), 0);
    /* With values: ten finished trials, nothing random left; without:
     * the startup list is still to run. */
    ck_assert_int_eq(cJSON_GetArraySize(known), (with ? 0 : 10));
    ck_assert_int_eq(searcher_suggest(s, 0, &c), 0);
    ck_assert_int_eq(cJSON_Compare(c, cJSON_GetArrayItem(pin(2, "trials"), 0), 1), !with);
    cJSON_Delete(c);
    cJSON_Delete(known);
    searcher_free(s);
  }
}
END_TEST

int main(void) {
  if (vectors_read(SEARCHER_PINNED, &pinned)) {
    fprintf(stderr, "cannot read %s\n", SEARCHER_PINNED);
    return 1;
  }
  Suite *su = suite_create("searcher");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, random_is_todays);
  tcase_add_test(tc, grid_is_todays);
  tcase_add_test(tc, known_lists_everything_for_random_and_grid);
  tcase_add_test(tc, made_configs_are_dropped_any_order_same_configs);
  tcase_add_test(tc, tpe_startup_is_random_then_learns);
  tcase_add_test(tc, tpe_rebuilt_in_any_order_suggests_the_same);
  tcase_add_test(tc, tpe_stored_config_replays_old_defaults);
  tcase_add_test(tc, grid_times_tpe_keeps_the_grid);
  tcase_add_test(tc, points_first_completed_by_sampling);
  tcase_add_test(tc, validation_has_paths);
  tcase_add_test(tc, warm_start_trials_are_observed);
  tcase_add_test(tc, tpe_several_objectives_warm_start);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  cJSON_Delete(pinned);
  return failed ? 1 : 0;
}
