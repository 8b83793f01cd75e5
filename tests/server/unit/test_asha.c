/* Unit tests of asha: Ray's worked example, milestones, brackets, modes,
 * max_t, trial ends, non-finite values, and restore == uninterrupted. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asha.h"
#include "rng.h"
#include "rung.h"
#include "vectors.h"

static struct sched_params params(double max_t, double grace, double rf, int brackets) {
  struct sched_params p;
  memset(&p, 0, sizeof p);
  p.type = SPEC_SCHED_ASHA;
  strcpy(p.time_attr, "training_iteration");
  p.has_max_t = 1;
  p.max_t = max_t;
  p.grace_period = grace;
  p.reduction_factor = rf;
  p.brackets = brackets;
  return p;
}

static struct asha *make(double max_t, double grace, double rf, int brackets, enum spec_mode mode,
                         uint64_t seed) {
  struct sched_params p = params(max_t, grace, rf, brackets);
  struct asha *a = NULL;
  ck_assert_int_eq(asha_create(&p, mode, seed, &a), 0);
  return a;
}

static enum asha_decision report(struct asha *a, int64_t id, double t, double v) {
  struct asha_outcome o;
  ck_assert_int_eq(asha_on_result(a, id, t, v, &o), 0);
  return o.decision;
}

START_TEST(worked_example) {
  /* Ray's docs: mode max, one bracket, grace 1, max_t 10, rf 2. */
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MAX, 0);
  struct asha_outcome o;
  double c;
  for (int id = 1; id <= 3; id++) ck_assert_int_eq(asha_add_trial(a, id, 0), 0);
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), -ENOENT);

  ck_assert_int_eq(asha_on_result(a, 1, 1, 2, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_CONTINUE);
  ck_assert_int_eq(o.has_cutoff, 0);
  ck_assert_int_eq(o.recorded, 1);
  ck_assert_int_eq(o.milestone_index, 0);
  ck_assert(o.milestone == 1.0 && o.value == 2.0);

  ck_assert_int_eq(asha_on_result(a, 2, 1, 4, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_CONTINUE);
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), 0);
  ck_assert(c == 3.0);

  ck_assert_int_eq(asha_on_result(a, 3, 1, 1, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_STOP);
  ck_assert_int_eq(o.reason, ASHA_REASON_CUTOFF);
  ck_assert_int_eq(o.stopped_early, 1);
  ck_assert(o.has_cutoff && o.cutoff == 3.0);
  ck_assert(o.recorded && o.value == 1.0);
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), 0);
  ck_assert(c == 2.0);
  asha_free(a);
}
END_TEST

START_TEST(worked_example_min_mode) {
  /* The same example with negated values in mode min decides the same;
   * recorded values are sign-flipped, cutoffs come back in the metric's
   * own sign. */
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MIN, 0);
  struct asha_outcome o;
  double c;
  for (int id = 1; id <= 3; id++) asha_add_trial(a, id, 0);
  ck_assert_int_eq(report(a, 1, 1, -2), ASHA_CONTINUE);
  ck_assert_int_eq(report(a, 2, 1, -4), ASHA_CONTINUE);
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), 0);
  ck_assert(c == -3.0);
  ck_assert_int_eq(asha_on_result(a, 3, 1, -1, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_STOP);
  ck_assert(o.value == 1.0 && o.cutoff == 3.0);
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), 0);
  ck_assert(c == -2.0);
  asha_free(a);
}
END_TEST

START_TEST(min_mode_lower_is_better) {
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MIN, 0);
  for (int id = 1; id <= 4; id++) asha_add_trial(a, id, 0);
  ck_assert_int_eq(report(a, 1, 1, 0.5), ASHA_CONTINUE);
  ck_assert_int_eq(report(a, 2, 1, 0.9), ASHA_STOP); /* worse than 0.5 */
  ck_assert_int_eq(report(a, 3, 1, 0.1), ASHA_CONTINUE);
  asha_free(a);
}
END_TEST

START_TEST(milestones_per_bracket) {
  struct asha *a = make(10, 1, 2, 3, SPEC_MODE_MAX, 0);
  /* n = int(log(10)/log(2) - s + 1): 4, 3, 2. */
  ck_assert_int_eq(asha_num_brackets(a), 3);
  ck_assert_int_eq(asha_num_milestones(a, 0), 4);
  ck_assert_int_eq(asha_num_milestones(a, 1), 3);
  ck_assert_int_eq(asha_num_milestones(a, 2), 2);
  ck_assert(asha_milestone(a, 0, 0) == 1 && asha_milestone(a, 0, 3) == 8);
  ck_assert(asha_milestone(a, 1, 0) == 2 && asha_milestone(a, 1, 2) == 8);
  ck_assert(asha_milestone(a, 2, 0) == 4 && asha_milestone(a, 2, 1) == 8);
  ck_assert(isnan(asha_milestone(a, 2, 2)));
  asha_free(a);

  /* Ray's defaults (max_t 100, grace 1, rf 4): 1, 4, 16, 64. */
  a = make(100, 1, 4, 1, SPEC_MODE_MAX, 0);
  ck_assert_int_eq(asha_num_milestones(a, 0), 4);
  ck_assert(asha_milestone(a, 0, 3) == 64);
  asha_free(a);

  /* grace 3, rf 3, max_t 81: 3, 9, 27, 81 (log ratio exactly 3 -> 4). */
  a = make(81, 3, 3, 1, SPEC_MODE_MAX, 0);
  ck_assert_int_eq(asha_num_milestones(a, 0), 4);
  ck_assert(asha_milestone(a, 0, 3) == 81);
  asha_free(a);
}
END_TEST

START_TEST(bracket_draw_proportional_and_deterministic) {
  struct asha *a = make(10, 1, 2, 3, SPEC_MODE_MAX, 7);
  struct asha *b = make(10, 1, 2, 3, SPEC_MODE_MAX, 7);
  struct asha *c = make(10, 1, 2, 3, SPEC_MODE_MAX, 8);
  int count[3] = {0}, differ = 0;
  const int N = 30000;
  double w[3] = {exp(4), exp(3), exp(2)}, sum = w[0] + w[1] + w[2], chi2 = 0;
  for (int i = 0; i < N; i++) {
    int s = asha_bracket_for(a, i);
    ck_assert(s >= 0 && s < 3);
    ck_assert_int_eq(s, asha_bracket_for(b, i)); /* same seed: same */
    ck_assert_int_eq(s, asha_bracket_for(a, i)); /* pure function */
    differ += s != asha_bracket_for(c, i);
    count[s]++;
  }
  for (int s = 0; s < 3; s++) {
    double e = N * w[s] / sum;
    chi2 += (count[s] - e) * (count[s] - e) / e;
  }
  /* 2 degrees of freedom: 13.8 is the 0.1% critical value. */
  ck_assert_msg(chi2 < 13.8, "chi2 %.2f counts %d %d %d", chi2, count[0], count[1], count[2]);
  ck_assert_int_gt(differ, N / 4); /* another seed draws differently */
  asha_free(a);
  asha_free(b);
  asha_free(c);

  a = make(10, 1, 2, 1, SPEC_MODE_MAX, 7);
  for (int i = 0; i < 100; i++) ck_assert_int_eq(asha_bracket_for(a, i), 0);
  asha_free(a);
}
END_TEST

START_TEST(max_t_stops_without_recording) {
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MAX, 0);
  struct asha_outcome o;
  asha_add_trial(a, 1, 0);
  ck_assert_int_eq(asha_on_result(a, 1, 10, 5, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_STOP);
  ck_assert_int_eq(o.reason, ASHA_REASON_MAX_T);
  ck_assert_int_eq(o.stopped_early, 0);
  ck_assert_int_eq(o.recorded, 0);
  ck_assert_int_eq(asha_on_result(a, 1, 12, 5, &o), 0);
  ck_assert_int_eq(o.reason, ASHA_REASON_MAX_T);
  /* Past max_t even a NaN is "done", not "diverged". */
  ck_assert_int_eq(asha_on_result(a, 1, 11, NAN, &o), 0);
  ck_assert_int_eq(o.reason, ASHA_REASON_MAX_T);
  cJSON *st;
  ck_assert_int_eq(asha_state_json(a, &st), 0);
  cJSON *b0 = cJSON_GetArrayItem(st, 0);
  ck_assert_int_eq(cJSON_GetObjectItem(b0, "stopped")->valueint, 0);
  ck_assert_int_eq(
      cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(b0, "milestones"), 3), "recorded")
          ->valueint,
      0);
  cJSON_Delete(st);
  asha_free(a);
}
END_TEST

START_TEST(one_milestone_per_result_highest_first) {
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MAX, 0);
  struct asha_outcome o;
  asha_add_trial(a, 1, 0);
  /* First result at t=5: milestones 8 (not reached), then 4. */
  ck_assert_int_eq(asha_on_result(a, 1, 5, 1.0, &o), 0);
  ck_assert(o.recorded && o.milestone == 4 && o.milestone_index == 2);
  /* t=6: 8 not reached, 4 recorded, 2 is next. */
  ck_assert_int_eq(asha_on_result(a, 1, 6, 1.0, &o), 0);
  ck_assert(o.recorded && o.milestone == 2);
  ck_assert_int_eq(asha_on_result(a, 1, 7, 1.0, &o), 0);
  ck_assert(o.recorded && o.milestone == 1);
  /* t=7.5: everything reached is recorded; nothing to do. */
  ck_assert_int_eq(asha_on_result(a, 1, 7.5, 1.0, &o), 0);
  ck_assert_int_eq(o.recorded, 0);
  ck_assert_int_eq(o.decision, ASHA_CONTINUE);
  ck_assert_int_eq(o.milestone_index, -1);
  ck_assert_int_eq(asha_on_result(a, 1, 8, 1.0, &o), 0);
  ck_assert(o.recorded && o.milestone == 8);
  /* Between milestones: continue, nothing recorded. */
  ck_assert_int_eq(asha_on_result(a, 1, 9, -100.0, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_CONTINUE);
  ck_assert_int_eq(o.recorded, 0);
  asha_free(a);
}
END_TEST

START_TEST(cutoff_uses_value_recorded_before_it) {
  /* rf 4: the cutoff is the 75th percentile of what was recorded there
   * before this trial; the trial's own value is recorded after. */
  struct asha *a = make(100, 1, 4, 1, SPEC_MODE_MAX, 0);
  struct asha_outcome o;
  double c;
  for (int id = 1; id <= 6; id++) asha_add_trial(a, id, 0);
  ck_assert_int_eq(report(a, 1, 1, 1), ASHA_CONTINUE);
  ck_assert_int_eq(report(a, 2, 1, 2), ASHA_CONTINUE); /* cutoff 1 */
  ck_assert_int_eq(report(a, 3, 1, 3), ASHA_CONTINUE); /* cutoff 1.75 */
  ck_assert_int_eq(report(a, 4, 1, 4), ASHA_CONTINUE); /* cutoff 2.5 */
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), 0);
  ck_assert(c == 3.25); /* percentile([1,2,3,4], 75) */
  ck_assert_int_eq(asha_on_result(a, 5, 1, 3.25, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_CONTINUE); /* equal is not below */
  ck_assert_int_eq(asha_on_result(a, 6, 1, 3.2, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_STOP);
  asha_free(a);
}
END_TEST

/* Reference: numpy.nanpercentile(linear) by sorting from scratch. */
static int ref_cutoff(const double *v, int n, double rf, double *out) {
  double *s = malloc(sizeof *s * (size_t)(n + 1));
  int m = 0;
  for (int i = 0; i < n; i++)
    if (!isnan(v[i])) s[m++] = v[i];
  if (m == 0) {
    free(s);
    return -1;
  }
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      double t = s[j];
      s[j] = s[j - 1];
      s[j - 1] = t;
    }
  double pos = (1 - 1 / rf) * (m - 1);
  int lo = (int)floor(pos), hi = lo + 1 < m ? lo + 1 : lo;
  *out = s[lo] + (s[hi] - s[lo]) * (pos - lo);
  free(s);
  return 0;
}

START_TEST(cutoff_matches_reference_percentile) {
  double rfs[] = {2, 3, 4, 1.5};
  for (int r = 0; r < 4; r++) {
    struct asha *a = make(1000, 1, rfs[r], 1, SPEC_MODE_MAX, 0);
    struct rng g;
    double vals[300];
    rng_seed(&g, 100 + r);
    for (int i = 0; i < 300; i++) {
      struct asha_outcome o;
      double c, want;
      asha_add_trial(a, i, 0);
      vals[i] = rng_normal(&g, 0, 1);
      int have = ref_cutoff(vals, i, rfs[r], &want);
      ck_assert_int_eq(asha_on_result(a, i, 1, vals[i], &o), 0);
      ck_assert_int_eq(o.has_cutoff, have == 0);
      if (have == 0) {
        ck_assert_msg(fabs(o.cutoff - want) < 1e-12, "%g vs %g", o.cutoff, want);
        ck_assert_int_eq(o.decision, vals[i] < want ? ASHA_STOP : ASHA_CONTINUE);
      }
      ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), 0);
    }
    asha_free(a);
  }
}
END_TEST

START_TEST(nonfinite_at_milestone_stops) {
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MAX, 0);
  struct asha_outcome o;
  double c;
  for (int id = 1; id <= 5; id++) asha_add_trial(a, id, 0);
  /* The first value at a milestone has no cutoff, yet NaN still stops. */
  ck_assert_int_eq(asha_on_result(a, 1, 1, NAN, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_STOP);
  ck_assert_int_eq(o.reason, ASHA_REASON_NONFINITE);
  ck_assert_int_eq(o.stopped_early, 1);
  ck_assert(o.recorded && isnan(o.value));
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), -ENOENT); /* NaN ignored */
  ck_assert_int_eq(report(a, 2, 1, INFINITY), ASHA_STOP);
  ck_assert_int_eq(report(a, 3, 1, -INFINITY), ASHA_STOP);
  ck_assert_int_eq(report(a, 4, 1, 5), ASHA_CONTINUE);
  ck_assert_int_eq(asha_cutoff(a, 0, 0, &c), 0);
  ck_assert(c == 5); /* the only finite value */
  /* Not at a milestone (t=1.5, milestone 1 taken): NaN continues. */
  ck_assert_int_eq(report(a, 4, 1.5, NAN), ASHA_CONTINUE);
  cJSON *st;
  ck_assert_int_eq(asha_state_json(a, &st), 0);
  cJSON *b0 = cJSON_GetArrayItem(st, 0);
  cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItem(b0, "milestones"), 0);
  ck_assert_int_eq(cJSON_GetObjectItem(b0, "stopped")->valueint, 3);
  ck_assert_int_eq(cJSON_GetObjectItem(m0, "recorded")->valueint, 4);
  ck_assert(cJSON_GetObjectItem(m0, "cutoff")->valuedouble == 5);
  cJSON_Delete(st);
  asha_free(a);
}
END_TEST

START_TEST(trial_end_passes_last_result_then_leaves) {
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MAX, 0);
  struct asha_outcome o;
  asha_add_trial(a, 1, 0);
  asha_add_trial(a, 2, 0);
  ck_assert_int_eq(asha_has_trial(a, 1), 1);
  /* Trial 1's first result at t=5 records at 4 only. */
  ck_assert_int_eq(report(a, 1, 5, 10.0), ASHA_CONTINUE);
  /* It ends: the last result goes through once more and fills 2. */
  ck_assert_int_eq(asha_on_trial_end(a, 1, 1, 5, 10.0, &o), 0);
  ck_assert(o.recorded && o.milestone == 2 && o.value == 10.0);
  ck_assert_int_eq(o.stopped_early, 0);
  ck_assert_int_eq(asha_has_trial(a, 1), 0);
  ck_assert_int_eq(asha_on_result(a, 1, 6, 1.0, &o), -ENOENT);
  ck_assert_int_eq(asha_on_trial_end(a, 1, 0, 0, 0, NULL), -ENOENT);
  /* Its records stay: trial 2 faces trial 1's value at milestone 2. */
  ck_assert_int_eq(report(a, 2, 2, 3.0), ASHA_STOP);
  /* A stop decided on trial end is not counted as an early stop. */
  asha_add_trial(a, 3, 0);
  ck_assert_int_eq(asha_on_trial_end(a, 3, 1, 2, -50.0, &o), 0);
  ck_assert_int_eq(o.decision, ASHA_STOP);
  ck_assert_int_eq(o.stopped_early, 0);
  cJSON *st;
  ck_assert_int_eq(asha_state_json(a, &st), 0);
  ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(st, 0), "stopped")->valueint, 1);
  cJSON_Delete(st);
  /* An end without a result records nothing. */
  asha_add_trial(a, 4, 0);
  ck_assert_int_eq(asha_on_trial_end(a, 4, 0, 0, 0, NULL), 0);
  ck_assert_int_eq(asha_has_trial(a, 4), 0);
  /* A retried trial rejoins with its records intact. */
  ck_assert_int_eq(asha_add_trial(a, 1, 0), 0);
  ck_assert_int_eq(asha_on_result(a, 1, 5, 10.0, &o), 0);
  ck_assert(o.recorded && o.milestone == 1);
  asha_free(a);
}
END_TEST

START_TEST(errors) {
  struct sched_params p = params(10, 1, 2, 1);
  struct asha *a = NULL;
  struct asha_outcome o;
  p.reduction_factor = 1;
  ck_assert_int_eq(asha_create(&p, SPEC_MODE_MAX, 0, &a), -EINVAL);
  ck_assert_ptr_null(a);
  p = params(10, 1, 2, 1);
  p.type = SPEC_SCHED_FIFO;
  ck_assert_int_eq(asha_create(&p, SPEC_MODE_MAX, 0, &a), -EINVAL);
  /* More than SPEC_ASHA_MAX_MILESTONES in a bracket: refused after the
   * brackets were allocated, which the one cleanup path frees (ASan). */
  p = params(1e30, 1, 2, 3);
  ck_assert_int_eq(asha_create(&p, SPEC_MODE_MAX, 0, &a), -EINVAL);
  ck_assert_ptr_null(a);
  a = make(10, 1, 2, 2, SPEC_MODE_MAX, 0);
  ck_assert_int_eq(asha_add_trial(a, 1, 2), -EINVAL);
  ck_assert_int_eq(asha_add_trial(a, 1, -1), -EINVAL);
  ck_assert_int_eq(asha_on_result(a, 99, 1, 1, &o), -ENOENT);
  asha_add_trial(a, 1, 0);
  ck_assert_int_eq(asha_on_result(a, 1, NAN, 1, &o), -EINVAL);
  ck_assert_int_eq(asha_restore_record(a, 5, 0, 3, 1, 0), -EINVAL); /* no milestone 3 */
  ck_assert_int_eq(asha_restore_record(a, 5, 7, 1, 1, 0), -EINVAL);
  ck_assert_int_eq(asha_restore_record(a, 5, 0, 1, 1, 0), 0);
  ck_assert_int_eq(asha_restore_record(a, 5, 0, 1, 1, 0), -EINVAL); /* twice */
  ck_assert_int_eq(asha_restore_record(a, 5, 1, 2, 1, 0), -EINVAL); /* other bracket */
  ck_assert_int_eq(asha_add_trial(a, 5, 1), -EINVAL);
  ck_assert_int_eq(asha_add_trial(a, 5, 0), 0);
  asha_free(a);
}
END_TEST

struct rec {
  int64_t id;
  int bracket;
  double milestone, value;
  int stopped;
};

/* Replays random results on many trials in several brackets; after every
 * step, a fresh asha rebuilt from the persisted records (and the active
 * trials) must decide the next results exactly as the uninterrupted one. */
START_TEST(restore_equals_uninterrupted) {
  enum spec_mode modes[2] = {SPEC_MODE_MAX, SPEC_MODE_MIN};
  for (int mi = 0; mi < 2; mi++) {
    const int T = 40;
    struct asha *a = make(16, 1, 2, 3, modes[mi], 11);
    struct rec *recs = calloc(4000, sizeof *recs);
    int nrec = 0, checks = 0, iter[40] = {0}, active[40] = {0};
    struct rng g;
    rng_seed(&g, 5 + mi);
    for (int i = 0; i < T; i++) {
      ck_assert_int_eq(asha_add_trial(a, 100 + i, asha_bracket_for(a, i)), 0);
      active[i] = 1;
    }
    for (int step = 0; step < 600; step++) {
      int i = (int)rng_int_range(&g, 0, T);
      struct asha_outcome o;
      double v;
      if (!active[i]) continue;
      iter[i] += 1 + (rng_uniform(&g) < 0.2); /* sometimes skip one */
      v = rng_uniform(&g) < 0.05 ? NAN : rng_normal(&g, iter[i] * 0.1, 1);
      if (step % 5 == 4) {
        checks++;
        /* Checkpoint: rebuild and compare the next decision. */
        struct asha *b = make(16, 1, 2, 3, modes[mi], 11);
        struct asha_outcome ob;
        cJSON *sa, *sb;
        char *ja, *jb;
        for (int r = 0; r < nrec; r++)
          ck_assert_int_eq(asha_restore_record(b, recs[r].id, recs[r].bracket, recs[r].milestone,
                                               recs[r].value, recs[r].stopped),
                           0);
        for (int k = 0; k < T; k++)
          if (active[k]) ck_assert_int_eq(asha_add_trial(b, 100 + k, asha_bracket_for(b, k)), 0);
        ck_assert_int_eq(asha_state_json(a, &sa), 0);
        ck_assert_int_eq(asha_state_json(b, &sb), 0);
        ja = cJSON_PrintUnformatted(sa);
        jb = cJSON_PrintUnformatted(sb);
        ck_assert_str_eq(ja, jb);
        free(ja);
        free(jb);
        cJSON_Delete(sa);
        cJSON_Delete(sb);
        ck_assert_int_eq(asha_on_result(b, 100 + i, iter[i], v, &ob), 0);
        ck_assert_int_eq(asha_on_result(a, 100 + i, iter[i], v, &o), 0);
        ck_assert_int_eq(o.decision, ob.decision);
        ck_assert_int_eq(o.recorded, ob.recorded);
        ck_assert(o.milestone_index == ob.milestone_index);
        ck_assert(o.has_cutoff == ob.has_cutoff);
        ck_assert(!o.has_cutoff || o.cutoff == ob.cutoff);
        asha_free(b);
      } else {
        ck_assert_int_eq(asha_on_result(a, 100 + i, iter[i], v, &o), 0);
      }
      if (o.recorded)
        recs[nrec++] = (struct rec){100 + i, o.bracket, o.milestone, o.value, o.stopped_early};
      if (o.decision == ASHA_STOP || rng_uniform(&g) < 0.01) {
        struct asha_outcome oe;
        ck_assert_int_eq(asha_on_trial_end(a, 100 + i, 1, iter[i], v, &oe), 0);
        if (oe.recorded)
          recs[nrec++] = (struct rec){100 + i, oe.bracket, oe.milestone, oe.value, 0};
        active[i] = 0;
      }
    }
    ck_assert_int_gt(nrec, 60);
    ck_assert_int_ge(checks, 20);
    free(recs);
    asha_free(a);
  }
}
END_TEST

START_TEST(state_json_shape) {
  struct asha *a = make(10, 1, 2, 2, SPEC_MODE_MIN, 0);
  cJSON *st, *b1, *m;
  asha_add_trial(a, 1, 1);
  asha_add_trial(a, 2, 1);
  report(a, 1, 2, 0.5);
  report(a, 2, 2, 0.7); /* stopped: 0.7 is worse than 0.5 in mode min */
  ck_assert_int_eq(asha_state_json(a, &st), 0);
  ck_assert_int_eq(cJSON_GetArraySize(st), 2);
  b1 = cJSON_GetArrayItem(st, 1);
  ck_assert_int_eq(cJSON_GetObjectItem(b1, "index")->valueint, 1);
  ck_assert_int_eq(cJSON_GetObjectItem(b1, "stopped")->valueint, 1);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(b1, "milestones")), 3);
  m = cJSON_GetArrayItem(cJSON_GetObjectItem(b1, "milestones"), 0);
  ck_assert(cJSON_GetObjectItem(m, "t")->valuedouble == 2);
  ck_assert_int_eq(cJSON_GetObjectItem(m, "recorded")->valueint, 2);
  /* percentile([-0.7, -0.5], 50) = -0.6, back in the metric's sign. */
  ck_assert(fabs(cJSON_GetObjectItem(m, "cutoff")->valuedouble - 0.6) < 1e-12);
  m = cJSON_GetArrayItem(cJSON_GetObjectItem(b1, "milestones"), 1);
  ck_assert(cJSON_IsNull(cJSON_GetObjectItem(m, "cutoff")));
  cJSON_Delete(st);
  asha_free(a);
}
END_TEST

START_TEST(many_trials_fast) {
  /* 10,000 trials x 10 results through one bracket: sorted rungs keep
   * this far from quadratic. */
  struct asha *a = make(10, 1, 2, 1, SPEC_MODE_MIN, 0);
  struct rng g;
  int stops = 0;
  rng_seed(&g, 1);
  for (int i = 0; i < 10000; i++) asha_add_trial(a, i, 0);
  for (int t = 1; t <= 10; t++)
    for (int i = 0; i < 10000; i++)
      if (asha_has_trial(a, i)) {
        struct asha_outcome o;
        asha_on_result(a, i, t, rng_uniform(&g), &o);
        if (o.decision == ASHA_STOP) {
          stops++;
          asha_on_trial_end(a, i, 1, t, 0.5, &o);
        }
      }
  ck_assert_int_eq(stops, 10000);
  asha_free(a);
}
END_TEST

/* Bounded memory: the state holds the planned brackets and rungs and the recorded
 * values, nothing sized by SPEC_ASHA_MAX_*: a fixed table cost about 41 KB
 * per experiment whatever its spec. */
START_TEST(memory_is_what_the_plan_and_records_need) {
  struct asha *small = make(100, 1, 4, 1, SPEC_MODE_MAX, 1);
  struct asha *big = make(1e18, 1, 2, 16, SPEC_MODE_MAX, 1);
  size_t s0 = asha_mem_bytes(small), b0 = asha_mem_bytes(big);
  int milestones = 0;

  ck_assert_int_eq(asha_num_milestones(small, 0), 4);
  ck_assert_msg(s0 > 0 && s0 < 1024, "default spec: %zu bytes", s0);
  /* 16 brackets of 60 down to 45 milestones: more, as planned, and
   * still less than the full 16 x 64 table would be. */
  for (int b = 0; b < 16; b++) milestones += asha_num_milestones(big, b);
  ck_assert_uint_gt(b0, s0 + (size_t)milestones * 16);
  ck_assert_uint_lt(b0, (size_t)16 * 64 * 40);
  ck_assert_uint_eq(asha_mem_bytes(NULL), 0);

  /* Replayed records grow the rung they land in, by doubling. */
  for (int i = 0; i < 1000; i++)
    ck_assert_int_eq(asha_restore_record(small, i + 1, 0, 4, (double)i, 0), 0);
  size_t s1 = asha_mem_bytes(small);
  ck_assert_uint_ge(s1, s0 + 1000 * sizeof(double));
  ck_assert_msg(s1 < s0 + 1000 * 128, "%zu bytes after 1000 records", s1);
  /* The records are all there: 1000 values at t=4, cutoff = 75th pct. */
  double c;
  ck_assert_int_eq(asha_cutoff(small, 0, 1, &c), 0);
  ck_assert_double_eq_tol(c, 749.25, 1e-9);
  asha_free(small);
  asha_free(big);
}
END_TEST

static double num_or_special(const cJSON *v) {
  if (cJSON_IsString(v))
    return strcmp(v->valuestring, "nan") == 0   ? NAN
           : strcmp(v->valuestring, "inf") == 0 ? INFINITY
                                                : -INFINITY;
  return v->valuedouble;
}

/* Streams decided by a Python transcription of Ray's bracket logic with
 * numpy.nanpercentile (gen_asha_vectors.py): every decision must agree and
 * every cutoff must be bit-identical. */
START_TEST(agrees_with_ray_reference) {
  cJSON *doc = vectors_load(ASHA_RAY_VECTORS), *c;
  int results = 0, stops = 0, cutoffs = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
    const char *mode = cJSON_GetObjectItem(c, "mode")->valuestring;
    struct asha *a = make(cJSON_GetObjectItem(c, "max_t")->valuedouble,
                          cJSON_GetObjectItem(c, "grace_period")->valuedouble,
                          cJSON_GetObjectItem(c, "reduction_factor")->valuedouble,
                          cJSON_GetObjectItem(c, "brackets")->valueint,
                          strcmp(mode, "max") == 0 ? SPEC_MODE_MAX : SPEC_MODE_MIN, 0);
    cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
      const char *op = cJSON_GetArrayItem(e, 0)->valuestring;
      int64_t id = (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble;
      double t = cJSON_GetArrayItem(e, 2)->valuedouble;
      double v = num_or_special(cJSON_GetArrayItem(e, 3));
      struct asha_outcome o;
      if (strcmp(op, "add") == 0) {
        ck_assert_int_eq(asha_add_trial(a, id, (int)t), 0);
      } else if (strcmp(op, "end") == 0) {
        ck_assert_int_eq(asha_on_trial_end(a, id, 1, t, v, &o), 0);
      } else {
        const char *want = cJSON_GetArrayItem(e, 4)->valuestring;
        cJSON *wc = cJSON_GetArrayItem(e, 5);
        ck_assert_int_eq(asha_on_result(a, id, t, v, &o), 0);
        ck_assert_msg(o.decision == (strcmp(want, "stop") == 0 ? ASHA_STOP : ASHA_CONTINUE),
                      "%s case event %d: decision %d, Ray says %s", mode, k, o.decision, want);
        if (cJSON_IsNull(wc)) {
          ck_assert_msg(!o.has_cutoff || o.reason == ASHA_REASON_MAX_T,
                        "event %d: cutoff where Ray has none", k);
        } else {
          /* Bit for bit: the same float steps as numpy. */
          ck_assert_msg(o.has_cutoff && o.cutoff == wc->valuedouble,
                        "event %d: cutoff %.17g, Ray %.17g", k, o.cutoff, wc->valuedouble);
          cutoffs++;
        }
        results++;
        stops += o.decision == ASHA_STOP;
      }
      k++;
    }
    asha_free(a);
  }
  ck_assert_int_gt(results, 500);
  ck_assert_int_gt(stops, 50);
  ck_assert_int_gt(cutoffs, 100);
  cJSON_Delete(doc);
}
END_TEST

/* rung_mo_order's two-objective path (sorted, O(n log n)) gives the same
 * fronts and order as the peel it stands for: the same points with a
 * constant third objective (same dominance, same distances) go through
 * the peel. rung_mo_rank places each point alone as the order does. Points
 * on a coarse grid, so that ties and equal points abound; and 3,000 points
 * at one rung rank fast. */
START_TEST(mo_order_two_objectives_as_the_peel) {
  enum { N = 3000 };
  static double x2[2 * N], x3[3 * N];
  static size_t p2[N], p3[N];
  static int f2[N], f3[N];
  struct rng r;
  rng_seed(&r, 5);
  for (size_t n = 1; n <= N; n = n < 200 ? n + 37 : N) {
    int nf2, nf3;
    for (size_t i = 0; i < n; i++) {
      x2[2 * i] = x3[3 * i] = floor(rng_uniform(&r) * 12) / 4;
      x2[2 * i + 1] = x3[3 * i + 1] = floor(rng_uniform(&r) * 12) / 4;
      x3[3 * i + 2] = 1;
    }
    ck_assert_int_eq(rung_mo_order(x2, n, 2, p2, f2, &nf2), 0);
    if (n < N) {
      ck_assert_int_eq(rung_mo_order(x3, n, 3, p3, f3, &nf3), 0);
      ck_assert_int_eq(nf2, nf3);
      for (size_t i = 0; i < n; i++) {
        size_t pos;
        int front, nf;
        ck_assert_msg(f2[i] == f3[i], "n %zu point %zu: front %d, peel %d", n, i, f2[i], f3[i]);
        ck_assert_msg(p2[i] == p3[i], "n %zu point %zu: position %zu, peel %zu", n, i, p2[i],
                      p3[i]);
        /* One point's place alone (a new trial's decision) is the same. */
        ck_assert_int_eq(rung_mo_rank(x2, n, 2, i, &pos, &front, &nf), 0);
        ck_assert(pos == p2[i] && front == f2[i] && nf == nf2);
        ck_assert_int_eq(rung_mo_rank(x3, n, 3, i, &pos, &front, &nf), 0);
        ck_assert(pos == p3[i] && front == f3[i] && nf == nf3);
      }
    }
    if (n == N) break;
  }
}
END_TEST

/* Several objectives: one restartable replay of a MOASHA stream. */
struct mo_run {
  struct sched_params p;
  enum spec_mode mode;
  struct asha *a;
  /* Every record so far, in order, to restart from. */
  struct mo_rec {
    int64_t id;
    int bracket;
    double milestone, v[SPEC_MAX_OBJECTIVES];
    int finite, stopped;
  } * recs;
  size_t nrecs, cap;
  int64_t active[64];
  int bracket_of[64];
};

static void mo_keep_record(struct mo_run *r, int64_t id, const struct asha_outcome *o) {
  if (!o->mo_recorded) return;
  if (r->nrecs == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 64;
    r->recs = realloc(r->recs, r->cap * sizeof *r->recs);
    ck_assert_ptr_nonnull(r->recs);
  }
  struct mo_rec *x = &r->recs[r->nrecs++];
  x->id = id;
  x->bracket = o->bracket;
  x->milestone = o->milestone;
  memcpy(x->v, o->mo_values, sizeof x->v);
  x->finite = !isnan(o->mo_values[0]);
  x->stopped = o->stopped_early;
}

/* A server restart: a new state from the records, in order, and the trials
 * still active added back to their brackets. */
static void mo_restart(struct mo_run *r) {
  asha_free(r->a);
  ck_assert_int_eq(asha_create(&r->p, r->mode, 0, &r->a), 0);
  for (size_t i = 0; i < r->nrecs; i++) {
    const struct mo_rec *x = &r->recs[i];
    ck_assert_int_eq(asha_restore_record_mo(r->a, x->id, x->bracket, x->milestone,
                                            x->finite ? x->v : NULL, x->stopped),
                     0);
  }
  for (int i = 0; i < 64; i++)
    if (r->active[i]) ck_assert_int_eq(asha_add_trial(r->a, i, r->bracket_of[i]), 0);
}

/* Streams decided by a Python transcription of Syne Tune's MOASHA
 * (gen_moasha_vectors.py: non-dominated sort, epsilon-net inside a front):
 * every decision and where each new trial ranks must agree, once straight
 * through and once restarted from the records every 37 results. */
START_TEST(agrees_with_syne_tune_moasha) {
  cJSON *doc = vectors_load(MOASHA_VECTORS), *c;
  int results = 0, stops = 0, ranked = 0;
  for (int restarts = 0; restarts < 2; restarts++) {
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
      struct mo_run r;
      memset(&r, 0, sizeof r);
      r.p = params(cJSON_GetObjectItem(c, "max_t")->valuedouble,
                   cJSON_GetObjectItem(c, "grace_period")->valuedouble,
                   cJSON_GetObjectItem(c, "reduction_factor")->valuedouble,
                   cJSON_GetObjectItem(c, "brackets")->valueint);
      cJSON *m, *e;
      cJSON_ArrayForEach(m, cJSON_GetObjectItem(c, "modes")) {
        r.p.modes[r.p.nobjectives++] =
            strcmp(m->valuestring, "max") ? SPEC_MODE_MIN : SPEC_MODE_MAX;
      }
      r.mode = r.p.modes[0];
      ck_assert_int_eq(asha_create(&r.p, r.mode, 0, &r.a), 0);
      int k = 0;
      cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
        const char *op = cJSON_GetArrayItem(e, 0)->valuestring;
        int64_t id = (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble;
        double t = cJSON_GetArrayItem(e, 2)->valuedouble, v[SPEC_MAX_OBJECTIVES];
        struct asha_outcome o;
        ck_assert(id >= 0 && id < 64);
        if (strcmp(op, "add") == 0) {
          r.active[id] = 1;
          r.bracket_of[id] = (int)t;
          ck_assert_int_eq(asha_add_trial(r.a, id, (int)t), 0);
          k++;
          continue;
        }
        for (int j = 0; j < r.p.nobjectives; j++)
          v[j] = num_or_special(cJSON_GetArrayItem(cJSON_GetArrayItem(e, 3), j));
        if (strcmp(op, "end") == 0) {
          ck_assert_int_eq(asha_on_trial_end(r.a, id, 1, t, 0, &o), 0);
          mo_keep_record(&r, id, &o);
          r.active[id] = 0;
          k++;
          continue;
        }
        if (restarts && results % 37 == 0) mo_restart(&r);
        const char *want = cJSON_GetArrayItem(e, 4)->valuestring;
        cJSON *rank = cJSON_GetArrayItem(e, 5);
        ck_assert_int_eq(asha_on_result_mo(r.a, id, t, v, &o), 0);
        mo_keep_record(&r, id, &o);
        ck_assert_msg(o.decision == (strcmp(want, "stop") == 0 ? ASHA_STOP : ASHA_CONTINUE),
                      "event %d: decision %d, Syne Tune says %s", k, o.decision, want);
        ck_assert_int_eq(o.mo_ranked, !cJSON_IsNull(rank));
        if (!cJSON_IsNull(rank)) {
          int64_t got[5] = {o.mo_pos, o.mo_n, o.mo_front, o.mo_nfronts, o.mo_keep};
          for (int j = 0; j < 5; j++)
            ck_assert_msg(got[j] == (int64_t)cJSON_GetArrayItem(rank, j)->valuedouble,
                          "event %d: rank field %d is %lld, Syne Tune %g", k, j, (long long)got[j],
                          cJSON_GetArrayItem(rank, j)->valuedouble);
          ranked++;
        }
        results++;
        stops += o.decision == ASHA_STOP;
        k++;
      }
      asha_free(r.a);
      free(r.recs);
    }
  }
  ck_assert_int_ge(results, 2 * 2000);
  ck_assert_int_gt(stops, 2 * 250);
  ck_assert_int_gt(ranked, 2 * 450);
  cJSON_Delete(doc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("asha");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, worked_example);
  tcase_add_test(tc, worked_example_min_mode);
  tcase_add_test(tc, min_mode_lower_is_better);
  tcase_add_test(tc, milestones_per_bracket);
  tcase_add_test(tc, bracket_draw_proportional_and_deterministic);
  tcase_add_test(tc, max_t_stops_without_recording);
  tcase_add_test(tc, one_milestone_per_result_highest_first);
  tcase_add_test(tc, cutoff_uses_value_recorded_before_it);
  tcase_add_test(tc, cutoff_matches_reference_percentile);
  tcase_add_test(tc, nonfinite_at_milestone_stops);
  tcase_add_test(tc, trial_end_passes_last_result_then_leaves);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, restore_equals_uninterrupted);
  tcase_add_test(tc, state_json_shape);
  tcase_add_test(tc, many_trials_fast);
  tcase_add_test(tc, memory_is_what_the_plan_and_records_need);
  tcase_add_test(tc, agrees_with_ray_reference);
  tcase_add_test(tc, agrees_with_syne_tune_moasha);
  tcase_add_test(tc, mo_order_two_objectives_as_the_peel);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
