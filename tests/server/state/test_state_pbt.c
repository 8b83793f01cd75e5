/* PBT in-process with the uploads of a real worker: a result reaches the
 * server before the checkpoint taken at it (the worker sends a checkpoint
 * once the results before it are acknowledged). A population of command
 * trainables that checkpoint every iteration must exploit as Ray's PBT
 * would: an exploit decided while the donor's checkpoint of the result it
 * was ranked at is still on its way waits for that upload (Ray waits for
 * its pending save), instead of being dropped.
 *
 * With CTUNE_PBT_STREAM=FILE each population run writes what the server saw
 * and decided (trials, results in arrival order, ends, exploits) as JSON
 * lines into FILE.lag2 / FILE.lag0;
 * check_pbt_ray.py replays them through the transcription of Ray's pbt.py
 * (tests/server/unit/gen_pbt_vectors.py) and compares every decision. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "decide.h"
#include "harness.h"
#include "store.h"

static struct harness H;
static struct server *S;

static void setup(void) {
  h_open(&H);
  S = &H.s;
}

static void teardown(void) { h_close(&H); }

#define NT 6
#define ITERS 27
#define QMAX 64

#define POP_CFG                                                                                    \
  "{\"name\": \"pop\", \"metric\": \"acc\", \"mode\": \"max\", \"num_samples\": 1, "               \
  "\"seed\": 11, \"param_space\": {\"lr\": {\"grid_search\": [0.0001, 0.0003, 0.001, 0.003, "      \
  "0.01, 0.03]}}, "                                                                                \
  "\"scheduler\": {\"type\": \"pbt\", \"perturbation_interval\": 3, "                              \
  "\"hyperparam_mutations\": {\"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, "                \
  "\"upper\": 0.1}}}, \"trainable\": {\"type\": \"command\", \"argv\": [\"true\"]}}"

/* One simulated trial process and its worker's upload queue. */
struct sim {
  struct srv_trial *t;
  int it;      /* last iteration trained */
  double w;    /* the model: what the checkpoint holds */
  double lr;   /* from the config of its lease */
  int running; /* leased and training */
  int done;
  int q_it[QMAX]; /* checkpoints written, not uploaded yet (oldest first) */
  double q_w[QMAX];
  int nq;
  double want_iter; /* exploited: the donor's ranked iteration it must resume at */
};

static FILE *stream;

static double config_lr(const struct srv_trial *t) {
  cJSON *c = cJSON_Parse(t->config);
  ck_assert_ptr_nonnull(c);
  double lr = cJSON_GetObjectItem(c, "lr")->valuedouble;
  cJSON_Delete(c);
  return lr;
}

/* The curve: the better the lr (0.01 best), the faster acc grows. */
static double gain(double lr) { return 1.0 - fabs(lr * 100.0 - 1.0); }

static void upload_oldest(struct sim *x) {
  char data[96];
  snprintf(data, sizeof data, "%d %.17g", x->q_it[0], x->q_w[0]);
  h_checkpoint(&H, x->t, x->q_it[0], data);
  memmove(x->q_it, x->q_it + 1, (size_t)(x->nq - 1) * sizeof *x->q_it);
  memmove(x->q_w, x->q_w + 1, (size_t)(x->nq - 1) * sizeof *x->q_w);
  x->nq--;
}

/* A new lease of x's trial (after an exploit): it resumes from the stored
 * checkpoint, which must be the donor's at the iteration it was ranked. */
static void resume(struct sim *x) {
  h_sync(&H);
  int64_t it = 0;
  uint32_t crc = 0;
  void *data = NULL;
  size_t len = 0;
  ck_assert_int_eq(store_get_checkpoint(S->store, x->t->id, &it, &crc, &data, &len), 0);
  char buf[96];
  snprintf(buf, sizeof buf, "%.*s", (int)len, (const char *)data);
  free(data);
  ck_assert_int_eq(sscanf(buf, "%d %lf", &x->it, &x->w), 2);
  ck_assert_int_eq(x->it, (int)it);
  /* The one taken at it, whether the donor's upload came after the
   * decision (lagging) or the donor uploaded newer ones since (in time):
   * the server kept it for its clones (pbt_checkpoints). */
  ck_assert_msg(x->it == (int)x->want_iter,
                "trial %lld resumed at iteration %d, its donor was ranked at %g",
                (long long)x->t->id, x->it, x->want_iter);
  x->lr = config_lr(x->t);
  x->running = 1;
  x->nq = 0;
}

/* Runs the population: each round every running trial trains one
 * iteration, writes its checkpoint, then reports the result; the upload of
 * a checkpoint arrives `lag` results after the result taken with it. A
 * trial answered stop (exploited) completes; it is leased again once it is
 * PENDING (at once, or after the upload it waits for). Returns the number
 * of exploits. */
static int run_population(int lag) {
  struct srv_experiment *e = h_submit(&H, POP_CFG);
  struct srv_worker *w = h_worker(&H, "w", NT, 0, 0);
  struct sim sim[NT];
  int exploits = 0;
  memset(sim, 0, sizeof sim);
  if (stream)
    fprintf(stream,
            "{\"seed\": 11, \"mode\": \"max\", \"perturbation_interval\": 3, \"burn_in_period\": "
            "0, \"quantile_fraction\": 0.25, \"resample_probability\": 0.25, "
            "\"perturbation_factors\": [1.2, 0.8], \"hyperparam_mutations\": {\"lr\": {\"type\": "
            "\"loguniform\", \"lower\": 1e-4, \"upper\": 0.1}}}\n");
  for (int k = 0; k < NT; k++) {
    sim[k].t = h_lease(&H, w);
    ck_assert_ptr_nonnull(sim[k].t);
    sim[k].lr = config_lr(sim[k].t);
    sim[k].running = 1;
    if (stream)
      fprintf(stream, "{\"add\": %lld, \"idx\": %lld, \"config\": %s}\n", (long long)sim[k].t->id,
              (long long)sim[k].t->idx, sim[k].t->config);
  }
  for (int round = 0, left = NT; left > 0; round++) {
    ck_assert_int_lt(round, 10 * ITERS);
    /* The worker leases what is PENDING (exploited trials; a PAUSED one
     * waits for its donor's upload). */
    for (struct srv_trial *t; (t = h_lease(&H, w)) != NULL;) {
      int k = 0;
      while (k < NT && sim[k].t != t) k++;
      ck_assert_int_lt(k, NT);
      ck_assert(!sim[k].running && !sim[k].done);
      resume(&sim[k]);
    }
    for (int k = 0; k < NT; k++) {
      struct sim *x = &sim[k];
      if (x->done || !x->running) continue;
      x->it++;
      x->w += gain(x->lr);
      ck_assert_int_lt(x->nq, QMAX);
      x->q_it[x->nq] = x->it;
      x->q_w[x->nq++] = x->w;
      char j[160];
      snprintf(j, sizeof j, "{\"training_iteration\":%d,\"acc\":%.17g}", x->it, x->w);
      char d = h_result(&H, x->t, x->it, j);
      if (stream)
        fprintf(stream, "{\"trial\": %lld, \"t\": %d, \"value\": %.17g", (long long)x->t->id, x->it,
                x->w);
      if (d == 's') {
        long long donor = 0;
        ck_assert_int_eq(x->t->lease_end_action, SCHED_EXPLOIT);
        ck_assert_int_eq(sscanf(x->t->reason, "exploited trial %lld at t=", &donor), 1);
        struct srv_trial *dt = server_trial(S, donor);
        ck_assert_ptr_nonnull(dt);
        x->want_iter = dt->rank_iter;
        exploits++;
        if (stream) fprintf(stream, ", \"exploit\": %lld, \"config\": %s}\n", donor, x->t->config);
        /* Its uploads still queued are refused (its checkpoint is its
         * donor's now): the worker stops it and completes the lease. */
        x->nq = 0;
        x->running = 0;
        h_complete(&H, x->t);
        continue;
      }
      if (stream) fprintf(stream, "}\n");
      while (x->nq > lag) upload_oldest(x);
      if (x->it == ITERS) {
        /* Its last uploads go before its complete (the worker flushes). */
        while (x->nq) upload_oldest(x);
        h_complete(&H, x->t);
        ck_assert_int_eq(x->t->status, TS_TERMINATED);
        if (stream) fprintf(stream, "{\"end\": %lld}\n", (long long)x->t->id);
        x->done = 1;
        left--;
      }
    }
  }
  ck_assert_int_eq(e->status, ES_TERMINATED);
  return exploits;
}

/* Rule (docs/scheduling.md#pbt): uploads 2 results behind their results.
 * Every exploit the scheduler decides is carried out (none dropped because
 * the donor's upload had not come yet), from the donor's checkpoint of the
 * iteration it was ranked at (resume() checks it). */
/* CTUNE_PBT_STREAM's file for this run (NAME.lagN), or none. */
static void stream_open(int lag) {
  const char *path = getenv("CTUNE_PBT_STREAM");
  char name[512];
  stream = NULL;
  if (!path) return;
  snprintf(name, sizeof name, "%s.lag%d", path, lag);
  stream = fopen(name, "w");
  ck_assert_ptr_nonnull(stream);
}

static void stream_close(void) {
  if (stream) fclose(stream);
  stream = NULL;
}

START_TEST(pbt_waits_for_the_donor_checkpoint) {
  stream_open(2);
  int n = run_population(2);
  stream_close();
  cJSON *st = NULL;
  ck_assert_int_eq(sched_state_json(server_experiment(S, 1)->sched, &st), 0);
  /* The scheduler counts the exploits it decided and kept. */
  ck_assert_int_eq(cJSON_GetObjectItem(st, "perturbations")->valueint, n);
  cJSON_Delete(st);
  ck_assert_int_ge(n, 5);
}
END_TEST

/* The same population with every upload in time (no lag): the donors have
 * uploaded newer checkpoints by the time they are cloned; each clone still
 * resumes at the donor's ranked iteration (resume() checks it). */
START_TEST(pbt_exploits_with_uploads_in_time) {
  stream_open(0);
  int n = run_population(0);
  stream_close();
  ck_assert_int_ge(n, 5);
}
END_TEST

/* ---- one exploit waiting for its donor ---- */

#define PAIR_CFG                                                                                   \
  "{\"name\": \"pair\", \"metric\": \"acc\", \"mode\": \"max\", \"num_samples\": 1, "              \
  "\"seed\": 5, \"param_space\": {\"lr\": {\"grid_search\": [0.001, 0.1]}}, "                      \
  "\"scheduler\": {\"type\": \"pbt\", \"perturbation_interval\": 2, "                              \
  "\"quantile_fraction\": 0.5, \"hyperparam_mutations\": {\"lr\": {\"type\": "                     \
  "\"loguniform\", \"lower\": 1e-5, \"upper\": 1}}}, "                                             \
  "\"trainable\": {\"type\": \"command\", \"argv\": [\"true\"]}}"

static char pair_result(struct srv_trial *t, double it, double acc) {
  char j[160];
  snprintf(j, sizeof j, "{\"training_iteration\":%g,\"acc\":%g,\"time_total_s\":%g}", it, acc,
           10 * it);
  return h_result(&H, t, it, j);
}

static int perturbations(void) {
  cJSON *st = NULL;
  ck_assert_int_eq(sched_state_json(server_experiment(S, 1)->sched, &st), 0);
  int n = cJSON_GetObjectItem(st, "perturbations")->valueint;
  cJSON_Delete(st);
  return n;
}

/* a is ranked top at t=4 before its checkpoint of iteration 4 is stored; b,
 * bottom at its t=4, exploits it: answered stop, its config replaced, and
 * PAUSED when its lease ends, waiting. */
static void pair_until_b_waits(struct srv_trial **pa, struct srv_trial **pb, char **old_config,
                               int a_uploads) {
  char cfg[1024];
  /* Without uploads: 2 samples, so two more trials are still to be made and
   * the experiment cannot end (nor resolve the wait that way) when a does. */
  snprintf(cfg, sizeof cfg, "%s", PAIR_CFG);
  if (!a_uploads) memcpy(strstr(cfg, "\"num_samples\": 1") + 15, "2", 1);
  h_submit(&H, cfg);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  *old_config = strdup(b->config);
  ck_assert_int_eq(pair_result(a, 1, 0.5), 'c');
  ck_assert_int_eq(pair_result(a, 2, 0.9), 'c');
  ck_assert_int_eq(pair_result(b, 1, 0.1), 'c');
  ck_assert_int_eq(pair_result(b, 2, 0.1), 'c');
  if (a_uploads) h_checkpoint(&H, a, 2, "a-at-2");
  ck_assert_int_eq(pair_result(a, 3, 0.92), 'c');
  ck_assert_int_eq(pair_result(a, 4, 0.95), 'c'); /* top; its upload of 4 comes later */
  ck_assert_int_eq(pair_result(b, 3, 0.15), 'c');
  ck_assert_int_eq(pair_result(b, 4, 0.2), 's');
  ck_assert_int_eq(b->lease_end_action, SCHED_EXPLOIT);
  ck_assert_int_eq(b->exploit_donor, a->id);
  ck_assert(b->exploit_iter == 4);
  ck_assert_str_ne(b->config, *old_config);
  ck_assert_int_eq(b->has_checkpoint, 0); /* nothing copied yet, none of its own */
  h_complete(&H, b);
  ck_assert_int_eq(b->status, TS_PAUSED);
  ck_assert(decide_refuses_checkpoint(b));
  ck_assert_int_eq(perturbations(), 1);
  *pa = a;
  *pb = b;
}

/* Rule (docs/scheduling.md#pbt): the wait survives a restart (it is in the
 * trial row); the donor's upload of the ranked iteration carries it out: the
 * copy, and b PENDING in its next generation with the donor's time. */
START_TEST(pbt_exploit_waits_across_a_restart) {
  struct srv_trial *a, *b;
  char *old_config;
  pair_until_b_waits(&a, &b, &old_config, 1);
  free(old_config);
  int64_t aid = a->id, bid = b->id;
  char *new_config = strdup(b->config);
  h_restart(&H);
  a = server_trial(S, aid);
  b = server_trial(S, bid);
  ck_assert_int_eq(b->status, TS_PAUSED);
  ck_assert_int_eq(b->exploit_donor, aid);
  ck_assert(b->exploit_iter == 4);
  ck_assert(a->rank_iter == 4);
  h_checkpoint(&H, a, 3, "a-at-3"); /* not yet the ranked one */
  ck_assert_int_eq(b->status, TS_PAUSED);
  h_checkpoint(&H, a, 4, "a-at-4");
  ck_assert_int_eq(b->status, TS_PENDING);
  ck_assert_int_eq(b->exploit_donor, 0);
  ck_assert_int_eq(b->lease_end_action, 0);
  ck_assert_int_eq(b->generation, 1);
  ck_assert_int_eq(b->checkpoint_iteration, 4);
  ck_assert(b->ck_time_total_s == 40);
  ck_assert_str_eq(b->config, new_config);
  free(new_config);
  h_sync(&H);
  int64_t it = 0;
  uint32_t crc = 0;
  void *data = NULL;
  size_t len = 0;
  ck_assert_int_eq(store_get_checkpoint(S->store, bid, &it, &crc, &data, &len), 0);
  ck_assert_int_eq(it, 4);
  ck_assert_int_eq(len, 6);
  ck_assert_int_eq(memcmp(data, "a-at-4", 6), 0);
  free(data);
  ck_assert_int_eq(perturbations(), 1);
  h_restart(&H);
  ck_assert_int_eq(server_trial(S, bid)->status, TS_PENDING);
  ck_assert_int_eq(server_trial(S, bid)->exploit_donor, 0);
}
END_TEST

/* Rule (docs/scheduling.md#pbt): a donor whose lease ends without a
 * checkpoint (a trainable that never checkpoints) cannot give one: the
 * waiting exploit is skipped as Ray skips it ("no checkpoint"): b resumes
 * with its old config, the scheduler forgets the exploit, a restart too. */
START_TEST(pbt_exploit_skipped_without_a_donor_checkpoint) {
  struct srv_trial *a, *b;
  char *old_config;
  pair_until_b_waits(&a, &b, &old_config, 0);
  h_complete(&H, a); /* no checkpoint ever */
  ck_assert_int_eq(a->status, TS_TERMINATED);
  ck_assert_int_eq(b->status, TS_PENDING);
  ck_assert_int_eq(b->exploit_donor, 0);
  ck_assert_str_eq(b->config, old_config);
  ck_assert_int_eq(perturbations(), 0);
  h_sync(&H);
  char sql[200];
  snprintf(sql, sizeof sql,
           "SELECT kind FROM trial_events WHERE trial_id=%lld AND kind NOT IN "
           "('leased', 'lease_lost', 'released', 'failed') ORDER BY seq",
           (long long)b->id);
  char *rows = h_query(&H, sql);
  ck_assert_str_eq(rows, "exploited\nresumed\n");
  free(rows);
  int64_t bid = b->id;
  h_restart(&H);
  ck_assert_str_eq(server_trial(S, bid)->config, old_config);
  ck_assert_int_eq(perturbations(), 0);
  free(old_config);
}
END_TEST

/* Rule (docs/scheduling.md#pbt): the donor's checkpoint of the result it
 * was ranked top at is kept (pbt_checkpoints) while it uploads newer ones;
 * a restart keeps it; an exploit after the restart copies it; deleting the
 * experiment deletes it. */
START_TEST(pbt_donor_snapshot_survives_a_restart) {
  struct srv_experiment *e = h_submit(&H, PAIR_CFG);
  struct srv_worker *w = h_worker(&H, "w", 2, 0, 0);
  struct srv_trial *a = h_lease(&H, w), *b = h_lease(&H, w);
  ck_assert_int_eq(pair_result(a, 1, 0.5), 'c');
  ck_assert_int_eq(pair_result(a, 2, 0.9), 'c');
  ck_assert_int_eq(pair_result(b, 1, 0.1), 'c');
  ck_assert_int_eq(pair_result(b, 2, 0.1), 'c');
  ck_assert_int_eq(pair_result(a, 3, 0.92), 'c');
  ck_assert_int_eq(pair_result(a, 4, 0.95), 'c'); /* ranked top at 4 */
  h_checkpoint(&H, a, 4, "a-at-4");
  ck_assert_int_eq(pair_result(a, 5, 0.96), 'c');
  h_checkpoint(&H, a, 5, "a-at-5");
  ck_assert_int_eq(a->has_snap, 1);
  ck_assert_int_eq(a->snap_iter, 4);
  int64_t aid = a->id, bid = b->id, eid = e->id;
  h_restart(&H);
  a = server_trial(S, aid);
  b = server_trial(S, bid);
  ck_assert_int_eq(a->has_snap, 1);
  ck_assert_int_eq(a->snap_iter, 4);
  ck_assert_int_eq(a->checkpoint_iteration, 5);
  ck_assert_int_eq(pair_result(b, 3, 0.15), 'c');
  ck_assert_int_eq(pair_result(b, 4, 0.2), 's');
  ck_assert_int_eq(b->exploit_donor, 0); /* nothing to wait for */
  ck_assert_int_eq(b->checkpoint_iteration, 4);
  ck_assert(b->ck_time_total_s == 40);
  h_sync(&H);
  int64_t it = 0;
  uint32_t crc = 0;
  void *data = NULL;
  size_t len = 0;
  ck_assert_int_eq(store_get_checkpoint(S->store, bid, &it, &crc, &data, &len), 0);
  ck_assert_int_eq(it, 4);
  ck_assert_int_eq(len, 6);
  ck_assert_int_eq(memcmp(data, "a-at-4", 6), 0);
  free(data);
  h_complete(&H, b);
  h_complete(&H, a);
  uint64_t ticket = 0;
  ck_assert_int_eq(control_delete(S, server_experiment(S, eid), 1, &ticket), 0);
  h_sync(&H);
  char *rows = h_query(&H, "SELECT count(*) FROM pbt_checkpoints");
  ck_assert_str_eq(rows, "0\n");
  free(rows);
}
END_TEST

int main(void) {
  Suite *su = suite_create("state_pbt");
  TCase *tc = tcase_create("population");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, pbt_waits_for_the_donor_checkpoint);
  tcase_add_test(tc, pbt_exploits_with_uploads_in_time);
  suite_add_tcase(su, tc);
  TCase *wt = tcase_create("wait");
  tcase_add_checked_fixture(wt, setup, teardown);
  tcase_add_test(wt, pbt_exploit_waits_across_a_restart);
  tcase_add_test(wt, pbt_exploit_skipped_without_a_donor_checkpoint);
  tcase_add_test(wt, pbt_donor_snapshot_survives_a_restart);
  suite_add_tcase(su, wt);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
