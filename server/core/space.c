/* space: checks param_space domains and samples trial configs from them,
 * deterministically from a seed (see space.h for the order). */
#include "space.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

#define SPACE_MAX_DEPTH 16
#define SPACE_MAX_COND_DEPTH 4           /* options holding sub-spaces, nested */
#define SPACE_MAX_VALUES 10000           /* entries of one choice or grid_search */
#define SPACE_MAX_TOTAL_NODES 5000000    /* JSON values over all trial configs */
#define SPACE_INT_MAX 9007199254740992.0 /* 2^53: integers JSON keeps exact */

enum domain_kind {
  DOM_CHOICE,
  DOM_UNIFORM,
  DOM_QUNIFORM,
  DOM_LOGUNIFORM,
  DOM_QLOGUNIFORM,
  DOM_RANDINT,
  DOM_LOGRANDINT,
  DOM_QRANDINT,
  DOM_RANDN,
  DOM_POW2,
};

struct domain_def {
  const char *name;
  enum domain_kind kind;
  const char *keys[5]; /* allowed keys besides "type", NULL-terminated */
};

static const struct domain_def domains[] = {
    {"choice", DOM_CHOICE, {"values", NULL}},
    {"uniform", DOM_UNIFORM, {"lower", "upper", NULL}},
    {"quniform", DOM_QUNIFORM, {"lower", "upper", "q", NULL}},
    {"loguniform", DOM_LOGUNIFORM, {"lower", "upper", NULL}},
    {"qloguniform", DOM_QLOGUNIFORM, {"lower", "upper", "q", NULL}},
    {"randint", DOM_RANDINT, {"lower", "upper", NULL}},
    {"lograndint", DOM_LOGRANDINT, {"lower", "upper", NULL}},
    {"qrandint", DOM_QRANDINT, {"lower", "upper", "q", NULL}},
    {"randn", DOM_RANDN, {"mean", "sd", NULL}},
    {"pow2", DOM_POW2, {"lower", "upper", NULL}},
};
#define NUM_DOMAINS (sizeof(domains) / sizeof(domains[0]))

static const char domain_names[] = "choice, uniform, quniform, loguniform, qloguniform, randint, "
                                   "lograndint, qrandint, randn, pow2";

static const struct domain_def *domain_find(const char *name) {
  for (size_t i = 0; i < NUM_DOMAINS; i++)
    if (strcmp(domains[i].name, name) == 0) return &domains[i];
  return NULL;
}

/* A domain is an object with "type"; a grid an object whose only key is
 * "grid_search"; any other object is a nested space. */
static int is_grid(const cJSON *v) {
  return cJSON_IsObject(v) && cJSON_GetObjectItemCaseSensitive(v, "grid_search");
}

static int is_domain(const cJSON *v) {
  return cJSON_IsObject(v) && !is_grid(v) && cJSON_GetObjectItemCaseSensitive(v, "type");
}

static void path_join(char *dst, size_t size, const char *base, const char *key) {
  spec_path_join(dst, size, base, '.', key);
}

/* base + "[i]": the path of an array entry. */
static void path_index(char *dst, size_t size, const char *base, int i) {
  char idx[16];
  snprintf(idx, sizeof idx, "[%d]", i);
  spec_path_join(dst, size, base, 0, idx);
}

/* Whether obj holds a domain or a grid, directly or in nested objects. */
static int holds_param(const cJSON *obj) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    if (is_grid(item) || is_domain(item) || (cJSON_IsObject(item) && holds_param(item))) return 1;
  }
  return 0;
}

int space_option_is_space(const cJSON *option) {
  return cJSON_IsObject(option) && holds_param(option);
}

/* The options of a choice or grid (their values array); NULL otherwise. */
static const cJSON *options_of(const cJSON *node) {
  if (is_grid(node)) return cJSON_GetObjectItemCaseSensitive(node, "grid_search");
  if (!is_domain(node)) return NULL;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
  if (!cJSON_IsString(t) || strcmp(t->valuestring, "choice") != 0) return NULL;
  return cJSON_GetObjectItemCaseSensitive(node, "values");
}

const cJSON *space_options(const cJSON *node) {
  const cJSON *opts = options_of(node), *o;
  cJSON_ArrayForEach(o, opts) if (space_option_is_space(o)) return opts;
  return NULL;
}

static int key_ok(const char *k) {
  size_t n = strlen(k);
  if (n < 1 || n > SPEC_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = k[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return 0;
  }
  return 1;
}

/* Reads a required/optional finite number; integer demands an exact
 * integer with |x| <= 2^53. */
static int get_num(const cJSON *dom, const char *path, const char *key, int required, int integer,
                   double def, double *out, struct validate_error *err) {
  char p[256];
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(dom, key);
  path_join(p, sizeof p, path, key);
  if (!v) {
    if (required) {
      spec_error_set(err, p, "required");
      return -EINVAL;
    }
    *out = def;
    return 0;
  }
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
    spec_error_set(err, p, "must be a finite number");
    return -EINVAL;
  }
  if (integer &&
      (v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > SPACE_INT_MAX)) {
    spec_error_set(err, p, "must be an integer (|value| <= 2^53)");
    return -EINVAL;
  }
  *out = v->valuedouble;
  return 0;
}

static int is_pow2(double x) {
  int e;
  return x >= 1 && x <= SPACE_INT_MAX && frexp(x, &e) == 0.5;
}

void space_q_range(double lower, double upper, double q, double *klo, double *khi) {
  /* A hair of tolerance keeps 0.3 a multiple of 0.1 despite binary
   * rounding. */
  *klo = ceil(lower / q - 1e-9);
  *khi = floor(upper / q + 1e-9);
}

static int check_domain(const cJSON *dom, const char *path, struct validate_error *err) {
  char p[256];
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(dom, "type");
  const struct domain_def *d;
  const cJSON *item;
  double lo = 0, hi = 0, q = 0, mean, sd;
  int integer;

  path_join(p, sizeof p, path, "type");
  if (!cJSON_IsString(t)) {
    spec_error_set(err, p, "must be a string naming a domain (%s)", domain_names);
    return -EINVAL;
  }
  d = domain_find(t->valuestring);
  if (!d) {
    spec_error_set(err, p, "unknown domain type '%.64s' (expected one of %s)", t->valuestring,
                   domain_names);
    return -EINVAL;
  }
  cJSON_ArrayForEach(item, dom) {
    int known = strcmp(item->string, "type") == 0;
    for (int i = 0; !known && d->keys[i]; i++) known = strcmp(item->string, d->keys[i]) == 0;
    if (!known) {
      char allowed[128] = "type";
      for (int i = 0; d->keys[i]; i++) {
        strcat(allowed, ", ");
        strcat(allowed, d->keys[i]);
      }
      path_join(p, sizeof p, path, item->string);
      spec_error_set(err, p, "unknown field (%s takes %s)", d->name, allowed);
      return -EINVAL;
    }
  }

  if (d->kind == DOM_CHOICE) {
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(dom, "values");
    path_join(p, sizeof p, path, "values");
    if (!vals) {
      spec_error_set(err, p, "required");
      return -EINVAL;
    }
    if (!cJSON_IsArray(vals) || cJSON_GetArraySize(vals) < 1 ||
        cJSON_GetArraySize(vals) > SPACE_MAX_VALUES) {
      spec_error_set(err, p, "choice needs an array of 1 to %d values", SPACE_MAX_VALUES);
      return -EINVAL;
    }
    return 0;
  }
  if (d->kind == DOM_RANDN) {
    if (get_num(dom, path, "mean", 0, 0, 0.0, &mean, err) ||
        get_num(dom, path, "sd", 0, 0, 1.0, &sd, err))
      return -EINVAL;
    if (!(sd > 0)) {
      path_join(p, sizeof p, path, "sd");
      spec_error_set(err, p, "randn needs sd > 0");
      return -EINVAL;
    }
    /* Box-Muller never goes past 8.6 sd (53-bit uniforms), so this
     * keeps every draw a finite double. */
    if (!isfinite(fabs(mean) + 9 * sd)) {
      path_join(p, sizeof p, path, "sd");
      spec_error_set(err, p, "randn needs |mean| + 9 sd to be a finite double");
      return -EINVAL;
    }
    return 0;
  }

  integer = d->kind == DOM_RANDINT || d->kind == DOM_LOGRANDINT || d->kind == DOM_QRANDINT ||
            d->kind == DOM_POW2;
  if (get_num(dom, path, "lower", 1, integer, 0, &lo, err) ||
      get_num(dom, path, "upper", 1, integer, 0, &hi, err))
    return -EINVAL;
  if (d->kind == DOM_QUNIFORM || d->kind == DOM_QLOGUNIFORM || d->kind == DOM_QRANDINT) {
    if (get_num(dom, path, "q", 1, integer, 0, &q, err)) return -EINVAL;
    if (!(q > 0)) {
      path_join(p, sizeof p, path, "q");
      spec_error_set(err, p, "%s needs q > 0", d->name);
      return -EINVAL;
    }
  }
  path_join(p, sizeof p, path, "lower");
  switch (d->kind) {
  case DOM_UNIFORM:
  case DOM_QUNIFORM:
    if (!(lo < hi)) {
      spec_error_set(err, p, "%s needs lower < upper", d->name);
      return -EINVAL;
    }
    if (!isfinite(hi - lo)) {
      spec_error_set(err, p, "%s needs upper - lower to be a finite double", d->name);
      return -EINVAL;
    }
    break;
  case DOM_LOGUNIFORM:
  case DOM_QLOGUNIFORM:
    if (!(lo > 0 && lo < hi)) {
      spec_error_set(err, p, "%s needs 0 < lower < upper", d->name);
      return -EINVAL;
    }
    break;
  case DOM_RANDINT:
    if (!(lo < hi)) {
      spec_error_set(err, p, "randint needs lower < upper (upper is exclusive)");
      return -EINVAL;
    }
    break;
  case DOM_LOGRANDINT:
    if (!(lo >= 1 && lo < hi)) {
      spec_error_set(err, p, "lograndint needs 1 <= lower < upper (upper is exclusive)");
      return -EINVAL;
    }
    break;
  case DOM_QRANDINT:
    if (!(lo <= hi)) {
      spec_error_set(err, p, "qrandint needs lower <= upper (both inclusive)");
      return -EINVAL;
    }
    break;
  case DOM_POW2:
    if (!is_pow2(lo)) {
      spec_error_set(err, p, "pow2 needs lower to be a power of two >= 1");
      return -EINVAL;
    }
    if (!is_pow2(hi)) {
      path_join(p, sizeof p, path, "upper");
      spec_error_set(err, p, "pow2 needs upper to be a power of two >= 1");
      return -EINVAL;
    }
    if (!(lo <= hi)) {
      spec_error_set(err, p, "pow2 needs lower <= upper (both inclusive)");
      return -EINVAL;
    }
    break;
  default:
    break;
  }
  if (q > 0) {
    double klo, khi;
    space_q_range(lo, hi, q, &klo, &khi);
    /* The multiples are counted as integers k (value k * q). */
    if (!(fabs(klo) <= SPACE_INT_MAX && fabs(khi) <= SPACE_INT_MAX)) {
      path_join(p, sizeof p, path, "q");
      spec_error_set(err, p,
                     "%s: q is too small for the range (lower/q and upper/q "
                     "must stay within 2^53)",
                     d->name);
      return -EINVAL;
    }
    if (klo > khi) {
      path_join(p, sizeof p, path, "q");
      spec_error_set(err, p, "%s: no multiple of q lies between lower and upper", d->name);
      return -EINVAL;
    }
  }
  return 0;
}

static int64_t mul_sat(int64_t a, int64_t b) {
  if (a != 0 && b > INT64_MAX / a) return INT64_MAX;
  return a * b;
}

static int value_fits(const cJSON *node, const cJSON *v, int partial);

/* Whether v is a config (partial: part of one) of the sub-space obj: no key
 * obj lacks, every constant equal, every parameter's value of its kind. */
static int object_fits(const cJSON *obj, const cJSON *v, int partial) {
  const cJSON *item;
  if (!cJSON_IsObject(v)) return 0;
  cJSON_ArrayForEach(item, v) if (!cJSON_GetObjectItemCaseSensitive(obj, item->string)) return 0;
  cJSON_ArrayForEach(item, obj) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, item->string);
    if (x ? !value_fits(item, x, partial) : !partial) return 0;
  }
  return 1;
}

static int value_fits(const cJSON *node, const cJSON *v, int partial) {
  const cJSON *opts = options_of(node);
  if (opts) return space_option_index(opts, v, partial) >= 0;
  if (is_grid(node) || is_domain(node)) return cJSON_IsNumber(v);
  if (cJSON_IsObject(node)) return object_fits(node, v, partial);
  return cJSON_Compare(node, v, 1);
}

int space_option_index(const cJSON *opts, const cJSON *v, int partial) {
  const cJSON *o;
  int i = 0;
  cJSON_ArrayForEach(o, opts) {
    if (space_option_is_space(o) ? object_fits(o, v, partial) : cJSON_Compare(o, v, 1)) return i;
    i++;
  }
  return -1;
}

static int64_t add_sat(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

static int check_object(const cJSON *obj, const char *path, int depth, int cond, int in_choice,
                        int64_t *product, struct validate_error *err);

/* The options of a choice (in_choice) or a grid_search at path (the values
 * array's path): an option holding domains or grids is a sub-space, checked
 * like a nested space one conditional level deeper. *size: how many grid
 * combinations the options make (each sub-space option its own product). */
static int check_options(const cJSON *opts, const char *path, int depth, int cond, int in_choice,
                         int64_t *size, struct validate_error *err) {
  const cJSON *o;
  int i = 0;
  *size = 0;
  cJSON_ArrayForEach(o, opts) {
    int64_t sub = 1;
    if (space_option_is_space(o)) {
      char p[256];
      path_index(p, sizeof p, path, i);
      if (cond >= SPACE_MAX_COND_DEPTH) {
        spec_error_set(err, p, "options holding their own parameters nest at most %d levels deep",
                       SPACE_MAX_COND_DEPTH);
        return -EINVAL;
      }
      if (check_object(o, p, depth + 1, cond + 1, in_choice, &sub, err)) return -EINVAL;
    }
    *size = add_sat(*size, sub);
    i++;
  }
  return 0;
}

static int check_object(const cJSON *obj, const char *path, int depth, int cond, int in_choice,
                        int64_t *product, struct validate_error *err) {
  const cJSON *item;
  char p[256];

  if (depth > SPACE_MAX_DEPTH) {
    spec_error_set(err, path, "nested deeper than %d levels", SPACE_MAX_DEPTH);
    return -EINVAL;
  }
  cJSON_ArrayForEach(item, obj) {
    path_join(p, sizeof p, path, item->string);
    if (!key_ok(item->string)) {
      spec_error_set(err, p[0] ? p : path,
                     "parameter names need 1-%d characters from A-Z a-z 0-9 _ . -", SPEC_NAME_MAX);
      return -EINVAL;
    }
    if (is_grid(item)) {
      const cJSON *g = cJSON_GetObjectItemCaseSensitive(item, "grid_search");
      char gp[256];
      int64_t size;
      int n;
      if (cJSON_GetArraySize(item) != 1) {
        spec_error_set(err, p, "a grid_search object takes no other fields");
        return -EINVAL;
      }
      n = cJSON_IsArray(g) ? cJSON_GetArraySize(g) : 0;
      path_join(gp, sizeof gp, p, "grid_search");
      if (n < 1 || n > SPACE_MAX_VALUES) {
        spec_error_set(err, gp, "grid_search needs an array of 1 to %d values", SPACE_MAX_VALUES);
        return -EINVAL;
      }
      if (in_choice) {
        spec_error_set(err, p,
                       "a grid_search inside an option of a choice would make the number of "
                       "trials depend on a draw; make the outer parameter a grid_search");
        return -EINVAL;
      }
      if (check_options(g, gp, depth, cond, 0, &size, err)) return -EINVAL;
      *product = mul_sat(*product, size);
    } else if (is_domain(item)) {
      const cJSON *opts;
      int64_t size;
      if (check_domain(item, p, err)) return -EINVAL;
      if ((opts = options_of(item))) {
        char vp[256];
        path_join(vp, sizeof vp, p, "values");
        if (check_options(opts, vp, depth, cond, 1, &size, err)) return -EINVAL;
      }
    } else if (cJSON_IsObject(item)) {
      if (check_object(item, p, depth + 1, cond, in_choice, product, err)) return -EINVAL;
    }
    /* Anything else is a constant. */
  }
  return 0;
}

int space_check(const cJSON *param_space, const char *path_prefix, int64_t *grid_product,
                struct validate_error *err) {
  int64_t product = 1;
  const char *path = path_prefix ? path_prefix : "";

  if (!cJSON_IsObject(param_space)) {
    spec_error_set(err, path, "must be an object of parameters");
    return -EINVAL;
  }
  if (check_object(param_space, path, 1, 0, 0, &product, err)) return -EINVAL;
  if (grid_product) *grid_product = product;
  return 0;
}

static int64_t nodes_of(const cJSON *v) {
  const cJSON *item;
  int64_t n = 1;
  cJSON_ArrayForEach(item, v) n += nodes_of(item);
  return n;
}

static int64_t max_nodes_of(const cJSON *arr) {
  const cJSON *item;
  int64_t m = 1;
  cJSON_ArrayForEach(item, arr) {
    int64_t n = nodes_of(item);
    if (n > m) m = n;
  }
  return m;
}

/* An upper bound on the JSON values one sampled config holds. */
static int64_t config_nodes(const cJSON *obj) {
  const cJSON *item;
  int64_t n = 1;
  cJSON_ArrayForEach(item, obj) {
    if (is_grid(item))
      n += max_nodes_of(cJSON_GetObjectItemCaseSensitive(item, "grid_search"));
    else if (is_domain(item))
      n += max_nodes_of(cJSON_GetObjectItemCaseSensitive(item, "values"));
    else if (cJSON_IsObject(item))
      n += config_nodes(item);
    else
      n += nodes_of(item);
  }
  return n;
}

int space_count(const cJSON *param_space, int64_t num_samples, int64_t *count,
                struct validate_error *err) {
  int64_t nodes;
  int64_t product;
  int64_t total;

  if (space_check(param_space, "param_space", &product, err)) return -EINVAL;
  if (num_samples < 1 || num_samples > SPEC_NUM_SAMPLES_MAX) {
    spec_error_set(err, "num_samples", "must be an integer from 1 to %d", SPEC_NUM_SAMPLES_MAX);
    return -EINVAL;
  }
  total = mul_sat(product, num_samples);
  if (total > SPEC_NUM_SAMPLES_MAX) {
    spec_error_set(err, "num_samples",
                   "grid combinations (%lld) x num_samples (%lld) exceeds %d trials",
                   (long long)product, (long long)num_samples, SPEC_NUM_SAMPLES_MAX);
    return -EINVAL;
  }
  /* Every trial gets its own copy of every constant; bound the total so a
   * 1 MiB config cannot ask for gigabytes of trial configs. */
  nodes = config_nodes(param_space);
  if (mul_sat(nodes, total) > SPACE_MAX_TOTAL_NODES) {
    spec_error_set(err, "param_space",
                   "too large: %lld trials x up to %lld values per config exceeds %d values;"
                   " use fewer samples or smaller constants",
                   (long long)total, (long long)nodes, SPACE_MAX_TOTAL_NODES);
    return -EINVAL;
  }
  *count = total;
  return 0;
}

/* --- sampling --- */

struct grid_var {
  const cJSON *node; /* the {"grid_search": [...]} object */
  char path[256];    /* sort key: keys joined by '\x01' (below any key byte) */
  int64_t size;      /* combinations: an option holding grids counts its own */
  int64_t index;     /* current combination for the trial being built */
  int cond;          /* some option holds its own parameters */
};

struct grid_list {
  struct grid_var *v;
  int n, cap;
};

static int64_t grid_product(const cJSON *obj);

/* The combinations the options of a grid make: one per constant option,
 * the grid product of each option holding its own parameters. */
static int64_t options_size(const cJSON *opts) {
  const cJSON *o;
  int64_t n = 0;
  cJSON_ArrayForEach(o, opts) n = add_sat(n, space_option_is_space(o) ? grid_product(o) : 1);
  return n;
}

/* The grid combinations of a (sub-)space: the product of its grids' sizes
 * (a choice's options hold no grids). */
static int64_t grid_product(const cJSON *obj) {
  const cJSON *item;
  int64_t n = 1;
  cJSON_ArrayForEach(item, obj) {
    if (is_grid(item))
      n = mul_sat(n, options_size(cJSON_GetObjectItemCaseSensitive(item, "grid_search")));
    else if (cJSON_IsObject(item) && !is_domain(item))
      n = mul_sat(n, grid_product(item));
  }
  return n;
}

/* The option of opts that grid combination c falls in (options in order,
 * each as many combinations as options_size counts), and the combination
 * inside it in *rest. */
static const cJSON *option_at(const cJSON *opts, int64_t c, int64_t *rest) {
  const cJSON *o;
  cJSON_ArrayForEach(o, opts) {
    int64_t w = space_option_is_space(o) ? grid_product(o) : 1;
    if (c < w) {
      *rest = c;
      return o;
    }
    c -= w;
  }
  *rest = 0;
  return cJSON_GetArrayItem(opts, 0);
}

static int collect_grids(const cJSON *obj, const char *path, struct grid_list *g) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    char p[256];
    spec_path_join(p, sizeof p, path, '\x01', item->string);
    if (is_grid(item)) {
      if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 8;
        struct grid_var *nv = realloc(g->v, (size_t)cap * sizeof *nv);
        if (!nv) return -ENOMEM;
        g->v = nv;
        g->cap = cap;
      }
      g->v[g->n].node = item;
      memcpy(g->v[g->n].path, p, sizeof p);
      g->v[g->n].cond = space_options(item) != NULL;
      g->v[g->n].size =
          g->v[g->n].cond
              ? options_size(cJSON_GetObjectItemCaseSensitive(item, "grid_search"))
              : cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(item, "grid_search"));
      g->v[g->n].index = 0;
      g->n++;
    } else if (cJSON_IsObject(item) && !is_domain(item)) {
      int rc = collect_grids(item, p, g);
      if (rc) return rc;
    }
  }
  return 0;
}

static int grid_cmp(const void *a, const void *b) {
  return strcmp(((const struct grid_var *)a)->path, ((const struct grid_var *)b)->path);
}

static double num_of(const cJSON *dom, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(dom, key);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* k * q clamped to the multiples inside [lo, hi]. */
static double q_clamp(double v, double lo, double hi, double q) {
  double klo, khi, k = round(v / q);
  space_q_range(lo, hi, q, &klo, &khi);
  if (k < klo) k = klo;
  if (k > khi) k = khi;
  /* 3 * 0.1 is 0.30000000000000004: keep such an ulp inside the bounds. */
  return fmin(fmax(k * q, lo), hi);
}

static double log_uniform(struct rng *r, double lo, double hi) {
  double v = exp(rng_uniform_range(r, log(lo), log(hi)));
  if (v < lo) v = lo;
  if (v >= hi) v = nextafter(hi, lo);
  return v;
}

static cJSON *build_space(const cJSON *obj, int64_t combo, struct rng *r);

cJSON *space_sample(const cJSON *dom, struct rng *r) {
  const struct domain_def *d =
      domain_find(cJSON_GetObjectItemCaseSensitive(dom, "type")->valuestring);
  double lo = num_of(dom, "lower", 0), hi = num_of(dom, "upper", 0);
  double q = num_of(dom, "q", 0), v = 0;

  switch (d->kind) {
  case DOM_CHOICE: {
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(dom, "values");
    int64_t i = rng_int_range(r, 0, cJSON_GetArraySize(vals));
    const cJSON *o = cJSON_GetArrayItem(vals, (int)i);
    /* A chosen sub-space draws its own domains next, from the same
     * stream, in its key order: only the active branch is drawn. */
    return space_option_is_space(o) ? build_space(o, 0, r) : cJSON_Duplicate(o, 1);
  }
  case DOM_UNIFORM:
    v = rng_uniform_range(r, lo, hi);
    break;
  case DOM_QUNIFORM:
    v = q_clamp(rng_uniform_range(r, lo, hi), lo, hi, q);
    break;
  case DOM_LOGUNIFORM:
    v = log_uniform(r, lo, hi);
    break;
  case DOM_QLOGUNIFORM:
    v = q_clamp(log_uniform(r, lo, hi), lo, hi, q);
    break;
  case DOM_RANDINT:
    v = (double)rng_int_range(r, (int64_t)lo, (int64_t)hi);
    break;
  case DOM_LOGRANDINT:
    v = floor(log_uniform(r, lo, hi));
    if (v < lo) v = lo;
    if (v > hi - 1) v = hi - 1;
    break;
  case DOM_QRANDINT: {
    double klo, khi;
    space_q_range(lo, hi, q, &klo, &khi);
    v = (double)rng_int_range(r, (int64_t)klo, (int64_t)khi + 1) * q;
    break;
  }
  case DOM_RANDN:
    v = rng_normal(r, num_of(dom, "mean", 0.0), num_of(dom, "sd", 1.0));
    break;
  case DOM_POW2: {
    int elo, ehi;
    frexp(lo, &elo);
    frexp(hi, &ehi);
    v = ldexp(1.0, (int)rng_int_range(r, elo - 1, ehi));
    break;
  }
  }
  return cJSON_CreateNumber(v);
}

static struct grid_var *grid_lookup(struct grid_list *g, const cJSON *node) {
  for (int i = 0; i < g->n; i++)
    if (g->v[i].node == node) return &g->v[i];
  return NULL;
}

/* Builds one trial's config; values drawn in the space's key order. */
static cJSON *build(const cJSON *obj, struct grid_list *g, struct rng *r) {
  const cJSON *item;
  cJSON *out = cJSON_CreateObject();
  if (!out) return NULL;
  cJSON_ArrayForEach(item, obj) {
    cJSON *v;
    if (is_grid(item)) {
      const struct grid_var *gv = grid_lookup(g, item);
      const cJSON *arr = cJSON_GetObjectItemCaseSensitive(item, "grid_search");
      int64_t rest;
      if (!gv->cond) {
        v = cJSON_Duplicate(cJSON_GetArrayItem(arr, (int)gv->index), 1);
      } else {
        const cJSON *o = option_at(arr, gv->index, &rest);
        v = space_option_is_space(o) ? build_space(o, rest, r) : cJSON_Duplicate(o, 1);
      }
    } else if (is_domain(item)) {
      v = space_sample(item, r);
    } else if (cJSON_IsObject(item)) {
      v = build(item, g, r);
    } else {
      v = cJSON_Duplicate(item, 1);
    }
    if (!v || !cJSON_AddItemToObject(out, item->string, v)) {
      cJSON_Delete(v);
      cJSON_Delete(out);
      return NULL;
    }
  }
  return out;
}

/* One config of a (sub-)space at grid combination combo (Ray's order: the
 * first grid by sorted path varies fastest). NULL when out of memory. */
/* The grids of a (sub-)space in Ray's order (sorted by path). */
static int grids_of(const cJSON *obj, struct grid_list *g) {
  int rc = collect_grids(obj, "", g);
  if (!rc && g->n > 1) qsort(g->v, (size_t)g->n, sizeof *g->v, grid_cmp);
  return rc;
}

/* One config at grid combination combo: the first grid varies fastest. */
static cJSON *build_at(const cJSON *obj, struct grid_list *g, int64_t combo, struct rng *r) {
  for (int k = 0; k < g->n; k++) {
    g->v[k].index = combo % g->v[k].size;
    combo /= g->v[k].size;
  }
  return build(obj, g, r);
}

static cJSON *build_space(const cJSON *obj, int64_t combo, struct rng *r) {
  struct grid_list g = {0};
  cJSON *out = grids_of(obj, &g) ? NULL : build_at(obj, &g, combo, r);
  free(g.v);
  return out;
}

cJSON *space_build_option(const cJSON *option, struct rng *r) {
  if (!space_option_is_space(option)) return cJSON_Duplicate(option, 1);
  return build_space(option, rng_int_range(r, 0, grid_product(option)), r);
}

int space_generate(const cJSON *param_space, int64_t num_samples, uint64_t seed,
                   cJSON **configs_out, struct validate_error *err) {
  struct grid_list g = {0};
  int64_t count, combos;
  cJSON *arr = NULL;
  int rc;

  *configs_out = NULL;
  rc = space_count(param_space, num_samples, &count, err);
  if (rc) return rc;
  rc = -ENOMEM;
  combos = grid_product(param_space);
  /* The top level's grids once; an option's own grids per trial. */
  if (grids_of(param_space, &g)) goto fail;
  arr = cJSON_CreateArray();
  if (!arr) goto fail;
  for (int64_t i = 0; i < count; i++) {
    struct rng r;
    cJSON *cfg;
    rng_seed(&r, rng_mix(seed, (uint64_t)i));
    cfg = build_at(param_space, &g, i % combos, &r);
    if (!cfg || !cJSON_AddItemToArray(arr, cfg)) {
      cJSON_Delete(cfg);
      goto fail;
    }
  }
  free(g.v);
  *configs_out = arr;
  return 0;
fail:
  spec_error_set(err, "param_space", "out of memory while sampling");
  free(g.v);
  cJSON_Delete(arr);
  return rc;
}
