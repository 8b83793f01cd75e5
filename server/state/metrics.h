/* metrics: counters and the request latency histogram behind /metrics. */
#ifndef CTUNE_METRICS_H
#define CTUNE_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_NBUCKETS 12

struct metrics {
  atomic_uint_fast64_t requests;
  atomic_uint_fast64_t results_received;
  atomic_uint_fast64_t results_duplicate;
  atomic_uint_fast64_t buckets[METRICS_NBUCKETS + 1]; /* last one: +Inf */
  atomic_uint_fast64_t latency_sum_us;
};

extern const double metrics_bounds_s[METRICS_NBUCKETS];

void metrics_observe_request(struct metrics *m, double seconds);
/* Appends the histogram and counters in Prometheus text format to buf.
 * Returns the length written or -ENOSPC. */
int metrics_format(struct metrics *m, char *buf, size_t n);

#endif
