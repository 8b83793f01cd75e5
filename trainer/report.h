/* Formats the per-epoch result as one JSON object on one line (pure). */
#ifndef CTUNE_TRAINER_REPORT_H
#define CTUNE_TRAINER_REPORT_H

#include <stddef.h>
#include <stdint.h>

struct epoch_report {
  int64_t training_iteration;
  double loss, accuracy, train_loss;
  double time_this_iter_s, time_total_s, samples_per_s;
  int has_test;
  double test_accuracy;
  int has_gpu_mem;
  double gpu_mem_mb;
  int batch_size_reduced; /* --oom-retry halved the batch */
  int batch_size;
};

/* Writes the line with a trailing newline into buf; returns its length, or
 * -ENOSPC when cap is too small. */
int report_format(const struct epoch_report *r, char *buf, size_t cap);

struct model_layout;
struct backend_ops;
struct backend;

/* One observer of every epoch's report besides stdout (ctune-train
 * --tensorboard-dir): it sees the report and the model's parameters. */
struct report_observer {
  int (*epoch)(void *ctx, const struct epoch_report *r, const struct model_layout *L,
               const float *params);
  void *ctx;
};

/* Sets the observer (NULL: none). */
void report_set_observer(const struct report_observer *o);

/* Called by the training loop after each epoch's line. With an observer, it
 * reads the backend's parameters into params (and the optimiser state into
 * state: get_state fills both) and calls it. It never fails the training: a
 * failing observer is logged once and dropped. */
void report_notify(const struct epoch_report *r, const struct model_layout *L,
                   const struct backend_ops *ops, struct backend *be, float *params, float *state);

#endif
