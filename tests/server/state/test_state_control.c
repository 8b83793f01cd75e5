/* A user's control of an experiment and the fair share of leases,
 * in-process (server/state/control.c, state_live.c, state.c): pause and
 * resume, PATCH (num_samples, max_concurrent_trials, priority, notes, tags,
 * scheduler.max_t), one trial's stop, delete (force and -EBUSY), cancel;
 * leases across experiments by running/priority. Each change is checked in
 * memory and again after a restart (it was persisted in its transaction).
 * The e2e counterparts: tests/server/e2e/test_control.py, test_fair.py. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "decide.h"
#include "harness.h"

static struct harness H;
static struct server *S;
static const uint64_t T0 = FAKE_CLOCK_START_MS;
static uint64_t ticket;

static void setup(void) {
  h_open(&H);
  S = &H.s;
}

static void teardown(void) { h_close(&H); }

static struct srv_experiment *submit(const char *name, int n, const char *extra) {
  char buf[1024];
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, extra));
}

static void reason_is(const struct srv_experiment *e, const char *want) {
  char buf[256];
  state_experiment_pending_reason(S, e, buf, sizeof buf);
  ck_assert_str_eq(buf, want);
}

/* s->live holds exactly the RUNNING experiments. */
static void live_is_exact(void) {
  int64_t running = 0;
  for (int64_t i = 0; i < S->nexps; i++) {
    struct srv_experiment *e = S->exps[i];
    int is_running = e && !e->deleted && e->status == ES_RUNNING;
    running += is_running;
    ck_assert_msg(is_running == (e && e->live_pos != 0), "experiment %lld: live_pos %lld",
                  (long long)(i + 1), e ? (long long)e->live_pos : -1LL);
    if (e && e->live_pos) ck_assert_ptr_eq(S->live[e->live_pos - 1], e);
  }
  ck_assert_int_eq(S->nlive, running);
}

static char patch_err[512];

static int patch(struct srv_experiment *e, const struct control_patch *p, const char *want_field) {
  char field[128];
  int rc = control_patch(S, e, p, field, sizeof field, patch_err, sizeof patch_err, &ticket);
  if (want_field) ck_assert_str_eq(field, want_field);
  return rc;
}

/* Rule: pause makes a RUNNING experiment PAUSED: it leaves the live list,
 * no trial starts (state_pending_reason says why), running trials keep
 * their leases; it is persisted. Pause of a non-RUNNING one and resume of a
 * non-PAUSED one are -EINVAL. */
START_TEST(pause_stops_leases) {
  struct srv_experiment *e = submit("p", 3, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_int_eq(control_resume(S, e, &ticket), -EINVAL);
  ck_assert_int_eq(control_pause(S, e, &ticket), 0);
  ck_assert_int_eq(e->status, ES_PAUSED);
  live_is_exact();
  ck_assert_int_eq(e->live_pos, 0);
  ck_assert_ptr_null(h_lease(&H, w));
  reason_is(e, "experiment is PAUSED");
  ck_assert_int_eq(t->status, TS_RUNNING);
  ck_assert_int_eq(control_pause(S, e, &ticket), -EINVAL);
  int64_t id = e->id;
  h_restart(&H);
  e = server_experiment(S, id);
  ck_assert_int_eq(e->status, ES_PAUSED);
  live_is_exact();
  ck_assert_ptr_null(h_lease(&H, server_worker(S, 1)));
}
END_TEST

/* Rule: a paused experiment's running trial is told to pause at its
 * worker's heartbeat and ends its lease PAUSED (resources back, final
 * uploads still taken); resume makes the experiment RUNNING and live again
 * and its user-paused trials PENDING; the next lease resumes them. */
START_TEST(pause_then_resume_requeues_paused_trials) {
  struct srv_experiment *e = submit("p", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_int_eq(control_pause(S, e, &ticket), 0);
  fake_clock_set_ms(T0 + 1000);
  ck_assert_int_eq(h_heartbeat(&H, w, &t, 1), 0);
  ck_assert_int_eq(t->lease_end_action, SCHED_PAUSE);
  ck_assert_str_eq(t->reason, control_pause_reason);
  /* The worker stops; its lease ends (here: it runs out). */
  h_tick(&H, T0 + 1000 + H_LEASE_MS + 100);
  ck_assert_int_eq(t->status, TS_PAUSED);
  ck_assert_int_eq(t->lease_final, 1);
  ck_assert_int_eq(w->nrunning, 0);
  ck_assert_int_eq(e->counts[TS_PAUSED], 1);
  int64_t id = e->id, tid = t->id;
  h_restart(&H); /* PAUSED and its reason are stored */
  e = server_experiment(S, id);
  t = server_trial(S, tid);
  w = server_worker(S, 1);
  ck_assert_int_eq(t->status, TS_PAUSED);
  ck_assert_int_eq(control_resume(S, e, &ticket), 0);
  ck_assert_int_eq(e->status, ES_RUNNING);
  live_is_exact();
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(t->num_failures, 0);
  struct srv_trial *again = h_lease(&H, w);
  ck_assert_ptr_eq(again, t);
  ck_assert_int_eq(t->attempt, 2);
}
END_TEST

/* Rule: resumed before the paused trial's lease ended, the trial goes
 * straight back to PENDING when that lease ends (not PAUSED). */
START_TEST(resume_before_lease_end) {
  struct srv_experiment *e = submit("p", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_int_eq(control_pause(S, e, &ticket), 0);
  h_heartbeat(&H, w, &t, 1);
  ck_assert_int_eq(control_resume(S, e, &ticket), 0);
  ck_assert_int_eq(t->status, TS_RUNNING);
  h_tick(&H, T0 + H_LEASE_MS + 100);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_ptr_eq(h_lease(&H, w), t);
}
END_TEST

/* Rule: PATCH num_samples extends the plan (only upwards; not for
 * hyperband/pbt): a TERMINATED experiment runs again and the new trials are
 * made at lease time; the config and the plan are persisted. */
START_TEST(patch_num_samples_extends) {
  struct srv_experiment *e = submit("x", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  h_complete(&H, h_lease(&H, w));
  h_complete(&H, h_lease(&H, w));
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert_ptr_null(h_lease(&H, w));
  struct control_patch p = {.has_num_samples = 1, .num_samples = 1};
  ck_assert_int_eq(patch(e, &p, "num_samples"), -EINVAL);
  ck_assert_str_eq(patch_err, "num_samples can only go up (now 2)");
  ck_assert_int_eq(e->num_trials, 2);
  p.num_samples = 4;
  ck_assert_int_eq(patch(e, &p, ""), 0);
  ck_assert_int_eq(e->num_trials, 4);
  ck_assert_int_eq(e->status, ES_RUNNING);
  live_is_exact();
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->idx, 2);
  int64_t id = e->id;
  h_restart(&H);
  e = server_experiment(S, id);
  ck_assert_int_eq(e->num_trials, 4);
  ck_assert_int_eq(e->spec.num_samples, 4);
  ck_assert_ptr_nonnull(strstr(e->config, "\"num_samples\":4"));
  ck_assert_int_eq(h_lease(&H, server_worker(S, 1))->idx, 3);
  ck_assert_ptr_null(h_lease(&H, server_worker(S, 1)));
  /* Not for a scheduler planned for the trial count. */
  struct srv_experiment *hb = submit("hb", 3,
                                     ", \"metric\": \"loss\", \"mode\": \"min\", \"scheduler\": "
                                     "{\"type\": \"hyperband\", \"max_t\": 9}");
  p.num_samples = 5;
  ck_assert_int_eq(patch(hb, &p, "num_samples"), -EINVAL);
}
END_TEST

/* Rule: PATCH max_concurrent_trials changes the cap at once (and is
 * persisted in the config); priority, notes and tags are stored too. */
START_TEST(patch_max_concurrent_priority_notes_tags) {
  struct srv_experiment *e = submit("x", 4, ", \"max_concurrent_trials\": 1");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  ck_assert_ptr_nonnull(h_lease(&H, w));
  ck_assert_ptr_null(h_lease(&H, w));
  struct control_patch p = {.has_max_concurrent = 1,
                            .max_concurrent = 2,
                            .has_priority = 1,
                            .priority = 3,
                            .has_notes = 1,
                            .notes = "lr sweep",
                            .has_tags = 1,
                            .tags = "[\"a\",\"b\"]"};
  ck_assert_int_eq(patch(e, &p, ""), 0);
  ck_assert_int_eq(e->spec.max_concurrent_trials, 2);
  ck_assert(state_experiment_priority(e) == 3);
  ck_assert_str_eq(e->notes, "lr sweep");
  ck_assert_str_eq(e->tags, "[\"a\",\"b\"]");
  ck_assert_ptr_nonnull(h_lease(&H, w));
  ck_assert_ptr_null(h_lease(&H, w));
  int64_t id = e->id;
  h_restart(&H);
  e = server_experiment(S, id);
  ck_assert_int_eq(e->spec.max_concurrent_trials, 2);
  ck_assert(state_experiment_priority(e) == 3);
  ck_assert_str_eq(e->notes, "lr sweep");
  ck_assert_str_eq(e->tags, "[\"a\",\"b\"]");
  ck_assert_ptr_null(h_lease(&H, server_worker(S, 1)));
}
END_TEST

/* Rule: PATCH scheduler.max_t raises a fifo scheduler's max_t (only
 * upwards), is refused for other schedulers and without a max_t, and an
 * extend of a CANCELLED experiment is -EBUSY. */
START_TEST(patch_max_t) {
  struct srv_experiment *e = submit("f", 1,
                                    ", \"metric\": \"loss\", \"mode\": \"min\", "
                                    "\"scheduler\": {\"type\": \"fifo\", \"max_t\": 5}");
  struct control_patch p = {.has_max_t = 1, .max_t = 4};
  ck_assert_int_eq(patch(e, &p, "scheduler.max_t"), -EINVAL);
  ck_assert_str_eq(patch_err, "max_t can only go up (now 5)");
  ck_assert(e->spec.sched.max_t == 5);
  p.max_t = 10;
  ck_assert_int_eq(patch(e, &p, ""), 0);
  ck_assert(e->spec.sched.max_t == 10);
  struct srv_experiment *a = submit("a", 1,
                                    ", \"metric\": \"loss\", \"mode\": \"min\", "
                                    "\"scheduler\": {\"type\": \"asha\", \"max_t\": 5}");
  ck_assert_int_eq(patch(a, &p, "scheduler.max_t"), -EINVAL);
  ck_assert(a->spec.sched.max_t == 5);
  struct srv_experiment *none = submit("n", 1, "");
  ck_assert_int_eq(patch(none, &p, "scheduler.max_t"), -EINVAL);
  ck_assert_int_ge(h_cancel(&H, none, "user"), 0);
  struct control_patch more = {.has_num_samples = 1, .num_samples = 3};
  ck_assert_int_eq(patch(none, &more, "num_samples"), -EBUSY);
  int64_t id = e->id;
  h_restart(&H);
  e = server_experiment(S, id);
  ck_assert(e->spec.sched.max_t == 10);
}
END_TEST

/* Rule: a user's stop ends one trial TERMINATED (running or pending) with
 * its reason, gives the worker its resources back, and the lease that held
 * it may still send its final uploads; an ended trial cannot be stopped. */
START_TEST(stop_trial) {
  struct srv_experiment *e = submit("s", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w), *u = h_lease(&H, w);
  ck_assert_int_eq(control_stop_trial(S, t, &ticket), 0);
  ck_assert_int_eq(t->status, TS_TERMINATED);
  ck_assert_str_eq(t->reason, "stopped by user");
  ck_assert_int_eq(t->lease_final, 1);
  ck_assert_int_eq(w->nrunning, 1);
  ck_assert_int_eq(control_stop_trial(S, t, &ticket), -EINVAL);
  /* A pending one (its lease expired) stops too; then the experiment ends. */
  fake_clock_set_ms(T0 + 1000);
  h_heartbeat(&H, w, NULL, 0);
  h_tick(&H, T0 + 1000 + H_GRACE_MS);
  ck_assert_int_eq(u->status, TS_PENDING);
  ck_assert_int_eq(control_stop_trial(S, u, &ticket), 0);
  ck_assert_int_eq(u->status, TS_TERMINATED);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert_int_eq(w->nrunning, 0);
  int64_t tid = t->id;
  h_sync(&H);
  h_restart(&H);
  ck_assert_int_eq(state_trial_ref(S, tid)->status, TS_TERMINATED);
  ck_assert_str_eq(state_trial_ref(S, tid)->reason, "stopped by user");
}
END_TEST

/* Rule: delete refuses an experiment with running trials (-EBUSY, nothing
 * changed) unless forced; forced, its trials end (resources back), it and
 * its trials are hidden (tombstones: ids are never reused), it leaves the
 * live list, and it stays deleted after a restart. */
START_TEST(delete_force_and_busy) {
  struct srv_experiment *e = submit("d", 3, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  int64_t id = e->id, tid = t->id;
  ck_assert_int_eq(control_delete(S, e, 0, &ticket), -EBUSY);
  ck_assert_int_eq(e->deleted, 0);
  ck_assert_int_eq(t->status, TS_RUNNING);
  ck_assert_ptr_eq(server_experiment(S, id), e);
  ck_assert_int_eq(control_delete(S, e, 1, &ticket), 0);
  ck_assert_ptr_null(server_experiment(S, id));
  ck_assert_ptr_null(server_trial(S, tid));
  ck_assert_int_eq(w->nrunning, 0);
  ck_assert(w->used_cpu == 0);
  live_is_exact();
  /* An experiment with nothing running needs no force. */
  struct srv_experiment *f = submit("f", 1, "");
  ck_assert_int_eq(f->id, id + 1);
  ck_assert_int_eq(control_delete(S, f, 0, &ticket), 0);
  h_restart(&H);
  ck_assert_ptr_null(server_experiment(S, id));
  ck_assert_ptr_null(server_experiment(S, id + 1));
  ck_assert_ptr_null(server_trial(S, tid));
  ck_assert_ptr_null(state_trial_ref(S, tid));
  struct srv_experiment *g = submit("g", 1, "");
  ck_assert_int_eq(g->id, id + 2); /* ids are never handed out twice */
  struct srv_trial *gt = h_lease(&H, server_worker(S, 1));
  ck_assert_int_gt(gt->id, tid);
  ck_assert_int_eq(server_worker(S, 1)->nrunning, 1);
}
END_TEST

/* Rule: a cancel ends every unfinished trial TERMINATED (returns how many),
 * sets CANCELLED with its reason, frees the workers' resources, leaves the
 * live list, and is one persisted change. */
START_TEST(cancel_experiment) {
  struct srv_experiment *e = submit("c", 3, "");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  h_complete(&H, a);
  ck_assert_int_eq(h_cancel(&H, e, "not needed"), 1);
  ck_assert_int_eq(e->status, ES_CANCELLED);
  ck_assert_str_eq(e->end_reason, "not needed");
  ck_assert_int_eq(b->status, TS_TERMINATED);
  ck_assert_int_eq(e->counts[TS_TERMINATED], 2);
  ck_assert_int_eq(e->counts[TS_RUNNING] + e->counts[TS_PENDING], 0);
  ck_assert_int_eq(w->nrunning, 0);
  live_is_exact();
  reason_is(e, "experiment is CANCELLED");
  ck_assert_ptr_null(h_lease(&H, w));
  int64_t id = e->id;
  h_restart(&H);
  e = server_experiment(S, id);
  ck_assert_int_eq(e->status, ES_CANCELLED);
  ck_assert_str_eq(e->end_reason, "not needed");
  ck_assert_int_eq(e->counts[TS_TERMINATED], 2);
  live_is_exact();
}
END_TEST

/* Completes the oldest running trial and leases one, `steps` times; checks
 * each lease's experiment against want[] and the split after it. */
static void rotate(struct srv_worker *w, struct srv_trial **run, int n, int steps,
                   const int64_t *want_order, int64_t exp_a, int64_t want_a) {
  for (int s = 0; s < steps; s++) {
    h_complete(&H, run[0]);
    memmove(run, run + 1, (size_t)(n - 1) * sizeof *run);
    run[n - 1] = h_lease(&H, w);
    ck_assert_ptr_nonnull(run[n - 1]);
    if (want_order) ck_assert_int_eq(run[n - 1]->experiment_id, want_order[s]);
    if (want_a >= 0) {
      int64_t on_a = 0;
      for (int i = 0; i < n; i++) on_a += run[i]->experiment_id == exp_a;
      ck_assert_msg(on_a == want_a, "step %d: %lld running on A", s, (long long)on_a);
    }
  }
}

/* Rule (fair share): a lease goes to the live experiment furthest below
 * its share (smallest running/priority, the older on a tie): a second
 * experiment shares the worker from the moment it arrives. */
START_TEST(fair_second_experiment_shares_at_once) {
  struct srv_experiment *a = submit("a", 8, "");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *run[2] = {h_lease(&H, w), h_lease(&H, w)};
  ck_assert_int_eq(run[0]->experiment_id, a->id);
  ck_assert_int_eq(run[1]->experiment_id, a->id);
  struct srv_experiment *b = submit("b", 8, "");
  int64_t order[8];
  for (int i = 0; i < 8; i++) order[i] = i % 2 ? a->id : b->id;
  rotate(w, run, 2, 8, order, a->id, 1);
}
END_TEST

/* Rule (fair share): priorities weigh the share: B with priority 2 holds
 * two slots to A's one from the second freed slot on (equal priorities
 * would leave A two, the older winning each tie). */
START_TEST(fair_priority_two_to_one) {
  struct srv_experiment *a = submit("a", 20, "");
  struct srv_worker *w = h_worker(&H, "w", 3, 0, 0);
  struct srv_trial *run[3] = {h_lease(&H, w), h_lease(&H, w), h_lease(&H, w)};
  struct srv_experiment *b = submit("b", 20, "");
  struct control_patch p = {.has_priority = 1, .priority = 2};
  ck_assert_int_eq(patch(b, &p, ""), 0);
  rotate(w, run, 3, 1, NULL, a->id, 2);
  rotate(w, run, 3, 8, NULL, a->id, 1);
  ck_assert_int_eq(b->counts[TS_RUNNING], 2);
}
END_TEST

/* Rule (fair share): an experiment the worker cannot run (older, furthest
 * below its share) does not block one it can; an ended one is not live. */
START_TEST(fair_unfit_does_not_block) {
  struct srv_experiment *g = submit("g", 2, ", \"resources_per_trial\": {\"gpu\": 1}");
  struct srv_experiment *c = submit("c", 1, "");
  struct srv_experiment *d = submit("d", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_int_eq(t->experiment_id, c->id);
  h_complete(&H, t);
  ck_assert_int_eq(c->status, ES_TERMINATED);
  live_is_exact();
  ck_assert_int_eq(h_lease(&H, w)->experiment_id, d->id);
  ck_assert_int_eq(g->ntrials, 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_control");
  TCase *tc = tcase_create("control");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, pause_stops_leases);
  tcase_add_test(tc, pause_then_resume_requeues_paused_trials);
  tcase_add_test(tc, resume_before_lease_end);
  tcase_add_test(tc, patch_num_samples_extends);
  tcase_add_test(tc, patch_max_concurrent_priority_notes_tags);
  tcase_add_test(tc, patch_max_t);
  tcase_add_test(tc, stop_trial);
  tcase_add_test(tc, delete_force_and_busy);
  tcase_add_test(tc, cancel_experiment);
  suite_add_tcase(s, tc);
  TCase *fair = tcase_create("fair");
  tcase_add_checked_fixture(fair, setup, teardown);
  tcase_add_test(fair, fair_second_experiment_shares_at_once);
  tcase_add_test(fair, fair_priority_two_to_one);
  tcase_add_test(fair, fair_unfit_does_not_block);
  suite_add_tcase(s, fair);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
