/* Failures told apart and bad machines quarantined, in-process
 * (server/state/quarantine.c over server/core/attribution.c;
 * docs/scheduling.md#failures-told-apart, docs/server.md#quarantine): a
 * worker whose trials fail while another succeeds is quarantined after K
 * failures, gets no lease, its failures count against no trial, and an
 * admin puts it back; a failure is retried once on another worker before it
 * is blamed; the attribution of a planted mix (a config that always fails,
 * a machine that always fails, a script that crashes on start, a memory
 * kill), read back from SQLite and after a restart. The e2e counterpart
 * with real processes: tests/server/e2e/test_quarantine.py. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attribution.h"
#include "harness.h"
#include "quarantine.h"

static struct harness H;
static struct server *S;
static const uint64_t T0 = FAKE_CLOCK_START_MS;

#define CUDA                                                                                       \
  "trial_exit: your program exited with status 1\nTraceback (most recent call last):\n"            \
  "  File \"train.py\", line 9, in <module>\nRuntimeError: CUDA error: an illegal memory access "  \
  "was encountered"
#define CRASH                                                                                      \
  "trial_exit: your program exited with status 1\nTraceback (most recent call last):\n"            \
  "  File \"train.py\", line 1, in <module>\nModuleNotFoundError: No module named 'torchh'"
#define OOM                                                                                        \
  "out_of_memory: out of memory: the trial is limited to memory_mb 64 (cgroup memory.max); give "  \
  "it more (resources_per_trial.memory_mb) or use less"
#define BAD_CONFIG "internal: loss exploded at step 17"

static void setup(void) {
  h_open(&H);
  S = &H.s;
}

static void teardown(void) { h_close(&H); }

static struct srv_experiment *submit(const char *name, int n) {
  char buf[1024];
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, ""));
}

/* TE_FAIL of t under its current lease with this error (as api_trial_fail
 * composes it: "reason: error"). */
static void fail_as(struct srv_trial *t, const char *err) {
  uint64_t ticket = 0;
  struct lease_token l = {t->worker_id, t->attempt};
  struct trial_event_args a = {.lease = &l, .error = err, .has_exit_code = 1, .exit_code = 1};
  ck_assert_int_eq(state_trial_event(S, t, TE_FAIL, &a, &ticket), 0);
}

static const char *attr(const struct srv_trial *t) { return attribution_name(t->attribution); }

/* Rule: a worker that fails K (3) trials in a row while another worker
 * succeeds is quarantined at its K-th failure: status and reason, no
 * lease, its trials PENDING with no failure counted (max_failures 0: none
 * ends ERROR) and blamed on the machine; the one retry of each goes to the
 * other worker; it stays out after a restart; a release puts it back. */
START_TEST(bad_gpu_quarantined_after_k) {
  struct srv_experiment *e = submit("q", 12);
  struct srv_worker *good = h_worker(&H, "good", 4, 1, 0), *bad = h_worker(&H, "bad", 4, 1, 0);
  struct srv_trial *ok = h_lease(&H, good);
  h_complete(&H, ok);
  struct srv_trial *f[3];
  for (int i = 0; i < 3; i++) {
    f[i] = h_lease(&H, bad);
    ck_assert_ptr_nonnull(f[i]);
    for (int j = 0; j < i; j++) ck_assert_ptr_ne(f[i], f[j]); /* a retry is not given back */
    ck_assert_str_eq(bad->quarantine, "");
    fail_as(f[i], CUDA);
    ck_assert_int_eq(f[i]->status, TS_PENDING);
    ck_assert_int_eq(f[i]->num_failures, 0);
  }
  ck_assert_str_eq(bad->quarantine,
                   "failed 3 trials in a row (the last: trial_exit: RuntimeError: CUDA error: an "
                   "illegal memory access was encountered) while worker 1 (good) succeeded");
  for (int i = 0; i < 3; i++) ck_assert_str_eq(attr(f[i]), "machine");
  ck_assert_ptr_null(h_lease(&H, bad));
  ck_assert_int_eq(h_count(e, TS_ERROR), 0);
  /* The good worker runs them. */
  for (int i = 0; i < 3; i++) {
    struct srv_trial *t = h_lease(&H, good);
    ck_assert_ptr_eq(t, f[i]);
    h_complete(&H, t);
  }
  h_sync(&H);
  char *rows = h_query(&H, "SELECT quarantine FROM workers WHERE id=2");
  ck_assert_ptr_nonnull(strstr(rows, "failed 3 trials in a row"));
  free(rows);
  rows = h_query(&H, "SELECT id, status, num_failures, attribution FROM trials ORDER BY id");
  ck_assert_str_eq(rows, "1|TERMINATED|0|-\n2|TERMINATED|0|machine\n3|TERMINATED|0|machine\n"
                         "4|TERMINATED|0|machine\n");
  free(rows);

  h_restart(&H);
  S = &H.s;
  bad = server_worker(S, 2);
  ck_assert_ptr_nonnull(strstr(bad->quarantine, "failed 3 trials in a row"));
  ck_assert_int_eq(server_trial(S, 2)->attribution, ATTR_MACHINE);
  ck_assert_ptr_null(h_lease(&H, bad));
  uint64_t ticket = 0;
  ck_assert_int_eq(quarantine_release(S, bad, &ticket), 0);
  ck_assert_int_eq(quarantine_release(S, bad, &ticket), -EALREADY);
  ck_assert_ptr_nonnull(h_lease(&H, bad));
  h_sync(&H);
  rows = h_query(&H, "SELECT quarantine FROM workers WHERE id=2");
  ck_assert_str_eq(rows, "-\n");
  free(rows);
}
END_TEST

/* Rule: failures in a row are not enough while no other worker succeeds
 * (the fault may be everyone's); the first success elsewhere quarantines
 * the worker whose streak is K long. --quarantine-after 0 never does. */
START_TEST(streak_waits_for_success_elsewhere) {
  submit("q", 12);
  struct srv_worker *good = h_worker(&H, "good", 4, 1, 0), *bad = h_worker(&H, "bad", 4, 1, 0);
  struct srv_trial *g = h_lease(&H, good);
  for (int i = 0; i < 4; i++) fail_as(h_lease(&H, bad), CUDA);
  ck_assert_str_eq(bad->quarantine, "");
  h_complete(&H, g);
  ck_assert_ptr_nonnull(strstr(bad->quarantine, "failed 4 trials in a row"));
}
END_TEST

START_TEST(quarantine_after_zero_disables) {
  S->opt.quarantine_after = 0;
  submit("q", 12);
  struct srv_worker *good = h_worker(&H, "good", 4, 1, 0), *bad = h_worker(&H, "bad", 4, 1, 0);
  h_complete(&H, h_lease(&H, good));
  for (int i = 0; i < 5; i++) fail_as(h_lease(&H, bad), CUDA);
  ck_assert_str_eq(bad->quarantine, "");
  ck_assert_ptr_nonnull(h_lease(&H, bad));
}
END_TEST

/* Rule: two trials that failed on a worker and then ended well elsewhere
 * quarantine it, streak or not; its RUNNING trials go back to PENDING. */
START_TEST(failed_here_ok_elsewhere) {
  submit("q", 12);
  struct srv_worker *a = h_worker(&H, "a", 4, 1, 0), *b = h_worker(&H, "b", 4, 1, 0);
  struct srv_trial *t1 = h_lease(&H, b);
  fail_as(t1, BAD_CONFIG);
  struct srv_trial *t2 = h_lease(&H, b);
  fail_as(t2, BAD_CONFIG);
  struct srv_trial *held = h_lease(&H, b);
  ck_assert_ptr_eq(h_lease(&H, a), t1);
  h_complete(&H, t1);
  ck_assert_str_eq(b->quarantine, "");
  ck_assert_str_eq(attr(t1), "machine");
  ck_assert_ptr_eq(h_lease(&H, a), t2);
  h_complete(&H, t2);
  ck_assert_str_eq(b->quarantine,
                   "2 trials that failed here ended well on other workers (trials 1 and 2)");
  ck_assert_int_eq(held->status, TS_PENDING);
  ck_assert_int_eq(held->num_failures, 0);
}
END_TEST

/* Rule: the retry elsewhere needs another worker that can run the trial;
 * without one the failure counts at once (max_failures 0: ERROR). The
 * failed worker is passed by for a lease timeout at most. */
START_TEST(retry_elsewhere_needs_another_worker) {
  struct srv_experiment *e = submit("q", 1);
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  fail_as(h_lease(&H, w), BAD_CONFIG);
  ck_assert_int_eq(h_count(e, TS_ERROR), 1);
  ck_assert_str_eq(attr(e->trials[0]), "unknown");

  e = submit("q2", 1);
  h_worker(&H, "other", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  fail_as(t, BAD_CONFIG);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_ptr_null(h_lease(&H, w));
  ck_assert_ptr_null(h_lease(&H, w));
  fake_clock_set_ms(T0 + H_LEASE_MS + 1);
  ck_assert_ptr_eq(h_lease(&H, w), t);
}
END_TEST

/* Rule table over real events: a config that fails the same way on two
 * machines is config (counted: ERROR); one that fails on a bad machine and
 * ends well elsewhere is machine (TERMINATED, nothing counted); a script
 * that crashes before its first result is user_code and a memory kill is
 * resource, both counted at once with no retry elsewhere. */
START_TEST(planted_mix) {
  struct srv_worker *w1 = h_worker(&H, "w1", 4, 1, 0), *w2 = h_worker(&H, "w2", 4, 1, 0);
  /* config */
  struct srv_experiment *ec = submit("config", 1);
  struct srv_trial *c = h_lease(&H, w1);
  fail_as(c, BAD_CONFIG);
  ck_assert_str_eq(attr(c), "unknown");
  ck_assert_ptr_null(h_lease(&H, w1)); /* it goes elsewhere first */
  ck_assert_ptr_eq(h_lease(&H, w2), c);
  fail_as(c, "internal: loss exploded at step 18");
  ck_assert_int_eq(c->status, TS_ERROR);
  ck_assert_str_eq(attr(c), "config");
  ck_assert_int_eq(w1->fail_streak, 0); /* the config's failure is off w1's streak */
  ck_assert_int_eq(h_count(ec, TS_ERROR), 1);
  /* machine */
  struct srv_experiment *em = submit("machine", 1);
  struct srv_trial *m = h_lease(&H, w2);
  fail_as(m, CUDA);
  ck_assert_ptr_eq(h_lease(&H, w1), m);
  h_result(&H, m, 1, "{\"training_iteration\": 1}");
  h_complete(&H, m);
  ck_assert_int_eq(m->status, TS_TERMINATED);
  ck_assert_int_eq(m->num_failures, 0);
  ck_assert_str_eq(attr(m), "machine");
  ck_assert_int_eq(h_count(em, TS_TERMINATED), 1);
  /* user_code */
  submit("user", 1);
  struct srv_trial *u = h_lease(&H, w1);
  fail_as(u, CRASH);
  ck_assert_int_eq(u->status, TS_ERROR);
  ck_assert_str_eq(attr(u), "user_code");
  /* resource */
  submit("resource", 1);
  struct srv_trial *r = h_lease(&H, w2);
  fail_as(r, OOM);
  ck_assert_int_eq(r->status, TS_ERROR);
  ck_assert_str_eq(attr(r), "resource");
  /* None of them made a machine's streak: nobody is quarantined. */
  ck_assert_str_eq(w1->quarantine, "");
  ck_assert_str_eq(w2->quarantine, "");
  h_sync(&H);
  char *rows = h_query(&H, "SELECT name, status, attribution FROM trials ORDER BY id");
  ck_assert_str_eq(rows, "config_00000|ERROR|config\nmachine_00000|TERMINATED|machine\n"
                         "user_00000|ERROR|user_code\nresource_00000|ERROR|resource\n");
  free(rows);
}
END_TEST

int main(void) {
  Suite *s = suite_create("state_quarantine");
  TCase *tc = tcase_create("quarantine");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, bad_gpu_quarantined_after_k);
  tcase_add_test(tc, streak_waits_for_success_elsewhere);
  tcase_add_test(tc, quarantine_after_zero_disables);
  tcase_add_test(tc, failed_here_ok_elsewhere);
  tcase_add_test(tc, retry_elsewhere_needs_another_worker);
  tcase_add_test(tc, planted_mix);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
