/* trace: per-request timestamps for the ingestion benchmark, compiled in only
 * with cmake -DCTUNE_TRACE=ON (every other build: empty inline functions).
 * Records go to a preallocated array and are written to $CTUNE_TRACE_FILE as
 * text when the process exits (bench/server/trace_tail.py reads them). */
#ifndef CTUNE_TRACE_H
#define CTUNE_TRACE_H

#include <stdint.h>

enum trace_kind {
  TRACE_REQ = 1,   /* a request with a ticket: see http.c */
  TRACE_BATCH = 2, /* one batch of the commit thread: see commit.c */
  TRACE_CKPT = 3,  /* one pass of the main loop: lock held, checkpoint */
};
#define TRACE_NV 12

#ifdef CTUNE_TRACE
/* Monotonic nanoseconds. */
uint64_t trace_ns(void);
/* One record of n (<= TRACE_NV) values; dropped when the array is full. */
void trace_put(enum trace_kind kind, const uint64_t *v, int n);
#else
static inline uint64_t trace_ns(void) { return 0; }
static inline void trace_put(enum trace_kind kind, const uint64_t *v, int n) {
  (void)kind;
  (void)v;
  (void)n;
}
#endif

#endif
