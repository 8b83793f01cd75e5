/* Turns a leased trial (its trainable, config and resources) into the argv,
 * environment and working directory of the process to run. Pure. */
#ifndef CTUNE_WORKER_TRAINABLE_H
#define CTUNE_WORKER_TRAINABLE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "isolate.h"

struct trainable_ctx {
  const char *train_bin;    /* ctune-train for builtin trainables */
  const char *trial_dir;    /* checkpoint dir and cwd default */
  int resume;               /* a checkpoint was restored into trial_dir */
  int threads;              /* CPU ids granted (>= 1) */
  const char *cuda_visible; /* "" for trials without a GPU */
  int ngpus;
  long gpu_mem_limit_mb;     /* > 0 only for a fractional GPU share */
  char *const *base_env;     /* the worker's environment (NULL-terminated):
                                only what isolate_env_passes() allows is kept */
  const struct isolate *iso; /* trainables allowed, run-as user; NULL = none */
};

struct trainable_cmd {
  char **argv;     /* NULL-terminated, owned */
  char **env;      /* NULL-terminated, owned */
  char *cwd;       /* owned, never NULL */
  int stdout_pipe; /* "stdout": "pipe": the trial's stdout is a pipe, not a pty */
};

/* Fills cmd from the lease's trial object. On error returns -EINVAL (with a
 * message naming the offending field in err) or -ENOMEM; cmd is then empty. */
int trainable_build(const cJSON *trial, const struct trainable_ctx *ctx, struct trainable_cmd *cmd,
                    char *err, size_t errlen);
void trainable_cmd_free(struct trainable_cmd *cmd);

/* Replaces each {name} in tmpl by config[name] (else extra[name]: the
 * worker's trial_id, trial_name, experiment_id, checkpoint_dir; extra may be
 * NULL); name is an identifier
 * ([A-Za-z_][A-Za-z0-9_.-]*), any other brace is literal, and "{{" and "}}"
 * are literal braces. *out is malloc'ed. -EINVAL with err set for an unknown name. */
int trainable_substitute(const char *tmpl, const cJSON *config, char **out, char *err,
                         size_t errlen);
int trainable_substitute_ex(const char *tmpl, const cJSON *config, const cJSON *extra, char **out,
                            char *err, size_t errlen);
/* A config value as it goes on a command line: strings verbatim, integral
 * numbers without a decimal point, others with full precision. */
char *trainable_value_text(const cJSON *v);

#endif
