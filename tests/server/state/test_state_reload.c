/* The model from SQLite, and the change feed, in-process
 * (server/state/state_load.c, events.c): state_reload (the commit thread's
 * repair after a refused write) and a fresh state_load of the same file (a
 * restart) rebuild the same experiments, trials, statuses, counts, workers
 * and live list; state_repair finishes what a crash between the writes of an
 * older version left half done; events_note / events_read keep ids strictly
 * increasing and tell a reader to start over when its position is older than
 * the ring or newer than the newest id. The e2e counterparts:
 * tests/server/e2e/test_crash.py, test_store.py, test_pages_events.py. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "harness.h"
#include "workers.h"

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

/* Experiments in every status, trials in every live status, a requeued
 * trial with a second attempt, a deregistered worker, a patched one. */
static void build_mixed_model(void) {
  struct srv_worker *w = h_worker(&H, "w", 8, 1, 16000);
  struct srv_worker *gone = h_worker(&H, "gone", 2, 0, 0);
  struct srv_experiment *a =
      submit("a", 5, ", \"resources_per_trial\": {\"cpu\": 1, \"memory_mb\": 500}");
  struct srv_trial *a0 = h_lease(&H, w);
  h_result(&H, a0, 1, "{\"training_iteration\":1,\"loss\":0.5}");
  h_complete(&H, a0);
  struct srv_trial *a1 = h_lease(&H, w);
  h_result(&H, a1, 1, "{\"training_iteration\":1,\"loss\":0.4}");
  struct srv_trial *a2 = h_lease(&H, gone);
  ck_assert_int_eq(workers_deregister(S, gone, &ticket), 0); /* a2: PENDING, attempt 1 */
  ck_assert_int_eq(a2->status, TS_PENDING);
  struct srv_experiment *b = submit("b", 1, "");
  h_complete(&H, h_lease(&H, w));
  ck_assert_int_eq(b->status, ES_TERMINATED);
  struct srv_experiment *c = submit("c", 2, "");
  h_lease(&H, w);
  ck_assert_int_eq(h_cancel(&H, c, "user"), 1);
  struct srv_experiment *d = submit("d", 2, "");
  struct srv_trial *d0 = h_lease(&H, w);
  ck_assert_int_eq(d0->experiment_id, d->id);
  ck_assert_int_eq(control_pause(S, d, &ticket), 0);
  struct srv_experiment *e = submit("e", 3, ", \"max_concurrent_trials\": 1");
  char field[64], err[256];
  struct control_patch p = {.has_priority = 1,
                            .priority = 2,
                            .has_notes = 1,
                            .notes = "n",
                            .has_tags = 1,
                            .tags = "[\"x\"]",
                            .has_max_concurrent = 1,
                            .max_concurrent = 2};
  ck_assert_int_eq(control_patch(S, e, &p, field, sizeof field, err, sizeof err, &ticket), 0);
  struct srv_trial *e0 = h_lease(&H, w);
  ck_assert_int_eq(e0->experiment_id, e->id);
  /* a2 again, on w: attempt 2 */
  struct srv_trial *again = NULL;
  while ((again = h_lease(&H, w)) && again != a2) {
  }
  ck_assert_ptr_eq(again, a2);
  ck_assert_int_eq(a2->attempt, 2);
  /* One released (PENDING again, attempt kept), and d's running trial
   * told to pause at a heartbeat, then released: PAUSED. */
  struct srv_trial *a3 = h_lease(&H, w);
  ck_assert_int_eq(a3->experiment_id, a->id);
  ck_assert_int_eq(state_trial_event(S, a3, TE_REQUEUE, NULL, &ticket), 0);
  ck_assert_int_eq(a3->status, TS_PENDING);
  h_heartbeat(&H, w, &d0, 1);
  ck_assert_int_eq(state_trial_event(S, d0, TE_REQUEUE, NULL, &ticket), 0);
  ck_assert_int_eq(d0->status, TS_PAUSED);
  ck_assert_int_eq(a->counts[TS_RUNNING], 2);
  ck_assert_int_eq(a1->status, TS_RUNNING);
  h_sync(&H);
}

/* Rule: state_reload (the model again from the store, lock held, commit
 * thread running) gives back the same model, and the change counter never
 * goes back. */
START_TEST(reload_gives_the_same_model) {
  build_mixed_model();
  char *before = h_snapshot(&H);
  if (getenv("STATE_TEST_SHOW")) fputs(before, stderr);
  int64_t seq = S->seq;
  char err[512] = "";
  ck_assert_msg(state_reload(S, err, sizeof err) == 0, "state_reload: %s", err);
  h_sync(&H);
  ck_assert_int_ge(S->seq, seq);
  char *after = h_snapshot(&H);
  ck_assert_str_eq(after, before);
  /* And it goes on working: a lease from the reloaded model. */
  struct srv_trial *t = h_lease(&H, server_worker(S, 1));
  ck_assert_ptr_nonnull(t);
  free(before);
  free(after);
}
END_TEST

/* Rule: a restart (a fresh state_load of the same file) gives back the same
 * model: RUNNING trials keep their leases and their workers are charged
 * for them again. */
START_TEST(restart_gives_the_same_model) {
  build_mixed_model();
  char *before = h_snapshot(&H);
  int64_t seq = S->seq;
  h_restart(&H);
  ck_assert_int_ge(S->seq, seq);
  char *after = h_snapshot(&H);
  ck_assert_str_eq(after, before);
  /* Twice: what the first restart wrote back changes nothing. */
  h_restart(&H);
  char *again = h_snapshot(&H);
  ck_assert_str_eq(again, before);
  free(before);
  free(after);
  free(again);
}
END_TEST

static int sa_has(const cJSON *sa, const char *key, int want) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(sa, key);
  return want ? cJSON_IsTrue(v) : v == NULL;
}

/* The searcher options of experiment id: in its stored config text (what
 * GET /experiments/{id} shows) and in its spec (what its searcher runs). */
static void check_tpe_options(int64_t id, int written) {
  struct srv_experiment *e = server_experiment(S, id);
  ck_assert_ptr_nonnull(e);
  cJSON *cfg = cJSON_Parse(e->config);
  ck_assert_ptr_nonnull(cfg);
  const cJSON *sa = cJSON_GetObjectItemCaseSensitive(cfg, "search_alg");
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(sa, "type")->valuestring, "tpe");
  ck_assert_msg(sa_has(sa, "multivariate", written) && sa_has(sa, "constant_liar", written),
                "experiment %lld stored %s", (long long)id, e->config);
  ck_assert(cJSON_Compare(sa, e->spec.search_alg, 1));
  cJSON_Delete(cfg);
}

/* Rule: a new tpe experiment is stored with the searcher defaults in force
 * written into its config (multivariate, constant_liar: true), and keeps
 * them across a restart; a config stored before (without those fields) is
 * loaded as it is, so its searcher runs the old defaults (absent: false,
 * tests/server/unit test_tpe.c and test_searcher.c show the replay). */
START_TEST(tpe_defaults_are_stored_old_configs_keep_theirs) {
  char buf[1024];
  const char *tpe =
      ", \"metric\": \"loss\", \"mode\": \"min\", \"search_alg\": {\"type\": \"tpe\"}";
  int64_t a = h_submit(&H, h_cfg(buf, sizeof buf, "new", 4, tpe))->id;
  int64_t b = h_submit(&H, h_cfg(buf, sizeof buf, "old", 4, tpe))->id;
  check_tpe_options(a, 1);
  check_tpe_options(b, 1);
  /* Given explicitly, a value stays. */
  const char *off = ", \"metric\": \"loss\", \"mode\": \"min\","
                    " \"search_alg\": {\"type\": \"tpe\", \"multivariate\": false}";
  struct srv_experiment *c = h_submit(&H, h_cfg(buf, sizeof buf, "off", 4, off));
  ck_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c->spec.search_alg, "multivariate")));
  h_sync(&H);
  /* b as an older server stored it. */
  h_stop_only(&H);
  char sql[1024];
  snprintf(sql, sizeof sql, "UPDATE experiments SET config='%s' WHERE id=%lld",
           h_cfg(buf, sizeof buf, "old", 4, tpe), (long long)b);
  h_sql(&H, sql);
  h_start_only(&H);
  check_tpe_options(a, 1);
  check_tpe_options(b, 0);
  h_restart(&H);
  check_tpe_options(b, 0);
}
END_TEST

/* Rule: state_repair ends TERMINATED an experiment left RUNNING whose
 * trials all ended (its end lost in a crash), at its last trial's end, and
 * persists it; it finishes a cancel whose trials' ends were lost. */
START_TEST(repair_finishes_half_done_changes) {
  struct srv_experiment *e = submit("r", 2, "");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *t0 = h_lease(&H, w), *t1 = h_lease(&H, w);
  h_complete(&H, t0);
  fake_clock_set_ms(T0 + 7000);
  h_complete(&H, t1);
  double last_end = t1->ended_at;
  ck_assert_int_eq(e->status, ES_TERMINATED);
  struct srv_experiment *c = submit("c", 1, "");
  struct srv_trial *ct = h_lease(&H, w);
  ck_assert_int_eq(h_cancel(&H, c, "user"), 1);
  int64_t eid = e->id, cid = c->id, ctid = ct->id;
  h_stop_only(&H);
  /* What a crash between the writes of an older version could leave. */
  h_sql(&H, "UPDATE experiments SET status='RUNNING', ended_at=NULL WHERE id=1");
  char sql[256];
  snprintf(sql, sizeof sql,
           "UPDATE trials SET status='RUNNING', worker_id=1, ended_at=NULL "
           "WHERE id=%lld",
           (long long)ctid);
  h_sql(&H, sql);
  fake_clock_set_ms(T0 + 60000);
  h_start_only(&H); /* state_load, then state_repair, as main.c */
  e = server_experiment(S, eid);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert(e->ended_at == last_end);
  ck_assert_int_eq(e->live_pos, 0);
  ck_assert_int_eq(S->nlive, 0);
  c = server_experiment(S, cid);
  ck_assert_int_eq(c->status, ES_CANCELLED);
  ck_assert_int_eq(c->counts[TS_TERMINATED], 1);
  ck_assert_int_eq(c->counts[TS_RUNNING], 0);
  ck_assert_int_eq(server_trial(S, ctid)->status, TS_TERMINATED);
  ck_assert_int_eq(server_worker(S, 1)->nrunning, 0);
  /* Persisted: a second start has nothing to repair. */
  h_restart(&H);
  ck_assert_int_eq(server_experiment(S, eid)->status, ES_TERMINATED);
  ck_assert(server_experiment(S, eid)->ended_at == last_end);
  ck_assert_int_eq(state_trial_ref(S, ctid)->status, TS_TERMINATED);
}
END_TEST

/* Rule: state_repair on the live model too (what state_reload runs after
 * a refused write): a RUNNING experiment with every trial ended ends. */
START_TEST(repair_in_memory) {
  struct srv_experiment *e = submit("r", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  h_complete(&H, h_lease(&H, w));
  e->status = ES_RUNNING; /* as a lost write would leave it */
  ck_assert_int_eq(state_live_sync(S, e), 0);
  ck_assert_int_eq(state_repair(S), 0);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert_int_eq(e->live_pos, 0);
  ck_assert_int_eq(state_repair(S), 0); /* nothing left */
}
END_TEST

static int read_all(int64_t *pos, struct event *out, int max, int *reset) {
  int n = events_read(S->events, pos, out, max, reset);
  ck_assert_int_ge(n, 0);
  return n;
}

static void free_events(struct event *ev, int n) {
  for (int i = 0; i < n; i++) free(ev[i].json);
}

/* Rule: every persisted change is noted in the feed in order (experiment,
 * worker, trial, result with its JSON copied), with strictly increasing ids;
 * a reader gets what is after its position, at most max at a time, and its
 * position moves to the last one read. */
START_TEST(events_note_and_read) {
  int64_t pos = events_last(S->events);
  struct event ev[16];
  int reset = -1;
  ck_assert_int_eq(read_all(&pos, ev, 16, &reset), 0);
  ck_assert_int_eq(reset, 0);
  struct srv_experiment *e = submit("ev", 1, "");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  h_result(&H, t, 1, "{\"loss\":1}");
  int n = read_all(&pos, ev, 16, &reset);
  ck_assert_int_eq(reset, 0);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(ev[0].kind, EV_EXPERIMENT);
  ck_assert_int_eq(ev[0].obj, e->id);
  ck_assert_int_eq(ev[1].kind, EV_WORKER);
  ck_assert_int_eq(ev[1].obj, w->id);
  ck_assert_int_eq(ev[2].kind, EV_TRIAL);
  ck_assert_int_eq(ev[2].obj, t->id);
  ck_assert_int_eq(ev[3].kind, EV_RESULT);
  ck_assert_int_eq(ev[3].obj, t->id);
  ck_assert_int_eq(ev[3].rseq, t->last_seq);
  ck_assert_str_eq(ev[3].json, "{\"loss\":1}");
  for (int i = 1; i < n; i++) ck_assert_int_gt(ev[i].id, ev[i - 1].id);
  ck_assert_int_eq(pos, ev[n - 1].id);
  ck_assert_int_eq(pos, events_last(S->events));
  free_events(ev, n);
  ck_assert_int_eq(read_all(&pos, ev, 16, &reset), 0);
  /* Two notes under one change number still get distinct, increasing ids. */
  int64_t last = events_last(S->events);
  events_note(S, EV_WORKER, 1, 0, NULL);
  events_note(S, EV_WORKER, 1, 0, NULL);
  events_note(S, EV_WORKER, 1, 0, NULL);
  ck_assert_int_eq(events_last(S->events), last + 3);
  /* max at a time */
  n = read_all(&pos, ev, 2, &reset);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(pos, last + 2);
  n = read_all(&pos, ev, 16, &reset);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(ev[0].id, last + 3);
}
END_TEST

/* Rule: a position newer than the newest id (a reader from before a
 * restart) or older than the ring resets the reader: nothing is copied, the
 * position moves to the newest id, and reading goes on from there. */
START_TEST(events_reset_when_out_of_the_ring) {
  struct event ev[16];
  int reset = 0;
  submit("ev", 1, "");
  int64_t last = events_last(S->events);
  int64_t pos = last + 5;
  ck_assert_int_eq(read_all(&pos, ev, 16, &reset), 0);
  ck_assert_int_eq(reset, 1);
  ck_assert_int_eq(pos, last);
  ck_assert_int_eq(read_all(&pos, ev, 16, &reset), 0);
  ck_assert_int_eq(reset, 0);
  /* Older than the ring: EVENTS_RING more notes push `old` out. */
  int64_t old = pos;
  for (int i = 0; i < EVENTS_RING + 10; i++) events_note(S, EV_TRIAL, 1, 0, NULL);
  int64_t newest = events_last(S->events);
  ck_assert_int_eq(newest, old + EVENTS_RING + 10);
  pos = old;
  ck_assert_int_eq(read_all(&pos, ev, 16, &reset), 0);
  ck_assert_int_eq(reset, 1);
  ck_assert_int_eq(pos, newest);
  /* Still in the ring: read normally. */
  pos = newest - 5;
  int n = read_all(&pos, ev, 16, &reset);
  ck_assert_int_eq(reset, 0);
  ck_assert_int_eq(n, 5);
  ck_assert_int_eq(ev[0].id, newest - 4);
  /* The oldest position the ring can resume from. */
  pos = newest - EVENTS_RING;
  n = read_all(&pos, ev, 16, &reset);
  ck_assert_int_eq(reset, 0);
  ck_assert_int_eq(n, 16);
  ck_assert_int_eq(ev[0].id, newest - EVENTS_RING + 1);
  pos = newest - EVENTS_RING - 1;
  ck_assert_int_eq(read_all(&pos, ev, 16, &reset), 0);
  ck_assert_int_eq(reset, 1);
}
END_TEST

/* Rule: after a restart the feed begins at the loaded change counter: a
 * position from the old process past it resets, one at it reads on. */
START_TEST(events_after_restart) {
  submit("ev", 1, "");
  h_worker(&H, "w", 1, 0, 0);
  h_restart(&H);
  int64_t begin = events_last(S->events);
  ck_assert_int_eq(begin, S->seq);
  struct event ev[4];
  int reset = 0;
  int64_t pos = begin + 1;
  ck_assert_int_eq(read_all(&pos, ev, 4, &reset), 0);
  ck_assert_int_eq(reset, 1);
  ck_assert_int_eq(pos, begin);
  submit("ev2", 1, "");
  int n = read_all(&pos, ev, 4, &reset);
  ck_assert_int_eq(reset, 0);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(ev[0].kind, EV_EXPERIMENT);
  ck_assert_int_gt(ev[0].id, begin);
}
END_TEST

/* Every id the feed handed out stays used after a restart: a note that took
 * a number past the change counter (a worker's registration, the second note
 * of one change) moves the counter, which is persisted with the change. */
START_TEST(event_ids_never_repeat_across_restart) {
  submit("ev", 1, "");
  h_worker(&H, "w", 1, 0, 0); /* the worker row carries no change number */
  int64_t handed = events_last(S->events);
  h_restart(&H);
  ck_assert_int_ge(S->seq, handed);
  int64_t pos = events_last(S->events);
  submit("ev2", 1, "");
  struct event ev[4];
  int reset = 0;
  ck_assert_int_eq(read_all(&pos, ev, 4, &reset), 1);
  ck_assert_int_gt(ev[0].id, handed);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_reload");
  TCase *tc = tcase_create("reload");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, reload_gives_the_same_model);
  tcase_add_test(tc, restart_gives_the_same_model);
  tcase_add_test(tc, tpe_defaults_are_stored_old_configs_keep_theirs);
  tcase_add_test(tc, repair_finishes_half_done_changes);
  tcase_add_test(tc, repair_in_memory);
  suite_add_tcase(s, tc);
  TCase *ev = tcase_create("events");
  tcase_add_checked_fixture(ev, setup, teardown);
  tcase_add_test(ev, events_note_and_read);
  tcase_add_test(ev, events_reset_when_out_of_the_ring);
  tcase_add_test(ev, events_after_restart);
  tcase_add_test(ev, event_ids_never_repeat_across_restart);
  suite_add_tcase(s, ev);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
