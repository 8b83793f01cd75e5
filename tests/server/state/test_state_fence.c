/* The fence, in-process (server/state/state.c): the lease token a
 * trial-scoped write names ("W:A", state_parse_lease), how it is judged
 * against the trial (state_check_fence: CURRENT, FINAL, STALE), and the
 * worker a bearer secret names (state_worker_by_secret). The e2e
 * counterparts: tests/server/e2e/test_fencing.py, test_worker_creds.py. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "workers.h"

static struct harness H;
static struct server *S;
static const uint64_t T0 = FAKE_CLOCK_START_MS;

static void setup(void) {
  h_open(&H);
  S = &H.s;
}

static void teardown(void) { h_close(&H); }

static struct srv_experiment *submit(const char *name, int n) {
  char buf[1024];
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, ""));
}

static enum fence fence(struct srv_trial *t, int64_t w, int a, char *why, size_t n) {
  struct lease_token l = {w, a};
  return state_check_fence(S, t, &l, why, n);
}

/* Rule: a lease token is "W:A", both decimal integers >= 1 that fit an
 * int; anything else is -EINVAL. */
START_TEST(parse_lease_good_and_malformed) {
  struct lease_token l = {0, 0};
  ck_assert_int_eq(state_parse_lease("3:2", &l), 0);
  ck_assert_int_eq(l.worker_id, 3);
  ck_assert_int_eq(l.attempt, 2);
  ck_assert_int_eq(state_parse_lease("12:1000000000", &l), 0);
  ck_assert_int_eq(l.worker_id, 12);
  ck_assert_int_eq(l.attempt, 1000000000);
  static const char *const bad[] = {"",      "3",     "3:",   ":2",           "0:1",
                                    "1:0",   "00:1",  "a:1",  "1:b",          "1:2x",
                                    "1:-1",  "-1:1",  " 1:2", "1:2 ",         "1: 2",
                                    "1::2",  "1:2:3", "+1:2", "1:2147483648", "99999999999:1",
                                    "1.5:2", "0x1:2"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    l = (struct lease_token){77, 77};
    ck_assert_msg(state_parse_lease(bad[i], &l) == -EINVAL, "'%s' was accepted", bad[i]);
    ck_assert_int_eq(l.worker_id, 77); /* nothing written */
  }
  ck_assert_int_eq(state_parse_lease(NULL, &l), -EINVAL);
}
END_TEST

/* Rule: the trial's current lease (its worker, its attempt, RUNNING) is
 * CURRENT, and a fenced write renews the lease (now + lease_timeout_s). */
START_TEST(fence_current_renews_the_lease) {
  submit("f", 1);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  fake_clock_set_ms(T0 + 12345);
  ck_assert_int_eq(fence(t, w->id, 1, NULL, 0), FENCE_CURRENT);
  ck_assert_uint_eq(t->lease_deadline_ms, T0 + 12345 + H_LEASE_MS);
  h_tick(&H, T0 + H_LEASE_MS + 100);
  ck_assert_int_eq(t->status, TS_RUNNING); /* the write kept it */
}
END_TEST

/* Rule: another worker naming the trial's attempt is STALE, says who holds
 * the lease, and renews nothing. */
START_TEST(fence_other_worker_is_stale) {
  submit("f", 1);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0), *o = h_worker(&H, "o", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  uint64_t deadline = t->lease_deadline_ms;
  fake_clock_set_ms(T0 + 5000);
  char why[256], want[256];
  ck_assert_int_eq(fence(t, o->id, 1, why, sizeof why), FENCE_STALE);
  snprintf(want, sizeof want, "trial %lld is leased to %lld:1, not %lld:1", (long long)t->id,
           (long long)w->id, (long long)o->id);
  ck_assert_str_eq(why, want);
  ck_assert_uint_eq(t->lease_deadline_ms, deadline);
  /* An attempt it never had: stale too. */
  ck_assert_int_eq(fence(t, w->id, 2, NULL, 0), FENCE_STALE);
}
END_TEST

/* Rule: after a requeue the old lease is STALE (the trial is PENDING, then
 * leased again under a new attempt): neither its worker's old attempt nor
 * the new attempt under the old worker's id are the lease. */
START_TEST(fence_stale_attempt_after_requeue) {
  submit("f", 1);
  struct srv_worker *a = h_worker(&H, "a", 1, 0, 0), *b = h_worker(&H, "b", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, a);
  ck_assert_int_eq(t->attempt, 1);
  fake_clock_set_ms(T0 + 20000);
  h_heartbeat(&H, b, NULL, 0); /* b stays alive; a goes silent */
  h_tick(&H, T0 + H_LEASE_MS + 100);
  ck_assert_int_eq(t->status, TS_PENDING);
  char why[256], want[256];
  ck_assert_int_eq(fence(t, a->id, 1, why, sizeof why), FENCE_STALE);
  snprintf(want, sizeof want, "trial %lld is PENDING, not leased to %lld:1", (long long)t->id,
           (long long)a->id);
  ck_assert_str_eq(why, want);
  ck_assert_ptr_eq(h_lease(&H, b), t);
  ck_assert_int_eq(t->attempt, 2);
  ck_assert_int_eq(fence(t, a->id, 1, NULL, 0), FENCE_STALE);
  ck_assert_int_eq(fence(t, b->id, 1, NULL, 0), FENCE_STALE);
  ck_assert_int_eq(fence(t, a->id, 2, NULL, 0), FENCE_STALE);
  ck_assert_int_eq(fence(t, b->id, 2, NULL, 0), FENCE_CURRENT);
  /* The stale lease's complete would be refused; b's ends it. */
  h_complete(&H, t);
  ck_assert_int_eq(fence(t, a->id, 1, NULL, 0), FENCE_STALE);
}
END_TEST

/* Rule: the lease that ended the trial itself (complete, a user's stop) is
 * FINAL after the end: its final uploads are still taken. Any other lease is
 * STALE, and so is one whose trial was ended by a cancel (not by it). */
START_TEST(fence_final_for_the_lease_that_ended_it) {
  struct srv_experiment *e = submit("f", 3);
  struct srv_worker *w = h_worker(&H, "w", 3, 0, 0), *o = h_worker(&H, "o", 1, 0, 0);
  struct srv_trial *done = h_lease(&H, w), *stopped = h_lease(&H, w), *cancelled = h_lease(&H, w);
  h_complete(&H, done);
  ck_assert_int_eq(done->status, TS_TERMINATED);
  char why[256], want[256];
  ck_assert_int_eq(fence(done, w->id, 1, why, sizeof why), FENCE_FINAL);
  snprintf(want, sizeof want, "trial %lld is TERMINATED, not leased to %lld:1", (long long)done->id,
           (long long)w->id);
  ck_assert_str_eq(why, want); /* said for FINAL too: a new result needs CURRENT */
  ck_assert_int_eq(fence(done, w->id, 2, NULL, 0), FENCE_STALE);
  ck_assert_int_eq(fence(done, o->id, 1, NULL, 0), FENCE_STALE);
  uint64_t ticket = 0;
  ck_assert_int_eq(control_stop_trial(S, stopped, &ticket), 0);
  ck_assert_int_eq(fence(stopped, w->id, 1, NULL, 0), FENCE_FINAL);
  ck_assert_int_ge(h_cancel(&H, e, "user"), 1);
  ck_assert_int_eq(cancelled->status, TS_TERMINATED);
  ck_assert_int_eq(fence(cancelled, w->id, 1, NULL, 0), FENCE_STALE);
  /* In memory only: after a restart an ended trial takes no final uploads. */
  int64_t id = done->id, wid = w->id;
  h_restart(&H);
  struct srv_trial *back = state_trial_ref(S, id); /* its experiment is cold: read back */
  ck_assert_ptr_nonnull(back);
  ck_assert_int_eq(back->status, TS_TERMINATED);
  ck_assert_int_eq(fence(back, wid, 1, NULL, 0), FENCE_STALE);
}
END_TEST

/* Rule: the final uploads of the lease that ended a trial are taken for
 * STATE_FINAL_WINDOW_MS after the end, not later: then that lease is STALE,
 * and why says so. (A worker's secret that leaks later cannot rewrite an
 * ended trial's checkpoint.) The window starts when the trial leaves
 * RUNNING, not when its lease was granted or last renewed. */
START_TEST(fence_final_only_within_its_window) {
  submit("f", 2);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *done = h_lease(&H, w), *stopped = h_lease(&H, w);
  fake_clock_advance_ms(H_LEASE_MS / 2); /* the end comes well after the grant */
  h_complete(&H, done);
  uint64_t end = fake_clock_now_ms();
  fake_clock_set_ms(end + STATE_FINAL_WINDOW_MS);
  ck_assert_int_eq(fence(done, w->id, 1, NULL, 0), FENCE_FINAL);
  fake_clock_set_ms(end + STATE_FINAL_WINDOW_MS + 1);
  char why[256], want[256];
  ck_assert_int_eq(fence(done, w->id, 1, why, sizeof why), FENCE_STALE);
  snprintf(want, sizeof want,
           "trial %lld is TERMINATED: the final uploads of lease %lld:1 were taken for %llu s "
           "after its end",
           (long long)done->id, (long long)w->id, STATE_FINAL_WINDOW_MS / 1000);
  ck_assert_str_eq(why, want);
  /* A user's stop ends the other one now: its own window, from now. */
  uint64_t ticket = 0;
  ck_assert_int_eq(control_stop_trial(S, stopped, &ticket), 0);
  ck_assert_int_eq(stopped->status, TS_TERMINATED);
  fake_clock_advance_ms(STATE_FINAL_WINDOW_MS);
  ck_assert_int_eq(fence(stopped, w->id, 1, NULL, 0), FENCE_FINAL);
  fake_clock_advance_ms(1);
  ck_assert_int_eq(fence(stopped, w->id, 1, NULL, 0), FENCE_STALE);
}
END_TEST

/* Rule: a paused experiment's RUNNING trials keep their leases (CURRENT)
 * until the lease ends; a restart keeps the lease of a RUNNING trial. */
START_TEST(fence_survives_pause_and_restart) {
  struct srv_experiment *e = submit("f", 1);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  uint64_t ticket = 0;
  ck_assert_int_eq(control_pause(S, e, &ticket), 0);
  ck_assert_int_eq(fence(t, w->id, 1, NULL, 0), FENCE_CURRENT);
  ck_assert_int_eq(control_resume(S, e, &ticket), 0);
  int64_t id = t->id, wid = w->id;
  h_restart(&H);
  t = server_trial(S, id);
  ck_assert_int_eq(t->status, TS_RUNNING);
  ck_assert_int_eq(fence(t, wid, 1, NULL, 0), FENCE_CURRENT);
  ck_assert_int_eq(fence(t, wid, 2, NULL, 0), FENCE_STALE);
}
END_TEST

/* Rule: a bearer secret names its own worker only: the right "<id>.<hex>"
 * finds it; a wrong hex, another worker's id with this hex, a cut or
 * malformed token, and a deregistered worker's secret find nothing. */
START_TEST(worker_by_secret) {
  struct srv_worker *a = h_worker(&H, "a", 1, 0, 0), *b = h_worker(&H, "b", 1, 0, 0);
  ck_assert_ptr_eq(state_worker_by_secret(S, a->secret), a);
  ck_assert_ptr_eq(state_worker_by_secret(S, b->secret), b);
  char tok[128];
  size_t n = strlen(a->secret);
  ck_assert_uint_eq(n, 2 + 64); /* "1." + 64 hex digits */
  snprintf(tok, sizeof tok, "%s", a->secret);
  tok[n - 1] = tok[n - 1] == '0' ? '1' : '0';
  ck_assert_ptr_null(state_worker_by_secret(S, tok));
  /* b's id with a's hex */
  snprintf(tok, sizeof tok, "%lld%s", (long long)b->id, strchr(a->secret, '.'));
  ck_assert_ptr_null(state_worker_by_secret(S, tok));
  snprintf(tok, sizeof tok, "%.*s", (int)n - 1, a->secret);
  ck_assert_ptr_null(state_worker_by_secret(S, tok));
  snprintf(tok, sizeof tok, "%sff", a->secret);
  ck_assert_ptr_null(state_worker_by_secret(S, tok));
  static const char *const bad[] = {"", "1", "1.", "0.00", "x.1", ".1", "-1.00", "3.00"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    ck_assert_msg(state_worker_by_secret(S, bad[i]) == NULL, "'%s' found a worker", bad[i]);
  ck_assert_ptr_null(state_worker_by_secret(S, NULL));
  char old[sizeof a->secret];
  memcpy(old, a->secret, sizeof old);
  uint64_t ticket = 0;
  ck_assert_int_eq(workers_deregister(S, a, &ticket), 0);
  ck_assert_ptr_null(state_worker_by_secret(S, old));
  ck_assert_ptr_eq(state_worker_by_secret(S, b->secret), b);
  /* Persisted: after a restart too. */
  char bs[sizeof b->secret];
  memcpy(bs, b->secret, sizeof bs);
  h_restart(&H);
  ck_assert_ptr_null(state_worker_by_secret(S, old));
  ck_assert_ptr_eq(state_worker_by_secret(S, bs), server_worker(S, 2));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_fence");
  TCase *tc = tcase_create("fence");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, parse_lease_good_and_malformed);
  tcase_add_test(tc, fence_current_renews_the_lease);
  tcase_add_test(tc, fence_other_worker_is_stale);
  tcase_add_test(tc, fence_stale_attempt_after_requeue);
  tcase_add_test(tc, fence_final_for_the_lease_that_ended_it);
  tcase_add_test(tc, fence_final_only_within_its_window);
  tcase_add_test(tc, fence_survives_pause_and_restart);
  tcase_add_test(tc, worker_by_secret);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
