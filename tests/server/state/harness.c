/* harness: see harness.h. */
#include "harness.h"

#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cJSON.h"
#include "clock.h"
#include "commit.h"
#include "decide.h"
#include "events.h"
#include "log.h"
#include "quarantine.h"
#include "store.h"
#include "validate.h"
#include "workers.h"

void h_start_only(struct harness *h) {
  char err[1024] = "";
  struct server *s = &h->s;
  ck_assert(!h->started);
  memset(s, 0, sizeof *s);
  s->opt.db_path = h->db;
  s->opt.lease_timeout_s = H_LEASE_TIMEOUT_S;
  s->opt.heartbeat_interval_s = H_HEARTBEAT_S;
  s->opt.worker_retention_s = 3600;
  s->opt.quarantine_after = QUARANTINE_AFTER_DEFAULT;
  s->opt.wal_frames = 8192;
  s->opt.listen_fd = -1; /* none inherited: http_start binds its own (0 is stdin) */
  s->opt.sync_full = 0;  /* no fdatasync: a test's durability is the process's */
  /* main.c's order. */
  int rc = store_open(h->db, s->opt.wal_frames, s->opt.sync_full, &s->store, err, sizeof err);
  ck_assert_msg(!rc, "store_open: %s", err);
  ck_assert_int_eq(state_init(s), 0);
  rc = state_load(s, err, sizeof err);
  ck_assert_msg(!rc, "state_load: %s", err);
  ck_assert_int_eq(commit_start(s->store, &s->commit), 0);
  server_lock(s);
  ck_assert_int_eq(state_repair(s), 0);
  h->started = 1;
  h_sync(h);
  /* The change feed begins at the loaded model (sse_start). */
  events_begin(s->events, s->seq);
}

void h_stop_only(struct harness *h) {
  struct server *s = &h->s;
  if (!h->started) return;
  h->started = 0;
  /* main.c's order at exit: drain, stop the writer, free, close. */
  if (s->commit) commit_group_close(s->commit, s->seq);
  pthread_mutex_unlock(&s->lock);
  if (s->commit) commit_wait(s->commit, commit_last_ticket(s->commit));
  commit_stop(s->commit);
  s->commit = NULL;
  state_free(s);
  state_reload_cleanup();
  store_close(s->store);
  s->store = NULL;
}

void h_open(struct harness *h) {
  memset(h, 0, sizeof *h);
  /* $TMPDIR, else /dev/shm (tmpfs: SQLite's syncs at open and close cost
   * nothing there; on a disk they are most of a test's time), else /tmp. */
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(h->dir, sizeof h->dir, "%s/ctune-stest-XXXXXX", tmp);
  ck_assert_ptr_nonnull(mkdtemp(h->dir));
  snprintf(h->db, sizeof h->db, "%s/ctune.db", h->dir);
  /* Quiet unless asked: expiry and requeues are warnings by design. */
  if (!getenv("CTUNE_LOG_LEVEL")) log_set_level(LOG_ERROR);
  fake_clock_set_ms(FAKE_CLOCK_START_MS);
  h_start_only(h);
}

void h_close(struct harness *h) {
  h_stop_only(h);
  static const char *const tails[] = {"", "-wal", "-shm", "-journal"};
  char p[400];
  for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
    snprintf(p, sizeof p, "%s%s", h->db, tails[i]);
    unlink(p);
  }
  rmdir(h->dir);
}

void h_restart(struct harness *h) {
  h_stop_only(h);
  h_start_only(h);
}

void h_sync(struct harness *h) {
  struct server *s = &h->s;
  commit_group_close(s->commit, s->seq);
  ck_assert_int_eq(commit_wait(s->commit, commit_last_ticket(s->commit)), 0);
  ck_assert_int_eq((int)commit_failures(s->commit), 0);
}

void h_sql(struct harness *h, const char *sql) {
  sqlite3 *db = NULL;
  char *msg = NULL;
  ck_assert(!h->started);
  ck_assert_int_eq(sqlite3_open(h->db, &db), SQLITE_OK);
  int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
  ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
  sqlite3_free(msg);
  sqlite3_close(db);
}

const char *h_cfg(char *buf, size_t cap, const char *name, int n, const char *extra) {
  int k = snprintf(buf, cap,
                   "{\"name\": \"%s\", \"num_samples\": %d, \"seed\": 7, "
                   "\"param_space\": {\"lr\": {\"type\": \"loguniform\", "
                   "\"lower\": 0.0001, \"upper\": 0.1}}, "
                   "\"trainable\": {\"type\": \"command\", \"argv\": [\"true\"]}%s}",
                   name, n, extra ? extra : "");
  ck_assert(k > 0 && (size_t)k < cap);
  return buf;
}

struct srv_experiment *h_submit(struct harness *h, const char *json) {
  struct experiment_spec spec;
  struct validate_error verr = {{0}, {0}};
  struct srv_experiment *e = NULL;
  uint64_t ticket = 0;
  cJSON *cfg = cJSON_Parse(json);
  ck_assert_msg(cfg != NULL, "not JSON: %s", json);
  int rc = validate_experiment(cfg, &spec, &verr);
  ck_assert_msg(!rc, "invalid config: %s: %s", verr.path, verr.message);
  if (!spec.has_seed) spec.seed = 1; /* the API draws one */
  rc = state_add_experiment(&h->s, json, &spec, &e, &ticket);
  validate_spec_free(&spec);
  cJSON_Delete(cfg);
  ck_assert_int_eq(rc, 0);
  ck_assert_ptr_nonnull(e);
  return e;
}

struct srv_worker *h_worker(struct harness *h, const char *name, double cpu, double gpu,
                            int64_t memory_mb) {
  struct srv_worker *w = NULL;
  uint64_t ticket = 0;
  ck_assert_int_eq(workers_register(&h->s, name, cpu, gpu, memory_mb, 0, &w, &ticket), 0);
  return w;
}

struct srv_trial *h_lease_free(struct harness *h, struct srv_worker *w, double cpu, double gpu,
                               int64_t memory_mb, int has_memory) {
  uint64_t ticket = 0;
  struct srv_trial *t = NULL;
  ck_assert_int_eq(state_lease(&h->s, w, cpu, gpu, memory_mb, has_memory, &t, &ticket), 0);
  return t;
}

struct srv_trial *h_lease(struct harness *h, struct srv_worker *w) {
  return h_lease_free(h, w, 1e9, 1e9, 0, 0);
}

int h_heartbeat(struct harness *h, struct srv_worker *w, struct srv_trial *const *trials, int n) {
  struct server *s = &h->s;
  uint64_t ticket = 0;
  struct workers_listed listed[64];
  struct workers_stop stops[64];
  ck_assert_int_le(n, 64);
  for (int i = 0; i < n; i++)
    listed[i] = (struct workers_listed){trials[i]->id, trials[i]->attempt, 1, NULL, 0};
  int back = -1;
  ck_assert_int_ge(workers_heartbeat(s, w, listed, n, stops, &back, clock_mono_ms(), &ticket), 0);
  return back;
}

void h_complete(struct harness *h, struct srv_trial *t) {
  uint64_t ticket = 0;
  struct lease_token l = {t->worker_id, t->attempt};
  struct trial_event_args a = {.lease = &l};
  ck_assert_int_eq(state_trial_event(&h->s, t, TE_COMPLETE, &a, &ticket), 0);
  ck_assert_int_eq(a.fence, FENCE_CURRENT);
}

int64_t h_cancel(struct harness *h, struct srv_experiment *e, const char *reason) {
  uint64_t ticket = 0;
  int64_t unfinished = e->ntrials - e->counts[TS_TERMINATED] - e->counts[TS_ERROR];
  int rc = state_experiment_event(&h->s, e, EE_CANCEL, reason, &ticket);
  return rc ? rc : unfinished;
}

int h_results(struct harness *h, struct srv_trial *t, const struct lease_token *l, int n,
              const double *tvs, const char *const *jsons, char *dec,
              struct trial_event_args *out) {
  uint64_t ticket = 0;
  struct lease_token cur = {t->worker_id, t->attempt};
  cJSON **rs = calloc((size_t)n, sizeof *rs);
  ck_assert_ptr_nonnull(rs);
  for (int i = 0; i < n; i++) {
    rs[i] = cJSON_Parse(jsons[i]);
    ck_assert_msg(rs[i] != NULL, "not JSON: %s", jsons[i]);
  }
  struct trial_event_args a = {.lease = l ? l : &cur,
                               .results = (const cJSON *const *)rs,
                               .time_values = tvs,
                               .nresults = n,
                               .decisions = dec};
  int rc = state_trial_event(&h->s, t, TE_RESULTS, &a, &ticket);
  for (int i = 0; i < n; i++) cJSON_Delete(rs[i]);
  free(rs);
  a.lease = NULL;
  a.results = NULL;
  a.time_values = NULL;
  if (out) *out = a;
  return rc;
}

char h_result(struct harness *h, struct srv_trial *t, double time_value, const char *json) {
  char d = 0;
  ck_assert_int_eq(h_results(h, t, NULL, 1, &time_value, &json, &d, NULL), 0);
  ck_assert(d == 'c' || d == 's');
  return d;
}

struct h_ckpt_op {
  int64_t trial_id, iteration;
  size_t len;
  char data[];
};

static int h_ckpt_apply(struct store *st, void *arg) {
  struct h_ckpt_op *op = arg;
  /* The crc is the API's check of the upload; the store only keeps it. */
  return store_put_checkpoint(st, op->trial_id, op->iteration, 0, op->data, op->len);
}

void h_checkpoint(struct harness *h, struct srv_trial *t, int64_t iteration, const char *data) {
  struct server *s = &h->s;
  uint64_t ticket = 0;
  struct lease_token l = {t->worker_id, t->attempt};
  ck_assert_int_ne(state_check_fence(s, t, &l, NULL, 0), FENCE_STALE);
  size_t len = strlen(data);
  struct h_ckpt_op *op = malloc(sizeof *op + len + 1);
  ck_assert_ptr_nonnull(op);
  op->trial_id = t->id;
  op->iteration = iteration;
  op->len = len;
  memcpy(op->data, data, len + 1);
  ck_assert_int_eq(commit_enqueue(s->commit, h_ckpt_apply, free, op, &ticket), 0);
  /* api_checkpoint_put's bookkeeping. */
  t->has_checkpoint = 1;
  t->checkpoint_iteration = iteration;
  t->has_ck_time_total = 0;
  t->updated_seq = ++s->seq;
  ck_assert_int_eq(state_persist_trial(s, t, &ticket), 0);
  ck_assert_int_eq(decide_checkpoint_stored(s, t, &ticket), 0);
}

void h_tick(struct harness *h, uint64_t now_ms) {
  /* The daemon's loop had been ticking all along (every 200 ms at most):
   * however far the test moved the clock, this is not a stall (h_stall). */
  if (now_ms > 200) h->s.last_tick_ms = now_ms - 200;
  fake_clock_set_ms(now_ms);
  state_expire_leases(&h->s, now_ms);
}

void h_stall(struct harness *h, uint64_t now_ms) {
  fake_clock_set_ms(now_ms);
  state_expire_leases(&h->s, now_ms);
}

int64_t h_count(const struct srv_experiment *e, enum trial_status st) {
  int64_t n = 0;
  for (int64_t k = 0; k < e->ntrials; k++) n += e->trials[k]->status == st;
  return n;
}

struct sbuf {
  char *p;
  size_t n, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    ck_assert_int_ge(k, 0);
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t nc = b->cap ? b->cap * 2 : 4096;
    while (nc < b->n + (size_t)k + 1) nc *= 2;
    b->p = realloc(b->p, nc);
    ck_assert_ptr_nonnull(b->p);
    b->cap = nc;
  }
}

char *h_snapshot(struct harness *h) {
  struct server *s = &h->s;
  struct sbuf b = {0};
  sb_printf(&b, "exps %lld trials %lld workers %lld\n", (long long)s->nexps, (long long)s->ntrials,
            (long long)s->nworkers);
  for (int64_t i = 0; i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    if (!e || e->deleted) {
      sb_printf(&b, "E%lld deleted\n", (long long)(i + 1));
      continue;
    }
    ck_assert_int_eq(state_experiment_warm(s, e), 0);
    sb_printf(&b,
              "E%lld %s %s plan %lld made %lld live %d prio %g notes '%s' tags %s "
              "reason '%s' counts",
              (long long)e->id, e->name, exp_status_names[e->status], (long long)e->num_trials,
              (long long)e->ntrials, e->live_pos != 0, state_experiment_priority(e),
              e->notes ? e->notes : "", e->tags ? e->tags : "[]",
              e->end_reason ? e->end_reason : "");
    for (int k = 0; k < TS_COUNT; k++) sb_printf(&b, " %lld", (long long)e->counts[k]);
    sb_printf(&b, " max_conc %lld\n", (long long)e->spec.max_concurrent_trials);
    for (int64_t k = 0; k < e->ntrials; k++) {
      const struct srv_trial *t = e->trials[k];
      sb_printf(&b, "  T%lld idx %lld %s attempt %d failures %d worker %lld nres %zu cfg %s\n",
                (long long)t->id, (long long)t->idx, trial_status_names[t->status], t->attempt,
                t->num_failures, (long long)t->worker_id, t->nres, t->config);
    }
  }
  for (int64_t i = 0; i < s->nworkers; i++) {
    const struct srv_worker *w = s->workers[i];
    sb_printf(&b, "W%lld %s cpu %g/%g gpu %g/%g mem %lld/%lld running %lld gone %d\n",
              (long long)w->id, w->name, w->used_cpu, w->cpu, w->used_gpu, w->gpu,
              (long long)w->used_memory_mb, (long long)w->memory_mb, (long long)w->nrunning,
              w->gone);
  }
  sb_printf(&b, "live %lld\n", (long long)s->nlive);
  return b.p;
}

char *h_query(struct harness *h, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  struct sbuf b = {0};
  ck_assert_int_eq(sqlite3_open_v2(h->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
  sb_printf(&b, "%s", "");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    for (int i = 0; i < sqlite3_column_count(st); i++) {
      const unsigned char *v = sqlite3_column_text(st, i);
      sb_printf(&b, "%s%s", i ? "|" : "", v ? (const char *)v : "-");
    }
    sb_printf(&b, "\n");
  }
  ck_assert_msg(rc == SQLITE_DONE, "%s: %s", sql, sqlite3_errmsg(db));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return b.p;
}
