/* Per-epoch JSON line. %.9g keeps every float digit of a float32 result, so
 * two runs can be compared line by line. */
#include "report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "log.h"

int report_format(const struct epoch_report *r, char *buf, size_t cap) {
  int n = snprintf(buf, cap,
                   "{\"training_iteration\": %lld, \"loss\": %.9g, "
                   "\"accuracy\": %.9g, \"train_loss\": %.9g, "
                   "\"time_this_iter_s\": %.6f, \"time_total_s\": %.6f, "
                   "\"samples_per_s\": %.1f",
                   (long long)r->training_iteration, r->loss, r->accuracy, r->train_loss,
                   r->time_this_iter_s, r->time_total_s, r->samples_per_s);
  if (n < 0 || (size_t)n >= cap) return -ENOSPC;
  if (r->has_test) {
    n += snprintf(buf + n, cap - (size_t)n, ", \"test_accuracy\": %.9g", r->test_accuracy);
    if ((size_t)n >= cap) return -ENOSPC;
  }
  if (r->has_gpu_mem) {
    n += snprintf(buf + n, cap - (size_t)n, ", \"gpu_mem_mb\": %.1f", r->gpu_mem_mb);
    if ((size_t)n >= cap) return -ENOSPC;
  }
  if (r->batch_size_reduced) {
    n +=
        snprintf(buf + n, cap - (size_t)n, ", \"batch_size\": %d, \"oom_retry\": 1", r->batch_size);
    if ((size_t)n >= cap) return -ENOSPC;
  }
  n += snprintf(buf + n, cap - (size_t)n, "}\n");
  if ((size_t)n >= cap) return -ENOSPC;
  return n;
}

static struct report_observer observer;

void report_set_observer(const struct report_observer *o) {
  if (o)
    observer = *o;
  else
    memset(&observer, 0, sizeof(observer));
}

void report_notify(const struct epoch_report *r, const struct model_layout *L,
                   const struct backend_ops *ops, struct backend *be, float *params, float *state) {
  if (!observer.epoch) return;
  int64_t step = 0;
  int rc = ops->get_state(be, params, state, &step);
  if (rc) {
    log_warn("cannot read the model for the epoch observer: %s", strerror(-rc));
    return; /* the next epoch tries again */
  }
  rc = observer.epoch(observer.ctx, r, L, params);
  if (rc) {
    /* a full disk must not end a training run: it goes on without it */
    log_warn("epoch observer failed (%s): no more TensorBoard events", strerror(-rc));
    memset(&observer, 0, sizeof(observer));
  }
}
