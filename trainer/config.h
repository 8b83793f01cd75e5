/* ctune-train's configuration: defaults, command-line flags and the --config
 * JSON object (same keys with underscores), validated with errors that name
 * the key. Pure: no I/O. */
#ifndef CTUNE_TRAINER_CONFIG_H
#define CTUNE_TRAINER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum device_kind { DEVICE_CPU = 0, DEVICE_CUDA = 1, DEVICE_AUTO = 2 };

struct train_config {
  int model;                  /* enum model_kind */
  int dataset;                /* enum data_kind */
  const char *data_dir;       /* NULL: the data set's default */
  const char *checkpoint_dir; /* NULL: no checkpoints */
  int optimizer;              /* enum optim_kind */
  double lr, momentum, weight_decay, val_fraction;
  int batch_size, l1, l2, epochs, threads, gpus;
  int64_t seed, train_limit, gpu_mem_limit_mb;
  int drop_last, test, resume, oom_retry, device;
  int show_version, show_help;
};

void config_defaults(struct train_config *c);

/* Applies argv[1..argc) in order over *c. Returns 0, or -EINVAL with a
 * one-line message naming the flag or key in err. Pointers into argv are kept
 * (data_dir, checkpoint_dir), so argv must outlive c. */
int config_parse_args(struct train_config *c, int argc, char **argv, char *err, size_t errlen);

/* Applies one JSON object text (the --config value). */
int config_apply_json(struct train_config *c, const char *json, char *err, size_t errlen);

/* Cross-field checks after everything is applied. */
int config_validate(const struct train_config *c, char *err, size_t errlen);

/* The --help text. */
const char *config_usage(void);

#endif
