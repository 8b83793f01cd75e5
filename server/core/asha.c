/* asha: the stopping variant of ASHA. Each milestone keeps its recorded
 * values sorted, so a cutoff (numpy's nanpercentile, linear) is O(1) and a
 * record is one binary search and one memmove.
 *
 * Memory follows what the spec plans and what was recorded, not the caps:
 * the brackets (params->brackets) and each bracket's rungs are allocated
 * at create, exactly as many as planned, and a rung's values grow by
 * doubling from nothing. A default spec (one bracket, four milestones)
 * costs a few hundred bytes before its first record, not the 41 KB of a
 * fixed SPEC_ASHA_MAX_BRACKETS x SPEC_ASHA_MAX_MILESTONES table. The
 * milestones' t values, the bracket draw and the trial slots are rung.c's,
 * so the promotion variant plans and draws exactly the same way. */
#include "asha.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rung.h"
#include "sched_ops.h"

struct milestone {
  double t; /* the milestone */
  /* One objective: finite recorded values, ascending. Several (k): the
   * finite recorded vectors, k doubles each (flipped: smaller is better),
   * in arrival order, which breaks ranking ties. n and cap count entries. */
  double *vals;
  size_t n, cap;
  size_t nan_count; /* records that were NaN/inf/null: count, never cut */
};

struct bracket {
  int n;                   /* milestones */
  struct milestone *rungs; /* n of them; NULL when n == 0 */
  int64_t stopped;         /* trials stopped early in this bracket */
};

struct trial_slot {
  int64_t id;
  int active; /* in its bracket: added and not ended */
  int bracket;
  uint64_t recorded; /* bit k: has a value at milestone k */
};

/* With several objectives each slot is followed by the trial's last vector
 * (its end passes through the bracket with it). */
struct trial_last {
  int has;
  double t;
  double v[SPEC_MAX_OBJECTIVES]; /* in each objective's own sign */
};

struct asha {
  /* Only what the decisions read of the sched_params (about 400 B with
   * its time_attr and pbt/median parts). */
  double max_t, reduction_factor;
  double sign; /* +1 for max, -1 for min: larger is better inside */
  /* Objectives; with several, flip[j] is +1 for min and -1 for max:
   * smaller is better inside, as Syne Tune's MOASHA keeps them. */
  int k;
  double flip[SPEC_MAX_OBJECTIVES];
  uint64_t bracket_seed;
  int nb;
  struct bracket *b;       /* nb of them */
  struct rung_slots slots; /* struct trial_slot, in arrival order */
};

/* Finds or inserts (inactive, no records) the trial's slot. */
static int slot_get(struct asha *a, int64_t id, int bracket, struct trial_slot **out) {
  void *p;
  int created, rc = rung_slot_get(&a->slots, id, &p, &created);
  if (rc) return rc;
  *out = p;
  if (created) {
    (*out)->id = id;
    (*out)->bracket = bracket;
  }
  return 0;
}

static struct trial_last *slot_last(const struct asha *a, struct trial_slot *s) {
  (void)a;
  return (struct trial_last *)(s + 1);
}

/* --- milestones --- */

static int milestone_insert(struct milestone *r, double v) {
  size_t lo = 0, hi;
  if (!isfinite(v)) {
    r->nan_count++;
    return 0;
  }
  if (r->n == r->cap) {
    /* Doubling from 4: a milestone costs what it holds. */
    double *nv = rung_grow(r->vals, &r->cap, sizeof *nv, 4);
    if (!nv) return -ENOMEM;
    r->vals = nv;
  }
  hi = r->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r->vals[mid] <= v)
      lo = mid + 1;
    else
      hi = mid;
  }
  memmove(r->vals + lo + 1, r->vals + lo, (r->n - lo) * sizeof *r->vals);
  r->vals[lo] = v;
  r->n++;
  return 0;
}

/* Appends a flipped vector (arrival order); a non-finite one is counted
 * beside the rung and never ranked. */
static int milestone_insert_mo(struct milestone *r, int k, const double *v) {
  for (int j = 0; j < k; j++)
    if (!isfinite(v[j])) {
      r->nan_count++;
      return 0;
    }
  if (r->n == r->cap) {
    double *nv = rung_grow(r->vals, &r->cap, (size_t)k * sizeof *nv, 4);
    if (!nv) return -ENOMEM;
    r->vals = nv;
  }
  memcpy(r->vals + r->n * (size_t)k, v, (size_t)k * sizeof *v);
  r->n++;
  return 0;
}

/* Where the rung's last vector ranks among all (rung_mo_order), and whether
 * it is past the top 1/rf: Syne Tune's ranks[-1] > 1 / rf. */
static int milestone_rank_last(const struct milestone *r, int k, double rf,
                               struct asha_outcome *out) {
  size_t pos;
  int rc = rung_mo_rank(r->vals, r->n, k, r->n - 1, &pos, &out->mo_front, &out->mo_nfronts);
  if (!rc) {
    out->mo_ranked = 1;
    out->mo_pos = (int64_t)pos;
    out->mo_n = (int64_t)r->n;
    out->mo_keep = (int64_t)rung_mo_keep(r->n, rf);
    if ((double)pos / (double)r->n > 1.0 / rf) {
      out->decision = ASHA_STOP;
      out->reason = ASHA_REASON_MO_RANK;
    }
  }
  return rc;
}

/* numpy.nanpercentile(values, q) with linear interpolation, including
 * numpy's two-sided lerp so results agree to the last bit. */
static int milestone_cutoff(const struct milestone *r, double rf, double *cutoff) {
  /* Same float steps as Ray and numpy's "linear" method: percentile
   * (1 - 1/rf) * 100, quantile = that / 100, index = (n - 1) * q. */
  double q = ((1.0 - 1.0 / rf) * 100.0) / 100.0, pos, t, lo_v, hi_v, d;
  size_t lo;
  if (r->n == 0) return -ENOENT;
  pos = (double)(r->n - 1) * q;
  lo = (size_t)floor(pos);
  if (lo >= r->n - 1) {
    *cutoff = r->vals[r->n - 1];
    return 0;
  }
  t = pos - (double)lo;
  lo_v = r->vals[lo];
  hi_v = r->vals[lo + 1];
  d = hi_v - lo_v;
  *cutoff = t >= 0.5 ? hi_v - d * (1.0 - t) : lo_v + d * t;
  return 0;
}

/* --- public --- */

int asha_create(const struct sched_params *params, enum spec_mode mode, uint64_t seed,
                struct asha **out) {
  struct asha *a;
  int rc = -ENOMEM;
  *out = NULL;
  if (!params || params->type != SPEC_SCHED_ASHA || !(params->max_t > 0) ||
      !(params->grace_period > 0) || !(params->reduction_factor > 1) || params->brackets < 1 ||
      params->brackets > SPEC_ASHA_MAX_BRACKETS)
    return -EINVAL;
  a = calloc(1, sizeof *a);
  if (!a) return -ENOMEM;
  a->max_t = params->max_t;
  a->reduction_factor = params->reduction_factor;
  a->sign = mode == SPEC_MODE_MAX ? 1.0 : -1.0;
  a->bracket_seed = rung_bracket_seed(seed);
  a->k = rung_mo_flips(params, mode, a->flip);
  rung_slots_init(&a->slots,
                  sizeof(struct trial_slot) + (a->k > 1 ? sizeof(struct trial_last) : 0));
  a->b = calloc((size_t)params->brackets, sizeof *a->b);
  if (!a->b) goto fail;
  a->nb = params->brackets;
  for (int s = 0; s < a->nb; s++) {
    int n;
    if (rung_ray_count(params->max_t, params->grace_period, params->reduction_factor, s, &n)) {
      rc = -EINVAL;
      goto fail;
    }
    if (n > 0) {
      a->b[s].rungs = calloc((size_t)n, sizeof *a->b[s].rungs);
      if (!a->b[s].rungs) goto fail;
    }
    a->b[s].n = n;
    for (int k = 0; k < n; k++)
      a->b[s].rungs[k].t = rung_t(params->grace_period, params->reduction_factor, s, k);
  }
  *out = a;
  return 0;
fail:
  asha_free(a);
  return rc;
}

void asha_free(struct asha *a) {
  if (!a) return;
  for (int s = 0; s < a->nb; s++) {
    for (int k = 0; k < a->b[s].n; k++) free(a->b[s].rungs[k].vals);
    free(a->b[s].rungs);
  }
  free(a->b);
  rung_slots_free(&a->slots);
  free(a);
}

size_t asha_mem_bytes(const struct asha *a) {
  size_t n;
  if (!a) return 0;
  n = sizeof *a + (size_t)a->nb * sizeof *a->b + rung_slots_mem_bytes(&a->slots);
  for (int s = 0; s < a->nb; s++) {
    n += (size_t)a->b[s].n * sizeof *a->b[s].rungs;
    for (int k = 0; k < a->b[s].n; k++)
      n += a->b[s].rungs[k].cap * (size_t)a->k * sizeof *a->b[s].rungs[k].vals;
  }
  return n;
}

int asha_num_brackets(const struct asha *a) { return a->nb; }

int asha_num_milestones(const struct asha *a, int bracket) {
  if (bracket < 0 || bracket >= a->nb) return -EINVAL;
  return a->b[bracket].n;
}

double asha_milestone(const struct asha *a, int bracket, int index) {
  if (bracket < 0 || bracket >= a->nb || index < 0 || index >= a->b[bracket].n) return NAN;
  return a->b[bracket].rungs[index].t;
}

int asha_bracket_for(const struct asha *a, int64_t trial_index) {
  int n[SPEC_ASHA_MAX_BRACKETS];
  for (int s = 0; s < a->nb; s++) n[s] = a->b[s].n;
  return rung_bracket_draw(a->bracket_seed, n, a->nb, trial_index);
}

int asha_add_trial(struct asha *a, int64_t trial_id, int bracket) {
  struct trial_slot *s;
  int rc;
  if (bracket < 0 || bracket >= a->nb) return -EINVAL;
  rc = slot_get(a, trial_id, bracket, &s);
  if (rc) return rc;
  if (s->recorded && s->bracket != bracket) return -EINVAL;
  s->bracket = bracket;
  s->active = 1;
  return 0;
}

int asha_has_trial(const struct asha *a, int64_t trial_id) {
  const struct trial_slot *s = rung_slot_find(&a->slots, trial_id);
  return s && s->active;
}

static void outcome_init(struct asha_outcome *out, int bracket) {
  memset(out, 0, sizeof *out);
  out->decision = ASHA_CONTINUE;
  out->reason = ASHA_REASON_NONE;
  out->bracket = bracket;
  out->milestone_index = -1;
  out->milestone = NAN;
  out->value = NAN;
  out->cutoff = NAN;
}

/* Syne Tune's MOASHA Bracket.on_result for one milestone r (index k):
 * records the flipped vector and ranks the rung. */
static int milestone_walk_mo(struct asha *a, struct milestone *r, const double *values,
                             struct asha_outcome *out) {
  int finite = 1;
  for (int j = 0; j < a->k; j++) {
    out->mo_values[j] = a->flip[j] * values[j];
    finite = finite && isfinite(out->mo_values[j]);
  }
  if (!finite) {
    /* As with one metric: a diverged trial stops, recorded beside the rung. */
    for (int j = 0; j < a->k; j++) out->mo_values[j] = NAN;
    out->decision = ASHA_STOP;
    out->reason = ASHA_REASON_NONFINITE;
  }
  int rc = milestone_insert_mo(r, a->k, out->mo_values);
  if (!rc && finite) rc = milestone_rank_last(r, a->k, a->reduction_factor, out);
  out->mo_recorded = !rc;
  return rc;
}

/* Ray's _Bracket.on_result (Syne Tune's for several objectives): from the
 * highest milestone down, the first one reached and not yet recorded
 * decides and records; one per result. values: a->k of them. */
static int bracket_walk(struct asha *a, struct trial_slot *s, double t, const double *values,
                        struct asha_outcome *out) {
  struct bracket *b = &a->b[s->bracket];
  double v = a->sign * values[0];
  for (int k = b->n - 1; k >= 0; k--) {
    struct milestone *r = &b->rungs[k];
    double cutoff;
    if (t < r->t || (s->recorded >> k & 1)) continue;
    out->milestone_index = k;
    out->milestone = r->t;
    if (a->k > 1) {
      int rc = milestone_walk_mo(a, r, values, out);
      if (rc) return rc;
      s->recorded |= 1ULL << k;
      return 0;
    }
    if (milestone_cutoff(r, a->reduction_factor, &cutoff) == 0) {
      out->has_cutoff = 1;
      out->cutoff = cutoff;
    }
    if (!isfinite(v)) {
      /* Deliberate difference from Ray: a diverged trial stops. */
      v = NAN;
      out->decision = ASHA_STOP;
      out->reason = ASHA_REASON_NONFINITE;
    } else if (out->has_cutoff && v < cutoff) {
      out->decision = ASHA_STOP;
      out->reason = ASHA_REASON_CUTOFF;
    }
    if (milestone_insert(r, v)) return -ENOMEM;
    s->recorded |= 1ULL << k;
    out->recorded = 1;
    out->value = v;
    return 0;
  }
  return 0;
}

static int asha_result(struct asha *a, int64_t trial_id, double t, const double *values,
                       struct asha_outcome *out) {
  struct trial_slot *s = rung_slot_find(&a->slots, trial_id);
  int rc;
  if (!s || !s->active) return -ENOENT;
  if (isnan(t)) return -EINVAL;
  outcome_init(out, s->bracket);
  if (t >= a->max_t) {
    out->decision = ASHA_STOP;
    out->reason = ASHA_REASON_MAX_T;
    return 0;
  }
  rc = bracket_walk(a, s, t, values, out);
  if (rc) return rc;
  if (out->decision == ASHA_STOP) {
    out->stopped_early = 1;
    a->b[s->bracket].stopped++;
  }
  return 0;
}

int asha_on_result(struct asha *a, int64_t trial_id, double t, double value,
                   struct asha_outcome *out) {
  if (a->k > 1) return -EINVAL;
  return asha_result(a, trial_id, t, &value, out);
}

int asha_on_result_mo(struct asha *a, int64_t trial_id, double t, const double *values,
                      struct asha_outcome *out) {
  struct trial_slot *s = rung_slot_find(&a->slots, trial_id);
  if (a->k > 1 && s && s->active && !isnan(t)) {
    struct trial_last *l = slot_last(a, s);
    l->has = 1;
    l->t = t;
    memcpy(l->v, values, (size_t)a->k * sizeof *values);
  }
  return asha_result(a, trial_id, t, values, out);
}

int asha_on_trial_end(struct asha *a, int64_t trial_id, int has_last, double t, double value,
                      struct asha_outcome *out) {
  struct trial_slot *s = rung_slot_find(&a->slots, trial_id);
  int rc = 0;
  if (!s || !s->active) return -ENOENT;
  if (out) outcome_init(out, s->bracket);
  if (has_last) {
    if (!out || isnan(t)) return -EINVAL;
    /* Ray's on_trial_complete: the decision is ignored and counts
     * as no stop. */
    if (a->k == 1) {
      rc = bracket_walk(a, s, t, &value, out);
    } else {
      struct trial_last *l = slot_last(a, s);
      if (l->has && l->t == t) rc = bracket_walk(a, s, t, l->v, out);
    }
    out->stopped_early = 0;
  }
  if (rc == 0) s->active = 0;
  return rc;
}

/* The slot and milestone index a replayed record lands in: -EINVAL when
 * the bracket or milestone does not exist or the trial has a record there. */
static int restore_slot(struct asha *a, int64_t trial_id, int bracket, double milestone,
                        struct trial_slot **s, int *k) {
  struct bracket *b;
  int rc;
  if (bracket < 0 || bracket >= a->nb) return -EINVAL;
  b = &a->b[bracket];
  for (*k = 0; *k < b->n; (*k)++)
    if (fabs(b->rungs[*k].t - milestone) <= 1e-9 * fmax(1.0, fabs(milestone))) break;
  if (*k == b->n) return -EINVAL;
  rc = slot_get(a, trial_id, bracket, s);
  if (rc) return rc;
  if ((*s)->bracket != bracket || ((*s)->recorded >> *k & 1)) return -EINVAL;
  return 0;
}

int asha_restore_record(struct asha *a, int64_t trial_id, int bracket, double milestone,
                        double value, int stopped_early) {
  struct trial_slot *s;
  int k, rc = a->k > 1 ? -EINVAL : restore_slot(a, trial_id, bracket, milestone, &s, &k);
  if (!rc) rc = milestone_insert(&a->b[bracket].rungs[k], value);
  if (rc) return rc;
  s->recorded |= 1ULL << k;
  if (stopped_early) a->b[bracket].stopped++;
  return 0;
}

int asha_restore_record_mo(struct asha *a, int64_t trial_id, int bracket, double milestone,
                           const double *values, int stopped_early) {
  static const double nan[SPEC_MAX_OBJECTIVES] = {NAN, NAN, NAN, NAN};
  struct trial_slot *s;
  int k, rc = a->k < 2 ? -EINVAL : restore_slot(a, trial_id, bracket, milestone, &s, &k);
  if (!rc) rc = milestone_insert_mo(&a->b[bracket].rungs[k], a->k, values ? values : nan);
  if (rc) return rc;
  s->recorded |= 1ULL << k;
  if (stopped_early) a->b[bracket].stopped++;
  return 0;
}

int asha_cutoff(const struct asha *a, int bracket, int index, double *cutoff) {
  double c;
  if (bracket < 0 || bracket >= a->nb || index < 0 || index >= a->b[bracket].n) return -EINVAL;
  if (a->k > 1) return -ENOENT; /* several objectives rank, no cutoff */
  if (milestone_cutoff(&a->b[bracket].rungs[index], a->reduction_factor, &c)) return -ENOENT;
  *cutoff = a->sign * c;
  return 0;
}

int asha_state_json(const struct asha *a, cJSON **out) {
  cJSON *arr = cJSON_CreateArray();
  *out = NULL;
  if (!arr) return -ENOMEM;
  for (int s = 0; s < a->nb; s++) {
    cJSON *br = cJSON_CreateObject(), *ms;
    if (!br || !cJSON_AddItemToArray(arr, br)) {
      cJSON_Delete(br);
      goto fail;
    }
    if (!cJSON_AddNumberToObject(br, "index", s) ||
        !cJSON_AddNumberToObject(br, "stopped", (double)a->b[s].stopped) ||
        !(ms = cJSON_AddArrayToObject(br, "milestones")))
      goto fail;
    for (int k = 0; k < a->b[s].n; k++) {
      const struct milestone *r = &a->b[s].rungs[k];
      cJSON *m = cJSON_CreateObject();
      double c;
      if (!m || !cJSON_AddItemToArray(ms, m)) {
        cJSON_Delete(m);
        goto fail;
      }
      if (!cJSON_AddNumberToObject(m, "t", r->t) ||
          !cJSON_AddNumberToObject(m, "recorded", (double)(r->n + r->nan_count)))
        goto fail;
      if (asha_cutoff(a, s, k, &c) == 0) {
        if (!cJSON_AddNumberToObject(m, "cutoff", c)) goto fail;
      } else if (!cJSON_AddNullToObject(m, "cutoff")) {
        goto fail;
      }
    }
  }
  *out = arr;
  return 0;
fail:
  cJSON_Delete(arr);
  return -ENOMEM;
}

/* --- the scheduler object --- */

int asha_check(const cJSON *sched, const char *path, struct sched_params *sp,
               struct validate_error *err) {
  static const char *const keys[] = {
      "type",     "time_attr", "max_t", "grace_period", "reduction_factor",
      "brackets", "promotion", NULL};
  const cJSON *promo;
  int64_t brackets = 1;
  int rc;

  sp->type = SPEC_SCHED_ASHA;
  sp->has_max_t = 1;
  sp->max_t = 100;
  sp->grace_period = 1;
  sp->reduction_factor = 4;
  if (spec_check_keys(sched, path, "asha", keys, err) ||
      spec_get_name(sched, path, "time_attr", 1, sp->time_attr, err) < 0)
    return -EINVAL;
  rc = spec_get_number(sched, path, "max_t", &sp->max_t, err);
  if (rc < 0) return rc;
  if (!(sp->max_t > 0)) return spec_fail_at(err, path, "max_t", "must be > 0");
  if (spec_get_number(sched, path, "grace_period", &sp->grace_period, err) < 0 ||
      spec_get_number(sched, path, "reduction_factor", &sp->reduction_factor, err) < 0 ||
      spec_get_int(sched, path, "brackets", 1, SPEC_ASHA_MAX_BRACKETS, &brackets, err) < 0)
    return -EINVAL;
  sp->brackets = (int)brackets;
  /* "promotion": true is ASHA's promotion variant (asha_promo.c): trials
   * pause at each rung and the top 1/eta are resumed. */
  promo = cJSON_GetObjectItemCaseSensitive(sched, "promotion");
  if (promo && !cJSON_IsBool(promo))
    return spec_fail_at(err, path, "promotion", "must be true or false");
  sp->promotion = cJSON_IsTrue(promo);
  if (!(sp->grace_period > 0)) return spec_fail_at(err, path, "grace_period", "must be > 0");
  if (!(sp->grace_period <= sp->max_t))
    return spec_fail_at(err, path, "grace_period", "asha needs grace_period <= max_t");
  if (!(sp->reduction_factor > 1))
    return spec_fail_at(err, path, "reduction_factor", "must be > 1");
  /* Bracket 0 has the most milestones; bound it so per-trial state stays
   * one 64-bit mask per trial. Compared as a double: max_t / grace_period
   * can overflow to inf, and casting that to int is undefined. */
  if (!(log(sp->max_t / sp->grace_period) / log(sp->reduction_factor) + 1 <
        SPEC_ASHA_MAX_MILESTONES + 1)) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "asha would have more than %d milestones; raise reduction_factor or grace_period",
             SPEC_ASHA_MAX_MILESTONES);
    return spec_fail_at(err, path, "reduction_factor", msg);
  }
  return 0;
}

/* --- behind scheduler.h (sched_ops.h) --- */

static int asha_sched_create(struct sched *s, const struct sched_params *params, uint64_t seed) {
  struct asha *a;
  int rc = asha_create(params, s->mode, seed, &a);
  if (rc == 0) s->st = a;
  return rc;
}

static void asha_sched_free(void *st) { asha_free(st); }

static size_t asha_sched_mem_bytes(const void *st) { return asha_mem_bytes(st); }

static int asha_sched_bracket_for(const struct sched *s, int64_t idx) {
  return asha_bracket_for(s->st, idx);
}

static int asha_sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx,
                                const char *config_json) {
  (void)config_json;
  return asha_add_trial(s->st, trial_id, asha_bracket_for(s->st, idx));
}

/* asha's outcome as a sched_outcome with its reason sentence. The values in
 * the sentence are in the metric's own sign (asha keeps them flipped for
 * min). */
static void asha_sched_outcome(const struct sched *s, double t, struct sched_outcome *out) {
  const struct asha *st = s->st;
  const struct asha_outcome *a = &out->asha;
  if (a->decision != ASHA_STOP) {
    out->action = SCHED_CONTINUE;
    return;
  }
  out->action = SCHED_STOP;
  out->stopped_early = a->stopped_early;
  switch (a->reason) {
  case ASHA_REASON_MAX_T:
    snprintf(out->reason, sizeof out->reason, "reached max_t %g (%s %g)", s->p.max_t,
             s->p.time_attr, t);
    break;
  case ASHA_REASON_NONFINITE:
    snprintf(out->reason, sizeof out->reason,
             "stopped at t=%g: the metric is not a finite number at rung %g", t, a->milestone);
    break;
  case ASHA_REASON_CUTOFF: {
    /* The "of N": every record at the milestone, NaN ones included. */
    const struct milestone *m = &st->b[a->bracket].rungs[a->milestone_index];
    snprintf(out->reason, sizeof out->reason,
             "stopped at t=%g: %.6g worse than cutoff %.6g of %d trials at rung %g", t,
             st->sign * a->value, st->sign * a->cutoff, (int)(m->n + m->nan_count), a->milestone);
    break;
  }
  case ASHA_REASON_MO_RANK:
    /* 1-based in the sentence: "front 3 of 5", "7th of 9". */
    snprintf(out->reason, sizeof out->reason,
             "stopped at t=%g: front %d of %d at rung %g, %lld of %lld trials in "
             "non-dominated order (epsilon-net within a front); only the first %lld continue",
             t, a->mo_front + 1, a->mo_nfronts, a->milestone, (long long)a->mo_pos + 1,
             (long long)a->mo_n, (long long)a->mo_keep);
    break;
  default:
    snprintf(out->reason, sizeof out->reason, "stopped at t=%g", t);
  }
}

/* With several objectives the scheduler's record (sched_records, replayed
 * by asha_sched_restore in order): {"asha_mo": {"bracket", "milestone",
 * "values": [flipped] or null, "stopped"}}. */
static int asha_sched_record_mo(struct sched_outcome *out, int k) {
  const struct asha_outcome *a = &out->asha;
  cJSON *r = cJSON_CreateObject(), *m = r ? cJSON_AddObjectToObject(r, "asha_mo") : NULL, *v;
  int ok = m && cJSON_AddNumberToObject(m, "bracket", a->bracket) &&
           cJSON_AddNumberToObject(m, "milestone", a->milestone) &&
           cJSON_AddBoolToObject(m, "stopped", a->stopped_early);
  if (ok && isnan(a->mo_values[0])) {
    ok = cJSON_AddNullToObject(m, "values") != NULL;
  } else if (ok) {
    ok = (v = cJSON_AddArrayToObject(m, "values")) != NULL;
    for (int j = 0; ok && j < k; j++) {
      cJSON *x = cJSON_CreateNumber(a->mo_values[j]);
      ok = x && cJSON_AddItemToArray(v, x);
      if (!ok) cJSON_Delete(x);
    }
  }
  if (!ok) {
    cJSON_Delete(r);
    return -ENOMEM;
  }
  out->record = r;
  return 0;
}

static int asha_sched_restore(struct sched *s, int64_t trial_id, const cJSON *record) {
  const struct asha *st = s->st;
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(record, "asha_mo");
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(m, "bracket");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "milestone");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "values");
  double vals[SPEC_MAX_OBJECTIVES];
  if (!cJSON_IsNumber(b) || !cJSON_IsNumber(t) ||
      !(cJSON_IsNull(v) || (cJSON_IsArray(v) && cJSON_GetArraySize(v) == st->k)))
    return -EINVAL;
  for (int j = 0; cJSON_IsArray(v) && j < st->k; j++) {
    const cJSON *x = cJSON_GetArrayItem(v, j);
    if (!cJSON_IsNumber(x)) return -EINVAL;
    vals[j] = x->valuedouble;
  }
  return asha_restore_record_mo(s->st, trial_id, b->valueint, t->valuedouble,
                                cJSON_IsArray(v) ? vals : NULL,
                                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "stopped")));
}

static int asha_sched_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                                struct sched_outcome *out) {
  int rc;
  if (!value) {
    /* Ray: a result without the metric is not ASHA's business. */
    if (!asha_has_trial(s->st, trial_id)) return -ENOENT;
    sched_outcome_reset(out);
    return 0;
  }
  sched_outcome_reset(out);
  rc = asha_on_result_mo(s->st, trial_id, t, value, &out->asha);
  if (rc) return rc;
  asha_sched_outcome(s, t, out);
  return out->asha.mo_recorded ? asha_sched_record_mo(out, ((struct asha *)s->st)->k) : 0;
}

static int asha_sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                                   const double *last_value, struct sched_outcome *out) {
  if (out) sched_outcome_reset(out);
  if (has_last && last_value && out) {
    int rc = asha_on_trial_end(s->st, trial_id, 1, t, *last_value, &out->asha);
    /* The decision of the last pass is not the server's business. */
    out->action = SCHED_CONTINUE;
    if (!rc && out->asha.mo_recorded) rc = asha_sched_record_mo(out, ((struct asha *)s->st)->k);
    return rc;
  }
  return asha_on_trial_end(s->st, trial_id, 0, 0, 0, NULL);
}

static int asha_sched_restore_record(struct sched *s, int64_t trial_id, int bracket,
                                     double milestone, double value, int stopped_early) {
  return asha_restore_record(s->st, trial_id, bracket, milestone, value, stopped_early);
}

static int asha_sched_state_json(const struct sched *s, cJSON **out) {
  cJSON *o = cJSON_CreateObject(), *br = NULL;
  int ok;
  if (!o) return -ENOMEM;
  ok = cJSON_AddStringToObject(o, "type", "asha") &&
       cJSON_AddStringToObject(o, "time_attr", s->p.time_attr) &&
       (s->p.has_max_t ? cJSON_AddNumberToObject(o, "max_t", s->p.max_t) != NULL
                       : cJSON_AddNullToObject(o, "max_t") != NULL) &&
       cJSON_AddNumberToObject(o, "grace_period", s->p.grace_period) &&
       cJSON_AddNumberToObject(o, "reduction_factor", s->p.reduction_factor) &&
       asha_state_json(s->st, &br) == 0;
  if (ok && !cJSON_AddItemToObject(o, "brackets", br)) {
    cJSON_Delete(br);
    ok = 0;
  }
  if (!ok) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  *out = o;
  return 0;
}

const struct sched_ops asha_sched_ops = {
    .create = asha_sched_create,
    .free = asha_sched_free,
    .mem_bytes = asha_sched_mem_bytes,
    .bracket_for = asha_sched_bracket_for,
    .add_trial = asha_sched_add_trial,
    .on_result = asha_sched_on_result,
    .on_trial_end = asha_sched_on_trial_end,
    .restore = asha_sched_restore,
    .restore_record = asha_sched_restore_record,
    .state_json = asha_sched_state_json,
};
