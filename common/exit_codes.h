/* ctune-train's exit codes: a contract between the trainer, the worker (which
 * passes them on in `fail`) and users. Documented in --help and
 * docs/protocol.md#trainer-output-and-exit-codes. */
#ifndef CTUNE_EXIT_CODES_H
#define CTUNE_EXIT_CODES_H

enum train_exit {
  TRAIN_EXIT_OK = 0,         /* finished, or stopped by SIGTERM after a checkpoint */
  TRAIN_EXIT_INTERNAL = 1,   /* a bug or an unexpected system error */
  TRAIN_EXIT_USAGE = 2,      /* bad flag, config key, type or value */
  TRAIN_EXIT_DATA = 3,       /* data file missing, unreadable or corrupt */
  TRAIN_EXIT_CHECKPOINT = 4, /* checkpoint corrupt, unreadable or unwritable */
  TRAIN_EXIT_DIVERGED = 5,   /* loss became NaN or infinite */
  TRAIN_EXIT_OOM = 6,        /* out of host or GPU memory */
  TRAIN_EXIT_NO_DEVICE = 7,  /* --device cuda without a usable CUDA device */
};

/* Short stable name for an exit code ("diverged"), or NULL if unknown. */
static inline const char *train_exit_name(int code) {
  switch (code) {
  case TRAIN_EXIT_OK:
    return "ok";
  case TRAIN_EXIT_INTERNAL:
    return "internal";
  case TRAIN_EXIT_USAGE:
    return "bad_config";
  case TRAIN_EXIT_DATA:
    return "data_error";
  case TRAIN_EXIT_CHECKPOINT:
    return "checkpoint_error";
  case TRAIN_EXIT_DIVERGED:
    return "diverged";
  case TRAIN_EXIT_OOM:
    return "out_of_memory";
  case TRAIN_EXIT_NO_DEVICE:
    return "no_device";
  default:
    return 0;
  }
}

#endif
