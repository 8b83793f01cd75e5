/* Unit tests (Check) of the fair-share order and the live list
 * (server/state/state_live.c): smallest running/priority first, the
 * older on a tie; the pick order over many candidates equals a full sort;
 * a simulated worker gives two experiments equal shares from the moment the
 * second arrives, and 2:1 with priorities 2:1; the live list holds exactly
 * the RUNNING experiments through syncs and a rebuild. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

static struct srv_experiment *mk(int64_t id, int64_t running, double prio) {
  struct srv_experiment *e = calloc(1, sizeof *e);
  ck_assert_ptr_nonnull(e);
  e->id = id;
  e->counts[TS_RUNNING] = running;
  e->priority = prio;
  return e;
}

START_TEST(priority_default_and_order) {
  struct srv_experiment *a = mk(1, 1, 0), *b = mk(2, 0, 0), *c = mk(3, 1, 2);
  ck_assert(state_experiment_priority(a) == 1.0);
  ck_assert(state_experiment_priority(c) == 2.0);
  /* b runs nothing: first; a and c both... c has 1/2 < a's 1/1 */
  ck_assert(state_fair_before(b, a));
  ck_assert(state_fair_before(c, a));
  ck_assert(!state_fair_before(a, c));
  /* a tie goes to the older (smaller id), and nothing is before itself */
  c->counts[TS_RUNNING] = 2;
  ck_assert(state_fair_before(a, c));
  ck_assert(!state_fair_before(c, a));
  ck_assert(!state_fair_before(a, a));
  free(a);
  free(b);
  free(c);
}
END_TEST

/* The k-th pick over k = 0.. matches a full sort, past the scans too. */
START_TEST(pick_order_is_sorted) {
  enum { N = 200 };
  struct srv_experiment *e[N], *c[N];
  srand(7);
  for (int i = 0; i < N; i++) {
    e[i] = mk(i + 1, rand() % 6, (rand() % 4) ? 1 + rand() % 3 : 0);
    c[N - 1 - i] = e[i]; /* newest first: ties must still go to the oldest */
  }
  for (int64_t k = 0; k < N; k++) state_fair_pick(c, N, k);
  for (int i = 1; i < N; i++) ck_assert(!state_fair_before(c[i], c[i - 1]));
  for (int i = 0; i < N; i++) free(e[i]);
}
END_TEST

/* A worker with `slots` slots, experiment A alone first, then B: each step
 * the oldest running trial ends and the fair order picks the next. Returns
 * how many leases went to A among `steps`, asserting the split each step. */
static int simulate(double pa, double pb, int slots, int steps, int want_a) {
  struct srv_experiment *a = mk(1, slots, pa), *b = mk(2, 0, pb);
  int64_t run[64];
  int n = 0, to_a = 0;
  for (int i = 0; i < slots; i++) run[n++] = 1;
  for (int s = 0; s < steps; s++) {
    struct srv_experiment *ended = run[0] == 1 ? a : b;
    ended->counts[TS_RUNNING]--;
    memmove(run, run + 1, (size_t)(n - 1) * sizeof *run);
    n--;
    struct srv_experiment *c[2] = {b, a};
    state_fair_pick(c, 2, 0);
    c[0]->counts[TS_RUNNING]++;
    run[n++] = c[0]->id;
    to_a += c[0] == a;
    ck_assert_int_eq(a->counts[TS_RUNNING], want_a);
    ck_assert_int_eq(b->counts[TS_RUNNING], slots - want_a);
  }
  free(a);
  free(b);
  return to_a;
}

START_TEST(two_experiments_share) {
  /* Equal priorities, 2 slots: 1 each from B's arrival, leases alternate. */
  ck_assert_int_eq(simulate(1, 1, 2, 10, 1), 5);
  /* 2:1 on 3 slots: A holds 2, B 1; A gets 2 of every 3 leases. */
  ck_assert_int_eq(simulate(2, 1, 3, 9, 2), 6);
}
END_TEST

START_TEST(live_list_follows_status) {
  struct server s;
  memset(&s, 0, sizeof s);
  enum { N = 50 };
  struct srv_experiment *e[N];
  s.exps = e;
  s.nexps = N;
  for (int i = 0; i < N; i++) {
    e[i] = mk(i + 1, 0, 0);
    e[i]->status = i % 3 ? ES_RUNNING : ES_TERMINATED;
    ck_assert_int_eq(state_live_sync(&s, e[i]), 0);
  }
  int64_t want = 0;
  for (int i = 0; i < N; i++) want += e[i]->status == ES_RUNNING;
  ck_assert_int_eq(s.nlive, want);
  /* End every other running one, twice (a second sync changes nothing). */
  for (int r = 0; r < 2; r++)
    for (int i = 1; i < N; i += 2)
      if (e[i]->status == ES_RUNNING || r) {
        e[i]->status = ES_CANCELLED;
        ck_assert_int_eq(state_live_sync(&s, e[i]), 0);
      }
  /* One comes back (an extend): live again. */
  e[1]->status = ES_RUNNING;
  ck_assert_int_eq(state_live_sync(&s, e[1]), 0);
  ck_assert_int_eq(state_live_sync(&s, e[1]), 0);
  for (int pass = 0; pass < 2; pass++) {
    want = 0;
    for (int i = 0; i < N; i++) {
      int live = e[i]->status == ES_RUNNING;
      want += live;
      ck_assert_int_eq(e[i]->live_pos != 0, live);
      if (live) ck_assert_ptr_eq(s.live[e[i]->live_pos - 1], e[i]);
    }
    ck_assert_int_eq(s.nlive, want);
    ck_assert_int_eq(state_live_rebuild(&s), 0); /* the second pass checks it */
  }
  state_live_free(&s);
  for (int i = 0; i < N; i++) free(e[i]);
}
END_TEST

int main(void) {
  Suite *su = suite_create("fair");
  TCase *tc = tcase_create("fair");
  tcase_add_test(tc, priority_default_and_order);
  tcase_add_test(tc, pick_order_is_sorted);
  tcase_add_test(tc, two_experiments_share);
  tcase_add_test(tc, live_list_follows_status);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
