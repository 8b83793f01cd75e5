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

#endif
