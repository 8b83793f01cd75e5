/* Bounded memory, in-process (server/state/state_compact.c, state_cold.c,
 * state_load.c): an ended trial is compacted compact_delay_ms after its end
 * (its history leaves memory; its summary stays; SQLite answers the rest)
 * and hydrated back; a finished experiment goes cold cold_delay_ms after its
 * end (its trials leave memory) and is warmed back by a read. The delays
 * are set on the server struct and time is the fake clock's. The e2e
 * counterpart: tests/server/e2e/test_compact.py. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static struct harness H;
static struct server *S;
static const uint64_t T0 = FAKE_CLOCK_START_MS;

#define METRIC ", \"metric\": \"loss\", \"mode\": \"min\""

static void setup(void) {
  h_open(&H);
  S = &H.s;
}

static void teardown(void) { h_close(&H); }

static struct srv_experiment *submit(const char *name, int n, const char *extra) {
  char buf[1024];
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, extra));
}

static const char *const R1 = "{\"training_iteration\":1,\"loss\":0.5,\"acc\":0.1}";
static const char *const R2 = "{\"training_iteration\":2,\"loss\":0.25,\"acc\":0.2}";

/* A trial of e leased to w with two results, completed at `at`. */
static struct srv_trial *run_one(struct srv_worker *w, uint64_t at, double l2) {
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_ptr_nonnull(t);
  h_result(&H, t, 1, R1);
  char r2[128];
  snprintf(r2, sizeof r2, "{\"training_iteration\":2,\"loss\":%g,\"acc\":0.2}", l2);
  h_result(&H, t, 2, r2);
  fake_clock_set_ms(at);
  h_complete(&H, t);
  return t;
}

static char *last_result(const struct srv_trial *t) {
  char *out = NULL;
  ck_assert_int_eq(state_trial_last_result(S, t, &out), 0);
  return out;
}

/* Rule: an ended trial is compacted compact_delay_ms after its end (not
 * before): its history leaves memory, its summary (nres, last_t, scores)
 * stays, state_trial_last_result answers from SQLite, and state_trial_hydrate
 * brings the history back whole. */
START_TEST(compact_after_delay_and_hydrate) {
  S->compact_delay_ms = 1000;
  submit("c", 2, METRIC);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  uint64_t end = T0 + 5000;
  struct srv_trial *t = run_one(w, end, 0.25);
  h_sync(&H); /* its results are in SQLite, as before any reply */
  state_compact_due(S, end + 999);
  ck_assert_int_eq(t->compact, 0);
  ck_assert_ptr_nonnull(t->ts);
  char *lr = last_result(t);
  ck_assert_str_eq(lr, R2);
  free(lr);
  state_compact_due(S, end + 1000);
  ck_assert_int_eq(t->compact, 1);
  ck_assert_int_eq(S->ncompact, 1);
  ck_assert_ptr_null(t->ts);
  ck_assert_ptr_null(t->values);
  ck_assert_ptr_null(t->last_result);
  ck_assert_uint_eq(t->nres, 2);
  ck_assert(t->last_t == 2);
  ck_assert(t->scores[BEST_SUM_LAST] == 0.25);
  ck_assert(t->scores[BEST_SUM_MIN] == 0.25 && t->scores[BEST_SUM_MAX] == 0.5);
  lr = last_result(t); /* from SQLite */
  ck_assert_ptr_nonnull(lr);
  ck_assert_str_eq(lr, R2);
  free(lr);
  ck_assert_int_eq(state_trial_hydrate(S, t), 0);
  ck_assert_int_eq(t->compact, 0);
  ck_assert_int_eq(S->ncompact, 0);
  ck_assert_uint_eq(t->nres, 2);
  ck_assert(t->ts[0] == 1 && t->ts[1] == 2);
  ck_assert_uint_eq(t->nvals, 2);
  ck_assert(t->values[0] == 0.5 && t->values[1] == 0.25);
  ck_assert_str_eq(t->last_result, R2);
  ck_assert_int_eq(state_trial_hydrate(S, t), 0); /* whole already: nothing */
}
END_TEST

/* Rule: the daemon's tick (state_expire_leases) compacts what is due; a
 * running trial and one that has not ended are never compacted. */
START_TEST(compact_on_the_tick_only_ended) {
  S->compact_delay_ms = 1000;
  submit("c", 3, METRIC);
  struct srv_worker *w = h_worker(&H, "w", 3, 0, 0);
  struct srv_trial *ended = run_one(w, T0 + 100, 0.3);
  struct srv_trial *live = h_lease(&H, w);
  h_result(&H, live, 1, R1);
  h_sync(&H);
  h_tick(&H, T0 + 1100);
  ck_assert_int_eq(ended->compact, 1);
  ck_assert_int_eq(live->compact, 0);
  ck_assert_str_eq(live->last_result, R1);
  ck_assert_int_eq(S->ncompact, 1);
}
END_TEST

/* Rule: after a restart an ended trial is compact from the start (its
 * results are not read) and still answers its last result from SQLite. */
START_TEST(restart_loads_ended_trials_compact) {
  struct srv_experiment *e = submit("c", 2, METRIC);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *t = run_one(w, T0 + 100, 0.25);
  struct srv_trial *u = h_lease(&H, w); /* keeps the experiment live (warm) */
  h_result(&H, u, 1, R1);
  int64_t tid = t->id, uid = u->id, eid = e->id;
  h_restart(&H);
  ck_assert_int_eq(server_experiment(S, eid)->cold, 0);
  t = server_trial(S, tid);
  u = server_trial(S, uid);
  ck_assert_int_eq(t->compact, 1);
  ck_assert_uint_eq(t->nres, 2);
  ck_assert(t->scores[BEST_SUM_LAST] == 0.25);
  char *lr = last_result(t);
  ck_assert_str_eq(lr, R2);
  free(lr);
  ck_assert_int_eq(u->compact, 0); /* a running one's history is read */
  ck_assert_uint_eq(u->nres, 1);
  ck_assert_str_eq(u->last_result, R1);
}
END_TEST

/* Rule: a finished experiment goes cold cold_delay_ms after its end (not
 * before): its trials leave memory (slots empty, counts and best kept);
 * state_trial_ref and state_experiment_warm read them back (compact, same
 * answers); a warmed one goes cold again cold_delay_ms after that read. */
START_TEST(cold_after_delay_and_warm) {
  S->cold_delay_ms = 2000;
  S->compact_delay_ms = 0;
  struct srv_experiment *e = submit("k", 2, METRIC);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w);
  struct srv_trial *b = run_one(w, T0 + 50, 0.125);
  h_result(&H, a, 1, R1);
  uint64_t end = T0 + 100;
  fake_clock_set_ms(end);
  h_complete(&H, a); /* the last end: the experiment ends */
  ck_assert_int_eq(e->status, ES_TERMINATED);
  int64_t aid = a->id, bid = b->id;
  h_sync(&H);
  state_cold_due(S, end + 1999);
  ck_assert_int_eq(e->cold, 0);
  ck_assert_ptr_eq(server_trial(S, aid), a);
  state_cold_due(S, end + 2000);
  ck_assert_int_eq(e->cold, 1);
  ck_assert_int_eq(S->ncold, 1);
  ck_assert_int_eq(e->ntrials, 0);
  ck_assert_int_eq(e->cold_ntrials, 2);
  ck_assert_int_eq(state_experiment_created(e), 2);
  ck_assert_ptr_null(server_trial(S, aid));
  ck_assert_ptr_null(server_trial(S, bid));
  ck_assert_int_eq(e->counts[TS_TERMINATED], 2);
  ck_assert_int_eq(e->has_cold_best, 1);
  ck_assert_int_eq(e->cold_best_id, bid);
  ck_assert(e->cold_best_value == 0.125);
  /* A read warms it. */
  uint64_t read = end + 3000;
  fake_clock_set_ms(read);
  struct srv_trial *back = state_trial_ref(S, bid);
  ck_assert_ptr_nonnull(back);
  ck_assert_int_eq(back->id, bid);
  ck_assert_int_eq(back->status, TS_TERMINATED);
  ck_assert_int_eq(back->compact, 1);
  ck_assert_uint_eq(back->nres, 2);
  ck_assert(back->scores[BEST_SUM_LAST] == 0.125);
  ck_assert_int_eq(e->cold, 0);
  ck_assert_int_eq(S->ncold, 0);
  ck_assert_int_eq(e->ntrials, 2);
  ck_assert_ptr_eq(e->trials[1], back);
  ck_assert_ptr_nonnull(server_trial(S, aid));
  char *lr = last_result(back);
  ck_assert_str_eq(lr, "{\"training_iteration\":2,\"loss\":0.125,\"acc\":0.2}");
  free(lr);
  ck_assert_int_eq(state_experiment_warm(S, e), 0); /* warm: nothing to read */
  /* Cold again a delay after its last read, not before. */
  state_cold_due(S, read + 1999);
  ck_assert_int_eq(e->cold, 0);
  state_cold_due(S, read + 2000);
  ck_assert_int_eq(e->cold, 1);
  ck_assert_ptr_null(server_trial(S, bid));
  /* state_experiment_warm reads them back too. */
  ck_assert_int_eq(state_experiment_warm(S, e), 0);
  ck_assert_int_eq(e->ntrials, 2);
  ck_assert_int_eq(e->trials[0]->id, aid);
}
END_TEST

/* Rule: a read of a finished experiment that is still warm postpones its
 * going cold to cold_delay_ms after that read. */
START_TEST(cold_postponed_by_a_read) {
  S->cold_delay_ms = 2000;
  struct srv_experiment *e = submit("k", 1, METRIC);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  uint64_t end = T0 + 100;
  run_one(w, end, 0.5);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  h_sync(&H);
  fake_clock_set_ms(end + 1500);
  ck_assert_int_eq(state_experiment_warm(S, e), 0); /* a read: warm already */
  state_cold_due(S, end + 2000);
  ck_assert_int_eq(e->cold, 0);
  state_cold_due(S, end + 1500 + 1999);
  ck_assert_int_eq(e->cold, 0);
  state_cold_due(S, end + 1500 + 2000);
  ck_assert_int_eq(e->cold, 1);
}
END_TEST

/* Rule: an experiment with work left never goes cold, and a restart loads
 * a finished experiment cold from the start. */
START_TEST(cold_only_when_finished_and_after_restart) {
  S->cold_delay_ms = 1000;
  struct srv_experiment *done = submit("done", 1, METRIC);
  struct srv_experiment *live = submit("live", 2, METRIC);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  /* The fair order (a tie: the older first) leases done's trial, then live's. */
  struct srv_trial *d = run_one(w, T0 + 10, 0.5);
  ck_assert_int_eq(d->experiment_id, done->id);
  struct srv_trial *t = run_one(w, T0 + 20, 0.5);
  ck_assert_int_eq(t->experiment_id, live->id);
  ck_assert_int_eq(done->status, ES_TERMINATED);
  h_sync(&H);
  state_cold_due(S, T0 + 60000);
  ck_assert_int_eq(live->cold, 0);
  ck_assert_int_eq(done->cold, 1);
  int64_t did = done->id, lid = live->id, dtid = d->id;
  h_restart(&H);
  ck_assert_int_eq(server_experiment(S, did)->cold, 1);
  ck_assert_int_eq(server_experiment(S, lid)->cold, 0);
  ck_assert_int_eq(S->ncold, 1);
  ck_assert_ptr_null(server_trial(S, dtid));
  ck_assert_ptr_nonnull(state_trial_ref(S, dtid));
}
END_TEST

/* Rule (outcome constraints): a trial's violation is its last result's,
 * kept through compaction, going cold and warm again, and a restart (which
 * reads the compact trials' last results back and loads the experiment
 * warm); the cold best is the best feasible trial. */
START_TEST(constraint_violations_kept) {
  S->cold_delay_ms = 1000;
  S->compact_delay_ms = 0;
  struct srv_experiment *e =
      submit("con", 3,
             METRIC ", \"constraints\": [{\"metric\": \"mem\", \"op\": \"<=\", "
                    "\"value\": 100}]");
  struct srv_worker *w = h_worker(&H, "w", 3, 0, 0);
  struct srv_trial *t[3];
  /* loss 0.1 at mem 500 (the best loss, infeasible by 400); 0.3 at 50
   * (feasible); 0.2 at 100 then 150 (infeasible by 50 at its last). */
  const char *res[3][2] = {{"{\"training_iteration\":1,\"loss\":0.1,\"mem\":500}", NULL},
                           {"{\"training_iteration\":1,\"loss\":0.3,\"mem\":50}", NULL},
                           {"{\"training_iteration\":1,\"loss\":0.2,\"mem\":100}",
                            "{\"training_iteration\":2,\"loss\":0.2,\"mem\":150}"}};
  const double want[3] = {400, 0, 50};
  for (int i = 0; i < 3; i++) t[i] = h_lease(&H, w);
  for (int i = 0; i < 3; i++) {
    h_result(&H, t[i], 1, res[i][0]);
    if (i == 2) ck_assert(t[i]->violation == 0); /* feasible at its first */
    if (res[i][1]) h_result(&H, t[i], 2, res[i][1]);
    ck_assert(t[i]->violation == want[i]);
  }
  int64_t ids[3] = {t[0]->id, t[1]->id, t[2]->id}, eid = e->id;
  fake_clock_set_ms(T0 + 100);
  for (int i = 0; i < 3; i++) h_complete(&H, t[i]);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  h_sync(&H);
  state_cold_due(S, T0 + 100 + 1000);
  ck_assert_int_eq(e->cold, 1);
  ck_assert_int_eq(e->has_cold_best, 1);
  ck_assert_int_eq(e->cold_best_id, ids[1]);
  ck_assert(e->cold_best_value == 0.3);
  ck_assert_int_eq(state_experiment_warm(S, e), 0);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(e->trials[i]->compact, 1);
    ck_assert(e->trials[i]->violation == want[i]);
  }
  h_restart(&H);
  e = server_experiment(S, eid);
  ck_assert_int_eq(e->cold, 0); /* its rows do not say which trials are feasible */
  for (int i = 0; i < 3; i++) {
    struct srv_trial *u = server_trial(S, ids[i]);
    ck_assert_int_eq(u->compact, 1);
    ck_assert(u->violation == want[i]);
  }
  state_cold_due(S, fake_clock_now_ms() + S->cold_delay_ms); /* the delay as the load set it */
  ck_assert_int_eq(e->cold, 1);
  ck_assert_int_eq(e->cold_best_id, ids[1]);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_memory");
  TCase *tc = tcase_create("compact");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, compact_after_delay_and_hydrate);
  tcase_add_test(tc, constraint_violations_kept);
  tcase_add_test(tc, compact_on_the_tick_only_ended);
  tcase_add_test(tc, restart_loads_ended_trials_compact);
  suite_add_tcase(s, tc);
  TCase *cold = tcase_create("cold");
  tcase_add_checked_fixture(cold, setup, teardown);
  tcase_add_test(cold, cold_after_delay_and_warm);
  tcase_add_test(cold, cold_postponed_by_a_read);
  tcase_add_test(cold, cold_only_when_finished_and_after_restart);
  suite_add_tcase(s, cold);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
