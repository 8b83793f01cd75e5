/* Flag and JSON config parsing. Both paths go through one table of keys, so
 * a key has the same type, range and error text whichever way it arrives. */
#include "config.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "data.h"

enum key_type { K_FLOAT, K_INT, K_BOOL, K_ENUM, K_PATH, K_JSON };

struct key_def {
  const char *name; /* with underscores; the flag is --name with dashes */
  int type;
  int in_json;                /* accepted inside --config */
  size_t off;                 /* into struct train_config */
  double lo, hi;              /* inclusive range for numbers */
  int lo_open, hi_open;       /* exclusive ends */
  const char *const *choices; /* K_ENUM: NULL-terminated names */
};

static const char *const model_names[] = {"mlp", "cnn", NULL};
static const char *const dataset_names[] = {"fashion-mnist", "mnist", "cifar10", NULL};
static const char *const optim_names[] = {"sgd", "adam", NULL};
static const char *const device_names[] = {"cpu", "cuda", "auto", NULL};

#define OFF(f) offsetof(struct train_config, f)
static const struct key_def keys[] = {
    {"lr", K_FLOAT, 1, OFF(lr), 0, 10, 1, 0, NULL},
    {"momentum", K_FLOAT, 1, OFF(momentum), 0, 1, 0, 1, NULL},
    {"weight_decay", K_FLOAT, 1, OFF(weight_decay), 0, 1, 0, 0, NULL},
    {"optimizer", K_ENUM, 1, OFF(optimizer), 0, 0, 0, 0, optim_names},
    {"batch_size", K_INT, 1, OFF(batch_size), 1, 65536, 0, 0, NULL},
    {"l1", K_INT, 1, OFF(l1), 1, 65536, 0, 0, NULL},
    {"l2", K_INT, 1, OFF(l2), 1, 65536, 0, 0, NULL},
    {"epochs", K_INT, 1, OFF(epochs), 1, 1000000, 0, 0, NULL},
    {"seed", K_INT, 1, OFF(seed), 0, 9007199254740991.0, 0, 0, NULL},
    {"val_fraction", K_FLOAT, 1, OFF(val_fraction), 0, 1, 1, 1, NULL},
    {"drop_last", K_BOOL, 1, OFF(drop_last), 0, 0, 0, 0, NULL},
    {"train_limit", K_INT, 1, OFF(train_limit), 0, 2147483647.0, 0, 0, NULL},
    {"model", K_ENUM, 1, OFF(model), 0, 0, 0, 0, model_names},
    {"dataset", K_ENUM, 1, OFF(dataset), 0, 0, 0, 0, dataset_names},
    {"data_dir", K_PATH, 0, OFF(data_dir), 0, 0, 0, 0, NULL},
    {"checkpoint_dir", K_PATH, 0, OFF(checkpoint_dir), 0, 0, 0, 0, NULL},
    {"threads", K_INT, 0, OFF(threads), 1, 1024, 0, 0, NULL},
    {"test", K_BOOL, 0, OFF(test), 0, 0, 0, 0, NULL},
    {"resume", K_BOOL, 0, OFF(resume), 0, 0, 0, 0, NULL},
    {"device", K_ENUM, 1, OFF(device), 0, 0, 0, 0, device_names},
    /* 0: every device CUDA_VISIBLE_DEVICES shows (the CUDA backend counts) */
    {"gpus", K_INT, 0, OFF(gpus), 0, 64, 0, 0, NULL},
    {"gpu_mem_limit_mb", K_INT, 0, OFF(gpu_mem_limit_mb), 0, 1099511627776.0, 0, 0, NULL},
    {"oom_retry", K_BOOL, 0, OFF(oom_retry), 0, 0, 0, 0, NULL},
    {"version", K_BOOL, 0, OFF(show_version), 0, 0, 0, 0, NULL},
    {"help", K_BOOL, 0, OFF(show_help), 0, 0, 0, 0, NULL},
    {"config", K_JSON, 0, 0, 0, 0, 0, 0, NULL},
};
#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

void config_defaults(struct train_config *c) {
  memset(c, 0, sizeof(*c));
  c->model = MODEL_CNN;
  c->dataset = DATA_FASHION_MNIST;
  c->optimizer = OPTIM_SGD;
  c->lr = 0.01;
  c->momentum = 0.9;
  c->weight_decay = 0.0;
  c->val_fraction = 0.2;
  c->batch_size = 64;
  c->l1 = 120;
  c->l2 = 84;
  c->epochs = 10;
  c->threads = 1;
  c->gpus = 0; /* all visible devices */
  c->seed = 0;
  c->device = DEVICE_CPU;
}

static const struct key_def *find_key(const char *name) {
  for (size_t i = 0; i < N_KEYS; i++)
    if (strcmp(keys[i].name, name) == 0) return &keys[i];
  return NULL;
}

/* "where" is `flag --lr` or `config key "lr"`, for the messages. */
static int check_range(const struct key_def *k, double v, const char *where, char *err,
                       size_t errlen) {
  int bad = !isfinite(v) || (k->lo_open ? v <= k->lo : v < k->lo) ||
            (k->hi_open ? v >= k->hi : v > k->hi);
  if (!bad) return 0;
  snprintf(err, errlen, "%s: %g is out of range, expected %s%g, %g%s", where, v,
           k->lo_open ? "(" : "[", k->lo, k->hi, k->hi_open ? ")" : "]");
  return -EINVAL;
}

static int set_number(struct train_config *c, const struct key_def *k, double v, const char *where,
                      char *err, size_t errlen) {
  if (k->type == K_INT && (!isfinite(v) || v != floor(v))) {
    snprintf(err, errlen, "%s: expected an integer, got %g", where, v);
    return -EINVAL;
  }
  if (check_range(k, v, where, err, errlen)) return -EINVAL;
  char *base = (char *)c + k->off;
  if (k->type == K_FLOAT) {
    *(double *)base = v;
  } else if (k->off == OFF(seed) || k->off == OFF(train_limit) || k->off == OFF(gpu_mem_limit_mb)) {
    *(int64_t *)base = (int64_t)v;
  } else {
    *(int *)base = (int)v;
  }
  return 0;
}

static int set_enum(struct train_config *c, const struct key_def *k, const char *s,
                    const char *where, char *err, size_t errlen) {
  for (int i = 0; k->choices[i]; i++)
    if (strcmp(k->choices[i], s) == 0) {
      *(int *)((char *)c + k->off) = i;
      return 0;
    }
  char list[128] = "";
  for (int i = 0; k->choices[i]; i++) {
    strncat(list, i ? "|" : "", sizeof(list) - strlen(list) - 1);
    strncat(list, k->choices[i], sizeof(list) - strlen(list) - 1);
  }
  snprintf(err, errlen, "%s: unknown value \"%.64s\", expected %s", where, s, list);
  return -EINVAL;
}

int config_apply_json(struct train_config *c, const char *json, char *err, size_t errlen) {
  cJSON *root = cJSON_Parse(json);
  int rc = 0;
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    snprintf(err, errlen, "--config: not valid JSON near \"%.20s\"", at ? at : "");
    return -EINVAL;
  }
  if (!cJSON_IsObject(root)) {
    snprintf(err, errlen, "--config: expected a JSON object");
    rc = -EINVAL;
    goto out;
  }
  /* validate into a copy so a bad config changes nothing */
  struct train_config tmp = *c;
  const cJSON *it;
  cJSON_ArrayForEach(it, root) {
    char where[128];
    snprintf(where, sizeof(where), "config key \"%.64s\"", it->string);
    const struct key_def *k = find_key(it->string);
    if (!k || !k->in_json) {
      snprintf(err, errlen, "%s: unknown key", where);
      rc = -EINVAL;
      goto out;
    }
    if (k->type == K_FLOAT || k->type == K_INT) {
      if (!cJSON_IsNumber(it)) {
        snprintf(err, errlen, "%s: expected a number", where);
        rc = -EINVAL;
        goto out;
      }
      rc = set_number(&tmp, k, it->valuedouble, where, err, errlen);
    } else if (k->type == K_BOOL) {
      if (!cJSON_IsBool(it)) {
        snprintf(err, errlen, "%s: expected true or false", where);
        rc = -EINVAL;
        goto out;
      }
      *(int *)((char *)&tmp + k->off) = cJSON_IsTrue(it) ? 1 : 0;
    } else {
      if (!cJSON_IsString(it)) {
        snprintf(err, errlen, "%s: expected a string", where);
        rc = -EINVAL;
        goto out;
      }
      rc = set_enum(&tmp, k, it->valuestring, where, err, errlen);
    }
    if (rc) goto out;
  }
  *c = tmp;
out:
  cJSON_Delete(root);
  return rc;
}

int config_parse_args(struct train_config *c, int argc, char **argv, char *err, size_t errlen) {
  struct train_config tmp = *c;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    char name[64], where[96];
    const char *inline_val = NULL;
    if (strncmp(a, "--", 2) != 0 || !a[2]) {
      snprintf(err, errlen, "unexpected argument \"%.64s\" (flags start with --)", a);
      return -EINVAL;
    }
    size_t len = strcspn(a + 2, "=");
    if (a[2 + len] == '=') inline_val = a + 3 + len;
    if (len >= sizeof(name)) len = sizeof(name) - 1;
    memcpy(name, a + 2, len);
    name[len] = 0;
    for (char *p = name; *p; p++)
      if (*p == '-') *p = '_';
    snprintf(where, sizeof(where), "flag --%.*s", (int)len, a + 2);
    const struct key_def *k = find_key(name);
    if (!k) {
      snprintf(err, errlen, "%s: unknown flag (see --help)", where);
      return -EINVAL;
    }
    if (k->type == K_BOOL) {
      if (inline_val) {
        snprintf(err, errlen, "%s: takes no value", where);
        return -EINVAL;
      }
      *(int *)((char *)&tmp + k->off) = 1;
      continue;
    }
    const char *v = inline_val;
    if (!v) {
      if (i + 1 >= argc) {
        snprintf(err, errlen, "%s: missing value", where);
        return -EINVAL;
      }
      v = argv[++i];
    }
    int rc = 0;
    if (k->type == K_FLOAT || k->type == K_INT) {
      char *end = NULL;
      errno = 0;
      double d = strtod(v, &end);
      if (!*v || *end || errno) {
        snprintf(err, errlen, "%s: expected a number, got \"%.64s\"", where, v);
        return -EINVAL;
      }
      rc = set_number(&tmp, k, d, where, err, errlen);
    } else if (k->type == K_ENUM) {
      rc = set_enum(&tmp, k, v, where, err, errlen);
    } else if (k->type == K_PATH) {
      if (!*v) {
        snprintf(err, errlen, "%s: empty path", where);
        return -EINVAL;
      }
      *(const char **)((char *)&tmp + k->off) = v;
    } else {
      rc = config_apply_json(&tmp, v, err, errlen);
    }
    if (rc) return rc;
  }
  *c = tmp;
  return 0;
}

int config_validate(const struct train_config *c, char *err, size_t errlen) {
  if (c->resume && !c->checkpoint_dir) {
    snprintf(err, errlen, "flag --resume: needs --checkpoint-dir");
    return -EINVAL;
  }
  if (c->train_limit == 1) {
    snprintf(err, errlen,
             "config key \"train_limit\": 1 image cannot be split into "
             "training and validation; use 0 (all) or >= 2");
    return -EINVAL;
  }
  return 0;
}

const char *config_usage(void) {
  return "usage: ctune-train [--model mlp|cnn] [--dataset "
         "fashion-mnist|mnist|cifar10]\n"
         "  [--data-dir DIR] [--config JSON] [--lr F] [--momentum F]\n"
         "  [--weight-decay F] [--optimizer sgd|adam] [--batch-size N]\n"
         "  [--l1 N] [--l2 N] [--epochs N] [--seed N] [--val-fraction F]\n"
         "  [--drop-last] [--train-limit N] [--threads N] [--test]\n"
         "  [--checkpoint-dir DIR] [--resume] [--device cpu|cuda|auto]\n"
         "  [--gpus N] [--gpu-mem-limit-mb N] [--oom-retry] [--version]\n"
         "--gpus N: CUDA devices to use, 0 (the default) = all that "
         "CUDA_VISIBLE_DEVICES shows.\n"
         "--oom-retry: on GPU out-of-memory (creating the backend or in a "
         "step), halve\n"
         "  the batch and go on, down to 1.\n"
         "Stdout: one JSON object per epoch. Exit codes: 0 ok (or SIGTERM "
         "after a checkpoint),\n"
         "1 internal, 2 bad config, 3 data error, 4 checkpoint error, "
         "5 diverged,\n"
         "6 out of memory, 7 no CUDA device.\n";
}
