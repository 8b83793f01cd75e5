/* Per-epoch JSON line. %.9g keeps every float digit of a float32 result, so
 * two runs can be compared line by line. */
#include "report.h"

#include <errno.h>
#include <stdio.h>

int report_format(const struct epoch_report *r, char *buf, size_t cap) {
  int n = snprintf(buf, cap,
                   "{\"training_iteration\": %lld, \"loss\": %.9g, "
                   "\"accuracy\": %.9g, \"train_loss\": %.9g, "
                   "\"time_this_iter_s\": %.6f, \"time_total_s\": %.6f, "
                   "\"samples_per_s\": %.1f",
                   (long long)r->training_iteration, r->loss, r->accuracy,
                   r->train_loss, r->time_this_iter_s, r->time_total_s,
                   r->samples_per_s);
  if (n < 0 || (size_t)n >= cap) return -ENOSPC;
  if (r->has_test) {
    n += snprintf(buf + n, cap - (size_t)n, ", \"test_accuracy\": %.9g",
                  r->test_accuracy);
    if ((size_t)n >= cap) return -ENOSPC;
  }
  if (r->has_gpu_mem) {
    n += snprintf(buf + n, cap - (size_t)n, ", \"gpu_mem_mb\": %.1f",
                  r->gpu_mem_mb);
    if ((size_t)n >= cap) return -ENOSPC;
  }
  if (r->batch_size_reduced) {
    n += snprintf(buf + n, cap - (size_t)n,
                  ", \"batch_size\": %d, \"oom_retry\": 1", r->batch_size);
    if ((size_t)n >= cap) return -ENOSPC;
  }
  n += snprintf(buf + n, cap - (size_t)n, "}\n");
  if ((size_t)n >= cap) return -ENOSPC;
  return n;
}
