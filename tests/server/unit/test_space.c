/* Unit tests of space: bounds and distributions of every domain (KS and
 * chi-square with fixed seeds), grids in Ray's order, determinism. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "space.h"

static cJSON *gen(const char *space_json, int64_t n, uint64_t seed) {
  cJSON *space = cJSON_Parse(space_json), *out = NULL;
  struct validate_error err = {{0}, {0}};
  ck_assert_ptr_nonnull(space);
  int rc = space_generate(space, n, seed, &out, &err);
  ck_assert_msg(rc == 0, "%s: %s", err.path, err.message);
  int64_t count;
  ck_assert_int_eq(space_count(space, n, &count, NULL), 0);
  ck_assert_int_eq(cJSON_GetArraySize(out), count);
  cJSON_Delete(space);
  return out;
}

/* Draws n values of parameter "x". */
static double *draw(const char *domain_json, int n, uint64_t seed) {
  char buf[512];
  snprintf(buf, sizeof buf, "{\"x\": %s}", domain_json);
  cJSON *arr = gen(buf, n, seed), *c;
  double *v = malloc(sizeof *v * (size_t)n);
  int i = 0;
  cJSON_ArrayForEach(c, arr) {
    cJSON *x = cJSON_GetObjectItem(c, "x");
    ck_assert(cJSON_IsNumber(x));
    v[i++] = x->valuedouble;
  }
  cJSON_Delete(arr);
  return v;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Kolmogorov-Smirnov statistic of u (modified in place) against U(0,1). */
static double ks_uniform(double *u, int n) {
  double d = 0;
  qsort(u, (size_t)n, sizeof *u, cmp_double);
  for (int i = 0; i < n; i++) {
    double a = fabs((i + 1.0) / n - u[i]), b = fabs(u[i] - (double)i / n);
    d = fmax(d, fmax(a, b));
  }
  return d;
}

#define N 5000
/* KS critical value at alpha = 0.001. */
#define KS_CRIT (1.95 / sqrt(N))

START_TEST(uniform_bounds_and_ks) {
  double *v = draw("{\"type\": \"uniform\", \"lower\": -2, \"upper\": 3}", N, 1);
  for (int i = 0; i < N; i++) {
    ck_assert(v[i] >= -2 && v[i] < 3);
    v[i] = (v[i] + 2) / 5;
  }
  double d = ks_uniform(v, N);
  ck_assert_msg(d < KS_CRIT, "KS D %.4f", d);
  free(v);
}
END_TEST

START_TEST(loguniform_is_uniform_in_log) {
  double lo = 1e-4, hi = 1e-1;
  double *v = draw("{\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1e-1}", N, 2);
  double *lin = malloc(sizeof *lin * N);
  for (int i = 0; i < N; i++) {
    ck_assert(v[i] >= lo && v[i] < hi);
    lin[i] = (v[i] - lo) / (hi - lo);
    v[i] = (log(v[i]) - log(lo)) / (log(hi) - log(lo));
  }
  double d = ks_uniform(v, N);
  ck_assert_msg(d < KS_CRIT, "KS D %.4f", d);
  /* The test has power: the same values are far from linear-uniform. */
  ck_assert(ks_uniform(lin, N) > 10 * KS_CRIT);
  free(v);
  free(lin);
}
END_TEST

static void chi2_counts(const int *count, int k, int n, double crit) {
  double e = (double)n / k, chi2 = 0;
  for (int i = 0; i < k; i++) chi2 += (count[i] - e) * (count[i] - e) / e;
  ck_assert_msg(chi2 < crit, "chi2 %.2f >= %.2f", chi2, crit);
}

START_TEST(randint_upper_exclusive_uniform) {
  double *v = draw("{\"type\": \"randint\", \"lower\": -3, \"upper\": 7}", N, 3);
  int count[10] = {0};
  for (int i = 0; i < N; i++) {
    ck_assert(v[i] == floor(v[i]));
    ck_assert(v[i] >= -3 && v[i] <= 6);
    count[(int)v[i] + 3]++;
  }
  for (int i = 0; i < 10; i++) ck_assert_int_gt(count[i], 0);
  chi2_counts(count, 10, N, 27.88); /* 9 dof, alpha 0.001 */
  free(v);
}
END_TEST

START_TEST(pow2_only_powers_in_range) {
  double *v = draw("{\"type\": \"pow2\", \"lower\": 4, \"upper\": 256}", N, 4);
  int count[7] = {0};
  for (int i = 0; i < N; i++) {
    int e;
    ck_assert(frexp(v[i], &e) == 0.5);
    ck_assert(v[i] >= 4 && v[i] <= 256);
    count[e - 3]++;
  }
  chi2_counts(count, 7, N, 22.46); /* 6 dof: uniform over exponents 2..8 */
  free(v);
  v = draw("{\"type\": \"pow2\", \"lower\": 8, \"upper\": 8}", 20, 4);
  for (int i = 0; i < 20; i++) ck_assert(v[i] == 8);
  free(v);
}
END_TEST

START_TEST(quantised_types) {
  double *v = draw("{\"type\": \"quniform\", \"lower\": 0.1, \"upper\": 0.9, \"q\": 0.2}", N, 5);
  int seen[5] = {0};
  for (int i = 0; i < N; i++) {
    double k = v[i] / 0.2;
    ck_assert(fabs(k - round(k)) < 1e-9);
    ck_assert(v[i] >= 0.2 - 1e-12 && v[i] <= 0.8 + 1e-12);
    seen[(int)round(k) - 1]++;
  }
  for (int i = 0; i < 4; i++) ck_assert_int_gt(seen[i], 0);
  free(v);

  /* 0.3 is 3 * 0.1 only up to an ulp; the bounds still hold exactly. */
  v = draw("{\"type\": \"quniform\", \"lower\": 0.1, \"upper\": 0.3, \"q\": 0.1}", 500, 5);
  for (int i = 0; i < 500; i++) ck_assert_msg(v[i] >= 0.1 && v[i] <= 0.3, "%.17g", v[i]);
  free(v);

  v = draw("{\"type\": \"qloguniform\", \"lower\": 1, \"upper\": 1000, \"q\": 5}", N, 6);
  for (int i = 0; i < N; i++) {
    ck_assert(fmod(v[i], 5) == 0);
    ck_assert(v[i] >= 5 && v[i] <= 1000);
  }
  free(v);

  v = draw("{\"type\": \"qrandint\", \"lower\": -21, \"upper\": 12, \"q\": 3}", N, 7);
  int count[12] = {0};
  for (int i = 0; i < N; i++) {
    ck_assert(fmod(v[i], 3) == 0);
    ck_assert(v[i] >= -21 && v[i] <= 12); /* upper inclusive */
    count[(int)(v[i] + 21) / 3]++;
  }
  chi2_counts(count, 12, N, 31.26); /* 11 dof */
  free(v);

  v = draw("{\"type\": \"lograndint\", \"lower\": 1, \"upper\": 100}", N, 8);
  int small = 0;
  for (int i = 0; i < N; i++) {
    ck_assert(v[i] == floor(v[i]));
    ck_assert(v[i] >= 1 && v[i] <= 99);
    small += v[i] < 10;
  }
  /* floor(exp(U(log 1, log 100))) < 10 exactly when the exponent is
   * below log 10: half of the draws. */
  ck_assert_msg(abs(small - N / 2) < 200, "%d below 10", small);
  free(v);
}
END_TEST

START_TEST(randn_moments) {
  double *v = draw("{\"type\": \"randn\", \"mean\": 3, \"sd\": 2}", N, 9);
  double s = 0, s2 = 0;
  for (int i = 0; i < N; i++) {
    s += v[i];
    s2 += v[i] * v[i];
  }
  double mean = s / N, sd = sqrt(s2 / N - mean * mean);
  ck_assert_msg(fabs(mean - 3) < 0.1 && fabs(sd - 2) < 0.1, "%g %g", mean, sd);
  free(v);
  v = draw("{\"type\": \"randn\"}", 100, 9); /* defaults mean 0, sd 1 */
  free(v);
}
END_TEST

START_TEST(choice_uniform_over_values) {
  cJSON *arr = gen("{\"c\": {\"type\": \"choice\", \"values\": [2, \"adam\", [1, 2], {\"k\": 1}]}}",
                   4000, 10),
        *c;
  int count[4] = {0};
  cJSON_ArrayForEach(c, arr) {
    cJSON *x = cJSON_GetObjectItem(c, "c");
    if (cJSON_IsNumber(x) && x->valuedouble == 2)
      count[0]++;
    else if (cJSON_IsString(x) && strcmp(x->valuestring, "adam") == 0)
      count[1]++;
    else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 2)
      count[2]++;
    else if (cJSON_IsObject(x) && cJSON_GetObjectItem(x, "k"))
      count[3]++;
    else
      ck_abort_msg("unexpected choice value");
  }
  chi2_counts(count, 4, 4000, 16.27);
  cJSON_Delete(arr);
}
END_TEST

START_TEST(grid_product_times_samples_in_ray_order) {
  /* Grids sorted by path ("a" before "b"); the first varies fastest;
   * num_samples repeats the whole grid. */
  cJSON *arr =
      gen("{\"b\": {\"grid_search\": [10, 20, 30]}, \"a\": {\"grid_search\": [\"x\", \"y\"]},"
          " \"r\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}, \"k\": 7}",
          2, 0);
  ck_assert_int_eq(cJSON_GetArraySize(arr), 12);
  const char *want_a[6] = {"x", "y", "x", "y", "x", "y"};
  const double want_b[6] = {10, 10, 20, 20, 30, 30};
  for (int i = 0; i < 12; i++) {
    cJSON *c = cJSON_GetArrayItem(arr, i);
    ck_assert_str_eq(cJSON_GetObjectItem(c, "a")->valuestring, want_a[i % 6]);
    ck_assert(cJSON_GetObjectItem(c, "b")->valuedouble == want_b[i % 6]);
    ck_assert(cJSON_GetObjectItem(c, "k")->valuedouble == 7);
    double r = cJSON_GetObjectItem(c, "r")->valuedouble;
    ck_assert(r >= 0 && r < 1);
  }
  /* The random part differs between repeats of the same grid point. */
  ck_assert(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, 0), "r")->valuedouble !=
            cJSON_GetObjectItem(cJSON_GetArrayItem(arr, 6), "r")->valuedouble);
  cJSON_Delete(arr);

  cJSON *space = cJSON_Parse(
      "{\"a\": {\"grid_search\": [1, 2, 3]}, \"n\": {\"m\": {\"grid_search\": [1, 2]}}}");
  int64_t count;
  ck_assert_int_eq(space_count(space, 5, &count, NULL), 0);
  ck_assert_int_eq(count, 30);
  cJSON *out;
  ck_assert_int_eq(space_generate(space, 5, 1, &out, NULL), 0);
  ck_assert_int_eq(cJSON_GetArraySize(out), 30);
  /* A nested grid sorts after "a": ("a",) < ("n", "m"). */
  cJSON *c3 = cJSON_GetArrayItem(out, 3);
  ck_assert(cJSON_GetObjectItem(c3, "a")->valuedouble == 1);
  ck_assert(cJSON_GetObjectItem(cJSON_GetObjectItem(c3, "n"), "m")->valuedouble == 2);
  cJSON_Delete(out);
  struct validate_error err;
  ck_assert_int_eq(space_count(space, 40000, &count, &err), -EINVAL);
  ck_assert_str_eq(err.path, "num_samples");
  ck_assert_str_eq(err.message,
                   "grid combinations (6) x num_samples (40000) exceeds 100000 trials");
  cJSON_Delete(space);
}
END_TEST

START_TEST(nested_constants_and_domains) {
  cJSON *arr = gen(
      "{\"opt\": {\"name\": \"sgd\", \"inner\": {\"lr\": {\"type\": \"loguniform\", \"lower\": "
      "0.001, \"upper\": 0.1}}},"
      " \"list\": [1, 2, {\"type\": \"uniform\"}], \"flag\": true, \"none\": null, \"s\": \"x\"}",
      3, 1);
  cJSON *c = cJSON_GetArrayItem(arr, 0);
  cJSON *opt = cJSON_GetObjectItem(c, "opt");
  ck_assert_str_eq(cJSON_GetObjectItem(opt, "name")->valuestring, "sgd");
  double lr = cJSON_GetObjectItem(cJSON_GetObjectItem(opt, "inner"), "lr")->valuedouble;
  ck_assert(lr >= 0.001 && lr < 0.1);
  /* Arrays are constants, taken as they are. */
  char *list = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "list"));
  ck_assert_str_eq(list, "[1,2,{\"type\":\"uniform\"}]");
  free(list);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "flag")));
  ck_assert(cJSON_IsNull(cJSON_GetObjectItem(c, "none")));
  cJSON_Delete(arr);
  arr = gen("{}", 4, 1);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetArrayItem(arr, 3)), 0);
  cJSON_Delete(arr);
}
END_TEST

static const char *full_space =
    "{\"l1\": {\"type\": \"pow2\", \"lower\": 4, \"upper\": 256},"
    " \"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1e-1},"
    " \"bs\": {\"type\": \"choice\", \"values\": [2, 4, 8, 16]},"
    " \"u\": {\"type\": \"quniform\", \"lower\": 0, \"upper\": 1, \"q\": 0.1},"
    " \"n\": {\"type\": \"randn\", \"mean\": 0, \"sd\": 1},"
    " \"i\": {\"type\": \"randint\", \"lower\": 0, \"upper\": 1000},"
    " \"g\": {\"grid_search\": [1, 2]}, \"momentum\": 0.9}";

START_TEST(determinism) {
  cJSON *a = gen(full_space, 20, 42), *b = gen(full_space, 20, 42), *c = gen(full_space, 20, 43);
  char *ja = cJSON_PrintUnformatted(a), *jb = cJSON_PrintUnformatted(b),
       *jc = cJSON_PrintUnformatted(c);
  ck_assert_str_eq(ja, jb);
  ck_assert_str_ne(ja, jc);
  /* Trial i's config does not depend on how many trials there are. */
  cJSON *d = gen(full_space, 8, 42);
  for (int i = 0; i < 8; i++) {
    char *x = cJSON_PrintUnformatted(cJSON_GetArrayItem(a, i));
    char *y = cJSON_PrintUnformatted(cJSON_GetArrayItem(d, i));
    ck_assert_str_eq(x, y);
    free(x);
    free(y);
  }
  /* Pinned values of trial 0, seed 42 (computed on x86-64 glibc): the
   * integer draws are pure integer arithmetic and must match exactly
   * anywhere; the float ones allow a last-bit libm difference. */
  cJSON *t0 = cJSON_GetArrayItem(a, 0);
  ck_assert(cJSON_GetObjectItem(t0, "l1")->valuedouble == 8);
  ck_assert(cJSON_GetObjectItem(t0, "bs")->valuedouble == 4);
  ck_assert(cJSON_GetObjectItem(t0, "i")->valuedouble == 514);
  ck_assert(cJSON_GetObjectItem(t0, "g")->valuedouble == 1);
  ck_assert(cJSON_GetObjectItem(t0, "momentum")->valuedouble == 0.9);
  ck_assert(fabs(cJSON_GetObjectItem(t0, "lr")->valuedouble / 0.042679034615760579 - 1) < 1e-14);
  ck_assert(fabs(cJSON_GetObjectItem(t0, "u")->valuedouble - 0.1) < 1e-15);
  ck_assert(fabs(cJSON_GetObjectItem(t0, "n")->valuedouble / 1.5144061024417699 - 1) < 1e-14);
  free(ja);
  free(jb);
  free(jc);
  cJSON_Delete(a);
  cJSON_Delete(b);
  cJSON_Delete(c);
  cJSON_Delete(d);
}
END_TEST

/* space_sample is what space_generate draws for one domain: trial i of a
 * one-domain space is space_sample on the stream rng_mix(seed, i), for every
 * domain type (tpe.c's random phase relies on it). */
START_TEST(sample_is_what_generate_draws) {
  static const char *const doms[] = {
      "{\"type\": \"choice\", \"values\": [\"a\", 2, {\"k\": [1]}]}",
      "{\"type\": \"uniform\", \"lower\": -1, \"upper\": 3}",
      "{\"type\": \"quniform\", \"lower\": 0, \"upper\": 1, \"q\": 0.1}",
      "{\"type\": \"loguniform\", \"lower\": 1e-5, \"upper\": 1}",
      "{\"type\": \"qloguniform\", \"lower\": 1, \"upper\": 1000, \"q\": 5}",
      "{\"type\": \"randint\", \"lower\": -3, \"upper\": 7}",
      "{\"type\": \"lograndint\", \"lower\": 1, \"upper\": 1000}",
      "{\"type\": \"qrandint\", \"lower\": 0, \"upper\": 100, \"q\": 7}",
      "{\"type\": \"randn\", \"mean\": 2, \"sd\": 0.5}",
      "{\"type\": \"pow2\", \"lower\": 4, \"upper\": 256}",
  };
  for (size_t d = 0; d < sizeof doms / sizeof *doms; d++) {
    char buf[512];
    cJSON *dom = cJSON_Parse(doms[d]), *arr, *c;
    int64_t i = 0;
    ck_assert_ptr_nonnull(dom);
    snprintf(buf, sizeof buf, "{\"x\": %s}", doms[d]);
    arr = gen(buf, 50, 9);
    cJSON_ArrayForEach(c, arr) {
      struct rng r;
      cJSON *v;
      rng_seed(&r, rng_mix(9, (uint64_t)i));
      v = space_sample(dom, &r);
      ck_assert_msg(cJSON_Compare(v, cJSON_GetObjectItem(c, "x"), 1), "%s: trial %lld differs",
                    doms[d], (long long)i);
      cJSON_Delete(v);
      i++;
    }
    cJSON_Delete(arr);
    cJSON_Delete(dom);
  }
}
END_TEST

START_TEST(integers_are_integral) {
  cJSON *arr = gen(full_space, 50, 1), *c;
  cJSON_ArrayForEach(c, arr) {
    const char *ints[] = {"l1", "i", "bs", "g"};
    for (int k = 0; k < 4; k++) {
      cJSON *x = cJSON_GetObjectItem(c, ints[k]);
      char *s = cJSON_PrintUnformatted(x);
      ck_assert_msg(strchr(s, '.') == NULL && strchr(s, 'e') == NULL, "%s = %s", ints[k], s);
      free(s);
    }
  }
  cJSON_Delete(arr);
}
END_TEST

START_TEST(bad_space_rejected) {
  struct {
    const char *space, *path, *message;
  } cases[] = {
      {"{\"lr\": {\"type\": \"loguniform\", \"lower\": 0, \"upper\": 1}}", "param_space.lr.lower",
       "loguniform needs 0 < lower < upper"},
      {"{\"x\": {\"type\": \"bogus\"}}", "param_space.x.type",
       "unknown domain type 'bogus' (expected one of choice, uniform, quniform, loguniform, "
       "qloguniform, randint, lograndint, qrandint, randn, pow2)"},
      {"{\"x\": {\"grid_search\": []}}", "param_space.x.grid_search",
       "grid_search needs an array of 1 to 10000 values"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cJSON *space = cJSON_Parse(cases[i].space), *out = (cJSON *)1;
    struct validate_error err;
    ck_assert_int_eq(space_generate(space, 1, 0, &out, &err), -EINVAL);
    ck_assert_ptr_null(out);
    ck_assert_str_eq(err.path, cases[i].path);
    ck_assert_str_eq(err.message, cases[i].message);
    cJSON_Delete(space);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("space");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, uniform_bounds_and_ks);
  tcase_add_test(tc, loguniform_is_uniform_in_log);
  tcase_add_test(tc, randint_upper_exclusive_uniform);
  tcase_add_test(tc, pow2_only_powers_in_range);
  tcase_add_test(tc, quantised_types);
  tcase_add_test(tc, randn_moments);
  tcase_add_test(tc, choice_uniform_over_values);
  tcase_add_test(tc, grid_product_times_samples_in_ray_order);
  tcase_add_test(tc, nested_constants_and_domains);
  tcase_add_test(tc, determinism);
  tcase_add_test(tc, sample_is_what_generate_draws);
  tcase_add_test(tc, integers_are_integral);
  tcase_add_test(tc, bad_space_rejected);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
