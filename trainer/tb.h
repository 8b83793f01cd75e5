/* ctune-train --tensorboard-dir DIR: TensorBoard event files while training
 * (common/tfevents.c). Per epoch, at step = training_iteration: the scalars
 * of the epoch's report (loss, accuracy, train_loss, test_accuracy, lr,
 * samples_per_s, time_this_iter_s, gpu_mem_mb when present) and one weight
 * histogram per parameter tensor ("fc1/weight", "fc1/bias", "conv1/weight",
 * ...). A resumed run appends a new file to the same folder. */
#ifndef CTUNE_TRAINER_TB_H
#define CTUNE_TRAINER_TB_H

#include <stddef.h>

#include "backend.h"
#include "report.h"

struct train_tb;

/* Removes "--tensorboard-dir DIR" / "--tensorboard-dir=DIR" from argv (so
 * config_parse_args never sees it) and sets *dir to DIR (NULL when absent;
 * it points into argv). -EINVAL with err set when the value is missing. */
int train_tb_take_flag(int *argc, char **argv, const char **dir, char *err, size_t errlen);
/* The --help lines for the flag. */
const char *train_tb_usage(void);

/* Creates dir and the event file; lr is written as a scalar every epoch. */
int train_tb_open(struct train_tb **out, const char *dir, double lr, char *err, size_t errlen);
/* A report_observer's epoch callback (ctx: the struct train_tb). */
int train_tb_epoch(void *ctx, const struct epoch_report *r, const struct model_layout *L,
                   const float *params);
/* Flushes and frees (NULL is fine); 0 or the first write error. */
int train_tb_close(struct train_tb *tb);

#endif
