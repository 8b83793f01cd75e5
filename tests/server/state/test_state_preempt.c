/* Preemption is not failure, in-process (server/state/state_preempt.c,
 * state_trial.c's TE_RELEASE): a release with reason "preempted" requeues
 * the trial without counting a failure (max_failures 0 and fail_fast do
 * not end it), its "preempted" event says the iterations and seconds its
 * last result was past its checkpoint, the experiment counts both (and a
 * restart counts them again from the events); a plain release stays a
 * "released" event. Spot placement: a spot worker leaves the trial with the
 * most work behind its checkpoint, or one resumed from PAUSED, to a free
 * non-spot worker, and takes it when there is none. The e2e counterpart,
 * with real processes, is tests/worker/e2e/test_preempt.py. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "state_preempt.h"
#include "workers.h"

static struct harness H;
static struct server *S;

#define STRICT ", \"metric\": \"loss\", \"mode\": \"min\", \"max_failures\": 0, \"fail_fast\": true"

static void setup(void) {
  h_open(&H);
  S = &H.s;
}

static void teardown(void) { h_close(&H); }

static struct srv_experiment *submit(const char *name, int n, const char *extra) {
  char buf[1024];
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, extra));
}

/* Results 1..n, time_total_s 1.5 per iteration. */
static void run_to(struct srv_trial *t, int from, int n) {
  char js[128];
  for (int i = from; i <= n; i++) {
    snprintf(js, sizeof js, "{\"training_iteration\":%d,\"loss\":%g,\"time_total_s\":%g}", i,
             1.0 / i, 1.5 * i);
    ck_assert_int_eq(h_result(&H, t, i, js), 'c');
  }
}

static int release(struct srv_trial *t, int preempted, double notice_at) {
  uint64_t ticket = 0;
  struct lease_token l = {t->worker_id, t->attempt};
  struct trial_event_args a = {.lease = &l, .preempted = preempted, .notice_at = notice_at};
  return state_trial_event(S, t, TE_RELEASE, &a, &ticket);
}

/* Rule: a preempted release is not a failure; its event says what was lost
 * since the checkpoint it resumes from; the experiment counts it. */
START_TEST(preempted_is_not_failure_and_says_what_was_lost) {
  struct srv_experiment *e = submit("p", 2, STRICT);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  run_to(t, 1, 5);
  h_checkpoint(&H, t, 3, "ck3");
  ck_assert_int_eq(release(t, 1, 1.8e9), 0);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(t->num_failures, 0);
  ck_assert_int_eq(e->status, ES_RUNNING);
  ck_assert_int_eq(e->preemptions, 1);
  ck_assert(e->lost_iterations == 2 && e->lost_seconds == 3.0);
  h_sync(&H);
  char *row = h_query(&H, "SELECT kind, json_extract(data, '$.lost_iterations'), "
                          "json_extract(data, '$.lost_seconds'), "
                          "json_extract(data, '$.notice_at'), json_extract(data, '$.attempt') "
                          "FROM trial_events WHERE trial_id = 1 AND kind != 'leased'");
  ck_assert_str_eq(row, "preempted|2|3|1800000000|1\n");
  free(row);
  /* It resumes from its checkpoint; preempted again at once: nothing more lost. */
  ck_assert_ptr_eq(h_lease(&H, w), t);
  ck_assert_int_eq(release(t, 1, 0), 0);
  ck_assert_int_eq(e->preemptions, 2);
  ck_assert(e->lost_iterations == 4 && e->lost_seconds == 6.0);
  /* Its uploads past the checkpoint: then only what is past the new one. */
  ck_assert_ptr_eq(h_lease(&H, w), t);
  run_to(t, 6, 8);
  h_checkpoint(&H, t, 8, "ck8");
  ck_assert_int_eq(release(t, 1, 0), 0);
  ck_assert_int_eq(e->preemptions, 3);
  ck_assert(e->lost_iterations == 4 && e->lost_seconds == 6.0);
  ck_assert_int_eq(t->num_failures, 0);
  ck_assert_int_eq(e->status, ES_RUNNING);
  /* A restart counts them again from the events. */
  h_restart(&H);
  e = server_experiment(S, 1);
  ck_assert_int_eq(e->preemptions, 3);
  ck_assert(e->lost_iterations == 4 && e->lost_seconds == 6.0);
}
END_TEST

/* Rule: a release without the reason (a drain, self-fencing) stays a
 * "released" event and counts no preemption. */
START_TEST(plain_release_is_not_a_preemption) {
  struct srv_experiment *e = submit("r", 1, STRICT);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  run_to(t, 1, 2);
  ck_assert_int_eq(release(t, 0, 0), 0);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(e->preemptions, 0);
  h_sync(&H);
  char *row = h_query(&H, "SELECT group_concat(kind) FROM trial_events WHERE trial_id = 1");
  ck_assert_str_eq(row, "leased,released\n");
  free(row);
}
END_TEST

/* Rule (pure): a spot worker leaves a precious trial only when a free
 * non-spot worker exists. */
START_TEST(spot_rule_table) {
  for (int spot = 0; spot < 2; spot++)
    for (int precious = 0; precious < 2; precious++)
      for (int free_ = 0; free_ < 2; free_++)
        ck_assert_int_eq(state_preempt_rule(spot, precious, free_), spot && precious && free_);
}
END_TEST

/* Rule: the pending trial with the most work behind its checkpoint goes to
 * a free non-spot worker; a spot worker takes another, and takes it when no
 * non-spot worker has room. */
START_TEST(spot_worker_leaves_the_longest_trial_to_a_non_spot_one) {
  submit("s", 3, STRICT);
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0);
  struct srv_trial *t1 = h_lease(&H, a), *t2 = h_lease(&H, a);
  run_to(t1, 1, 6);
  h_checkpoint(&H, t1, 6, "ck6");
  run_to(t2, 1, 2);
  h_checkpoint(&H, t2, 2, "ck2");
  ck_assert_int_eq(release(t1, 1, 0), 0);
  ck_assert_int_eq(release(t2, 1, 0), 0);
  struct srv_worker *spot = h_worker(&H, "spot", 1, 0, 0);
  struct srv_worker *ondemand = h_worker(&H, "ondemand", 1, 0, 0);
  spot->spot = 1;
  a->lost = 1; /* gone: only the two new ones lease */
  /* t1 (6 iterations behind its checkpoint) is left to ondemand. */
  ck_assert_ptr_eq(h_lease(&H, spot), t2);
  ck_assert_ptr_eq(h_lease(&H, ondemand), t1);
  /* No non-spot worker with room: the spot one takes the longest. */
  h_complete(&H, t2);
  ck_assert_int_eq(release(t1, 1, 0), 0);
  ondemand->lost = 1;
  ck_assert_ptr_eq(h_lease(&H, spot), t1);
}
END_TEST

/* Rule: a trial resumed from PAUSED (a promotion) goes to a free non-spot
 * worker first. */
START_TEST(spot_worker_leaves_a_promoted_trial) {
  submit("q", 2, STRICT);
  struct srv_worker *spot = h_worker(&H, "spot", 1, 0, 0);
  struct srv_worker *ondemand = h_worker(&H, "ondemand", 2, 0, 0);
  spot->spot = 1;
  struct srv_trial *t = h_lease(&H, ondemand);
  run_to(t, 1, 2);
  uint64_t ticket = 0;
  ck_assert_int_eq(state_trial_event(S, t, TE_STOP, NULL, &ticket), 0); /* ended; extend: */
  ck_assert_int_eq(state_trial_event(S, t, TE_RESUME, NULL, &ticket), 0);
  ck_assert_int_eq(t->promoted, 0); /* from TERMINATED: not a promotion */
  ck_assert_int_eq(
      state_trial_event(S, t, TE_LEASE, &(struct trial_event_args){.worker = ondemand}, &ticket),
      0);
  ck_assert_int_eq(state_trial_event(S, t, TE_PAUSE, NULL, &ticket), 0);
  ck_assert_int_eq(state_trial_event(S, t, TE_RESUME, NULL, &ticket), 0);
  ck_assert_int_eq(t->promoted, 1);
  /* The spot worker gets a new trial; ondemand (1 cpu free) the promoted one. */
  struct srv_trial *other = h_lease(&H, spot);
  ck_assert_ptr_nonnull(other);
  ck_assert_ptr_ne(other, t);
  ck_assert_ptr_eq(h_lease(&H, ondemand), t);
  ck_assert_int_eq(t->promoted, 0); /* leased: no longer a promotion waiting */
}
END_TEST

/* Rule: the spot label is stored with the worker's row. A worker never
 * registers again after a server restart, so the restarted server must
 * still leave the trial with the most work behind its checkpoint to the
 * free non-spot worker. */
START_TEST(spot_label_survives_a_restart) {
  submit("r2", 2, STRICT);
  struct srv_worker *a = h_worker(&H, "a", 1, 0, 0);
  struct srv_trial *t1 = h_lease(&H, a);
  run_to(t1, 1, 6);
  h_checkpoint(&H, t1, 6, "ck6");
  ck_assert_int_eq(release(t1, 1, 0), 0);
  struct srv_worker *w = NULL;
  uint64_t ticket = 0;
  ck_assert_int_eq(workers_register(S, "spot", 1, 0, 0, 1, &w, &ticket), 0);
  ck_assert_int_eq(w->spot, 1);
  h_worker(&H, "ondemand", 1, 0, 0);
  h_restart(&H);
  struct srv_worker *spot = server_worker(S, 2), *ondemand = server_worker(S, 3);
  ck_assert_int_eq(spot->spot, 1);
  ck_assert_int_eq(ondemand->spot, 0);
  server_worker(S, 1)->lost = 1; /* only the two others lease */
  struct srv_trial *other = h_lease(&H, spot);
  ck_assert_ptr_nonnull(other);
  ck_assert_int_ne(other->id, 1);
  ck_assert_int_eq(h_lease(&H, ondemand)->id, 1);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_preempt");
  TCase *tc = tcase_create("preempt");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, preempted_is_not_failure_and_says_what_was_lost);
  tcase_add_test(tc, plain_release_is_not_a_preemption);
  tcase_add_test(tc, spot_rule_table);
  tcase_add_test(tc, spot_worker_leaves_the_longest_trial_to_a_non_spot_one);
  tcase_add_test(tc, spot_worker_leaves_a_promoted_trial);
  tcase_add_test(tc, spot_label_survives_a_restart);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}
