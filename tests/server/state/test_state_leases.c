/* Leases and the worker registry, in-process (server/state/state.c,
 * workers.c): what a lease charges, what blocks one (and the sentence
 * state_pending_reason gives), lease expiry, lost workers, heartbeat
 * reconciliation of unlisted trials, pruning and deregistration. Time is
 * the fake clock's (tests/lib/fake_clock.c): each boundary is checked at
 * the millisecond on both sides. The e2e counterparts start daemons and
 * sleep (tests/server/e2e/test_lease*.py, test_fencing.py). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
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

static struct srv_experiment *submit(const char *name, int n, const char *extra) {
  char buf[1024];
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, extra));
}

static void reason_is(const struct srv_experiment *e, const char *want) {
  char buf[256];
  state_experiment_pending_reason(S, e, buf, sizeof buf);
  ck_assert_str_eq(buf, want);
}

/* Rule: time is an input. The test executable's fake clock replaced
 * common/clock.c for the libraries too: the state stamps what it was set to. */
START_TEST(fake_clock_is_what_the_state_reads) {
  uint64_t calls = fake_clock_calls();
  fake_clock_set_ms(5000000);
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  ck_assert_uint_eq(w->last_seen_ms, 5000000);
  ck_assert(w->registered_at == FAKE_CLOCK_WALL_BASE_S + 5000.0);
  ck_assert_uint_gt(fake_clock_calls(), calls);
  ck_assert_uint_eq(clock_mono_ms(), 5000000);
}
END_TEST

/* Rule: a lease charges the experiment's resources_per_trial to the worker
 * (cpu, gpu, memory_mb when the worker declared memory), an end gives them
 * back, and nothing is leased that the worker has no room left for. */
START_TEST(lease_charges_worker_resources) {
  struct srv_experiment *e = submit(
      "a", 3, ", \"resources_per_trial\": {\"cpu\": 1.5, \"gpu\": 0.5, \"memory_mb\": 1000}");
  struct srv_worker *w = h_worker(&H, "w", 4, 1, 4000);
  struct srv_trial *t1 = h_lease(&H, w);
  ck_assert_ptr_nonnull(t1);
  ck_assert_int_eq(t1->status, TS_RUNNING);
  ck_assert_int_eq(t1->attempt, 1);
  ck_assert_int_eq(t1->worker_id, w->id);
  ck_assert_uint_eq(t1->lease_deadline_ms, T0 + H_LEASE_MS);
  ck_assert(w->used_cpu == 1.5 && w->used_gpu == 0.5);
  ck_assert_int_eq(w->used_memory_mb, 1000);
  ck_assert_int_eq(w->nrunning, 1);
  struct srv_trial *t2 = h_lease(&H, w);
  ck_assert_ptr_nonnull(t2);
  ck_assert(w->used_cpu == 3.0 && w->used_gpu == 1.0);
  ck_assert_int_eq(w->used_memory_mb, 2000);
  /* 1 cpu and no gpu left: the third does not fit, and is not even made. */
  ck_assert_ptr_null(h_lease(&H, w));
  ck_assert_int_eq(e->ntrials, 2);
  ck_assert_int_eq(e->counts[TS_RUNNING], 2);
  reason_is(e, "waiting for free resources");
  h_complete(&H, t1);
  ck_assert(w->used_cpu == 1.5 && w->used_gpu == 0.5);
  ck_assert_int_eq(w->used_memory_mb, 1000);
  ck_assert_int_eq(w->nrunning, 1);
  struct srv_trial *t3 = h_lease(&H, w);
  ck_assert_ptr_nonnull(t3);
  ck_assert_int_eq(t3->idx, 2);
  h_complete(&H, t2);
  h_complete(&H, t3);
  /* Nothing left on it: exact zeros. */
  ck_assert(w->used_cpu == 0 && w->used_gpu == 0);
  ck_assert_int_eq(w->used_memory_mb, 0);
  ck_assert_int_eq(w->nrunning, 0);
  ck_assert_int_eq(e->status, ES_TERMINATED);
}
END_TEST

/* Rule: max_concurrent_trials caps an experiment's RUNNING trials whatever
 * the worker has free, and state_pending_reason says so. */
START_TEST(lease_honours_max_concurrent_trials) {
  struct srv_experiment *e = submit("mc", 5, ", \"max_concurrent_trials\": 2");
  struct srv_worker *w = h_worker(&H, "w", 8, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_null(h_lease(&H, w));
  ck_assert_int_eq(e->counts[TS_RUNNING], 2);
  ck_assert_int_eq(e->ntrials, 2);
  reason_is(e, "max_concurrent_trials (2) reached");
  h_complete(&H, a);
  ck_assert_ptr_nonnull(h_lease(&H, w));
  ck_assert_ptr_null(h_lease(&H, w));
}
END_TEST

/* Rule: a lease skips what does not fit the worker (its own accounting and
 * what it says is free), and state_pending_reason names the resource; a
 * worker that declared no memory is not accounted for memory. */
START_TEST(lease_skips_what_does_not_fit) {
  struct srv_experiment *g = submit("g", 1, ", \"resources_per_trial\": {\"cpu\": 1, \"gpu\": 1}");
  reason_is(g, "no worker is connected");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 4096);
  ck_assert_ptr_null(h_lease(&H, w));
  reason_is(g, "needs gpu 1 but the largest worker has 0");
  struct srv_experiment *m = submit("m", 1, ", \"resources_per_trial\": {\"memory_mb\": 8192}");
  ck_assert_ptr_null(h_lease(&H, w));
  reason_is(m, "needs memory_mb 8192 but the largest worker has 4096");
  struct srv_experiment *c = submit("c", 1, ", \"resources_per_trial\": {\"cpu\": 8}");
  ck_assert_ptr_null(h_lease(&H, w));
  reason_is(c, "needs cpu 8 but the largest worker has 4");
  ck_assert_int_eq(g->ntrials + m->ntrials + c->ntrials, 0);
  /* A worker with no memory declared takes the memory-hungry one. */
  struct srv_worker *nomem = h_worker(&H, "nomem", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, nomem);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->experiment_id, m->id);
  ck_assert_int_eq(nomem->used_memory_mb, 0);
  /* What the worker says is free caps the server's accounting. */
  struct srv_experiment *one = submit("one", 1, "");
  ck_assert_ptr_null(h_lease_free(&H, w, 0.5, 0, 0, 0));
  ck_assert_int_eq(one->ntrials, 0);
  t = h_lease_free(&H, w, 1, 0, 0, 1); /* 0 MB free: fits what needs none */
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->experiment_id, one->id);
}
END_TEST

/* Rule: a lease not renewed for lease_timeout_s expires: the trial goes
 * back to PENDING (no failure counted, resources back, row persisted), and
 * its next lease bumps the attempt. Boundary: not at the deadline, after it. */
START_TEST(lease_expiry_requeues_without_failure) {
  struct srv_experiment *e = submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_ptr_nonnull(t);
  int64_t tid = t->id;
  h_tick(&H, T0 + H_LEASE_MS); /* at the deadline: still held */
  ck_assert_int_eq(t->status, TS_RUNNING);
  h_tick(&H, T0 + H_LEASE_MS + 100);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(t->num_failures, 0);
  ck_assert_int_eq(t->worker_id, 0);
  ck_assert_int_eq(t->attempt, 1);
  ck_assert_int_eq(w->nrunning, 0);
  ck_assert(w->used_cpu == 0);
  ck_assert_int_eq(e->counts[TS_PENDING], 1);
  ck_assert_int_eq(e->counts[TS_RUNNING], 0);
  char why[256];
  state_pending_reason(S, t, why, sizeof why);
  ck_assert_str_eq(why, "no worker is connected"); /* w was silent as long: lost */
  /* Persisted: a restart sees it PENDING. */
  h_restart(&H);
  t = server_trial(S, tid);
  e = server_experiment(S, t->experiment_id);
  w = server_worker(S, 1);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(t->attempt, 1);
  ck_assert_int_eq(t->num_failures, 0);
  struct srv_trial *again = h_lease(&H, w);
  ck_assert_ptr_eq(again, t);
  ck_assert_int_eq(t->attempt, 2);
  ck_assert_int_eq(t->status, TS_RUNNING);
  ck_assert_int_eq(e->ntrials, 1);
}
END_TEST

/* Rule: a heartbeat that lists a trial renews its lease (deadline = now +
 * lease_timeout_s), so it outlives the first deadline. */
START_TEST(heartbeat_renews_lease) {
  submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  fake_clock_set_ms(T0 + 20000);
  ck_assert_int_eq(h_heartbeat(&H, w, &t, 1), 0);
  ck_assert_uint_eq(t->lease_deadline_ms, T0 + 20000 + H_LEASE_MS);
  h_tick(&H, T0 + H_LEASE_MS + 100);
  ck_assert_int_eq(t->status, TS_RUNNING);
  h_tick(&H, T0 + 20000 + H_LEASE_MS + 100);
  ck_assert_int_eq(t->status, TS_PENDING);
}
END_TEST

/* Rule: a server that stood still (SIGSTOP, a VM pause) past the lease
 * timeout does not blame its healthy worker when it wakes: the gap since its
 * previous tick is forgiven, so the leases and the worker's last sign of
 * life move by it; a worker that stays silent afterwards expires a lease
 * timeout after its last heartbeat, stall left out. */
START_TEST(server_stall_keeps_healthy_leases) {
  struct srv_experiment *e = submit("x", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t[2] = {h_lease(&H, w), h_lease(&H, w)};
  ck_assert(t[0] && t[1]);
  fake_clock_set_ms(T0 + 5000);
  ck_assert_int_eq(h_heartbeat(&H, w, t, 2), 0);
  h_tick(&H, T0 + 5100);
  h_stall(&H, T0 + 5100 + 40000); /* 40 s of nothing; the lease timeout is 30 s */
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(t[i]->status, TS_RUNNING);
    ck_assert_int_eq(t[i]->attempt, 1);
    ck_assert_uint_eq(t[i]->lease_deadline_ms, T0 + 5000 + 40000 + H_LEASE_MS);
  }
  ck_assert_int_eq(w->lost, 0);
  ck_assert_int_eq(w->nrunning, 2);
  ck_assert_int_eq(e->counts[TS_RUNNING], 2);
  ck_assert_uint_eq(w->last_seen_ms, T0 + 5000 + 40000);
  /* Silent from then on: 30 s after its last heartbeat, the stall not
   * counted, it is lost (not at that time, 1 ms after) and its leases
   * expire (at the lease scan's next turn, 100 ms on). */
  h_tick(&H, T0 + 45000 + H_LEASE_MS);
  ck_assert_int_eq(t[0]->status, TS_RUNNING);
  ck_assert_int_eq(w->lost, 0);
  h_tick(&H, T0 + 45000 + H_LEASE_MS + 1);
  ck_assert_int_eq(w->lost, 1);
  h_tick(&H, T0 + 45000 + H_LEASE_MS + 100);
  ck_assert_int_eq(t[0]->status, TS_PENDING);
  ck_assert_int_eq(t[1]->status, TS_PENDING);
}
END_TEST

/* Rule: the gaps count from the model's load: a server stopped before its
 * timer ever ticked (stopped right after its first requests) forgives the
 * stall all the same, and a first tick soon after the load is no stall. */
START_TEST(stall_before_the_first_tick) {
  submit("x", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  h_stall(&H, T0 + 40000); /* the first tick since h_open's load at T0 */
  ck_assert_int_eq(t->status, TS_RUNNING);
  ck_assert_uint_eq(t->lease_deadline_ms, T0 + 40000 + H_LEASE_MS);
  ck_assert_int_eq(w->lost, 0);
  int64_t wid = w->id;
  h_restart(&H); /* loaded at T0 + 40 s; t's lease is renewed at the first tick */
  w = server_worker(S, wid);
  fake_clock_set_ms(T0 + 41000);
  struct srv_trial *u = h_lease(&H, w);
  ck_assert_ptr_nonnull(u);
  h_stall(&H, T0 + 40000 + 15000); /* 15 s after the load: no stall */
  ck_assert_uint_eq(u->lease_deadline_ms, T0 + 41000 + H_LEASE_MS);
}
END_TEST

/* Rule: what was stamped between the last tick and the stall (a heartbeat
 * just before it) moves to now at most: the worker is not pushed into the
 * future (it would count as silent for ever, as lost) and its lease ends a
 * lease timeout from now, like a fresh renewal. */
START_TEST(stall_right_after_a_heartbeat) {
  submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  h_tick(&H, T0 + 1000);
  fake_clock_set_ms(T0 + 1100);
  ck_assert_int_eq(h_heartbeat(&H, w, &t, 1), 0);
  h_stall(&H, T0 + 1000 + 20000); /* the gap, 20 s, is more than now - 1.1 s */
  ck_assert_uint_eq(w->last_seen_ms, T0 + 21000);
  ck_assert_uint_eq(t->lease_deadline_ms, T0 + 21000 + H_LEASE_MS);
  h_tick(&H, T0 + 21200);
  ck_assert_int_eq(w->lost, 0);
  ck_assert_int_eq(t->status, TS_RUNNING);
}
END_TEST

/* Rule: a gap between ticks counts as a stall from half the lease timeout
 * on (with the default heartbeat interval): at 15 s exactly it does not, and
 * a lease past its deadline expires; 1 ms more and it is forgiven. */
START_TEST(stall_starts_at_half_the_lease_timeout) {
  submit("x", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *a = h_lease(&H, w);
  h_tick(&H, T0 + 16001);
  h_stall(&H, T0 + 16001 + 15000); /* past a's deadline (T0 + 30 s) */
  ck_assert_int_eq(a->status, TS_PENDING);
  ck_assert_int_eq(w->lost, 1);
  fake_clock_set_ms(T0 + 40000);
  struct srv_trial *b = h_lease(&H, w); /* w is back; its lease ends at T0 + 70 s */
  ck_assert_ptr_nonnull(b);
  h_tick(&H, T0 + 56000);
  h_stall(&H, T0 + 56000 + 15001);
  ck_assert_int_eq(b->status, TS_RUNNING);
  ck_assert_uint_eq(b->lease_deadline_ms, T0 + 40000 + H_LEASE_MS + 15001);
  ck_assert_int_eq(w->lost, 0);
}
END_TEST

/* Rule: a worker silent for lease_timeout_s is "lost" (not at it, after
 * it); any sign of life (heartbeat, lease) makes it alive again. */
START_TEST(silent_worker_is_lost) {
  struct srv_experiment *e = submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  h_tick(&H, T0 + H_LEASE_MS);
  ck_assert_int_eq(w->lost, 0);
  reason_is(e, "waiting for free resources");
  h_tick(&H, T0 + H_LEASE_MS + 1);
  ck_assert_int_eq(w->lost, 1);
  reason_is(e, "no worker is connected");
  fake_clock_set_ms(T0 + H_LEASE_MS + 500);
  h_heartbeat(&H, w, NULL, 0);
  ck_assert_int_eq(w->lost, 0);
  ck_assert_uint_eq(w->last_seen_ms, T0 + H_LEASE_MS + 500);
}
END_TEST

/* Rule: a lease is durable by itself (TE_LEASE queues the trial's row:
 * status, attempt, worker), and asking for work is a sign of life even when
 * nothing is leased. */
START_TEST(lease_queues_its_row_and_asking_revives) {
  submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_ptr_nonnull(t);
  h_sync(&H);
  char *row = h_query(&H, "SELECT status, attempt, worker_id FROM trials");
  char want[64];
  snprintf(want, sizeof want, "RUNNING|1|%lld\n", (long long)w->id);
  ck_assert_str_eq(row, want);
  free(row);
  h_complete(&H, t);
  h_tick(&H, T0 + H_LEASE_MS + 1);
  ck_assert_int_eq(w->lost, 1);
  fake_clock_set_ms(T0 + H_LEASE_MS + 700);
  ck_assert_ptr_null(h_lease(&H, w)); /* nothing left to lease */
  ck_assert_int_eq(w->lost, 0);
  ck_assert_uint_eq(w->last_seen_ms, T0 + H_LEASE_MS + 700);
}
END_TEST

/* Rule (heartbeat v2): a RUNNING trial its worker's heartbeats leave out
 * for two heartbeat intervals is requeued (no failure), counted from the
 * first heartbeat that left it out; a listed one is untouched and the
 * worker gets the unlisted one's resources back exactly once. */
START_TEST(unlisted_trial_requeued_after_two_intervals) {
  submit("x", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *lost = h_lease(&H, w), *kept = h_lease(&H, w);
  ck_assert_ptr_null(h_lease(&H, w)); /* full */
  uint64_t t1 = T0 + 1000;
  fake_clock_set_ms(t1);
  ck_assert_int_eq(h_heartbeat(&H, w, &kept, 1), 0);
  ck_assert_uint_eq(lost->unlisted_since_ms, t1);
  fake_clock_set_ms(t1 + H_GRACE_MS - 1);
  ck_assert_int_eq(h_heartbeat(&H, w, &kept, 1), 0);
  ck_assert_int_eq(lost->status, TS_RUNNING);
  fake_clock_set_ms(t1 + H_GRACE_MS);
  ck_assert_int_eq(h_heartbeat(&H, w, &kept, 1), 1);
  ck_assert_int_eq(lost->status, TS_PENDING);
  ck_assert_int_eq(lost->num_failures, 0);
  ck_assert_int_eq(kept->status, TS_RUNNING);
  ck_assert_int_eq(w->nrunning, 1);
  ck_assert(w->used_cpu == 1);
  struct srv_trial *again = h_lease(&H, w);
  ck_assert_ptr_eq(again, lost);
  ck_assert_int_eq(again->attempt, 2);
  ck_assert_int_eq(again->unlisted_since_ms, 0);
}
END_TEST

/* Rule: a heartbeat's "stuck" note (the worker cannot deliver what it has
 * of an attempt) is stored as one "undelivered" event of the trial per
 * attempt, only from the attempt's lessee, and leaves the trial's reason
 * alone. */
static void stuck_beat(struct srv_worker *w, struct srv_trial *t, int attempt, const char *note) {
  uint64_t ticket = 0;
  struct workers_listed l = {t->id, attempt, 1, note, 0};
  struct workers_stop stop;
  ck_assert_int_ge(workers_heartbeat(S, w, &l, 1, &stop, NULL, clock_mono_ms(), &ticket), 0);
}

static char *undelivered(void) {
  h_sync(&H);
  return h_query(&H, "SELECT trial_id, kind, reason FROM trial_events WHERE kind = "
                     "'undelivered' ORDER BY seq");
}

START_TEST(heartbeat_stuck_note_is_one_event_per_attempt) {
  submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0), *o = h_worker(&H, "o", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  stuck_beat(w, t, 1, "could not upload the trial's final checkpoint for 6 s (HTTP 503)");
  stuck_beat(w, t, 1, "could not upload the trial's final checkpoint for 8 s (HTTP 503)");
  stuck_beat(o, t, 1, "not its lessee");
  stuck_beat(w, t, 2, "not this attempt");
  char *rows = undelivered();
  ck_assert_str_eq(rows, "1|undelivered|worker 1 (w) could not upload the trial's final "
                         "checkpoint for 6 s (HTTP 503)\n");
  free(rows);
  ck_assert_ptr_null(t->reason);
  ck_assert_int_eq(t->status, TS_RUNNING);
  /* The next attempt may say it again. */
  fake_clock_set_ms(T0 + 1000);
  ck_assert_int_eq(h_heartbeat(&H, w, NULL, 0), 0);
  fake_clock_set_ms(T0 + 1000 + H_GRACE_MS);
  ck_assert_int_eq(h_heartbeat(&H, w, NULL, 0), 1);
  ck_assert_ptr_eq(h_lease(&H, w), t);
  stuck_beat(w, t, 2, "could not deliver the trial's results for 7 s (HTTP 500 internal)");
  rows = undelivered();
  ck_assert_ptr_nonnull(strstr(rows, "\n1|undelivered|worker 1 (w) could not deliver the "
                                     "trial's results for 7 s (HTTP 500 internal)\n"));
  free(rows);
}
END_TEST

/* Rule: the unlisted requeue also happens on the server's own tick
 * between heartbeats; a later heartbeat that lists the trial again
 * clears its unlisted time. */
START_TEST(unlisted_trial_requeued_by_the_tick) {
  submit("x", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  uint64_t t1 = T0 + 1000;
  fake_clock_set_ms(t1);
  ck_assert_int_eq(h_heartbeat(&H, w, NULL, 0), 0);
  ck_assert_uint_eq(a->unlisted_since_ms, t1);
  ck_assert_uint_eq(b->unlisted_since_ms, t1);
  fake_clock_set_ms(t1 + 5000);
  ck_assert_int_eq(h_heartbeat(&H, w, &b, 1), 0); /* b is listed again */
  ck_assert_uint_eq(b->unlisted_since_ms, 0);
  h_tick(&H, t1 + H_GRACE_MS - 100);
  ck_assert_int_eq(a->status, TS_RUNNING);
  h_tick(&H, t1 + H_GRACE_MS);
  ck_assert_int_eq(a->status, TS_PENDING);
  ck_assert_int_eq(a->num_failures, 0);
  ck_assert_int_eq(b->status, TS_RUNNING);
}
END_TEST

/* Rule: a lost worker leaves the list (gone = 1, pruned) after
 * --worker-retention-s without a sign of life, not before; one with RUNNING
 * trials charged is kept; a pruned worker that comes back is listed again. */
START_TEST(lost_worker_pruned_after_retention) {
  S->opt.worker_retention_s = 60;
  submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_worker *busy = h_worker(&H, "busy", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, busy);
  ck_assert_ptr_nonnull(t);
  struct lease_token l = {busy->id, t->attempt};
  /* busy's trial lease is kept alive by its fenced writes (results), which
   * are no heartbeat: the worker itself is silent. */
  fake_clock_set_ms(T0 + 29000);
  ck_assert_int_eq(state_check_fence(S, t, &l, NULL, 0), FENCE_CURRENT);
  h_tick(&H, T0 + H_LEASE_MS + 1);
  ck_assert(w->lost && busy->lost);
  fake_clock_set_ms(T0 + 58000);
  ck_assert_int_eq(state_check_fence(S, t, &l, NULL, 0), FENCE_CURRENT);
  h_tick(&H, T0 + 60000 - 1);
  ck_assert_int_eq(w->gone, 0);
  h_tick(&H, T0 + 60000);
  ck_assert_int_eq(w->gone, 1);
  ck_assert_int_eq(busy->gone, 0); /* trials charged to it */
  ck_assert_int_eq(t->status, TS_RUNNING);
  ck_assert_ptr_eq(workers_find(S, w->id), w); /* pruned, not unknown */
  fake_clock_set_ms(T0 + 61000);
  h_heartbeat(&H, w, NULL, 0);
  ck_assert_int_eq(w->gone, 0);
  ck_assert_int_eq(w->lost, 0);
}
END_TEST

/* ---- held lease requests (lease_wait.h) ---- */

static int resumed;
static void count_resume(void *ctx) { (*(int *)ctx)++; }
static int suspended;
static void count_suspend(void *ctx) {
  (void)ctx;
  suspended++;
}

/* Parks a held request as http.c does after a lease that found nothing. */
static int park(struct lease_waiter *wt, uint64_t gen, uint64_t deadline_ms) {
  return lease_wait_park(S, wt, gen, deadline_ms, count_suspend, count_resume, &resumed);
}

/* Rule: a held lease is woken when work may have appeared for it: a trial
 * ended (its resources and its experiment's slot free), and a new
 * experiment; a lease itself (another worker's) wakes nobody. */
START_TEST(held_lease_woken_by_an_end_and_a_submission) {
  struct srv_experiment *e = submit("x", 3, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0), *o = h_worker(&H, "o", 1, 0, 0);
  struct srv_trial *a = h_lease(&H, w);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_null(h_lease(&H, w)); /* full: it would be held */
  struct lease_waiter wt = {0};
  resumed = suspended = 0;
  ck_assert_int_eq(park(&wt, lease_wait_gen(S), T0 + 5000), 0);
  ck_assert_int_eq(suspended, 1);
  ck_assert_int_eq(lease_wait_count(S), 1);
  ck_assert_ptr_nonnull(h_lease(&H, o)); /* another worker's lease: no wake */
  ck_assert_int_eq(resumed, 0);
  h_complete(&H, a);
  ck_assert_int_eq(resumed, 1);
  ck_assert_int_eq(lease_wait_count(S), 0); /* unlisted before its resume */
  ck_assert_ptr_nonnull(h_lease(&H, w));    /* what the woken request finds */
  ck_assert_int_eq(park(&wt, lease_wait_gen(S), T0 + 5000), 0);
  submit("y", 1, "");
  ck_assert_int_eq(resumed, 2);
  ck_assert_int_eq(e->counts[TS_RUNNING], 2);
}
END_TEST

/* Rule: no lost wake-up: a change between the lease that found nothing and
 * the park (the lock let go between them) makes the park refuse, and the
 * request tries again at once. */
START_TEST(held_lease_not_parked_after_a_change) {
  submit("x", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *a = h_lease(&H, w);
  uint64_t gen = lease_wait_gen(S);
  h_complete(&H, a);
  struct lease_waiter wt = {0};
  resumed = suspended = 0;
  ck_assert_int_eq(park(&wt, gen, T0 + 5000), 1);
  ck_assert_int_eq(suspended, 0);
  ck_assert_int_eq(lease_wait_count(S), 0);
}
END_TEST

/* Rule: a held request's wait ends at its deadline, by the timer tick, at
 * the millisecond; at a stop every held request is answered and no new one
 * is held. */
START_TEST(held_lease_ends_at_its_deadline_and_at_close) {
  struct lease_waiter a = {0}, b = {0}, c = {0};
  resumed = suspended = 0;
  ck_assert_int_eq(park(&a, lease_wait_gen(S), T0 + 5000), 0);
  ck_assert_int_eq(park(&b, lease_wait_gen(S), T0 + 9000), 0);
  h_tick(&H, T0 + 4999);
  ck_assert_int_eq(resumed, 0);
  h_tick(&H, T0 + 5000);
  ck_assert_int_eq(resumed, 1);
  ck_assert_int_eq(lease_wait_count(S), 1);
  lease_wait_close(S);
  ck_assert_int_eq(resumed, 2);
  ck_assert_int_eq(park(&c, lease_wait_gen(S), T0 + 9000), -ESHUTDOWN);
  ck_assert_int_eq(lease_wait_count(S), 0);
}
END_TEST

/* Rule: a held request tried again is no sign of life: it does not touch
 * its worker (whose heartbeats may have stopped), and a worker found lost
 * meanwhile gets nothing from it; a new request (state_lease) touches and
 * leases as ever. */
START_TEST(held_lease_tried_again_is_no_sign_of_life) {
  submit("x", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  fake_clock_set_ms(T0 + 1000);
  struct srv_trial *t = NULL;
  uint64_t ticket = 0;
  ck_assert_int_eq(state_lease_again(S, w, 1, 0, 0, 0, &t, &ticket), 0);
  ck_assert_ptr_nonnull(t);
  ck_assert_uint_eq(w->last_seen_ms, T0); /* not touched */
  h_complete(&H, t);
  h_tick(&H, T0 + H_LEASE_MS + 1); /* no heartbeat for the lease timeout */
  ck_assert_int_eq(w->lost, 1);
  ck_assert_int_eq(state_lease_again(S, w, 1, 0, 0, 0, &t, &ticket), 0);
  ck_assert_ptr_null(t);
  ck_assert_int_eq(w->lost, 1);
  ck_assert_ptr_nonnull(h_lease(&H, w)); /* a new request: alive, leased */
  ck_assert_int_eq(w->lost, 0);
}
END_TEST

/* Rule: a deregistration ends the worker's held requests (tried again,
 * they find the worker unknown), though it ran nothing. */
START_TEST(held_lease_woken_by_deregister) {
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  ck_assert_ptr_null(h_lease(&H, w));
  struct lease_waiter wt = {0};
  resumed = suspended = 0;
  ck_assert_int_eq(park(&wt, lease_wait_gen(S), T0 + 5000), 0);
  uint64_t ticket = 0;
  ck_assert_int_eq(workers_deregister(S, w, &ticket), 0);
  ck_assert_int_eq(resumed, 1);
  ck_assert_int_eq(lease_wait_count(S), 0);
}
END_TEST

/* Rule: a deregistered worker's RUNNING trials go back to PENDING at once
 * (no failure), its secret is revoked (persisted), and it is unknown from
 * then on, after a restart too. */
START_TEST(deregister_requeues_its_trials) {
  struct srv_experiment *e = submit("x", 3, "");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0), *o = h_worker(&H, "o", 1, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w), *c = h_lease(&H, o);
  ck_assert(a && b && c);
  char secret[sizeof w->secret];
  memcpy(secret, w->secret, sizeof secret);
  uint64_t ticket = 0;
  ck_assert_int_eq(workers_deregister(S, w, &ticket), 0);
  ck_assert_int_eq(a->status, TS_PENDING);
  ck_assert_int_eq(b->status, TS_PENDING);
  ck_assert_int_eq(a->num_failures + b->num_failures, 0);
  ck_assert_int_eq(c->status, TS_RUNNING);
  ck_assert_int_eq(e->counts[TS_PENDING], 2);
  ck_assert_int_eq(w->gone, 2);
  ck_assert_int_eq(w->nrunning, 0);
  ck_assert(w->used_cpu == 0);
  ck_assert_ptr_null(workers_find(S, w->id));
  ck_assert_ptr_null(state_worker_by_secret(S, secret));
  int64_t wid = w->id, aid = a->id;
  h_restart(&H);
  ck_assert_ptr_null(workers_find(S, wid));
  ck_assert_ptr_null(state_worker_by_secret(S, secret));
  ck_assert_int_eq(server_trial(S, aid)->status, TS_PENDING);
  /* Its trials go to whoever asks next. */
  o = server_worker(S, 2);
  ck_assert_int_eq(o->nrunning, 1);
  struct srv_worker *n = h_worker(&H, "n", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, n);
  ck_assert_int_eq(t->id, aid);
  ck_assert_int_eq(t->attempt, 2);
}
END_TEST

/* A complete that asks for the lease's worker's next lease, with what it
 * says is free (state_complete_and_lease). */
static int complete_lease(struct srv_trial *t, const struct lease_token *l, double cpu,
                          struct srv_trial **next, struct trial_event_args *a) {
  uint64_t ticket = 0;
  int rank = -1;
  *a = (struct trial_event_args){.lease = l};
  int rc = state_complete_and_lease(S, t, a, cpu, 1e9, 0, 0, next, &rank, &ticket);
  ck_assert_int_eq(rank, 0);
  return rc;
}

/* Rule: a complete that asks for its worker's next lease is granted what a
 * lease request with the same free would get, in the same hold: the ended
 * trial's resources are free again, the next trial is charged and RUNNING
 * on the same worker; a free too small for a trial gets none. */
START_TEST(complete_grants_the_next_lease) {
  struct srv_experiment *e = submit("cl", 4, ", \"resources_per_trial\": {\"cpu\": 1}");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *t1 = h_lease(&H, w), *t2 = h_lease(&H, w), *next = NULL;
  ck_assert_ptr_nonnull(t2);
  ck_assert_ptr_null(h_lease(&H, w)); /* full */
  struct trial_event_args a;
  struct lease_token l1 = {t1->worker_id, t1->attempt}, l2 = {t2->worker_id, t2->attempt};
  ck_assert_int_eq(complete_lease(t1, &l1, 1, &next, &a), 0);
  ck_assert_int_eq(t1->status, TS_TERMINATED);
  ck_assert_ptr_nonnull(next);
  ck_assert_ptr_ne(next, t1);
  ck_assert_int_eq(next->status, TS_RUNNING);
  ck_assert_int_eq(next->worker_id, w->id);
  ck_assert_int_eq(next->attempt, 1);
  ck_assert_uint_eq(next->lease_deadline_ms, T0 + H_LEASE_MS);
  ck_assert(w->used_cpu == 2.0);
  ck_assert_int_eq(w->nrunning, 2);
  ck_assert_int_eq(e->counts[TS_RUNNING], 2);
  /* Half a CPU said free: nothing of this experiment fits it. */
  ck_assert_int_eq(complete_lease(t2, &l2, 0.5, &next, &a), 0);
  ck_assert_int_eq(t2->status, TS_TERMINATED);
  ck_assert_ptr_null(next);
  ck_assert(w->used_cpu == 1.0);
  ck_assert_int_eq(e->counts[TS_RUNNING], 1);
  ck_assert_int_eq(e->counts[TS_PENDING] + (e->num_trials - e->ntrials), 1);
}
END_TEST

/* Rule: only the complete that ended the trial gets a lease: a stale
 * lease's complete changes nothing (-ESTALE), a retried one (the lease that
 * ended it, FENCE_FINAL) gets none, and a quarantined worker gets none. */
START_TEST(complete_lease_only_from_the_end_it_made) {
  struct srv_experiment *e = submit("cs", 6, ", \"resources_per_trial\": {\"cpu\": 1}");
  /* Room for one more all along: what is not leased is the rule's doing. */
  struct srv_worker *w = h_worker(&H, "w", 3, 0, 0);
  struct srv_trial *t1 = h_lease(&H, w), *t2 = h_lease(&H, w), *next = NULL;
  struct trial_event_args a;
  struct lease_token stale = {t1->worker_id, t1->attempt + 1};
  ck_assert_int_eq(complete_lease(t1, &stale, 1, &next, &a), -ESTALE);
  ck_assert_ptr_null(next);
  ck_assert_int_eq(t1->status, TS_RUNNING);
  ck_assert(w->used_cpu == 2.0);
  ck_assert_int_eq(e->ntrials, 2);
  /* The first delivery ended it (and leased the next), the retry gets none. */
  struct lease_token l1 = {t1->worker_id, t1->attempt};
  ck_assert_int_eq(complete_lease(t1, &l1, 1, &next, &a), 0);
  ck_assert_ptr_nonnull(next);
  ck_assert_int_eq(e->ntrials, 3);
  ck_assert_int_eq(complete_lease(t1, &l1, 1, &next, &a), 0);
  ck_assert_int_eq(a.fence, FENCE_FINAL);
  ck_assert_ptr_null(next);
  ck_assert_int_eq(e->ntrials, 3);
  ck_assert(w->used_cpu == 2.0);
  /* Out of service: the complete is stored, nothing is leased. */
  snprintf(w->quarantine, sizeof w->quarantine, "failed 3 attempts of 3 experiments");
  struct lease_token l2 = {t2->worker_id, t2->attempt};
  ck_assert_int_eq(complete_lease(t2, &l2, 1, &next, &a), 0);
  ck_assert_int_eq(t2->status, TS_TERMINATED);
  ck_assert_ptr_null(next);
  ck_assert(w->used_cpu == 1.0);
  ck_assert_int_eq(e->ntrials, 3);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_leases");
  TCase *tc = tcase_create("leases");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, fake_clock_is_what_the_state_reads);
  tcase_add_test(tc, lease_charges_worker_resources);
  tcase_add_test(tc, heartbeat_stuck_note_is_one_event_per_attempt);
  tcase_add_test(tc, lease_queues_its_row_and_asking_revives);
  tcase_add_test(tc, lease_honours_max_concurrent_trials);
  tcase_add_test(tc, lease_skips_what_does_not_fit);
  tcase_add_test(tc, lease_expiry_requeues_without_failure);
  tcase_add_test(tc, heartbeat_renews_lease);
  tcase_add_test(tc, silent_worker_is_lost);
  tcase_add_test(tc, server_stall_keeps_healthy_leases);
  tcase_add_test(tc, stall_starts_at_half_the_lease_timeout);
  tcase_add_test(tc, stall_before_the_first_tick);
  tcase_add_test(tc, stall_right_after_a_heartbeat);
  tcase_add_test(tc, unlisted_trial_requeued_after_two_intervals);
  tcase_add_test(tc, unlisted_trial_requeued_by_the_tick);
  tcase_add_test(tc, lost_worker_pruned_after_retention);
  tcase_add_test(tc, deregister_requeues_its_trials);
  tcase_add_test(tc, held_lease_woken_by_an_end_and_a_submission);
  tcase_add_test(tc, held_lease_not_parked_after_a_change);
  tcase_add_test(tc, held_lease_ends_at_its_deadline_and_at_close);
  tcase_add_test(tc, held_lease_woken_by_deregister);
  tcase_add_test(tc, held_lease_tried_again_is_no_sign_of_life);
  tcase_add_test(tc, complete_grants_the_next_lease);
  tcase_add_test(tc, complete_lease_only_from_the_end_it_made);
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
