/* hyperband: Ray's HyperBandScheduler over trials created on demand.
 *
 * Ray adds every trial to a bracket when the trial is generated (with the
 * random/grid generator, all of them before the first result), so a trial's
 * bracket depends on its creation index only. ctune lays out the plan's
 * slots the same way at hb_create; a slot not yet created acts as Ray's
 * PENDING trial without a result (time 0), which keeps a rung from
 * completing until every trial of the bracket reached it or ended. */
#include "hyperband.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idmap.h"
#include "rung.h"
#include "sched_ops.h"

struct hb_slot {
  int64_t id;
  int bracket;
  unsigned created : 1, live : 1, paused : 1, ready : 1, has_result : 1;
  double t, v;                 /* last result; v NaN ranks lowest */
  int64_t ready_top, ready_of; /* the halving that readied it */
  double ready_rung;
};

struct hb_bracket {
  int band, s;
  int64_t first, count; /* slots [first, first + count) */
  int64_t n0, n, r0, r, cumul_r;
  int halves;
  int64_t total_work;
  double progress;
};

struct hyperband {
  double max_t, eta, sign;
  /* Several objectives: k, flip[j] +1 for min and -1 for max, and each
   * slot's last vector flipped (smaller is better) in mv[idx * k...]; a
   * slot's v is then 0, or NaN when the vector is not all finite. */
  int k;
  double flip[SPEC_MAX_OBJECTIVES];
  double *mv;
  int s_max_1;
  int64_t num_trials;
  struct hb_slot *slots; /* num_trials, by idx */
  struct hb_bracket *br;
  int nbr, nbands;
  int64_t num_stopped;
  struct idmap ids; /* trial id -> idx */
};

/* --- brackets (Ray's _Bracket) --- */

static int64_t total_work(const struct hyperband *h, int64_t n, int64_t r, int s) {
  int64_t work = 0, cumulative_r = r;
  for (int k = 0; k < s + 1; k++) {
    work += n * r;
    n = (int64_t)ceil((double)n / h->eta);
    r = (int64_t)fmin((double)r * h->eta, h->max_t - (double)cumulative_r);
  }
  return work;
}

static double slot_time(const struct hb_slot *x) { return x->has_result ? x->t : 0; }

static int cur_iter_done(const struct hyperband *h, const struct hb_bracket *b) {
  for (int64_t i = b->first; i < b->first + b->count; i++)
    if (h->slots[i].live && slot_time(&h->slots[i]) < (double)b->cumul_r) return 0;
  return 1;
}

static int finished(const struct hyperband *h, const struct hb_bracket *b) {
  return b->halves == 0 && cur_iter_done(h, b);
}

static double completion(const struct hyperband *h, const struct hb_bracket *b) {
  if (finished(h, b)) return 1.0;
  return fmin(b->progress / (double)b->total_work, 1.0);
}

static int64_t live_count(const struct hyperband *h, const struct hb_bracket *b, double below) {
  int64_t n = 0;
  for (int64_t i = b->first; i < b->first + b->count; i++)
    if (h->slots[i].live && slot_time(&h->slots[i]) < below) n++;
  return n;
}

int hb_create(double max_t, double reduction_factor, enum spec_mode mode, int64_t num_trials,
              struct hyperband **out) {
  struct hyperband *h;
  int cap = 0, cur = -1, band_len = 0;
  *out = NULL;
  if (!(max_t >= 1) || !isfinite(max_t) || !(reduction_factor > 1) || !isfinite(reduction_factor) ||
      num_trials < 1 || num_trials > SPEC_NUM_SAMPLES_MAX)
    return -EINVAL;
  h = calloc(1, sizeof *h);
  if (!h) return -ENOMEM;
  h->max_t = max_t;
  h->eta = reduction_factor;
  h->sign = mode == SPEC_MODE_MAX ? 1.0 : -1.0;
  h->k = 1;
  h->s_max_1 = (int)nearbyint(log(max_t) / log(reduction_factor)) + 1;
  h->num_trials = num_trials;
  h->slots = calloc((size_t)num_trials, sizeof *h->slots);
  if (h->s_max_1 < 1 || h->s_max_1 > HB_MAX_BRACKETS_PER_BAND) {
    hb_free(h);
    return -EINVAL;
  }
  if (!h->slots) goto fail;
  /* Ray's on_trial_add for idx 0..num_trials-1; "None" brackets (r0 == 0)
   * take a place in the band but hold nobody. */
  for (int64_t idx = 0; idx < num_trials; idx++) {
    struct hb_bracket *b;
    if (cur < 0 || h->br[cur].count == h->br[cur].n0) {
      for (;;) {
        int s;
        double r0;
        if (band_len == h->s_max_1 || h->nbands == 0) {
          h->nbands++;
          band_len = 0;
        }
        s = band_len++;
        r0 = max_t * pow(reduction_factor, -s);
        if ((int64_t)r0 == 0) continue;
        if (h->nbr == cap) {
          int ncap = cap ? cap * 2 : 8;
          struct hb_bracket *nb = realloc(h->br, (size_t)ncap * sizeof *nb);
          if (!nb) goto fail;
          h->br = nb;
          cap = ncap;
        }
        b = &h->br[h->nbr];
        memset(b, 0, sizeof *b);
        b->band = h->nbands - 1;
        b->s = s;
        b->n0 = b->n = (int64_t)ceil((double)h->s_max_1 / (s + 1) * pow(reduction_factor, s));
        b->r0 = b->r = b->cumul_r = (int64_t)r0;
        b->halves = s;
        b->first = idx;
        b->total_work = total_work(h, b->n0, b->r0, s);
        cur = h->nbr++;
        break;
      }
    }
    h->br[cur].count++;
    h->slots[idx].bracket = cur;
    h->slots[idx].live = 1;
  }
  *out = h;
  return 0;
fail:
  hb_free(h);
  return -ENOMEM;
}

int hb_objectives(struct hyperband *h, int k, const enum spec_mode *modes) {
  if (k < 2 || k > SPEC_MAX_OBJECTIVES || h->k > 1) return -EINVAL;
  h->mv = calloc((size_t)h->num_trials * (size_t)k, sizeof *h->mv);
  if (!h->mv) return -ENOMEM;
  h->k = k;
  for (int j = 0; j < k; j++) h->flip[j] = modes[j] == SPEC_MODE_MAX ? -1.0 : 1.0;
  return 0;
}

void hb_free(struct hyperband *h) {
  if (!h) return;
  free(h->mv);
  free(h->slots);
  free(h->br);
  idmap_free(&h->ids);
  free(h);
}

size_t hb_mem_bytes(const struct hyperband *h) {
  if (!h) return 0;
  return sizeof *h + (size_t)h->num_trials * sizeof *h->slots + (size_t)h->nbr * sizeof *h->br +
         h->ids.cap * sizeof *h->ids.e +
         (h->mv ? (size_t)h->num_trials * (size_t)h->k * sizeof *h->mv : 0);
}

void hb_outcome_clear(struct hb_outcome *out) {
  if (!out) return;
  free(out->stopped);
  free(out->ready);
  cJSON_Delete(out->record);
  memset(out, 0, sizeof *out);
}

int hb_bracket_of(const struct hyperband *h, int64_t idx) {
  if (idx < 0 || idx >= h->num_trials) return -EINVAL;
  return h->slots[idx].bracket;
}

int hb_add_trial(struct hyperband *h, int64_t trial_id, int64_t idx) {
  size_t have;
  int rc;
  if (idx < 0 || idx >= h->num_trials) return -EINVAL;
  if (!idmap_get(&h->ids, trial_id, &have)) return (int64_t)have == idx ? 0 : -EINVAL;
  if (h->slots[idx].created) return -EINVAL;
  rc = idmap_put(&h->ids, trial_id, (size_t)idx);
  if (rc) return rc;
  h->slots[idx].id = trial_id;
  h->slots[idx].created = 1;
  return 0;
}

/* --- outcomes --- */

static int push_stopped(struct hb_outcome *out, int64_t id, const char *reason) {
  struct hb_stopped *n = realloc(out->stopped, (out->nstopped + 1) * sizeof *n);
  if (!n) return -ENOMEM;
  out->stopped = n;
  n[out->nstopped].trial_id = id;
  snprintf(n[out->nstopped].reason, sizeof n->reason, "%s", reason);
  out->nstopped++;
  return 0;
}

static int push_ready(struct hb_outcome *out, int64_t id) {
  int64_t *n = realloc(out->ready, (out->nready + 1) * sizeof *n);
  if (!n) return -ENOMEM;
  out->ready = n;
  n[out->nready++] = id;
  return 0;
}

/* Sort keys: a non-finite metric ranks below every value; ties keep the
 * bracket's insertion (idx) order, as Python's stable sort. */
struct ranked {
  int64_t idx;
  int finite;
  double key;
  int front; /* several objectives: the 0-based front */
};

static int ranked_cmp(const void *pa, const void *pb) {
  const struct ranked *a = pa, *b = pb;
  if (a->finite != b->finite) return a->finite - b->finite;
  if (a->finite && a->key != b->key) return a->key < b->key ? -1 : 1;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Several objectives: the m live trials of rk (idx order) ranked worst
 * first: the non-finite ones in idx order, then the finite ones from the
 * last position of rung_mo_order() to the first. *nfronts of the finite. */
static int rank_mo(const struct hyperband *h, struct ranked *rk, int64_t m, int *nfronts) {
  size_t nf = 0, at = 0;
  int k = h->k, rc = -ENOMEM;
  double *x = malloc(((size_t)m ? (size_t)m : 1) * (size_t)k * sizeof *x);
  size_t *pos = malloc(((size_t)m ? (size_t)m : 1) * sizeof *pos);
  int *fr = malloc(((size_t)m ? (size_t)m : 1) * sizeof *fr);
  struct ranked *fin = malloc(((size_t)m ? (size_t)m : 1) * sizeof *fin);
  if (x && pos && fr && fin) {
    for (int64_t i = 0; i < m; i++)
      if (rk[i].finite) {
        memcpy(x + nf * (size_t)k, h->mv + rk[i].idx * k, (size_t)k * sizeof *x);
        fin[nf++] = rk[i];
      } else {
        rk[at++] = rk[i]; /* in place: at <= i */
      }
    *nfronts = 0;
    rc = rung_mo_order(x, nf, k, pos, fr, nfronts);
  }
  if (!rc)
    for (size_t j = 0; j < nf; j++) {
      fin[j].front = fr[j];
      rk[at + nf - 1 - pos[j]] = fin[j];
    }
  free(x);
  free(pos);
  free(fr);
  free(fin);
  return rc;
}

/* Ray's _process_bracket with the current trial cur (-1 on a trial's end),
 * halving again while the rung stays complete. Returns the action for cur. */
static int process(struct hyperband *h, int bi, int64_t cur, struct hb_outcome *out,
                   enum hb_action *action) {
  struct hb_bracket *b = &h->br[bi];
  struct ranked *rk = NULL;
  char why[HB_REASON_MAX];
  int rc = 0;

  *action = HB_PAUSE;
  while (cur_iter_done(h, b)) {
    int64_t m = 0, ngood, rung;
    if (finished(h, b)) {
      snprintf(why, sizeof why, "bracket %d finished at t=%lld", bi, (long long)b->cumul_r);
      for (int64_t i = b->first; i < b->first + b->count; i++) {
        struct hb_slot *x = &h->slots[i];
        if (!x->live || i == cur || !x->paused) continue;
        x->live = 0;
        if ((rc = push_stopped(out, x->id, why))) goto done;
      }
      if (cur >= 0 && h->slots[cur].live) {
        h->slots[cur].live = 0;
        snprintf(out->reason, sizeof out->reason, "%s", why);
      }
      *action = HB_STOP;
      goto done;
    }
    /* successive_halving */
    rung = b->cumul_r;
    b->halves--;
    b->n = (int64_t)ceil((double)b->n / h->eta);
    b->r = (int64_t)fmin((double)b->r * h->eta, h->max_t);
    b->cumul_r = b->r;
    free(rk);
    rk = malloc((size_t)b->count * sizeof *rk);
    if (!rk) {
      rc = -ENOMEM;
      goto done;
    }
    for (int64_t i = b->first; i < b->first + b->count; i++) {
      const struct hb_slot *x = &h->slots[i];
      if (!x->live) continue;
      rk[m].idx = i;
      rk[m].finite = isfinite(x->v) ? 1 : 0;
      rk[m].key = rk[m].finite ? h->sign * x->v : 0;
      m++;
    }
    int nfronts = 0;
    if (h->k == 1)
      qsort(rk, (size_t)m, sizeof *rk, ranked_cmp);
    else if ((rc = rank_mo(h, rk, m, &nfronts)))
      goto done;
    ngood = b->n < m ? b->n : m;
    for (int64_t k = 0; k < m - ngood; k++) {
      struct hb_slot *x = &h->slots[rk[k].idx];
      if (h->k > 1 && rk[k].finite)
        snprintf(why, sizeof why,
                 "stopped at t=%g: rank %lld of %lld in bracket %d at t=%lld in "
                 "non-dominated order (front %d of %d), only the top %lld continue",
                 slot_time(x), (long long)(m - k), (long long)m, bi, (long long)rung,
                 rk[k].front + 1, nfronts, (long long)ngood);
      else
        snprintf(why, sizeof why,
                 "stopped at t=%g: rank %lld of %lld in bracket %d at t=%lld, "
                 "only the top %lld continue",
                 slot_time(x), (long long)(m - k), (long long)m, bi, (long long)rung,
                 (long long)ngood);
      x->live = 0;
      h->num_stopped++;
      if (rk[k].idx == cur) {
        *action = HB_STOP;
        out->stopped_early = 1;
        snprintf(out->reason, sizeof out->reason, "%s", why);
      } else if ((rc = push_stopped(out, x->id, why))) {
        goto done;
      }
    }
    for (int64_t k = m - ngood; k < m; k++) {
      struct hb_slot *x = &h->slots[rk[k].idx];
      if (slot_time(x) < (double)b->cumul_r) {
        if (x->paused && rk[k].idx != cur) {
          x->ready = 1;
          x->ready_top = ngood;
          x->ready_of = m;
          x->ready_rung = (double)rung;
          if ((rc = push_ready(out, x->id))) goto done;
        } else if (rk[k].idx == cur) {
          *action = HB_CONTINUE;
          snprintf(out->reason, sizeof out->reason,
                   "continues past t=%lld: top %lld of %lld in bracket %d", (long long)rung,
                   (long long)ngood, (long long)m, bi);
        }
      } else if (finished(h, b)) {
        snprintf(why, sizeof why, "bracket %d finished at t=%lld", bi, (long long)b->cumul_r);
        x->live = 0;
        if (rk[k].idx == cur) {
          *action = HB_STOP;
          snprintf(out->reason, sizeof out->reason, "%s", why);
        } else if ((rc = push_stopped(out, x->id, why))) {
          goto done;
        }
      }
    }
  }
done:
  free(rk);
  if (rc == 0 && *action == HB_PAUSE && cur >= 0) {
    h->slots[cur].paused = 1;
    snprintf(out->reason, sizeof out->reason,
             "paused at t=%g until bracket %d's rung t=%lld is complete "
             "(%lld more to reach it)",
             slot_time(&h->slots[cur]), bi, (long long)b->cumul_r,
             (long long)live_count(h, b, (double)b->cumul_r));
  }
  return rc;
}

static cJSON *make_record(const char *ev, int64_t idx) {
  cJSON *r = cJSON_CreateObject();
  if (!r || !cJSON_AddStringToObject(r, "e", ev) ||
      !cJSON_AddNumberToObject(r, "idx", (double)idx)) {
    cJSON_Delete(r);
    return NULL;
  }
  return r;
}

static int do_result(struct hyperband *h, int64_t idx, double t, const double *values,
                     struct hb_outcome *out) {
  struct hb_slot *x = &h->slots[idx];
  struct hb_bracket *b = &h->br[x->bracket];
  enum hb_action action;
  int rc;

  memset(out, 0, sizeof *out);
  if (!x->live) {
    out->action = HB_STOP;
    snprintf(out->reason, sizeof out->reason, "no longer in bracket %d", x->bracket);
    return 0;
  }
  /* update_trial_stats */
  b->progress += t - slot_time(x);
  x->t = t;
  x->v = isfinite(values[0]) ? values[0] : NAN;
  if (h->k > 1) {
    int finite = 1;
    for (int j = 0; j < h->k; j++) {
      h->mv[idx * h->k + j] = h->flip[j] * values[j];
      finite = finite && isfinite(values[j]);
    }
    x->v = finite ? 0 : NAN;
  }
  x->has_result = 1;
  x->paused = 0;
  x->ready = 0;
  if (t < (double)b->cumul_r) {
    out->action = HB_CONTINUE;
    return 0;
  }
  /* Deliberate difference: at the last rung the trial could only wait
   * paused for the bracket to finish, then be stopped; stop it now. */
  if (b->halves == 0 && !finished(h, b)) {
    out->action = HB_STOP;
    snprintf(out->reason, sizeof out->reason,
             "reached t=%g, the last rung of bracket %d (max_t %g)", t, x->bracket, h->max_t);
    return 0;
  }
  rc = process(h, x->bracket, idx, out, &action);
  out->action = action;
  return rc;
}

static int do_end(struct hyperband *h, int64_t idx, struct hb_outcome *out) {
  struct hb_slot *x = &h->slots[idx];
  enum hb_action action;
  memset(out, 0, sizeof *out);
  out->action = HB_STOP;
  if (!x->live) return 0;
  x->live = 0;
  x->paused = 0;
  x->ready = 0;
  if (finished(h, &h->br[x->bracket])) return 0;
  return process(h, x->bracket, -1, out, &action);
}

static int lookup(const struct hyperband *h, int64_t trial_id, int64_t *idx) {
  size_t i;
  if (idmap_get(&h->ids, trial_id, &i)) return -ENOENT;
  *idx = (int64_t)i;
  return 0;
}

/* "v": the value, or with several objectives the list of them (in their
 * own signs); null when one is not finite. */
static cJSON *value_json(const double *values, int k) {
  for (int j = 0; j < k; j++)
    if (!isfinite(values[j])) return cJSON_CreateNull();
  return k == 1 ? cJSON_CreateNumber(values[0]) : cJSON_CreateDoubleArray(values, k);
}

static int hb_result(struct hyperband *h, int64_t trial_id, double t, const double *values,
                     struct hb_outcome *out) {
  int64_t idx;
  int rc, live;
  memset(out, 0, sizeof *out);
  if (isnan(t)) return -EINVAL;
  if ((rc = lookup(h, trial_id, &idx))) return rc;
  live = h->slots[idx].live;
  rc = do_result(h, idx, t, values, out);
  if (rc == 0 && live) {
    cJSON *v = value_json(values, h->k);
    out->record = make_record("result", idx);
    if (!out->record || !v || !cJSON_AddNumberToObject(out->record, "t", t) ||
        !cJSON_AddItemToObject(out->record, "v", v)) {
      cJSON_Delete(v); /* not added: "v" is the last step */
      rc = -ENOMEM;
    }
  }
  if (rc) hb_outcome_clear(out);
  return rc;
}

int hb_on_result(struct hyperband *h, int64_t trial_id, double t, double value,
                 struct hb_outcome *out) {
  if (h->k > 1) return -EINVAL;
  return hb_result(h, trial_id, t, &value, out);
}

int hb_on_result_mo(struct hyperband *h, int64_t trial_id, double t, const double *values,
                    struct hb_outcome *out) {
  return hb_result(h, trial_id, t, values, out);
}

int hb_on_trial_end(struct hyperband *h, int64_t trial_id, struct hb_outcome *out) {
  int64_t idx;
  int rc, live;
  memset(out, 0, sizeof *out);
  if ((rc = lookup(h, trial_id, &idx))) return rc;
  live = h->slots[idx].live;
  rc = do_end(h, idx, out);
  if (rc == 0 && live && !(out->record = make_record("end", idx))) rc = -ENOMEM;
  if (rc) hb_outcome_clear(out);
  return rc;
}

static int do_choose(struct hyperband *h, int can_new, hb_resumable_fn resumable, void *ctx,
                     struct hb_choice *out) {
  int order[HB_MAX_BRACKETS_PER_BAND];
  memset(out, 0, sizeof *out);
  out->kind = HB_WAIT;
  for (int i = 0; i < h->nbr;) {
    int band = h->br[i].band, n = 0;
    double comp[HB_MAX_BRACKETS_PER_BAND];
    /* brackets of this band, stable-sorted by completion */
    for (; i < h->nbr && h->br[i].band == band; i++) {
      double c = completion(h, &h->br[i]);
      int j = n++;
      while (j > 0 && comp[j - 1] > c) {
        comp[j] = comp[j - 1];
        order[j] = order[j - 1];
        j--;
      }
      comp[j] = c;
      order[j] = i;
    }
    for (int k = 0; k < n; k++) {
      const struct hb_bracket *b = &h->br[order[k]];
      for (int64_t x = b->first; x < b->first + b->count; x++) {
        struct hb_slot *sl = &h->slots[x];
        if (!sl->live) continue;
        if (sl->paused && sl->ready && (!resumable || resumable(ctx, sl->id))) {
          sl->paused = 0;
          out->kind = HB_RESUME;
          out->trial_id = sl->id;
          snprintf(out->reason, sizeof out->reason,
                   "promoted from t=%g in bracket %d (top %lld of %lld)", slot_time(sl), order[k],
                   (long long)sl->ready_top, (long long)sl->ready_of);
          return (int)x;
        }
        if (!sl->created && can_new) {
          out->kind = HB_NEW;
          return -1;
        }
      }
    }
  }
  return -1;
}

int hb_choose(struct hyperband *h, int can_new, hb_resumable_fn resumable, void *ctx,
              struct hb_choice *out) {
  int x = do_choose(h, can_new, resumable, ctx, out);
  if (out->kind == HB_RESUME && !(out->record = make_record("resume", x))) return -ENOMEM;
  return 0;
}

int hb_restore(struct hyperband *h, int64_t trial_id, const cJSON *record) {
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(record, "e");
  const cJSON *ix = cJSON_GetObjectItemCaseSensitive(record, "idx");
  struct hb_outcome out;
  int64_t idx;
  int rc;

  if (!cJSON_IsString(e) || !cJSON_IsNumber(ix)) return -EINVAL;
  idx = (int64_t)ix->valuedouble;
  if ((rc = hb_add_trial(h, trial_id, idx))) return rc;
  if (!strcmp(e->valuestring, "result")) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(record, "t");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(record, "v");
    double vs[SPEC_MAX_OBJECTIVES];
    if (!cJSON_IsNumber(t) || !h->slots[idx].live ||
        !(cJSON_IsNull(v) ||
          (h->k == 1 ? cJSON_IsNumber(v) : cJSON_IsArray(v) && cJSON_GetArraySize(v) == h->k)))
      return -EINVAL;
    for (int j = 0; j < h->k; j++) {
      const cJSON *x = h->k == 1 ? v : cJSON_GetArrayItem(v, j);
      if (x && !cJSON_IsNumber(x) && !cJSON_IsNull(x)) return -EINVAL;
      vs[j] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    }
    rc = do_result(h, idx, t->valuedouble, vs, &out);
  } else if (!strcmp(e->valuestring, "end")) {
    if (!h->slots[idx].live) return -EINVAL;
    rc = do_end(h, idx, &out);
  } else if (!strcmp(e->valuestring, "resume")) {
    struct hb_slot *x = &h->slots[idx];
    if (!x->live || !x->paused || !x->ready) return -EINVAL;
    x->paused = 0;
    return 0;
  } else {
    return -EINVAL;
  }
  out.record = NULL;
  hb_outcome_clear(&out);
  return rc;
}

int hb_state_json(const struct hyperband *h, cJSON **out) {
  cJSON *o = cJSON_CreateObject(), *arr;
  *out = NULL;
  if (!o || !cJSON_AddNumberToObject(o, "s_max_1", h->s_max_1) ||
      !cJSON_AddNumberToObject(o, "num_stopped", (double)h->num_stopped) ||
      !(arr = cJSON_AddArrayToObject(o, "brackets")))
    goto fail;
  for (int i = 0; i < h->nbr; i++) {
    const struct hb_bracket *b = &h->br[i];
    cJSON *j = cJSON_CreateObject();
    if (!j || !cJSON_AddItemToArray(arr, j)) {
      cJSON_Delete(j);
      goto fail;
    }
    if (!cJSON_AddNumberToObject(j, "index", i) || !cJSON_AddNumberToObject(j, "band", b->band) ||
        !cJSON_AddNumberToObject(j, "s", b->s) || !cJSON_AddNumberToObject(j, "n", (double)b->n) ||
        !cJSON_AddNumberToObject(j, "trials", (double)b->count) ||
        !cJSON_AddNumberToObject(j, "live", (double)live_count(h, b, INFINITY)) ||
        !cJSON_AddNumberToObject(j, "rung_t", (double)b->cumul_r) ||
        !cJSON_AddNumberToObject(j, "halvings_left", b->halves) ||
        !cJSON_AddNumberToObject(j, "completed", completion(h, b)))
      goto fail;
  }
  *out = o;
  return 0;
fail:
  cJSON_Delete(o);
  return -ENOMEM;
}

/* --- the scheduler object --- */

/* {"type": "hyperband", "time_attr", "max_t" (81), "reduction_factor" (3)}:
 * Ray's HyperBandScheduler defaults. A band holds round(log(max_t) /
 * log(reduction_factor)) + 1 brackets; bounded so choose stays cheap. */
int hb_check(const cJSON *sched, const char *path, struct sched_params *sp,
             struct validate_error *err) {
  static const char *const keys[] = {"type", "time_attr", "max_t", "reduction_factor", NULL};
  sp->type = SPEC_SCHED_HYPERBAND;
  sp->has_max_t = 1;
  sp->max_t = 81;
  sp->reduction_factor = 3;
  if (spec_check_keys(sched, path, "hyperband", keys, err) ||
      spec_get_name(sched, path, "time_attr", 1, sp->time_attr, err) < 0 ||
      spec_get_number(sched, path, "max_t", &sp->max_t, err) < 0 ||
      spec_get_number(sched, path, "reduction_factor", &sp->reduction_factor, err) < 0)
    return -EINVAL;
  if (!(sp->max_t >= 1) || !isfinite(sp->max_t))
    return spec_fail_at(err, path, "max_t", "hyperband needs a finite max_t >= 1");
  if (!(sp->reduction_factor > 1) || !isfinite(sp->reduction_factor))
    return spec_fail_at(err, path, "reduction_factor", "must be > 1");
  if (!(nearbyint(log(sp->max_t) / log(sp->reduction_factor)) + 1 <= HB_MAX_BRACKETS_PER_BAND)) {
    char msg[160];
    snprintf(msg, sizeof msg, "hyperband would have more than %d brackets; raise reduction_factor",
             HB_MAX_BRACKETS_PER_BAND);
    return spec_fail_at(err, path, "reduction_factor", msg);
  }
  return 0;
}

/* --- behind scheduler.h (sched_ops.h) --- */

static int hb_sched_create(struct sched *s, const struct sched_params *params, uint64_t seed) {
  struct hyperband *h;
  int rc;
  (void)seed;
  rc = hb_create(params->max_t, params->reduction_factor, s->mode, params->num_trials, &h);
  if (rc == 0 && params->nobjectives > 1) rc = hb_objectives(h, params->nobjectives, params->modes);
  if (rc == 0)
    s->st = h;
  else
    hb_free(h);
  return rc;
}

static void hb_sched_free(void *st) { hb_free(st); }

static size_t hb_sched_mem_bytes(const void *st) { return hb_mem_bytes(st); }

static int hb_sched_bracket_for(const struct sched *s, int64_t idx) {
  int b = hb_bracket_of(s->st, idx);
  return b < 0 ? 0 : b;
}

static int hb_sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx,
                              const char *config_json) {
  (void)config_json;
  return hb_add_trial(s->st, trial_id, idx);
}

/* hyperband's outcome as a sched_outcome. Paused trials a halving stopped
 * (hb.stopped) are out->ended: the server (decide_end_others) ends them
 * TERMINATED with their reason in the decision's transaction. */
static int hb_sched_outcome(int rc, struct hb_outcome *hb, struct sched_outcome *out) {
  sched_outcome_reset(out);
  if (rc == 0 && hb->nstopped) {
    out->ended = calloc(hb->nstopped, sizeof *out->ended);
    if (!out->ended) rc = -ENOMEM;
    for (size_t i = 0; out->ended && i < hb->nstopped; i++) {
      out->ended[i].trial_id = hb->stopped[i].trial_id;
      snprintf(out->ended[i].reason, sizeof out->ended[i].reason, "%s", hb->stopped[i].reason);
    }
    out->nended = out->ended ? hb->nstopped : 0;
  }
  if (rc == 0) {
    out->action = hb->action == HB_PAUSE  ? SCHED_PAUSE
                  : hb->action == HB_STOP ? SCHED_STOP
                                          : SCHED_CONTINUE;
    out->stopped_early = hb->stopped_early;
    snprintf(out->reason, sizeof out->reason, "%s", hb->reason);
    out->record = hb->record;
    hb->record = NULL;
  }
  hb_outcome_clear(hb);
  return rc;
}

static int hb_sched_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                              struct sched_outcome *out) {
  static const double none[SPEC_MAX_OBJECTIVES] = {NAN, NAN, NAN, NAN};
  struct hb_outcome hb;
  /* A result without the metric ranks below every value. */
  int rc = hb_on_result_mo(s->st, trial_id, t, value ? value : none, &hb);
  return hb_sched_outcome(rc, &hb, out);
}

static int hb_sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                                 const double *last_value, struct sched_outcome *out) {
  struct hb_outcome hb;
  struct sched_outcome ignored;
  int rc;
  (void)has_last;
  (void)t;
  (void)last_value;
  rc = hb_on_trial_end(s->st, trial_id, &hb);
  rc = hb_sched_outcome(rc, &hb, out ? out : &ignored);
  if (!out)
    sched_outcome_clear(&ignored);
  else
    out->action = SCHED_CONTINUE;
  return rc;
}

static int hb_sched_choose(struct sched *s, int can_new, sched_resumable_fn resumable, void *ctx,
                           struct sched_choice *out) {
  struct hb_choice c;
  int rc = hb_choose(s->st, can_new, resumable, ctx, &c);
  if (rc) return rc;
  out->kind = c.kind == HB_RESUME ? SCHED_CHOOSE_RESUME
              : c.kind == HB_NEW  ? SCHED_CHOOSE_NEW
                                  : SCHED_CHOOSE_WAIT;
  out->trial_id = c.trial_id;
  snprintf(out->reason, sizeof out->reason, "%s", c.reason);
  out->record = c.record;
  return 0;
}

static int hb_sched_restore(struct sched *s, int64_t trial_id, const cJSON *record) {
  return hb_restore(s->st, trial_id, record);
}

/* {"type", "time_attr", "max_t", "reduction_factor"} + hb_state_json */
static int hb_sched_state_json(const struct sched *s, cJSON **out) {
  cJSON *hs = NULL;
  if (hb_state_json(s->st, &hs)) return -ENOMEM;
  if (!cJSON_AddStringToObject(hs, "type", "hyperband") ||
      !cJSON_AddStringToObject(hs, "time_attr", s->p.time_attr) ||
      !cJSON_AddNumberToObject(hs, "max_t", s->p.max_t) ||
      !cJSON_AddNumberToObject(hs, "reduction_factor", s->p.reduction_factor)) {
    cJSON_Delete(hs);
    return -ENOMEM;
  }
  *out = hs;
  return 0;
}

const struct sched_ops hb_sched_ops = {
    .create = hb_sched_create,
    .free = hb_sched_free,
    .mem_bytes = hb_sched_mem_bytes,
    .bracket_for = hb_sched_bracket_for,
    .add_trial = hb_sched_add_trial,
    .on_result = hb_sched_on_result,
    .on_trial_end = hb_sched_on_trial_end,
    .choose = hb_sched_choose,
    .restore = hb_sched_restore,
    .state_json = hb_sched_state_json,
};
