/* state_load: rebuilds the in-memory model from SQLite at start — rows,
 * result indexes, and the scheduler's records replayed in their order. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attribution.h"
#include "clock.h"
#include "log.h"
#include "state.h"
#include "state_internal.h"
#include "state_preempt.h"
#include "decide.h"
#include "validate.h"

/* A tombstone for a deleted id (ids are indexes: gaps are filled with
 * these). Deleted, hidden by server_experiment/server_trial. */
static struct srv_experiment *state_load_tombstone_experiment(int64_t id) {
  struct srv_experiment *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->id = id;
  e->status = ES_CANCELLED;
  e->deleted = 1;
  return e;
}

static struct srv_trial *state_load_tombstone_trial(int64_t id) {
  struct srv_trial *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->id = id;
  t->status = TS_TERMINATED;
  t->deleted = 1;
  return t;
}

struct load_ctx {
  struct server *s;
  char *err;
  size_t errlen;
  /* Bounded memory: ended trials whose rows had no summary (an older
   * server, the bulk path): computed from their results, written back. */
  int64_t *backfill;
  size_t nbackfill, capbackfill;
};

/* ARCHITECTURE.md#startup-tolerates-rows-it-cannot-use: experiment id is not
 * loaded. Its id keeps a tombstone that says why, so its URLs answer 409
 * unusable and the id is never handed out again; whatever of it was loaded
 * already (its trials, its scheduler) is dropped, its trials' ids keep
 * tombstones that name it. Its rows stay as they are. -ENOMEM only. */
static int load_drop_experiment(struct load_ctx *lc, int64_t id, const char *why) {
  struct server *s = lc->s;
  struct srv_experiment *old = id <= s->nexps ? s->exps[id - 1] : NULL;
  if (old && old->unusable) return 0;
  char msg[1536];
  snprintf(msg, sizeof msg,
           "experiment %lld was not loaded: %s (its rows are kept in the "
           "database)",
           (long long)id, why);
  struct srv_experiment *tomb = state_load_tombstone_experiment(id);
  if (!tomb || !(tomb->unusable = strdup(msg)) ||
      (!old && state_grow((void ***)&s->exps, &s->capexps, s->nexps + 1))) {
    state_experiment_free(tomb);
    return -ENOMEM;
  }
  if (old) {
    for (int64_t i = 0; i < old->ntrials; i++) {
      struct srv_trial *t = old->trials[i], *tt = state_load_tombstone_trial(t->id);
      if (!tt) {
        state_experiment_free(tomb);
        return -ENOMEM;
      }
      tt->experiment_id = id;
      s->trials[t->id - 1] = tt;
      if (t->compact) s->ncompact--;
      state_trial_free(t);
    }
    state_experiment_free(old);
    s->exps[id - 1] = tomb;
  } else {
    s->exps[s->nexps++] = tomb;
  }
  s->unusable_rows++;
  log_warn("load: experiment %lld not loaded: %s", (long long)id, why);
  return 0;
}

/* A trial row of an experiment that is not loaded (or of none): its id
 * keeps a tombstone naming the experiment. */
static int load_trial_tombstone(struct server *s, int64_t id, int64_t experiment_id) {
  struct srv_trial *tt = state_load_tombstone_trial(id);
  if (!tt || state_grow((void ***)&s->trials, &s->captrials, s->ntrials + 1)) {
    free(tt);
    return -ENOMEM;
  }
  tt->experiment_id = experiment_id;
  s->trials[s->ntrials++] = tt;
  return 0;
}

static int load_experiment(void *ctx, const struct store_experiment_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  struct validate_error verr = {{0}, {0}};
  int rc = -ENOMEM;
  char why[1024];
  cJSON *cfg = NULL;
  struct srv_experiment *e = NULL;
  if (r->updated_seq > s->seq) s->seq = r->updated_seq; /* never hand a number out twice */
  /* A deleted experiment leaves a gap in the ids: tombstones keep ids equal
   * to indexes. */
  while (r->id > s->nexps + 1) {
    struct srv_experiment *tomb = state_load_tombstone_experiment(s->nexps + 1);
    if (!tomb || state_grow((void ***)&s->exps, &s->capexps, s->nexps + 1)) {
      free(tomb);
      goto fail;
    }
    s->exps[s->nexps++] = tomb;
  }
  rc = -EINVAL;
  if (r->id != s->nexps + 1) {
    snprintf(lc->err, lc->errlen, "experiment %lld: bad row", (long long)r->id);
    goto fail;
  }
  int st = state_status_parse(exp_status_names, ES_COUNT, r->status);
  if (st < 0) {
    snprintf(why, sizeof why, "unknown status '%.64s'", r->status ? r->status : "");
    return load_drop_experiment(lc, r->id, why);
  }
  if (!(cfg = cJSON_Parse(r->config))) {
    snprintf(why, sizeof why, "its config is not JSON");
    return load_drop_experiment(lc, r->id, why);
  }
  rc = -ENOMEM;
  if (!(e = calloc(1, sizeof *e))) goto fail;
  /* Stored: the checks that only protect a new submission (placeholders)
   * must not stop an older database from loading. */
  if (validate_experiment_stored(cfg, &e->spec, &verr)) {
    snprintf(why, sizeof why, "its config no longer validates: %s: %s", verr.path, verr.message);
    cJSON_Delete(cfg);
    validate_spec_free(&e->spec);
    memset(&e->spec, 0, sizeof e->spec);
    state_experiment_free(e);
    return load_drop_experiment(lc, r->id, why);
  }
  e->spec.seed = r->seed;
  e->spec.has_seed = 1;
  e->id = r->id;
  e->seed = r->seed;
  e->name = strdup(r->name);
  e->config = strdup(r->config);
  if (!e->name || !e->config) goto fail;
  e->status = st;
  /* Bounded memory: a finished experiment starts cold unless one of its
   * trials says otherwise (load_not_cold, before the trials). One with
   * outcome constraints starts warm: its best is among the feasible trials,
   * which its rows do not say (state_violations_restore reads them back;
   * it goes cold a while later, state_cold_later). */
  e->cold = (st == ES_TERMINATED || st == ES_CANCELLED) && !e->spec.nconstraints;
  e->created_at = r->created_at;
  e->ended_at = r->has_ended_at ? r->ended_at : 0;
  if (r->end_reason && !(e->end_reason = strdup(r->end_reason))) goto fail;
  e->run_time_s = r->run_time_s;                   /* time_budget_s's clock */
  e->priority = r->priority > 0 ? r->priority : 1; /* migration 010: <= 0 is the default 1 */
  if ((r->notes && !(e->notes = strdup(r->notes))) || (r->tags && !(e->tags = strdup(r->tags))))
    goto fail;
  e->updated_seq = r->updated_seq;
  /* The plan; its trials come next, those made so far (all of them in a
   * database from before trials were made on demand). */
  e->num_trials = e->spec.num_trials;
  if ((rc = sched_create(&e->spec.sched, e->spec.mode, e->seed, &e->sched))) {
    snprintf(why, sizeof why, "its scheduler cannot be made (%d)", rc);
    cJSON_Delete(cfg);
    validate_spec_free(&e->spec);
    memset(&e->spec, 0, sizeof e->spec);
    state_experiment_free(e);
    return load_drop_experiment(lc, r->id, why);
  }
  rc = -ENOMEM;
  if (state_grow((void ***)&s->exps, &s->capexps, s->nexps + 1)) goto fail;
  s->exps[s->nexps++] = e;
  if (r->updated_seq > s->seq) s->seq = r->updated_seq;
  cJSON_Delete(cfg);
  return 0;
fail:
  cJSON_Delete(cfg);
  if (e && !e->sched) validate_spec_free(&e->spec), memset(&e->spec, 0, sizeof e->spec);
  state_experiment_free(e);
  if (rc == -ENOMEM && !lc->err[0]) snprintf(lc->err, lc->errlen, "out of memory");
  return rc;
}

/* A trial struct from its row (st: its parsed status). An ended trial with
 * a summary (011) is compact from the start: its results are not read. */
static int load_trial_fill(struct srv_trial *t, const struct store_trial_row *r, int st) {
  t->id = r->id;
  t->experiment_id = r->experiment_id;
  t->idx = r->idx;
  t->name = strdup(r->name);
  t->config = strdup(r->config);
  t->error = state_strdup_or_null(r->error);
  t->reason = state_strdup_or_null(r->reason); /* the last decision's */
  if (!t->name || !t->config || (r->error && !t->error) || (r->reason && !t->reason))
    return -ENOMEM;
  t->status = st;
  t->stopped_early = r->stopped_early;
  t->bracket = r->bracket;
  t->has_exit_code = r->has_exit_code;
  t->exit_code = r->exit_code;
  t->num_failures = r->num_failures;
  int attr = attribution_parse(r->attribution ? r->attribution : ""); /* 016 */
  t->attribution = attr > 0 ? attr : 0;
  t->attempt = r->attempt;
  t->worker_id = r->worker_id;
  t->created_at = r->created_at;
  t->started_at = r->started_at;
  t->ended_at = r->ended_at;
  t->updated_seq = r->updated_seq;
  t->generation = r->generation; /* PBT exploits applied */
  /* Migration 009: a pause or exploit due when the lease ends, decided before
   * the restart (checked above); a donor's checkpoint time. */
  decide_action_parse(r->lease_end_action, &t->lease_end_action);
  decide_load_wait(t, r->lease_end_action); /* a PBT exploit waiting for its donor */
  t->has_ck_time_total = r->has_ck_time_total;
  t->ck_time_total_s = r->ck_time_total_s;
  /* Bounded memory (011): an ended trial with a summary is compact from
   * the start: its results are not read. */
  t->created_seq = r->created_seq;
  if (r->res_known && (st == TS_TERMINATED || st == TS_ERROR)) {
    t->compact = 1;
    t->nres = (size_t)r->nres;
    t->first_seq = r->first_seq;
    t->last_seq = r->last_seq;
    t->last_t = isnan(r->last_t) ? 0 : r->last_t;
    memcpy(t->scores, r->scores, sizeof t->scores);
    t->has_last_value = !isnan(r->scores[BEST_SUM_LAST]);
    t->last_value = r->scores[BEST_SUM_LAST];
    /* Unknown after a restart: a replay of any time value is looked up. */
    t->max_t_seen = INFINITY;
    t->max_iter_seen = t->last_t;
  }
  return 0;
}

/* Bounded memory (state_cold.c): a trial of an experiment that starts cold
 * is counted, and its score kept for the experiment's best, but no struct
 * is made (its slot stays NULL until the experiment is warmed). */
static int load_cold_trial(struct server *s, struct srv_experiment *e,
                           const struct store_trial_row *r, int st) {
  if (state_grow((void ***)&s->trials, &s->captrials, s->ntrials + 1)) return -ENOMEM;
  s->trials[s->ntrials++] = NULL;
  e->counts[st]++;
  e->cold_ntrials++;
  double v = r->scores[BEST_SUM_LAST];
  /* As api_best_memory picks it: the first strictly better wins. */
  if (st == TS_TERMINATED || st == TS_ERROR) {
    if (isfinite(v) &&
        (!e->has_cold_best ||
         (e->spec.mode == SPEC_MODE_MAX ? v > e->cold_best_value : v < e->cold_best_value))) {
      e->has_cold_best = 1;
      e->cold_best_id = r->id;
      e->cold_best_value = v;
    }
  }
  return 0;
}

static int load_trial(void *ctx, const struct store_trial_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  struct srv_experiment *e = server_experiment(s, r->experiment_id);
  int st = state_status_parse(trial_status_names, TS_COUNT, r->status);
  char why[512];
  if (r->updated_seq > s->seq) s->seq = r->updated_seq;
  /* The trials of a deleted experiment leave a gap. */
  while (r->id > s->ntrials + 1)
    if (load_trial_tombstone(s, s->ntrials + 1, 0)) return -ENOMEM;
  if (r->id != s->ntrials + 1) {
    snprintf(lc->err, lc->errlen, "trial %lld: bad row", (long long)r->id);
    return -EINVAL;
  }
  /* ARCHITECTURE.md#startup-tolerates-rows-it-cannot-use: a trial its
   * experiment cannot take makes the whole experiment unusable (its trials
   * are one history: the scheduler and searcher see all or none). */
  if (e && st < 0)
    snprintf(why, sizeof why, "trial %lld has unknown status '%.64s'", (long long)r->id,
             r->status ? r->status : "");
  else if (e && r->idx != state_experiment_created(e))
    snprintf(why, sizeof why, "trial %lld has index %lld, expected %lld", (long long)r->id,
             (long long)r->idx, (long long)state_experiment_created(e));
  else if (e && decide_action_parse(r->lease_end_action, &(int){0}))
    snprintf(why, sizeof why, "trial %lld has unknown lease_end_action '%.64s'", (long long)r->id,
             r->lease_end_action);
  else
    why[0] = 0;
  if (why[0] && load_drop_experiment(lc, r->experiment_id, why)) return -ENOMEM;
  if (!e || why[0]) {
    if (!e && !server_unusable(s, r->experiment_id) &&
        !(r->experiment_id >= 1 && r->experiment_id <= s->nexps)) {
      s->unusable_rows++;
      log_warn("load: trial %lld skipped: its experiment %lld does not exist", (long long)r->id,
               (long long)r->experiment_id);
    }
    return load_trial_tombstone(s, r->id, r->experiment_id);
  }
  if (e->cold) return load_cold_trial(s, e, r, st);
  if (state_grow((void ***)&s->trials, &s->captrials, s->ntrials + 1) ||
      state_grow((void ***)&e->trials, &e->captrials, e->ntrials + 1))
    return -ENOMEM;
  struct srv_trial *t = calloc(1, sizeof *t);
  if (!t) return -ENOMEM;
  s->trials[s->ntrials++] = t;
  if (load_trial_fill(t, r, st)) return -ENOMEM;
  s->ncompact += t->compact;
  e->trials[e->ntrials++] = t;
  e->counts[st]++;
  if (t->exploit_donor) e->exploit_waits++;
  if (st != TS_TERMINATED && st != TS_ERROR) {
    int rc = sched_add_trial(e->sched, t->id, t->idx, t->config);
    if (rc == -ENOMEM) return rc;
    if (rc) {
      snprintf(why, sizeof why, "trial %lld cannot rejoin bracket %d (%d)", (long long)t->id,
               t->bracket, rc);
      return load_drop_experiment(lc, e->id, why);
    }
  }
  return 0;
}

static int load_result(void *ctx, const struct store_result_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  struct srv_trial *t = server_trial(s, r->trial_id);
  if (r->seq > s->seq) s->seq = r->seq;
  if (t && t->compact) return 0; /* its summary stands for it */
  if (!t) {
    /* A result of a deleted or unusable experiment's trial: nothing to
     * say; of no trial at all: skipped, said. */
    int known = r->trial_id >= 1 && r->trial_id <= s->ntrials;
    if (!known) {
      s->unusable_rows++;
      log_warn("load: result %lld skipped: trial %lld does not exist", (long long)r->seq,
               (long long)r->trial_id);
    }
    return 0;
  }
  int rc = state_replay_result(s, t, r);
  if (rc == -EBADMSG) {
    s->unusable_rows++;
    log_warn("load: result %lld of trial %lld skipped: its data is not a JSON object",
             (long long)r->seq, (long long)r->trial_id);
    return 0;
  }
  return rc;
}

static int load_asha(void *ctx, const struct store_asha_row *r) {
  struct load_ctx *lc = ctx;
  struct srv_experiment *e = server_experiment(lc->s, r->experiment_id);
  if (!e) return 0; /* deleted or unusable: nothing to replay into */
  int rc = sched_restore_record(e->sched, r->trial_id, r->bracket, r->milestone, r->value,
                                r->stopped_early);
  if (!rc || rc == -ENOMEM) return rc;
  char why[512];
  snprintf(why, sizeof why, "the scheduler record of trial %lld at %g does not replay (%d)",
           (long long)r->trial_id, r->milestone, rc);
  return load_drop_experiment(lc, e->id, why);
}

/* A worker id with no usable row: deregistered (never listed, cannot
 * authenticate), so worker ids stay indexes. */
static int load_worker_placeholder(struct server *s, int64_t id) {
  struct srv_worker *w = calloc(1, sizeof *w);
  if (!w || !(w->name = strdup("")) ||
      state_grow((void ***)&s->workers, &s->capworkers, s->nworkers + 1)) {
    if (w) free(w->name);
    free(w);
    return -ENOMEM;
  }
  w->id = id;
  w->gone = 2;
  s->workers[s->nworkers++] = w;
  return 0;
}

static int load_worker(void *ctx, const struct store_worker_row *r) {
  struct load_ctx *lc = ctx;
  struct server *s = lc->s;
  while (r->id > s->nworkers + 1)
    if (load_worker_placeholder(s, s->nworkers + 1)) return -ENOMEM;
  if (r->id != s->nworkers + 1) {
    snprintf(lc->err, lc->errlen, "worker %lld: bad row", (long long)r->id);
    return -EINVAL;
  }
  if (!r->name || !r->name[0] || !(r->cpu >= 0) || !(r->gpu >= 0) || r->memory_mb < 0) {
    s->unusable_rows++;
    log_warn("load: worker %lld skipped: malformed row (name '%s', cpu %g, gpu %g)",
             (long long)r->id, r->name ? r->name : "", r->cpu, r->gpu);
    return load_worker_placeholder(s, r->id);
  }
  if (state_grow((void ***)&s->workers, &s->capworkers, s->nworkers + 1)) return -ENOMEM;
  struct srv_worker *w = calloc(1, sizeof *w);
  if (!w || !(w->name = strdup(r->name))) {
    free(w);
    return -ENOMEM;
  }
  w->id = r->id;
  w->cpu = r->cpu;
  w->gpu = r->gpu;
  w->memory_mb = r->memory_mb;
  w->registered_at = r->registered_at;
  memcpy(w->secret, r->secret, sizeof w->secret);
  memcpy(w->quarantine, r->quarantine, sizeof w->quarantine); /* 016: still out */
  w->spot = r->spot; /* 017: it will not register again to say so */
  /* A restart counts as a heartbeat from everyone
   * (docs/protocol.md#a-restart-counts-as-a-heartbeat). */
  w->last_heartbeat = clock_wall_s();
  w->last_seen_ms = clock_mono_ms();
  w->gone = r->secret[0] ? 0 : 2; /* deregistered (secret revoked) */
  s->workers[s->nworkers++] = w;
  return 0;
}

static int load_pbt_checkpoint(void *ctx, int64_t trial_id, int64_t iteration) {
  struct load_ctx *lc = ctx;
  struct srv_trial *t = server_trial(lc->s, trial_id);
  if (t) {
    t->has_snap = 1;
    t->snap_iter = iteration;
  }
  return 0;
}

static int load_checkpoint(void *ctx, int64_t trial_id, int64_t iteration) {
  struct load_ctx *lc = ctx;
  struct srv_trial *t = server_trial(lc->s, trial_id);
  if (t) {
    t->has_checkpoint = 1;
    t->checkpoint_iteration = iteration;
  }
  return 0;
}

/* A scheduler's record, replayed in seq order. */
static int load_sched_record(void *ctx, int64_t experiment_id, int64_t seq, int64_t trial_id,
                             const char *record) {
  struct load_ctx *lc = ctx;
  if (seq > lc->s->seq) lc->s->seq = seq;
  if (!server_experiment(lc->s, experiment_id)) return 0; /* deleted or unusable */
  int rc = decide_load_record(lc->s, experiment_id, trial_id, record);
  if (!rc || rc == -ENOMEM) return rc;
  char why[512];
  snprintf(why, sizeof why, "scheduler record %lld of trial %lld does not replay (%d)",
           (long long)seq, (long long)trial_id, rc);
  return load_drop_experiment(lc, experiment_id, why);
}

/* Bounded memory: the seq from which experiment id's results are needed:
 * those of its trials that are not compact (live ones, and ended ones
 * without a summary), each after the seq it was made at (0: unknown). */
static int64_t load_results_since(void *ctx, int64_t id, int *backfill) {
  struct load_ctx *lc = ctx;
  struct srv_experiment *e = server_experiment(lc->s, id);
  int64_t since = -1;
  for (int64_t i = 0; e && i < e->ntrials; i++) {
    const struct srv_trial *t = e->trials[i];
    if (t->compact) continue;
    if (t->status == TS_TERMINATED || t->status == TS_ERROR) *backfill = 1;
    if (since < 0 || t->created_seq < since) since = t->created_seq;
  }
  return since;
}

/* After an experiment's results: its ended trials that had no summary
 * are summarized now (so the load never holds more than one experiment's
 * histories of them) and noted for writing back. */
static int load_results_done(void *ctx, int64_t id) {
  struct load_ctx *lc = ctx;
  struct srv_experiment *e = server_experiment(lc->s, id);
  for (int64_t i = 0; e && i < e->ntrials; i++) {
    struct srv_trial *t = e->trials[i];
    if (t->compact || (t->status != TS_TERMINATED && t->status != TS_ERROR)) continue;
    if (lc->nbackfill == lc->capbackfill) {
      size_t nc = lc->capbackfill ? lc->capbackfill * 2 : 1024;
      int64_t *b = realloc(lc->backfill, nc * sizeof *b);
      if (!b) return -ENOMEM;
      lc->backfill = b;
      lc->capbackfill = nc;
    }
    lc->backfill[lc->nbackfill++] = t->id;
    state_trial_compact(lc->s, t);
  }
  return 0;
}

static void load_not_cold(void *ctx, int64_t id) {
  struct load_ctx *lc = ctx;
  struct srv_experiment *e = server_experiment(lc->s, id);
  if (e) e->cold = 0;
}

static void load_seq_seen(void *ctx, int64_t seq) {
  struct load_ctx *lc = ctx;
  if (seq > lc->s->seq) lc->s->seq = seq;
}

/* Writes the summaries computed at this load (before the commit thread
 * runs: startup only), 10,000 rows a transaction. A failure is logged, not
 * fatal: they are computed again at the next start. */
static void load_write_backfill(struct load_ctx *lc) {
  struct server *s = lc->s;
  enum { BATCH = 10000 };
  if (!lc->nbackfill || s->commit || s->opt.read_only) return;
  struct store_trial_row *rows = calloc(BATCH, sizeof *rows);
  if (!rows) return;
  size_t done = 0;
  for (size_t i = 0; i < lc->nbackfill; i += BATCH) {
    size_t n = lc->nbackfill - i < BATCH ? lc->nbackfill - i : BATCH;
    for (size_t k = 0; k < n; k++) {
      const struct srv_trial *t = server_trial(s, lc->backfill[i + k]);
      memset(&rows[k], 0, sizeof rows[k]);
      rows[k].id = lc->backfill[i + k];
      if (t)
        state_trial_summary_row(t, &rows[k]);
      else
        rows[k].res_known = 0;
    }
    int rc = store_put_trial_summaries(s->store, rows, n);
    if (rc) {
      log_warn("load: writing %zu trial summaries failed (%d): computed again next start", n, rc);
      break;
    }
    done += n;
  }
  free(rows);
  if (done) log_info("load: summarized %zu ended trial(s) of an older database once", done);
}

int state_load(struct server *s, char *err, size_t errlen) {
  struct load_ctx lc = {s, err, errlen, NULL, 0, 0};
  err[0] = 0;
  s->unusable_rows = 0;
  s->ncompact = 0;
  s->ncold = 0;
  struct store_loader l = {.ctx = &lc,
                           .experiment = load_experiment,
                           .trial = load_trial,
                           .result = load_result,
                           .asha = load_asha,
                           .worker = load_worker,
                           .checkpoint = load_checkpoint,
                           .sched_record = load_sched_record,
                           .results_since = load_results_since,
                           .results_done = load_results_done,
                           .seq_seen = load_seq_seen,
                           .not_cold = load_not_cold};
  int rc = store_load(s->store, &l);
  /* PBT donors' kept checkpoints (migration 012). */
  if (!rc) rc = store_load_snapshots(s->store, load_pbt_checkpoint, &lc);
  /* Each experiment's preemptions and the work they lost. */
  if (!rc) rc = store_events_of_kind(s->store, "preempted", state_preempt_load_row, s);
  if (!rc) load_write_backfill(&lc);
  free(lc.backfill);
  if (rc) {
    if (!err[0]) snprintf(err, errlen, "loading the database failed (%d)", rc);
    return rc;
  }
  /* The timer's gaps count from here: a first tick after the model was
   * (re)loaded compares with now, not with a server that never ticked. */
  s->last_tick_ms = clock_mono_ms();
  /* Leases survive a restart: charge each worker for its RUNNING trials. */
  for (int64_t i = 0; i < s->ntrials; i++) {
    struct srv_trial *t = s->trials[i];
    if (!t || t->deleted) continue; /* NULL: a cold experiment's */
    /* An exploited trial's checkpoint bound is its donor's checkpoint, then
     * whatever its current generation reported. */
    double ck = t->has_checkpoint ? (double)t->checkpoint_iteration : 0;
    if (t->generation > 0 && !(t->max_iter_seen >= ck)) t->max_iter_seen = ck;
    struct srv_experiment *e = server_experiment(s, t->experiment_id);
    struct srv_worker *w = server_worker(s, t->worker_id);
    if (t->status == TS_RUNNING && w) {
      state_charge(s, w, t);
    } else if (t->status == TS_RUNNING && !s->opt.read_only) {
      /* Leased to no known worker: nobody would ever heartbeat for it. A
       * read-only server shows the trial as stored: it requeues nothing. */
      e->counts[TS_RUNNING]--;
      e->counts[TS_PENDING]++;
      t->status = TS_PENDING;
      t->worker_id = 0;
    }
  }
  for (int64_t i = 0; i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    e->pending_cursor = 0;
  }
  /* The saved counter may be past every row's (a change that left no row
   * of its own took the last number): never hand a number out twice. */
  int64_t saved = 0;
  if ((rc = store_get_seq(s->store, &saved))) {
    snprintf(err, errlen, "reading the change counter failed (%d)", rc);
    return rc;
  }
  if (saved > s->seq) s->seq = saved;
  /* The newest experiments and trials may have been deleted; their ids stay
   * taken (tombstones up to the largest ever). */
  int64_t max_e = 0, max_t = 0;
  if ((rc = store_get_meta(s->store, "max_experiment_id", &max_e)) ||
      (rc = store_get_meta(s->store, "max_trial_id", &max_t))) {
    snprintf(err, errlen, "reading the largest ids failed (%d)", rc);
    return rc;
  }
  while (s->nexps < max_e) {
    struct srv_experiment *tomb = state_load_tombstone_experiment(s->nexps + 1);
    if (!tomb || state_grow((void ***)&s->exps, &s->capexps, s->nexps + 1)) {
      free(tomb);
      snprintf(err, errlen, "out of memory");
      return -ENOMEM;
    }
    s->exps[s->nexps++] = tomb;
  }
  while (s->ntrials < max_t)
    if ((rc = load_trial_tombstone(s, s->ntrials + 1, 0))) {
      snprintf(err, errlen, "out of memory");
      return rc;
    }
  for (int64_t i = 0; i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    if (!e->cold && !e->deleted && (rc = state_violations_restore(s, e))) {
      snprintf(err, errlen, "experiment %lld: reading its trials' last results failed (%d)",
               (long long)e->id, rc);
      return rc;
    }
    s->ncold += e->cold && !e->deleted;
    /* Finished but warm (its trials were summarized at this load): later. */
    if (!e->cold && !e->deleted && (e->status == ES_TERMINATED || e->status == ES_CANCELLED))
      state_cold_later(s, e, clock_mono_ms());
  }
  /* The RUNNING experiments are the live list (ARCHITECTURE.md#the-live-list). */
  if ((rc = state_live_rebuild(s))) {
    snprintf(err, errlen, "no memory for the live experiments (%d)", rc);
    return rc;
  }
  return 0;
}

/* The latest trial end of an experiment: when it really ended. */
static double state_last_end(const struct srv_experiment *e) {
  double at = 0;
  for (int64_t i = 0; i < e->ntrials; i++) {
    const struct srv_trial *t = e->trials[i];
    if (t->ended_at > at) at = t->ended_at;
  }
  return at > 0 ? at : clock_wall_s();
}

int state_repair(struct server *s) {
  uint64_t ticket = 0;
  int rc = 0;
  for (int64_t i = 0; !rc && i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    int64_t ended = e->counts[TS_TERMINATED] + e->counts[TS_ERROR];
    if (e->status == ES_CANCELLED && ended < e->ntrials) {
      /* Cancelled, but the trials' ends were lost (a crash between the
       * writes of a non-atomic cancel): finish the cancel. */
      int64_t stopped = 0;
      for (int64_t j = 0; !rc && j < e->ntrials; j++) {
        struct srv_trial *t = e->trials[j];
        if (t->status == TS_TERMINATED || t->status == TS_ERROR) continue;
        rc = state_trial_event(s, t, TE_STOP, NULL, &ticket);
        stopped++;
      }
      log_warn("repair: experiment %lld was CANCELLED with %lld unfinished trial(s): "
               "ended them",
               (long long)e->id, (long long)stopped);
    } else if (e->status == ES_RUNNING && e->num_trials > 0 && state_experiment_done(e)) {
      /* Every trial ended but the experiment's own end was lost. */
      e->status = ES_TERMINATED;
      e->ended_at = state_last_end(e);
      e->updated_seq = ++s->seq;
      rc = state_persist_experiment(s, e, &ticket);
      log_warn("repair: experiment %lld was RUNNING with all %lld trial(s) ended: "
               "TERMINATED",
               (long long)e->id, (long long)e->num_trials);
    }
  }
  return rc;
}

/* Old models that a request might still point into (a pointer kept across
 * server_unlock); freed a few reloads later, and at exit. */
#define STATE_GRAVEYARD 4
struct state_model {
  struct srv_experiment **exps;
  int64_t nexps;
  struct srv_trial **trials;
  int64_t ntrials;
  struct srv_worker **workers;
  int64_t nworkers;
};
static struct state_model state_graveyard[STATE_GRAVEYARD];
static int state_ngraves;

static void state_model_free(struct state_model *m) {
  for (int64_t i = 0; i < m->ntrials; i++) state_trial_free(m->trials[i]);
  for (int64_t i = 0; i < m->nexps; i++) state_experiment_free(m->exps[i]);
  for (int64_t i = 0; i < m->nworkers; i++) {
    if (m->workers[i]) free(m->workers[i]->name);
    free(m->workers[i]);
  }
  free(m->trials);
  free(m->exps);
  free(m->workers);
  memset(m, 0, sizeof *m);
}

static struct state_model state_model_take(struct server *s) {
  struct state_model m = {s->exps, s->nexps, s->trials, s->ntrials, s->workers, s->nworkers};
  s->exps = NULL;
  s->trials = NULL;
  s->workers = NULL;
  s->nexps = s->capexps = s->ntrials = s->captrials = s->nworkers = s->capworkers = 0;
  return m;
}

static void state_model_put(struct server *s, struct state_model *m) {
  s->exps = m->exps;
  s->nexps = s->capexps = m->nexps;
  s->trials = m->trials;
  s->ntrials = s->captrials = m->ntrials;
  s->workers = m->workers;
  s->nworkers = s->capworkers = m->nworkers;
}

int state_reload(struct server *s, char *err, size_t errlen) {
  int64_t seq = s->seq;
  int64_t capexps = s->capexps, captrials = s->captrials, capworkers = s->capworkers;
  struct state_model old = state_model_take(s);
  int rc = state_load(s, err, errlen);
  if (rc) {
    struct state_model partial = state_model_take(s);
    state_model_free(&partial);
    state_model_put(s, &old);
    s->capexps = capexps;
    s->captrials = captrials;
    s->capworkers = capworkers;
    s->seq = seq;
    return rc;
  }
  /* Numbers already shown (the failed change's too) are never reused. */
  if (seq > s->seq) s->seq = seq;
  if (state_ngraves == STATE_GRAVEYARD) {
    state_model_free(&state_graveyard[0]);
    memmove(state_graveyard, state_graveyard + 1, (STATE_GRAVEYARD - 1) * sizeof *state_graveyard);
    state_ngraves--;
  }
  state_graveyard[state_ngraves++] = old;
  rc = state_repair(s);
  lease_wait_changed(s); /* held leases try the model as it is now */
  return rc;
}

void state_reload_cleanup(void) {
  for (int i = 0; i < state_ngraves; i++) state_model_free(&state_graveyard[i]);
  state_ngraves = 0;
}

struct warm_ctx {
  struct server *s;
  struct srv_experiment *e;
};

static int warm_trial(void *ctx, const struct store_trial_row *r, int has_checkpoint,
                      int64_t checkpoint_iteration) {
  struct warm_ctx *w = ctx;
  struct server *s = w->s;
  struct srv_experiment *e = w->e;
  int st = state_status_parse(trial_status_names, TS_COUNT, r->status);
  /* What was cold is ended with a summary, at the index and slot it had. */
  if (st != TS_TERMINATED && st != TS_ERROR) return -EINVAL;
  if (r->id < 1 || r->id > s->ntrials || s->trials[r->id - 1] || r->idx != e->ntrials ||
      e->ntrials >= e->cold_ntrials)
    return -EINVAL;
  struct srv_trial *t = calloc(1, sizeof *t);
  if (!t) return -ENOMEM;
  int rc = load_trial_fill(t, r, st);
  if (!rc && !t->compact) rc = -EINVAL; /* no summary: it was never cold */
  if (rc) {
    state_trial_free(t);
    return rc;
  }
  t->has_checkpoint = has_checkpoint;
  t->checkpoint_iteration = checkpoint_iteration;
  t->searcher_seq = -1; /* a searcher made later sees it */
  e->trials[e->ntrials++] = t;
  s->trials[t->id - 1] = t;
  return 0;
}

int state_experiment_warm(struct server *s, struct srv_experiment *e) {
  e->read_ms = clock_mono_ms(); /* needed now: it goes cold 60 s after its last need */
  if (!e->cold) return 0;
  int64_t n = e->cold_ntrials;
  if (state_grow((void ***)&e->trials, &e->captrials, n > 0 ? n : 1)) return -ENOMEM;
  e->ntrials = 0;
  int rc = store_experiment_trials(s->store, e->id, warm_trial, &(struct warm_ctx){s, e});
  if (!rc && e->ntrials != n) rc = -EIO;
  if (rc) {
    /* Cold as it was. */
    for (int64_t i = 0; i < e->ntrials; i++) {
      s->trials[e->trials[i]->id - 1] = NULL;
      state_trial_free(e->trials[i]);
    }
    e->ntrials = 0;
    log_error("experiment %lld: its trials could not be read back (%d)", (long long)e->id, rc);
    return rc;
  }
  e->cold = 0;
  s->ncold--;
  s->ncompact += n;
  state_cold_later(s, e, clock_mono_ms());
  /* Outcome constraints: on a failed read its trials count as infeasible
   * (state_violations_restore marks them before it reads). */
  if ((rc = state_violations_restore(s, e)))
    log_error("experiment %lld: its trials' last results could not be read back (%d)",
              (long long)e->id, rc);
  return 0;
}
