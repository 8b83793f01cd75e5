/* api_pareto: the Pareto view of an experiment with several objectives:
 * the trials' scores under a scope, the hypervolume of their front and its
 * history, and a trial's non-dominated rank (docs/protocol.md#pareto-front). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "hypervolume.h"

struct api_pareto_key {
  int64_t id, seq;
  size_t idx;
};

static int api_pareto_by_id(const void *a, const void *b) {
  const struct api_pareto_key *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

static int api_pareto_id_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int api_pareto_by_seq(const void *a, const void *b) {
  const struct api_pareto_key *x = a, *y = b;
  if (x->seq != y->seq) return (x->seq > y->seq) - (x->seq < y->seq);
  return api_pareto_by_id(a, b);
}

int api_pareto_take(const struct srv_experiment *e, struct api_pareto_set *ps) {
  memset(ps, 0, sizeof *ps);
  ps->exp_id = e->id;
  ps->k = e->spec.nobjectives;
  memcpy(ps->names, e->spec.objectives, sizeof ps->names);
  memcpy(ps->modes, e->spec.modes, sizeof ps->modes);
  ps->has_ref = e->spec.has_reference_point;
  memcpy(ps->ref, e->spec.reference_point, sizeof ps->ref);
  size_t n = (size_t)e->ntrials, k = (size_t)ps->k;
  struct api_pareto_key *keys = malloc((n ? n : 1) * sizeof *keys);
  ps->ids = malloc((n ? n : 1) * sizeof *ps->ids);
  ps->seqs = malloc((n ? n : 1) * sizeof *ps->seqs);
  ps->scores = malloc((n ? n : 1) * (k ? k : 1) * sizeof *ps->scores);
  if (!keys || !ps->ids || !ps->seqs || !ps->scores) {
    free(keys);
    api_pareto_drop(ps);
    return -ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    keys[i] = (struct api_pareto_key){e->trials[i]->id, e->trials[i]->updated_seq, i};
  qsort(keys, n, sizeof *keys, api_pareto_by_id);
  for (size_t i = 0; i < n; i++) {
    ps->ids[i] = keys[i].id;
    ps->seqs[i] = keys[i].seq;
  }
  for (size_t i = 0; i < n * k; i++) ps->scores[i] = NAN;
  ps->n = n;
  free(keys);
  return 0;
}

int api_pareto_read(struct server *s, enum best_scope scope, struct api_pareto_set *ps) {
  int rc = 0;
  commit_flush(s->commit);
  for (int j = 0; !rc && j < ps->k; j++) rc = api_pareto_scores(s, ps, scope, j);
  return rc;
}

void api_pareto_drop(struct api_pareto_set *ps) {
  free(ps->ids);
  free(ps->seqs);
  free(ps->scores);
  ps->ids = ps->seqs = NULL;
  ps->scores = NULL;
  ps->n = 0;
}

/* The history: the hypervolume after each trial in the order of their last
 * change (a result, or their end), one entry where it grew. */
static int api_pareto_history(cJSON *hist, const struct api_pareto_set *ps, const double *ref) {
  size_t n = ps->n;
  struct api_pareto_key *keys = malloc((n ? n : 1) * sizeof *keys);
  size_t *order = malloc((n ? n : 1) * sizeof *order);
  double *hv = malloc((n ? n : 1) * sizeof *hv);
  int rc = keys && order && hv ? 0 : -ENOMEM;
  for (size_t i = 0; !rc && i < n; i++)
    keys[i] = (struct api_pareto_key){ps->ids[i], ps->seqs[i], i};
  if (!rc) qsort(keys, n, sizeof *keys, api_pareto_by_seq);
  for (size_t i = 0; !rc && i < n; i++) order[i] = keys[i].idx;
  if (!rc) rc = hypervolume_series(ps->scores, order, n, ps->k, ps->modes, ref, hv);
  if (rc == -E2BIG) rc = 0, n = 0; /* a 4-objective front too large: no history */
  for (size_t i = 0; !rc && i < n; i++) {
    if (hv[i] == (i ? hv[i - 1] : 0)) continue;
    cJSON *row = cJSON_CreateObject();
    if (!row || !cJSON_AddItemToArray(hist, row) ||
        !cJSON_AddNumberToObject(row, "trials", (double)(i + 1)) ||
        !cJSON_AddNumberToObject(row, "trial_id", (double)keys[i].id) ||
        !cJSON_AddNumberToObject(row, "hypervolume", hv[i]))
      rc = -ENOMEM; /* row, once added, is hist's */
  }
  free(keys);
  free(order);
  free(hv);
  return rc;
}

int api_pareto_summary(cJSON *o, const struct api_pareto_set *ps, const unsigned char *on) {
  size_t n = ps->n, k = (size_t)ps->k, nf = 0;
  double ref[SPEC_MAX_OBJECTIVES], hv = NAN;
  double *front = malloc((n ? n : 1) * k * sizeof *front);
  if (!front) return -ENOMEM;
  for (size_t i = 0; i < n; i++)
    if (on[i]) memcpy(front + nf++ * k, ps->scores + i * k, k * sizeof *front);
  /* No reference point in the config: the front's nadir plus 10% of its
   * range (hypervolume_reference), none without a front. */
  int rc = 0, has_ref = ps->has_ref;
  if (has_ref)
    memcpy(ref, ps->ref, sizeof ref);
  else
    has_ref = hypervolume_reference(front, nf, ps->k, ps->modes, ref) == 0;
  if (has_ref) {
    rc = hypervolume_compute(front, nf, ps->k, ps->modes, ref, &hv);
    if (rc == -E2BIG) rc = 0; /* hv stays NaN: null */
  }
  free(front);
  if (rc) return rc;
  cJSON *r = has_ref ? cJSON_AddArrayToObject(o, "reference_point")
                     : cJSON_AddNullToObject(o, "reference_point");
  cJSON *hist = NULL;
  if (!r ||
      !cJSON_AddStringToObject(o, "reference_point_source",
                               ps->has_ref ? "config"
                               : has_ref   ? "derived"
                                           : "none") ||
      !cJSON_AddNumberToObject(o, "hypervolume", hv) ||
      !(hist = cJSON_AddArrayToObject(o, "hypervolume_history")))
    return -ENOMEM;
  for (size_t j = 0; has_ref && j < k; j++)
    if (!cJSON_AddItemToArray(r, cJSON_CreateNumber(ref[j]))) return -ENOMEM;
  return has_ref ? api_pareto_history(hist, ps, ref) : 0;
}

int api_pareto_rank_add(struct server *s, int64_t trial_id, cJSON *o) {
  server_lock(s);
  struct srv_trial *t = state_trial_ref(s, trial_id);
  struct srv_experiment *e = t ? server_experiment(s, t->experiment_id) : NULL;
  if (!e || e->spec.nobjectives < 2) {
    server_unlock(s);
    return 0;
  }
  struct api_pareto_set ps;
  int rc = state_experiment_warm(s, e);
  if (!rc) rc = api_pareto_take(e, &ps);
  server_unlock(s);
  if (rc) return rc;
  int rank = 0;
  rc = api_pareto_read(s, BEST_SCOPE_LAST, &ps);
  const int64_t *at = bsearch(&trial_id, ps.ids, ps.n, sizeof *ps.ids, api_pareto_id_cmp);
  if (!rc && at)
    rc = hypervolume_rank_of(ps.scores, ps.n, ps.k, ps.modes, (size_t)(at - ps.ids), &rank);
  api_pareto_drop(&ps);
  if (rc) return rc;
  cJSON *v = rank ? cJSON_AddNumberToObject(o, "pareto_rank", rank)
                  : cJSON_AddNullToObject(o, "pareto_rank");
  return v ? 0 : -ENOMEM;
}
