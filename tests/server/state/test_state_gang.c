/* Gang trials in-process (server/state/gang.c): the pure placement, all
 * members or none, the fewest workers, member leases delivered after the
 * rendezvous, no deadlock and no starvation with more demand than capacity,
 * one requeue or one failure per lost gang, and stale members refused. Time
 * is the fake clock's. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "gang.h"
#include "harness.h"
#include "workers.h"

static struct harness H;
static struct server *S;
static const uint64_t T0 = FAKE_CLOCK_START_MS;
#define H_BEAT_MS 5000ull /* one heartbeat interval: a gang member's worker's grace */

static void setup(void) {
  h_open(&H);
  S = &H.s;
}

static void teardown(void) { h_close(&H); }

static struct srv_experiment *submit(const char *name, int n, int members, double cpu) {
  char extra[160], buf[1024];
  snprintf(extra, sizeof extra, ", \"resources_per_trial\": {\"cpu\": %g, \"num_workers\": %d}",
           cpu, members);
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, extra));
}

/* A worker's next member lease (its lease request): the rank, -1: none. */
static int deliver(struct srv_worker *w, struct srv_trial **t) {
  int rank = -1;
  gang_deliver(S, w, t, &rank);
  return *t ? rank : -1;
}

static void rendezvous(struct srv_trial *t, int port) {
  char why[256] = "";
  struct lease_token l = {t->worker_id, t->attempt};
  ck_assert_int_eq(gang_rendezvous(S, t, &l, "10.0.0.1", port, why, sizeof why), 0);
}

/* A v2 heartbeat of w listing member ranks[0..n) of t; returns the stops. */
static int beat(struct srv_worker *w, struct srv_trial *t, int attempt, const int *ranks, int n) {
  struct workers_listed listed[8];
  struct workers_stop stops[8];
  uint64_t ticket = 0;
  for (int i = 0; i < n; i++)
    listed[i] = (struct workers_listed){t->id, attempt, 1, NULL, ranks[i]};
  int rc = workers_heartbeat(S, w, listed, n, stops, NULL, clock_mono_ms(), &ticket);
  ck_assert_int_ge(rc, 0);
  return rc;
}

static int64_t events_of(const struct srv_trial *t, const char *kind) {
  char sql[200];
  h_sync(&H);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM trial_events WHERE trial_id=%lld AND kind='%s'",
           (long long)t->id, kind);
  char *got = h_query(&H, sql);
  int64_t n = atoll(got);
  free(got);
  return n;
}

/* A gang of 2 members of 2 CPUs on workers a and b of 2 CPUs each, its
 * rendezvous reported and both members delivered: rank 0 on a. */
static struct srv_trial *pair_running(struct srv_worker **a, struct srv_worker **b) {
  submit("g", 1, 2, 2);
  *a = h_worker(&H, "a", 2, 0, 0);
  *b = h_worker(&H, "b", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, *a), *got;
  rendezvous(t, 29500);
  ck_assert_int_eq(deliver(*a, &got), 0);
  ck_assert_int_eq(deliver(*b, &got), 1);
  return t;
}

/* Rule: the fewest workers (largest capacity first), rank 0 on the first,
 * ties to the earlier slot (the asking worker); short of room: -ENOSPC. */
START_TEST(place_fewest_largest_first) {
  struct gang_slot slots[] = {{1, 1}, {2, 4}, {3, 2}, {4, 3}};
  int node_of[16];
  ck_assert_int_eq(gang_place(slots, 4, 5, node_of), 2);
  int want[] = {1, 1, 1, 1, 3};
  for (int k = 0; k < 5; k++) ck_assert_int_eq(node_of[k], want[k]);
  ck_assert_int_eq(gang_place(slots, 4, 3, node_of), 1);
  ck_assert_int_eq(node_of[0], 1);
  struct gang_slot tie[] = {{7, 2}, {8, 2}};
  ck_assert_int_eq(gang_place(tie, 2, 2, node_of), 1);
  ck_assert_int_eq(node_of[1], 0);
  ck_assert_int_eq(gang_place(slots, 4, 11, node_of), -ENOSPC);
}
END_TEST

/* Rule: num_workers absent is a trial of one process, as ever: no gang. */
START_TEST(one_member_is_a_plain_trial) {
  char buf[1024];
  h_submit(&H, h_cfg(buf, sizeof buf, "plain", 1, ""));
  struct srv_worker *w = h_worker(&H, "w", 4, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_ptr_nonnull(t);
  ck_assert_ptr_null(t->gang);
  ck_assert(w->used_cpu == 1.0);
}
END_TEST

/* Rule: all members are charged in one lease or none is; the trial's one
 * lease is rank 0's; a gang no idle fleet can hold blocks no smaller trial
 * and says why it waits. */
START_TEST(all_or_none) {
  struct srv_experiment *big = submit("big", 1, 4, 1);
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0), *b = h_worker(&H, "b", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, a);
  ck_assert_ptr_nonnull(t);
  ck_assert_ptr_nonnull(t->gang);
  ck_assert_int_eq(t->gang->world, 4);
  ck_assert_int_eq(t->gang->nnodes, 2);
  ck_assert_int_eq(t->worker_id, a->id);
  ck_assert(a->used_cpu == 2.0 && b->used_cpu == 2.0);
  ck_assert_int_eq(a->nrunning, 2);
  ck_assert_int_eq(b->nrunning, 2);
  /* Full: a second gang takes nothing at all. */
  struct srv_experiment *two = submit("two", 1, 2, 1);
  ck_assert_ptr_null(h_lease(&H, b));
  ck_assert_int_eq(two->counts[TS_PENDING], 1);
  ck_assert(a->used_cpu == 2.0 && b->used_cpu == 2.0);
  h_complete(&H, t);
  ck_assert(a->used_cpu == 0 && b->used_cpu == 0);
  ck_assert_int_eq(a->nrunning + b->nrunning, 0);
  ck_assert_int_eq(big->counts[TS_TERMINATED], 1);
  /* Larger than the fleet: never placed, says so, blocks nothing. */
  struct srv_experiment *huge = submit("huge", 1, 5, 1);
  char why[256];
  struct srv_trial *t2 = h_lease(&H, a);
  ck_assert_ptr_nonnull(t2);
  ck_assert_int_eq(t2->experiment_id, two->id);
  h_complete(&H, t2);
  for (int i = 0; i < 3; i++) ck_assert_ptr_null(h_lease(&H, a));
  state_experiment_pending_reason(S, huge, why, sizeof why);
  ck_assert_str_eq(why, "needs 5 members of cpu 1, gpu 0, memory_mb 0 but the workers hold 4");
  char cfg[1024];
  h_submit(&H, h_cfg(cfg, sizeof cfg, "small", 1, ""));
  h_tick(&H, T0 + 10 * H_LEASE_MS);
  h_heartbeat(&H, a, NULL, 0);
  struct srv_trial *s1 = h_lease(&H, a);
  ck_assert_ptr_nonnull(s1);
  ck_assert_ptr_null(s1->gang);
  ck_assert_int_eq(huge->counts[TS_PENDING], 1);
  ck_assert(b->used_cpu == 0);
}
END_TEST

/* Rule: the members go to the fewest workers, whoever asks; rank 0 is
 * delivered first, the other ranks once rank 0's worker reported the
 * rendezvous, each with its node and local rank. */
START_TEST(fewest_workers_and_delivery) {
  submit("g", 1, 4, 1);
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0), *b = h_worker(&H, "b", 4, 0, 0);
  struct srv_worker *c = h_worker(&H, "c", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, a), *got = NULL;
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(t->gang->nnodes, 1);
  ck_assert_int_eq(t->worker_id, b->id);
  ck_assert(a->used_cpu == 0 && b->used_cpu == 4.0 && c->used_cpu == 0);
  ck_assert_int_eq(deliver(a, &got), -1);
  ck_assert_int_eq(deliver(b, &got), 0);
  ck_assert_ptr_eq(got, t);
  ck_assert_int_eq(deliver(b, &got), -1); /* no rendezvous yet */
  rendezvous(t, 29500);
  for (int r = 1; r < 4; r++) {
    ck_assert_int_eq(deliver(b, &got), r);
    ck_assert_int_eq(t->gang->m[r].node_rank, 0);
    ck_assert_int_eq(t->gang->m[r].local_rank, r);
    ck_assert_int_eq(t->gang->m[r].local_world, 4);
  }
  ck_assert_int_eq(deliver(b, &got), -1);
  ck_assert_int_eq(t->gang->master_port, 29500);
}
END_TEST

/* Rule: members that do not fit one worker fill the largest first; node
 * and local ranks follow the nodes. */
START_TEST(two_nodes_ranks) {
  submit("g", 1, 3, 1);
  struct srv_worker *a = h_worker(&H, "a", 1, 0, 0), *b = h_worker(&H, "b", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, a);
  ck_assert_ptr_nonnull(t);
  const struct srv_gang *g = t->gang;
  ck_assert_int_eq(g->nnodes, 2);
  ck_assert_int_eq(g->m[0].worker_id, b->id);
  ck_assert_int_eq(g->m[1].worker_id, b->id);
  ck_assert_int_eq(g->m[2].worker_id, a->id);
  ck_assert_int_eq(g->m[2].node_rank, 1);
  ck_assert_int_eq(g->m[2].local_rank, 0);
  ck_assert_int_eq(g->m[2].local_world, 1);
  ck_assert_int_eq(g->m[1].local_world, 2);
}
END_TEST

/* Rule: two gang experiments wanting more than the fleet never hold half
 * each: leases from both workers in turn run them one gang at a time, to
 * the end, with no resource ever charged to a waiting gang. */
START_TEST(no_deadlock_more_demand_than_capacity) {
  struct srv_experiment *x = submit("x", 3, 3, 1), *y = submit("y", 3, 3, 1);
  struct srv_worker *w[2] = {h_worker(&H, "a", 2, 0, 0), h_worker(&H, "b", 2, 0, 0)};
  int done = 0;
  for (int round = 0; round < 40 && done < 6; round++) {
    struct srv_trial *t = h_lease(&H, w[round % 2]);
    double used = w[0]->used_cpu + w[1]->used_cpu;
    ck_assert(used == 0 || used == 3.0);
    if (!t) {
      /* Whatever runs ends; the next request places the other gang. */
      for (int64_t k = 0; k < S->ntrials; k++)
        if (S->trials[k]->status == TS_RUNNING) {
          h_complete(&H, S->trials[k]);
          done++;
        }
    }
  }
  ck_assert_int_eq(done, 6);
  ck_assert_int_eq(x->counts[TS_TERMINATED], 3);
  ck_assert_int_eq(y->counts[TS_TERMINATED], 3);
  ck_assert(w[0]->used_cpu == 0 && w[1]->used_cpu == 0);
}
END_TEST

/* Rule: a gang that fits the idle fleet but has waited a lease timeout
 * holds back the smaller trials of the workers it can use, so that they
 * drain to it. */
START_TEST(waiting_gang_is_not_starved) {
  struct srv_experiment *g = submit("g", 1, 2, 2);
  char cfg[1024];
  struct srv_experiment *small = h_submit(&H, h_cfg(cfg, sizeof cfg, "small", 50, ""));
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0), *b = h_worker(&H, "b", 2, 0, 0);
  /* The gang is placed at once on an idle fleet ... */
  struct srv_trial *gt = h_lease(&H, a);
  ck_assert_int_eq(gt->experiment_id, g->id);
  /* ... then ends by a requeue while small trials take the room. */
  uint64_t ticket = 0;
  struct trial_event_args ra = {.why_in = "test"};
  ck_assert_int_eq(state_trial_event(S, gt, TE_REQUEUE, &ra, &ticket), 0);
  ck_assert_ptr_nonnull(h_lease_free(&H, a, 1, 0, 0, 0));
  ck_assert_int_eq(small->counts[TS_RUNNING], 1);
  /* Before a lease timeout: small trials fill the rest. */
  fake_clock_set_ms(T0 + H_LEASE_MS - 1);
  h_heartbeat(&H, b, NULL, 0);
  ck_assert_ptr_nonnull(h_lease_free(&H, b, 1, 0, 0, 0));
  ck_assert_int_eq(small->counts[TS_RUNNING], 2);
  /* After: nothing more for the workers the gang can use. */
  fake_clock_set_ms(T0 + 2 * H_LEASE_MS);
  for (int64_t k = 0; k < S->ntrials; k++)
    if (S->trials[k]->status == TS_RUNNING) h_complete(&H, S->trials[k]);
  struct srv_trial *next = h_lease_free(&H, b, 1, 0, 0, 0);
  ck_assert_ptr_null(next);
  next = h_lease(&H, b);
  ck_assert_ptr_nonnull(next);
  ck_assert_int_eq(next->experiment_id, g->id);
}
END_TEST

/* Rule: a member's worker silent for two heartbeat intervals (not a whole
 * lease timeout: the others wait for it in their collectives) ends the
 * attempt of every member once: one lease_lost, no failure counted, every
 * worker's resources back, and the other members' workers told to stop. */
START_TEST(lost_member_one_requeue) {
  submit("g", 1, 4, 1);
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0), *b = h_worker(&H, "b", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, a), *got;
  rendezvous(t, 29500);
  while (deliver(a, &got) >= 0) continue;
  while (deliver(b, &got) >= 0) continue;
  int ra[] = {0, 1}, rb[] = {2, 3};
  fake_clock_set_ms(T0 + 1000);
  ck_assert_int_eq(beat(a, t, 1, ra, 2), 0);
  ck_assert_int_eq(beat(b, t, 1, rb, 2), 0);
  /* b goes silent; a heartbeats on. */
  fake_clock_set_ms(T0 + 6000);
  ck_assert_int_eq(beat(a, t, 1, ra, 2), 0);
  h_tick(&H, T0 + 1000 + H_BEAT_MS);
  ck_assert_int_eq(t->status, TS_RUNNING);
  h_tick(&H, T0 + 1100 + H_BEAT_MS);
  ck_assert_int_eq(t->status, TS_PENDING);
  h_tick(&H, T0 + 2 * H_LEASE_MS);
  ck_assert_int_eq(events_of(t, "lease_lost"), 1);
  ck_assert_int_eq(t->num_failures, 0);
  ck_assert(a->used_cpu == 0 && b->used_cpu == 0);
  ck_assert_int_eq(a->nrunning + b->nrunning, 0);
  ck_assert_int_eq(beat(a, t, 1, ra, 2), 2);
}
END_TEST

/* Rule: a user's stop ends every member at its worker's next heartbeat;
 * a pause reaches rank 0 (its lease ends into PAUSED with its checkpoint)
 * and then every other member. */
START_TEST(stop_and_pause_reach_every_member) {
  struct srv_worker *a, *b;
  struct srv_trial *t = pair_running(&a, &b);
  int r0[] = {0}, r1[] = {1};
  uint64_t ticket = 0;
  ck_assert_int_eq(control_stop_trial(S, t, &ticket), 0);
  ck_assert_int_eq(beat(a, t, 1, r0, 1), 1);
  ck_assert_int_eq(beat(b, t, 1, r1, 1), 1);
  ck_assert(a->used_cpu == 0 && b->used_cpu == 0);
  struct srv_experiment *e = server_experiment(S, t->experiment_id);
  char cfg[1024];
  struct srv_experiment *e2 =
      h_submit(&H, h_cfg(cfg, sizeof cfg, "g2", 1,
                         ", \"resources_per_trial\": {\"cpu\": 2, \"num_workers\": 2}"));
  ck_assert_int_eq(e->status, ES_TERMINATED);
  struct srv_trial *t2 = h_lease(&H, a), *got;
  rendezvous(t2, 29501);
  ck_assert_int_eq(deliver(a, &got), 0);
  ck_assert_int_eq(deliver(b, &got), 1);
  ck_assert_int_eq(control_pause(S, e2, &ticket), 0);
  ck_assert_int_eq(beat(a, t2, 1, r0, 1), 1); /* "paused": rank 0 checkpoints and ends */
  ck_assert_int_eq(beat(b, t2, 1, r1, 1), 0); /* the others run until it has */
  h_complete(&H, t2);
  ck_assert_int_eq(t2->status, TS_PAUSED);
  ck_assert_int_eq(beat(b, t2, 1, r1, 1), 1);
  ck_assert(a->used_cpu == 0 && b->used_cpu == 0);
}
END_TEST

/* Rule: rank 0's worker silent for two heartbeat intervals ends the
 * attempt too, long before the trial's own lease would expire. */
START_TEST(silent_rank0_worker_requeues) {
  struct srv_worker *a, *b;
  struct srv_trial *t = pair_running(&a, &b);
  int r0[] = {0}, r1[] = {1};
  fake_clock_set_ms(T0 + 1000);
  beat(a, t, 1, r0, 1);
  beat(b, t, 1, r1, 1);
  fake_clock_set_ms(T0 + 6000);
  beat(b, t, 1, r1, 1);
  h_tick(&H, T0 + 1000 + H_BEAT_MS);
  ck_assert_int_eq(t->status, TS_RUNNING);
  h_tick(&H, T0 + 1100 + H_BEAT_MS);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(beat(b, t, 1, r1, 1), 1);
}
END_TEST

/* Rule: a member its worker stops listing for two heartbeat intervals ends
 * the attempt (once). */
START_TEST(unlisted_member_requeued) {
  struct srv_worker *a, *b;
  struct srv_trial *t = pair_running(&a, &b);
  int r0[] = {0}, r1[] = {1};
  beat(a, t, 1, r0, 1);
  beat(b, t, 1, r1, 1);
  fake_clock_set_ms(T0 + 1000);
  beat(b, t, 1, NULL, 0);
  fake_clock_set_ms(T0 + 1000 + H_GRACE_MS - 1);
  beat(b, t, 1, NULL, 0);
  ck_assert_int_eq(t->status, TS_RUNNING);
  fake_clock_set_ms(T0 + 1000 + H_GRACE_MS);
  beat(b, t, 1, NULL, 0);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(events_of(t, "lease_lost"), 1);
}
END_TEST

/* Rule: two members failing in one attempt count one failure; the second
 * is the ended attempt's, not a new one. */
START_TEST(member_failures_count_once) {
  char buf[1024];
  h_submit(&H, h_cfg(buf, sizeof buf, "g", 1,
                     ", \"max_failures\": 3, \"resources_per_trial\": {\"num_workers\": 3}"));
  struct srv_worker *a = h_worker(&H, "a", 3, 0, 0);
  struct srv_trial *t = h_lease(&H, a), *got;
  rendezvous(t, 29500);
  while (deliver(a, &got) >= 0) continue;
  uint64_t ticket = 0;
  char why[256] = "";
  struct lease_token l = {a->id, 1};
  ck_assert_int_eq(gang_member_fail(S, t, &l, 2, "exit 1", why, sizeof why, &ticket), 0);
  ck_assert_int_eq(t->num_failures, 1);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(gang_member_fail(S, t, &l, 1, "exit 1", why, sizeof why, &ticket), 0);
  ck_assert_int_eq(t->num_failures, 1);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert(a->used_cpu == 0);
  ck_assert_ptr_nonnull(strstr(t->error, "member rank 2 on worker 1: exit 1"));
}
END_TEST

/* Rule: a member that cannot start on its worker (no room there) gives its
 * lease back fenced by its attempt and rank: the attempt of all ends at
 * once (PENDING, no failure counted, every worker uncharged); a retry is
 * answered as done, and a stale member's release is refused. */
START_TEST(member_release_ends_attempt) {
  struct srv_worker *a, *b;
  struct srv_trial *t = pair_running(&a, &b);
  uint64_t ticket = 0;
  char why[256] = "";
  struct lease_token la = {a->id, 1}, lb = {b->id, 1};
  ck_assert_int_eq(gang_member_release(S, t, &la, 1, why, sizeof why, &ticket), -ESTALE);
  ck_assert_str_eq(why, "trial 1 has no member rank 1 under lease 1:1");
  ck_assert_int_eq(t->status, TS_RUNNING);
  ck_assert_int_eq(gang_member_release(S, t, &lb, 1, why, sizeof why, &ticket), 0);
  ck_assert_int_eq(t->status, TS_PENDING);
  ck_assert_int_eq(t->num_failures, 0);
  ck_assert(a->used_cpu == 0 && b->used_cpu == 0);
  ck_assert_int_eq(a->nrunning + b->nrunning, 0);
  ck_assert_int_eq(events_of(t, "lease_lost"), 1);
  /* The same release again: stale now, nothing more counted. */
  ck_assert_int_eq(gang_member_release(S, t, &lb, 1, why, sizeof why, &ticket), -ESTALE);
  ck_assert_int_eq(events_of(t, "lease_lost"), 1);
  /* The next placement is attempt 2, on the same two workers. */
  ck_assert_ptr_nonnull(h_lease(&H, a));
  ck_assert_int_eq(t->attempt, 2);
}
END_TEST

/* Rule: a member's writes name its attempt and rank; another attempt's, a
 * rank on another worker, a rank out of range are stale, and heartbeats
 * listing them are told to stop. */
START_TEST(stale_member_refused) {
  struct srv_worker *a, *b;
  struct srv_trial *t = pair_running(&a, &b);
  char why[256];
  struct lease_token la = {a->id, 1}, lb = {b->id, 1};
  ck_assert_int_eq(gang_check_member(S, t, &lb, 1, why, sizeof why), FENCE_CURRENT);
  ck_assert_int_eq(gang_check_member(S, t, &la, 0, why, sizeof why), FENCE_CURRENT);
  ck_assert_int_eq(gang_check_member(S, t, &la, 1, why, sizeof why), FENCE_STALE);
  ck_assert_str_eq(why, "trial 1 has no member rank 1 under lease 1:1");
  ck_assert_int_eq(gang_check_member(S, t, &lb, 2, why, sizeof why), FENCE_STALE);
  /* The attempt ends; the next placement is attempt 2. */
  uint64_t ticket = 0;
  struct trial_event_args ra = {.why_in = "test"};
  ck_assert_int_eq(state_trial_event(S, t, TE_REQUEUE, &ra, &ticket), 0);
  ck_assert_int_eq(gang_check_member(S, t, &lb, 1, why, sizeof why), FENCE_STALE);
  ck_assert_str_eq(why, "trial 1 is PENDING, attempt 1, not member rank 1 of 2:1");
  ck_assert_ptr_nonnull(h_lease(&H, b));
  ck_assert_int_eq(t->attempt, 2);
  ck_assert_int_eq(gang_check_member(S, t, &lb, 1, why, sizeof why), FENCE_STALE);
  int r1[] = {1};
  ck_assert_int_eq(beat(b, t, 1, r1, 1), 1);
  /* A stale rank 0 cannot report the rendezvous either. */
  ck_assert_int_eq(gang_rendezvous(S, t, &la, "10.0.0.1", 1, why, sizeof why), -ESTALE);
}
END_TEST

/* Rule: one rendezvous per attempt: a retry of the same is taken, another
 * address or port is refused, and a bad one is refused with its reason. */
START_TEST(rendezvous_once_per_attempt) {
  submit("g", 1, 2, 1);
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, a);
  char why[256];
  struct lease_token l = {a->id, 1};
  ck_assert_int_eq(gang_rendezvous(S, t, &l, "10.0.0.1", 0, why, sizeof why), -EINVAL);
  ck_assert_int_eq(gang_rendezvous(S, t, &l, "a b", 80, why, sizeof why), -EINVAL);
  rendezvous(t, 29500);
  rendezvous(t, 29500);
  ck_assert_int_eq(gang_rendezvous(S, t, &l, "10.0.0.1", 29501, why, sizeof why), -EEXIST);
}
END_TEST

/* Rule: a restart keeps no placement: a RUNNING gang trial it loads is
 * requeued by the first tick, once. */
START_TEST(restart_requeues_running_gang) {
  submit("g", 1, 2, 1);
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, a);
  int64_t id = t->id, wid = a->id;
  h_restart(&H);
  S = &H.s;
  t = server_trial(S, id);
  ck_assert_int_eq(t->status, TS_RUNNING);
  h_tick(&H, T0 + 1000);
  ck_assert_int_eq(t->status, TS_PENDING);
  h_tick(&H, T0 + 2000);
  ck_assert_int_eq(events_of(t, "lease_lost"), 1);
  ck_assert(server_worker(S, wid)->used_cpu == 0);
}
END_TEST

/* Rule: a quarantined worker (quarantine.c: out of service) holds no member
 * of a gang either; the members go to the workers in service or wait. */
START_TEST(quarantined_worker_gets_no_member) {
  submit("g", 1, 2, 2);
  struct srv_worker *a = h_worker(&H, "a", 2, 0, 0), *b = h_worker(&H, "b", 2, 0, 0);
  snprintf(b->quarantine, sizeof b->quarantine, "planted by the test");
  ck_assert_ptr_null(h_lease(&H, a));
  ck_assert(a->used_cpu == 0 && b->used_cpu == 0);
  struct srv_worker *c = h_worker(&H, "c", 2, 0, 0);
  struct srv_trial *t = h_lease(&H, a);
  ck_assert_ptr_nonnull(t);
  ck_assert(b->used_cpu == 0 && c->used_cpu == 2.0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_gang");
  TCase *tc = tcase_create("gang");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, place_fewest_largest_first);
  tcase_add_test(tc, one_member_is_a_plain_trial);
  tcase_add_test(tc, all_or_none);
  tcase_add_test(tc, fewest_workers_and_delivery);
  tcase_add_test(tc, two_nodes_ranks);
  tcase_add_test(tc, no_deadlock_more_demand_than_capacity);
  tcase_add_test(tc, waiting_gang_is_not_starved);
  tcase_add_test(tc, lost_member_one_requeue);
  tcase_add_test(tc, unlisted_member_requeued);
  tcase_add_test(tc, silent_rank0_worker_requeues);
  tcase_add_test(tc, stop_and_pause_reach_every_member);
  tcase_add_test(tc, member_failures_count_once);
  tcase_add_test(tc, member_release_ends_attempt);
  tcase_add_test(tc, stale_member_refused);
  tcase_add_test(tc, rendezvous_once_per_attempt);
  tcase_add_test(tc, restart_requeues_running_gang);
  tcase_add_test(tc, quarantined_worker_gets_no_member);
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
