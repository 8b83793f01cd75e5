/* Decisions, in-process, through the real schedulers (server/core) and the
 * state layer's decide.c: a result's outcome from sched_on_result, then the
 * stop rules and the time budget (decide_override), pause and exploit
 * carried out at the lease's end (decide_apply, decide_lease_end), a paused
 * trial promoted by the lease path (decide_choose -> TE_RESUME), and the end
 * of the experiment (EE_MAYBE_END, decide_maybe_end, decide_tick). Small
 * configs; the numbers mirror the e2e scripts tests/server/e2e/
 * test_decide.py, test_api.py (the ASHA worked example), test_promo.py,
 * test_pbt.py (PBT, median stopping). Time is the fake clock's. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
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
  char buf[2048];
  return h_submit(&H, h_cfg(buf, sizeof buf, name, n, extra));
}

/* One result {"training_iteration": it, key: v} at time value it. */
static char result(struct srv_trial *t, const char *key, double it, double v) {
  char j[160];
  snprintf(j, sizeof j, "{\"training_iteration\":%g,\"%s\":%.17g}", it, key, v);
  return h_result(&H, t, it, j);
}

/* The trial's decisions in SQLite, "kind|reason" a line each (its
 * attempts, the other rows, are test_state_results' subject). */
static void events_are(const struct srv_trial *t, const char *want) {
  char sql[256];
  h_sync(&H);
  snprintf(sql, sizeof sql,
           "SELECT kind, reason FROM trial_events WHERE trial_id=%lld AND kind NOT IN "
           "('leased', 'lease_lost', 'released', 'failed') ORDER BY seq",
           (long long)t->id);
  char *got = h_query(&H, sql);
  ck_assert_str_eq(got, want);
  free(got);
}

#define LOSS ", \"metric\": \"loss\", \"mode\": \"min\""

/* ---- ASHA (stopping) -------------------------------------------------- */

/* Rule (test_decide.py test_asha_stop_has_reason): ASHA judges a trial only
 * at its rungs (none before grace_period), and stops one worse than the
 * rung's cutoff (the top 1/reduction_factor): stopped_early, with the
 * reason and a "stopped" event, in SQLite. */
START_TEST(asha_stops_below_the_cutoff) {
  struct srv_experiment *e =
      submit("a", 3,
             LOSS ", \"scheduler\": {\"type\": \"asha\", "
                  "\"max_t\": 10, \"grace_period\": 4, \"reduction_factor\": 2}");
  struct srv_worker *w = h_worker(&H, "w", 8, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w), *c = h_lease(&H, w);
  for (int it = 1; it < 4; it++) ck_assert_int_eq(result(c, "loss", it, 9.0), 'c'); /* grace */
  ck_assert_int_eq(result(a, "loss", 4, 0.39), 'c');
  ck_assert_int_eq(result(b, "loss", 4, 0.30), 'c');
  ck_assert_int_eq(result(c, "loss", 4, 0.41), 's');
  ck_assert_int_eq(c->status, TS_TERMINATED);
  ck_assert_int_eq(c->stopped_early, 1);
  const char *why = "stopped at t=4: 0.41 worse than cutoff 0.345 of 3 trials at rung 4";
  ck_assert_str_eq(c->reason, why);
  ck_assert_uint_eq(c->nres, 4); /* the result that stopped it is kept */
  ck_assert_int_eq(w->nrunning, 2);
  ck_assert_int_eq(e->status, ES_RUNNING);
  char want[256];
  snprintf(want, sizeof want, "stopped|%s\n", why);
  events_are(c, want);
  events_are(a, "");
  char *rec = h_query(&H, "SELECT trial_id, milestone FROM asha_records ORDER BY seq");
  ck_assert_str_eq(rec, "1|4.0\n2|4.0\n3|4.0\n");
  free(rec);
}
END_TEST

/* Rule: a trial that reaches max_t is stopped there, not early, with
 * "reached max_t"; the last trial's stop ends the experiment. */
START_TEST(asha_max_t_stops_at_the_end) {
  struct srv_experiment *e =
      submit("a", 1,
             LOSS ", \"scheduler\": {\"type\": \"asha\", "
                  "\"max_t\": 10, \"grace_period\": 4, \"reduction_factor\": 2}");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_int_eq(result(t, "loss", 4, 0.5), 'c');
  ck_assert_int_eq(result(t, "loss", 9, 0.4), 'c');
  ck_assert_int_eq(result(t, "loss", 10, 0.3), 's');
  ck_assert_int_eq(t->status, TS_TERMINATED);
  ck_assert_int_eq(t->stopped_early, 0);
  ck_assert_str_eq(t->reason, "reached max_t 10 (training_iteration 10)");
  ck_assert_int_eq(e->status, ES_TERMINATED);
  events_are(t, "stopped|reached max_t 10 (training_iteration 10)\n");
}
END_TEST

/* Rule (docs/scheduling.md#several-objectives): with several objectives
 * ASHA ranks a rung by non-dominated sorting and stops a trial placed past
 * the top 1/reduction_factor, saying where it ranked; the rung's vectors
 * are sched_records rows, so a restart ranks the next trial among them; a
 * result without every objective is not ranked. */
START_TEST(moasha_ranks_by_fronts_and_replays) {
  struct srv_experiment *e =
      submit("mo", 4,
             ", \"metric\": [\"loss\", \"size\"], \"mode\": [\"min\", \"min\"], "
             "\"scheduler\": {\"type\": \"asha\", \"max_t\": 10, \"grace_period\": 4, "
             "\"reduction_factor\": 2}");
  struct srv_worker *w = h_worker(&H, "w", 8, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w), *c = h_lease(&H, w),
                   *d = h_lease(&H, w);
  ck_assert_int_eq(h_result(&H, a, 4, "{\"training_iteration\":4,\"loss\":0.3,\"size\":3}"), 'c');
  ck_assert_int_eq(h_result(&H, b, 4, "{\"training_iteration\":4,\"loss\":0.5,\"size\":1}"), 'c');
  int64_t eid = e->id, cid = c->id, did = d->id;
  h_restart(&H);
  e = server_experiment(S, eid);
  c = server_trial(S, cid);
  d = server_trial(S, did);
  /* Dominated by b: the second front, third of three; the top half is 2. */
  ck_assert_int_eq(h_result(&H, c, 4, "{\"training_iteration\":4,\"loss\":0.6,\"size\":4}"), 's');
  const char *why = "stopped at t=4: front 2 of 2 at rung 4, 3 of 3 trials in non-dominated "
                    "order (epsilon-net within a front); only the first 2 continue";
  ck_assert_str_eq(c->reason, why);
  ck_assert_int_eq(c->stopped_early, 1);
  char want[300];
  snprintf(want, sizeof want, "stopped|%s\n", why);
  events_are(c, want);
  /* Without size: not ranked (nothing recorded); then first of four. */
  ck_assert_int_eq(h_result(&H, d, 4, "{\"training_iteration\":4,\"loss\":0.1}"), 'c');
  ck_assert_int_eq(h_result(&H, d, 5, "{\"training_iteration\":5,\"loss\":0.1,\"size\":0.5}"), 'c');
  h_sync(&H);
  char *rec = h_query(&H, "SELECT trial_id, record FROM sched_records ORDER BY seq");
  ck_assert_str_eq(rec, "1|{\"asha_mo\":{\"bracket\":0,\"milestone\":4,\"stopped\":false,"
                        "\"values\":[0.3,3]}}\n"
                        "2|{\"asha_mo\":{\"bracket\":0,\"milestone\":4,\"stopped\":false,"
                        "\"values\":[0.5,1]}}\n"
                        "3|{\"asha_mo\":{\"bracket\":0,\"milestone\":4,\"stopped\":true,"
                        "\"values\":[0.6,4]}}\n"
                        "4|{\"asha_mo\":{\"bracket\":0,\"milestone\":4,\"stopped\":false,"
                        "\"values\":[0.1,0.5]}}\n");
  free(rec);
  rec = h_query(&H, "SELECT count(*) FROM asha_records");
  ck_assert_str_eq(rec, "0\n");
  free(rec);
}
END_TEST

/* ---- ASHA with promotion: pause, promote, resume ---------------------- */

/* Rule (test_promo.py): a trial reaching a rung is answered stop and pauses
 * when its lease ends (TE_PAUSE: PAUSED, resources back); the pause due is
 * stored (a restart keeps it, and the stop decision replays); the lease
 * path promotes the top 1/eta (decide_choose -> TE_RESUME: PENDING, a new
 * generation, leased again); the others end with the experiment, "never
 * promoted". */
START_TEST(promotion_pauses_and_resumes) {
  struct srv_experiment *e = submit("p", 3,
                                    LOSS ", \"scheduler\": {\"type\": \"asha\", "
                                         "\"promotion\": true, \"max_t\": 3, \"grace_period\": 1, "
                                         "\"reduction_factor\": 3}");
  struct srv_worker *w = h_worker(&H, "w", 3, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w), *c = h_lease(&H, w);
  ck_assert_int_eq(result(a, "loss", 1, 0.1), 's');
  ck_assert_int_eq(a->status, TS_RUNNING);
  ck_assert_int_eq(a->lease_end_action, SCHED_PAUSE);
  ck_assert_str_eq(a->reason, "paused at rung 0 (training_iteration 1): rank 1 of 1 there");
  ck_assert_int_eq(result(b, "loss", 1, 0.5), 's');
  /* The pause due survives a restart; the stop replays from the history. */
  int64_t eid = e->id, aid = a->id, bid = b->id, cid = c->id;
  h_restart(&H);
  e = server_experiment(S, eid);
  a = server_trial(S, aid);
  b = server_trial(S, bid);
  c = server_trial(S, cid);
  w = server_worker(S, 1);
  ck_assert_int_eq(a->status, TS_RUNNING);
  ck_assert_int_eq(a->lease_end_action, SCHED_PAUSE);
  char d = 0;
  struct trial_event_args ev;
  const char *j = "{\"training_iteration\":1,\"loss\":0.1}";
  double tv = 1;
  ck_assert_int_eq(h_results(&H, a, NULL, 1, &tv, &j, &d, &ev), 0);
  ck_assert_int_eq(d, 's');
  ck_assert_int_eq(ev.replayed, 1);
  /* Each lease ends: PAUSED. */
  h_complete(&H, a);
  ck_assert_int_eq(a->status, TS_PAUSED);
  ck_assert_int_eq(a->lease_end_action, 0);
  ck_assert_int_eq(a->lease_final, 1);
  ck_assert_int_eq(w->nrunning, 2);
  h_complete(&H, b);
  /* Two at the rung: its top floor(2/3) is nobody yet. */
  ck_assert_ptr_null(h_lease(&H, w));
  ck_assert_int_eq(a->status, TS_PAUSED);
  ck_assert_int_eq(result(c, "loss", 1, 0.9), 's');
  h_complete(&H, c);
  ck_assert_int_eq(e->counts[TS_PAUSED], 3);
  ck_assert_int_eq(e->status, ES_RUNNING);
  ck_assert_int_eq(w->nrunning, 0);
  /* The lease path promotes the best (top 1 of 3) and leases it. */
  ck_assert_ptr_eq(h_lease(&H, w), a);
  ck_assert_int_eq(a->status, TS_RUNNING);
  ck_assert_int_eq(a->attempt, 2);
  ck_assert_int_eq(a->generation, 1);
  ck_assert_str_eq(a->reason,
                   "promoted from rung 0 (top 1 of 3 at training_iteration 1), runs to 3");
  ck_assert_ptr_null(h_lease(&H, w)); /* b, c: not in the top */
  ck_assert_int_eq(b->status, TS_PAUSED);
  /* A new generation: t=1 again is a new result, not the stored pause. */
  ck_assert_int_eq(result(a, "loss", 1, 0.1), 'c');
  ck_assert_int_eq(result(a, "loss", 2, 0.08), 'c');
  ck_assert_int_eq(result(a, "loss", 3, 0.05), 's');
  ck_assert_str_eq(a->reason, "reached max_t 3 (training_iteration 3)");
  /* The last running trial ended: the paused ones end with the experiment. */
  ck_assert_int_eq(b->status, TS_TERMINATED);
  ck_assert_int_eq(c->status, TS_TERMINATED);
  ck_assert_str_eq(b->reason, "never promoted: the experiment ended while it was paused");
  ck_assert_int_eq(e->status, ES_TERMINATED);
  events_are(a, "paused|paused at rung 0 (training_iteration 1): rank 1 of 1 there\n"
                "promoted|promoted from rung 0 (top 1 of 3 at training_iteration 1), runs to 3\n"
                "stopped|reached max_t 3 (training_iteration 3)\n");
  events_are(b, "paused|paused at rung 0 (training_iteration 1): rank 2 of 2 there\n"
                "stopped|never promoted: the experiment ended while it was paused\n");
}
END_TEST

/* ---- PBT: exploit at the lease's end ---------------------------------- */

#define PBT_CFG                                                                                    \
  "{\"name\": \"pbt\", \"metric\": \"acc\", \"mode\": \"max\", \"num_samples\": 1, "               \
  "\"seed\": 5, \"param_space\": {\"lr\": {\"grid_search\": [0.001, 0.1]}}, "                      \
  "\"scheduler\": {\"type\": \"pbt\", \"perturbation_interval\": 2, "                              \
  "\"quantile_fraction\": 0.5, \"hyperparam_mutations\": {\"lr\": {\"type\": "                     \
  "\"loguniform\", \"lower\": 1e-5, \"upper\": 1}}}, "                                             \
  "\"trainable\": {\"type\": \"command\", \"argv\": [\"true\"]}}"

static char pbt_result(struct srv_trial *t, double it, double acc) {
  char j[160];
  snprintf(j, sizeof j, "{\"training_iteration\":%g,\"acc\":%g,\"time_total_s\":%g}", it, acc,
           10 * it);
  return h_result(&H, t, it, j);
}

/* Rule (test_pbt.py): at a perturbation point a bottom-quantile trial
 * exploits a top one that has a checkpoint: answered stop, its config
 * replaced and the donor's checkpoint (and its time_total_s) copied at
 * once, in the decision's transaction; when its lease ends (TE_EXPLOIT) it
 * is PENDING in its next generation, leased again; its later results are
 * that generation's. A restart keeps all of it. */
START_TEST(pbt_exploits_at_the_lease_end) {
  struct srv_experiment *e = h_submit(&H, PBT_CFG);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  ck_assert_ptr_nonnull(strstr(a->config, "0.001"));
  char *old_config = strdup(b->config);
  ck_assert_int_eq(pbt_result(a, 1, 0.5), 'c');
  ck_assert_int_eq(pbt_result(a, 2, 0.9), 'c');
  ck_assert_int_eq(pbt_result(b, 1, 0.1), 'c');
  ck_assert_int_eq(pbt_result(b, 2, 0.1), 'c'); /* bottom; the top has no checkpoint yet */
  ck_assert_int_eq(pbt_result(a, 3, 0.92), 'c');
  ck_assert_int_eq(pbt_result(a, 4, 0.95), 'c'); /* top: its checkpoint may be cloned */
  h_checkpoint(&H, a, 4, "donor-bytes");
  ck_assert_int_eq(pbt_result(b, 3, 0.15), 'c');
  ck_assert_int_eq(pbt_result(b, 4, 0.2), 's');
  ck_assert_int_eq(b->status, TS_RUNNING);
  ck_assert_int_eq(b->lease_end_action, SCHED_EXPLOIT);
  ck_assert_int_eq(strncmp(b->reason, "exploited trial 1 at t=4: lr 0.001 \u2192 ", 36), 0);
  ck_assert_str_ne(b->config, old_config);
  free(old_config);
  ck_assert_int_eq(b->has_checkpoint, 1);
  ck_assert_int_eq(b->checkpoint_iteration, 4);
  ck_assert_int_eq(b->has_ck_time_total, 1);
  ck_assert(b->ck_time_total_s == 40);
  ck_assert(decide_refuses_checkpoint(b));
  char *new_config = strdup(b->config);
  /* Its lease ends: PENDING from the donor's checkpoint, next generation. */
  h_complete(&H, b);
  ck_assert_int_eq(b->status, TS_PENDING);
  ck_assert_int_eq(b->generation, 1);
  ck_assert_uint_eq(b->gen_start, 4);
  ck_assert_int_eq(b->lease_final, 0);
  ck_assert_int_eq(b->lease_end_action, 0);
  ck_assert_int_eq(w->nrunning, 1);
  ck_assert_ptr_eq(h_lease(&H, w), b);
  ck_assert_int_eq(b->attempt, 2);
  /* It resumes at the donor's iteration 4: t=4 again is this generation's. */
  ck_assert_int_eq(pbt_result(b, 4, 0.9), 'c');
  ck_assert_int_eq(pbt_result(b, 5, 0.91), 'c');
  ck_assert_uint_eq(b->nres, 6);
  h_sync(&H);
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT t, gen FROM results WHERE trial_id=%lld ORDER BY seq",
           (long long)b->id);
  char *rows = h_query(&H, sql);
  ck_assert_str_eq(rows, "1.0|0\n2.0|0\n3.0|0\n4.0|0\n4.0|1\n5.0|1\n");
  free(rows);
  snprintf(sql, sizeof sql, "SELECT kind FROM trial_events WHERE trial_id=%lld AND kind<>'leased'",
           (long long)b->id);
  rows = h_query(&H, sql);
  ck_assert_str_eq(rows, "exploited\n");
  free(rows);
  int64_t it = 0;
  uint32_t crc = 0;
  void *data = NULL;
  size_t len = 0;
  ck_assert_int_eq(store_get_checkpoint(S->store, b->id, &it, &crc, &data, &len), 0);
  ck_assert_int_eq(it, 4);
  ck_assert_uint_eq(len, strlen("donor-bytes"));
  ck_assert_int_eq(memcmp(data, "donor-bytes", len), 0);
  free(data);
  int64_t bid = b->id, eid = e->id;
  h_restart(&H);
  b = server_trial(S, bid);
  ck_assert_int_eq(b->generation, 1);
  ck_assert_str_eq(b->config, new_config);
  ck_assert(b->ck_time_total_s == 40);
  ck_assert_int_eq(server_experiment(S, eid)->status, ES_RUNNING);
  free(new_config);
}
END_TEST

/* Rule (docs/scheduling.md#stop-rules): the stop rules come before the
 * scheduler, as Ray's controller asks its stopper first. The result where
 * trial b reaches `stop` is one where PBT would exploit it (bottom quantile,
 * the donor has its checkpoint): b ends TERMINATED by the stop rule, its
 * config and checkpoint its own, and the scheduler never ranked that result
 * (no exploit, no record, no perturbation). */
START_TEST(pbt_stop_rule_before_the_scheduler) {
  char cfg[1024];
  snprintf(cfg, sizeof cfg, "%.*s, \"stop\": {\"epochs_done\": 1}}", (int)strlen(PBT_CFG) - 1,
           PBT_CFG);
  struct srv_experiment *e = h_submit(&H, cfg);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  char *old_config = strdup(b->config);
  ck_assert_int_eq(pbt_result(a, 1, 0.5), 'c');
  ck_assert_int_eq(pbt_result(a, 2, 0.9), 'c');
  ck_assert_int_eq(pbt_result(b, 1, 0.1), 'c');
  ck_assert_int_eq(pbt_result(b, 2, 0.1), 'c');
  ck_assert_int_eq(pbt_result(a, 3, 0.92), 'c');
  ck_assert_int_eq(pbt_result(a, 4, 0.95), 'c');
  h_checkpoint(&H, a, 4, "donor-bytes");
  h_checkpoint(&H, b, 2, "own-bytes");
  ck_assert_int_eq(pbt_result(b, 3, 0.15), 'c');
  ck_assert_int_eq(
      h_result(&H, b, 4,
               "{\"training_iteration\":4,\"acc\":0.2,\"time_total_s\":40,\"epochs_done\":1}"),
      's');
  ck_assert_int_eq(b->status, TS_TERMINATED);
  ck_assert_int_eq(b->lease_end_action, 0);
  ck_assert_int_eq(b->stopped_early, 0);
  ck_assert_str_eq(b->reason, "stop rule: epochs_done 1 >= 1");
  ck_assert_str_eq(b->config, old_config);
  ck_assert_int_eq(b->checkpoint_iteration, 2);
  ck_assert_int_eq(b->generation, 0);
  free(old_config);
  events_are(b, "stop_rule|stop rule: epochs_done 1 >= 1\n");
  cJSON *st = NULL;
  ck_assert_int_eq(sched_state_json(e->sched, &st), 0);
  ck_assert_int_eq(cJSON_GetObjectItem(st, "perturbations")->valueint, 0);
  cJSON_Delete(st);
}
END_TEST

/* ---- median stopping --------------------------------------------------- */

/* Rule (test_pbt.py test_median_stopping): a trial whose best result is
 * worse than the median of the others' running averages at the same time
 * is stopped (hard_stop), early, with the reason; only with
 * min_samples_required others; the others' records survive a restart. */
START_TEST(median_stopping_stops) {
  submit("med", 4,
         LOSS ", \"scheduler\": {\"type\": \"median_stopping\", "
              "\"grace_period\": 1, \"min_samples_required\": 3, \"hard_stop\": true}");
  struct srv_worker *w = h_worker(&H, "w", 8, 0, 0);
  struct srv_trial *t[4];
  for (int k = 0; k < 4; k++) t[k] = h_lease(&H, w);
  for (int it = 1; it <= 2; it++)
    for (int k = 0; k < 3; k++) ck_assert_int_eq(result(t[k], "loss", it, (k + 1.0) / it), 'c');
  int64_t id3 = t[3]->id;
  h_restart(&H);
  struct srv_trial *d = server_trial(S, id3);
  ck_assert_int_eq(result(d, "loss", 1, 1.9), 'c');
  ck_assert_int_eq(result(d, "loss", 2, 1.8), 's');
  ck_assert_int_eq(d->status, TS_TERMINATED);
  ck_assert_int_eq(d->stopped_early, 1);
  ck_assert_str_eq(d->reason, "stopped at t=2: best 1.8 worse than median 1.5 of 3 trials' "
                              "running averages");
  events_are(d, "stopped|stopped at t=2: best 1.8 worse than median 1.5 of 3 trials' running "
                "averages\n");
}
END_TEST

/* ---- stop rules and the time budget ------------------------------------ */

/* Rule (test_decide.py): a stop rule ({metric: threshold}) ends the trial
 * at the result that reaches it: TERMINATED, not early, the result kept,
 * a "stop_rule" event; its experiment ends with it. */
START_TEST(stop_rule_ends_the_trial) {
  struct srv_experiment *e = submit("sr", 1,
                                    ", \"metric\": \"acc\", \"mode\": \"max\", "
                                    "\"stop\": {\"training_iteration\": 20, \"acc\": 0.95}");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  struct srv_trial *t = h_lease(&H, w);
  ck_assert_int_eq(result(t, "acc", 1, 0.5), 'c');
  ck_assert_int_eq(result(t, "acc", 2, 0.951), 's');
  ck_assert_int_eq(t->status, TS_TERMINATED);
  ck_assert_int_eq(t->stopped_early, 0);
  ck_assert_str_eq(t->reason, "stop rule: acc 0.951 >= 0.95");
  ck_assert_uint_eq(t->nres, 2);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  events_are(t, "stop_rule|stop rule: acc 0.951 >= 0.95\n");
}
END_TEST

/* Rule (test_decide.py): time_budget_s counts the ticks' time (decide_tick,
 * to the millisecond); once spent, PENDING trials end, nothing is made or
 * leased, a running trial is stopped at its next result (kept, not early),
 * and the experiment ends with end_reason "time_budget_s S spent" once
 * nothing runs. */
START_TEST(time_budget_spent_ends_the_experiment) {
  struct srv_experiment *e = submit("tb", 3, LOSS ", \"time_budget_s\": 1.5");
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  ck_assert_int_eq(decide_tick(S, T0, &ticket), 0); /* its clock starts */
  struct lease_token l = {w->id, 1};
  struct trial_event_args r = {.lease = &l};
  ck_assert_int_eq(state_trial_event(S, b, TE_RELEASE, &r, &ticket), 0);
  ck_assert_int_eq(result(a, "loss", 1, 1.0), 'c');
  fake_clock_set_ms(T0 + 1499);
  ck_assert_int_eq(decide_tick(S, T0 + 1499, &ticket), 0);
  ck_assert_int_eq(e->budget_spent, 0);
  ck_assert_int_eq(b->status, TS_PENDING);
  fake_clock_set_ms(T0 + 1500);
  ck_assert_int_eq(decide_tick(S, T0 + 1500, &ticket), 0);
  ck_assert_int_eq(e->budget_spent, 1);
  ck_assert_int_eq(b->status, TS_TERMINATED);
  ck_assert_str_eq(b->reason, "time_budget_s 1.5 spent");
  ck_assert_int_eq(a->status, TS_RUNNING);
  ck_assert_int_eq(e->status, ES_RUNNING); /* a still runs */
  ck_assert_ptr_null(h_lease(&H, w));
  ck_assert_int_eq(e->ntrials, 2);
  fake_clock_set_ms(T0 + 2000);
  ck_assert_int_eq(decide_tick(S, T0 + 2000, &ticket), 0);
  ck_assert_int_eq(e->status, ES_RUNNING);
  ck_assert_int_eq(result(a, "loss", 2, 0.9), 's');
  ck_assert_int_eq(a->status, TS_TERMINATED);
  ck_assert_int_eq(a->stopped_early, 0);
  ck_assert_str_eq(a->reason, "time_budget_s 1.5 spent");
  ck_assert_uint_eq(a->nres, 2);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert_str_eq(e->end_reason, "time_budget_s 1.5 spent");
  events_are(a, "time_budget|time_budget_s 1.5 spent\n");
  h_restart(&H);
  e = server_experiment(S, 1);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert(e->run_time_s >= 1.5);
}
END_TEST

/* Rule: a budget spent while nothing runs ends the experiment on the tick
 * itself (decide_tick's EE_MAYBE_END), its plan unfinished. */
START_TEST(time_budget_ends_an_idle_experiment_on_the_tick) {
  struct srv_experiment *e = submit("tb", 2, LOSS ", \"time_budget_s\": 1.5");
  struct srv_worker *w = h_worker(&H, "w", 1, 0, 0);
  ck_assert_int_eq(decide_tick(S, T0, &ticket), 0);
  h_complete(&H, h_lease(&H, w));
  ck_assert_int_eq(e->status, ES_RUNNING); /* one more is planned */
  fake_clock_set_ms(T0 + 1500);
  ck_assert_int_eq(decide_tick(S, T0 + 1500, &ticket), 0);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert_str_eq(e->end_reason, "time_budget_s 1.5 spent");
  ck_assert_int_eq(e->ntrials, 1);
}
END_TEST

/* ---- the end of an experiment ------------------------------------------ */

/* Rule: an experiment ends (EE_MAYBE_END) when every planned trial was made
 * and has ended, TERMINATED or ERROR, whichever event ends the last. */
START_TEST(experiment_ends_with_its_last_trial) {
  struct srv_experiment *e = submit("end", 2, LOSS);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  h_complete(&H, a);
  ck_assert_int_eq(e->status, ES_RUNNING);
  struct lease_token l = {w->id, 1};
  struct trial_event_args f = {.lease = &l, .error = "boom"};
  ck_assert_int_eq(state_trial_event(S, b, TE_FAIL, &f, &ticket), 0);
  ck_assert_int_eq(b->status, TS_ERROR);
  ck_assert_int_eq(e->status, ES_TERMINATED);
  ck_assert_ptr_null(e->end_reason);
  ck_assert(e->ended_at > 0);
  ck_assert_ptr_null(h_lease(&H, w));
}
END_TEST

/* Rule: when the searcher runs out before the plan (state_create_trial
 * -ENOENT), the plan is the trials made: the experiment ends when those
 * have. No submitted config makes the searcher's plan smaller than the
 * experiment's (both are grid x num_samples), so the experiment's plan is
 * raised by hand here to stand for it. */
START_TEST(experiment_ends_when_the_searcher_is_exhausted) {
  struct srv_experiment *e = h_submit(
      &H, "{\"name\": \"g\", \"num_samples\": 1, \"seed\": 7, \"metric\": \"loss\", \"mode\": "
          "\"min\", \"param_space\": {\"lr\": {\"grid_search\": [0.01, 0.1]}}, "
          "\"trainable\": {\"type\": \"command\", \"argv\": [\"true\"]}}");
  ck_assert_int_eq(e->num_trials, 2);
  e->num_trials = 3;
  struct srv_worker *w = h_worker(&H, "w", 3, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  ck_assert_ptr_null(h_lease(&H, w));
  ck_assert_int_eq(e->searcher_exhausted, 1);
  ck_assert_int_eq(e->ntrials, 2);
  ck_assert_int_eq(e->status, ES_RUNNING);
  h_complete(&H, a);
  ck_assert_int_eq(e->status, ES_RUNNING);
  h_complete(&H, b);
  ck_assert_int_eq(e->status, ES_TERMINATED);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("state_decide");
  TCase *sched = tcase_create("schedulers");
  tcase_add_checked_fixture(sched, setup, teardown);
  tcase_add_test(sched, asha_stops_below_the_cutoff);
  tcase_add_test(sched, asha_max_t_stops_at_the_end);
  tcase_add_test(sched, moasha_ranks_by_fronts_and_replays);
  tcase_add_test(sched, promotion_pauses_and_resumes);
  tcase_add_test(sched, pbt_exploits_at_the_lease_end);
  tcase_add_test(sched, pbt_stop_rule_before_the_scheduler);
  tcase_add_test(sched, median_stopping_stops);
  suite_add_tcase(s, sched);
  TCase *rules = tcase_create("rules");
  tcase_add_checked_fixture(rules, setup, teardown);
  tcase_add_test(rules, stop_rule_ends_the_trial);
  tcase_add_test(rules, time_budget_spent_ends_the_experiment);
  tcase_add_test(rules, time_budget_ends_an_idle_experiment_on_the_tick);
  tcase_add_test(rules, experiment_ends_with_its_last_trial);
  tcase_add_test(rules, experiment_ends_when_the_searcher_is_exhausted);
  suite_add_tcase(s, rules);
  return s;
}

int main(void) {
  SRunner *r = srunner_create(suite());
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
