/* api_pareto: what GET .../pareto says beside the front: the reference
 * point, the front's hypervolume and its history
 * (docs/protocol.md#pareto-front). */
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

static int api_pareto_by_seq(const void *a, const void *b) {
  const struct api_pareto_key *x = a, *y = b;
  if (x->seq != y->seq) return (x->seq > y->seq) - (x->seq < y->seq);
  return api_pareto_by_id(a, b);
}

/* The history: the hypervolume after each trial in the order of their last
 * change (a result, or their end: seqs), one entry where it grew. */
static int api_pareto_history(cJSON *hist, const int64_t *ids, const int64_t *seqs,
                              const double *scores, size_t n, int k, const enum spec_mode *modes,
                              const double *ref) {
  struct api_pareto_key *keys = malloc((n ? n : 1) * sizeof *keys);
  size_t *order = malloc((n ? n : 1) * sizeof *order);
  double *hv = malloc((n ? n : 1) * sizeof *hv);
  int rc = keys && order && hv ? 0 : -ENOMEM;
  for (size_t i = 0; !rc && i < n; i++) keys[i] = (struct api_pareto_key){ids[i], seqs[i], i};
  if (!rc) qsort(keys, n, sizeof *keys, api_pareto_by_seq);
  for (size_t i = 0; !rc && i < n; i++) order[i] = keys[i].idx;
  if (!rc) rc = hypervolume_series(scores, order, n, k, modes, ref, hv);
  if (rc == -E2BIG) rc = 0, n = 0; /* too costly (hypervolume.h): no history */
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

int api_pareto_summary(struct server *s, cJSON *o, int64_t exp_id, const int64_t *ids,
                       const double *scores, const unsigned char *on, size_t n, int k,
                       const enum spec_mode *modes) {
  size_t nf = 0, kk = (size_t)k;
  double ref[SPEC_MAX_OBJECTIVES], hv = NAN;
  int64_t *seqs = malloc((n ? n : 1) * sizeof *seqs);
  double *front = malloc((n ? n : 1) * kk * sizeof *front);
  if (!seqs || !front) {
    free(seqs);
    free(front);
    return -ENOMEM;
  }
  /* The config's reference point, and when each trial last changed (a
   * trial deleted meanwhile: last). */
  server_lock(s);
  struct srv_experiment *e = server_experiment(s, exp_id);
  int config_ref = e && e->spec.has_reference_point;
  if (config_ref) memcpy(ref, e->spec.reference_point, sizeof ref);
  for (size_t i = 0; i < n; i++) {
    struct srv_trial *t = state_trial_ref(s, ids[i]);
    seqs[i] = t ? t->updated_seq : INT64_MAX;
  }
  server_unlock(s);
  for (size_t i = 0; i < n; i++)
    if (on[i]) memcpy(front + nf++ * kk, scores + i * kk, kk * sizeof *front);
  /* No reference point in the config: the front's nadir plus 10% of its
   * range (hypervolume_reference), none without a front. */
  int rc = 0, has_ref = config_ref || hypervolume_reference(front, nf, k, modes, ref) == 0;
  if (has_ref) {
    rc = hypervolume_compute(front, nf, k, modes, ref, &hv);
    if (rc == -E2BIG) rc = 0; /* hv stays NaN: null */
  }
  free(front);
  cJSON *r = NULL, *hist = NULL;
  if (!rc) {
    rc = -ENOMEM;
    r = has_ref ? cJSON_AddArrayToObject(o, "reference_point")
                : cJSON_AddNullToObject(o, "reference_point");
    if (r &&
        cJSON_AddStringToObject(o, "reference_point_source",
                                config_ref ? "config"
                                : has_ref  ? "derived"
                                           : "none") &&
        cJSON_AddNumberToObject(o, "hypervolume", hv) &&
        (hist = cJSON_AddArrayToObject(o, "hypervolume_history")))
      rc = 0;
  }
  for (size_t j = 0; !rc && has_ref && j < kk; j++)
    if (!cJSON_AddItemToArray(r, cJSON_CreateNumber(ref[j]))) rc = -ENOMEM;
  if (!rc && has_ref) rc = api_pareto_history(hist, ids, seqs, scores, n, k, modes, ref);
  free(seqs);
  return rc;
}
