/* Unit tests of the TPE searcher (server/core/tpe.c): option errors with
 * paths, startup configs identical to space_generate, and statistical
 * behaviour with fixed seeds (it concentrates near optima far more than
 * random search, finds the good choice, keeps log and integer domains in
 * bounds and on their grids), determinism, constant_liar, and the defaults
 * (written into a new config; absent in an old one: the original ones). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space.h"
#include "tpe.h"

static cJSON *parse(const char *s) {
  cJSON *j = cJSON_Parse(s);
  ck_assert_msg(j != NULL, "bad JSON in test: %s", s);
  return j;
}

static struct tpe *make(const char *space, const char *alg, enum spec_mode mode, uint64_t seed) {
  cJSON *sp = parse(space), *sa = alg ? parse(alg) : NULL;
  struct validate_error err = {{0}, {0}};
  struct tpe *t = NULL;
  int rc = tpe_create(sp, sa, mode, seed, &t, &err);
  ck_assert_msg(rc == 0, "%s: %s", err.path, err.message);
  cJSON_Delete(sp);
  cJSON_Delete(sa);
  return t;
}

static double num(const cJSON *cfg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", key);
  return v->valuedouble;
}

typedef double (*objective_fn)(const cJSON *cfg);

/* Runs n sequential trials (each finished before the next is suggested);
 * returns the configs (caller frees) and fills values[]. */
static cJSON *run(struct tpe *t, objective_fn f, int n, double *values) {
  cJSON *all = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    cJSON *cfg = NULL;
    ck_assert_int_eq(tpe_suggest(t, i, NULL, &cfg), 0);
    values[i] = f(cfg);
    ck_assert_int_eq(tpe_observe(t, 1000 + i, cfg, values[i], TPE_FINISHED), 0);
    cJSON_AddItemToArray(all, cfg);
  }
  return all;
}

static void expect_error(const char *alg, const char *path, const char *needle) {
  cJSON *sa = parse(alg);
  struct validate_error err = {{0}, {0}};
  ck_assert_int_eq(tpe_options_check(sa, "search_alg", &err), -EINVAL);
  ck_assert_str_eq(err.path, path);
  ck_assert_msg(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
  cJSON_Delete(sa);
}

START_TEST(options_errors) {
  cJSON *sa =
      parse("{\"type\": \"tpe\", \"n_startup_trials\": 5, \"n_ei_candidates\": 48,"
            " \"prior_weight\": 0.5, \"consider_prior\": true, \"consider_magic_clip\": false,"
            " \"consider_endpoints\": true, \"multivariate\": true, \"constant_liar\": true,"
            " \"gamma\": 0.25, \"gamma_max\": 10, \"weights\": \"flat\"}");
  ck_assert_int_eq(tpe_options_check(sa, "search_alg", NULL), 0);
  cJSON_Delete(sa);
  expect_error("{\"type\": \"tpe\", \"n_startup\": 3}", "search_alg.n_startup", "unknown field");
  expect_error("{\"type\": \"random\"}", "search_alg.type", "must be \"tpe\"");
  expect_error("{\"n_startup_trials\": -1}", "search_alg.n_startup_trials", "integer from 0");
  expect_error("{\"n_startup_trials\": 2.5}", "search_alg.n_startup_trials", "integer");
  expect_error("{\"n_ei_candidates\": 0}", "search_alg.n_ei_candidates", "integer from 1");
  expect_error("{\"prior_weight\": 0}", "search_alg.prior_weight", "> 0");
  expect_error("{\"consider_endpoints\": 1}", "search_alg.consider_endpoints", "true or false");
  expect_error("{\"multivariate\": \"yes\"}", "search_alg.multivariate", "true or false");
  expect_error("{\"constant_liar\": null}", "search_alg.constant_liar", "true or false");
  expect_error("{\"gamma\": 1.5}", "search_alg.gamma", "(0, 1]");
  expect_error("{\"gamma_max\": 0}", "search_alg.gamma_max", "integer from 1");
  expect_error("{\"weights\": \"linear\"}", "search_alg.weights", "ramp");
  expect_error("[1]", "search_alg", "object");

  /* tpe_create checks the space too, with param_space paths. */
  cJSON *sp = parse("{\"x\": {\"type\": \"loguniform\", \"lower\": 0, \"upper\": 1}}");
  struct validate_error err = {{0}, {0}};
  struct tpe *t = NULL;
  ck_assert_int_eq(tpe_create(sp, NULL, SPEC_MODE_MIN, 1, &t, &err), -EINVAL);
  ck_assert_ptr_null(t);
  ck_assert_str_eq(err.path, "param_space.x.lower");
  cJSON_Delete(sp);
}
END_TEST

static const char *every_domain =
    "{\"c\": {\"type\": \"choice\", \"values\": [\"a\", 2, {\"k\": [1]}]},"
    " \"u\": {\"type\": \"uniform\", \"lower\": -1, \"upper\": 3},"
    " \"qu\": {\"type\": \"quniform\", \"lower\": 0, \"upper\": 1, \"q\": 0.1},"
    " \"lu\": {\"type\": \"loguniform\", \"lower\": 1e-5, \"upper\": 1},"
    " \"qlu\": {\"type\": \"qloguniform\", \"lower\": 1, \"upper\": 1000, \"q\": 5},"
    " \"ri\": {\"type\": \"randint\", \"lower\": -3, \"upper\": 7},"
    " \"lri\": {\"type\": \"lograndint\", \"lower\": 1, \"upper\": 1000},"
    " \"qri\": {\"type\": \"qrandint\", \"lower\": 0, \"upper\": 100, \"q\": 7},"
    " \"rn\": {\"type\": \"randn\", \"mean\": 2, \"sd\": 0.5},"
    " \"p2\": {\"type\": \"pow2\", \"lower\": 4, \"upper\": 256},"
    " \"nest\": {\"opt\": {\"grid_search\": [\"sgd\", \"adam\"]},"
    "            \"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1e-1},"
    "            \"const\": [1, 2]},"
    " \"g\": {\"grid_search\": [1, 2, 3]},"
    " \"k\": \"constant\"}";

/* Without results, suggestion i is space_generate's trial i (grid values
 * passed as the fixed part, as the server will): the random phase draws
 * through space_sample, on trial i's own stream, in the space's order. */
START_TEST(startup_matches_space_generate) {
  cJSON *sp = parse(every_domain), *configs = NULL, *c;
  struct tpe *t = make(every_domain, NULL, SPEC_MODE_MIN, 77);
  ck_assert_int_eq(space_generate(sp, 3, 77, &configs, NULL), 0);
  ck_assert_int_eq(cJSON_GetArraySize(configs), 18);
  int i = 0;
  cJSON_ArrayForEach(c, configs) {
    cJSON *fixed = parse("{\"nest\": {}}"), *out = NULL;
    cJSON_AddItemToObject(fixed, "g", cJSON_Duplicate(cJSON_GetObjectItem(c, "g"), 1));
    cJSON_AddItemToObject(
        cJSON_GetObjectItem(fixed, "nest"), "opt",
        cJSON_Duplicate(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "nest"), "opt"), 1));
    ck_assert(tpe_in_startup(t));
    ck_assert_int_eq(tpe_suggest(t, i, fixed, &out), 0);
    ck_assert_msg(cJSON_Compare(out, c, 1), "trial %d differs", i);
    cJSON_Delete(out);
    cJSON_Delete(fixed);
    i++;
  }
  cJSON_Delete(configs);
  cJSON_Delete(sp);
  tpe_free(t);
}
END_TEST

/* After startup, every domain gives values of its own kind: in bounds,
 * integers for integer domains, multiples of q, powers of two, choices. */
static double every_objective(const cJSON *cfg) {
  const cJSON *nest = cJSON_GetObjectItem(cfg, "nest");
  return fabs(num(cfg, "u") - 1) + fabs(log10(num(cfg, "lu")) + 3) + num(cfg, "qu") +
         fabs(num(cfg, "ri") - 4) + fabs(num(cfg, "rn") - 2) + log2(num(cfg, "p2")) / 8 +
         fabs(log10(num(nest, "lr")) + 2) + num(cfg, "qri") / 100 + num(cfg, "lri") / 1000 +
         num(cfg, "qlu") / 1000 + (cJSON_IsString(cJSON_GetObjectItem(cfg, "c")) ? 0 : 1);
}

static void check_every_domain(const cJSON *cfg) {
  double v;
  const cJSON *c = cJSON_GetObjectItem(cfg, "c");
  ck_assert(cJSON_IsString(c) || cJSON_IsNumber(c) || cJSON_IsObject(c));
  v = num(cfg, "u");
  ck_assert(v >= -1 && v < 3);
  v = num(cfg, "qu");
  ck_assert(v >= 0 && v <= 1 && fabs(v * 10 - round(v * 10)) < 1e-9);
  v = num(cfg, "lu");
  ck_assert(v >= 1e-5 && v < 1);
  v = num(cfg, "qlu");
  ck_assert(v >= 1 && v <= 1000 && fmod(v, 5) == 0);
  v = num(cfg, "ri");
  ck_assert(v >= -3 && v < 7 && v == floor(v));
  v = num(cfg, "lri");
  ck_assert(v >= 1 && v < 1000 && v == floor(v));
  v = num(cfg, "qri");
  ck_assert(v >= 0 && v <= 100 && fmod(v, 7) == 0);
  ck_assert(isfinite(num(cfg, "rn")));
  v = num(cfg, "p2");
  int e;
  ck_assert(v >= 4 && v <= 256 && frexp(v, &e) == 0.5);
  const cJSON *nest = cJSON_GetObjectItem(cfg, "nest");
  v = num(nest, "lr");
  ck_assert(v >= 1e-4 && v < 1e-1);
  ck_assert(cJSON_IsString(cJSON_GetObjectItem(nest, "opt")));
  ck_assert(cJSON_IsArray(cJSON_GetObjectItem(nest, "const")));
  ck_assert_str_eq(cJSON_GetObjectItem(cfg, "k")->valuestring, "constant");
  ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(cfg, "g")));
}

START_TEST(every_domain_on_grid) {
  for (int mv = 0; mv < 2; mv++) {
    struct tpe *t = make(every_domain, mv ? "{\"multivariate\": true}" : NULL, SPEC_MODE_MIN, 5);
    double vals[80];
    cJSON *all = run(t, every_objective, 80, vals), *c;
    ck_assert(!tpe_in_startup(t));
    cJSON_ArrayForEach(c, all) check_every_domain(c);
    cJSON_Delete(all);
    tpe_free(t);
  }
}
END_TEST

static double quad(const cJSON *cfg) {
  double x = num(cfg, "x");
  return (x - 3) * (x - 3);
}

static double neg_quad(const cJSON *cfg) { return -quad(cfg); }

/* Trials 30..99 of a 1-D quadratic on [-10, 10]: TPE puts over a third of
 * them within 1 of the optimum (Optuna 5.0's TPESampler, independent, puts
 * 330 of these 700 there), random search 10%. */
START_TEST(quadratic_concentrates) {
  const char *space = "{\"x\": {\"type\": \"uniform\", \"lower\": -10, \"upper\": 10}}";
  int near_tpe = 0, near_rand = 0, total = 0;
  for (uint64_t seed = 1; seed <= 5; seed++) {
    for (int mode = 0; mode < 2; mode++) {
      struct tpe *t = make(space, NULL, mode ? SPEC_MODE_MAX : SPEC_MODE_MIN, seed);
      struct tpe *r = make(space, "{\"n_startup_trials\": 100000}", SPEC_MODE_MIN, seed);
      double v1[100], v2[100];
      cJSON *a = run(t, mode ? neg_quad : quad, 100, v1);
      cJSON *b = run(r, quad, 100, v2);
      for (int i = 30; i < 100; i++) {
        near_tpe += fabs(num(cJSON_GetArrayItem(a, i), "x") - 3) < 1;
        near_rand += fabs(num(cJSON_GetArrayItem(b, i), "x") - 3) < 1;
        total++;
      }
      cJSON_Delete(a), cJSON_Delete(b);
      tpe_free(t), tpe_free(r);
    }
  }
  ck_assert_msg(near_tpe > total * 35 / 100, "TPE: %d of %d near the optimum", near_tpe, total);
  ck_assert_msg(near_rand < total / 5, "random: %d of %d", near_rand, total);
}
END_TEST

/* Multivariate TPE on a 2-D bowl gets closer than random search. */
static double bowl(const cJSON *cfg) {
  double x = num(cfg, "x"), y = num(cfg, "y");
  return (x - 1) * (x - 1) + (log10(y) + 2) * (log10(y) + 2);
}

START_TEST(multivariate_beats_random) {
  const char *space = "{\"x\": {\"type\": \"uniform\", \"lower\": -5, \"upper\": 5},"
                      " \"y\": {\"type\": \"loguniform\", \"lower\": 1e-5, \"upper\": 1}}";
  int wins = 0;
  for (uint64_t seed = 1; seed <= 9; seed++) {
    struct tpe *t = make(space, "{\"multivariate\": true}", SPEC_MODE_MIN, seed);
    struct tpe *r = make(space, "{\"n_startup_trials\": 100000}", SPEC_MODE_MIN, seed);
    double v1[60], v2[60], b1 = INFINITY, b2 = INFINITY;
    cJSON_Delete(run(t, bowl, 60, v1));
    cJSON_Delete(run(r, bowl, 60, v2));
    for (int i = 0; i < 60; i++) b1 = fmin(b1, v1[i]), b2 = fmin(b2, v2[i]);
    wins += b1 < b2;
    tpe_free(t), tpe_free(r);
  }
  ck_assert_msg(wins >= 7, "multivariate TPE beat random on %d of 9 seeds", wins);
}
END_TEST

static double pick_c(const cJSON *cfg) {
  const char *s = cJSON_GetObjectItem(cfg, "opt")->valuestring;
  return (strcmp(s, "c") == 0 ? 0.0 : 1.0) + 0.01 * num(cfg, "x");
}

/* One good choice of five: after startup TPE picks it most of the time. */
START_TEST(categorical_finds_good_choice) {
  const char *space =
      "{\"opt\": {\"type\": \"choice\", \"values\": [\"a\", \"b\", \"c\", \"d\", \"e\"]},"
      " \"x\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}}";
  int good = 0, total = 0;
  for (uint64_t seed = 1; seed <= 5; seed++) {
    struct tpe *t = make(space, NULL, SPEC_MODE_MIN, seed);
    double v[50];
    cJSON *a = run(t, pick_c, 50, v);
    for (int i = 10; i < 50; i++, total++)
      good += strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(a, i), "opt")->valuestring, "c") == 0;
    cJSON_Delete(a);
    tpe_free(t);
  }
  ck_assert_msg(good > total * 6 / 10, "good choice %d of %d times", good, total);
}
END_TEST

/* With an uninformative objective the log domain spreads over its decades
 * (as loguniform does), not bunched in the top one. */
static uint64_t mixbits(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  return x ^ (x >> 33);
}

static double noise(const cJSON *cfg) {
  return (double)(mixbits((uint64_t)(num(cfg, "x") * 1e15)) >> 11) * 0x1.0p-53;
}

START_TEST(log_domain_spread) {
  struct tpe *t = make("{\"x\": {\"type\": \"loguniform\", \"lower\": 1e-6, \"upper\": 1}}", NULL,
                       SPEC_MODE_MIN, 3);
  double v[300];
  int decade[6] = {0};
  cJSON *a = run(t, noise, 300, v), *c;
  cJSON_ArrayForEach(c, a) {
    double x = num(c, "x");
    ck_assert(x >= 1e-6 && x < 1);
    int d = (int)floor(-log10(x));
    decade[d > 5 ? 5 : d]++;
  }
  for (int d = 0; d < 6; d++)
    ck_assert_msg(decade[d] >= 10 && decade[d] <= 150, "decade 1e-%d holds %d of 300", d + 1,
                  decade[d]);
  cJSON_Delete(a);
  tpe_free(t);
}
END_TEST

/* Integer domains: TPE's best beats random search's on most seeds. */
static double int_obj(const cJSON *cfg) {
  return fabs(num(cfg, "n") - 37) + fabs(log2(num(cfg, "w")) - 5) + fabs(num(cfg, "k") - 60);
}

START_TEST(integer_domains_converge) {
  const char *space = "{\"n\": {\"type\": \"randint\", \"lower\": 0, \"upper\": 100},"
                      " \"w\": {\"type\": \"pow2\", \"lower\": 1, \"upper\": 1024},"
                      " \"k\": {\"type\": \"qrandint\", \"lower\": 0, \"upper\": 200, \"q\": 20}}";
  int wins = 0;
  for (uint64_t seed = 1; seed <= 7; seed++) {
    struct tpe *t = make(space, NULL, SPEC_MODE_MIN, seed);
    struct tpe *r = make(space, "{\"n_startup_trials\": 100000}", SPEC_MODE_MIN, seed);
    double v[80], w[80], best = INFINITY, rbest = INFINITY;
    cJSON *a = run(t, int_obj, 80, v), *c;
    cJSON_Delete(run(r, int_obj, 80, w));
    cJSON_ArrayForEach(c, a) {
      ck_assert(num(c, "n") == floor(num(c, "n")));
      ck_assert(fmod(num(c, "k"), 20) == 0);
    }
    for (int i = 0; i < 80; i++) best = fmin(best, v[i]), rbest = fmin(rbest, w[i]);
    wins += best < rbest;
    cJSON_Delete(a);
    tpe_free(t), tpe_free(r);
  }
  ck_assert_msg(wins >= 5, "TPE beat random on %d of 7 seeds", wins);
}
END_TEST

/* The same observations in any order give the same suggestion; another
 * index gives another one. */
START_TEST(deterministic) {
  const char *space = every_domain;
  struct tpe *a = make(space, NULL, SPEC_MODE_MIN, 11);
  struct tpe *b = make(space, NULL, SPEC_MODE_MIN, 11);
  double v[30];
  cJSON *all = run(a, every_objective, 30, v);
  for (int i = 29; i >= 0; i--)
    ck_assert_int_eq(tpe_observe(b, 1000 + i, cJSON_GetArrayItem(all, i), v[i], TPE_FINISHED), 0);
  /* A replaced observation counts once. */
  ck_assert_int_eq(tpe_observe(b, 1005, cJSON_GetArrayItem(all, 5), v[5], TPE_FINISHED), 0);
  cJSON *x = NULL, *y = NULL, *z = NULL;
  ck_assert_int_eq(tpe_suggest(a, 30, NULL, &x), 0);
  ck_assert_int_eq(tpe_suggest(b, 30, NULL, &y), 0);
  ck_assert_int_eq(tpe_suggest(b, 31, NULL, &z), 0);
  ck_assert(cJSON_Compare(x, y, 1));
  ck_assert(!cJSON_Compare(x, z, 1));
  cJSON_Delete(x), cJSON_Delete(y), cJSON_Delete(z), cJSON_Delete(all);
  tpe_free(a), tpe_free(b);
}
END_TEST

/* Finished trials without a value do not end the startup phase; running
 * trials change suggestions only with constant_liar. */
START_TEST(running_and_failed_trials) {
  const char *space = "{\"x\": {\"type\": \"uniform\", \"lower\": -10, \"upper\": 10}}";
  struct tpe *plain = make(space, "{\"n_startup_trials\": 3}", SPEC_MODE_MIN, 2);
  struct tpe *liar =
      make(space, "{\"n_startup_trials\": 3, \"constant_liar\": true}", SPEC_MODE_MIN, 2);
  cJSON *cfg = parse("{\"x\": 1}");
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(tpe_observe(plain, i, cfg, NAN, TPE_FINISHED), 0);
    ck_assert(tpe_in_startup(plain));
  }
  cJSON_Delete(cfg);
  double v[20];
  cJSON_Delete(run(plain, quad, 20, v));
  cJSON_Delete(run(liar, quad, 20, v));
  cJSON *p0 = NULL, *l0 = NULL, *p1 = NULL, *l1 = NULL;
  ck_assert_int_eq(tpe_suggest(plain, 20, NULL, &p0), 0);
  ck_assert_int_eq(tpe_suggest(liar, 20, NULL, &l0), 0);
  /* Five running trials sitting on the suggestion. */
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(tpe_observe(plain, 5000 + i, p0, NAN, TPE_RUNNING), 0);
    ck_assert_int_eq(tpe_observe(liar, 5000 + i, l0, NAN, TPE_RUNNING), 0);
  }
  ck_assert_int_eq(tpe_suggest(plain, 20, NULL, &p1), 0);
  ck_assert_int_eq(tpe_suggest(liar, 20, NULL, &l1), 0);
  ck_assert(cJSON_Compare(p0, p1, 1));
  ck_assert(!cJSON_Compare(l0, l1, 1));
  cJSON_Delete(p0), cJSON_Delete(l0), cJSON_Delete(p1), cJSON_Delete(l1);
  tpe_free(plain), tpe_free(liar);
}
END_TEST

static int is_bool(const cJSON *sa, const char *k, int want) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(sa, k);
  return cJSON_IsBool(v) && cJSON_IsTrue(v) == want;
}

static int is_num(const cJSON *sa, const char *k, double want) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(sa, k);
  return cJSON_IsNumber(v) && v->valuedouble == want;
}

/* 20 sequential trials, then three running ones on the last config and one
 * more suggestion: what multivariate and constant_liar both change. */
static cJSON *trace(const char *alg) {
  const char *space = "{\"x\": {\"type\": \"uniform\", \"lower\": -5, \"upper\": 5},"
                      " \"y\": {\"type\": \"loguniform\", \"lower\": 1e-5, \"upper\": 1}}";
  struct tpe *t = make(space, alg, SPEC_MODE_MIN, 11);
  double v[20];
  cJSON *all = run(t, bowl, 20, v), *c = NULL;
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(tpe_observe(t, 9000 + i, cJSON_GetArrayItem(all, 19), NAN, TPE_RUNNING), 0);
  ck_assert_int_eq(tpe_suggest(t, 20, NULL, &c), 0);
  cJSON_AddItemToArray(all, c);
  tpe_free(t);
  return all;
}

/* tpe_options_fill writes today's defaults (Optuna 5.0's TPESampler():
 * multivariate and constant_liar on) for every absent option and keeps the
 * given ones; tpe_create reads an absent option as its original default,
 * so a config stored before the change (no such field) replays as it ran. */
START_TEST(defaults_written_absent_is_original) {
  cJSON *sa = parse("{\"type\": \"tpe\"}");
  ck_assert_int_eq(tpe_options_fill(sa, 1), 0);
  ck_assert(is_bool(sa, "multivariate", 1) && is_bool(sa, "constant_liar", 1));
  ck_assert(is_num(sa, "n_startup_trials", 10) && is_num(sa, "n_ei_candidates", 24));
  ck_assert(is_num(sa, "prior_weight", 1) && is_bool(sa, "consider_prior", 1));
  ck_assert(is_bool(sa, "consider_magic_clip", 1) && is_bool(sa, "consider_endpoints", 0));
  ck_assert(is_num(sa, "gamma", 0.1) && is_num(sa, "gamma_max", 25));
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(sa, "weights")->valuestring, "ramp");
  ck_assert_int_eq(cJSON_GetArraySize(sa), 12); /* type and the eleven options */
  ck_assert_int_eq(tpe_options_check(sa, "search_alg", NULL), 0);
  char *filled = cJSON_PrintUnformatted(sa);
  cJSON_Delete(sa);

  sa = parse("{\"type\": \"tpe\", \"multivariate\": false, \"n_startup_trials\": 3}");
  ck_assert_int_eq(tpe_options_fill(sa, 1), 0);
  ck_assert(is_bool(sa, "multivariate", 0) && is_num(sa, "n_startup_trials", 3));
  ck_assert(is_bool(sa, "constant_liar", 1));
  cJSON_Delete(sa);
  sa = parse("[1]");
  ck_assert_int_eq(tpe_options_fill(sa, 1), -EINVAL);
  cJSON_Delete(sa);

  /* Absent: the original defaults, exactly; filled: another trace. */
  cJSON *absent = trace("{\"type\": \"tpe\"}");
  cJSON *original = trace("{\"type\": \"tpe\", \"multivariate\": false, \"constant_liar\": false}");
  cJSON *liar_only = trace("{\"type\": \"tpe\", \"constant_liar\": true}");
  cJSON *today = trace(filled);
  ck_assert(cJSON_Compare(absent, original, 1));
  ck_assert(!cJSON_Compare(absent, liar_only, 1));
  ck_assert(!cJSON_Compare(absent, today, 1));
  cJSON_Delete(absent), cJSON_Delete(original), cJSON_Delete(liar_only), cJSON_Delete(today);
  free(filled);
}
END_TEST

/* Fixed keys are copied; the rest is sampled; unknown keys are refused. */
START_TEST(fixed_partial_config) {
  struct tpe *t = make(every_domain, "{\"n_startup_trials\": 2}", SPEC_MODE_MIN, 4);
  double v[5];
  cJSON_Delete(run(t, every_objective, 5, v));
  cJSON *fixed = parse("{\"u\": 2.5, \"nest\": {\"opt\": \"adam\"}, \"g\": 3}"), *out = NULL;
  ck_assert_int_eq(tpe_suggest(t, 5, fixed, &out), 0);
  check_every_domain(out);
  ck_assert(num(out, "u") == 2.5 && num(out, "g") == 3);
  ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(out, "nest"), "opt")->valuestring,
                   "adam");
  cJSON_Delete(out);
  cJSON_Delete(fixed);
  fixed = parse("{\"nope\": 1}");
  ck_assert_int_eq(tpe_suggest(t, 5, fixed, &out), -EINVAL);
  ck_assert_ptr_null(out);
  cJSON_Delete(fixed);
  tpe_free(t);
}
END_TEST

/* Optuna's constrained TPE: minimise x on [0, 1] subject to x >= 0.6 (the
 * violation 0.6 - x below it). Ranking feasible trials first by value, then
 * the infeasible ones by violation, puts "below" just above 0.6, so most
 * suggestions after the startup land near the constrained optimum; ranked
 * by value alone (no violations set) they chase x = 0, which is infeasible. */
static int near_constrained_optimum(int constrained, uint64_t seed, double bound, double hi) {
  struct tpe *t = make("{\"x\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}}",
                       "{\"type\": \"tpe\", \"n_startup_trials\": 10}", SPEC_MODE_MIN, seed);
  int near = 0;
  for (int i = 0; i < 40; i++) {
    cJSON *cfg = NULL;
    ck_assert_int_eq(tpe_suggest(t, i, NULL, &cfg), 0);
    double x = num(cfg, "x");
    if (i >= 10 && x >= bound && x <= hi) near++;
    ck_assert_int_eq(tpe_observe(t, 1000 + i, cfg, x, TPE_FINISHED), 0);
    if (constrained) ck_assert_int_eq(tpe_set_violation(t, 1000 + i, x < bound ? bound - x : 0), 0);
    cJSON_Delete(cfg);
  }
  ck_assert_int_eq(tpe_set_violation(t, 1, 0.5), -ENOENT);
  tpe_free(t);
  return near;
}

START_TEST(constraints_rank_infeasible_last) {
  int with = 0, without = 0;
  for (uint64_t seed = 1; seed <= 3; seed++) {
    with += near_constrained_optimum(1, seed, 0.6, 0.8);
    without += near_constrained_optimum(0, seed, 0.6, 0.8);
  }
  /* 90 suggestions after the startup; random search puts 20% (18) in
   * [0.6, 0.8]. Seen: 40 constrained, 2 not. */
  ck_assert_msg(with >= 30, "constrained: %d of 90 near the constrained optimum", with);
  ck_assert_msg(without <= 10, "unconstrained: %d of 90 there", without);
  /* No feasible trial yet (x >= 0.95; 20 trials at x = 0, 0.045 ... 0.855):
   * the least violating ones (the largest x) are "below", so the search
   * moves up towards the bound; ranked by value it would go down to 0. */
  struct tpe *t = make("{\"x\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}}",
                       "{\"type\": \"tpe\", \"n_startup_trials\": 10}", SPEC_MODE_MIN, 9);
  for (int i = 0; i < 20; i++) {
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddNumberToObject(cfg, "x", 0.045 * i);
    ck_assert_int_eq(tpe_observe(t, i, cfg, 0.045 * i, TPE_FINISHED), 0);
    ck_assert_int_eq(tpe_set_violation(t, i, 0.95 - 0.045 * i), 0);
    cJSON_Delete(cfg);
  }
  int up = 0;
  for (int i = 20; i < 50; i++) {
    cJSON *cfg = NULL;
    ck_assert_int_eq(tpe_suggest(t, i, NULL, &cfg), 0);
    up += num(cfg, "x") > 0.6;
    cJSON_Delete(cfg);
  }
  tpe_free(t);
  /* Seen: 30 of 30 above 0.6; ranked by value, 0. */
  ck_assert_msg(up >= 20, "%d of 30 suggestions above 0.6", up);
}
END_TEST

static Suite *tpe_suite(void) {
  Suite *s = suite_create("tpe");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, options_errors);
  tcase_add_test(tc, startup_matches_space_generate);
  tcase_add_test(tc, every_domain_on_grid);
  tcase_add_test(tc, quadratic_concentrates);
  tcase_add_test(tc, multivariate_beats_random);
  tcase_add_test(tc, categorical_finds_good_choice);
  tcase_add_test(tc, log_domain_spread);
  tcase_add_test(tc, integer_domains_converge);
  tcase_add_test(tc, deterministic);
  tcase_add_test(tc, running_and_failed_trials);
  tcase_add_test(tc, fixed_partial_config);
  tcase_add_test(tc, constraints_rank_infeasible_last);
  tcase_add_test(tc, defaults_written_absent_is_original);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(tpe_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
