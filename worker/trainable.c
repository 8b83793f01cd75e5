/* argv/env builder for builtin (ctune-train) and command trainables. */
#include "trainable.h"
#include "gpu.h"
#include "jsonout.h"
#include "result.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable NULL-terminated string vector. */
struct strv {
  char **v;
  size_t n, cap;
};

static int strv_push_owned(struct strv *s, char *str) {
  if (!str) return -ENOMEM;
  if (s->n + 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    char **v = realloc(s->v, cap * sizeof *v);
    if (!v) {
      free(str);
      return -ENOMEM;
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = str;
  s->v[s->n] = NULL;
  return 0;
}

static int strv_push(struct strv *s, const char *str) { return strv_push_owned(s, strdup(str)); }

static int strv_pushf(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int strv_pushf(struct strv *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *str = NULL;
  int r = vasprintf(&str, fmt, ap);
  va_end(ap);
  if (r < 0) return -ENOMEM;
  return strv_push_owned(s, str);
}

static void strv_free(struct strv *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

/* Sets NAME=value, replacing an earlier NAME. */
static int env_set(struct strv *env, const char *name, const char *value) {
  size_t nl = strlen(name);
  char *entry = NULL;
  if (asprintf(&entry, "%s=%s", name, value) < 0) return -ENOMEM;
  for (size_t i = 0; i < env->n; i++) {
    if (!strncmp(env->v[i], name, nl) && env->v[i][nl] == '=') {
      free(env->v[i]);
      env->v[i] = entry;
      return 0;
    }
  }
  return strv_push_owned(env, entry);
}

static int env_has(const struct strv *env, const char *name) {
  size_t nl = strlen(name);
  for (size_t i = 0; i < env->n; i++)
    if (!strncmp(env->v[i], name, nl) && env->v[i][nl] == '=') return 1;
  return 0;
}

char *trainable_value_text(const cJSON *v) {
  char *out = NULL;
  if (cJSON_IsString(v)) return strdup(v->valuestring);
  if (cJSON_IsBool(v)) return strdup(cJSON_IsTrue(v) ? "true" : "false");
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    int r;
    if (isfinite(d) && d == floor(d) && fabs(d) < 1e15)
      r = asprintf(&out, "%lld", (long long)d);
    else
      r = asprintf(&out, "%.17g", d);
    return r < 0 ? NULL : out;
  }
  return jsonout_print(v);
}

static void set_err(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *fmt, ...) {
  if (!err || !len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

static int trainable_is_name(const char *s, size_t n) {
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-')) return 0;
  return 1;
}

int trainable_substitute(const char *tmpl, const cJSON *config, char **out, char *err,
                         size_t errlen) {
  return trainable_substitute_ex(tmpl, config, NULL, out, err, errlen);
}

int trainable_substitute_ex(const char *tmpl, const cJSON *config, const cJSON *extra, char **out,
                            char *err, size_t errlen) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return -ENOMEM;
  int rc = 0;
  for (const char *p = tmpl; *p;) {
    if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
      fputc(p[0], f);
      p += 2;
      continue;
    }
    const char *close = p[0] == '{' ? strchr(p + 1, '}') : NULL;
    if (!close) {
      fputc(*p++, f);
      continue;
    }
    size_t nl = (size_t)(close - p - 1);
    char name[256];
    /* Only {identifier} is a placeholder, so JSON or shell text such as
     * '{"loss": 1}' in a command passes through untouched. */
    if (nl == 0 || nl >= sizeof name || !trainable_is_name(p + 1, nl)) {
      fputc(*p++, f);
      continue;
    }
    memcpy(name, p + 1, nl);
    name[nl] = '\0';
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, name);
    if (!v) v = cJSON_GetObjectItemCaseSensitive(extra, name);
    if (!v) {
      set_err(err, errlen, "unknown placeholder {%s}: the trial config has no key '%s'", name,
              name);
      rc = -EINVAL;
      break;
    }
    char *text = trainable_value_text(v);
    if (!text) {
      rc = -ENOMEM;
      break;
    }
    fputs(text, f);
    free(text);
    p = close + 1;
  }
  if (fclose(f) != 0 && rc == 0) rc = -ENOMEM;
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  return 0;
}

static int build_builtin(const cJSON *trial, const cJSON *tr, const cJSON *config,
                         const struct trainable_ctx *ctx, struct strv *argv, char *err,
                         size_t errlen) {
  static const char *str_keys[][2] = {{"model", "--model"},
                                      {"dataset", "--dataset"},
                                      {"data_dir", "--data-dir"},
                                      {"device", "--device"}};
  int rc = strv_push(argv, ctx->train_bin);
  for (size_t i = 0; rc == 0 && i < sizeof str_keys / sizeof str_keys[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tr, str_keys[i][0]);
    if (!v) continue;
    if (!cJSON_IsString(v)) {
      set_err(err, errlen, "trainable.%s must be a string", str_keys[i][0]);
      return -EINVAL;
    }
    rc = strv_push(argv, str_keys[i][1]);
    if (rc == 0) rc = strv_push(argv, v->valuestring);
  }
  const cJSON *limit = cJSON_GetObjectItemCaseSensitive(tr, "train_limit");
  if (rc == 0 && limit) {
    if (!cJSON_IsNumber(limit) || limit->valuedouble < 1 ||
        limit->valuedouble != floor(limit->valuedouble)) {
      set_err(err, errlen, "trainable.train_limit must be a positive integer");
      return -EINVAL;
    }
    rc = strv_push(argv, "--train-limit");
    if (rc == 0) rc = strv_pushf(argv, "%.0f", limit->valuedouble);
  }
  const cJSON *test = cJSON_GetObjectItemCaseSensitive(tr, "test");
  if (rc == 0 && test && !cJSON_IsBool(test)) {
    set_err(err, errlen, "trainable.test must be true or false");
    return -EINVAL;
  }
  if (rc == 0 && cJSON_IsTrue(test)) rc = strv_push(argv, "--test");
  const cJSON *max_t = cJSON_GetObjectItemCaseSensitive(trial, "max_t");
  if (rc == 0 && cJSON_IsNumber(max_t) && max_t->valuedouble >= 1) {
    rc = strv_push(argv, "--epochs");
    if (rc == 0) rc = strv_pushf(argv, "%.0f", floor(max_t->valuedouble));
  }
  if (rc == 0) rc = strv_push(argv, "--threads");
  if (rc == 0) rc = strv_pushf(argv, "%d", ctx->threads);
  if (rc == 0) rc = strv_push(argv, "--checkpoint-dir");
  if (rc == 0) rc = strv_push(argv, ctx->trial_dir);
  if (rc == 0 && ctx->resume) rc = strv_push(argv, "--resume");
  /* A GPU share trains on it: never a silent CPU run (trainable.device
   * above, or "device" in the sampled config, overrides). */
  if (rc == 0 && ctx->ngpus > 0 && !cJSON_GetObjectItemCaseSensitive(tr, "device")) {
    rc = strv_push(argv, "--device");
    if (rc == 0) rc = strv_push(argv, "cuda");
  }
  if (rc == 0 && ctx->ngpus > 0) {
    rc = strv_push(argv, "--gpus");
    if (rc == 0) rc = strv_pushf(argv, "%d", ctx->ngpus);
  }
  if (rc == 0 && ctx->gpu_mem_limit_mb > 0) {
    rc = strv_push(argv, "--gpu-mem-limit-mb");
    if (rc == 0) rc = strv_pushf(argv, "%ld", ctx->gpu_mem_limit_mb);
  }
  /* <work-dir>/cache: each data set decoded once per host (trainer/datacache.h) */
  if (rc == 0) rc = strv_pushf(argv, "--data-cache=%s/../../cache", ctx->trial_dir);
  /* Last, so the sampled config wins over anything above
   * (docs/protocol.md#ctune-train-command-line). */
  if (rc == 0) rc = strv_push(argv, "--config");
  if (rc == 0) rc = strv_push_owned(argv, jsonout_print(config));
  return rc;
}

static int build_command(const cJSON *tr, const cJSON *config, const cJSON *extra,
                         struct strv *argv, struct strv *env, char **cwd, int *stdout_pipe,
                         char *err, size_t errlen) {
  const cJSON *so = cJSON_GetObjectItemCaseSensitive(tr, "stdout");
  if (so && (!cJSON_IsString(so) ||
             (strcmp(so->valuestring, "pty") && strcmp(so->valuestring, "pipe")))) {
    set_err(err, errlen, "trainable.stdout must be \"pty\" or \"pipe\"");
    return -EINVAL;
  }
  *stdout_pipe = so && !strcmp(so->valuestring, "pipe");
  const cJSON *av = cJSON_GetObjectItemCaseSensitive(tr, "argv");
  if (!cJSON_IsArray(av) || cJSON_GetArraySize(av) < 1) {
    set_err(err, errlen, "trainable.argv must be a non-empty array of strings");
    return -EINVAL;
  }
  int i = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, av) {
    if (!cJSON_IsString(item)) {
      set_err(err, errlen, "trainable.argv[%d] must be a string", i);
      return -EINVAL;
    }
    char *s = NULL;
    char sub[200] = "";
    int rc = trainable_substitute_ex(item->valuestring, config, extra, &s, sub, sizeof sub);
    if (rc == -EINVAL) set_err(err, errlen, "trainable.argv[%d]: %s", i, sub);
    if (rc < 0) return rc;
    if ((rc = strv_push_owned(argv, s)) < 0) return rc;
    i++;
  }
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(tr, "env");
  if (ev && !cJSON_IsObject(ev)) {
    set_err(err, errlen, "trainable.env must be an object of strings");
    return -EINVAL;
  }
  cJSON_ArrayForEach(item, ev) {
    if (!cJSON_IsString(item) && !cJSON_IsNumber(item)) {
      set_err(err, errlen, "trainable.env.%s must be a string or a number", item->string);
      return -EINVAL;
    }
    if (!item->string[0] || strchr(item->string, '=')) {
      set_err(err, errlen, "trainable.env has a bad variable name '%s'", item->string);
      return -EINVAL;
    }
    char *text = NULL;
    int rc = 0;
    if (cJSON_IsString(item)) { /* placeholders too, as in argv */
      char sub[200] = "";
      rc = trainable_substitute_ex(item->valuestring, config, extra, &text, sub, sizeof sub);
      if (rc == -EINVAL) set_err(err, errlen, "trainable.env.%s: %s", item->string, sub);
      if (rc < 0) return rc;
    } else if (!(text = trainable_value_text(item))) {
      return -ENOMEM;
    }
    rc = env_set(env, item->string, text);
    free(text);
    if (rc < 0) return rc;
  }
  const cJSON *cw = cJSON_GetObjectItemCaseSensitive(tr, "cwd");
  if (cw && !cJSON_IsString(cw)) {
    set_err(err, errlen, "trainable.cwd must be a string");
    return -EINVAL;
  }
  if (cw && cw->valuestring[0]) {
    char sub[200] = "";
    int rc = trainable_substitute_ex(cw->valuestring, config, extra, cwd, sub, sizeof sub);
    if (rc == -EINVAL) set_err(err, errlen, "trainable.cwd: %s", sub);
    if (rc < 0) return rc;
  }
  return 0;
}

/* A lease number as an environment value ("" when absent or null). */
static int env_set_num(struct strv *env, const char *name, const cJSON *v) {
  char *text = cJSON_IsNumber(v) ? trainable_value_text(v) : strdup("");
  if (!text) return -ENOMEM;
  int rc = env_set(env, name, text);
  free(text);
  return rc;
}

static int env_set_str(struct strv *env, const char *name, const cJSON *v) {
  return env_set(env, name, cJSON_IsString(v) ? v->valuestring : "");
}

/* A gang trial's member (docs/protocol.md#gang-trials): torchrun's
 * variables, so that an unmodified init_process_group() joins the others.
 * MASTER_ADDR and MASTER_PORT are set once the rendezvous is known (rank 0's
 * worker fills them into its lease before the start). */
static int trainable_env_gang(struct strv *env, const cJSON *trial) {
  static const char *const keys[][2] = {
      {"rank", "RANK"},
      {"world_size", "WORLD_SIZE"},
      {"local_rank", "LOCAL_RANK"},
      {"local_world_size", "LOCAL_WORLD_SIZE"},
      {"node_rank", "NODE_RANK"},
      {"master_port", "MASTER_PORT"},
  };
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(trial, "gang");
  if (!cJSON_IsObject(g)) return 0;
  int rc = 0;
  for (size_t i = 0; !rc && i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(g, keys[i][0]);
    if (cJSON_IsNumber(v)) rc = env_set_num(env, keys[i][1], v) < 0 ? -ENOMEM : 0;
  }
  const cJSON *addr = cJSON_GetObjectItemCaseSensitive(g, "master_addr");
  if (!rc && cJSON_IsString(addr))
    rc = env_set(env, "MASTER_ADDR", addr->valuestring) < 0 ? -ENOMEM : 0;
  return rc;
}

/* The trial's identity and where its numbering and clock start
 * (docs/protocol.md#trial-environment): what ctune.report() and Ray-style scripts read. */
static int trainable_env_trial(struct strv *env, const cJSON *trial, int resume) {
  const cJSON *ck = cJSON_GetObjectItemCaseSensitive(trial, "checkpoint_iteration");
  const cJSON *tt = cJSON_GetObjectItemCaseSensitive(trial, "start_time_total_s");
  cJSON *zero = cJSON_CreateNumber(0);
  if (!zero) return -ENOMEM;
  int rc;
  if ((rc = env_set_str(env, "CTUNE_TRIAL_NAME", cJSON_GetObjectItemCaseSensitive(trial, "name"))) <
          0 ||
      (rc = env_set_num(env, "CTUNE_EXPERIMENT_ID",
                        cJSON_GetObjectItemCaseSensitive(trial, "experiment_id"))) < 0 ||
      (rc = env_set_str(env, "CTUNE_METRIC", cJSON_GetObjectItemCaseSensitive(trial, "metric"))) <
          0 ||
      (rc = env_set_str(env, "CTUNE_MODE", cJSON_GetObjectItemCaseSensitive(trial, "mode"))) < 0)
    goto done;
  /* Several objectives: CTUNE_METRIC/CTUNE_MODE stay the first,
   * CTUNE_METRICS/CTUNE_MODES list all (comma-separated). */
  char *list = NULL;
  if ((rc = result_join_names(cJSON_GetObjectItemCaseSensitive(trial, "metrics"), &list)) < 0)
    goto done;
  rc = list ? env_set(env, "CTUNE_METRICS", list) : 0;
  free(list);
  list = NULL;
  if (rc < 0) goto done;
  if ((rc = result_join_names(cJSON_GetObjectItemCaseSensitive(trial, "modes"), &list)) < 0)
    goto done;
  rc = list ? env_set(env, "CTUNE_MODES", list) : 0;
  free(list);
  list = NULL;
  if (rc < 0) goto done;
  /* Outcome constraints: the metrics each result must carry too. */
  if ((rc = result_join_names(cJSON_GetObjectItemCaseSensitive(trial, "constraint_metrics"),
                              &list)) < 0)
    goto done;
  rc = list ? env_set(env, "CTUNE_CONSTRAINT_METRICS", list) : 0;
  free(list);
  if (rc < 0) goto done;
  const cJSON *ta = cJSON_GetObjectItemCaseSensitive(trial, "time_attr");
  if ((rc = env_set(env, "CTUNE_TIME_ATTR",
                    cJSON_IsString(ta) ? ta->valuestring : "training_iteration")) < 0)
    goto done;
  /* Only a resumed attempt starts past 0: a fresh start numbers from 1. */
  if ((rc = env_set_num(env, "CTUNE_START_ITERATION", resume && cJSON_IsNumber(ck) ? ck : zero)) <
          0 ||
      (rc = env_set_num(env, "CTUNE_START_TIME_TOTAL_S",
                        resume && cJSON_IsNumber(tt) ? tt : zero)) < 0)
    goto done;
  rc = trainable_env_gang(env, trial);
done:
  cJSON_Delete(zero);
  return rc;
}

int trainable_build(const cJSON *trial, const struct trainable_ctx *ctx, struct trainable_cmd *cmd,
                    char *err, size_t errlen) {
  struct strv argv = {0}, env = {0};
  char *cwd = NULL, *config_text = NULL, *num = NULL, *resolved = NULL;
  int rc = -EINVAL;
  memset(cmd, 0, sizeof *cmd);

  const cJSON *config = cJSON_GetObjectItemCaseSensitive(trial, "config");
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(trial, "trainable");
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(trial, "id");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(trial, "name");
  const cJSON *exp_id = cJSON_GetObjectItemCaseSensitive(trial, "experiment_id");
  cJSON *extra = NULL;
  if (!cJSON_IsObject(config)) {
    set_err(err, errlen, "trial.config must be an object");
    goto fail;
  }
  if (!cJSON_IsNumber(id)) {
    set_err(err, errlen, "trial.id must be a number");
    goto fail;
  }
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(tr, "type");
  const char *kind = cJSON_IsString(type) ? type->valuestring : NULL;
  if (!cJSON_IsObject(tr) || !kind || (strcmp(kind, "builtin") && strcmp(kind, "command"))) {
    set_err(err, errlen, "trial.trainable.type must be \"builtin\" or \"command\"");
    goto fail;
  }

  /* Refused kinds fail before anything is built: the message names the flag. */
  if ((rc = isolate_check(ctx->iso, kind, NULL, NULL, NULL, &resolved, err, errlen)) < 0) {
    rc = -EINVAL;
    goto fail;
  }

  /* Environment: the worker's base (a short list, isolate.h: never its
   * credentials) < thread counts < the trainable's env < what the worker
   * enforces (GPU visibility and the CTUNE_* protocol). */
  for (char *const *e = ctx->base_env; e && *e; e++)
    if (isolate_env_passes(ctx->iso, *e) && (rc = strv_push(&env, *e)) < 0) goto fail;
  if (!env_has(&env, "PATH") && (rc = env_set(&env, "PATH", ISOLATE_DEFAULT_PATH)) < 0) goto fail;
  if (ctx->iso && ctx->iso->run_as &&
      ((rc = env_set(&env, "HOME", ctx->iso->home)) < 0 ||
       (rc = env_set(&env, "USER", ctx->iso->user)) < 0 ||
       (rc = env_set(&env, "LOGNAME", ctx->iso->user)) < 0))
    goto fail;
  if (asprintf(&num, "%d", ctx->threads) < 0) {
    num = NULL;
    rc = -ENOMEM;
    goto fail;
  }
  if ((rc = env_set(&env, "OMP_NUM_THREADS", num)) < 0) goto fail;
  if ((rc = env_set(&env, "OPENBLAS_NUM_THREADS", num)) < 0) goto fail;

  /* Python writes stdout as it prints (a pty alone would make it line
   * buffered; this also covers a trial that says "stdout": "pipe"). Before
   * the trainable's env, so a trainable may turn it off. */
  if ((rc = env_set(&env, "PYTHONUNBUFFERED", "1")) < 0) goto fail;

  if (!strcmp(kind, "builtin")) {
    rc = build_builtin(trial, tr, config, ctx, &argv, err, errlen);
  } else {
    /* The worker's own placeholders, after the config's keys. */
    if (!(extra = cJSON_CreateObject()) ||
        !cJSON_AddNumberToObject(extra, "trial_id", id->valuedouble) ||
        !cJSON_AddStringToObject(extra, "checkpoint_dir", ctx->trial_dir) ||
        (cJSON_IsString(name) &&
         !cJSON_AddStringToObject(extra, "trial_name", name->valuestring)) ||
        (cJSON_IsNumber(exp_id) &&
         !cJSON_AddNumberToObject(extra, "experiment_id", exp_id->valuedouble))) {
      rc = -ENOMEM;
      goto fail;
    }
    rc = build_command(tr, config, extra, &argv, &env, &cwd, &cmd->stdout_pipe, err, errlen);
  }
  if (rc < 0) goto fail;

  config_text = jsonout_print(config);
  if (!config_text) {
    rc = -ENOMEM;
    goto fail;
  }
  free(num);
  if (asprintf(&num, "%.0f", id->valuedouble) < 0) {
    num = NULL;
    rc = -ENOMEM;
    goto fail;
  }
  if ((rc = env_set(&env, "CUDA_VISIBLE_DEVICES", ctx->cuda_visible)) < 0 ||
      (rc = env_set(&env, "CTUNE_CONFIG", config_text)) < 0 ||
      (rc = env_set(&env, "CTUNE_TRIAL_ID", num)) < 0 ||
      (rc = env_set(&env, "CTUNE_CHECKPOINT_DIR", ctx->trial_dir)) < 0 ||
      (rc = env_set(&env, "CTUNE_RESUME", ctx->resume ? "1" : "0")) < 0 ||
      (rc = trainable_env_trial(&env, trial, ctx->resume)) < 0)
    goto fail;
  /* The worker numbers GPUs as NVML does, in PCI bus order; CUDA's own
   * default (fastest first) differs on a host with mixed GPUs. */
  if (ctx->cuda_visible && *ctx->cuda_visible &&
      (rc = env_set(&env, "CUDA_DEVICE_ORDER", "PCI_BUS_ID")) < 0)
    goto fail;
  if (ctx->gpu_mem_limit_mb > 0) {
    free(num);
    if (asprintf(&num, "%ld", ctx->gpu_mem_limit_mb) < 0) {
      num = NULL;
      rc = -ENOMEM;
      goto fail;
    }
    if ((rc = env_set(&env, "CTUNE_GPU_MEM_LIMIT_MB", num)) < 0) goto fail;
  }
  if (ctx->cuda_visible && *ctx->cuda_visible && gpu_mps_pipe_dir()) { /* --mps */
    char lim[64];
    if ((rc = env_set(&env, "CUDA_MPS_PIPE_DIRECTORY", gpu_mps_pipe_dir())) < 0 ||
        (rc = env_set(&env, "CUDA_MPS_LOG_DIRECTORY", gpu_mps_log_dir())) < 0 ||
        (gpu_mps_mem_limit(ctx->gpu_mem_limit_mb, lim, sizeof lim) == 1 &&
         (rc = env_set(&env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", lim)) < 0))
      goto fail;
  }
  if (!cwd && !(cwd = strdup(ctx->trial_dir))) {
    rc = -ENOMEM;
    goto fail;
  }
  /* --allow-command: the program as the trial's PATH finds it must be one of
   * the listed ones, and exactly that file is what runs. */
  if ((rc = isolate_check(ctx->iso, kind, argv.v, env.v, cwd, &resolved, err, errlen)) < 0) {
    if (rc == -EPERM) rc = -EINVAL;
    goto fail;
  }
  if (resolved) {
    free(argv.v[0]);
    argv.v[0] = resolved;
  }

  cmd->argv = argv.v;
  cmd->env = env.v;
  cmd->cwd = cwd;
  free(config_text);
  free(num);
  cJSON_Delete(extra);
  return 0;
fail:
  strv_free(&argv);
  strv_free(&env);
  free(cwd);
  free(config_text);
  free(num);
  cJSON_Delete(extra);
  memset(cmd, 0, sizeof *cmd);
  return rc;
}

void trainable_cmd_free(struct trainable_cmd *cmd) {
  if (cmd->argv)
    for (char **p = cmd->argv; *p; p++) free(*p);
  if (cmd->env)
    for (char **p = cmd->env; *p; p++) free(*p);
  free(cmd->argv);
  free(cmd->env);
  free(cmd->cwd);
  memset(cmd, 0, sizeof *cmd);
}
