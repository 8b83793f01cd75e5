/* state: the in-memory model's transitions (create, lease, end, expire) and
 * the ops that carry each change to the commit thread, plus the loader. */
#include "server.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "validate.h"

const char *const trial_status_names[TS_COUNT] = {"PENDING", "RUNNING", "PAUSED",
                                                  "TERMINATED", "ERROR"};
const char *const exp_status_names[ES_COUNT] = {"RUNNING", "TERMINATED", "CANCELLED"};

static int status_parse(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (s && !strcmp(names[i], s)) return i;
  return -1;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* Grows an array of pointers to hold index id-1. */
static int grow(void ***arr, int64_t *cap, int64_t need) {
  if (need <= *cap) return 0;
  int64_t nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void **p = realloc(*arr, (size_t)nc * sizeof *p);
  if (!p) return -ENOMEM;
  *arr = p;
  *cap = nc;
  return 0;
}

int state_init(struct server *s) {
  return pthread_mutex_init(&s->lock, NULL) ? -ENOMEM : 0;
}

static void trial_free(struct trial *t) {
  if (!t) return;
  free(t->name);
  free(t->config);
  free(t->error);
  free(t->ts);
  free(t->decisions);
  free(t->values);
  for (int i = 0; i < t->nseries; i++) free(t->series[i].v);
  free(t->series);
  free(t->last_result);
  free(t);
}

static void experiment_free(struct experiment *e) {
  if (!e) return;
  free(e->name);
  free(e->config);
  for (int i = 0; i < e->nkeys; i++) free(e->keys[i]);
  sched_free(e->sched);
  validate_spec_free(&e->spec);
  free(e);
}

void state_free(struct server *s) {
  for (int64_t i = 0; i < s->ntrials; i++) trial_free(s->trials[i]);
  for (int64_t i = 0; i < s->nexps; i++) experiment_free(s->exps[i]);
  for (int64_t i = 0; i < s->nworkers; i++) {
    if (s->workers[i]) free(s->workers[i]->name);
    free(s->workers[i]);
  }
  free(s->trials);
  free(s->exps);
  free(s->workers);
  pthread_mutex_destroy(&s->lock);
}

/* ---- ops: copies of rows, applied by the commit thread ---- */

struct trial_op {
  struct store_trial_row row;
  char *name, *config, *error;
};

static void trial_op_free(void *arg) {
  struct trial_op *op = arg;
  free(op->name);
  free(op->config);
  free(op->error);
  free(op);
}

static int trial_op_apply(struct store *st, void *arg) {
  return store_put_trial(st, &((struct trial_op *)arg)->row);
}

static struct trial_op *trial_op_make(const struct trial *t) {
  struct trial_op *op = calloc(1, sizeof *op);
  if (!op) return NULL;
  op->name = strdup(t->name);
  op->config = strdup(t->config);
  op->error = dup_or_null(t->error);
  if (!op->name || !op->config || (t->error && !op->error)) {
    trial_op_free(op);
    return NULL;
  }
  op->row = (struct store_trial_row){
    .id = t->id, .experiment_id = t->experiment_id, .idx = t->idx, .name = op->name,
    .status = trial_status_names[t->status], .stopped_early = t->stopped_early,
    .config = op->config, .bracket = t->bracket, .error = op->error,
    .has_exit_code = t->has_exit_code, .exit_code = t->exit_code,
    .num_failures = t->num_failures, .attempt = t->attempt, .worker_id = t->worker_id,
    .created_at = t->created_at, .started_at = t->started_at, .ended_at = t->ended_at,
    .updated_seq = t->updated_seq};
  return op;
}

int state_persist_trial(struct server *s, struct trial *t, uint64_t *ticket) {
  struct trial_op *op = trial_op_make(t);
  if (!op) return -ENOMEM;
  return commit_enqueue(s->commit, trial_op_apply, trial_op_free, op, ticket);
}

struct exp_op {
  struct store_experiment_row row;
  char *name, *config;
  /* experiment creation also carries its trials */
  struct trial_op **trials;
  int64_t ntrials;
};

static void exp_op_free(void *arg) {
  struct exp_op *op = arg;
  free(op->name);
  free(op->config);
  for (int64_t i = 0; i < op->ntrials; i++)
    if (op->trials[i]) trial_op_free(op->trials[i]);
  free(op->trials);
  free(op);
}

static int exp_op_apply(struct store *st, void *arg) {
  struct exp_op *op = arg;
  int rc = store_put_experiment(st, &op->row);
  for (int64_t i = 0; !rc && i < op->ntrials; i++) rc = store_put_trial(st, &op->trials[i]->row);
  return rc;
}

static struct exp_op *exp_op_make(const struct experiment *e) {
  struct exp_op *op = calloc(1, sizeof *op);
  if (!op) return NULL;
  op->name = strdup(e->name);
  op->config = strdup(e->config);
  if (!op->name || !op->config) {
    exp_op_free(op);
    return NULL;
  }
  op->row = (struct store_experiment_row){
    .id = e->id, .name = op->name, .status = exp_status_names[e->status],
    .config = op->config, .seed = e->seed, .created_at = e->created_at,
    .has_ended_at = e->ended_at > 0, .ended_at = e->ended_at, .updated_seq = e->updated_seq};
  return op;
}

int state_persist_experiment(struct server *s, struct experiment *e, uint64_t *ticket) {
  struct exp_op *op = exp_op_make(e);
  if (!op) return -ENOMEM;
  return commit_enqueue(s->commit, exp_op_apply, exp_op_free, op, ticket);
}

struct worker_op {
  struct store_worker_row row;
  char *name;
};

static void worker_op_free(void *arg) {
  struct worker_op *op = arg;
  free(op->name);
  free(op);
}

static int worker_op_apply(struct store *st, void *arg) {
  return store_put_worker(st, &((struct worker_op *)arg)->row);
}

int state_persist_worker(struct server *s, struct worker *w, uint64_t *ticket) {
  struct worker_op *op = calloc(1, sizeof *op);
  if (!op || !(op->name = strdup(w->name))) {
    free(op);
    return -ENOMEM;
  }
  op->row = (struct store_worker_row){
    .id = w->id, .name = op->name, .cpu = w->cpu, .gpu = w->gpu,
    .memory_mb = w->memory_mb, .registered_at = w->registered_at,
    .last_heartbeat = w->last_heartbeat};
  return commit_enqueue(s->commit, worker_op_apply, worker_op_free, op, ticket);
}

/* The hot path: one allocation holds the result row, the scheduler's records
 * and, when the trial ended, the trial row. */
struct result_op {
  struct store_result_row row;
  struct store_asha_row asha[2];
  int nasha;
  struct trial_op *trial;
  char data[]; /* decision, then the JSON */
};

static void result_op_free(void *arg) {
  struct result_op *op = arg;
  if (op->trial) trial_op_free(op->trial);
  free(op);
}

static int result_op_apply(struct store *st, void *arg) {
  struct result_op *op = arg;
  int rc = op->row.data ? store_insert_result(st, &op->row) : 0;
  for (int i = 0; !rc && i < op->nasha; i++) rc = store_insert_asha(st, &op->asha[i]);
  if (!rc && op->trial) rc = store_put_trial(st, &op->trial->row);
  return rc;
}

static void asha_row_fill(struct store_asha_row *r, const struct trial *t,
                          const struct asha_outcome *o, int64_t seq) {
  *r = (struct store_asha_row){
    .experiment_id = t->experiment_id, .trial_id = t->id, .bracket = o->bracket,
    .milestone = o->milestone, .value = o->value, .stopped_early = o->stopped_early,
    .seq = seq};
}

int state_queue_result(struct server *s, struct trial *t, int64_t seq, double time_value,
                       const char *decision, const char *json,
                       const struct asha_outcome *rec1, const struct asha_outcome *rec2,
                       int with_trial_row, uint64_t *ticket) {
  size_t dl = decision ? strlen(decision) + 1 : 0, jl = json ? strlen(json) + 1 : 0;
  struct result_op *op = calloc(1, sizeof *op + dl + jl);
  if (!op) return -ENOMEM;
  if (json) {
    memcpy(op->data, decision, dl);
    memcpy(op->data + dl, json, jl);
    op->row = (struct store_result_row){.seq = seq, .trial_id = t->id,
                                        .experiment_id = t->experiment_id, .t = time_value,
                                        .decision = op->data, .data = op->data + dl};
  }
  if (rec1 && rec1->recorded) asha_row_fill(&op->asha[op->nasha++], t, rec1, seq);
  if (rec2 && rec2->recorded) asha_row_fill(&op->asha[op->nasha++], t, rec2, seq);
  if (with_trial_row && !(op->trial = trial_op_make(t))) {
    free(op);
    return -ENOMEM;
  }
  return commit_enqueue(s->commit, result_op_apply, result_op_free, op, ticket);
}

int state_queue_asha(struct server *s, struct trial *t, const struct asha_outcome *rec,
                     uint64_t *ticket) {
  return state_queue_result(s, t, t->updated_seq, 0, NULL, NULL, rec, NULL, 1, ticket);
}

/* ---- transitions ---- */

void state_set_status(struct server *s, struct trial *t, enum trial_status st) {
  struct experiment *e = server_experiment(s, t->experiment_id);
  e->counts[t->status]--;
  e->counts[st]++;
  t->status = st;
  t->updated_seq = ++s->seq;
  if (st == TS_PENDING && t->idx < e->pending_cursor) e->pending_cursor = t->idx;
}

void state_release(struct server *s, struct trial *t) {
  struct worker *w = server_worker(s, t->worker_id);
  struct experiment *e = server_experiment(s, t->experiment_id);
  if (w && e) {
    w->used_cpu -= e->spec.resources.cpu;
    w->used_gpu -= e->spec.resources.gpu;
    w->used_memory_mb -= e->spec.resources.memory_mb;
    if (w->used_cpu < 1e-9) w->used_cpu = 0;
    if (w->used_gpu < 1e-9) w->used_gpu = 0;
    if (w->used_memory_mb < 0) w->used_memory_mb = 0;
  }
  t->worker_id = 0;
}

static int experiment_maybe_end(struct server *s, struct experiment *e, uint64_t *ticket) {
  if (e->status != ES_RUNNING) return 0;
  if (e->counts[TS_TERMINATED] + e->counts[TS_ERROR] != e->num_trials) return 0;
  e->status = ES_TERMINATED;
  e->ended_at = clock_wall_s();
  e->updated_seq = ++s->seq;
  log_info("experiment %lld ended: %lld terminated, %lld error", (long long)e->id,
           (long long)e->counts[TS_TERMINATED], (long long)e->counts[TS_ERROR]);
  return state_persist_experiment(s, e, ticket);
}

int state_end_trial(struct server *s, struct trial *t, enum trial_status st,
                    uint64_t *ticket) {
  struct experiment *e = server_experiment(s, t->experiment_id);
  struct asha_outcome out = {0};
  if (t->status == TS_RUNNING) state_release(s, t);
  state_set_status(s, t, st);
  t->ended_at = clock_wall_s();
  t->worker_id = 0;
  /* Cancelled trials leave their bracket without passing through it. */
  int pass = e->status == ES_RUNNING && t->nres > 0;
  int rc = sched_on_trial_end(e->sched, t->id, pass, t->last_t,
                              pass && t->has_last_value ? &t->last_value : NULL, &out);
  if (rc && rc != -ENOENT) return rc;
  if (rc == -ENOENT) out.recorded = 0;
  rc = state_queue_result(s, t, t->updated_seq, 0, NULL, NULL, &out, NULL, 1, ticket);
  if (rc) return rc;
  return experiment_maybe_end(s, e, ticket);
}

int state_add_experiment(struct server *s, const char *config_json,
                         struct experiment_spec *spec, const cJSON *configs,
                         struct experiment **out, uint64_t *ticket) {
  int64_t n = cJSON_GetArraySize(configs);
  struct experiment *e = calloc(1, sizeof *e);
  struct exp_op *op = NULL;
  if (!e) return -ENOMEM;
  int rc = -ENOMEM;
  if (!(e->name = strdup(spec->name)) || !(e->config = strdup(config_json))) goto fail;
  rc = sched_create(&spec->sched, spec->mode, spec->seed, &e->sched);
  if (rc) goto fail;
  rc = -ENOMEM;
  if (grow((void ***)&s->exps, &s->capexps, s->nexps + 1) ||
      grow((void ***)&s->trials, &s->captrials, s->ntrials + n))
    goto fail;
  e->id = s->nexps + 1;
  e->seed = spec->seed;
  e->status = ES_RUNNING;
  e->created_at = clock_wall_s();
  e->updated_seq = ++s->seq;
  e->first_trial_id = s->ntrials + 1;
  e->num_trials = n;
  if (!(op = exp_op_make(e))) goto fail;
  if (!(op->trials = calloc((size_t)(n ? n : 1), sizeof *op->trials))) goto fail;
  int64_t made = 0;
  for (const cJSON *c = configs ? configs->child : NULL; c; c = c->next, made++) {
    struct trial *t = calloc(1, sizeof *t);
    if (!t) goto fail_trials;
    s->trials[s->ntrials + made] = t;
    t->id = e->first_trial_id + made;
    t->experiment_id = e->id;
    t->idx = made;
    char name[SPEC_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s_%05lld", spec->name, (long long)made);
    t->name = strdup(name);
    t->config = cJSON_PrintUnformatted(c);
    if (!t->name || !t->config) goto fail_trials;
    t->status = TS_PENDING;
    t->created_at = e->created_at;
    t->updated_seq = ++s->seq;
    t->bracket = sched_bracket_for(e->sched, made);
    if ((rc = sched_add_trial(e->sched, t->id, t->bracket))) goto fail_trials;
    rc = -ENOMEM;
    if (!(op->trials[made] = trial_op_make(t))) goto fail_trials;
    op->ntrials = made + 1;
  }
  e->counts[TS_PENDING] = n;
  /* The spec moves into the experiment; the caller's copy is emptied. */
  e->spec = *spec;
  memset(spec, 0, sizeof *spec);
  s->exps[s->nexps++] = e;
  s->ntrials += n;
  *out = e;
  if (n == 0) { /* nothing to run: the experiment is over at once */
    e->status = ES_TERMINATED;
    e->ended_at = e->created_at;
    op->row.status = exp_status_names[ES_TERMINATED];
    op->row.has_ended_at = 1;
    op->row.ended_at = e->ended_at;
  }
  return commit_enqueue(s->commit, exp_op_apply, exp_op_free, op, ticket);
fail_trials:
  for (int64_t i = 0; i <= made && i < n; i++) {
    trial_free(s->trials[s->ntrials + i]);
    s->trials[s->ntrials + i] = NULL;
  }
fail:
  if (op) exp_op_free(op);
  experiment_free(e);
  return rc;
}

static int fits(double need, double have) { return need <= have + 1e-9; }

struct trial *state_lease(struct server *s, struct worker *w, double cpu, double gpu,
                          int64_t memory_mb, int has_memory) {
  /* The server's own accounting caps what the worker says is free. */
  double fc = w->cpu - w->used_cpu, fg = w->gpu - w->used_gpu;
  if (cpu < fc) fc = cpu;
  if (gpu < fg) fg = gpu;
  int64_t fm = INT64_MAX;
  if (w->memory_mb > 0) fm = w->memory_mb - w->used_memory_mb;
  if (has_memory && memory_mb < fm) fm = memory_mb;
  for (int64_t i = 0; i < s->nexps; i++) {
    struct experiment *e = s->exps[i];
    if (e->status != ES_RUNNING || !e->counts[TS_PENDING]) continue;
    if (e->spec.max_concurrent_trials > 0 &&
        e->counts[TS_RUNNING] >= e->spec.max_concurrent_trials)
      continue;
    const struct spec_resources *r = &e->spec.resources;
    /* Every trial of an experiment needs the same: one check per experiment. */
    if (!fits(r->cpu, fc) || !fits(r->gpu, fg) || r->memory_mb > fm) continue;
    while (e->pending_cursor < e->num_trials) {
      struct trial *t = s->trials[e->first_trial_id + e->pending_cursor - 1];
      if (t->status == TS_PENDING) {
        state_set_status(s, t, TS_RUNNING);
        t->worker_id = w->id;
        t->attempt++;
        t->started_at = clock_wall_s();
        w->used_cpu += r->cpu;
        w->used_gpu += r->gpu;
        w->used_memory_mb += r->memory_mb;
        return t;
      }
      e->pending_cursor++;
    }
  }
  return NULL;
}

void state_pending_reason(struct server *s, const struct trial *t, char *buf, size_t n) {
  const struct experiment *e = server_experiment(s, t->experiment_id);
  const struct spec_resources *r = &e->spec.resources;
  buf[0] = 0;
  if (t->status != TS_PENDING) return;
  if (e->status != ES_RUNNING) {
    snprintf(buf, n, "experiment is %s", exp_status_names[e->status]);
    return;
  }
  double max_cpu = -1, max_gpu = -1;
  int64_t max_mem = -1;
  int alive = 0, mem_unbounded = 0;
  for (int64_t i = 0; i < s->nworkers; i++) {
    const struct worker *w = s->workers[i];
    if (!w || w->lost) continue;
    alive++;
    if (w->cpu > max_cpu) max_cpu = w->cpu;
    if (w->gpu > max_gpu) max_gpu = w->gpu;
    if (w->memory_mb == 0) mem_unbounded = 1;
    else if (w->memory_mb > max_mem) max_mem = w->memory_mb;
  }
  if (!alive) snprintf(buf, n, "no worker is connected");
  else if (!fits(r->cpu, max_cpu))
    snprintf(buf, n, "needs cpu %g but the largest worker has %g", r->cpu, max_cpu);
  else if (!fits(r->gpu, max_gpu))
    snprintf(buf, n, "needs gpu %g but the largest worker has %g", r->gpu, max_gpu);
  else if (!mem_unbounded && r->memory_mb > max_mem)
    snprintf(buf, n, "needs memory_mb %lld but the largest worker has %lld",
             (long long)r->memory_mb, (long long)max_mem);
  else if (e->spec.max_concurrent_trials > 0 &&
           e->counts[TS_RUNNING] >= e->spec.max_concurrent_trials)
    snprintf(buf, n, "max_concurrent_trials (%lld) reached",
             (long long)e->spec.max_concurrent_trials);
  else
    snprintf(buf, n, "waiting for free resources");
}

void state_expire_leases(struct server *s, uint64_t now_ms) {
  uint64_t limit = (uint64_t)(s->opt.lease_timeout_s * 1000);
  for (int64_t i = 0; i < s->nworkers; i++) {
    struct worker *w = s->workers[i];
    if (!w || w->lost || now_ms - w->last_seen_ms <= limit) continue;
    w->lost = 1;
    int64_t back = 0;
    for (int64_t j = 0; j < s->ntrials; j++) {
      struct trial *t = s->trials[j];
      if (t->status != TS_RUNNING || t->worker_id != w->id) continue;
      state_release(s, t);
      state_set_status(s, t, TS_PENDING);
      uint64_t ticket;
      if (state_persist_trial(s, t, &ticket))
        log_error("lease expiry: cannot queue trial %lld", (long long)t->id);
      back++;
    }
    w->used_cpu = w->used_gpu = 0;
    w->used_memory_mb = 0;
    log_warn("worker %lld (%s) missed heartbeats for %.1f s: lost, %lld trial(s) back to "
             "PENDING", (long long)w->id, w->name, s->opt.lease_timeout_s, (long long)back);
  }
}

int state_key_index(const struct experiment *e, const char *key) {
  for (int i = 0; i < e->nkeys; i++)
    if (!strcmp(e->keys[i], key)) return i;
  return -1;
}

/* Appends every numeric (or null) field of a result to the trial's series. */
static int state_note_series(struct experiment *e, struct trial *t, const cJSON *result) {
  for (const cJSON *c = result->child; c; c = c->next) {
    if (!cJSON_IsNumber(c) && !cJSON_IsNull(c)) continue;
    int k = state_key_index(e, c->string);
    if (k < 0) {
      if (e->nkeys == EXP_MAX_KEYS) {
        e->keys_overflow = 1;
        continue;
      }
      if (!(e->keys[e->nkeys] = strdup(c->string))) return -ENOMEM;
      k = e->nkeys++;
    }
    if (k >= t->nseries) {
      struct series *ns = realloc(t->series, (size_t)(k + 1) * sizeof *ns);
      if (!ns) return -ENOMEM;
      memset(ns + t->nseries, 0, (size_t)(k + 1 - t->nseries) * sizeof *ns);
      t->series = ns;
      t->nseries = k + 1;
    }
    struct series *sr = &t->series[k];
    if (sr->n == sr->cap) {
      uint32_t nc = sr->cap ? sr->cap * 2 : 4;
      double *v = realloc(sr->v, nc * sizeof *v);
      if (!v) return -ENOMEM;
      sr->v = v;
      sr->cap = nc;
    }
    sr->v[sr->n++] = cJSON_IsNumber(c) ? c->valuedouble : NAN;
  }
  return 0;
}

int state_note_result(struct server *s, struct trial *t, double time_value, char decision,
                      const cJSON *result, const char *json, int64_t seq) {
  if (t->nres == t->capres) {
    size_t nc = t->capres ? t->capres * 2 : 8;
    double *ts = realloc(t->ts, nc * sizeof *ts);
    if (!ts) return -ENOMEM;
    t->ts = ts;
    char *d = realloc(t->decisions, nc);
    if (!d) return -ENOMEM;
    t->decisions = d;
    t->capres = nc;
  }
  struct experiment *e = server_experiment(s, t->experiment_id);
  const cJSON *m = e->spec.has_metric ? cJSON_GetObjectItemCaseSensitive(result, e->spec.metric)
                                      : NULL;
  if (m && (cJSON_IsNumber(m) || cJSON_IsNull(m))) {
    if (t->nvals == t->capvals) {
      size_t nc = t->capvals ? t->capvals * 2 : 8;
      double *v = realloc(t->values, nc * sizeof *v);
      if (!v) return -ENOMEM;
      t->values = v;
      t->capvals = nc;
    }
    double v = cJSON_IsNumber(m) ? m->valuedouble : NAN;
    t->values[t->nvals++] = v;
    t->has_last_value = 1;
    t->last_value = v;
  }
  if (state_note_series(e, t, result)) return -ENOMEM;
  char *copy = strdup(json);
  if (!copy) return -ENOMEM;
  free(t->last_result);
  t->last_result = copy;
  t->ts[t->nres] = time_value;
  t->decisions[t->nres] = decision;
  t->nres++;
  t->last_t = time_value;
  if (t->nres == 1 || time_value > t->max_t_seen) t->max_t_seen = time_value;
  if (seq > t->updated_seq) t->updated_seq = seq;
  return 0;
}

/* ---- loader ---- */

struct load_ctx {
  struct server *s;
  char *err;
  size_t errlen;
};

static int load_experiment(void *ctx, const struct store_experiment_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  struct validate_error verr = {{0}, {0}};
  int rc = -ENOMEM;
  cJSON *cfg = cJSON_Parse(r->config);
  struct experiment *e = calloc(1, sizeof *e);
  if (!cfg || !e) goto fail;
  rc = validate_experiment(cfg, &e->spec, &verr);
  if (rc) {
    snprintf(lc->err, lc->errlen, "experiment %lld no longer validates: %s: %s",
             (long long)r->id, verr.path, verr.message);
    goto fail;
  }
  e->spec.seed = r->seed;
  e->spec.has_seed = 1;
  e->id = r->id;
  e->seed = r->seed;
  e->name = strdup(r->name);
  e->config = strdup(r->config);
  rc = -ENOMEM;
  if (!e->name || !e->config) goto fail;
  int st = status_parse(exp_status_names, ES_COUNT, r->status);
  rc = -EINVAL;
  if (st < 0 || r->id != s->nexps + 1) {
    snprintf(lc->err, lc->errlen, "experiment %lld: bad row", (long long)r->id);
    goto fail;
  }
  e->status = st;
  e->created_at = r->created_at;
  e->ended_at = r->has_ended_at ? r->ended_at : 0;
  e->updated_seq = r->updated_seq;
  e->first_trial_id = 0;
  if ((rc = sched_create(&e->spec.sched, e->spec.mode, e->seed, &e->sched))) goto fail;
  rc = -ENOMEM;
  if (grow((void ***)&s->exps, &s->capexps, s->nexps + 1)) goto fail;
  s->exps[s->nexps++] = e;
  if (r->updated_seq > s->seq) s->seq = r->updated_seq;
  cJSON_Delete(cfg);
  return 0;
fail:
  cJSON_Delete(cfg);
  if (e && !e->sched) validate_spec_free(&e->spec), memset(&e->spec, 0, sizeof e->spec);
  experiment_free(e);
  if (rc == -ENOMEM && !lc->err[0]) snprintf(lc->err, lc->errlen, "out of memory");
  return rc;
}

static int load_trial(void *ctx, const struct store_trial_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  struct experiment *e = server_experiment(s, r->experiment_id);
  int st = status_parse(trial_status_names, TS_COUNT, r->status);
  if (!e || st < 0 || r->id != s->ntrials + 1) {
    snprintf(lc->err, lc->errlen, "trial %lld: bad row", (long long)r->id);
    return -EINVAL;
  }
  if (grow((void ***)&s->trials, &s->captrials, s->ntrials + 1)) return -ENOMEM;
  struct trial *t = calloc(1, sizeof *t);
  if (!t) return -ENOMEM;
  s->trials[s->ntrials++] = t;
  t->id = r->id;
  t->experiment_id = r->experiment_id;
  t->idx = r->idx;
  t->name = strdup(r->name);
  t->config = strdup(r->config);
  t->error = dup_or_null(r->error);
  if (!t->name || !t->config || (r->error && !t->error)) return -ENOMEM;
  t->status = st;
  t->stopped_early = r->stopped_early;
  t->bracket = r->bracket;
  t->has_exit_code = r->has_exit_code;
  t->exit_code = r->exit_code;
  t->num_failures = r->num_failures;
  t->attempt = r->attempt;
  t->worker_id = r->worker_id;
  t->created_at = r->created_at;
  t->started_at = r->started_at;
  t->ended_at = r->ended_at;
  t->updated_seq = r->updated_seq;
  if (r->updated_seq > s->seq) s->seq = r->updated_seq;
  if (!e->first_trial_id) e->first_trial_id = t->id;
  e->num_trials++;
  e->counts[st]++;
  if (st != TS_TERMINATED && st != TS_ERROR) {
    int rc = sched_add_trial(e->sched, t->id, t->bracket);
    if (rc) {
      snprintf(lc->err, lc->errlen, "trial %lld: cannot rejoin bracket %d", (long long)t->id,
               t->bracket);
      return rc;
    }
  }
  return 0;
}

static int load_result(void *ctx, const struct store_result_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  struct trial *t = server_trial(s, r->trial_id);
  cJSON *obj = cJSON_Parse(r->data);
  if (!t || !obj) {
    cJSON_Delete(obj);
    snprintf(lc->err, lc->errlen, "result %lld: bad row", (long long)r->seq);
    return -EINVAL;
  }
  int rc = state_note_result(s, t, r->t, r->decision[0] == 's' ? 's' : 'c', obj, r->data,
                             r->seq);
  cJSON_Delete(obj);
  if (r->seq > s->seq) s->seq = r->seq;
  return rc;
}

static int load_asha(void *ctx, const struct store_asha_row *r) {
  struct load_ctx *lc = ctx;
  struct experiment *e = server_experiment(lc->s, r->experiment_id);
  int rc = e ? sched_restore_record(e->sched, r->trial_id, r->bracket, r->milestone, r->value,
                                    r->stopped_early)
             : -EINVAL;
  if (rc)
    snprintf(lc->err, lc->errlen, "scheduler record of trial %lld at %g does not replay (%d)",
             (long long)r->trial_id, r->milestone, rc);
  return rc;
}

static int load_worker(void *ctx, const struct store_worker_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  if (r->id != s->nworkers + 1) {
    snprintf(lc->err, lc->errlen, "worker %lld: bad row", (long long)r->id);
    return -EINVAL;
  }
  if (grow((void ***)&s->workers, &s->capworkers, s->nworkers + 1)) return -ENOMEM;
  struct worker *w = calloc(1, sizeof *w);
  if (!w || !(w->name = strdup(r->name))) {
    free(w);
    return -ENOMEM;
  }
  w->id = r->id;
  w->cpu = r->cpu;
  w->gpu = r->gpu;
  w->memory_mb = r->memory_mb;
  w->registered_at = r->registered_at;
  /* A restart counts as a heartbeat from everyone (HACKING.md). */
  w->last_heartbeat = clock_wall_s();
  w->last_seen_ms = clock_mono_ms();
  s->workers[s->nworkers++] = w;
  return 0;
}

static int load_checkpoint(void *ctx, int64_t trial_id, int64_t iteration) {
  struct load_ctx *lc = ctx;
  struct trial *t = server_trial(lc->s, trial_id);
  if (t) {
    t->has_checkpoint = 1;
    t->checkpoint_iteration = iteration;
  }
  return 0;
}

int state_load(struct server *s, char *err, size_t errlen) {
  struct load_ctx lc = {s, err, errlen};
  err[0] = 0;
  struct store_loader l = {&lc,        load_experiment, load_trial,     load_result,
                           load_asha, load_worker,     load_checkpoint};
  int rc = store_load(s->store, &l);
  if (rc) {
    if (!err[0]) snprintf(err, errlen, "loading the database failed (%d)", rc);
    return rc;
  }
  /* Leases survive a restart: charge each worker for its RUNNING trials. */
  for (int64_t i = 0; i < s->ntrials; i++) {
    struct trial *t = s->trials[i];
    struct experiment *e = server_experiment(s, t->experiment_id);
    struct worker *w = server_worker(s, t->worker_id);
    if (t->status == TS_RUNNING && w) {
      w->used_cpu += e->spec.resources.cpu;
      w->used_gpu += e->spec.resources.gpu;
      w->used_memory_mb += e->spec.resources.memory_mb;
    } else if (t->status == TS_RUNNING) {
      /* Leased to no known worker: nobody would ever heartbeat for it. */
      e->counts[TS_RUNNING]--;
      e->counts[TS_PENDING]++;
      t->status = TS_PENDING;
      t->worker_id = 0;
    }
  }
  for (int64_t i = 0; i < s->nexps; i++) {
    struct experiment *e = s->exps[i];
    e->pending_cursor = 0;
  }
  return 0;
}
