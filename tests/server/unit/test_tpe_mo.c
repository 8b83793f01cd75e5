/* Unit tests of the TPE searcher with several objectives: the hypervolume
 * (server/core/tpe_mo.c) against inclusion-exclusion, the split against a
 * hand-worked set and a brute-force greedy subset selection, and tpe.c's
 * use of them (directions, the below group's flat weights, the defaults
 * for several objectives). */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "tpe.h"
#include "hypervolume.h"
#include "tpe_mo.h"

/* The volume of the union of the boxes [p_i, ref] by inclusion-exclusion
 * over every non-empty subset (n <= 12): the definition itself. */
static double hv_brute(const double *pts, int n, int d, const double *ref) {
  double total = 0;
  for (unsigned mask = 1; mask < (1u << n); mask++) {
    double vol = 1;
    int bits = 0;
    for (int j = 0; j < d; j++) {
      double mx = -INFINITY;
      for (int i = 0; i < n; i++)
        if (mask & (1u << i)) mx = fmax(mx, pts[i * d + j]);
      vol *= fmax(ref[j] - mx, 0);
    }
    for (int i = 0; i < n; i++) bits += (mask >> i) & 1;
    total += bits % 2 ? vol : -vol;
  }
  return total;
}

static double hv(const double *pts, int n, int d, const double *ref) {
  double v = -1;
  ck_assert_int_eq(hypervolume_min(pts, (size_t)n, d, ref, &v), 0);
  return v;
}

/* Random sets in 1 to 4 dimensions, some points past the reference point,
 * some repeated, coordinates on a coarse grid so ties happen. */
START_TEST(hypervolume_matches_inclusion_exclusion) {
  struct rng r;
  rng_seed(&r, 7);
  for (int round = 0; round < 300; round++) {
    int d = 1 + round % 4, n = 1 + (int)rng_int_range(&r, 0, 10);
    double pts[12 * 4], ref[4];
    for (int j = 0; j < d; j++) ref[j] = 1.0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < d; j++)
        pts[i * d + j] =
            i && rng_uniform(&r) < 0.1 ? pts[(i - 1) * d + j] : floor(rng_uniform(&r) * 12) / 10;
    double want = hv_brute(pts, n, d, ref), got = hv(pts, n, d, ref);
    ck_assert_msg(fabs(got - want) <= 1e-12 * fmax(1, fabs(want)),
                  "round %d (d=%d, n=%d): %.17g, brute force %.17g", round, d, n, got, want);
  }
  double none[] = {2, 0};
  ck_assert(hv(none, 1, 2, (double[]){1, 1}) == 0);
  ck_assert(hv(none, 0, 2, (double[]){1, 1}) == 0);
  double v;
  ck_assert_int_eq(hypervolume_min(none, 1, 0, none, &v), -EINVAL);
}
END_TEST

static void split(const double *loss, int n, int d, int nb, unsigned char *below) {
  ck_assert_int_eq(tpe_mo_split(loss, (size_t)n, d, (size_t)nb, below), 0);
}

/* Fronts {(1,5), (2,3), (4,1)}, {(2,6), (3,4), (5,2)}, {(6,6)}. Worked by
 * hand: in the first (reference (4.4, 5.5)), alone (2,3) adds 6.0, (4,1)
 * 1.8, (1,5) 1.7; next to (2,3), (4,1) adds 0.8 and (1,5) 0.5. In the
 * second (reference (5.5, 6.6)), alone (3,4) adds 6.5, (5,2) 2.3, (2,6)
 * 2.1; next to (3,4), (5,2) adds 1.0 and (2,6) 0.6. */
START_TEST(split_hand_made) {
  static const double base[7][2] = {{2, 6}, {1, 5}, {6, 6}, {3, 4}, {2, 3}, {5, 2}, {4, 1}};
  static const int want[8][7] = {
      /* below for n_below 0..7, rows in base's order */
      {0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 1, 0, 0}, {0, 0, 0, 0, 1, 0, 1}, {0, 1, 0, 0, 1, 0, 1},
      {0, 1, 0, 1, 1, 0, 1}, {0, 1, 0, 1, 1, 1, 1}, {1, 1, 0, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1},
  };
  unsigned char below[7];
  double loss[14];
  /* Each permutation of the rows (a rotation by k): the same points kept. */
  for (int k = 0; k < 7; k++) {
    for (int i = 0; i < 7; i++) memcpy(loss + 2 * i, base[(i + k) % 7], sizeof base[0]);
    for (int nb = 0; nb <= 7; nb++) {
      split(loss, 7, 2, nb, below);
      for (int i = 0; i < 7; i++)
        ck_assert_msg(below[i] == want[nb][(i + k) % 7], "rotation %d, n_below %d, point (%g, %g)",
                      k, nb, loss[2 * i], loss[2 * i + 1]);
    }
  }
  /* With (3,7) and (6,3) the third front is {(3,7), (6,3)} and (6,6) moves
   * to the fourth: n_below 7 takes the first two whole and (6,3) (reference
   * (6.6, 7.7): it adds 2.82, (3,7) 2.52) from the third alone. */
  double more[18];
  memcpy(more, base, sizeof base);
  more[14] = 3, more[15] = 7, more[16] = 6, more[17] = 3;
  unsigned char b9[9];
  split(more, 9, 2, 7, b9);
  static const unsigned char want9[9] = {1, 1, 0, 1, 1, 1, 1, 0, 1};
  for (int i = 0; i < 9; i++) ck_assert_msg(b9[i] == want9[i], "n_below 7 of 9: point %d", i);
  /* Too few distinct points in the last front: all of them, then copies
   * first come first served. */
  double dup[] = {1, 4, 2, 3, 2, 3, 3, 2, 2, 3};
  split(dup, 5, 2, 4, below);
  ck_assert(below[0] && below[1] && below[2] && below[3] && !below[4]);
  /* Past n: everything. */
  split(dup, 5, 2, 9, below);
  ck_assert(below[0] && below[1] && below[2] && below[3] && below[4]);
  ck_assert_int_eq(tpe_mo_split(dup, 5, 0, 2, below), -EINVAL);
}
END_TEST

/* One front of random 3-D points (on the plane x + y + z = 1, so none
 * dominates another): the split's choice equals a greedy selection by
 * inclusion-exclusion contributions, ties to the lexicographically first. */
START_TEST(split_hssp_matches_brute_greedy) {
  struct rng r;
  rng_seed(&r, 11);
  for (int round = 0; round < 40; round++) {
    int n = 4 + round % 8, nb = 1 + (int)rng_int_range(&r, 0, n - 1), d = 3;
    double loss[12 * 3], ref[3] = {-INFINITY, -INFINITY, -INFINITY}, sel[12 * 3];
    unsigned char below[12], taken[12] = {0};
    for (int i = 0; i < n; i++) {
      double a = rng_uniform(&r), b = rng_uniform(&r) * (1 - a);
      loss[i * 3] = a, loss[i * 3 + 1] = b, loss[i * 3 + 2] = 1 - a - b;
    }
    for (int i = 0; i < n; i++)
      for (int j = 0; j < d; j++) ref[j] = fmax(ref[j], loss[i * 3 + j]);
    for (int j = 0; j < d; j++) ref[j] = fmax(1.1 * ref[j], 0.9 * ref[j]);
    for (int s = 0; s < nb; s++) {
      int best = -1;
      double bv = -1, base = s ? hv_brute(sel, s, d, ref) : 0;
      for (int i = 0; i < n; i++) {
        if (taken[i]) continue;
        memcpy(sel + s * 3, loss + i * 3, 3 * sizeof *sel);
        double c = hv_brute(sel, s + 1, d, ref) - base;
        if (c > bv) bv = c, best = i;
      }
      taken[best] = 1;
      memcpy(sel + s * 3, loss + best * 3, 3 * sizeof *sel);
    }
    split(loss, n, d, nb, below);
    for (int i = 0; i < n; i++)
      ck_assert_msg(below[i] == taken[i], "round %d (n=%d, n_below=%d): point %d", round, n, nb, i);
  }
}
END_TEST

/* Whether some point of loss (n x d) dominates point i. */
static int dominated_in(const double *loss, int n, int d, int i) {
  for (int k = 0; k < n; k++) {
    int le = 1, lt = 0;
    for (int j = 0; j < d; j++) {
      le &= loss[k * d + j] <= loss[i * d + j];
      lt |= loss[k * d + j] < loss[i * d + j];
    }
    if (le && lt) return 1;
  }
  return 0;
}

/* Each front point weighs what the front's hypervolume loses without it
 * (inclusion-exclusion), over the largest; dominated points 1e-12. */
START_TEST(weights_are_hypervolume_shares) {
  struct rng r;
  rng_seed(&r, 5);
  for (int round = 0; round < 60; round++) {
    int n = 2 + round % 9, d = 2 + round % 2;
    double loss[10 * 3], w[10], ref[3] = {-INFINITY, -INFINITY, -INFINITY}, want[10], mx = 0;
    /* Positive (a reference coordinate of 1e-12 would only test rounding). */
    for (int i = 0; i < n * d; i++) loss[i] = (1 + floor(rng_uniform(&r) * 8)) / 4;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < d; j++) ref[j] = fmax(ref[j], loss[i * d + j]);
    for (int j = 0; j < d; j++) {
      ref[j] = fmax(1.1 * ref[j], 0.9 * ref[j]);
      if (ref[j] == 0) ref[j] = 1e-12;
    }
    for (int i = 0; i < n; i++) {
      int dominated = dominated_in(loss, n, d, i);
      double front[10 * 3], rest[10 * 3];
      int nf = 0, nr = 0;
      for (int k = 0; k < n; k++) {
        if (dominated_in(loss, n, d, k)) continue;
        memcpy(front + nf++ * d, loss + k * d, (size_t)d * sizeof *loss);
        if (k != i) memcpy(rest + nr++ * d, loss + k * d, (size_t)d * sizeof *loss);
      }
      want[i] =
          dominated ? -1 : hv_brute(front, nf, d, ref) - (nr ? hv_brute(rest, nr, d, ref) : 0);
      mx = fmax(mx, want[i]);
    }
    ck_assert_int_eq(tpe_mo_weights(loss, (size_t)n, d, w), 0);
    for (int i = 0; i < n; i++) {
      double e = want[i] < 0 ? 1e-12 : fmax(want[i] / fmax(mx, 1e-12), 1e-12);
      ck_assert_msg(fabs(w[i] - e) <= 1e-9, "round %d (n=%d, d=%d) point %d: %.17g, want %.17g",
                    round, n, d, i, w[i], e);
    }
  }
  double one[] = {1, 2}, w1 = 0;
  ck_assert_int_eq(tpe_mo_weights(one, 1, 2, &w1), 0);
  ck_assert(w1 == 1);
}
END_TEST

/* ---------- tpe.c with several objectives ---------- */

static cJSON *parse(const char *s) {
  cJSON *j = cJSON_Parse(s);
  ck_assert_msg(j != NULL, "bad JSON in test: %s", s);
  return j;
}

static const char *const space1 = "{\"x\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}}";

static struct tpe *make_mo(const char *space, const char *alg, enum spec_mode m0, enum spec_mode m1,
                           uint64_t seed) {
  cJSON *sp = parse(space), *sa = alg ? parse(alg) : NULL;
  struct validate_error err = {{0}, {0}};
  struct tpe *t = NULL;
  enum spec_mode modes[2] = {m0, m1};
  int rc = tpe_create_mo(sp, sa, modes, 2, seed, &t, &err);
  ck_assert_msg(rc == 0, "%s: %s", err.path, err.message);
  cJSON_Delete(sp);
  cJSON_Delete(sa);
  return t;
}

/* The mean of x over suggestions 30..59 after 30 finished trials with both
 * objectives equal to x: the below group holds the smallest x when both
 * are minimised, the largest when both are maximised (flat weights: with
 * hypervolume shares a one-point front would leave the prior to lead). */
static double mean_x(enum spec_mode m) {
  struct tpe *t = make_mo(space1, "{\"below_weights\": \"flat\"}", m, m, 3);
  double sum = 0;
  for (int i = 0; i < 60; i++) {
    cJSON *cfg = NULL;
    ck_assert_int_eq(tpe_suggest(t, i, NULL, &cfg), 0);
    double x = cJSON_GetObjectItem(cfg, "x")->valuedouble, v[2] = {x, x};
    if (i >= 30)
      sum += x;
    else
      ck_assert_int_eq(tpe_observe_mo(t, i, cfg, v, TPE_FINISHED), 0);
    cJSON_Delete(cfg);
  }
  tpe_free(t);
  return sum / 30;
}

START_TEST(directions_pick_the_below_group) {
  double lo = mean_x(SPEC_MODE_MIN), hi = mean_x(SPEC_MODE_MAX);
  ck_assert_msg(lo < 0.3 && hi > 0.7, "mean x: min %.3f, max %.3f", lo, hi);
}
END_TEST

/* Suggestions 30..59 after 30 finished trials on x in [0, 1], spread
 * over it, with objectives (x, 1 - x) (one front) and total violations
 * viol(i, x); how many suggestions have x in [lo, hi]. */
static int constrained_mo(double (*viol)(int, double), double lo, double hi) {
  struct tpe *t = make_mo(space1, NULL, SPEC_MODE_MIN, SPEC_MODE_MIN, 5);
  int in = 0;
  for (int i = 0; i < 30; i++) {
    double x = i / 29.0, v[2] = {x, 1 - x};
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddNumberToObject(cfg, "x", x);
    ck_assert_int_eq(tpe_observe_mo(t, i, cfg, v, TPE_FINISHED), 0);
    ck_assert_int_eq(tpe_set_violation(t, i, viol(i, x)), 0);
    cJSON_Delete(cfg);
  }
  for (int i = 30; i < 60; i++) {
    cJSON *cfg = NULL;
    ck_assert_int_eq(tpe_suggest(t, i, NULL, &cfg), 0);
    double x = cJSON_GetObjectItem(cfg, "x")->valuedouble;
    in += x >= lo && x <= hi;
    cJSON_Delete(cfg);
  }
  tpe_free(t);
  return in;
}

/* Feasible: x in [0.69, 0.76] only (trials 20..22). */
static double viol_band(int i, double x) {
  (void)x;
  return i >= 20 && i <= 22 ? 0 : 0.01;
}
/* None feasible; the least violating near x = 0.5. */
static double viol_mid(int i, double x) {
  (void)i;
  return 0.01 + fabs(x - 0.5);
}

/* As Optuna 5's _split_trials: the feasible trials take the below places
 * first (here all 3 of ceil(0.1 * 30)), split among themselves by the
 * front; the infeasible ones only fill what is left, least violation
 * first, whatever the front. */
START_TEST(constraints_feasible_first_then_violation) {
  /* Seen: 30 of 30; 2 with every trial feasible, 0 with the infeasible
   * ones first. */
  int near = constrained_mo(viol_band, 0.6, 0.85);
  ck_assert_msg(near >= 20, "%d of 30 near the feasible trials", near);
  /* Seen: 30 of 30; 0 with the infeasible ones in id order. */
  int mid = constrained_mo(viol_mid, 0.35, 0.65);
  ck_assert_msg(mid >= 20, "%d of 30 near the least violating trials", mid);
}
END_TEST

START_TEST(observe_and_create_errors) {
  struct tpe *t = make_mo(space1, NULL, SPEC_MODE_MIN, SPEC_MODE_MIN, 1);
  cJSON *cfg = parse("{\"x\": 0.5}");
  /* One value for two objectives: refused, not read past. */
  ck_assert_int_eq(tpe_observe(t, 1, cfg, 0.5, TPE_FINISHED), -EINVAL);
  tpe_free(t);
  cJSON *sp = parse(space1);
  enum spec_mode modes[SPEC_MAX_OBJECTIVES + 1] = {SPEC_MODE_MIN};
  struct validate_error err = {{0}, {0}};
  ck_assert_int_eq(tpe_create_mo(sp, NULL, modes, 0, 1, &t, &err), -EINVAL);
  ck_assert_ptr_null(t);
  ck_assert_str_eq(err.path, "metric");
  ck_assert_int_eq(tpe_create_mo(sp, NULL, modes, SPEC_MAX_OBJECTIVES + 1, 1, &t, &err), -EINVAL);
  cJSON_Delete(sp);
  cJSON_Delete(cfg);
}
END_TEST

/* The suggestions of indexes n..n+9 after n finished trials of a 2-D
 * problem, as one JSON array. */
static char *trace_mo(const char *alg, int n) {
  const char *space = "{\"x\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1},"
                      " \"y\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}}";
  cJSON *sa = parse(alg);
  ck_assert_int_eq(tpe_options_check(sa, "search_alg", NULL), 0);
  char *s = cJSON_PrintUnformatted(sa);
  struct tpe *t = make_mo(space, s, SPEC_MODE_MIN, SPEC_MODE_MIN, 5);
  free(s);
  cJSON_Delete(sa);
  cJSON *all = cJSON_CreateArray();
  for (int i = 0; i < n + 10; i++) {
    cJSON *cfg = NULL;
    ck_assert_int_eq(tpe_suggest(t, i, NULL, &cfg), 0);
    double x = cJSON_GetObjectItem(cfg, "x")->valuedouble;
    double y = cJSON_GetObjectItem(cfg, "y")->valuedouble;
    double v[2] = {x + 0.3 * y, (1 - x) + 0.3 * y * y};
    if (i < n) {
      ck_assert_int_eq(tpe_observe_mo(t, i, cfg, v, TPE_FINISHED), 0);
      cJSON_Delete(cfg);
    } else {
      cJSON_AddItemToArray(all, cfg);
    }
  }
  tpe_free(t);
  char *out = cJSON_PrintUnformatted(all);
  cJSON_Delete(all);
  return out;
}

/* Optuna 5.0's MOTPE ("below_weights": "flat") weighs every below trial
 * the same (its above group keeps the ramp). With gamma 0.8 and 100 trials
 * the below group has 80 (> 25: the ramp would apply) and the above 20
 * (< 25: flat anyway), so "weights": "flat" must change nothing; the
 * default (hypervolume shares) does change the suggestions. */
#define FLAT_BELOW "{\"type\": \"tpe\", \"below_weights\": \"flat\", "
START_TEST(below_weights_flat_or_hypervolume) {
  char *ramp = trace_mo(FLAT_BELOW "\"gamma\": 0.8}", 100);
  char *flat = trace_mo(FLAT_BELOW "\"gamma\": 0.8, \"weights\": \"flat\"}", 100);
  char *hv = trace_mo("{\"type\": \"tpe\", \"gamma\": 0.8, \"weights\": \"flat\"}", 100);
  ck_assert_str_eq(ramp, flat);
  ck_assert_str_ne(hv, flat);
  /* The same check with the roles swapped shows the test can tell: with
   * gamma 0.2 the above group has 80, where the ramp does apply. */
  char *ramp4 = trace_mo(FLAT_BELOW "\"gamma\": 0.2}", 100);
  char *flat4 = trace_mo(FLAT_BELOW "\"gamma\": 0.2, \"weights\": \"flat\"}", 100);
  ck_assert_str_ne(ramp4, flat4);
  free(ramp), free(flat), free(hv), free(ramp4), free(flat4);
  struct validate_error err = {{0}, {0}};
  cJSON *sa = parse("{\"type\": \"tpe\", \"below_weights\": \"ramp\"}");
  ck_assert_int_eq(tpe_options_check(sa, "search_alg", &err), -EINVAL);
  ck_assert_str_eq(err.path, "search_alg.below_weights");
  cJSON_Delete(sa);
}
END_TEST

/* The same observations in any order give the same suggestion (what a
 * restart relies on), equal points included. */
START_TEST(order_of_observations_does_not_matter) {
  const char *space = "{\"x\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1},"
                      " \"y\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}}";
  struct tpe *a = make_mo(space, "{\"n_startup_trials\": 3}", SPEC_MODE_MIN, SPEC_MODE_MAX, 9);
  struct tpe *b = make_mo(space, "{\"n_startup_trials\": 3}", SPEC_MODE_MIN, SPEC_MODE_MAX, 9);
  cJSON *cfg[40];
  double v[40][2];
  for (int i = 0; i < 40; i++) {
    ck_assert_int_eq(tpe_suggest(a, i, NULL, &cfg[i]), 0);
    double x = cJSON_GetObjectItem(cfg[i], "x")->valuedouble;
    double y = cJSON_GetObjectItem(cfg[i], "y")->valuedouble;
    v[i][0] = i % 7 == 3 ? v[i - 1][0] : x + y;
    v[i][1] = i % 7 == 3 ? v[i - 1][1] : x * y;
    ck_assert_int_eq(tpe_observe_mo(a, i, cfg[i], v[i], TPE_FINISHED), 0);
  }
  for (int i = 39; i >= 0; i--)
    ck_assert_int_eq(tpe_observe_mo(b, i, cfg[i], v[i], TPE_FINISHED), 0);
  for (int k = 40; k < 45; k++) {
    cJSON *p = NULL, *q = NULL;
    ck_assert_int_eq(tpe_suggest(a, k, NULL, &p), 0);
    ck_assert_int_eq(tpe_suggest(b, k, NULL, &q), 0);
    ck_assert(cJSON_Compare(p, q, 1));
    cJSON_Delete(p), cJSON_Delete(q);
  }
  for (int i = 0; i < 40; i++) cJSON_Delete(cfg[i]);
  tpe_free(a), tpe_free(b);
}
END_TEST

static int is_num(const cJSON *o, const char *k, double v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) && x->valuedouble == v;
}

static int is_bool(const cJSON *o, const char *k, int v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsBool(x) && cJSON_IsTrue(x) == v;
}

/* Several objectives: gamma(n) = ceil(0.1 n) with no cap of 25 (Optuna's
 * default_gamma_multiobjective), joint model, constant liar; written in
 * when filled, and what an absent field means. */
START_TEST(defaults_for_several_objectives) {
  cJSON *sa = parse("{\"type\": \"tpe\"}");
  ck_assert_int_eq(tpe_options_fill(sa, 2), 0);
  ck_assert(is_num(sa, "gamma_max", 100000) && is_num(sa, "gamma", 0.1));
  ck_assert(is_bool(sa, "multivariate", 1) && is_bool(sa, "constant_liar", 1));
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(sa, "below_weights")->valuestring,
                   "hypervolume");
  char *filled = cJSON_PrintUnformatted(sa);
  cJSON_Delete(sa);
  char *a = trace_mo("{\"type\": \"tpe\"}", 50), *b = trace_mo(filled, 50);
  char *capped = trace_mo("{\"type\": \"tpe\", \"gamma\": 0.6, \"gamma_max\": 25}", 50);
  char *uncapped = trace_mo("{\"type\": \"tpe\", \"gamma\": 0.6}", 50);
  ck_assert_str_eq(a, b);
  ck_assert_str_ne(capped, uncapped); /* 30 below without the cap, 25 with */
  free(a), free(b), free(capped), free(uncapped), free(filled);
}
END_TEST

static Suite *tpe_mo_suite(void) {
  Suite *s = suite_create("tpe_mo");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, hypervolume_matches_inclusion_exclusion);
  tcase_add_test(tc, split_hand_made);
  tcase_add_test(tc, split_hssp_matches_brute_greedy);
  tcase_add_test(tc, weights_are_hypervolume_shares);
  tcase_add_test(tc, directions_pick_the_below_group);
  tcase_add_test(tc, observe_and_create_errors);
  tcase_add_test(tc, constraints_feasible_first_then_violation);
  tcase_add_test(tc, order_of_observations_does_not_matter);
  tcase_add_test(tc, below_weights_flat_or_hypervolume);
  tcase_add_test(tc, defaults_for_several_objectives);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(tpe_mo_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
