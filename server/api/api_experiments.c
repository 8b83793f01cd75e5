/* api_experiments: submit (and dry run), list, get, trials and results since
 * a change number, best trial, cancel. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api.h"
#include "attribution.h"
#include "best.h"
#include "clock.h"
#include "constraint.h"
#include "log.h"
#include "pareto.h"
#include "searcher.h"
#include "space.h"
#include "validate.h"
#include "hypervolume.h"

static cJSON *api_parsed_or_null(const char *json) {
  cJSON *v = json ? cJSON_Parse(json) : NULL;
  return v ? v : cJSON_CreateNull();
}

/* JSON text the server printed itself (cJSON_PrintUnformatted): spliced in as
 * it is, without parsing and printing it again. */
static cJSON *api_raw_or_null(const char *json) {
  return json ? cJSON_CreateRaw(json) : cJSON_CreateNull();
}

int api_trial_view_take(struct server *s, const struct srv_trial *t, struct api_trial_view *v) {
  const struct srv_experiment *e = server_experiment(s, t->experiment_id);
  memset(v, 0, sizeof *v);
  v->t = *t;
  /* Only the scalars and these strings are read from the copy. */
  v->t.ts = NULL, v->t.decisions = NULL, v->t.values = NULL, v->t.series = NULL;
  v->t.name = strdup(t->name);
  v->t.config = strdup(t->config);
  v->t.last_result = t->last_result ? strdup(t->last_result) : NULL;
  v->t.error = t->error ? strdup(t->error) : NULL;
  v->t.reason = t->reason ? strdup(t->reason) : NULL; /* the last decision's */
  v->res = e->spec.resources;
  v->constrained = e->spec.nconstraints > 0;
  state_pending_reason(s, t, v->reason, sizeof v->reason);
  if (!v->t.name || !v->t.config || (t->last_result && !v->t.last_result) ||
      (t->error && !v->t.error) || (t->reason && !v->t.reason)) {
    api_trial_view_drop(v);
    return -ENOMEM;
  }
  return 0;
}

void api_trial_view_drop(struct api_trial_view *v) {
  free(v->t.name);
  free(v->t.config);
  free(v->t.last_result);
  free(v->t.error);
  free(v->t.reason);
  memset(v, 0, sizeof *v);
}

cJSON *api_trial_view_json(const struct api_trial_view *v) {
  const struct srv_trial *t = &v->t;
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON *res = NULL;
  char sig[256];
  attribution_signature(t->error, sig, sizeof sig);
  int ok =
      cJSON_AddNumberToObject(o, "id", (double)t->id) &&
      cJSON_AddNumberToObject(o, "experiment_id", (double)t->experiment_id) &&
      cJSON_AddStringToObject(o, "name", t->name) &&
      cJSON_AddStringToObject(o, "status", trial_status_names[t->status]) &&
      cJSON_AddBoolToObject(o, "stopped_early", t->stopped_early) &&
      /* the last decision's sentence, or null */
      cJSON_AddItemToObject(o, "reason",
                            t->reason ? cJSON_CreateString(t->reason) : cJSON_CreateNull()) &&
      cJSON_AddItemToObject(o, "config", api_raw_or_null(t->config)) &&
      (res = cJSON_AddObjectToObject(o, "resources")) &&
      cJSON_AddNumberToObject(res, "cpu", v->res.cpu) &&
      cJSON_AddNumberToObject(res, "gpu", v->res.gpu) &&
      cJSON_AddNumberToObject(res, "memory_mb", (double)v->res.memory_mb) &&
      cJSON_AddNumberToObject(o, "bracket", t->bracket) &&
      cJSON_AddItemToObject(o, "iteration",
                            t->nres ? cJSON_CreateNumber(t->last_t) : cJSON_CreateNull()) &&
      cJSON_AddItemToObject(o, "last_result", api_raw_or_null(t->last_result)) &&
      cJSON_AddItemToObject(o, "error",
                            t->error ? cJSON_CreateString(t->error) : cJSON_CreateNull()) &&
      cJSON_AddItemToObject(o, "exit_code",
                            t->has_exit_code ? cJSON_CreateNumber(t->exit_code)
                                             : cJSON_CreateNull()) &&
      /* docs/scheduling.md#failures-told-apart: its last failure's, or null */
      cJSON_AddItemToObject(o, "attribution",
                            t->attribution ? cJSON_CreateString(attribution_name(t->attribution))
                                           : cJSON_CreateNull()) &&
      cJSON_AddItemToObject(o, "error_signature",
                            t->error ? cJSON_CreateString(sig) : cJSON_CreateNull()) &&
      cJSON_AddNumberToObject(o, "num_failures", t->num_failures) &&
      cJSON_AddNumberToObject(o, "attempt", t->attempt) &&
      cJSON_AddItemToObject(o, "worker_id",
                            t->worker_id ? cJSON_CreateNumber((double)t->worker_id)
                                         : cJSON_CreateNull()) &&
      cJSON_AddItemToObject(o, "pending_reason",
                            v->reason[0] ? cJSON_CreateString(v->reason) : cJSON_CreateNull()) &&
      cJSON_AddBoolToObject(o, "has_checkpoint", t->has_checkpoint) &&
      cJSON_AddItemToObject(o, "created_at", api_time(t->created_at)) &&
      cJSON_AddItemToObject(o, "started_at", api_time(t->started_at)) &&
      cJSON_AddItemToObject(o, "ended_at", api_time(t->ended_at)) &&
      cJSON_AddNumberToObject(o, "updated_seq", (double)t->updated_seq);
  /* Outcome constraints: feasibility at its last result (null before one);
   * the violation is null when a constrained value is missing. */
  if (ok && v->constrained)
    ok = cJSON_AddItemToObject(
             o, "feasible", t->nres ? cJSON_CreateBool(t->violation == 0) : cJSON_CreateNull()) &&
         cJSON_AddItemToObject(o, "violation",
                               t->nres && isfinite(t->violation) ? cJSON_CreateNumber(t->violation)
                                                                 : cJSON_CreateNull());
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

struct fill_ctx {
  struct api_trial_view **v;
  const int64_t *seqs;
  size_t i, n;
};

static int api_fill_one(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  (void)trial_id;
  struct fill_ctx *f = ctx;
  while (f->i < f->n && f->seqs[f->i] != seq) f->i++;
  if (f->i == f->n || !data) return 0;
  return (f->v[f->i++]->t.last_result = strdup(data)) ? 0 : -ENOMEM;
}

int api_trial_views_fill(struct server *s, struct api_trial_view *views, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (views[i].t.compact && views[i].t.nres && views[i].t.last_seq && !views[i].t.last_result)
      k++;
  if (!k) return 0;
  int64_t *seqs = malloc(k * sizeof *seqs);
  struct api_trial_view **v = malloc(k * sizeof *v);
  int rc = seqs && v ? 0 : -ENOMEM;
  k = 0;
  for (size_t i = 0; !rc && i < n; i++)
    if (views[i].t.compact && views[i].t.nres && views[i].t.last_seq && !views[i].t.last_result) {
      seqs[k] = views[i].t.last_seq;
      v[k++] = &views[i];
    }
  if (!rc)
    rc = store_results_by_seq(s->store, seqs, k, api_fill_one, &(struct fill_ctx){v, seqs, 0, k});
  free(seqs);
  free(v);
  return rc;
}

cJSON *api_trial_json(struct server *s, const struct srv_trial *t) {
  struct api_trial_view v;
  if (api_trial_view_take(s, t, &v)) return NULL;
  /* Bounded memory: a compact trial's last result is read back (one row). */
  if (api_trial_views_fill(s, &v, 1)) {
    api_trial_view_drop(&v);
    return NULL;
  }
  cJSON *o = api_trial_view_json(&v);
  api_trial_view_drop(&v);
  return o;
}

static int api_cmp_id(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Outcome constraints under a scope: each trial's total violation
 * (constraint.h), v[i] for ids[i] (sorted). */
struct api_viol {
  int64_t *ids;
  double *v;
  size_t n;
};

/* Trial id's violation in viol (+inf when it is not there: a trial made
 * after viol was read). */
static double api_viol_of(const struct api_viol *viol, int64_t id) {
  const int64_t *at = bsearch(&id, viol->ids, viol->n, sizeof *viol->ids, api_cmp_id);
  return at ? viol->v[at - viol->ids] : INFINITY;
}

/* Best from memory: key < 0 is the experiment's own metric, else a result
 * key index (e->keys). With outcome constraints only feasible trials count:
 * at their last result, or by viol (non-NULL) under the scope asked. */
static int api_best_memory(struct server *s, struct srv_experiment *e, int key,
                           enum best_scope scope, enum spec_mode mode, int64_t *trial_id,
                           double *value, const struct api_viol *viol) {
  (void)s;
  struct best_series *ser = malloc((size_t)(e->ntrials ? e->ntrials : 1) * sizeof *ser);
  if (!ser) return -ENOMEM;
  for (int64_t i = 0; i < e->ntrials; i++) {
    const struct srv_trial *t = e->trials[i];
    /* Bounded memory: an ended trial answers from its summary. */
    if (key < 0 && t->compact)
      ser[i] = (struct best_series){t->id, NULL, 0, t->scores};
    else if (key < 0)
      ser[i] = (struct best_series){t->id, t->values, t->nvals, NULL};
    else if (key < t->nseries)
      ser[i] = (struct best_series){t->id, t->series[key].v, t->series[key].n, NULL};
    else
      ser[i] = (struct best_series){t->id, NULL, 0, NULL};
    /* Outcome constraints: infeasible at its last result, or (viol given:
     * sorted by trial id) under the scope asked. */
    double v = viol && viol->ids ? api_viol_of(viol, t->id) : t->violation;
    if (e->spec.nconstraints) constraint_drop_series(&ser[i], 1, &v);
  }
  size_t idx;
  int rc = best_pick(ser, (size_t)e->ntrials, scope, mode, &idx, value);
  if (!rc) *trial_id = ser[idx].trial_id;
  free(ser);
  return rc;
}

/* Whether some trial of e may be compact (ended: compacted a little after
 * its end; cold: all of them), so that its other keys are SQLite's only.
 * From the counts: O(1). */
static int api_any_compact(const struct srv_experiment *e) {
  return e->cold || e->counts[TS_TERMINATED] + e->counts[TS_ERROR] > 0;
}

static const char *const api_searcher_names[] = {"random", "grid", "tpe"};

/* Why no more of its trials run now: null unless it has work waiting (a
 * PENDING trial, or one still to be made) and room for it is missing. */
static cJSON *api_exp_pending_reason(struct server *s, const struct srv_experiment *e) {
  char buf[256];
  int waiting = e->status == ES_RUNNING && (e->counts[TS_PENDING] > 0 ||
                                            (!e->searcher_exhausted && e->ntrials < e->num_trials));
  if (!waiting) return cJSON_CreateNull();
  state_experiment_pending_reason(s, e, buf, sizeof buf);
  return buf[0] ? cJSON_CreateString(buf) : cJSON_CreateNull();
}

cJSON *api_experiment_json(struct server *s, struct srv_experiment *e, int with_config) {
  cJSON *o = cJSON_CreateObject(), *counts = NULL, *sched = NULL, *best = NULL;
  if (!o) return NULL;
  int ok =
      cJSON_AddNumberToObject(o, "id", (double)e->id) &&
      cJSON_AddStringToObject(o, "name", e->name) &&
      cJSON_AddStringToObject(o, "status", exp_status_names[e->status]) &&
      cJSON_AddItemToObject(o, "metric",
                            e->spec.has_metric ? cJSON_CreateString(e->spec.metric)
                                               : cJSON_CreateNull()) &&
      cJSON_AddItemToObject(o, "mode",
                            e->spec.has_metric
                                ? cJSON_CreateString(e->spec.mode == SPEC_MODE_MAX ? "max" : "min")
                                : cJSON_CreateNull()) &&
      cJSON_AddNumberToObject(o, "seed", (double)e->seed) &&
      cJSON_AddItemToObject(o, "created_at", api_time(e->created_at)) &&
      cJSON_AddItemToObject(o, "ended_at", api_time(e->ended_at)) &&
      cJSON_AddItemToObject(o, "end_reason",
                            e->end_reason ? cJSON_CreateString(e->end_reason)
                                          : cJSON_CreateNull()) &&
      cJSON_AddNumberToObject(o, "num_trials", (double)e->num_trials) &&
      cJSON_AddNumberToObject(o, "num_created", (double)state_experiment_created(e)) &&
      cJSON_AddItemToObject(o, "pending_reason", api_exp_pending_reason(s, e)) &&
      cJSON_AddStringToObject(o, "search_alg", api_searcher_names[searcher_type_of(&e->spec)]) &&
      (counts = cJSON_AddObjectToObject(o, "counts")) &&
      cJSON_AddNumberToObject(o, "updated_seq", (double)e->updated_seq) &&
      /* what a PATCH may edit: fair-share weight, notes, tags */
      cJSON_AddNumberToObject(o, "priority", e->priority > 0 ? e->priority : 1) &&
      cJSON_AddStringToObject(o, "notes", e->notes ? e->notes : "") &&
      cJSON_AddItemToObject(o, "tags",
                            e->tags ? api_parsed_or_null(e->tags) : cJSON_CreateArray()) &&
      cJSON_AddNumberToObject(o, "max_concurrent_trials", (double)e->spec.max_concurrent_trials) &&
      cJSON_AddNumberToObject(o, "num_samples", (double)e->spec.num_samples) &&
      !api_add_objectives(o, &e->spec);
  for (int i = 0; ok && i < TS_COUNT; i++)
    ok = cJSON_AddNumberToObject(counts, trial_status_names[i], (double)e->counts[i]) != NULL;
  /* Preemptions of its trials and the work they lost (state_preempt.h). */
  cJSON *pre = ok ? cJSON_AddObjectToObject(o, "preemptions") : NULL;
  if (ok)
    ok = pre && cJSON_AddNumberToObject(pre, "count", (double)e->preemptions) &&
         cJSON_AddNumberToObject(pre, "lost_iterations", e->lost_iterations) &&
         cJSON_AddNumberToObject(pre, "lost_seconds", e->lost_seconds);
  if (ok && with_config) ok = cJSON_AddItemToObject(o, "config", api_parsed_or_null(e->config));
  if (ok) ok = !sched_state_json(e->sched, &sched) && cJSON_AddItemToObject(o, "scheduler", sched);
  int64_t best_id;
  double best_v;
  int have_best = 0;
  if (e->cold) { /* bounded memory: kept when it went cold */
    have_best = e->has_cold_best;
    best_id = e->cold_best_id;
    best_v = e->cold_best_value;
  } else if (e->spec.has_metric) {
    have_best = !api_best_memory(s, e, -1, BEST_SCOPE_LAST, e->spec.mode, &best_id, &best_v, NULL);
  }
  /* Several objectives: no single best (GET .../pareto). */
  if (e->spec.nobjectives > 1) have_best = 0;
  if (ok && e->spec.has_metric && have_best) {
    ok = (best = cJSON_AddObjectToObject(o, "best")) &&
         cJSON_AddNumberToObject(best, "trial_id", (double)best_id) &&
         cJSON_AddNumberToObject(best, "value", best_v);
  } else if (ok) {
    ok = cJSON_AddNullToObject(o, "best") != NULL;
  }
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* 1 for dry_run=true|1, 0 when absent or false|0, -EINVAL otherwise. */
static int api_dry_run(const struct api_req *req) {
  const char *v = req->query(req->conn, "dry_run");
  if (!v || !strcmp(v, "false") || !strcmp(v, "0")) return 0;
  if (!strcmp(v, "true") || !strcmp(v, "1") || !*v) return 1;
  return -EINVAL;
}

/* The value of metric at t's last result (t an ended trial of src; NaN:
 * none, or t failed). 0 or -ENOMEM. */
static int api_warm_value(struct server *s, const struct srv_experiment *src,
                          const struct srv_trial *t, const char *metric, double *out) {
  int key =
      src->spec.has_metric && !strcmp(src->spec.metric, metric) ? -1 : state_key_index(src, metric);
  double v = NAN;
  if (t->status == TS_TERMINATED && key < 0 && src->spec.has_metric && t->has_last_value)
    v = t->last_value;
  else if (t->status == TS_TERMINATED && key >= 0 && key < t->nseries && t->series[key].n)
    v = t->series[key].v[t->series[key].n - 1];
  else if (t->status == TS_TERMINATED && t->compact && !(key < 0 && src->spec.has_metric)) {
    /* Bounded memory: an ended trial's other keys are in its last result. */
    char *last = NULL;
    if (state_trial_last_result(s, t, &last)) return -ENOMEM;
    cJSON *lr = last ? cJSON_Parse(last) : NULL;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(lr, metric);
    if (cJSON_IsNumber(x)) v = x->valuedouble;
    cJSON_Delete(lr);
    free(last);
  }
  *out = v;
  return 0;
}

/* warm_start {"experiment": ID}: that experiment's ended trials, with their
 * value of this experiment's metric at their last result, are written into
 * the config (warm_start.trials) and the spec before it is stored, so a
 * restart rebuilds the searcher from the stored config alone. Lock held.
 * 0 (resp untouched), 1 (an error was answered, nothing stored) or -ENOMEM. */
static int api_warm_start(struct server *s, cJSON *cfg, struct experiment_spec *spec,
                          struct api_resp *resp) {
  cJSON *ws = cJSON_GetObjectItemCaseSensitive(cfg, "warm_start");
  if (!ws) return 0;
  int64_t id = (int64_t)cJSON_GetObjectItemCaseSensitive(ws, "experiment")->valuedouble;
  struct srv_experiment *src = server_experiment(s, id);
  if (src && state_experiment_warm(s, src)) return -EIO; /* its trials are read below */
  if (!src) {
    api_error(resp, 400, "invalid_config", "warm_start.experiment",
              "warm_start.experiment: "
              "experiment %lld does not exist",
              (long long)id);
    return 1;
  }
  cJSON *arr = cJSON_CreateArray();
  if (!arr) return -ENOMEM;
  int nobj = spec->nobjectives > 1 ? spec->nobjectives : 1;
  for (int64_t i = 0; i < src->ntrials; i++) {
    const struct srv_trial *t = src->trials[i];
    if (t->status != TS_TERMINATED && t->status != TS_ERROR) continue;
    double v[SPEC_MAX_OBJECTIVES];
    cJSON *o = cJSON_CreateObject(), *vs = NULL;
    int ok = o && cJSON_AddItemToArray(arr, o);
    for (int j = 0; ok && j < nobj; j++)
      ok = !api_warm_value(s, src, t, nobj > 1 ? spec->objectives[j] : spec->metric, &v[j]);
    ok = ok && cJSON_AddItemToObject(o, "config", cJSON_Parse(t->config)) &&
         cJSON_AddItemToObject(o, "value",
                               isfinite(v[0]) ? cJSON_CreateNumber(v[0]) : cJSON_CreateNull());
    /* Several objectives: every one, in this experiment's metric order. */
    if (ok && nobj > 1) ok = (vs = cJSON_AddArrayToObject(o, "values")) != NULL;
    for (int j = 0; ok && vs && j < nobj; j++)
      ok = cJSON_AddItemToArray(vs, isfinite(v[j]) ? cJSON_CreateNumber(v[j]) : cJSON_CreateNull());
    if (!ok) {
      if (o && !o->prev) cJSON_Delete(o);
      cJSON_Delete(arr);
      return -ENOMEM;
    }
  }
  cJSON *copy = cJSON_Duplicate(arr, 1);
  if (!copy || !cJSON_AddItemToObject(ws, "trials", arr)) {
    cJSON_Delete(copy);
    cJSON_Delete(arr);
    return -ENOMEM;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(spec->warm_start, "trials");
  if (!cJSON_AddItemToObject(spec->warm_start, "trials", copy)) {
    cJSON_Delete(copy);
    return -ENOMEM;
  }
  log_info("warm start from experiment %lld: %d ended trial(s)", (long long)id,
           cJSON_GetArraySize(arr));
  return 0;
}

int api_experiment_create(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct experiment_spec spec;
  struct validate_error verr = {{0}, {0}};
  int dry = api_dry_run(req);
  if (dry < 0)
    return api_error(resp, 400, "invalid_query", "dry_run",
                     "dry_run must be true or false, "
                     "got '%s'",
                     req->query(req->conn, "dry_run"));
  cJSON *cfg = api_body_object(req, resp, 0), *configs = NULL, *out = NULL;
  char *text = NULL;
  int rc = 0;
  if (!cfg) return 0;
  rc = validate_experiment(cfg, &spec, &verr);
  if (rc == -EINVAL) {
    cJSON_Delete(cfg);
    return api_error(resp, 400, "invalid_config", verr.path, "%s: %s", verr.path, verr.message);
  }
  if (rc) goto done;
  if (!spec.has_seed) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = (uint64_t)(clock_wall_s() * 1e6);
    spec.seed = seed & ((1ULL << 53) - 1); /* stays exact as a JSON number */
  }
  if (dry) {
    /* What the searcher knows in advance (ARCHITECTURE.md#searchers): the
     * grid and random draws, tpe's random startup; the rest is decided
     * later. warm_start is not read for a dry run. */
    struct searcher *sr = NULL;
    int64_t later = 0;
    rc = searcher_create(&spec, &sr, &verr);
    if (!rc) rc = searcher_known(sr, &configs, &later);
    if (rc == -EINVAL) {
      rc = api_error(resp, 400, "invalid_config", verr.path, "%s: %s", verr.path, verr.message);
      searcher_free(sr);
      goto done_spec;
    }
    out = rc ? NULL : cJSON_CreateObject();
    if (!out || !cJSON_AddBoolToObject(out, "dry_run", 1) ||
        !cJSON_AddNumberToObject(out, "num_trials", (double)spec.num_trials) ||
        !cJSON_AddNumberToObject(out, "seed", (double)spec.seed) ||
        !cJSON_AddStringToObject(out, "search_alg", searcher_type_name(sr)) ||
        !cJSON_AddNumberToObject(out, "decided_later", (double)later)) {
      searcher_free(sr);
      rc = rc ? rc : -ENOMEM;
      goto done_spec;
    }
    searcher_free(sr);
    cJSON_AddItemToObject(out, "trials", configs);
    configs = NULL;
    rc = api_json(resp, 200, out);
    out = NULL;
    goto done_spec;
  }
  struct srv_experiment *e = NULL;
  server_lock(s);
  rc = api_warm_start(s, cfg, &spec, resp);
  if (!rc && !(text = jsonout_print(cfg))) rc = -ENOMEM;
  if (!rc) rc = state_add_experiment(s, text, &spec, &e, &resp->ticket);
  int64_t id = e ? e->id : 0, n = e ? e->num_trials : 0;
  if (!rc && e)
    log_info("experiment %lld '%s' created, %lld trial(s) planned", (long long)id, e->name,
             (long long)n);
  server_unlock(s);
  if (rc == 1) rc = 0; /* api_warm_start answered the error */
  if (rc || !e) goto done_spec;
  out = cJSON_CreateObject();
  if (!out || !cJSON_AddNumberToObject(out, "id", (double)id) ||
      !cJSON_AddNumberToObject(out, "num_trials", (double)n)) {
    rc = -ENOMEM;
    goto done_spec;
  }
  rc = api_json(resp, 201, out);
  out = NULL;
done_spec:
  validate_spec_free(&spec); /* emptied when the experiment took it */
done:
  cJSON_Delete(out);
  cJSON_Delete(configs);
  cJSON_Delete(cfg);
  free(text);
  return rc;
}

/* docs/protocol.md#experiment-control: q matches name, notes or a tag
 * (case-insensitive substring); tag matches one tag exactly. NULL or "":
 * anything. */
static int api_contains_ci(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; hay && *hay; hay++) {
    size_t k = 0;
    while (k < n && hay[k] && tolower((unsigned char)hay[k]) == tolower((unsigned char)needle[k]))
      k++;
    if (k == n) return 1;
  }
  return n == 0;
}

static int api_experiment_matches(const struct srv_experiment *e, const char *q, const char *tag) {
  cJSON *tags = e->tags ? cJSON_Parse(e->tags) : NULL;
  int ok = 1;
  if (q && *q) {
    ok = api_contains_ci(e->name, q) || api_contains_ci(e->notes, q);
    for (const cJSON *t = tags ? tags->child : NULL; !ok && t; t = t->next)
      ok = cJSON_IsString(t) && api_contains_ci(t->valuestring, q);
  }
  if (ok && tag && *tag) {
    ok = 0;
    for (const cJSON *t = tags ? tags->child : NULL; !ok && t; t = t->next)
      ok = cJSON_IsString(t) && !strcmp(t->valuestring, tag);
  }
  cJSON_Delete(tags);
  return ok;
}

int api_experiment_list(struct server *s, const struct api_req *req, struct api_resp *resp) {
  /* docs/protocol.md#pages: by id after the cursor, `limit` at a time. */
  int64_t limit, after, n = 0, last = 0;
  int more = 0;
  if (api_page_args(req, resp, 100, &limit, &after)) return 0;
  last = after;
  cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "experiments");
  if (!arr) {
    cJSON_Delete(root);
    return -ENOMEM;
  }
  server_lock(s);
  int rc = 0;
  const char *q = req->query(req->conn, "q"), *tag = req->query(req->conn, "tag");
  for (int64_t i = after; !rc && i < s->nexps; i++) {
    /* deleted ids stay as tombstones (ids are never reused); q/tag search */
    if (s->exps[i]->deleted || !api_experiment_matches(s->exps[i], q, tag)) continue;
    if (n == limit) {
      more = 1;
      break;
    }
    cJSON *e = api_experiment_json(s, s->exps[i], 1);
    if (!e)
      rc = -ENOMEM;
    else
      cJSON_AddItemToArray(arr, e), n++, last = s->exps[i]->id;
  }
  server_unlock(s);
  if (!rc) rc = api_page_next(root, more, last);
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  return api_json(resp, 200, root);
}

/* The experiment of the URL as it is (a cold one stays cold: its row,
 * counts and best are in memory). */
static struct srv_experiment *api_find_experiment_as_is(struct server *s, const struct api_req *req,
                                                        struct api_resp *resp) {
  struct srv_experiment *e = server_experiment(s, req->match->ids[0]);
  const char *why = e ? NULL : server_unusable(s, req->match->ids[0]);
  if (why)
    api_error(resp, 409, "unusable", req->path, "%s", why);
  else if (!e)
    api_error(resp, 404, "not_found", req->path, "experiment %lld does not exist",
              (long long)req->match->ids[0]);
  return e;
}

/* The experiment of the URL with its trials in memory (a cold one is
 * warmed: bounded memory, state_cold.c). */
static struct srv_experiment *api_find_experiment(struct server *s, const struct api_req *req,
                                                  struct api_resp *resp) {
  struct srv_experiment *e = api_find_experiment_as_is(s, req, resp);
  int rc = e ? state_experiment_warm(s, e) : 0;
  if (rc) {
    api_error(resp, 500, "internal", req->path,
              "experiment %lld: its trials could not be read "
              "(%d)",
              (long long)e->id, rc);
    return NULL;
  }
  return e;
}

int api_experiment_get(struct server *s, const struct api_req *req, struct api_resp *resp) {
  server_lock(s);
  struct srv_experiment *e = api_find_experiment_as_is(s, req, resp);
  cJSON *o = e ? api_experiment_json(s, e, 1) : NULL;
  server_unlock(s);
  if (!e) return 0;
  return o ? api_json(resp, 200, o) : -ENOMEM;
}

static int cmp_seq(const void *a, const void *b) {
  const struct srv_trial *x = *(struct srv_trial *const *)a, *y = *(struct srv_trial *const *)b;
  return (x->updated_seq > y->updated_seq) - (x->updated_seq < y->updated_seq);
}

int api_experiment_trials(struct server *s, const struct api_req *req, struct api_resp *resp) {
  /* docs/protocol.md#pages: 1000 a page by default; in creation order the
   * cursor is the index after the page (trials are only ever appended, so a
   * cursor walk sees each once while trials are added); with since, last_seq
   * is the position and next_cursor is null. */
  int64_t since, limit, offset, after;
  if (api_query_int(req, resp, "since", -1, INT64_MAX, -1, &since) ||
      api_page_args(req, resp, 1000, &limit, &after) ||
      api_query_int(req, resp, "offset", 0, INT64_MAX, 0, &offset))
    return 0;
  if (after > 0) offset = after;
  struct srv_trial **pick = NULL;
  struct api_trial_view *views = NULL;
  int64_t n = 0, first = 0, end = 0, last_seq = 0;
  int rc = 0;
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (!e) goto unlock;
  last_seq = s->seq;
  pick = malloc((size_t)(e->ntrials ? e->ntrials : 1) * sizeof *pick);
  if (!pick) {
    rc = -ENOMEM;
    goto unlock;
  }
  for (int64_t i = 0; i < e->ntrials; i++) {
    struct srv_trial *t = e->trials[i];
    if (since < 0 || t->updated_seq > since) pick[n++] = t;
  }
  /* Incremental reads go in change order so a limit never skips a change:
   * last_seq is then the newest change that was sent. */
  if (since >= 0) qsort(pick, (size_t)n, sizeof *pick, cmp_seq);
  first = offset < n ? offset : n;
  end = limit < n - first ? first + limit : n; /* offset + limit may overflow */
  if (since >= 0 && end < n && end > first) last_seq = pick[end - 1]->updated_seq;
  /* Copy under the lock, build the JSON after it: a big list must not hold
   * up the results being reported meanwhile. */
  views = calloc((size_t)(end > first ? end - first : 1), sizeof *views);
  if (!views) rc = -ENOMEM;
  for (int64_t i = first; !rc && i < end; i++)
    rc = api_trial_view_take(s, pick[i], &views[i - first]);
unlock:
  server_unlock(s);
  free(pick);
  /* Compact trials' last results, read after the lock, in one statement. */
  if (!rc && end > first) rc = api_trial_views_fill(s, views, (size_t)(end - first));
  cJSON *root = NULL, *arr = NULL;
  if (e && !rc) {
    root = cJSON_CreateObject();
    arr = cJSON_AddArrayToObject(root, "trials");
    if (!arr) rc = -ENOMEM;
  }
  for (int64_t i = first; e && !rc && i < end; i++) {
    cJSON *t = api_trial_view_json(&views[i - first]);
    if (!t)
      rc = -ENOMEM;
    else
      cJSON_AddItemToArray(arr, t);
  }
  for (int64_t i = first; views && i < end; i++) api_trial_view_drop(&views[i - first]);
  free(views);
  if (e && !rc &&
      (!jsonout_add_int64(root, "last_seq", last_seq) ||
       !cJSON_AddNumberToObject(root, "total", (double)n)))
    rc = -ENOMEM;
  if (e && !rc) rc = api_page_next(root, since < 0 && end < n, end);
  if (!e || rc) {
    cJSON_Delete(root);
    return rc;
  }
  return api_json(resp, 200, root);
}

struct results_ctx {
  cJSON *arr;
  int64_t last;
  int with_seq;
};

static int api_add_result(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  struct results_ctx *rc = ctx;
  cJSON *v = cJSON_Parse(data);
  if (!v) return -ENOMEM;
  if (rc->with_seq) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddNumberToObject(o, "seq", (double)seq) ||
        !cJSON_AddNumberToObject(o, "trial_id", (double)trial_id)) {
      cJSON_Delete(o);
      cJSON_Delete(v);
      return -ENOMEM;
    }
    cJSON_AddItemToObject(o, "result", v);
    v = o;
  }
  cJSON_AddItemToArray(rc->arr, v);
  rc->last = seq;
  return 0;
}

int api_experiment_results(struct server *s, const struct api_req *req, struct api_resp *resp) {
  int64_t since, limit;
  if (api_query_int(req, resp, "since", 0, INT64_MAX, 0, &since) ||
      api_query_int(req, resp, "limit", 1, 1000000, 100000, &limit))
    return 0;
  server_lock(s);
  struct srv_experiment *e = api_find_experiment_as_is(s, req, resp); /* results: SQLite's */
  int64_t upto = s->seq;
  server_unlock(s);
  if (!e) return 0;
  /* Everything numbered up to `upto` was queued before we looked: once it is
   * committed the database holds all of it, so last_seq = upto skips nothing. */
  commit_flush(s->commit);
  cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "results");
  if (!arr) {
    cJSON_Delete(root);
    return -ENOMEM;
  }
  struct results_ctx ctx = {arr, since, 1};
  int64_t got = 0;
  int rc = store_experiment_results(s->store, e->id, since, limit, api_add_result, &ctx);
  got = cJSON_GetArraySize(arr);
  int64_t last = got == limit ? ctx.last : upto;
  if (!rc && !jsonout_add_int64(root, "last_seq", last > since ? last : since)) rc = -ENOMEM;
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  return api_json(resp, 200, root);
}

struct metric_ctx {
  struct server *s;
  struct srv_experiment *e;
  double *vals; /* all values, grouped by trial */
  size_t n, cap;
  int64_t *trial_of; /* trial id of each value */
};

static int api_collect_metric(void *ctx, int64_t trial_id, int has, double v) {
  struct metric_ctx *mc = ctx;
  if (!has) return 0;
  if (mc->n == mc->cap) {
    size_t nc = mc->cap ? mc->cap * 2 : 1024;
    double *a = realloc(mc->vals, nc * sizeof *a);
    if (!a) return -ENOMEM;
    mc->vals = a;
    int64_t *b = realloc(mc->trial_of, nc * sizeof *b);
    if (!b) return -ENOMEM;
    mc->trial_of = b;
    mc->cap = nc;
  }
  mc->vals[mc->n] = v;
  mc->trial_of[mc->n++] = trial_id;
  return 0;
}

/* Best by another metric than the experiment's: read from SQLite. */
static int api_best_other(struct server *s, struct srv_experiment *e, const char *metric,
                          enum best_scope scope, enum spec_mode mode, int64_t *trial_id,
                          double *value, const struct api_viol *viol) {
  struct metric_ctx mc = {s, e, NULL, 0, 0, NULL};
  struct best_series *ser = NULL;
  int rc = store_experiment_metric(s->store, e->id, metric, api_collect_metric, &mc);
  if (rc) goto out;
  rc = -ENOENT;
  if (!mc.n) goto out;
  rc = -ENOMEM;
  if (!(ser = calloc(mc.n, sizeof *ser))) goto out;
  size_t k = 0;
  for (size_t i = 0; i < mc.n; i++) {
    if (!k || ser[k - 1].trial_id != mc.trial_of[i])
      ser[k++] = (struct best_series){mc.trial_of[i], &mc.vals[i], 0, NULL};
    ser[k - 1].n++;
  }
  /* Outcome constraints: the infeasible under the scope are left out. */
  for (size_t i = 0; viol && viol->ids && i < k; i++) {
    double v = api_viol_of(viol, ser[i].trial_id);
    constraint_drop_series(&ser[i], 1, &v);
  }
  size_t idx;
  rc = best_pick(ser, k, scope, mode, &idx, value);
  if (!rc) *trial_id = ser[idx].trial_id;
out:
  free(ser);
  free(mc.vals);
  free(mc.trial_of);
  return rc;
}

static int api_best_locked(struct server *s, const struct api_req *req, struct api_resp *resp,
                           const char *metric, const char *mode_s, enum best_scope scope,
                           const struct api_viol *viol);
static int api_viol_take(struct server *s, const struct api_req *req, struct api_resp *resp,
                         enum best_scope scope, struct api_viol *out);

int api_experiment_best(struct server *s, const struct api_req *req, struct api_resp *resp) {
  const char *metric = req->query(req->conn, "metric");
  const char *mode_s = req->query(req->conn, "mode");
  const char *scope_s = req->query(req->conn, "scope");
  enum best_scope scope;
  if (best_scope_parse(scope_s, &scope))
    return api_error(resp, 400, "invalid_query", "scope",
                     "scope must be one of last, avg, "
                     "last-5-avg, last-10-avg, all; got '%s'",
                     scope_s);
  if (mode_s && strcmp(mode_s, "min") && strcmp(mode_s, "max"))
    return api_error(resp, 400, "invalid_query", "mode", "mode must be min or max, got '%s'",
                     mode_s);
  if (metric && (!*metric || strlen(metric) > SPEC_NAME_MAX))
    return api_error(resp, 400, "invalid_query", "metric", "metric must be 1 to %d characters",
                     SPEC_NAME_MAX);
  /* Outcome constraints: which trials are feasible under the scope, read
   * first (SQLite, without the lock). */
  struct api_viol viol;
  int vrc = api_viol_take(s, req, resp, scope, &viol);
  if (vrc) return vrc == -ENOENT ? 0 : vrc;
  int rc = api_best_locked(s, req, resp, metric, mode_s, scope, &viol);
  free(viol.ids);
  free(viol.v);
  return rc;
}

/* api_experiment_best once its query is checked and the violations read. */
static int api_best_locked(struct server *s, const struct api_req *req, struct api_resp *resp,
                           const char *metric, const char *mode_s, enum best_scope scope,
                           const struct api_viol *viol) {
  enum spec_mode mode;
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (!e) {
    server_unlock(s);
    return 0;
  }
  int constrained = e->spec.nconstraints > 0;
  if (!metric && !e->spec.has_metric) {
    server_unlock(s);
    return api_error(resp, 400, "invalid_query", "metric",
                     "experiment %lld has no metric: "
                     "pass ?metric=NAME&mode=min|max",
                     (long long)e->id);
  }
  if (!metric && e->spec.nobjectives > 1) {
    server_unlock(s);
    return api_error(resp, 400, "invalid_query", "metric",
                     "experiment %lld has %d objectives, so no single best trial: "
                     "GET /api/v1/experiments/%lld/pareto for the Pareto front, or pass "
                     "?metric=NAME for the best by one of them",
                     (long long)e->id, e->spec.nobjectives, (long long)e->id);
  }
  mode = mode_s               ? (!strcmp(mode_s, "max") ? SPEC_MODE_MAX : SPEC_MODE_MIN)
         : e->spec.has_metric ? e->spec.mode
                              : SPEC_MODE_MIN;
  /* Several objectives: the mode of the one named. */
  for (int i = 1; !mode_s && metric && i < e->spec.nobjectives; i++)
    if (!strcmp(metric, e->spec.objectives[i])) mode = e->spec.modes[i];
  int own = !metric || (e->spec.has_metric && !strcmp(metric, e->spec.metric));
  char name[SPEC_NAME_MAX + 1];
  snprintf(name, sizeof name, "%s", own ? e->spec.metric : metric);
  int64_t trial_id = 0;
  double value = 0;
  int key = own ? -1 : state_key_index(e, name);
  /* A key never seen cannot have values unless the key table overflowed
   * or a compact trial (bounded memory) has it in SQLite only. */
  int from_store = !own && (e->keys_overflow || api_any_compact(e));
  int rc = from_store          ? 0
           : (!own && key < 0) ? -ENOENT
                               : api_best_memory(s, e, key, scope, mode, &trial_id, &value, viol);
  server_unlock(s);
  if (from_store) {
    commit_flush(s->commit);
    rc = api_best_other(s, e, name, scope, mode, &trial_id, &value, viol);
  }
  if (rc == -ENOENT)
    return api_error(resp, 404, "no_result", "metric",
                     "no %strial of experiment %lld has a "
                     "finite '%s' (scope %s)",
                     constrained ? "feasible " : "", (long long)e->id, name,
                     best_scope_name(scope));
  if (rc) return rc;
  server_lock(s);
  /* The lock was let go meanwhile: the trial may have been deleted (or its
   * experiment gone cold: read back). */
  struct srv_trial *bt = state_trial_ref(s, trial_id);
  cJSON *o = bt ? cJSON_CreateObject() : NULL, *t = bt ? api_trial_json(s, bt) : NULL;
  server_unlock(s);
  if (!bt)
    return api_error(resp, 404, "not_found", req->path, "trial %lld, the best, no longer exists",
                     (long long)trial_id);
  if (!o || !t || !cJSON_AddNumberToObject(o, "trial_id", (double)trial_id) ||
      !cJSON_AddStringToObject(o, "metric", name) ||
      !cJSON_AddStringToObject(o, "mode", mode == SPEC_MODE_MAX ? "max" : "min") ||
      !cJSON_AddStringToObject(o, "scope", best_scope_name(scope)) ||
      !cJSON_AddNumberToObject(o, "value", value) ||
      (constrained && !cJSON_AddBoolToObject(o, "feasible", 1))) {
    cJSON_Delete(o);
    cJSON_Delete(t);
    return -ENOMEM;
  }
  cJSON_AddItemToObject(o, "trial", t);
  return api_json(resp, 200, o);
}

/* A result without a number for the objective counts as NaN (as null does
 * in memory): the trial has no score where it falls in the scope's window. */
static int api_collect_objective(void *ctx, int64_t trial_id, int has, double v) {
  return api_collect_metric(ctx, trial_id, 1, has ? v : NAN);
}

/* Scores of objective j for the trials ids[0..n) (sorted) into
 * scores[i * k + j], from SQLite (results of compact trials are there only;
 * the same reading as /best by another metric). */
static int api_pareto_scores(struct server *s, int64_t exp_id, const char *metric,
                             enum spec_mode mode, enum best_scope scope, const int64_t *ids,
                             size_t n, int k, int j, double *scores) {
  struct metric_ctx mc = {s, NULL, NULL, 0, 0, NULL};
  int rc = store_experiment_metric(s->store, exp_id, metric, api_collect_objective, &mc);
  for (size_t a = 0; !rc && a < mc.n;) {
    size_t b = a;
    while (b < mc.n && mc.trial_of[b] == mc.trial_of[a]) b++;
    const int64_t *at = bsearch(&mc.trial_of[a], ids, n, sizeof *ids, api_cmp_id);
    double v;
    if (at && !best_score(&mc.vals[a], b - a, scope, mode, &v)) scores[(at - ids) * k + j] = v;
    a = b;
  }
  free(mc.vals);
  free(mc.trial_of);
  return rc;
}

/* Outcome constraints: the total violation of each of the trials ids[0..n)
 * (sorted) under scope, from SQLite as /pareto scores its objectives (a
 * trial without a constrained value in the scope's window: +inf). spec:
 * only its constraints are read. */
static int api_violations(struct server *s, int64_t exp_id, const struct experiment_spec *spec,
                          enum best_scope scope, const int64_t *ids, size_t n, double *viol) {
  int k = spec->nconstraints;
  double *cs = malloc((n ? n : 1) * (size_t)(k ? k : 1) * sizeof *cs);
  if (!cs) return -ENOMEM;
  for (size_t i = 0; i < n * (size_t)k; i++) cs[i] = NAN;
  int rc = 0;
  for (int j = 0; !rc && j < k; j++)
    rc = api_pareto_scores(s, exp_id, spec->constraints[j].metric,
                           constraint_mode(&spec->constraints[j]), scope, ids, n, k, j, cs);
  for (size_t i = 0; !rc && i < n; i++) viol[i] = constraint_total(spec, &cs[i * (size_t)k]);
  free(cs);
  return rc;
}

/* The experiment's trial ids (sorted) and their violations under scope
 * (api_violations) into *out, the caller's to free; 0 (nothing) without
 * constraints. Takes the lock; -ENOENT (resp filled) when the experiment is
 * not found. */
static int api_viol_take(struct server *s, const struct api_req *req, struct api_resp *resp,
                         enum best_scope scope, struct api_viol *out) {
  struct experiment_spec cons;
  memset(out, 0, sizeof *out);
  memset(&cons, 0, sizeof cons);
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (!e) {
    server_unlock(s);
    return -ENOENT;
  }
  int64_t exp_id = e->id;
  size_t n = (size_t)e->ntrials;
  cons.nconstraints = e->spec.nconstraints;
  memcpy(cons.constraints, e->spec.constraints, sizeof cons.constraints);
  int rc = 0;
  if (cons.nconstraints) {
    out->ids = malloc((n ? n : 1) * sizeof *out->ids);
    out->v = malloc((n ? n : 1) * sizeof *out->v);
    rc = out->ids && out->v ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) out->ids[i] = e->trials[i]->id;
  }
  server_unlock(s);
  if (!rc && cons.nconstraints) {
    out->n = n;
    qsort(out->ids, n, sizeof *out->ids, api_cmp_id);
    commit_flush(s->commit);
    rc = api_violations(s, exp_id, &cons, scope, out->ids, n, out->v);
  }
  if (rc) {
    free(out->ids);
    free(out->v);
    memset(out, 0, sizeof *out);
  }
  return rc;
}

/* An experiment's trials scored by every objective under a scope, the
 * infeasible ones blanked: what the front (/pareto) and a trial's rank
 * (GET /trials/{id}) are computed from. Taken under the model lock (the
 * spec and the trial ids), read without it (SQLite). */
struct api_scored {
  int64_t exp_id;
  int k;
  char names[SPEC_MAX_OBJECTIVES][SPEC_NAME_MAX + 1];
  enum spec_mode modes[SPEC_MAX_OBJECTIVES];
  struct experiment_spec cons; /* its constraints only */
  size_t n, ninfeasible;       /* infeasible: scored for every objective, yet blanked */
  int64_t *ids;                /* sorted */
  double *scores;              /* n x k, NaN where unscored or infeasible */
};

/* Lock held. */
static int api_scored_take(const struct srv_experiment *e, struct api_scored *sc) {
  memset(sc, 0, sizeof *sc);
  sc->exp_id = e->id;
  sc->k = e->spec.nobjectives;
  memcpy(sc->names, e->spec.objectives, sizeof sc->names);
  memcpy(sc->modes, e->spec.modes, sizeof sc->modes);
  sc->cons.nconstraints = e->spec.nconstraints;
  memcpy(sc->cons.constraints, e->spec.constraints, sizeof sc->cons.constraints);
  sc->n = (size_t)e->ntrials;
  sc->ids = malloc((sc->n ? sc->n : 1) * sizeof *sc->ids);
  sc->scores = malloc((sc->n ? sc->n : 1) * (size_t)sc->k * sizeof *sc->scores);
  if (!sc->ids || !sc->scores) return -ENOMEM;
  for (size_t i = 0; i < sc->n; i++) sc->ids[i] = e->trials[i]->id;
  return 0;
}

/* Lock not held. */
static int api_scored_read(struct server *s, struct api_scored *sc, enum best_scope scope) {
  size_t n = sc->n, k = (size_t)sc->k;
  qsort(sc->ids, n, sizeof *sc->ids, api_cmp_id);
  for (size_t i = 0; i < n * k; i++) sc->scores[i] = NAN;
  commit_flush(s->commit);
  int rc = 0;
  for (int j = 0; !rc && j < sc->k; j++)
    rc = api_pareto_scores(s, sc->exp_id, sc->names[j], sc->modes[j], scope, sc->ids, n, sc->k, j,
                           sc->scores);
  if (rc || !sc->cons.nconstraints) return rc;
  /* Outcome constraints: an infeasible trial (under the same scope) is on
   * no front and has no rank. */
  double *viol = malloc((n ? n : 1) * sizeof *viol);
  if (!viol) return -ENOMEM;
  rc = api_violations(s, sc->exp_id, &sc->cons, scope, sc->ids, n, viol);
  for (size_t i = 0; !rc && i < n; i++) {
    int scored = 1;
    for (size_t j = 0; j < k; j++) scored &= isfinite(sc->scores[i * k + j]);
    sc->ninfeasible += scored && viol[i] != 0;
  }
  if (!rc) constraint_drop_points(sc->scores, n, sc->k, viol);
  free(viol);
  return rc;
}

static void api_scored_free(struct api_scored *sc) {
  free(sc->ids);
  free(sc->scores);
}

int api_experiment_pareto(struct server *s, const struct api_req *req, struct api_resp *resp) {
  const char *scope_s = req->query(req->conn, "scope");
  enum best_scope scope;
  if (best_scope_parse(scope_s, &scope))
    return api_error(resp, 400, "invalid_query", "scope",
                     "scope must be one of last, avg, "
                     "last-5-avg, last-10-avg, all; got '%s'",
                     scope_s);
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (!e) {
    server_unlock(s);
    return 0;
  }
  if (!e->spec.has_metric) {
    server_unlock(s);
    return api_error(resp, 400, "invalid_query", req->path,
                     "experiment %lld has no metric: a Pareto front needs its objectives "
                     "(metric and mode as lists)",
                     (long long)e->id);
  }
  struct api_scored sc;
  int rc = api_scored_take(e, &sc);
  size_t n = sc.n;
  int k = sc.k;
  unsigned char *on = malloc(n ? n : 1);
  if (!rc && !on) rc = -ENOMEM;
  server_unlock(s);
  cJSON *o = NULL, *arr = NULL, *m = NULL, *d = NULL;
  size_t nf = 0;
  if (rc) goto out;
  rc = api_scored_read(s, &sc, scope);
  if (!rc) rc = pareto_front(sc.scores, n, k, sc.modes, on, &nf);
  if (rc) goto out;
  rc = -ENOMEM;
  if (!(o = cJSON_CreateObject()) ||
      !cJSON_AddNumberToObject(o, "experiment_id", (double)sc.exp_id) ||
      !(m = cJSON_AddArrayToObject(o, "metrics")) || !(d = cJSON_AddArrayToObject(o, "modes")) ||
      !cJSON_AddStringToObject(o, "scope", best_scope_name(scope)) ||
      (sc.cons.nconstraints && !cJSON_AddNumberToObject(o, "infeasible", (double)sc.ninfeasible)) ||
      !(arr = cJSON_AddArrayToObject(o, "trials")))
    goto out;
  for (int j = 0; j < k; j++)
    if (!cJSON_AddItemToArray(m, cJSON_CreateString(sc.names[j])) ||
        !cJSON_AddItemToArray(d, cJSON_CreateString(sc.modes[j] == SPEC_MODE_MAX ? "max" : "min")))
      goto out;
  if (api_pareto_summary(s, o, sc.exp_id, sc.ids, sc.scores, on, n, k, sc.modes)) goto out;
  server_lock(s);
  rc = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    if (!on[i]) continue;
    /* The lock was let go meanwhile: a deleted trial is left out. */
    struct srv_trial *t = state_trial_ref(s, sc.ids[i]);
    if (!t) continue;
    cJSON *row = cJSON_CreateObject(), *vals = NULL;
    int ok = row && cJSON_AddItemToArray(arr, row) &&
             cJSON_AddNumberToObject(row, "trial_id", (double)t->id) &&
             cJSON_AddStringToObject(row, "status", trial_status_names[t->status]) &&
             cJSON_AddItemToObject(row, "config", api_parsed_or_null(t->config)) &&
             (vals = cJSON_AddObjectToObject(row, "values")) &&
             (!sc.cons.nconstraints || cJSON_AddBoolToObject(row, "feasible", 1));
    for (int j = 0; ok && j < k; j++)
      ok = cJSON_AddNumberToObject(vals, sc.names[j], sc.scores[i * (size_t)k + (size_t)j]) != NULL;
    if (!ok) rc = -ENOMEM; /* row, once made, is arr's */
  }
  server_unlock(s);
out:
  api_scored_free(&sc);
  free(on);
  if (rc) {
    cJSON_Delete(o);
    return rc;
  }
  return api_json(resp, 200, o);
}

int api_pareto_rank_add(struct server *s, int64_t trial_id, cJSON *o) {
  server_lock(s);
  struct srv_trial *t = state_trial_ref(s, trial_id);
  struct srv_experiment *e = t ? server_experiment(s, t->experiment_id) : NULL;
  if (!e || e->spec.nobjectives < 2) {
    server_unlock(s);
    return 0;
  }
  struct api_scored sc;
  int rc = state_experiment_warm(s, e);
  if (!rc)
    rc = api_scored_take(e, &sc);
  else
    memset(&sc, 0, sizeof sc);
  server_unlock(s);
  /* Its rank among its experiment's trials by their last results. */
  int rank = 0;
  if (!rc) rc = api_scored_read(s, &sc, BEST_SCOPE_LAST);
  const int64_t *at = rc ? NULL : bsearch(&trial_id, sc.ids, sc.n, sizeof *sc.ids, api_cmp_id);
  if (at) rc = hypervolume_rank_of(sc.scores, sc.n, sc.k, sc.modes, (size_t)(at - sc.ids), &rank);
  api_scored_free(&sc);
  if (rc) return rc;
  cJSON *v = rank ? cJSON_AddNumberToObject(o, "pareto_rank", rank)
                  : cJSON_AddNullToObject(o, "pareto_rank");
  return v ? 0 : -ENOMEM;
}

int api_experiment_cancel(struct server *s, const struct api_req *req, struct api_resp *resp) {
  int rc = 0;
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (!e) goto out;
  if (e->status != ES_RUNNING && e->status != ES_PAUSED) {
    api_error(resp, 409, "not_running", req->path, "experiment %lld is already %s",
              (long long)e->id, exp_status_names[e->status]);
    goto out;
  }
  /* Documented choice: cancelling ends every unfinished trial TERMINATED at
   * once; workers learn it from their next heartbeat or result (stop). */
  int64_t stopped = e->ntrials - e->counts[TS_TERMINATED] - e->counts[TS_ERROR];
  rc = state_experiment_event(s, e, EE_CANCEL, "cancelled by user", &resp->ticket);
  if (!rc) {
    log_info("experiment %lld cancelled, %lld trial(s) stopped", (long long)e->id,
             (long long)stopped);
    cJSON *o = api_experiment_json(s, e, 0);
    rc = o ? api_json(resp, 200, o) : -ENOMEM;
  }
out:
  server_unlock(s);
  return rc;
}

/* ---- a user's control: pause, resume, PATCH, delete (state/control.c) */

static int api_exp_reply(struct server *s, struct srv_experiment *e, struct api_resp *resp) {
  cJSON *o = api_experiment_json(s, e, 1);
  return o ? api_json(resp, 200, o) : -ENOMEM;
}

static int api_pause_resume(struct server *s, const struct api_req *req, struct api_resp *resp,
                            int pause) {
  int rc = 0;
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (!e) goto out;
  rc = pause ? control_pause(s, e, &resp->ticket) : control_resume(s, e, &resp->ticket);
  if (rc == -EINVAL) {
    rc = api_error(resp, 409, pause ? "not_running" : "not_paused", req->path,
                   "experiment %lld is %s: only a %s experiment can be %s", (long long)e->id,
                   exp_status_names[e->status], pause ? "RUNNING" : "PAUSED",
                   pause ? "paused" : "resumed");
    goto out;
  }
  if (!rc) rc = api_exp_reply(s, e, resp);
out:
  server_unlock(s);
  return rc;
}

int api_experiment_pause(struct server *s, const struct api_req *req, struct api_resp *resp) {
  return api_pause_resume(s, req, resp, 1);
}

int api_experiment_resume(struct server *s, const struct api_req *req, struct api_resp *resp) {
  return api_pause_resume(s, req, resp, 0);
}

static int api_is_int(const cJSON *c, double lo, double hi) {
  return cJSON_IsNumber(c) && c->valuedouble >= lo && c->valuedouble <= hi &&
         c->valuedouble == floor(c->valuedouble);
}

/* The PATCH body into p (strings point into b). 0, or -EINVAL after a 400
 * naming the field. */
static int api_patch_parse(const cJSON *b, struct control_patch *p, char **tags_text,
                           struct api_resp *resp) {
  memset(p, 0, sizeof *p);
  for (const cJSON *c = b->child; c; c = c->next) {
    const char *k = c->string;
    if (!strcmp(k, "num_samples")) {
      if (!api_is_int(c, 1, SPEC_NUM_SAMPLES_MAX))
        return api_error(resp, 400, "invalid_field", k,
                         "num_samples must be an integer in "
                         "[1, %d]",
                         SPEC_NUM_SAMPLES_MAX),
               -EINVAL;
      p->has_num_samples = 1;
      p->num_samples = (int64_t)c->valuedouble;
    } else if (!strcmp(k, "max_concurrent_trials")) {
      if (!api_is_int(c, 0, 1e9))
        return api_error(resp, 400, "invalid_field", k,
                         "max_concurrent_trials must be an "
                         "integer >= 0 (0: unlimited)"),
               -EINVAL;
      p->has_max_concurrent = 1;
      p->max_concurrent = (int64_t)c->valuedouble;
    } else if (!strcmp(k, "priority")) {
      if (!cJSON_IsNumber(c) || !(c->valuedouble > 0) || !(c->valuedouble <= 1e6))
        return api_error(resp, 400, "invalid_field", k,
                         "priority must be a number in "
                         "(0, 1e6]"),
               -EINVAL;
      p->has_priority = 1;
      p->priority = c->valuedouble;
    } else if (!strcmp(k, "notes")) {
      if (!cJSON_IsString(c) || strlen(c->valuestring) > 4096)
        return api_error(resp, 400, "invalid_field", k,
                         "notes must be a string of at most "
                         "4096 bytes"),
               -EINVAL;
      p->has_notes = 1;
      p->notes = c->valuestring;
    } else if (!strcmp(k, "tags")) {
      int n = cJSON_IsArray(c) ? cJSON_GetArraySize(c) : -1;
      if (n < 0 || n > 32)
        return api_error(resp, 400, "invalid_field", k,
                         "tags must be an array of at most 32 "
                         "strings"),
               -EINVAL;
      int i = 0;
      for (const cJSON *t = c->child; t; t = t->next, i++) {
        size_t len = cJSON_IsString(t) ? strlen(t->valuestring) : 0;
        if (len < 1 || len > 64) {
          char where[32];
          snprintf(where, sizeof where, "tags[%d]", i);
          return api_error(resp, 400, "invalid_field", where,
                           "a tag is a string of 1 to 64 "
                           "bytes"),
                 -EINVAL;
        }
      }
      if (!(*tags_text = jsonout_print(c))) return -ENOMEM;
      p->has_tags = 1;
      p->tags = *tags_text;
    } else if (!strcmp(k, "scheduler")) {
      if (!cJSON_IsObject(c))
        return api_error(resp, 400, "invalid_field", k,
                         "scheduler must be an object "
                         "{\"max_t\": T}"),
               -EINVAL;
      for (const cJSON *m = c->child; m; m = m->next) {
        if (strcmp(m->string, "max_t")) {
          char where[80];
          snprintf(where, sizeof where, "scheduler.%.60s", m->string);
          return api_error(resp, 400, "invalid_field", where,
                           "only scheduler.max_t can be "
                           "changed"),
                 -EINVAL;
        }
        if (!cJSON_IsNumber(m) || !(m->valuedouble > 0) || !isfinite(m->valuedouble))
          return api_error(resp, 400, "invalid_field", "scheduler.max_t",
                           "max_t must be a "
                           "finite number > 0"),
                 -EINVAL;
        p->has_max_t = 1;
        p->max_t = m->valuedouble;
      }
    } else {
      return api_error(resp, 400, "invalid_field", k,
                       "%s cannot be changed (PATCH takes "
                       "num_samples, max_concurrent_trials, priority, notes, tags, "
                       "scheduler.max_t)",
                       k),
             -EINVAL;
    }
  }
  return 0;
}

int api_experiment_patch(struct server *s, const struct api_req *req, struct api_resp *resp) {
  cJSON *b = api_body_object(req, resp, 0);
  if (!b) return 0;
  struct control_patch p;
  char *tags = NULL;
  int rc = api_patch_parse(b, &p, &tags, resp);
  if (rc) {
    rc = rc == -EINVAL ? 0 : rc;
    goto done;
  }
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (e) {
    char field[128], err[512];
    rc = control_patch(s, e, &p, field, sizeof field, err, sizeof err, &resp->ticket);
    if (rc == -EINVAL)
      rc = api_error(resp, 400, "invalid_field", field, "%s", err);
    else if (rc == -EBUSY)
      rc = api_error(resp, 409, "cancelled", field, "%s", err);
    else if (!rc)
      rc = api_exp_reply(s, e, resp);
    if (!rc && resp->status == 200) log_info("experiment %lld edited", (long long)e->id);
  }
  server_unlock(s);
done:
  free(tags);
  cJSON_Delete(b);
  return rc;
}

int api_experiment_delete(struct server *s, const struct api_req *req, struct api_resp *resp) {
  const char *f = req->query(req->conn, "force");
  int force = 0;
  if (f && (!strcmp(f, "1") || !strcmp(f, "true")))
    force = 1;
  else if (f && strcmp(f, "0") && strcmp(f, "false"))
    return api_error(resp, 400, "invalid_query", "force", "force must be 1, true, 0 or false");
  int rc = 0;
  server_lock(s);
  struct srv_experiment *e = api_find_experiment(s, req, resp);
  if (!e) goto out;
  if (e->counts[TS_RUNNING] > 0 && !force) {
    rc = api_error(resp, 409, "running", req->path,
                   "experiment %lld has %lld running "
                   "trial(s): pause or cancel it first, or delete with ?force=1",
                   (long long)e->id, (long long)e->counts[TS_RUNNING]);
    goto out;
  }
  cJSON *o = api_experiment_json(s, e, 1);
  if (!o) {
    rc = -ENOMEM;
    goto out;
  }
  rc = control_delete(s, e, force, &resp->ticket);
  if (!rc && !cJSON_AddTrueToObject(o, "deleted")) rc = -ENOMEM;
  if (rc)
    cJSON_Delete(o);
  else
    rc = api_json(resp, 200, o);
out:
  server_unlock(s);
  return rc;
}
