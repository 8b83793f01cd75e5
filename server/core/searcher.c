/* searcher: the next trial's config from random sampling, the grid, or TPE
 * (ARCHITECTURE.md#searchers); points_to_evaluate first, warm_start fed
 * to TPE. Pure logic: rebuilt on restart by observing every loaded trial. */
#include "searcher.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "space.h"
#include "tpe.h"

#define SEARCHER_SALT_POINT 0x706f696e745f6f70ULL /* "point_op": a point's option */

struct searcher {
  enum searcher_type type;
  const cJSON *param_space; /* a copy, owned */
  cJSON *space_copy;
  cJSON *points; /* points_to_evaluate copy or NULL */
  int64_t npoints;
  int64_t num_samples, num_trials;
  uint64_t seed;
  /* space_generate's configs, made on first use (every index of the plan):
   * random/grid answer from them, tpe takes its grid values from them. */
  cJSON *generated;
  cJSON **by_index;
  /* Trials are made in index order, so the configs before the last one
   * asked for are dropped (ARCHITECTURE.md#bounded-memory): a live
   * experiment holds only the part of its plan not made yet. by_index[i]
   * is NULL for i < dropped; asking for one of those again generates
   * anew. */
  int64_t dropped;
  int has_grid;
  struct tpe *tpe;
  int64_t warm_valid; /* warm_start trials with a finite value */
  int nobj;           /* tpe: objectives it learns from */
};

static int is_grid(const cJSON *v) {
  return cJSON_IsObject(v) && cJSON_GetObjectItemCaseSensitive(v, "grid_search");
}

static int is_domain(const cJSON *v) {
  return cJSON_IsObject(v) && !is_grid(v) && cJSON_GetObjectItemCaseSensitive(v, "type");
}

static int is_nested(const cJSON *v) { return cJSON_IsObject(v) && !is_grid(v) && !is_domain(v); }

static int space_has_grid(const cJSON *obj) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    if (is_grid(item) || (is_nested(item) && space_has_grid(item))) return 1;
  }
  return 0;
}

enum searcher_type searcher_type_of(const struct experiment_spec *spec) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(spec->search_alg, "type");
  if (cJSON_IsString(type) && !strcmp(type->valuestring, "tpe")) return SEARCHER_TPE;
  if (!spec->search_alg && spec->param_space && space_has_grid(spec->param_space))
    return SEARCHER_GRID;
  return SEARCHER_RANDOM;
}

enum searcher_type searcher_type(const struct searcher *s) { return s->type; }

const char *searcher_type_name(const struct searcher *s) {
  static const char *const names[] = {"random", "grid", "tpe"};
  return names[s->type];
}

static int check_point(const cJSON *point, const cJSON *space, const char *path,
                       struct validate_error *err);

/* A point's value v (at path) for a choice or grid whose options hold their
 * own parameters: a scalar naming a constant option, or an object that
 * picks one option by its constants and gives only parameters active there
 * (a constant of the option may be repeated, not changed). */
static int check_point_option(const cJSON *v, const cJSON *opts, const char *path,
                              struct validate_error *err) {
  const cJSON *o, *item;
  int k = space_option_index(opts, v, 1);
  if (k >= 0) {
    /* A partial config of that option: a point's own rules inside it. */
    o = cJSON_GetArrayItem(opts, k);
    return space_option_is_space(o) ? check_point(v, o, path, err) : 0;
  }
  if (!cJSON_IsObject(v)) {
    spec_error_set(err, path, "is none of the options of the parameter");
    return -EINVAL;
  }
  /* Name the first key that no option with the point's constants has. */
  k = 0;
  cJSON_ArrayForEach(o, opts) {
    int consts_ok = cJSON_IsObject(o);
    cJSON_ArrayForEach(item, v) {
      const cJSON *n = consts_ok ? cJSON_GetObjectItemCaseSensitive(o, item->string) : NULL;
      if (n && !cJSON_IsObject(n) && !cJSON_Compare(n, item, 1)) consts_ok = 0;
    }
    if (consts_ok) {
      cJSON_ArrayForEach(item, v) if (!cJSON_GetObjectItemCaseSensitive(o, item->string)) {
        char p[256];
        spec_path_join(p, sizeof p, path, '.', item->string);
        spec_error_set(err, p,
                       "is not active in the option the point picks (values[%d]): only that "
                       "option's parameters may be given",
                       k);
        return -EINVAL;
      }
      /* The keys fit: what is wrong lies deeper, in a nested option. */
      if (check_point(v, o, path, err)) return -EINVAL;
    }
    k++;
  }
  spec_error_set(err, path,
                 "matches none of the parameter's options (an option is picked by its "
                 "constants, like \"name\", and gives only its own parameters)");
  return -EINVAL;
}

static int check_point(const cJSON *point, const cJSON *space, const char *path,
                       struct validate_error *err) {
  const cJSON *item;
  if (!cJSON_IsObject(point)) {
    spec_error_set(err, path,
                   "must be an object of parameter values (a partial "
                   "config like {\"lr\": 0.01})");
    return -EINVAL;
  }
  cJSON_ArrayForEach(item, point) {
    char p[256];
    const cJSON *dom = cJSON_GetObjectItemCaseSensitive(space, item->string);
    spec_path_join(p, sizeof p, path, '.', item->string);
    if (!dom) {
      spec_error_set(err, p, "not a parameter of param_space");
      return -EINVAL;
    }
    if (space_options(dom)) {
      int rc = check_point_option(item, space_options(dom), p, err);
      if (rc) return rc;
    } else if (is_nested(dom)) {
      int rc = check_point(item, dom, p, err);
      if (rc) return rc;
    } else if (!is_grid(dom) && !is_domain(dom)) {
      if (cJSON_Compare(dom, item, 1)) continue; /* repeated as it is */
      spec_error_set(err, p,
                     "is a constant in param_space: a point cannot "
                     "change it");
      return -EINVAL;
    } else if (cJSON_IsObject(item) || cJSON_IsNull(item)) {
      spec_error_set(err, p,
                     "must be a value of the parameter's domain "
                     "(a number, string, boolean or array)");
      return -EINVAL;
    }
  }
  return 0;
}

int searcher_check_points(const cJSON *points, const cJSON *param_space, int64_t max_points,
                          struct validate_error *err) {
  const cJSON *pt;
  int i = 0;
  if (!cJSON_IsArray(points)) {
    spec_error_set(err, "points_to_evaluate",
                   "must be an array of (partial) "
                   "configs, like [{\"lr\": 0.01}]");
    return -EINVAL;
  }
  if (cJSON_GetArraySize(points) > max_points) {
    spec_error_set(err, "points_to_evaluate",
                   "holds %d points but the experiment "
                   "plans only %lld trials (grid x num_samples)",
                   cJSON_GetArraySize(points), (long long)max_points);
    return -EINVAL;
  }
  cJSON_ArrayForEach(pt, points) {
    char p[64];
    snprintf(p, sizeof p, "points_to_evaluate[%d]", i++);
    int rc = check_point(pt, param_space, p, err);
    if (rc) return rc;
  }
  return 0;
}

static int overlay(cJSON *config, const cJSON *point, const cJSON *space, struct rng *r);

/* config[key] := the point's value pv for a parameter whose options hold
 * their own parameters: when the config drew another option than the one
 * pv picks, that option is drawn anew from r first, so the config never
 * mixes two options' parameters. r NULL: the point's value replaces it. */
static int overlay_option(cJSON *config, const char *key, const cJSON *pv, const cJSON *opts,
                          struct rng *r) {
  cJSON *cur = cJSON_GetObjectItemCaseSensitive(config, key);
  int k = space_option_index(opts, pv, 1);
  if (k < 0) return -EINVAL; /* searcher_check_points refused it */
  const cJSON *o = cJSON_GetArrayItem(opts, k);
  if (!cur || space_option_index(opts, cur, 0) != k) {
    /* Without r (tpe's fixed values) the point's value alone. */
    cJSON *fresh = r ? space_build_option(o, r) : cJSON_Duplicate(pv, 1);
    if (!fresh || (cur ? !cJSON_ReplaceItemInObjectCaseSensitive(config, key, fresh)
                       : !cJSON_AddItemToObject(config, key, fresh))) {
      cJSON_Delete(fresh);
      return -ENOMEM;
    }
    cur = fresh;
  }
  if (space_option_is_space(o)) return overlay(cur, pv, o, r);
  return 0;
}

/* config := config with point's values (nested spaces merged key by key;
 * space: the (sub-)space config and point come from). */
static int overlay(cJSON *config, const cJSON *point, const cJSON *space, struct rng *r) {
  const cJSON *item;
  cJSON_ArrayForEach(item, point) {
    cJSON *cur = cJSON_GetObjectItemCaseSensitive(config, item->string);
    const cJSON *node = cJSON_GetObjectItemCaseSensitive(space, item->string);
    const cJSON *opts = space_options(node);
    if (opts) {
      int rc = overlay_option(config, item->string, item, opts, r);
      if (rc) return rc;
      continue;
    }
    if (cJSON_IsObject(cur) && cJSON_IsObject(item)) {
      int rc = overlay(cur, item, node, r);
      if (rc) return rc;
      continue;
    }
    cJSON *v = cJSON_Duplicate(item, 1);
    if (!v) return -ENOMEM;
    if (cur ? !cJSON_ReplaceItemInObjectCaseSensitive(config, item->string, v)
            : !cJSON_AddItemToObject(config, item->string, v)) {
      cJSON_Delete(v);
      return -ENOMEM;
    }
  }
  return 0;
}

static int grid_values(const cJSON *space, const cJSON *config, cJSON *out);

/* What a grid option fixes in a config value v: its constants and its own
 * grids' values; the random domains inside are left to the searcher. */
static int grid_option_fixed(const cJSON *opts, const cJSON *v, cJSON **out) {
  int k = space_option_index(opts, v, 0);
  const cJSON *o = cJSON_GetArrayItem(opts, k), *item;
  *out = NULL;
  if (k < 0 || !space_option_is_space(o)) {
    *out = cJSON_Duplicate(v, 1);
    return *out ? 0 : -ENOMEM;
  }
  if (!(*out = cJSON_CreateObject())) return -ENOMEM;
  cJSON_ArrayForEach(item, o) {
    cJSON *c;
    if (cJSON_IsObject(item)) continue;
    if (!(c = cJSON_Duplicate(item, 1)) || !cJSON_AddItemToObject(*out, item->string, c)) {
      cJSON_Delete(c);
      return -ENOMEM;
    }
  }
  return grid_values(o, v, *out);
}

/* The grid values of a generated config, shaped like a config. */
static int grid_values(const cJSON *space, const cJSON *config, cJSON *out) {
  const cJSON *item;
  cJSON_ArrayForEach(item, space) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, item->string);
    cJSON *c = NULL;
    if (!v) continue;
    if (is_grid(item) && space_options(item)) {
      if (grid_option_fixed(space_options(item), v, &c)) {
        cJSON_Delete(c);
        return -ENOMEM;
      }
    } else if (is_grid(item))
      c = cJSON_Duplicate(v, 1);
    else if (is_nested(item) && space_has_grid(item)) {
      c = cJSON_CreateObject();
      if (c && grid_values(item, v, c)) {
        cJSON_Delete(c);
        return -ENOMEM;
      }
    } else
      continue;
    if (!c || !cJSON_AddItemToObject(out, item->string, c)) {
      cJSON_Delete(c);
      return -ENOMEM;
    }
  }
  return 0;
}

/* Drops the generated configs before idx (see struct searcher). */
static void drop_before(struct searcher *s, int64_t idx) {
  for (; s->dropped < idx; s->dropped++) {
    cJSON *c = s->by_index[s->dropped];
    if (c) cJSON_Delete(cJSON_DetachItemViaPointer(s->generated, c));
    s->by_index[s->dropped] = NULL;
  }
}

static int ensure_generated(struct searcher *s, int64_t idx) {
  if (s->generated && idx < s->dropped) {
    /* An index already dropped (a dry run going back): anew. */
    cJSON_Delete(s->generated);
    free(s->by_index);
    s->generated = NULL;
    s->by_index = NULL;
    s->dropped = 0;
  }
  if (s->generated) {
    drop_before(s, idx);
    return 0;
  }
  cJSON *arr = NULL;
  int rc = space_generate(s->param_space, s->num_samples, s->seed, &arr, NULL);
  if (rc) return rc;
  int64_t n = cJSON_GetArraySize(arr);
  s->by_index = calloc((size_t)(n ? n : 1), sizeof *s->by_index);
  if (!s->by_index) {
    cJSON_Delete(arr);
    return -ENOMEM;
  }
  int64_t i = 0;
  for (cJSON *c = arr->child; c; c = c->next) s->by_index[i++] = c;
  s->generated = arr;
  drop_before(s, idx < n ? idx : n);
  return 0;
}

/* A stored warm_start trial's objective values: "value" (one objective)
 * or "values" (one per objective, in the experiment's order; null or
 * absent: NaN). 1 when every one is a number. */
static int searcher_warm_values(const cJSON *w, int nobj, double *values) {
  const cJSON *vs = cJSON_GetObjectItemCaseSensitive(w, "values");
  int valid = 1;
  for (int j = 0; j < nobj; j++) {
    const cJSON *v =
        nobj == 1 ? cJSON_GetObjectItemCaseSensitive(w, "value") : cJSON_GetArrayItem(vs, j);
    values[j] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    valid &= isfinite(values[j]) != 0;
  }
  return valid;
}

int searcher_create(const struct experiment_spec *spec, struct searcher **out,
                    struct validate_error *err) {
  struct searcher *s = calloc(1, sizeof *s);
  int rc = -ENOMEM;
  *out = NULL;
  if (!s) return -ENOMEM;
  s->type = searcher_type_of(spec);
  s->num_samples = spec->num_samples;
  s->num_trials = spec->num_trials;
  s->seed = spec->seed;
  s->space_copy = spec->param_space ? cJSON_Duplicate(spec->param_space, 1) : cJSON_CreateObject();
  if (!s->space_copy) goto fail;
  s->param_space = s->space_copy;
  s->has_grid = space_has_grid(s->param_space);
  if (spec->points_to_evaluate) {
    if (!(s->points = cJSON_Duplicate(spec->points_to_evaluate, 1))) goto fail;
    s->npoints = cJSON_GetArraySize(s->points);
  }
  if (s->type == SEARCHER_TPE) {
    s->nobj = spec->nobjectives > 1 ? spec->nobjectives : 1;
    rc = tpe_create_mo(s->param_space, spec->search_alg, s->nobj > 1 ? spec->modes : &spec->mode,
                       s->nobj, spec->seed, &s->tpe, err);
    if (rc) goto fail;
    rc = -ENOMEM;
    const cJSON *trials = cJSON_GetObjectItemCaseSensitive(spec->warm_start, "trials");
    int64_t k = 0;
    for (const cJSON *w = trials ? trials->child : NULL; w; w = w->next, k++) {
      double values[SPEC_MAX_OBJECTIVES];
      int valid = searcher_warm_values(w, s->nobj, values);
      /* Negative ids: never a trial of this experiment. */
      if (tpe_observe_mo(s->tpe, -1 - k, cJSON_GetObjectItemCaseSensitive(w, "config"), values,
                         TPE_FINISHED))
        goto fail;
      s->warm_valid += valid;
    }
  }
  *out = s;
  return 0;
fail:
  if (rc == -ENOMEM) spec_error_set(err, "", "out of memory");
  searcher_free(s);
  return rc;
}

void searcher_free(struct searcher *s) {
  if (!s) return;
  cJSON_Delete(s->space_copy);
  cJSON_Delete(s->points);
  cJSON_Delete(s->generated);
  free(s->by_index);
  tpe_free(s->tpe);
  free(s);
}

int searcher_observe(struct searcher *s, int64_t trial_id, int64_t idx, const cJSON *config,
                     double value, int finished) {
  (void)idx;
  if (s->type != SEARCHER_TPE || !config) return 0;
  return tpe_observe(s->tpe, trial_id, config, value, finished ? TPE_FINISHED : TPE_RUNNING);
}

int searcher_observe_mo(struct searcher *s, int64_t trial_id, int64_t idx, const cJSON *config,
                        const double *values, int finished) {
  (void)idx;
  if (s->type != SEARCHER_TPE || !config) return 0;
  return tpe_observe_mo(s->tpe, trial_id, config, values, finished ? TPE_FINISHED : TPE_RUNNING);
}

int searcher_objectives(const struct searcher *s) { return s->nobj ? s->nobj : 1; }

int searcher_observe_violation(struct searcher *s, int64_t trial_id, double violation) {
  if (s->type != SEARCHER_TPE) return 0;
  int rc = tpe_set_violation(s->tpe, trial_id, violation);
  return rc == -ENOENT ? 0 : rc;
}

static const cJSON *point_at(const struct searcher *s, int64_t idx) {
  return idx < s->npoints ? cJSON_GetArrayItem(s->points, (int)idx) : NULL;
}

int searcher_suggest(struct searcher *s, int64_t idx, cJSON **config) {
  int rc;
  *config = NULL;
  if (idx < 0 || idx >= s->num_trials) return -ENOENT;
  const cJSON *point = point_at(s, idx);
  if (s->type != SEARCHER_TPE || s->has_grid) {
    if ((rc = ensure_generated(s, idx))) return rc;
  }
  if (s->type != SEARCHER_TPE) {
    cJSON *c = cJSON_Duplicate(s->by_index[idx], 1);
    struct rng r;
    /* A point picking another option than the one drawn: that option's
     * parameters come from their own stream. */
    rng_seed(&r, rng_mix(s->seed ^ SEARCHER_SALT_POINT, (uint64_t)idx));
    if (!c || (point && (rc = overlay(c, point, s->param_space, &r)))) {
      cJSON_Delete(c);
      return c ? rc : -ENOMEM;
    }
    *config = c;
    return 0;
  }
  /* Ray's grid x searcher: the grid values of trial idx are fixed, the
   * point's values over them. */
  cJSON *fixed = NULL;
  if (s->has_grid || point) {
    if (!(fixed = cJSON_CreateObject()) ||
        (s->has_grid && grid_values(s->param_space, s->by_index[idx], fixed)) ||
        (point && overlay(fixed, point, s->param_space, NULL))) {
      cJSON_Delete(fixed);
      return -ENOMEM;
    }
  }
  rc = tpe_suggest(s->tpe, idx, fixed, config);
  cJSON_Delete(fixed);
  return rc;
}

int64_t searcher_configs_held(const struct searcher *s) {
  return s->generated ? cJSON_GetArraySize(s->generated) : 0;
}

int searcher_known(struct searcher *s, cJSON **configs, int64_t *n_later) {
  int64_t known = s->num_trials;
  cJSON *arr = cJSON_CreateArray();
  *configs = NULL;
  if (!arr) return -ENOMEM;
  if (s->type == SEARCHER_TPE) {
    /* Trial i can only have seen i finished trials of its own: the
     * first n_startup minus the warm ones are random for sure. */
    int64_t startup = tpe_n_startup(s->tpe) - s->warm_valid;
    if (startup < 0) startup = 0;
    if (startup < known) known = startup;
  }
  for (int64_t i = 0; i < known; i++) {
    cJSON *c = NULL;
    int rc = searcher_suggest(s, i, &c);
    if (rc) {
      cJSON_Delete(arr);
      return rc;
    }
    cJSON_AddItemToArray(arr, c);
  }
  *configs = arr;
  *n_later = s->num_trials - known;
  return 0;
}
