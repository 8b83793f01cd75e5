/* median: Ray Tune's MedianStoppingRule as a pure state machine.
 * tests/server/unit/gen_median_vectors.py transcribes Ray's
 * median_stopping_rule.py; test_median.c checks this file against it. */
#include "median.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_ops.h"

struct med_trial {
  int64_t id;
  int n, cap;
  double *t, *v;    /* every result it reported, in order (Ray's _results) */
  int stopped;      /* in Ray's _stopped_trials: later results are ignored */
  int64_t stop_seq; /* pause order, for resuming FIFO */
  int resumed;
};

struct median {
  struct median_params p;
  double sign; /* 1 max, -1 min: larger is better inside */
  struct med_trial *tr;
  int n, cap;
  int64_t stops;
};

void median_params_default(struct median_params *p) {
  p->grace_period = 60;
  p->min_samples_required = 3;
  p->min_time_slice = 0;
  p->hard_stop = 1;
}

int median_check(const cJSON *sched, const char *path, struct median_params *p,
                 struct validate_error *err) {
  static const char *const keys[] = {
      "type",      "time_attr", "grace_period", "min_samples_required", "min_time_slice",
      "hard_stop", NULL};
  const cJSON *item, *v;
  median_params_default(p);
  cJSON_ArrayForEach(item, sched) {
    int ok = 0;
    for (int i = 0; keys[i] && !ok; i++) ok = strcmp(item->string, keys[i]) == 0;
    if (!ok)
      return spec_fail_at(err, path, item->string,
                          "unknown field (median_stopping takes type, time_attr, grace_period, "
                          "min_samples_required, min_time_slice, hard_stop)");
  }
  v = cJSON_GetObjectItemCaseSensitive(sched, "grace_period");
  if (v && !(cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0))
    return spec_fail_at(err, path, "grace_period", "must be a finite number >= 0");
  if (v) p->grace_period = v->valuedouble;
  v = cJSON_GetObjectItemCaseSensitive(sched, "min_time_slice");
  if (v && !(cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0))
    return spec_fail_at(err, path, "min_time_slice", "must be a finite number >= 0");
  if (v) p->min_time_slice = v->valuedouble;
  v = cJSON_GetObjectItemCaseSensitive(sched, "min_samples_required");
  if (v && !(cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= 1 &&
             v->valuedouble <= 1e6))
    return spec_fail_at(err, path, "min_samples_required", "must be an integer from 1 to 1000000");
  if (v) p->min_samples_required = (int64_t)v->valuedouble;
  v = cJSON_GetObjectItemCaseSensitive(sched, "hard_stop");
  if (v && !cJSON_IsBool(v)) return spec_fail_at(err, path, "hard_stop", "must be true or false");
  if (v) p->hard_stop = cJSON_IsTrue(v);
  return 0;
}

int median_create(const struct median_params *p, enum spec_mode mode, struct median **out) {
  struct median *m;
  *out = NULL;
  if (!p || p->min_samples_required < 1) return -EINVAL;
  m = calloc(1, sizeof *m);
  if (!m) return -ENOMEM;
  m->p = *p;
  m->sign = mode == SPEC_MODE_MAX ? 1.0 : -1.0;
  *out = m;
  return 0;
}

void median_free(struct median *m) {
  if (!m) return;
  for (int i = 0; i < m->n; i++) {
    free(m->tr[i].t);
    free(m->tr[i].v);
  }
  free(m->tr);
  free(m);
}

size_t median_mem_bytes(const struct median *m) {
  size_t n;
  if (!m) return 0;
  n = sizeof *m + (size_t)m->cap * sizeof *m->tr;
  for (int i = 0; i < m->n; i++) n += 2 * (size_t)m->tr[i].cap * sizeof *m->tr[i].t;
  return n;
}

void median_outcome_clear(struct median_outcome *o) {
  cJSON_Delete(o->record);
  memset(o, 0, sizeof *o);
}

static struct med_trial *get(struct median *m, int64_t id, int create) {
  for (int i = 0; i < m->n; i++)
    if (m->tr[i].id == id) return &m->tr[i];
  if (!create) return NULL;
  if (m->n == m->cap) {
    int cap = m->cap ? m->cap * 2 : 16;
    struct med_trial *nt = realloc(m->tr, (size_t)cap * sizeof *nt);
    if (!nt) return NULL;
    m->tr = nt;
    m->cap = cap;
  }
  memset(&m->tr[m->n], 0, sizeof m->tr[m->n]);
  m->tr[m->n].id = id;
  return &m->tr[m->n++];
}

static int append(struct med_trial *t, double time, double v) {
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 8;
    double *nt = realloc(t->t, (size_t)cap * sizeof *nt), *nv;
    if (!nt) return -ENOMEM;
    t->t = nt;
    nv = realloc(t->v, (size_t)cap * sizeof *nv);
    if (!nv) return -ENOMEM;
    t->v = nv;
    t->cap = cap;
  }
  t->t[t->n] = time;
  t->v[t->n] = v;
  t->n++;
  return 0;
}

static int dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static cJSON *result_record(double t, double v) {
  cJSON *r = cJSON_CreateObject();
  if (r && (!cJSON_AddNumberToObject(r, "t", t) || !cJSON_AddNumberToObject(r, "v", v))) {
    cJSON_Delete(r);
    return NULL;
  }
  return r;
}

/* Ray's _running_mean: the mean of the trial's values with
 * grace_period <= t' <= t (NaN when there is none). */
static double running_mean(const struct median *m, const struct med_trial *o, double t) {
  double sum = 0;
  int k = 0;
  for (int i = 0; i < o->n; i++) {
    if (o->t[i] >= m->p.grace_period && o->t[i] <= t) {
      sum += o->v[i];
      k++;
    }
  }
  return k ? sum / k : NAN;
}

static int decide_stop(struct median *m, struct med_trial *tr, struct median_outcome *out,
                       cJSON *rec, double t, const char *why) {
  tr->stopped = 1;
  tr->stop_seq = ++m->stops;
  out->action = m->p.hard_stop ? MEDIAN_STOP : MEDIAN_PAUSE;
  snprintf(out->reason, sizeof out->reason, "%s at t=%g: %s", m->p.hard_stop ? "stopped" : "paused",
           t, why);
  if (!cJSON_AddBoolToObject(rec, "stopped", 1)) return -ENOMEM;
  return 0;
}

int median_on_result(struct median *m, int64_t trial_id, double t, double value,
                     struct median_outcome *out) {
  struct med_trial *tr;
  double *means = NULL, best, med;
  int k = 0, rc;
  char why[200];

  memset(out, 0, sizeof *out);
  if (isnan(t)) return -EINVAL;
  tr = get(m, trial_id, 1);
  if (!tr) return -ENOMEM;
  if (tr->stopped) return 0; /* Ray: "fall back to FIFO" once resumed */
  if (!isfinite(value)) {
    /* ctune: a diverged trial past the grace period is stopped (Ray
     * would carry NaN into the means). Nothing is appended. */
    if (t < m->p.grace_period) return 0;
    out->record = cJSON_CreateObject();
    if (!out->record) return -ENOMEM;
    rc = decide_stop(m, tr, out, out->record, t, "the metric is not finite");
    if (rc) median_outcome_clear(out);
    return rc;
  }
  if (append(tr, t, value)) return -ENOMEM;
  out->record = result_record(t, value);
  if (!out->record) {
    tr->n--;
    return -ENOMEM;
  }
  if (t < m->p.grace_period) return 0;

  /* _trials_beyond_time without this trial; a trial with no result in
   * [grace_period, t] has no running mean and is left out. */
  means = malloc((size_t)(m->n ? m->n : 1) * sizeof *means);
  if (!means) {
    median_outcome_clear(out);
    return -ENOMEM;
  }
  for (int i = 0; i < m->n; i++) {
    const struct med_trial *o = &m->tr[i];
    double mean;
    if (o == tr || o->n == 0 || !(o->t[o->n - 1] >= t)) continue;
    mean = running_mean(m, o, t);
    if (!isnan(mean)) means[k++] = m->sign * mean;
  }
  if (k < m->p.min_samples_required) {
    free(means);
    return 0; /* ctune never yields here (Ray may pause: see the docs) */
  }
  qsort(means, (size_t)k, sizeof *means, dcmp);
  med = k % 2 ? means[k / 2] : (means[k / 2 - 1] + means[k / 2]) / 2;
  free(means);
  best = -INFINITY;
  for (int i = 0; i < tr->n; i++)
    if (m->sign * tr->v[i] > best) best = m->sign * tr->v[i];
  out->compared = 1;
  out->best = m->sign * best;
  out->median = m->sign * med;
  out->others = k;
  /* Ray: compare_op(median, best) != best, i.e. strictly worse. */
  if (!(med > best)) return 0;
  snprintf(why, sizeof why, "best %.6g worse than median %.6g of %d trials' running averages",
           out->best, out->median, k);
  rc = decide_stop(m, tr, out, out->record, t, why);
  if (rc) median_outcome_clear(out);
  return rc;
}

int median_on_trial_end(struct median *m, int64_t trial_id, int has_last, double t, double value,
                        struct median_outcome *out) {
  struct med_trial *tr;
  memset(out, 0, sizeof *out);
  if (!has_last || isnan(t) || !isfinite(value)) return 0;
  tr = get(m, trial_id, 1);
  if (!tr) return -ENOMEM;
  /* Ray appends the final result again in on_trial_complete; once is
   * enough when on_trial_result already saw it. */
  if (tr->n && tr->t[tr->n - 1] == t && tr->v[tr->n - 1] == value) return 0;
  if (append(tr, t, value)) return -ENOMEM;
  out->record = result_record(t, value);
  if (!out->record) {
    tr->n--;
    return -ENOMEM;
  }
  return 0;
}

int median_choose_resume(struct median *m, int (*resumable)(void *, int64_t), void *ctx,
                         int64_t *trial_id, cJSON **record) {
  struct med_trial *pick = NULL;
  *record = NULL;
  if (m->p.hard_stop) return 0;
  for (int i = 0; i < m->n; i++) {
    struct med_trial *t = &m->tr[i];
    if (!t->stopped || t->resumed || (resumable && !resumable(ctx, t->id))) continue;
    if (!pick || t->stop_seq < pick->stop_seq) pick = t;
  }
  if (!pick) return 0;
  *record = cJSON_CreateObject();
  if (!*record || !cJSON_AddBoolToObject(*record, "resumed", 1)) {
    cJSON_Delete(*record);
    *record = NULL;
    return -ENOMEM;
  }
  pick->resumed = 1;
  *trial_id = pick->id;
  return 1;
}

int median_restore(struct median *m, int64_t trial_id, const cJSON *rec) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(rec, "t");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, "v");
  struct med_trial *tr;
  if (!cJSON_IsObject(rec)) return -EINVAL;
  tr = get(m, trial_id, 1);
  if (!tr) return -ENOMEM;
  if (cJSON_IsNumber(t) && cJSON_IsNumber(v) && append(tr, t->valuedouble, v->valuedouble))
    return -ENOMEM;
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "stopped"))) {
    tr->stopped = 1;
    tr->stop_seq = ++m->stops;
  }
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "resumed"))) tr->resumed = 1;
  return 0;
}

int median_state_json(const struct median *m, cJSON **out) {
  cJSON *o = cJSON_CreateObject();
  int stopped = 0;
  *out = NULL;
  if (!o) return -ENOMEM;
  for (int i = 0; i < m->n; i++) stopped += m->tr[i].stopped;
  if (!cJSON_AddNumberToObject(o, "grace_period", m->p.grace_period) ||
      !cJSON_AddNumberToObject(o, "min_samples_required", (double)m->p.min_samples_required) ||
      !cJSON_AddNumberToObject(o, "min_time_slice", m->p.min_time_slice) ||
      !cJSON_AddBoolToObject(o, "hard_stop", m->p.hard_stop) ||
      !cJSON_AddNumberToObject(o, "trials", m->n) ||
      !cJSON_AddNumberToObject(o, "stopped", stopped)) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  *out = o;
  return 0;
}

/* --- behind scheduler.h (sched_ops.h) --- */

static int median_sched_create(struct sched *s, const struct sched_params *params, uint64_t seed) {
  struct median *m;
  int rc;
  (void)seed;
  rc = median_create(&params->median, s->mode, &m);
  if (rc == 0) s->st = m;
  return rc;
}

static void median_sched_free(void *st) { median_free(st); }

static size_t median_sched_mem_bytes(const void *st) { return median_mem_bytes(st); }

static int median_sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx,
                                  const char *config_json) {
  (void)s;
  (void)trial_id;
  (void)idx;
  (void)config_json;
  return 0; /* a trial joins median stopping with its first result */
}

static int median_sched_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                                  struct sched_outcome *out) {
  struct median_outcome mo;
  int rc;
  sched_outcome_reset(out);
  if (!value) return 0;
  rc = median_on_result(s->st, trial_id, t, *value, &mo);
  if (rc) return rc;
  out->action = mo.action == MEDIAN_STOP    ? SCHED_STOP
                : mo.action == MEDIAN_PAUSE ? SCHED_PAUSE
                                            : SCHED_CONTINUE;
  out->stopped_early = mo.action == MEDIAN_STOP;
  snprintf(out->reason, sizeof out->reason, "%s", mo.reason);
  out->record = mo.record;
  mo.record = NULL;
  median_outcome_clear(&mo);
  return 0;
}

static int median_sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                                     const double *last_value, struct sched_outcome *out) {
  int rc = 0;
  if (out) sched_outcome_reset(out);
  if (has_last && last_value) {
    struct median_outcome mo;
    rc = median_on_trial_end(s->st, trial_id, 1, t, *last_value, &mo);
    if (!rc && out) {
      out->record = mo.record;
      mo.record = NULL;
    }
    median_outcome_clear(&mo);
  }
  return rc;
}

/* hard_stop false: Ray's FIFO runs PENDING trials before PAUSED ones, so a
 * paused trial resumes once no new one can start. */
static int median_sched_choose(struct sched *s, int can_new, sched_resumable_fn resumable,
                               void *ctx, struct sched_choice *out) {
  if (!can_new) {
    int64_t id;
    cJSON *rec = NULL;
    int rc = median_choose_resume(s->st, resumable, ctx, &id, &rec);
    if (rc < 0) return rc;
    if (rc == 1) {
      out->kind = SCHED_CHOOSE_RESUME;
      out->trial_id = id;
      out->record = rec;
      snprintf(out->reason, sizeof out->reason,
               "resumed: no new trial left to start (median stopping, hard_stop false)");
      return 0;
    }
  }
  out->kind = can_new ? SCHED_CHOOSE_NEW : SCHED_CHOOSE_WAIT;
  return 0;
}

static int median_sched_restore(struct sched *s, int64_t trial_id, const cJSON *record) {
  return median_restore(s->st, trial_id, record);
}

/* {"type", "time_attr"} + median_state_json */
static int median_sched_state_json(const struct sched *s, cJSON **out) {
  cJSON *st = NULL;
  if (median_state_json(s->st, &st)) return -ENOMEM;
  if (!cJSON_AddStringToObject(st, "type", "median_stopping") ||
      !cJSON_AddStringToObject(st, "time_attr", s->p.time_attr)) {
    cJSON_Delete(st);
    return -ENOMEM;
  }
  *out = st;
  return 0;
}

const struct sched_ops median_sched_ops = {
    .create = median_sched_create,
    .free = median_sched_free,
    .mem_bytes = median_sched_mem_bytes,
    .add_trial = median_sched_add_trial,
    .on_result = median_sched_on_result,
    .on_trial_end = median_sched_on_trial_end,
    .choose = median_sched_choose,
    .restore = median_sched_restore,
    .state_json = median_sched_state_json,
};
