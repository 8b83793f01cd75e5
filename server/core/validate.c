/* validate: checks a submitted experiment config field by field and fills
 * an experiment_spec with Ray Tune's defaults. */
#include "validate.h"
#include "asha.h"
#include "searcher.h"
#include "tpe.h"
#include "hyperband.h"
#include "pbt.h"
#include "median.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space.h"
#include "stoprule.h"

#define VALIDATE_MAX_DEPTH 32
#define VALIDATE_MAX_STRING 4096
#define VALIDATE_MAX_ARGV 256
#define VALIDATE_MAX_ENV 256
#define VALIDATE_INT_MAX 9007199254740992.0 /* 2^53 */

static void join(char *dst, size_t size, const char *base, const char *key) {
  spec_path_join(dst, size, base, '.', key);
}

static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* cJSON keeps every copy of a repeated key while lookups see only the
 * first; reject the ambiguity instead of guessing which one was meant. */
static int check_duplicates(const cJSON *obj, const char *path, struct validate_error *err) {
  const cJSON *item;
  const char **keys;
  int n = cJSON_GetArraySize(obj), i = 0, rc = 0;
  if (n < 2) return 0;
  keys = malloc((size_t)n * sizeof *keys);
  if (!keys) {
    spec_error_set(err, path, "out of memory");
    return -ENOMEM;
  }
  cJSON_ArrayForEach(item, obj) keys[i++] = item->string;
  qsort(keys, (size_t)n, sizeof *keys, cmp_key);
  for (i = 1; i < n; i++) {
    if (strcmp(keys[i - 1], keys[i]) == 0) {
      char p[256];
      join(p, sizeof p, path, keys[i]);
      spec_error_set(err, p, "duplicate field");
      rc = -EINVAL;
      break;
    }
  }
  free(keys);
  return rc;
}

/* Limits that hold everywhere: nesting depth, string lengths (keys too),
 * no duplicate keys. */
static int check_shape(const cJSON *v, const char *path, int depth, struct validate_error *err) {
  const cJSON *item;
  int i = 0;
  if (depth > VALIDATE_MAX_DEPTH) {
    spec_error_set(err, path, "nested deeper than %d levels", VALIDATE_MAX_DEPTH);
    return -EINVAL;
  }
  if (cJSON_IsString(v) && strlen(v->valuestring) > VALIDATE_MAX_STRING) {
    spec_error_set(err, path, "string longer than %d bytes", VALIDATE_MAX_STRING);
    return -EINVAL;
  }
  if (cJSON_IsObject(v)) {
    int rc = check_duplicates(v, path, err);
    if (rc) return rc;
  }
  cJSON_ArrayForEach(item, v) {
    char p[256];
    if (cJSON_IsObject(v)) {
      if (strlen(item->string) > VALIDATE_MAX_STRING) {
        spec_error_set(err, path, "field name longer than %d bytes", VALIDATE_MAX_STRING);
        return -EINVAL;
      }
      join(p, sizeof p, path, item->string);
    } else {
      char idx[24];
      snprintf(idx, sizeof idx, "[%d]", i);
      spec_path_join(p, sizeof p, path, 0, "");
      spec_path_join(p, sizeof p, p, 0, idx);
    }
    int rc = check_shape(item, p, depth + 1, err);
    if (rc) return rc;
    i++;
  }
  return 0;
}

/* pbt (pbt.c checks the object): no search algorithm but random sampling,
 * as Ray refuses a searcher with PopulationBasedTraining. */
static int check_pbt(const cJSON *config, const cJSON *ps, struct pbt_params *p,
                     struct validate_error *err) {
  const cJSON *sa = cJSON_GetObjectItemCaseSensitive(config, "search_alg");
  const cJSON *sat = cJSON_GetObjectItemCaseSensitive(sa, "type");
  if (cJSON_IsString(sat) && strcmp(sat->valuestring, "random") != 0)
    return spec_fail_at(err, "search_alg", "type",
                        "only random sampling goes with the pbt scheduler (as in Ray: a "
                        "trial's config changes while it trains)");
  return pbt_check(cJSON_GetObjectItemCaseSensitive(config, "scheduler"), "scheduler", ps,
                   cJSON_GetObjectItemCaseSensitive(config, "trainable"), p, err);
}

static int check_scheduler(const cJSON *s, struct sched_params *sp, struct validate_error *err) {
  static const char *const fifo_keys[] = {"type", "time_attr", "max_t", NULL};
  const cJSON *t;
  int rc;

  memset(sp, 0, sizeof *sp);
  snprintf(sp->time_attr, sizeof sp->time_attr, "training_iteration");
  sp->type = SPEC_SCHED_FIFO;
  if (!s) return 0;
  if (!cJSON_IsObject(s)) return spec_fail_at(err, "", "scheduler", "must be an object");
  t = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (!t) return spec_fail_at(err, "scheduler", "type", "required (fifo or asha)");
  if (cJSON_IsString(t) && strcmp(t->valuestring, "hyperband") == 0)
    return hb_check(s, "scheduler", sp, err);
  if (cJSON_IsString(t) && strcmp(t->valuestring, "asha") == 0)
    return asha_check(s, "scheduler", sp, err);
  if (cJSON_IsString(t) && strcmp(t->valuestring, "pbt") == 0) {
    /* The rest (hyperparam_mutations against param_space and the
     * trainable) is checked in validate_config by pbt_check. */
    sp->type = SPEC_SCHED_PBT;
    return spec_get_name(s, "scheduler", "time_attr", 1, sp->time_attr, err) < 0 ? -EINVAL : 0;
  }
  if (cJSON_IsString(t) && strcmp(t->valuestring, "median_stopping") == 0) {
    sp->type = SPEC_SCHED_MEDIAN;
    if (median_check(s, "scheduler", &sp->median, err) ||
        spec_get_name(s, "scheduler", "time_attr", 1, sp->time_attr, err) < 0)
      return -EINVAL;
    return 0;
  }
  if (!cJSON_IsString(t) || strcmp(t->valuestring, "fifo"))
    return spec_fail_at(
        err, "scheduler", "type",
        "must be \"fifo\", \"asha\", \"hyperband\", \"pbt\" or \"median_stopping\"");
  /* fifo: run to the end, or to max_t when given. */
  if (spec_check_keys(s, "scheduler", "fifo", fifo_keys, err)) return -EINVAL;
  if (spec_get_name(s, "scheduler", "time_attr", 1, sp->time_attr, err) < 0) return -EINVAL;
  rc = spec_get_number(s, "scheduler", "max_t", &sp->max_t, err);
  if (rc < 0) return rc;
  if (rc) sp->has_max_t = 1;
  if (sp->has_max_t && !(sp->max_t > 0))
    return spec_fail_at(err, "scheduler", "max_t", "must be > 0");
  return 0;
}

static int check_resources(const cJSON *r, struct spec_resources *res, struct validate_error *err) {
  static const char *const keys[] = {"cpu", "gpu", "memory_mb", "num_workers", NULL};
  res->cpu = 1;
  res->gpu = 0;
  res->memory_mb = 0;
  res->num_workers = 1;
  if (!r) return 0;
  if (!cJSON_IsObject(r)) return spec_fail_at(err, "", "resources_per_trial", "must be an object");
  if (spec_check_keys(r, "resources_per_trial", "resources_per_trial", keys, err)) return -EINVAL;
  if (spec_get_number(r, "resources_per_trial", "cpu", &res->cpu, err) < 0 ||
      spec_get_number(r, "resources_per_trial", "gpu", &res->gpu, err) < 0)
    return -EINVAL;
  if (!(res->cpu >= 0 && res->cpu <= 1024))
    return spec_fail_at(err, "resources_per_trial", "cpu", "must be from 0 to 1024");
  if (!(res->gpu >= 0 && res->gpu <= 64))
    return spec_fail_at(err, "resources_per_trial", "gpu", "must be from 0 to 64");
  if (spec_get_int(r, "resources_per_trial", "memory_mb", 0, 1 << 30, &res->memory_mb, err) < 0)
    return -EINVAL;
  /* A gang: that many member processes, each with the cpu, gpu and
   * memory_mb above, leased together (docs/scheduling.md#gang-trials). */
  if (spec_get_int(r, "resources_per_trial", "num_workers", 1, SPEC_GANG_MAX, &res->num_workers,
                   err) < 0)
    return -EINVAL;
  return 0;
}

static int check_string(const cJSON *obj, const char *path, const char *key, int required,
                        struct validate_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return required ? spec_fail_at(err, path, key, "required") : 0;
  if (!cJSON_IsString(v) || !v->valuestring[0])
    return spec_fail_at(err, path, key, "must be a non-empty string");
  return 0;
}

static int check_enum(const cJSON *obj, const char *path, const char *key,
                      const char *const *values, const char *msg, struct validate_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return spec_fail_at(err, path, key, "required");
  for (int i = 0; cJSON_IsString(v) && values[i]; i++)
    if (strcmp(v->valuestring, values[i]) == 0) return 0;
  return spec_fail_at(err, path, key, msg);
}

static int env_name_ok(const char *s) {
  if (!s[0] || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_'))
      return 0;
  return 1;
}

static int check_trainable(const cJSON *t, struct validate_error *err) {
  static const char *const builtin_keys[] = {"type",        "model", "dataset", "data_dir",
                                             "train_limit", "test",  "device",  NULL};
  static const char *const devices[] = {"cpu", "cuda", "auto", NULL};
  static const char *const command_keys[] = {"type", "argv", "env", "cwd", "stdout", NULL};
  static const char *const models[] = {"mlp", "cnn", NULL};
  static const char *const datasets[] = {"fashion-mnist", "mnist", "cifar10", NULL};
  const char *P = "trainable";
  const cJSON *type, *v, *item;
  int64_t limit;
  int i = 0;

  if (!t) return spec_fail_at(err, "", P, "required (builtin or command trainable)");
  if (!cJSON_IsObject(t)) return spec_fail_at(err, "", P, "must be an object");
  type = cJSON_GetObjectItemCaseSensitive(t, "type");
  if (!type) return spec_fail_at(err, P, "type", "required (builtin or command)");
  if (!cJSON_IsString(type) ||
      (strcmp(type->valuestring, "builtin") && strcmp(type->valuestring, "command")))
    return spec_fail_at(err, P, "type", "must be \"builtin\" or \"command\"");

  if (strcmp(type->valuestring, "builtin") == 0) {
    if (spec_check_keys(t, P, "a builtin trainable", builtin_keys, err) ||
        check_enum(t, P, "model", models, "must be \"mlp\" or \"cnn\"", err) ||
        check_enum(t, P, "dataset", datasets, "must be \"fashion-mnist\", \"mnist\" or \"cifar10\"",
                   err) ||
        check_string(t, P, "data_dir", 0, err) ||
        (cJSON_GetObjectItemCaseSensitive(t, "device") &&
         check_enum(t, P, "device", devices, "must be \"cpu\", \"cuda\" or \"auto\"", err)) ||
        spec_get_int(t, P, "train_limit", 1, 1e9, &limit, err) < 0)
      return -EINVAL;
    v = cJSON_GetObjectItemCaseSensitive(t, "test");
    if (v && !cJSON_IsBool(v)) return spec_fail_at(err, P, "test", "must be true or false");
    return 0;
  }

  if (spec_check_keys(t, P, "a command trainable", command_keys, err)) return -EINVAL;
  static const char *const stdout_kinds[] = {"pty", "pipe", NULL};
  if (cJSON_GetObjectItemCaseSensitive(t, "stdout") &&
      check_enum(t, P, "stdout", stdout_kinds, "must be \"pty\" or \"pipe\"", err))
    return -EINVAL;
  v = cJSON_GetObjectItemCaseSensitive(t, "argv");
  if (!v) return spec_fail_at(err, P, "argv", "required (the program and its arguments)");
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > VALIDATE_MAX_ARGV) {
    char msg[96];
    snprintf(msg, sizeof msg, "must be an array of 1 to %d strings", VALIDATE_MAX_ARGV);
    return spec_fail_at(err, P, "argv", msg);
  }
  cJSON_ArrayForEach(item, v) {
    if (!cJSON_IsString(item) || (i == 0 && !item->valuestring[0])) {
      char p[64];
      snprintf(p, sizeof p, "trainable.argv[%d]", i);
      spec_error_set(err, p,
                     i == 0 ? "must be a non-empty string (the program)" : "must be a string");
      return -EINVAL;
    }
    i++;
  }
  v = cJSON_GetObjectItemCaseSensitive(t, "env");
  if (v) {
    if (!cJSON_IsObject(v) || cJSON_GetArraySize(v) > VALIDATE_MAX_ENV) {
      char msg[96];
      snprintf(msg, sizeof msg, "must be an object of at most %d strings", VALIDATE_MAX_ENV);
      return spec_fail_at(err, P, "env", msg);
    }
    cJSON_ArrayForEach(item, v) {
      char p[256];
      join(p, sizeof p, "trainable.env", item->string);
      if (!env_name_ok(item->string)) {
        spec_error_set(err, p,
                       "environment names need A-Z a-z 0-9 _ and must not start with a digit");
        return -EINVAL;
      }
      if (!cJSON_IsString(item)) {
        spec_error_set(err, p, "must be a string");
        return -EINVAL;
      }
    }
  }
  /* Trial stdout is a pseudo-terminal unless the trainable asks for a pipe
   * (docs/protocol.md#builtin-and-command). */
  if (cJSON_GetObjectItemCaseSensitive(t, "stdout") &&
      check_enum(t, P, "stdout", stdout_kinds, "must be \"pty\" or \"pipe\"", err))
    return -EINVAL;
  return check_string(t, P, "cwd", 0, err);
}

/* The names a placeholder may use besides param_space's top-level keys:
 * the worker fills these in for every trial
 * (docs/protocol.md#submission-checks). */
static const char *const placeholder_extra[] = {"trial_id", "trial_name", "experiment_id",
                                                "checkpoint_dir", NULL};

/* worker/trainable.c's grammar: `{{` and `}}` are literal braces; `{NAME}`
 * is a placeholder when NAME starts with a letter or '_' and goes on with
 * letters, digits, '_', '.', '-'; any other '{' is literal text. */
static int placeholder_name_ok(const char *s, size_t n) {
  if (n == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
    return 0;
  for (size_t i = 1; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return 0;
  }
  return 1;
}

static int placeholder_known(const cJSON *ps, const char *name, size_t n) {
  const cJSON *item;
  for (int i = 0; placeholder_extra[i]; i++)
    if (strlen(placeholder_extra[i]) == n && !strncmp(placeholder_extra[i], name, n)) return 1;
  cJSON_ArrayForEach(item,
                     ps) if (strlen(item->string) == n && !strncmp(item->string, name, n)) return 1;
  return 0;
}

/* One argv/env/cwd string: every placeholder must name something a trial
 * has, or each trial would fail at its start with the same typo. */
static int check_placeholders_in(const char *text, const cJSON *ps, const char *path,
                                 struct validate_error *err) {
  for (const char *p = text; *p;) {
    if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
      p += 2;
      continue;
    }
    const char *close = p[0] == '{' ? strchr(p + 1, '}') : NULL;
    size_t n = close ? (size_t)(close - p - 1) : 0;
    if (!close || n >= 256 || !placeholder_name_ok(p + 1, n)) {
      p++;
      continue;
    }
    if (!placeholder_known(ps, p + 1, n)) {
      char keys[1024] = "";
      const cJSON *item;
      size_t u = 0;
      cJSON_ArrayForEach(item, ps) if (u < sizeof keys) u +=
          (size_t)snprintf(keys + u, sizeof keys - u, "%s, ", item->string);
      for (int i = 0; placeholder_extra[i] && u < sizeof keys; i++)
        u += (size_t)snprintf(keys + u, sizeof keys - u, "%s%s", placeholder_extra[i],
                              placeholder_extra[i + 1] ? ", " : "");
      spec_error_set(err, path,
                     "unknown placeholder {%.*s}: param_space has no key '%.*s' "
                     "(a placeholder may name %s; write {{ and }} for literal braces)",
                     (int)n, p + 1, (int)n, p + 1, keys);
      return -EINVAL;
    }
    p = close + 1;
  }
  return 0;
}

static int check_placeholders(const cJSON *t, const cJSON *ps, struct validate_error *err) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *item;
  char p[256];
  int i = 0;
  if (!cJSON_IsString(type) || strcmp(type->valuestring, "command") != 0) return 0;
  cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(t, "argv")) {
    snprintf(p, sizeof p, "trainable.argv[%d]", i++);
    if (check_placeholders_in(item->valuestring, ps, p, err)) return -EINVAL;
  }
  cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(t, "env")) {
    join(p, sizeof p, "trainable.env", item->string);
    if (check_placeholders_in(item->valuestring, ps, p, err)) return -EINVAL;
  }
  item = cJSON_GetObjectItemCaseSensitive(t, "cwd");
  if (cJSON_IsString(item) && check_placeholders_in(item->valuestring, ps, "trainable.cwd", err))
    return -EINVAL;
  return 0;
}

/* The builtin trainer rejects unknown --config keys (exit code 2) only
 * once a trial runs; catch them at submission instead. The keys are the
 * --config contract of docs/protocol.md#ctune-train-command-line. */
static int check_builtin_params(const cJSON *ps, const cJSON *trainable,
                                struct validate_error *err) {
  static const char *const keys[] = {
      "lr",        "momentum",    "weight_decay", "optimizer", "batch_size",
      "l1",        "l2",          "epochs",       "seed",      "val_fraction",
      "drop_last", "train_limit", "model",        "dataset",   NULL};
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(trainable, "type");
  const cJSON *item;
  if (!cJSON_IsString(type) || strcmp(type->valuestring, "builtin") != 0) return 0;
  cJSON_ArrayForEach(item, ps) {
    int ok = 0;
    for (int i = 0; keys[i] && !ok; i++) ok = strcmp(item->string, keys[i]) == 0;
    if (!ok) {
      char p[256];
      join(p, sizeof p, "param_space", item->string);
      spec_error_set(err, p,
                     "the builtin trainer takes no parameter '%.64s' (it takes lr, momentum, "
                     "weight_decay, optimizer, batch_size, l1, l2, epochs, seed, "
                     "val_fraction, drop_last, train_limit, model, dataset)",
                     item->string);
      return -EINVAL;
    }
  }
  return 0;
}

static int validate_config(const cJSON *config, struct experiment_spec *out,
                           struct validate_error *err, int stored);

/* search_alg, points_to_evaluate, warm_start (the searcher's options). The
 * warm_start trials are the server's: refused in a submission, read back from
 * the store. */
static int check_search(const cJSON *config, const cJSON *ps, const struct experiment_spec *out,
                        struct validate_error *err, int stored) {
  static const char *const random_keys[] = {"type", NULL};
  static const char *const ws_keys[] = {"experiment", NULL};
  static const char *const ws_stored_keys[] = {"experiment", "trials", NULL};
  static const char *const wt_keys[] = {"config", "value", "values", NULL};
  const cJSON *sa = cJSON_GetObjectItemCaseSensitive(config, "search_alg");
  const cJSON *pte = cJSON_GetObjectItemCaseSensitive(config, "points_to_evaluate");
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(config, "warm_start");
  int tpe = 0;
  cJSON *empty = NULL;
  int rc;

  if (sa) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(sa, "type");
    if (!cJSON_IsObject(sa))
      return spec_fail_at(err, "", "search_alg", "must be an object like {\"type\": \"tpe\"}");
    if (!type) return spec_fail_at(err, "search_alg", "type", "required (random or tpe)");
    if (!cJSON_IsString(type) ||
        (strcmp(type->valuestring, "random") && strcmp(type->valuestring, "tpe")))
      return spec_fail_at(err, "search_alg", "type", "must be \"random\" or \"tpe\"");
    tpe = !strcmp(type->valuestring, "tpe");
    if (tpe ? tpe_options_check(sa, "search_alg", err)
            : spec_check_keys(sa, "search_alg", "random", random_keys, err))
      return -EINVAL;
    if (tpe && !out->has_metric)
      return spec_fail_at(err, "", "metric",
                          "required with search_alg tpe (and mode): "
                          "the value it learns from");
  }
  if (pte) {
    if (!ps && !(empty = cJSON_CreateObject()))
      return spec_fail_at(err, "", "points_to_evaluate", "out of memory");
    rc = searcher_check_points(pte, ps ? ps : empty, out->num_trials, err);
    cJSON_Delete(empty);
    if (rc) return rc;
  }
  if (ws) {
    int64_t id = 0;
    if (!cJSON_IsObject(ws))
      return spec_fail_at(err, "", "warm_start", "must be an object like {\"experiment\": 3}");
    if (spec_check_keys(ws, "warm_start", "warm_start", stored ? ws_stored_keys : ws_keys, err))
      return -EINVAL;
    if (!tpe)
      return spec_fail_at(err, "", "warm_start",
                          "needs search_alg {\"type\": \"tpe\"}: "
                          "random and grid search do not learn from results");
    rc = spec_get_int(ws, "warm_start", "experiment", 1, VALIDATE_INT_MAX, &id, err);
    if (rc < 0) return -EINVAL;
    if (!rc)
      return spec_fail_at(err, "warm_start", "experiment",
                          "required (the id of an "
                          "experiment whose ended trials seed the searcher)");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(ws, "trials"), *t;
    if (tr && !cJSON_IsArray(tr))
      return spec_fail_at(err, "warm_start", "trials", "must be an array");
    int i = 0;
    cJSON_ArrayForEach(t, tr) {
      char p[64];
      snprintf(p, sizeof p, "warm_start.trials[%d]", i++);
      if (!cJSON_IsObject(t) || spec_check_keys(t, p, "a warm_start trial", wt_keys, err))
        return cJSON_IsObject(t) ? -EINVAL : (spec_error_set(err, p, "must be an object"), -EINVAL);
      const cJSON *c = cJSON_GetObjectItemCaseSensitive(t, "config");
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "value");
      const cJSON *vs = cJSON_GetObjectItemCaseSensitive(t, "values"), *x;
      if (!cJSON_IsObject(c)) return spec_fail_at(err, p, "config", "must be an object");
      if (!cJSON_IsNumber(v) && !cJSON_IsNull(v))
        return spec_fail_at(err, p, "value", "must be a number or null");
      /* Several objectives: every one's value, in metric's order. */
      int bad = vs && (!cJSON_IsArray(vs) || cJSON_GetArraySize(vs) != out->nobjectives);
      cJSON_ArrayForEach(x, vs) bad |= !cJSON_IsNumber(x) && !cJSON_IsNull(x);
      if (bad) {
        char q[80];
        snprintf(q, sizeof q, "%s.values", p);
        spec_error_set(err, q, "must be a list of %d numbers or nulls (one per metric)",
                       out->nobjectives);
        return -EINVAL;
      }
    }
  }
  return 0;
}

int validate_experiment(const cJSON *config, struct experiment_spec *out,
                        struct validate_error *err) {
  return validate_config(config, out, err, 0);
}

int validate_experiment_stored(const cJSON *config, struct experiment_spec *out,
                               struct validate_error *err) {
  return validate_config(config, out, err, 1);
}

/* reference_point: one finite number per objective, in its own units
 * (worse than any value that counts: above for min, below for max), the
 * corner the hypervolume is measured from (hypervolume.h). */
static int check_reference_point(const cJSON *config, struct experiment_spec *out,
                                 struct validate_error *err) {
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(config, "reference_point");
  if (!rp) return 0;
  if (!out->has_metric)
    return spec_fail_at(err, "", "reference_point",
                        "needs metric and mode (one reference value per objective)");
  if (!cJSON_IsArray(rp)) {
    spec_error_set(err, "reference_point", "must be a list of %d number(s), one per metric",
                   out->nobjectives);
    return -EINVAL;
  }
  if (cJSON_GetArraySize(rp) != out->nobjectives) {
    spec_error_set(err, "reference_point",
                   "has %d entries but metric has %d: one reference value per metric",
                   cJSON_GetArraySize(rp), out->nobjectives);
    return -EINVAL;
  }
  int i = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, rp) {
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble)) {
      char p[64];
      snprintf(p, sizeof p, "reference_point[%d]", i);
      spec_error_set(err, p, "must be a finite number (the reference value of '%s')",
                     out->objectives[i]);
      return -EINVAL;
    }
    out->reference_point[i++] = item->valuedouble;
  }
  out->has_reference_point = 1;
  return 0;
}

/* metric and mode: two strings, or two lists of the same length (one entry
 * per objective, at most SPEC_MAX_OBJECTIVES, no metric twice). 1 when
 * given, 0 when neither is, -EINVAL naming the wrong field. */
static int check_objectives(const cJSON *config, struct experiment_spec *out,
                            struct validate_error *err) {
  const cJSON *metric = cJSON_GetObjectItemCaseSensitive(config, "metric");
  const cJSON *mode = cJSON_GetObjectItemCaseSensitive(config, "mode");
  if (!cJSON_IsArray(metric) && !cJSON_IsArray(mode)) { /* one objective, as always */
    int has = spec_get_name(config, "", "metric", 1, out->objectives[0], err);
    if (has < 0) return -EINVAL;
    if (mode) {
      if (!cJSON_IsString(mode) ||
          (strcmp(mode->valuestring, "min") && strcmp(mode->valuestring, "max")))
        return spec_fail_at(err, "", "mode", "must be \"min\" or \"max\"");
      out->modes[0] = strcmp(mode->valuestring, "max") == 0 ? SPEC_MODE_MAX : SPEC_MODE_MIN;
    }
    if (has && !mode)
      return spec_fail_at(err, "", "mode", "required with metric (\"min\" or \"max\")");
    if (mode && !has)
      return spec_fail_at(err, "", "metric", "required with mode (the result key to optimise)");
    if (!has) return 0;
    out->nobjectives = 1;
  } else {
    int n = cJSON_GetArraySize(metric), i = 0;
    const cJSON *item;
    char p[64];
    if (!cJSON_IsArray(metric))
      return spec_fail_at(err, "", "metric",
                          metric ? "must be a list of metric names when mode is a list (one "
                                   "per mode)"
                                 : "required with mode (the result keys to optimise)");
    if (n < 1 || n > SPEC_MAX_OBJECTIVES) {
      char msg[96];
      snprintf(msg, sizeof msg, "must be a metric name or a list of 1 to %d metric names",
               SPEC_MAX_OBJECTIVES);
      return spec_fail_at(err, "", "metric", msg);
    }
    if (!cJSON_IsArray(mode))
      return spec_fail_at(err, "", "mode",
                          "must be a list of \"min\"/\"max\" when metric is a list (one "
                          "per metric)");
    if (cJSON_GetArraySize(mode) != n) {
      char msg[128];
      snprintf(msg, sizeof msg, "has %d entries but metric has %d: one mode per metric",
               cJSON_GetArraySize(mode), n);
      return spec_fail_at(err, "", "mode", msg);
    }
    cJSON_ArrayForEach(item, metric) {
      snprintf(p, sizeof p, "metric[%d]", i);
      if (!cJSON_IsString(item) || !spec_name_ok(item->valuestring, 1)) {
        spec_error_set(err, p, "must be a string of 1-%d characters from A-Z a-z 0-9 _ . - /",
                       SPEC_NAME_MAX);
        return -EINVAL;
      }
      for (int j = 0; j < i; j++)
        if (!strcmp(out->objectives[j], item->valuestring)) {
          spec_error_set(err, p, "'%s' is already metric[%d]: each objective once",
                         item->valuestring, j);
          return -EINVAL;
        }
      snprintf(out->objectives[i], sizeof out->objectives[i], "%s", item->valuestring);
      i++;
    }
    i = 0;
    cJSON_ArrayForEach(item, mode) {
      snprintf(p, sizeof p, "mode[%d]", i);
      if (!cJSON_IsString(item) ||
          (strcmp(item->valuestring, "min") && strcmp(item->valuestring, "max"))) {
        spec_error_set(err, p, "must be \"min\" or \"max\"");
        return -EINVAL;
      }
      out->modes[i++] = strcmp(item->valuestring, "max") == 0 ? SPEC_MODE_MAX : SPEC_MODE_MIN;
    }
    out->nobjectives = n;
  }
  snprintf(out->metric, sizeof out->metric, "%s", out->objectives[0]);
  out->mode = out->modes[0];
  return 1;
}

/* constraints: a list of 1..SPEC_MAX_CONSTRAINTS {"metric", "op", "value"}
 * (docs/scheduling.md#outcome-constraints). op is "<=" or ">=" only: "<"
 * and ">" differ from them only at the bound itself, which a measured
 * float meets by chance, and "==" is met by none; Optuna's constraints
 * (c <= 0) and Ax's outcome constraints take just these two. 0, or -EINVAL
 * naming constraints[i].field. */
static int check_constraints(const cJSON *config, struct experiment_spec *out,
                             struct validate_error *err) {
  static const char *const keys[] = {"metric", "op", "value", NULL};
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(config, "constraints"), *item;
  char p[64];
  int i = 0;
  if (!list) return 0;
  if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1 ||
      cJSON_GetArraySize(list) > SPEC_MAX_CONSTRAINTS) {
    spec_error_set(err, "constraints",
                   "must be a list of 1 to %d objects {\"metric\": NAME, \"op\": \"<=\" or "
                   "\">=\", \"value\": NUMBER}",
                   SPEC_MAX_CONSTRAINTS);
    return -EINVAL;
  }
  if (!out->has_metric)
    return spec_fail_at(err, "", "metric",
                        "required with constraints (and mode): the feasible trials are ranked "
                        "by it");
  cJSON_ArrayForEach(item, list) {
    struct spec_constraint *c = &out->constraints[i];
    snprintf(p, sizeof p, "constraints[%d]", i);
    if (!cJSON_IsObject(item)) {
      spec_error_set(err, p, "must be an object {\"metric\", \"op\", \"value\"}");
      return -EINVAL;
    }
    if (spec_check_keys(item, p, "a constraint", keys, err)) return -EINVAL;
    int has = spec_get_name(item, p, "metric", 1, c->metric, err);
    if (has < 0) return -EINVAL;
    if (!has) return spec_fail_at(err, p, "metric", "required: the result key constrained");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(item, "op");
    if (!op) return spec_fail_at(err, p, "op", "required: \"<=\" or \">=\"");
    if (!cJSON_IsString(op) || (strcmp(op->valuestring, "<=") && strcmp(op->valuestring, ">=")))
      return spec_fail_at(err, p, "op",
                          "must be \"<=\" or \">=\" (\"<\" and \">\" differ from them only "
                          "at the bound, \"==\" is never met by a measured value)");
    c->op = op->valuestring[0] == '<' ? SPEC_CON_LE : SPEC_CON_GE;
    has = spec_get_number(item, p, "value", &c->value, err);
    if (has < 0) return -EINVAL;
    if (!has) return spec_fail_at(err, p, "value", "required: the bound, a finite number");
    i++;
  }
  out->nconstraints = i;
  return 0;
}

static int validate_config(const cJSON *config, struct experiment_spec *out,
                           struct validate_error *err, int stored) {
  static const char *const top_keys[] = {"name",
                                         "metric",
                                         "mode",
                                         "num_samples",
                                         "max_concurrent_trials",
                                         "seed",
                                         "max_failures",
                                         "fail_fast",
                                         "param_space",
                                         "reference_point",
                                         "scheduler",
                                         "resources_per_trial",
                                         "trainable",
                                         "search_alg",
                                         "points_to_evaluate",
                                         "warm_start",
                                         "stop",
                                         "time_budget_s",
                                         "constraints",
                                         NULL};
  const cJSON *ps;
  int64_t seed = 0;
  int rc, has_metric;

  memset(out, 0, sizeof *out);
  if (!cJSON_IsObject(config)) {
    spec_error_set(err, "", "the experiment config must be a JSON object");
    return -EINVAL;
  }
  rc = check_shape(config, "", 0, err);
  if (rc) return rc;
  if (spec_check_keys(config, "", "an experiment", top_keys, err)) return -EINVAL;

  snprintf(out->name, sizeof out->name, "experiment");
  if (spec_get_name(config, "", "name", 0, out->name, err) < 0) return -EINVAL;
  has_metric = check_objectives(config, out, err);
  if (has_metric < 0) return -EINVAL;
  out->has_metric = has_metric;
  if (check_constraints(config, out, err)) return -EINVAL;

  out->num_samples = 1;
  if (spec_get_int(config, "", "num_samples", 1, SPEC_NUM_SAMPLES_MAX, &out->num_samples, err) <
          0 ||
      spec_get_int(config, "", "max_concurrent_trials", 0, 1e9, &out->max_concurrent_trials, err) <
          0 ||
      spec_get_int(config, "", "max_failures", 0, 1000, &out->max_failures, err) < 0)
    return -EINVAL;
  const cJSON *ff = cJSON_GetObjectItemCaseSensitive(config, "fail_fast");
  if (ff && !cJSON_IsBool(ff)) return spec_fail_at(err, "", "fail_fast", "must be true or false");
  out->fail_fast = cJSON_IsTrue(ff);
  rc = spec_get_int(config, "", "seed", 0, VALIDATE_INT_MAX, &seed, err);
  if (rc < 0) return rc;
  out->has_seed = rc;
  out->seed = (uint64_t)seed;
  if (check_reference_point(config, out, err)) return -EINVAL;

  ps = cJSON_GetObjectItemCaseSensitive(config, "param_space");
  if (ps && !cJSON_IsObject(ps))
    return spec_fail_at(err, "", "param_space", "must be an object of parameters");
  if (ps && space_count(ps, out->num_samples, &out->num_trials, err)) return -EINVAL;
  if (!ps) out->num_trials = out->num_samples;

  if (check_scheduler(cJSON_GetObjectItemCaseSensitive(config, "scheduler"), &out->sched, err))
    return -EINVAL;
  if (out->sched.type == SPEC_SCHED_ASHA && !has_metric)
    return spec_fail_at(err, "", "metric", "required with the asha scheduler (and mode)");
  if (out->sched.type == SPEC_SCHED_HYPERBAND && !has_metric)
    return spec_fail_at(err, "", "metric", "required with the hyperband scheduler (and mode)");
  if ((out->sched.type == SPEC_SCHED_PBT || out->sched.type == SPEC_SCHED_MEDIAN) && !has_metric)
    return spec_fail_at(err, "", "metric",
                        out->sched.type == SPEC_SCHED_PBT
                            ? "required with the pbt scheduler (and mode)"
                            : "required with the median_stopping scheduler (and mode)");
  if (out->nobjectives > 1 &&
      (out->sched.type == SPEC_SCHED_PBT || out->sched.type == SPEC_SCHED_MEDIAN))
    return spec_fail_at(err, "scheduler", "type",
                        "takes a single metric: with several objectives use fifo, asha or "
                        "hyperband (they rank by non-dominated sorting; median_stopping and "
                        "pbt stop or exploit trials by one metric)");
  out->sched.num_trials = out->num_trials;
  out->sched.nobjectives = out->nobjectives > 1 ? out->nobjectives : 1;
  for (int j = 0; j < out->nobjectives; j++) out->sched.modes[j] = out->modes[j];
  if (check_resources(cJSON_GetObjectItemCaseSensitive(config, "resources_per_trial"),
                      &out->resources, err) ||
      check_trainable(cJSON_GetObjectItemCaseSensitive(config, "trainable"), err))
    return -EINVAL;

  if (ps && check_builtin_params(ps, cJSON_GetObjectItemCaseSensitive(config, "trainable"), err))
    return -EINVAL;
  if (!stored && check_placeholders(cJSON_GetObjectItemCaseSensitive(config, "trainable"), ps, err))
    return -EINVAL;

  /* pbt: hyperparam_mutations against param_space and the trainable. */
  struct pbt_params pbt_p = {0};
  if (out->sched.type == SPEC_SCHED_PBT && check_pbt(config, ps, &pbt_p, err)) return -EINVAL;
  if (check_search(config, ps, out, err, stored)) return -EINVAL;
  /* Stop rules and the time budget (docs/protocol.md#stop-rules-and-time-budget). */
  const cJSON *stop = cJSON_GetObjectItemCaseSensitive(config, "stop");
  if (stop && stoprule_validate(stop, err)) return -EINVAL;
  const cJSON *tb = cJSON_GetObjectItemCaseSensitive(config, "time_budget_s");
  if (tb && (!cJSON_IsNumber(tb) || !(tb->valuedouble > 0 && tb->valuedouble <= 1e9)))
    return spec_fail_at(err, "", "time_budget_s", "must be a number of seconds > 0 (at most 1e9)");
  out->time_budget_s = tb ? tb->valuedouble : 0;

  out->param_space = ps ? cJSON_Duplicate(ps, 1) : cJSON_CreateObject();
  out->trainable = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(config, "trainable"), 1);
  const cJSON *sa = cJSON_GetObjectItemCaseSensitive(config, "search_alg");
  const cJSON *pte = cJSON_GetObjectItemCaseSensitive(config, "points_to_evaluate");
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(config, "warm_start");
  out->search_alg = sa ? cJSON_Duplicate(sa, 1) : NULL;
  out->points_to_evaluate = pte ? cJSON_Duplicate(pte, 1) : NULL;
  out->warm_start = ws ? cJSON_Duplicate(ws, 1) : NULL;
  out->stop = stop ? cJSON_Duplicate(stop, 1) : NULL;
  if (!out->param_space || !out->trainable || (sa && !out->search_alg) ||
      (pte && !out->points_to_evaluate) || (ws && !out->warm_start) || (stop && !out->stop)) {
    validate_spec_free(out);
    spec_error_set(err, "", "out of memory");
    return -ENOMEM;
  }
  /* A new tpe experiment carries today's defaults explicitly (what the store
   * keeps, so it replays as it ran); a stored config is read as it is: a
   * field it lacks means the default of the time it was written. */
  const cJSON *sat = cJSON_GetObjectItemCaseSensitive(sa, "type");
  if (!stored && cJSON_IsString(sat) && strcmp(sat->valuestring, "tpe") == 0 &&
      tpe_options_fill(out->search_alg, out->nobjectives)) {
    validate_spec_free(out);
    spec_error_set(err, "", "out of memory");
    return -ENOMEM;
  }
  if (out->sched.type == SPEC_SCHED_PBT) {
    pbt_p.mutations = cJSON_Duplicate(pbt_p.mutations, 1);
    if (!pbt_p.mutations) {
      validate_spec_free(out);
      spec_error_set(err, "", "out of memory");
      return -ENOMEM;
    }
    out->sched.pbt = pbt_p;
  }
  return 0;
}

void validate_spec_free(struct experiment_spec *spec) {
  if (!spec) return;
  cJSON_Delete(spec->sched.pbt.mutations);
  spec->sched.pbt.mutations = NULL;
  cJSON_Delete(spec->param_space);
  cJSON_Delete(spec->trainable);
  cJSON_Delete(spec->search_alg);
  cJSON_Delete(spec->points_to_evaluate);
  cJSON_Delete(spec->warm_start);
  cJSON_Delete(spec->stop);
  spec->stop = NULL;
  spec->param_space = NULL;
  spec->trainable = NULL;
  spec->search_alg = spec->points_to_evaluate = spec->warm_start = NULL;
}
