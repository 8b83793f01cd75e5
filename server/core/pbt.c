/* pbt: Ray Tune's PopulationBasedTraining (asynchronous mode) as a pure
 * state machine. tests/server/unit/gen_pbt_vectors.py transcribes Ray's
 * pbt.py; test_pbt.c checks this file against it decision by decision. */
#include "pbt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "sched_ops.h"
#include "space.h"

#define PBT_INT_MAX 9007199254740992.0 /* 2^53 */

struct pbt_trial {
  int64_t id;
  int64_t idx;
  int added;     /* joined through pbt_add_trial (not only restored) */
  int finished;  /* ended: out of the quantiles */
  int has_score; /* Ray's last_score is not None */
  double score;  /* metric_op * value at the last perturbation point */
  int has_ckpt;  /* Ray's last_checkpoint: top quantile at that point */
  double last_perturbation_time;
  double last_train_time;
  int perturbations;  /* times this trial was exploited */
  cJSON *config;      /* current config (explored from when it is a donor) */
  cJSON *undo_config; /* its config before the exploit just decided */
  double undo_t;      /* that decision's t */
};

struct pbt {
  struct pbt_params p;
  cJSON *mutations;
  double sign; /* Ray's _metric_op: 1 max, -1 min */
  uint64_t seed;
  struct pbt_trial *t;
  int n, cap;
  int64_t perturbations;
};

void pbt_params_default(struct pbt_params *p) {
  memset(p, 0, sizeof *p);
  p->perturbation_interval = 60;
  p->burn_in_period = 0;
  p->quantile_fraction = 0.25;
  p->resample_probability = 0.25;
  p->nfactors = 2;
  p->factors[0] = 1.2;
  p->factors[1] = 0.8;
}

/* ---- checking the scheduler object ---- */

static int is_shape_key(const char *k) {
  static const char *const shape[] = {"l1", "l2", "model", "dataset", NULL};
  for (int i = 0; shape[i]; i++)
    if (strcmp(k, shape[i]) == 0) return 1;
  return 0;
}

/* Each value: a list (resample from it or step to a neighbour), a domain
 * object as in param_space (resample from it or scale by a factor), or an
 * object of nested mutations. Every key must be in param_space (ps). */
static int check_mutations(const cJSON *m, const char *path, const cJSON *ps, int builtin,
                           int depth, struct validate_error *err) {
  const cJSON *item;
  char p[256];
  if (!cJSON_IsObject(m) || cJSON_GetArraySize(m) == 0) {
    spec_error_set(err, path, "must be a non-empty object of parameters to mutate");
    return -EINVAL;
  }
  if (depth > 16) {
    spec_error_set(err, path, "nested deeper than 16 levels");
    return -EINVAL;
  }
  cJSON_ArrayForEach(item, m) {
    const cJSON *in_ps =
        cJSON_IsObject(ps) ? cJSON_GetObjectItemCaseSensitive(ps, item->string) : NULL;
    spec_path_join(p, sizeof p, path, '.', item->string);
    if (builtin && depth == 0 && is_shape_key(item->string)) {
      spec_error_set(err, p,
                     "the builtin trainable cannot mutate '%s': it sets the model's shape, "
                     "so a donor's checkpoint would not fit (mutate lr, momentum, "
                     "weight_decay, optimizer or batch_size)",
                     item->string);
      return -EINVAL;
    }
    if (!in_ps) {
      spec_error_set(err, p,
                     "'%.64s' is not in param_space: PBT mutates parameters the space defines",
                     item->string);
      return -EINVAL;
    }
    if (cJSON_IsArray(item)) {
      if (cJSON_GetArraySize(item) == 0) {
        spec_error_set(err, p, "a list of values must not be empty");
        return -EINVAL;
      }
    } else if (cJSON_IsObject(item) && cJSON_GetObjectItemCaseSensitive(item, "grid_search")) {
      spec_error_set(err, p, "grid_search cannot be mutated; give a list of values");
      return -EINVAL;
    } else if (cJSON_IsObject(item) && cJSON_GetObjectItemCaseSensitive(item, "type")) {
      cJSON *tmp = cJSON_CreateObject(), *dup = cJSON_Duplicate(item, 1);
      int64_t grid;
      int rc;
      if (!tmp || !dup || !cJSON_AddItemToObject(tmp, item->string, dup)) {
        cJSON_Delete(dup);
        cJSON_Delete(tmp);
        spec_error_set(err, p, "out of memory");
        return -ENOMEM;
      }
      rc = space_check(tmp, path, &grid, err);
      cJSON_Delete(tmp);
      if (rc) return rc;
    } else if (cJSON_IsObject(item)) {
      if (!cJSON_IsObject(in_ps) || cJSON_GetObjectItemCaseSensitive(in_ps, "type") ||
          cJSON_GetObjectItemCaseSensitive(in_ps, "grid_search")) {
        spec_error_set(err, p, "nested mutations need a nested object in param_space");
        return -EINVAL;
      }
      int rc = check_mutations(item, p, in_ps, builtin, depth + 1, err);
      if (rc) return rc;
    } else {
      spec_error_set(err, p,
                     "must be a list of values, a domain object ({\"type\": \"uniform\", ...}) "
                     "or an object of nested mutations");
      return -EINVAL;
    }
  }
  return 0;
}

int pbt_check(const cJSON *sched, const char *path, const cJSON *param_space,
              const cJSON *trainable, struct pbt_params *p, struct validate_error *err) {
  static const char *const keys[] = {"type",
                                     "time_attr",
                                     "perturbation_interval",
                                     "burn_in_period",
                                     "hyperparam_mutations",
                                     "quantile_fraction",
                                     "resample_probability",
                                     "perturbation_factors",
                                     NULL};
  const cJSON *item, *f, *tt;
  int builtin;

  pbt_params_default(p);
  cJSON_ArrayForEach(item, sched) {
    int ok = 0;
    for (int i = 0; keys[i] && !ok; i++) ok = strcmp(item->string, keys[i]) == 0;
    if (ok) continue;
    if (strcmp(item->string, "custom_explore_fn") == 0)
      return spec_fail_at(err, path, item->string,
                          "not supported: the server runs no user code; describe the "
                          "mutations in hyperparam_mutations");
    if (strcmp(item->string, "synch") == 0)
      return spec_fail_at(err, path, item->string,
                          "not supported: ctune runs PBT's asynchronous variant (Ray's default)");
    {
      char msg[300] = "unknown field (pbt takes ";
      for (int i = 0; keys[i]; i++) {
        if (i) strncat(msg, ", ", sizeof msg - strlen(msg) - 1);
        strncat(msg, keys[i], sizeof msg - strlen(msg) - 1);
      }
      strncat(msg, ")", sizeof msg - strlen(msg) - 1);
      return spec_fail_at(err, path, item->string, msg);
    }
  }
  if (spec_get_number(sched, path, "perturbation_interval", &p->perturbation_interval, err) < 0 ||
      spec_get_number(sched, path, "burn_in_period", &p->burn_in_period, err) < 0 ||
      spec_get_number(sched, path, "quantile_fraction", &p->quantile_fraction, err) < 0 ||
      spec_get_number(sched, path, "resample_probability", &p->resample_probability, err) < 0)
    return -EINVAL;
  if (!(p->perturbation_interval > 0))
    return spec_fail_at(err, path, "perturbation_interval", "must be > 0");
  if (!(p->burn_in_period >= 0)) return spec_fail_at(err, path, "burn_in_period", "must be >= 0");
  if (!(p->quantile_fraction >= 0 && p->quantile_fraction <= 0.5))
    return spec_fail_at(err, path, "quantile_fraction", "must be from 0 to 0.5");
  if (!(p->resample_probability >= 0 && p->resample_probability <= 1))
    return spec_fail_at(err, path, "resample_probability", "must be from 0 to 1");
  f = cJSON_GetObjectItemCaseSensitive(sched, "perturbation_factors");
  if (f) {
    int i = 0;
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) < 1 || cJSON_GetArraySize(f) > PBT_MAX_FACTORS) {
      char msg[96];
      snprintf(msg, sizeof msg, "must be a list of 1 to %d positive numbers", PBT_MAX_FACTORS);
      return spec_fail_at(err, path, "perturbation_factors", msg);
    }
    cJSON_ArrayForEach(item, f) {
      if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble) || !(item->valuedouble > 0)) {
        char k[64];
        snprintf(k, sizeof k, "perturbation_factors[%d]", i);
        return spec_fail_at(err, path, k, "must be a finite number > 0");
      }
      p->factors[i++] = item->valuedouble;
    }
    p->nfactors = i;
  }
  item = cJSON_GetObjectItemCaseSensitive(sched, "hyperparam_mutations");
  if (!item)
    return spec_fail_at(err, path, "hyperparam_mutations",
                        "required: the parameters PBT may change (a list or a domain per key)");
  tt = cJSON_GetObjectItemCaseSensitive(trainable, "type");
  builtin = cJSON_IsString(tt) && strcmp(tt->valuestring, "builtin") == 0;
  {
    char mp[256];
    spec_path_join(mp, sizeof mp, path, '.', "hyperparam_mutations");
    if (check_mutations(item, mp, param_space, builtin, 0, err)) return -EINVAL;
  }
  p->mutations = (cJSON *)item; /* borrowed: validate.c copies it */
  return 0;
}

/* ---- the scheduler ---- */

int pbt_create(const struct pbt_params *p, enum spec_mode mode, uint64_t seed, struct pbt **out) {
  struct pbt *b;
  *out = NULL;
  if (!p || !p->mutations || p->nfactors < 1 || p->nfactors > PBT_MAX_FACTORS) return -EINVAL;
  b = calloc(1, sizeof *b);
  if (!b) return -ENOMEM;
  b->p = *p;
  b->mutations = cJSON_Duplicate(p->mutations, 1);
  if (!b->mutations) {
    free(b);
    return -ENOMEM;
  }
  b->p.mutations = b->mutations;
  b->sign = mode == SPEC_MODE_MAX ? 1.0 : -1.0;
  b->seed = seed;
  *out = b;
  return 0;
}

void pbt_free(struct pbt *b) {
  if (!b) return;
  for (int i = 0; i < b->n; i++) {
    cJSON_Delete(b->t[i].config);
    cJSON_Delete(b->t[i].undo_config);
  }
  free(b->t);
  cJSON_Delete(b->mutations);
  free(b);
}

size_t pbt_mem_bytes(const struct pbt *b) {
  return b ? sizeof *b + (size_t)b->cap * sizeof *b->t : 0;
}

void pbt_outcome_clear(struct pbt_outcome *o) {
  cJSON_Delete(o->new_config);
  cJSON_Delete(o->record);
  memset(o, 0, sizeof *o);
}

static struct pbt_trial *find(struct pbt *b, int64_t id) {
  for (int i = 0; i < b->n; i++)
    if (b->t[i].id == id) return &b->t[i];
  return NULL;
}

static struct pbt_trial *get_or_add(struct pbt *b, int64_t id) {
  struct pbt_trial *t = find(b, id);
  if (t) return t;
  if (b->n == b->cap) {
    int cap = b->cap ? b->cap * 2 : 16;
    struct pbt_trial *nt = realloc(b->t, (size_t)cap * sizeof *nt);
    if (!nt) return NULL;
    b->t = nt;
    b->cap = cap;
  }
  t = &b->t[b->n++];
  memset(t, 0, sizeof *t);
  t->id = id;
  t->idx = id;
  return t;
}

int pbt_add_trial(struct pbt *b, int64_t trial_id, int64_t idx, const cJSON *config) {
  struct pbt_trial *t = get_or_add(b, trial_id);
  if (!t) return -ENOMEM;
  if (config) {
    cJSON *c = cJSON_Duplicate(config, 1);
    if (!c) return -ENOMEM;
    cJSON_Delete(t->config);
    t->config = c;
  }
  t->idx = idx;
  t->added = 1;
  t->finished = 0;
  return 0;
}

int pbt_on_trial_end(struct pbt *b, int64_t trial_id) {
  struct pbt_trial *t = find(b, trial_id);
  if (!t) return -ENOENT;
  t->finished = 1;
  return 0;
}

/* Python's ==, for list membership and index(): numbers by value. */
static int value_eq(const cJSON *a, const cJSON *b) {
  if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
  if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
  return cJSON_Compare(a, b, 1);
}

static int list_index(const cJSON *list, const cJSON *v) {
  int i = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, list) {
    if (value_eq(item, v)) return i;
    i++;
  }
  return -1;
}

/* A value read back from JSON is an int for Python's isinstance(x, int)
 * when it is integral (JSON keeps no int/float distinction). */
static int is_int_value(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
         fabs(v->valuedouble) <= PBT_INT_MAX;
}

/* Ray's distribution.sample(None): one 64-bit draw seeds space_generate's
 * stream for a one-key space {"v": domain}. */
static cJSON *resample_domain(const cJSON *dom, struct rng *r) {
  cJSON *space = cJSON_CreateObject(), *dup = cJSON_Duplicate(dom, 1), *arr = NULL, *v = NULL;
  uint64_t seed = rng_next(r);
  if (!space || !dup || !cJSON_AddItemToObject(space, "v", dup)) {
    cJSON_Delete(dup);
    goto out;
  }
  if (space_generate(space, 1, seed, &arr, NULL) == 0)
    v = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetArrayItem(arr, 0), "v");
out:
  cJSON_Delete(arr);
  cJSON_Delete(space);
  return v;
}

static int set_key(cJSON *obj, const char *key, cJSON *v) {
  if (!v) return -ENOMEM;
  if (cJSON_GetObjectItemCaseSensitive(obj, key))
    return cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v) ? 0 : (cJSON_Delete(v), -ENOMEM);
  return cJSON_AddItemToObject(obj, key, v) ? 0 : (cJSON_Delete(v), -ENOMEM);
}

/* Ray's _explore on new (a deep copy of the donor's config), drawing in
 * Ray's order: per key, random() first, then one choice. */
static int explore_into(cJSON *new, const cJSON *config, const cJSON *mutations, double p,
                        const double *factors, int nfactors, struct rng *r) {
  const cJSON *m;
  cJSON_ArrayForEach(m, mutations) {
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(config, m->string);
    int rc = 0;
    if (!cur) continue; /* checked at submission; Ray would raise KeyError */
    if (cJSON_IsObject(m) && !cJSON_GetObjectItemCaseSensitive(m, "type")) {
      cJSON *sub = cJSON_GetObjectItemCaseSensitive(new, m->string);
      if (cJSON_IsObject(sub) && cJSON_IsObject(cur))
        rc = explore_into(sub, cur, m, p, factors, nfactors, r);
    } else if (cJSON_IsArray(m)) {
      int n = cJSON_GetArraySize(m), idx = list_index(m, cur);
      double u = rng_uniform(r);
      if (u < p || idx < 0) {
        int64_t k = rng_int_range(r, 0, n);
        rc = set_key(new, m->string, cJSON_Duplicate(cJSON_GetArrayItem(m, (int)k), 1));
      } else {
        int shift = rng_int_range(r, 0, 2) == 0 ? -1 : 1;
        int ni = idx + shift;
        ni = ni < 0 ? 0 : ni > n - 1 ? n - 1 : ni;
        rc = set_key(new, m->string, cJSON_Duplicate(cJSON_GetArrayItem(m, ni), 1));
      }
    } else {
      double u = rng_uniform(r);
      cJSON *v;
      if (u < p || !cJSON_IsNumber(cur)) {
        v = resample_domain(m, r);
      } else {
        int64_t k = rng_int_range(r, 0, nfactors);
        v = cJSON_CreateNumber(cur->valuedouble * factors[k]);
      }
      if (v && is_int_value(cur) && cJSON_IsNumber(v)) {
        double x = trunc(v->valuedouble); /* Python's int() */
        cJSON_SetNumberValue(v, x);
      }
      rc = set_key(new, m->string, v);
    }
    if (rc) return rc;
  }
  return 0;
}

cJSON *pbt_explore(const cJSON *config, const cJSON *mutations, double resample_probability,
                   const double *factors, int nfactors, struct rng *r) {
  cJSON *new = cJSON_Duplicate(config, 1);
  if (!new) return NULL;
  if (explore_into(new, config, mutations, resample_probability, factors, nfactors, r)) {
    cJSON_Delete(new);
    return NULL;
  }
  return new;
}

/* ---- decisions ---- */

static int score_cmp(const void *pa, const void *pb) {
  const struct pbt_trial *a = *(struct pbt_trial *const *)pa;
  const struct pbt_trial *b = *(struct pbt_trial *const *)pb;
  if (a->score < b->score) return -1;
  if (a->score > b->score) return 1;
  /* Python's sort is stable over the insertion (creation) order. */
  return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Ray's _quantiles: the live trials with a score, ascending; the bottom and
 * top ceil(n * q) (at most n / 2). With q = 0 Python's trials[-0:] makes
 * the top the whole list (and the bottom empty). */
static int quantiles(struct pbt *b, struct pbt_trial ***sorted, int *n, int *k_lower,
                     int *top_from) {
  struct pbt_trial **s;
  int m = 0, k;
  *sorted = NULL;
  *n = *k_lower = *top_from = 0;
  s = malloc((size_t)(b->n ? b->n : 1) * sizeof *s);
  if (!s) return -ENOMEM;
  for (int i = 0; i < b->n; i++)
    if (b->t[i].added && !b->t[i].finished && b->t[i].has_score) s[m++] = &b->t[i];
  qsort(s, (size_t)m, sizeof *s, score_cmp);
  *sorted = s;
  *n = m;
  if (m <= 1) {
    *top_from = m; /* both empty */
    return 0;
  }
  k = (int)ceil(m * b->p.quantile_fraction);
  if (k > m / 2.0) k = (int)floor(m / 2.0);
  *k_lower = k;
  *top_from = k == 0 ? 0 : m - k;
  return 0;
}

static uint64_t t_bits(double t) {
  uint64_t u;
  if (t == 0) t = 0; /* -0 and 0 draw alike */
  memcpy(&u, &t, sizeof u);
  return u;
}

/* Score as JSON: -inf/inf/NaN have no JSON number. */
static cJSON *score_json(double s) {
  if (isfinite(s)) return cJSON_CreateNumber(s);
  return cJSON_CreateString(s > 0 ? "inf" : "-inf");
}

static double score_from(const cJSON *v) {
  if (cJSON_IsNumber(v)) return v->valuedouble;
  if (cJSON_IsString(v)) return strcmp(v->valuestring, "inf") == 0 ? INFINITY : -INFINITY;
  return -INFINITY;
}

static void fmt_value(char *dst, size_t size, const cJSON *v) {
  if (!v) {
    snprintf(dst, size, "(none)");
  } else if (cJSON_IsNumber(v)) {
    snprintf(dst, size, "%.6g", v->valuedouble);
  } else if (cJSON_IsString(v)) {
    snprintf(dst, size, "%.40s", v->valuestring);
  } else {
    char *s = cJSON_PrintUnformatted(v);
    snprintf(dst, size, "%.40s", s ? s : "?");
    free(s);
  }
}

/* "lr 0.01 → 0.012, momentum 0.9 → 0.72": the mutated leaves whose value
 * changed from the donor's; cut at a whole item to fit. */
static void describe(char *dst, size_t size, const cJSON *mutations, const cJSON *from,
                     const cJSON *to, const char *prefix, int *first) {
  const cJSON *m;
  cJSON_ArrayForEach(m, mutations) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(from, m->string);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(to, m->string);
    char name[160], va[64], vb[64], item[320];
    spec_path_join(name, sizeof name, prefix, '.', m->string);
    if (cJSON_IsObject(m) && !cJSON_GetObjectItemCaseSensitive(m, "type")) {
      describe(dst, size, m, a, b, name, first);
      continue;
    }
    if (a && b && value_eq(a, b)) continue;
    fmt_value(va, sizeof va, a);
    fmt_value(vb, sizeof vb, b);
    snprintf(item, sizeof item, "%s%s %s \u2192 %s", *first ? "" : ", ", name, va, vb);
    if (strlen(dst) + strlen(item) + 5 < size) {
      strcat(dst, item);
    } else if (!strstr(dst, "\u2026")) {
      strcat(dst, ", \u2026");
    }
    *first = 0;
  }
}

static int add_num(cJSON *o, const char *k, double v) {
  return cJSON_AddNumberToObject(o, k, v) != NULL;
}

int pbt_on_result(struct pbt *b, int64_t trial_id, double t, double value,
                  struct pbt_outcome *out) {
  struct pbt_trial *tr = find(b, trial_id), **s = NULL, *donor = NULL;
  struct rng r;
  int n, k, top_from, in_top = 0, in_bottom = 0, rc;
  cJSON *rec = NULL;

  memset(out, 0, sizeof *out);
  if (!tr) return -ENOENT;
  if (isnan(t)) return -EINVAL;
  cJSON_Delete(tr->undo_config); /* the last exploit was carried out */
  tr->undo_config = NULL;
  /* Burn-in, then every perturbation_interval of the trial's own time. */
  if (t < b->p.burn_in_period || t - tr->last_perturbation_time < b->p.perturbation_interval)
    return 0;

  /* _save_trial_state; a diverged metric (NaN) scores as the worst. */
  tr->score = isnan(value) ? -INFINITY : b->sign * value;
  tr->has_score = 1;
  tr->last_train_time = t;
  tr->last_perturbation_time = t;

  rc = quantiles(b, &s, &n, &k, &top_from);
  if (rc) return rc;
  for (int i = 0; i < n; i++) {
    if (s[i] != tr) continue;
    in_bottom = i < k;
    in_top = i >= top_from && top_from < n;
  }
  /* _checkpoint_or_exploit: a top trial's checkpoint is what a bottom
   * trial may clone later; any other trial has none to give. */
  tr->has_ckpt = in_top;
  rng_seed(&r, rng_mix(rng_mix(b->seed, (uint64_t)tr->idx), t_bits(t)));
  if (in_bottom) {
    int64_t pick = rng_int_range(&r, 0, n - top_from);
    donor = s[top_from + pick];
    if (!donor->has_ckpt || !donor->config)
      donor = NULL; /* Ray: "no checkpoint for trial ..., skip exploit" */
  }
  free(s);

  rc = -ENOMEM;
  rec = cJSON_CreateObject();
  if (!rec || !add_num(rec, "idx", (double)tr->idx) || !add_num(rec, "t", t) ||
      !cJSON_AddItemToObject(rec, "score", score_json(tr->score)) ||
      !cJSON_AddBoolToObject(rec, "ckpt", tr->has_ckpt))
    goto fail;
  if (donor) {
    cJSON *nc = pbt_explore(donor->config, b->mutations, b->p.resample_probability, b->p.factors,
                            b->p.nfactors, &r);
    cJSON *keep;
    int first = 1;
    if (!nc) goto fail;
    snprintf(out->reason, sizeof out->reason,
             "exploited trial %lld at t=%g: ", (long long)donor->id, t);
    describe(out->reason, sizeof out->reason, b->mutations, donor->config, nc, "", &first);
    if (first)
      strncat(out->reason, "no hyperparameter changed",
              sizeof out->reason - strlen(out->reason) - 1);
    keep = cJSON_Duplicate(nc, 1);
    if (!keep || !add_num(rec, "donor", (double)donor->id) ||
        !cJSON_AddItemToObject(rec, "config", keep)) {
      cJSON_Delete(keep);
      cJSON_Delete(nc);
      goto fail;
    }
    /* _exploit: the trial continues from the donor's time. */
    tr->last_perturbation_time = donor->last_perturbation_time;
    tr->last_train_time = donor->last_train_time;
    tr->perturbations++;
    b->perturbations++;
    tr->undo_config = tr->config;
    tr->undo_t = t;
    tr->config = cJSON_Duplicate(nc, 1);
    out->exploit = 1;
    out->donor_trial_id = donor->id;
    out->new_config = nc;
    if (!tr->config) goto fail;
  }
  if (!add_num(rec, "last_perturbation_time", tr->last_perturbation_time) ||
      !add_num(rec, "last_train_time", tr->last_train_time))
    goto fail;
  out->record = rec;
  return 0;
fail:
  cJSON_Delete(rec);
  pbt_outcome_clear(out);
  return rc;
}

int pbt_exploit_refused(struct pbt *b, int64_t trial_id, cJSON *record) {
  struct pbt_trial *tr = find(b, trial_id);
  if (!tr || !tr->undo_config) return -ENOENT;
  cJSON_Delete(tr->config);
  tr->config = tr->undo_config;
  tr->undo_config = NULL;
  tr->last_perturbation_time = tr->undo_t;
  tr->last_train_time = tr->undo_t;
  tr->perturbations--;
  b->perturbations--;
  /* The record becomes the one of a perturbation point without exploit. */
  if (record) {
    cJSON_DeleteItemFromObjectCaseSensitive(record, "donor");
    cJSON_DeleteItemFromObjectCaseSensitive(record, "config");
    cJSON_DeleteItemFromObjectCaseSensitive(record, "last_perturbation_time");
    cJSON_DeleteItemFromObjectCaseSensitive(record, "last_train_time");
    if (!add_num(record, "last_perturbation_time", tr->undo_t) ||
        !add_num(record, "last_train_time", tr->undo_t))
      return -ENOMEM;
  }
  return 0;
}

int pbt_exploit_undo(struct pbt *b, int64_t trial_id, cJSON **record) {
  struct pbt_trial *tr = find(b, trial_id);
  cJSON *rec, *cfg;
  *record = NULL;
  if (!tr || !tr->undo_config) return -ENOENT;
  rec = cJSON_CreateObject();
  cfg = cJSON_Duplicate(tr->undo_config, 1);
  if (!rec || !cfg || !cJSON_AddItemToObject(rec, "config", cfg)) {
    cJSON_Delete(cfg);
    cJSON_Delete(rec);
    return -ENOMEM;
  }
  if (!add_num(rec, "idx", (double)tr->idx) || !add_num(rec, "t", tr->undo_t) ||
      !cJSON_AddItemToObject(rec, "score", score_json(tr->score)) ||
      !cJSON_AddBoolToObject(rec, "ckpt", tr->has_ckpt) ||
      !cJSON_AddBoolToObject(rec, "revert", 1) ||
      !add_num(rec, "last_perturbation_time", tr->undo_t) ||
      !add_num(rec, "last_train_time", tr->undo_t)) {
    cJSON_Delete(rec);
    return -ENOMEM;
  }
  pbt_exploit_refused(b, trial_id, NULL);
  *record = rec;
  return 0;
}

int pbt_restore(struct pbt *b, int64_t trial_id, const cJSON *rec) {
  const cJSON *idx = cJSON_GetObjectItemCaseSensitive(rec, "idx");
  const cJSON *lpt = cJSON_GetObjectItemCaseSensitive(rec, "last_perturbation_time");
  const cJSON *ltt = cJSON_GetObjectItemCaseSensitive(rec, "last_train_time");
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(rec, "config");
  struct pbt_trial *t;
  if (!cJSON_IsNumber(idx) || !cJSON_IsNumber(lpt) || !cJSON_IsNumber(ltt) ||
      !cJSON_GetObjectItemCaseSensitive(rec, "score"))
    return -EINVAL;
  t = get_or_add(b, trial_id);
  if (!t) return -ENOMEM;
  if (!t->added) t->idx = (int64_t)idx->valuedouble;
  t->has_score = 1;
  t->score = score_from(cJSON_GetObjectItemCaseSensitive(rec, "score"));
  t->has_ckpt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "ckpt"));
  t->last_perturbation_time = lpt->valuedouble;
  t->last_train_time = ltt->valuedouble;
  if (cJSON_IsObject(cfg)) {
    /* An exploit's new config, or (revert) the config an exploit the server
     * skipped gave back: pbt_exploit_undo. */
    int revert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "revert"));
    cJSON *c = cJSON_Duplicate(cfg, 1);
    if (!c) return -ENOMEM;
    cJSON_Delete(t->config);
    t->config = c;
    t->perturbations += revert ? -1 : 1;
    b->perturbations += revert ? -1 : 1;
  }
  return 0;
}

int pbt_state_json(const struct pbt *b, cJSON **out) {
  cJSON *o = cJSON_CreateObject(), *arr = NULL, *f = NULL;
  int ok;
  *out = NULL;
  if (!o) return -ENOMEM;
  f = cJSON_CreateDoubleArray(b->p.factors, b->p.nfactors);
  ok = f && cJSON_AddItemToObject(o, "perturbation_factors", f);
  if (!ok) cJSON_Delete(f);
  ok = ok && add_num(o, "perturbation_interval", b->p.perturbation_interval) &&
       add_num(o, "burn_in_period", b->p.burn_in_period) &&
       add_num(o, "quantile_fraction", b->p.quantile_fraction) &&
       add_num(o, "resample_probability", b->p.resample_probability) &&
       add_num(o, "perturbations", (double)b->perturbations) &&
       (arr = cJSON_AddArrayToObject(o, "trials")) != NULL;
  for (int i = 0; ok && i < b->n; i++) {
    const struct pbt_trial *t = &b->t[i];
    cJSON *e = cJSON_CreateObject();
    ok = e && cJSON_AddItemToArray(arr, e);
    if (!ok) {
      cJSON_Delete(e);
      break;
    }
    ok = add_num(e, "trial_id", (double)t->id) &&
         (t->has_score ? cJSON_AddItemToObject(e, "value", score_json(b->sign * t->score))
                       : cJSON_AddNullToObject(e, "value") != NULL) &&
         add_num(e, "last_perturbation_time", t->last_perturbation_time) &&
         add_num(e, "perturbations", t->perturbations) &&
         cJSON_AddBoolToObject(e, "finished", t->finished || !t->added);
  }
  if (!ok) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  *out = o;
  return 0;
}

/* --- behind scheduler.h (sched_ops.h) --- */

static int pbt_sched_create(struct sched *s, const struct sched_params *params, uint64_t seed) {
  struct pbt *b;
  /* params' own mutations: s->p's are NULL (pbt_create copies them). */
  int rc = pbt_create(&params->pbt, s->mode, seed, &b);
  if (rc == 0) s->st = b;
  return rc;
}

static void pbt_sched_free(void *st) { pbt_free(st); }

static size_t pbt_sched_mem_bytes(const void *st) { return pbt_mem_bytes(st); }

/* PBT explores from a donor's config: it keeps each trial's. */
static int pbt_sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx,
                               const char *config_json) {
  cJSON *cfg = config_json ? cJSON_Parse(config_json) : NULL;
  int rc;
  if (config_json && !cfg) return -EINVAL;
  rc = pbt_add_trial(s->st, trial_id, idx, cfg);
  cJSON_Delete(cfg);
  return rc;
}

static int pbt_sched_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                               struct sched_outcome *out) {
  struct pbt_outcome po;
  int rc;
  sched_outcome_reset(out);
  if (!value) return 0; /* Ray: a result without the metric continues */
  rc = pbt_on_result(s->st, trial_id, t, *value, &po);
  if (rc) return rc;
  if (po.exploit) {
    out->action = SCHED_EXPLOIT;
    out->donor_trial_id = po.donor_trial_id;
    out->new_config = po.new_config;
    po.new_config = NULL;
    snprintf(out->reason, sizeof out->reason, "%s", po.reason);
  }
  out->record = po.record;
  po.record = NULL;
  pbt_outcome_clear(&po);
  return 0;
}

static int pbt_sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                                  const double *last_value, struct sched_outcome *out) {
  int rc;
  (void)has_last;
  (void)t;
  (void)last_value;
  if (out) sched_outcome_reset(out);
  rc = pbt_on_trial_end(s->st, trial_id);
  return rc == -ENOENT ? 0 : rc; /* never joined: nothing to leave */
}

static int pbt_sched_restore(struct sched *s, int64_t trial_id, const cJSON *record) {
  return pbt_restore(s->st, trial_id, record);
}

static int pbt_sched_exploit_refused(struct sched *s, int64_t trial_id, struct sched_outcome *out) {
  int rc;
  if (!out || out->action != SCHED_EXPLOIT) return 0;
  /* No record: the decision's own was stored already; a revert record is
   * made for it. */
  rc = out->record ? pbt_exploit_refused(s->st, trial_id, out->record)
                   : pbt_exploit_undo(s->st, trial_id, &out->record);
  return rc == -ENOENT ? 0 : rc;
}

/* {"type", "time_attr"} + pbt_state_json */
static int pbt_sched_state_json(const struct sched *s, cJSON **out) {
  cJSON *st = NULL;
  if (pbt_state_json(s->st, &st)) return -ENOMEM;
  if (!cJSON_AddStringToObject(st, "type", "pbt") ||
      !cJSON_AddStringToObject(st, "time_attr", s->p.time_attr)) {
    cJSON_Delete(st);
    return -ENOMEM;
  }
  *out = st;
  return 0;
}

const struct sched_ops pbt_sched_ops = {
    .create = pbt_sched_create,
    .free = pbt_sched_free,
    .mem_bytes = pbt_sched_mem_bytes,
    .add_trial = pbt_sched_add_trial,
    .on_result = pbt_sched_on_result,
    .on_trial_end = pbt_sched_on_trial_end,
    .restore = pbt_sched_restore,
    .exploit_refused = pbt_sched_exploit_refused,
    .state_json = pbt_sched_state_json,
};
