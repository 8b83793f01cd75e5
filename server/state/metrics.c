/* metrics: lock-free counters; the scrape formats them as Prometheus text. */
#include "metrics.h"

#include <errno.h>
#include <stdio.h>

const double metrics_bounds_s[METRICS_NBUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                   0.01,   0.025,   0.05,   0.1,   0.5,    1.0};

void metrics_observe_request(struct metrics *m, double seconds) {
  int i = 0;
  while (i < METRICS_NBUCKETS && seconds > metrics_bounds_s[i]) i++;
  atomic_fetch_add(&m->buckets[i], 1);
  atomic_fetch_add(&m->requests, 1);
  atomic_fetch_add(&m->latency_sum_us, (uint64_t)(seconds * 1e6));
}

int metrics_format(struct metrics *m, char *buf, size_t n) {
  size_t off = 0;
  int w;
#define OUT(...)                                                                                   \
  do {                                                                                             \
    w = snprintf(buf + off, n - off, __VA_ARGS__);                                                 \
    if (w < 0 || (size_t)w >= n - off) return -ENOSPC;                                             \
    off += (size_t)w;                                                                              \
  } while (0)
  OUT("# HELP ctune_results_received_total Results acknowledged (stored once each).\n"
      "# TYPE ctune_results_received_total counter\n"
      "ctune_results_received_total %llu\n",
      (unsigned long long)atomic_load(&m->results_received));
  OUT("# HELP ctune_results_duplicate_total Results re-posted with a known time value.\n"
      "# TYPE ctune_results_duplicate_total counter\n"
      "ctune_results_duplicate_total %llu\n",
      (unsigned long long)atomic_load(&m->results_duplicate));
  OUT("# HELP ctune_http_request_duration_seconds Time from request start to reply.\n"
      "# TYPE ctune_http_request_duration_seconds histogram\n");
  uint64_t cum = 0;
  for (int i = 0; i < METRICS_NBUCKETS; i++) {
    cum += atomic_load(&m->buckets[i]);
    OUT("ctune_http_request_duration_seconds_bucket{le=\"%g\"} %llu\n", metrics_bounds_s[i],
        (unsigned long long)cum);
  }
  cum += atomic_load(&m->buckets[METRICS_NBUCKETS]);
  OUT("ctune_http_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
      "ctune_http_request_duration_seconds_sum %.6f\n"
      "ctune_http_request_duration_seconds_count %llu\n",
      (unsigned long long)cum, (double)atomic_load(&m->latency_sum_us) / 1e6,
      (unsigned long long)cum);
#undef OUT
  return (int)off;
}
