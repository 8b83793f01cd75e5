/* The training loop: data, split, backend, epochs, reports, checkpoints,
 * resume and stop. Backend-independent: it drives a struct backend_ops. */
#ifndef CTUNE_TRAINER_TRAIN_H
#define CTUNE_TRAINER_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

#include "config.h"

/* Runs cfg to the end, or until *stop becomes non-zero (then it finishes the
 * current step, saves a checkpoint when it has a directory, and returns 0).
 * Reports go to out, one flushed line per epoch. Returns an exit code of
 * common/exit_codes.h; on failure err holds a one-line message. */
int train_run(const struct train_config *cfg, volatile sig_atomic_t *stop, FILE *out, char *err,
              size_t errlen);

/* Names of the backends compiled in, e.g. "cpu" or "cpu, cuda". */
const char *train_backends_built(void);

#endif
