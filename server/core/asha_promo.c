/* asha_promo: ASHA's promotion variant (Algorithm 2 of Li et al. 2020). Each
 * rung keeps its entries ranked (best first, ties by arrival, non-finite
 * last), so a result is one binary search and one memmove and get_job reads
 * only the top floor(n/eta) of each rung. Memory follows the spec and the
 * records: the planned brackets and their pausing rungs are allocated at
 * create (not a fixed SPEC_ASHA_MAX_BRACKETS x SPEC_ASHA_MAX_MILESTONES
 * table of about 40 KB), and a rung's entries grow by doubling. The rung
 * times, the bracket draw and the trial slots are rung.c's, shared with the
 * stopping variant (asha.c). */
#include "asha_promo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rung.h"
#include "sched_ops.h"

struct entry {
  int64_t trial_id;
  double v; /* sign-flipped: larger is better; NaN for non-finite */
};

struct prung {
  double t;
  /* One objective: ranked. Several (k): in arrival order (v 0, or NaN for a
   * non-finite vector), the vectors in mv (k each, flipped: smaller is
   * better), ranked when needed (prung_mo_ranked). */
  struct entry *e;
  size_t n, cap;
  double *mv;
  size_t mcap;
  int64_t promoted;
};

struct pbracket {
  int n;           /* pausing rungs */
  int draw_n;      /* the stopping variant's milestone count: the draw's weight */
  struct prung *r; /* n of them; NULL when n == 0 */
};

struct ptrial {
  int64_t id;
  int added; /* exists (sched_add_trial) */
  int ended;
  int paused; /* waiting at `rung` for a promotion */
  int bracket;
  int rung; /* highest rung recorded, -1 none */
};

struct apromo {
  /* Only what the decisions read of the sched_params. */
  double max_t, reduction_factor;
  double sign;
  int k;                            /* objectives */
  double flip[SPEC_MAX_OBJECTIVES]; /* several: +1 min, -1 max */
  uint64_t bracket_seed;
  int nb;
  struct pbracket *b;      /* nb of them */
  struct rung_slots slots; /* struct ptrial, in arrival order */
};

/* --- trials --- */

static struct ptrial *find(const struct apromo *a, int64_t id) {
  return rung_slot_find(&a->slots, id);
}

static int get(struct apromo *a, int64_t id, int bracket, struct ptrial **out) {
  void *p;
  int created, rc = rung_slot_get(&a->slots, id, &p, &created);
  if (rc) return rc;
  *out = p;
  if (created) {
    (*out)->id = id;
    (*out)->bracket = bracket;
    (*out)->rung = -1;
  }
  return 0;
}

/* --- setup --- */

int apromo_create(const struct sched_params *params, enum spec_mode mode, uint64_t seed,
                  struct apromo **out) {
  struct apromo *a;
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
  a->k = rung_mo_flips(params, mode, a->flip);
  /* The stopping variant's bracket draw: the same seed gives the same
   * brackets whichever variant runs. */
  a->bracket_seed = rung_bracket_seed(seed);
  rung_slots_init(&a->slots, sizeof(struct ptrial));
  a->b = calloc((size_t)params->brackets, sizeof *a->b);
  if (!a->b) goto fail;
  a->nb = params->brackets;
  for (int b = 0; b < a->nb; b++) {
    int n = rung_pause_count(params->max_t, params->grace_period, params->reduction_factor, b);
    /* Counted as the stopping variant counts them, so that both
     * variants draw the same brackets. */
    if (rung_ray_count(params->max_t, params->grace_period, params->reduction_factor, b,
                       &a->b[b].draw_n)) {
      rc = -EINVAL;
      goto fail;
    }
    if (n > 0) {
      a->b[b].r = calloc((size_t)n, sizeof *a->b[b].r);
      if (!a->b[b].r) goto fail;
    }
    a->b[b].n = n;
    for (int k = 0; k < n; k++)
      a->b[b].r[k].t = rung_t(params->grace_period, params->reduction_factor, b, k);
  }
  *out = a;
  return 0;
fail:
  apromo_free(a);
  return rc;
}

void apromo_free(struct apromo *a) {
  if (!a) return;
  for (int b = 0; b < a->nb; b++) {
    for (int k = 0; k < a->b[b].n; k++) {
      free(a->b[b].r[k].e);
      free(a->b[b].r[k].mv);
    }
    free(a->b[b].r);
  }
  free(a->b);
  rung_slots_free(&a->slots);
  free(a);
}

size_t apromo_mem_bytes(const struct apromo *a) {
  size_t n;
  if (!a) return 0;
  n = sizeof *a + (size_t)a->nb * sizeof *a->b + rung_slots_mem_bytes(&a->slots);
  for (int b = 0; b < a->nb; b++) {
    n += (size_t)a->b[b].n * sizeof *a->b[b].r;
    for (int k = 0; k < a->b[b].n; k++)
      n += a->b[b].r[k].cap * sizeof *a->b[b].r[k].e + a->b[b].r[k].mcap * sizeof(double);
  }
  return n;
}

int apromo_num_brackets(const struct apromo *a) { return a->nb; }

int apromo_num_rungs(const struct apromo *a, int bracket) {
  return bracket < 0 || bracket >= a->nb ? -EINVAL : a->b[bracket].n;
}

double apromo_rung_t(const struct apromo *a, int bracket, int k) {
  if (bracket < 0 || bracket >= a->nb || k < 0 || k >= a->b[bracket].n) return NAN;
  return a->b[bracket].r[k].t;
}

/* asha_bracket_for's draw: the same seed and weights, so both variants
 * agree. */
int apromo_bracket_for(const struct apromo *a, int64_t idx) {
  int n[SPEC_ASHA_MAX_BRACKETS];
  for (int b = 0; b < a->nb; b++) n[b] = a->b[b].draw_n;
  return rung_bracket_draw(a->bracket_seed, n, a->nb, idx);
}

int apromo_add_trial(struct apromo *a, int64_t trial_id, int bracket) {
  struct ptrial *t;
  if (bracket < 0 || bracket >= a->nb) return -EINVAL;
  int rc = get(a, trial_id, bracket, &t);
  if (rc) return rc;
  if (t->bracket != bracket) return -EINVAL;
  t->added = 1;
  return 0;
}

/* --- rungs --- */

/* Inserts after every entry at least as good (ties: arrival order);
 * non-finite values go last. Returns the 0-based rank or -ENOMEM. */
static int64_t prung_insert(struct prung *r, int64_t id, double v) {
  size_t lo = 0, hi = r->n;
  if (r->n == r->cap) {
    /* Doubling from 4: a rung costs what it holds. */
    struct entry *ne = rung_grow(r->e, &r->cap, sizeof *ne, 4);
    if (!ne) return -ENOMEM;
    r->e = ne;
  }
  if (isfinite(v)) {
    /* First entry worse than v: non-finite or smaller. */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (isfinite(r->e[mid].v) && r->e[mid].v >= v)
        lo = mid + 1;
      else
        hi = mid;
    }
  } else {
    lo = r->n;
    v = NAN;
  }
  memmove(r->e + lo + 1, r->e + lo, (r->n - lo) * sizeof *r->e);
  r->e[lo] = (struct entry){.trial_id = id, .v = v};
  r->n++;
  return (int64_t)lo;
}

/* Several objectives: appends the flipped vector (arrival order); an entry
 * with a non-finite value gets v NaN. 0 or -ENOMEM (rung unchanged). */
static int prung_append_mo(struct prung *r, int k, int64_t id, const double *v) {
  int finite = 1;
  if (r->n == r->cap) {
    struct entry *ne = rung_grow(r->e, &r->cap, sizeof *ne, 4);
    if (!ne) return -ENOMEM;
    r->e = ne;
  }
  if ((r->n + 1) * (size_t)k > r->mcap) {
    size_t want = r->cap * (size_t)k;
    double *nv = realloc(r->mv, want * sizeof *nv);
    if (!nv) return -ENOMEM;
    r->mv = nv;
    r->mcap = want;
  }
  for (int j = 0; j < k; j++) finite = finite && isfinite(v[j]);
  memcpy(r->mv + r->n * (size_t)k, v, (size_t)k * sizeof *v);
  r->e[r->n++] = (struct entry){.trial_id = id, .v = finite ? 0 : NAN};
  return 0;
}

/* Several objectives: the rung's entry indices best first (the finite
 * vectors in rung_mo_order()'s order, then the others by arrival) into
 * order (r->n of them); front/nfronts of entry `of` (or -1). */
static int prung_mo_ranked(const struct prung *r, int k, size_t *order, size_t of, int *front,
                           int *nfronts) {
  size_t nf = 0, m = 0;
  for (size_t i = 0; i < r->n; i++) nf += isfinite(r->e[i].v);
  double *x = malloc((nf ? nf : 1) * (size_t)k * sizeof *x);
  size_t *idx = malloc((nf ? nf : 1) * sizeof *idx), *pos = malloc((nf ? nf : 1) * sizeof *pos);
  int *fr = malloc((nf ? nf : 1) * sizeof *fr), rc = -ENOMEM;
  if (x && idx && pos && fr) {
    for (size_t i = 0; i < r->n; i++)
      if (isfinite(r->e[i].v)) {
        memcpy(x + m * (size_t)k, r->mv + i * (size_t)k, (size_t)k * sizeof *x);
        idx[m++] = i;
      }
    *nfronts = 0;
    rc = rung_mo_order(x, nf, k, pos, fr, nfronts);
  }
  if (!rc) {
    *front = -1;
    for (size_t j = 0; j < nf; j++) {
      order[pos[j]] = idx[j];
      if (idx[j] == of) *front = fr[j];
    }
    for (size_t i = 0; i < r->n; i++)
      if (!isfinite(r->e[i].v)) order[m++] = i;
  }
  free(x);
  free(idx);
  free(pos);
  free(fr);
  return rc;
}

/* Records the value (sign-flipped; with several objectives the flipped
 * vector vs) at rung k of the trial's bracket. out (may be NULL) gets the
 * rank (and front) there. */
static int record_at(struct apromo *a, struct ptrial *t, int k, double v, const double *vs,
                     struct apromo_outcome *out) {
  struct prung *r = &a->b[t->bracket].r[k];
  int64_t pos;
  if (a->k == 1) {
    if ((pos = prung_insert(r, t->id, v)) < 0) return (int)pos;
  } else {
    int rc = prung_append_mo(r, a->k, t->id, vs);
    if (rc) return rc;
    v = r->e[r->n - 1].v;
    pos = (int64_t)r->n - 1;
    if (out && isfinite(v)) {
      size_t *order = malloc(r->n * sizeof *order);
      if (!order || prung_mo_ranked(r, a->k, order, r->n - 1, &out->front, &out->nfronts)) {
        free(order);
        r->n--; /* not recorded after all */
        return -ENOMEM;
      }
      for (size_t i = 0; i < r->n; i++)
        if (order[i] == r->n - 1) pos = (int64_t)i;
      free(order);
    }
  }
  t->rung = k;
  t->paused = isfinite(v);
  if (out) out->rank = pos + 1;
  return 0;
}

/* {"b", "r", "v", "p"}: v the value in its own sign, null when not finite;
 * with several objectives (nv > 1) the list of them, null when one is not
 * finite. */
static cJSON *make_record(int bracket, int k, const double *own, int nv, int paused) {
  cJSON *o = cJSON_CreateObject(), *v = NULL;
  int finite = 1;
  for (int j = 0; j < nv; j++) finite = finite && isfinite(own[j]);
  if (!finite)
    v = cJSON_CreateNull();
  else if (nv == 1)
    v = cJSON_CreateNumber(own[0]);
  else
    v = cJSON_CreateDoubleArray(own, nv);
  if (!o || !v || !cJSON_AddItemToObject(o, "v", v)) {
    cJSON_Delete(v);
    cJSON_Delete(o);
    return NULL;
  }
  if (!cJSON_AddNumberToObject(o, "b", bracket) || !cJSON_AddNumberToObject(o, "r", k) ||
      !cJSON_AddNumberToObject(o, "p", paused)) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static int apromo_result(struct apromo *a, int64_t trial_id, double t, const double *values,
                         struct apromo_outcome *out) {
  struct ptrial *tr = find(a, trial_id);
  memset(out, 0, sizeof *out);
  out->rung = -1;
  if (!tr) return -ENOENT;
  out->bracket = tr->bracket;
  if (tr->ended || tr->paused)
    return 0; /* a late result of a finished or paused run: nothing to decide */
  if (t >= a->max_t) {
    /* Done: the last rung is max_t itself, where nothing is ranked. */
    out->action = APROMO_STOP;
    out->why = APROMO_MAX_T;
    return 0;
  }
  int k = tr->rung + 1;
  const struct pbracket *b = &a->b[tr->bracket];
  if (k >= b->n || t < b->r[k].t) return 0;
  double v = isfinite(values[0]) ? a->sign * values[0] : NAN, vs[SPEC_MAX_OBJECTIVES];
  for (int j = 0; a->k > 1 && j < a->k; j++) {
    vs[j] = a->flip[j] * values[j];
    if (!isfinite(vs[j])) v = NAN;
  }
  cJSON *rec = make_record(tr->bracket, k, values, a->k, isfinite(v));
  if (!rec) return -ENOMEM;
  int rc = record_at(a, tr, k, v, vs, out);
  if (rc) {
    cJSON_Delete(rec);
    return rc;
  }
  out->rung = k;
  out->rung_t = b->r[k].t;
  out->n = (int64_t)b->r[k].n;
  out->record = rec;
  if (isfinite(v)) {
    out->action = APROMO_PAUSE;
  } else {
    /* It can never be promoted: end it rather than park it. */
    out->action = APROMO_STOP;
    out->why = APROMO_NONFINITE;
  }
  return 0;
}

int apromo_on_result(struct apromo *a, int64_t trial_id, double t, double value,
                     struct apromo_outcome *out) {
  if (a->k > 1) return -EINVAL;
  return apromo_result(a, trial_id, t, &value, out);
}

int apromo_on_result_mo(struct apromo *a, int64_t trial_id, double t, const double *values,
                        struct apromo_outcome *out) {
  return apromo_result(a, trial_id, t, values, out);
}

int apromo_on_trial_end(struct apromo *a, int64_t trial_id) {
  struct ptrial *tr = find(a, trial_id);
  if (!tr) return -ENOENT;
  tr->ended = 1;
  tr->paused = 0;
  return 0;
}

static int64_t top_of(const struct apromo *a, size_t n) {
  return (int64_t)floor((double)n / a->reduction_factor);
}

int apromo_choose(struct apromo *a, apromo_resumable_fn resumable, void *ctx,
                  struct apromo_choice *out) {
  memset(out, 0, sizeof *out);
  for (int bi = 0; bi < a->nb; bi++) {
    struct pbracket *b = &a->b[bi];
    for (int k = b->n - 1; k >= 0; k--) {
      struct prung *r = &b->r[k];
      int64_t top = top_of(a, r->n);
      size_t *order = NULL;
      int front, nfronts;
      if (a->k > 1 && top > 0) {
        /* Several objectives: the rung's order, computed now. */
        if (!(order = malloc(r->n * sizeof *order)) ||
            prung_mo_ranked(r, a->k, order, r->n, &front, &nfronts)) {
          free(order);
          return -ENOMEM;
        }
      }
      for (int64_t i = 0; i < top; i++) {
        const struct entry *e = &r->e[order ? order[i] : (size_t)i];
        struct ptrial *tr;
        if (!isfinite(e->v)) break; /* ranked last: nothing promotable below */
        tr = find(a, e->trial_id);
        if (!tr || !tr->added || tr->ended || !tr->paused || tr->rung != k) continue;
        if (resumable && !resumable(ctx, tr->id)) continue;
        cJSON *rec = cJSON_CreateObject();
        free(order);
        if (!rec || !cJSON_AddNumberToObject(rec, "promote", k)) {
          cJSON_Delete(rec);
          return -ENOMEM;
        }
        tr->paused = 0;
        r->promoted++;
        out->found = 1;
        out->trial_id = tr->id;
        out->bracket = bi;
        out->rung = k;
        out->rung_t = r->t;
        out->next_t = k + 1 < b->n ? b->r[k + 1].t : a->max_t;
        out->top = top;
        out->n = (int64_t)r->n;
        out->record = rec;
        return 0;
      }
      free(order);
    }
  }
  return 0;
}

int apromo_restore(struct apromo *a, int64_t trial_id, const cJSON *record) {
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(record, "promote");
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(record, "b");
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(record, "r");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(record, "v");
  struct ptrial *tr;
  int rc;
  if (cJSON_IsNumber(pr)) {
    tr = find(a, trial_id);
    if (!tr || !tr->paused || tr->rung != pr->valueint) return -EINVAL;
    tr->paused = 0;
    a->b[tr->bracket].r[tr->rung].promoted++;
    return 0;
  }
  if (!cJSON_IsNumber(b) || !cJSON_IsNumber(r) ||
      (!cJSON_IsNumber(v) && !cJSON_IsNull(v) && !cJSON_IsArray(v)) || b->valueint < 0 ||
      b->valueint >= a->nb || r->valueint < 0 || r->valueint >= a->b[b->valueint].n)
    return -EINVAL;
  double vs[SPEC_MAX_OBJECTIVES], one = NAN;
  if (a->k > 1) {
    if (!cJSON_IsNull(v) && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != a->k)) return -EINVAL;
    for (int j = 0; j < a->k; j++) {
      const cJSON *x = cJSON_GetArrayItem(v, j);
      if (x && !cJSON_IsNumber(x)) return -EINVAL;
      vs[j] = x ? a->flip[j] * x->valuedouble : NAN;
    }
  } else if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
    one = a->sign * v->valuedouble;
  }
  if ((rc = get(a, trial_id, b->valueint, &tr))) return rc;
  if (tr->bracket != b->valueint || r->valueint != tr->rung + 1) return -EINVAL;
  return record_at(a, tr, r->valueint, one, vs, NULL);
}

int apromo_state_json(const struct apromo *a, cJSON **out) {
  cJSON *arr = cJSON_CreateArray();
  *out = NULL;
  if (!arr) return -ENOMEM;
  for (int bi = 0; bi < a->nb; bi++) {
    const struct pbracket *b = &a->b[bi];
    cJSON *o = cJSON_CreateObject(), *rungs = cJSON_CreateArray();
    if (!o || !cJSON_AddItemToArray(arr, o)) {
      cJSON_Delete(o);
      cJSON_Delete(rungs);
      goto fail;
    }
    if (!rungs || !cJSON_AddItemToObject(o, "rungs", rungs)) {
      cJSON_Delete(rungs);
      goto fail;
    }
    if (!cJSON_AddNumberToObject(o, "index", bi)) goto fail;
    for (int k = 0; k < b->n; k++) {
      const struct prung *r = &b->r[k];
      int64_t paused = 0;
      for (size_t i = 0; i < r->n; i++) {
        const struct ptrial *tr = find(a, r->e[i].trial_id);
        paused += tr && tr->added && tr->paused && tr->rung == k && !tr->ended;
      }
      cJSON *x = cJSON_CreateObject();
      if (!x || !cJSON_AddItemToArray(rungs, x)) {
        cJSON_Delete(x);
        goto fail;
      }
      if (!cJSON_AddNumberToObject(x, "t", r->t) ||
          !cJSON_AddNumberToObject(x, "recorded", (double)r->n) ||
          !cJSON_AddNumberToObject(x, "paused", (double)paused) ||
          !cJSON_AddNumberToObject(x, "promoted", (double)r->promoted))
        goto fail;
    }
  }
  *out = arr;
  return 0;
fail:
  cJSON_Delete(arr);
  return -ENOMEM;
}

/* --- behind scheduler.h (sched_ops.h) --- */

static int apromo_sched_create(struct sched *s, const struct sched_params *params, uint64_t seed) {
  struct apromo *a;
  int rc = apromo_create(params, s->mode, seed, &a);
  if (rc == 0) s->st = a;
  return rc;
}

static void apromo_sched_free(void *st) { apromo_free(st); }

static size_t apromo_sched_mem_bytes(const void *st) { return apromo_mem_bytes(st); }

static int apromo_sched_bracket_for(const struct sched *s, int64_t idx) {
  return apromo_bracket_for(s->st, idx);
}

static int apromo_sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx,
                                  const char *config_json) {
  (void)config_json;
  return apromo_add_trial(s->st, trial_id, apromo_bracket_for(s->st, idx));
}

/* Pause at a rung; stop at max_t, or on a non-finite value at a rung (it
 * could never be promoted). */
static int apromo_sched_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                                  struct sched_outcome *out) {
  struct apromo_outcome ao;
  int rc;
  sched_outcome_reset(out);
  if (!value) {
    /* Ray: a result without the metric is not the scheduler's
     * business (it ranks at no rung); max_t still ends the trial. */
    sched_outcome_max_t(s, t, out);
    return 0;
  }
  rc = apromo_on_result_mo(s->st, trial_id, t, value, &ao);
  if (rc) return rc;
  out->record = ao.record;
  switch (ao.action) {
  case APROMO_PAUSE:
    out->action = SCHED_PAUSE;
    if (ao.nfronts > 0)
      snprintf(out->reason, sizeof out->reason,
               "paused at rung %d (%s %g): rank %lld of %lld there in non-dominated order "
               "(front %d of %d)",
               ao.rung, s->p.time_attr, ao.rung_t, (long long)ao.rank, (long long)ao.n,
               ao.front + 1, ao.nfronts);
    else
      snprintf(out->reason, sizeof out->reason,
               "paused at rung %d (%s %g): rank %lld of %lld there", ao.rung, s->p.time_attr,
               ao.rung_t, (long long)ao.rank, (long long)ao.n);
    break;
  case APROMO_STOP:
    out->action = SCHED_STOP;
    if (ao.why == APROMO_MAX_T) {
      snprintf(out->reason, sizeof out->reason, "reached max_t %g (%s %g)", s->p.max_t,
               s->p.time_attr, t);
    } else {
      out->stopped_early = 1;
      snprintf(out->reason, sizeof out->reason,
               "stopped at t=%g: the metric is not a finite number at rung %d", t, ao.rung);
    }
    break;
  default:
    break;
  }
  return 0;
}

static int apromo_sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                                     const double *last_value, struct sched_outcome *out) {
  int rc;
  (void)has_last;
  (void)t;
  (void)last_value;
  if (out) sched_outcome_reset(out);
  rc = apromo_on_trial_end(s->st, trial_id);
  return rc == -ENOENT ? 0 : rc; /* never joined: nothing to leave */
}

static int apromo_sched_choose(struct sched *s, int can_new, sched_resumable_fn resumable,
                               void *ctx, struct sched_choice *out) {
  struct apromo_choice c;
  int rc = apromo_choose(s->st, resumable, ctx, &c);
  if (rc) return rc;
  if (c.found) {
    out->kind = SCHED_CHOOSE_RESUME;
    out->trial_id = c.trial_id;
    out->record = c.record;
    if (apromo_num_brackets(s->st) > 1)
      snprintf(out->reason, sizeof out->reason,
               "promoted from rung %d of bracket %d (top %lld of %lld at "
               "%s %g), runs to %g",
               c.rung, c.bracket, (long long)c.top, (long long)c.n, s->p.time_attr, c.rung_t,
               c.next_t);
    else
      snprintf(out->reason, sizeof out->reason,
               "promoted from rung %d (top %lld of %lld at %s %g), runs "
               "to %g",
               c.rung, (long long)c.top, (long long)c.n, s->p.time_attr, c.rung_t, c.next_t);
    return 0;
  }
  /* Nothing to promote: a new trial while the plan allows one (the
   * paper draws a new configuration), else wait for running ones. */
  out->kind = can_new ? SCHED_CHOOSE_NEW : SCHED_CHOOSE_WAIT;
  return 0;
}

static int apromo_sched_restore(struct sched *s, int64_t trial_id, const cJSON *record) {
  return apromo_restore(s->st, trial_id, record);
}

static int apromo_sched_state_json(const struct sched *s, cJSON **out) {
  cJSON *o = cJSON_CreateObject(), *br = NULL;
  int ok;
  if (!o) return -ENOMEM;
  ok = cJSON_AddStringToObject(o, "type", "asha") && cJSON_AddTrueToObject(o, "promotion") &&
       cJSON_AddStringToObject(o, "time_attr", s->p.time_attr) &&
       cJSON_AddNumberToObject(o, "max_t", s->p.max_t) &&
       cJSON_AddNumberToObject(o, "grace_period", s->p.grace_period) &&
       cJSON_AddNumberToObject(o, "reduction_factor", s->p.reduction_factor) &&
       apromo_state_json(s->st, &br) == 0;
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

const struct sched_ops apromo_sched_ops = {
    .create = apromo_sched_create,
    .free = apromo_sched_free,
    .mem_bytes = apromo_sched_mem_bytes,
    .bracket_for = apromo_sched_bracket_for,
    .add_trial = apromo_sched_add_trial,
    .on_result = apromo_sched_on_result,
    .on_trial_end = apromo_sched_on_trial_end,
    .choose = apromo_sched_choose,
    .restore = apromo_sched_restore,
    .state_json = apromo_sched_state_json,
};
