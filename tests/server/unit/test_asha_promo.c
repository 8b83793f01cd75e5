/* Unit tests of asha_promo (ASHA's promotion variant): rungs, pausing,
 * promotion of the top floor(n/eta) from the top rung down, resumable
 * skipping, agreement with a Python transcription of the paper's Algorithm 2
 * (gen_asha_promo_vectors.py), restore from records == uninterrupted, and
 * the sched layer's reasons. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asha_promo.h"
#include "scheduler.h"
#include "vectors.h"

static struct sched_params params(double grace, double eta, double max_t, int nb) {
  struct sched_params p;
  memset(&p, 0, sizeof p);
  p.type = SPEC_SCHED_ASHA;
  p.promotion = 1;
  p.has_max_t = 1;
  p.max_t = max_t;
  p.grace_period = grace;
  p.reduction_factor = eta;
  p.brackets = nb;
  snprintf(p.time_attr, sizeof p.time_attr, "training_iteration");
  return p;
}

static struct apromo *make(double grace, double eta, double max_t, int nb, enum spec_mode m) {
  struct sched_params p = params(grace, eta, max_t, nb);
  struct apromo *a;
  ck_assert_int_eq(apromo_create(&p, m, 42, &a), 0);
  return a;
}

START_TEST(rungs_below_max_t) {
  struct apromo *a = make(1, 3, 27, 2, SPEC_MODE_MAX);
  ck_assert_int_eq(apromo_num_rungs(a, 0), 3); /* 1 3 9; 27 is the end */
  ck_assert_int_eq(apromo_num_rungs(a, 1), 2); /* 3 9 */
  ck_assert(apromo_rung_t(a, 0, 2) == 9);
  ck_assert(apromo_rung_t(a, 1, 0) == 3);
  apromo_free(a);
  a = make(1, 3, 30, 1, SPEC_MODE_MAX);
  ck_assert_int_eq(apromo_num_rungs(a, 0), 4); /* 1 3 9 27 */
  apromo_free(a);
}
END_TEST

static enum apromo_action res(struct apromo *a, int64_t id, double t, double v) {
  struct apromo_outcome o;
  ck_assert_int_eq(apromo_on_result(a, id, t, v, &o), 0);
  cJSON_Delete(o.record);
  return o.action;
}

/* Bounded memory: the planned brackets and rungs only (not a fixed 16 x 64 table
 * of about 40 KB), and a rung grows with its entries. */
START_TEST(memory_is_what_the_plan_and_records_need) {
  struct apromo *a = make(1, 4, 100, 1, SPEC_MODE_MAX);
  size_t m0 = apromo_mem_bytes(a), m1;
  ck_assert_int_eq(apromo_num_rungs(a, 0), 4); /* 1 4 16 64 */
  ck_assert_msg(m0 > 0 && m0 < 1024, "default spec: %zu bytes", m0);
  for (int i = 0; i < 1000; i++) {
    ck_assert_int_eq(apromo_add_trial(a, i + 1, 0), 0);
    ck_assert_int_eq(res(a, i + 1, 1, i), APROMO_PAUSE);
  }
  m1 = apromo_mem_bytes(a);
  ck_assert_uint_ge(m1, m0 + 1000 * 16); /* an entry per record */
  ck_assert_msg(m1 < m0 + 1000 * 160, "%zu bytes after 1000 records", m1);
  ck_assert_uint_eq(apromo_mem_bytes(NULL), 0);
  apromo_free(a);
}
END_TEST

/* 9 trials pause at rung 0; the top 3 are promoted best first; a 4th is
 * not; the top rung goes first once it has eta trials. */
START_TEST(promote_top_third) {
  struct apromo *a = make(1, 3, 9, 1, SPEC_MODE_MIN);
  struct apromo_choice c;
  for (int i = 0; i < 9; i++) {
    ck_assert_int_eq(apromo_add_trial(a, 100 + i, 0), 0);
    ck_assert_int_eq(res(a, 100 + i, 1, 10 - i), APROMO_PAUSE);
  }
  /* min: 108 (1), 107 (2), 106 (3) */
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(apromo_choose(a, NULL, NULL, &c), 0);
    ck_assert_int_eq(c.found, 1);
    ck_assert_int_eq(c.trial_id, 108 - i);
    ck_assert_int_eq(c.top, 3);
    ck_assert_int_eq(c.n, 9);
    ck_assert(c.next_t == 3);
    cJSON_Delete(c.record);
  }
  ck_assert_int_eq(apromo_choose(a, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.found, 0);
  /* The promoted ones reach rung 1 (t=3); with 3 there, the best goes on. */
  ck_assert_int_eq(res(a, 108, 2, 0.5), APROMO_CONTINUE);
  ck_assert_int_eq(res(a, 108, 3, 5), APROMO_PAUSE);
  ck_assert_int_eq(res(a, 107, 3, 4), APROMO_PAUSE);
  ck_assert_int_eq(apromo_choose(a, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.found, 0); /* floor(2/3) = 0 */
  ck_assert_int_eq(res(a, 106, 3, 6), APROMO_PAUSE);
  ck_assert_int_eq(apromo_choose(a, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.found, 1);
  ck_assert_int_eq(c.trial_id, 107);
  ck_assert_int_eq(c.rung, 1);
  ck_assert(c.next_t == 9);
  cJSON_Delete(c.record);
  ck_assert_int_eq(res(a, 107, 9, 1), APROMO_STOP);
  apromo_free(a);
}
END_TEST

static int not_101(void *ctx, int64_t id) {
  (void)ctx;
  return id != 101;
}

/* A candidate the server cannot resume yet (pause-pending) is skipped; an
 * ended one is never promoted; a NaN stops its trial. */
START_TEST(skips_unresumable_and_ended) {
  struct apromo *a = make(1, 2, 4, 1, SPEC_MODE_MAX);
  struct apromo_choice c;
  for (int i = 0; i < 4; i++) ck_assert_int_eq(apromo_add_trial(a, 100 + i, 0), 0);
  ck_assert_int_eq(res(a, 100, 1, 1), APROMO_PAUSE);
  ck_assert_int_eq(res(a, 101, 1, 4), APROMO_PAUSE);
  ck_assert_int_eq(res(a, 102, 1, 3), APROMO_PAUSE);
  ck_assert_int_eq(res(a, 103, 1, NAN), APROMO_STOP);
  ck_assert_int_eq(apromo_choose(a, not_101, NULL, &c), 0);
  ck_assert_int_eq(c.found, 1);
  ck_assert_int_eq(c.trial_id, 102); /* top 2 of 4: 101, 102 */
  cJSON_Delete(c.record);
  ck_assert_int_eq(apromo_on_trial_end(a, 101), 0);
  ck_assert_int_eq(apromo_choose(a, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.found, 0);
  ck_assert_int_eq(apromo_on_result(a, 999, 1, 1, &(struct apromo_outcome){0}), -ENOENT);
  apromo_free(a);
}
END_TEST

/* --- vectors --- */

struct rec {
  int64_t id;
  char *json;
};

struct replay {
  struct sched_params p;
  enum spec_mode mode;
  struct apromo *a;
  struct rec *recs;
  size_t nrecs;
  int64_t ids[4096];
  int brk[4096], ended[4096];
  int nids;
};

static void keep(struct replay *r, int64_t id, cJSON *rec) {
  if (!rec) return;
  r->recs = realloc(r->recs, (r->nrecs + 1) * sizeof *r->recs);
  ck_assert_ptr_nonnull(r->recs);
  r->recs[r->nrecs].id = id;
  r->recs[r->nrecs].json = cJSON_PrintUnformatted(rec);
  r->nrecs++;
  cJSON_Delete(rec);
}

/* A restarted server: a fresh scheduler, the records replayed in order and
 * the trials that did not end added (before or after the records). */
static void restart(struct replay *r, int adds_first) {
  apromo_free(r->a);
  ck_assert_int_eq(apromo_create(&r->p, r->mode, 42, &r->a), 0);
  for (int pass = 0; pass < 2; pass++) {
    if ((pass == 0) == adds_first) {
      for (int i = 0; i < r->nids; i++)
        if (!r->ended[i]) ck_assert_int_eq(apromo_add_trial(r->a, r->ids[i], r->brk[i]), 0);
    } else {
      for (size_t i = 0; i < r->nrecs; i++) {
        cJSON *j = cJSON_Parse(r->recs[i].json);
        ck_assert_int_eq(apromo_restore(r->a, r->recs[i].id, j), 0);
        cJSON_Delete(j);
      }
    }
  }
}

static void run_case(const cJSON *cs, int every) {
  struct replay *r = calloc(1, sizeof *r);
  const cJSON *ev;
  int n = 0;
  ck_assert_ptr_nonnull(r);
  r->p = params(cJSON_GetObjectItem(cs, "grace_period")->valuedouble,
                cJSON_GetObjectItem(cs, "reduction_factor")->valuedouble,
                cJSON_GetObjectItem(cs, "max_t")->valuedouble,
                cJSON_GetObjectItem(cs, "brackets")->valueint);
  const cJSON *mode = cJSON_GetObjectItem(cs, "mode"), *m;
  if (cJSON_IsArray(mode)) { /* several objectives */
    cJSON_ArrayForEach(m, mode) {
      r->p.modes[r->p.nobjectives++] =
          strcmp(m->valuestring, "max") ? SPEC_MODE_MIN : SPEC_MODE_MAX;
    }
    r->mode = r->p.modes[0];
  } else {
    r->mode = strcmp(mode->valuestring, "max") ? SPEC_MODE_MIN : SPEC_MODE_MAX;
  }
  ck_assert_int_eq(apromo_create(&r->p, r->mode, 42, &r->a), 0);
  cJSON_ArrayForEach(ev, cJSON_GetObjectItem(cs, "events")) {
    const char *k = cJSON_GetArrayItem(ev, 0)->valuestring;
    int64_t id = (int64_t)cJSON_GetArrayItem(ev, 1)->valuedouble;
    if (every && ++n % every == 0) restart(r, n / every % 2);
    if (!strcmp(k, "add")) {
      int b = cJSON_GetArrayItem(ev, 2)->valueint;
      ck_assert_int_lt(r->nids, 4096);
      r->ids[r->nids] = id;
      r->brk[r->nids++] = b;
      ck_assert_int_eq(apromo_add_trial(r->a, id, b), 0);
    } else if (!strcmp(k, "end")) {
      ck_assert_int_eq(apromo_on_trial_end(r->a, id), 0);
      for (int i = 0; i < r->nids; i++)
        if (r->ids[i] == id) r->ended[i] = 1;
    } else if (!strcmp(k, "result")) {
      const cJSON *v = cJSON_GetArrayItem(ev, 3);
      struct apromo_outcome o;
      const char *want = cJSON_GetArrayItem(ev, 4)->valuestring;
      double t = cJSON_GetArrayItem(ev, 2)->valuedouble, vs[SPEC_MAX_OBJECTIVES];
      if (cJSON_IsArray(v)) {
        for (int j = 0; j < r->p.nobjectives; j++) {
          const cJSON *x = cJSON_GetArrayItem(v, j);
          vs[j] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        }
        ck_assert_int_eq(apromo_on_result_mo(r->a, id, t, vs, &o), 0);
      } else {
        ck_assert_int_eq(
            apromo_on_result(r->a, id, t, cJSON_IsNumber(v) ? v->valuedouble : NAN, &o), 0);
      }
      ck_assert_str_eq(o.action == APROMO_PAUSE  ? "pause"
                       : o.action == APROMO_STOP ? "stop"
                                                 : "continue",
                       want);
      ck_assert_int_eq(o.rung, cJSON_GetArrayItem(ev, 5)->valueint);
      if (o.action == APROMO_PAUSE) ck_assert_int_eq(o.rank, cJSON_GetArrayItem(ev, 6)->valueint);
      if (o.action == APROMO_PAUSE && cJSON_IsArray(v)) { /* front, fronts */
        ck_assert_int_eq(o.front, cJSON_GetArrayItem(ev, 8)->valueint);
        ck_assert_int_eq(o.nfronts, cJSON_GetArrayItem(ev, 9)->valueint);
      }
      if (o.rung >= 0) ck_assert_int_eq(o.n, cJSON_GetArrayItem(ev, 7)->valueint);
      keep(r, id, o.record);
    } else {
      /* ["choose", can_new, kind, trial, rung, top, n] */
      struct apromo_choice c;
      const char *want = cJSON_GetArrayItem(ev, 2)->valuestring;
      int can_new = (int)id;
      ck_assert_int_eq(apromo_choose(r->a, NULL, NULL, &c), 0);
      ck_assert_str_eq(c.found ? "resume" : can_new ? "new" : "wait", want);
      if (c.found) {
        ck_assert_int_eq(c.trial_id, (int64_t)cJSON_GetArrayItem(ev, 3)->valuedouble);
        ck_assert_int_eq(c.rung, cJSON_GetArrayItem(ev, 4)->valueint);
        ck_assert_int_eq(c.top, cJSON_GetArrayItem(ev, 5)->valueint);
        ck_assert_int_eq(c.n, cJSON_GetArrayItem(ev, 6)->valueint);
        keep(r, c.trial_id, c.record);
      }
    }
  }
  apromo_free(r->a);
  for (size_t i = 0; i < r->nrecs; i++) free(r->recs[i].json);
  free(r->recs);
  free(r);
}

static void run_vectors(int every) {
  cJSON *doc = vectors_load(ASHA_PROMO_VECTORS), *cs;
  int n = 0;
  cJSON_ArrayForEach(cs, cJSON_GetObjectItem(doc, "cases")) {
    run_case(cs, every);
    n++;
  }
  ck_assert_int_eq(n, 10);
  cJSON_Delete(doc);
}

START_TEST(agrees_with_paper_transcription) { run_vectors(0); }
END_TEST

START_TEST(restart_from_records_decides_the_same) {
  run_vectors(37);
  run_vectors(5);
}
END_TEST

/* The sched layer: reasons, RESUME/NEW/WAIT, the record round trip, state. */
START_TEST(sched_reasons) {
  struct sched_params p = params(1, 3, 9, 1);
  struct sched *s;
  struct sched_outcome o;
  struct sched_choice c;
  double v;
  cJSON *st;
  ck_assert_int_eq(sched_create(&p, SPEC_MODE_MAX, 7, &s), 0);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(sched_choose(s, 1, NULL, NULL, &c), 0);
    ck_assert_int_eq(c.kind, SCHED_CHOOSE_NEW);
    ck_assert_int_eq(sched_add_trial(s, 10 + i, i, "{}"), 0);
    v = i;
    ck_assert_int_eq(sched_on_result(s, 10 + i, 1, &v, &o), 0);
    ck_assert_int_eq(o.action, SCHED_PAUSE);
    ck_assert_ptr_nonnull(o.record);
    sched_outcome_clear(&o);
  }
  ck_assert_int_eq(sched_on_result(s, 12, 1, NULL, &o), 0); /* no metric: continue */
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(sched_choose(s, 0, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, SCHED_CHOOSE_RESUME);
  ck_assert_int_eq(c.trial_id, 12);
  ck_assert_str_eq(c.reason, "promoted from rung 0 (top 1 of 3 at training_iteration 1), "
                             "runs to 3");
  sched_choice_clear(&c);
  ck_assert_int_eq(sched_choose(s, 0, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, SCHED_CHOOSE_WAIT);
  v = 5;
  ck_assert_int_eq(sched_on_result(s, 12, 3, &v, &o), 0);
  ck_assert_str_eq(o.reason, "paused at rung 1 (training_iteration 3): rank 1 of 1 there");
  sched_outcome_clear(&o);
  /* A paused trial's late result changes nothing; max_t ends a trial. */
  ck_assert_int_eq(sched_on_result(s, 11, 9, &v, &o), 0);
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(sched_add_trial(s, 13, 3, "{}"), 0);
  ck_assert_int_eq(sched_on_result(s, 13, 9, &v, &o), 0);
  ck_assert_int_eq(o.action, SCHED_STOP);
  ck_assert_str_eq(o.reason, "reached max_t 9 (training_iteration 9)");
  sched_outcome_clear(&o);
  ck_assert_int_eq(sched_state_json(s, &st), 0);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(st, "promotion")));
  cJSON *r0 = cJSON_GetArrayItem(
      cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(st, "brackets"), 0), "rungs"), 0);
  ck_assert_int_eq(cJSON_GetObjectItem(r0, "recorded")->valueint, 3);
  ck_assert_int_eq(cJSON_GetObjectItem(r0, "promoted")->valueint, 1);
  cJSON_Delete(st);
  sched_free(s);
}
END_TEST

/* HyperBand's halving lists the paused trials it stopped in out.ended. */
/* Several objectives through the sched layer: the pause says its rank and
 * front in the non-dominated order, a result without every objective
 * counts for no rung, and the promotion takes the order's top. */
START_TEST(sched_reasons_several_objectives) {
  struct sched_params p = params(1, 3, 9, 1);
  struct sched *s;
  struct sched_outcome o;
  struct sched_choice c;
  /* (loss min, size min): (0.5, 2) and (0.2, 4) are one front; (0.6, 5)
   * is dominated; the epsilon-net starts at the least loss. */
  const double v[3][2] = {{0.5, 2}, {0.6, 5}, {0.2, 4}};
  const char *why[3] = {
      "paused at rung 0 (training_iteration 1): rank 1 of 1 there in non-dominated order (front "
      "1 of 1)",
      "paused at rung 0 (training_iteration 1): rank 2 of 2 there in non-dominated order (front "
      "2 of 2)",
      "paused at rung 0 (training_iteration 1): rank 1 of 3 there in non-dominated order (front "
      "1 of 2)"};
  p.nobjectives = 2;
  ck_assert_int_eq(sched_create(&p, SPEC_MODE_MIN, 7, &s), 0);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(sched_add_trial(s, 10 + i, i, "{}"), 0);
    ck_assert_int_eq(sched_on_result(s, 10 + i, 1, v[i], &o), 0);
    ck_assert_int_eq(o.action, SCHED_PAUSE);
    ck_assert_str_eq(o.reason, why[i]);
    sched_outcome_clear(&o);
  }
  ck_assert_int_eq(sched_on_result(s, 12, 1, NULL, &o), 0); /* an objective missing */
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_int_eq(sched_choose(s, 0, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, SCHED_CHOOSE_RESUME);
  ck_assert_int_eq(c.trial_id, 12);
  sched_choice_clear(&c);
  sched_free(s);
}
END_TEST

START_TEST(hyperband_ended_list) {
  struct sched_params p;
  struct sched *s;
  struct sched_outcome o;
  struct sched_choice c;
  double v;
  size_t nended = 0;
  memset(&p, 0, sizeof p);
  p.type = SPEC_SCHED_HYPERBAND;
  p.max_t = 9;
  p.reduction_factor = 3;
  p.num_trials = 8;
  snprintf(p.time_attr, sizeof p.time_attr, "training_iteration");
  ck_assert_int_eq(sched_create(&p, SPEC_MODE_MAX, 1, &s), 0);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(sched_add_trial(s, 50 + i, i, NULL), 0);
  /* Bracket 1 = trials 3..7, rung at t=3: the last to arrive halves it. */
  for (int i = 3; i < 8; i++) {
    v = i;
    ck_assert_int_eq(sched_on_result(s, 50 + i, 3, &v, &o), 0);
    nended += o.nended;
    for (size_t k = 0; k < o.nended; k++) {
      ck_assert_int_lt(o.ended[k].trial_id, 53 + 3);
      ck_assert(o.ended[k].reason[0]);
    }
    sched_outcome_clear(&o);
    ck_assert_ptr_null(o.ended);
  }
  ck_assert_int_eq(nended, 3); /* ranks 3..5 of 5 stopped, top 2 go on */
  ck_assert_int_eq(sched_choose(s, 0, NULL, NULL, &c), 0);
  sched_choice_clear(&c);
  sched_free(s);
}
END_TEST

int main(void) {
  Suite *su = suite_create("asha_promo");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, rungs_below_max_t);
  tcase_add_test(tc, memory_is_what_the_plan_and_records_need);
  tcase_add_test(tc, promote_top_third);
  tcase_add_test(tc, skips_unresumable_and_ended);
  tcase_add_test(tc, agrees_with_paper_transcription);
  tcase_add_test(tc, restart_from_records_decides_the_same);
  tcase_add_test(tc, sched_reasons);
  tcase_add_test(tc, sched_reasons_several_objectives);
  tcase_add_test(tc, hyperband_ended_list);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
