/* best: Ray Tune's best-trial scopes (last, avg, last-5-avg, last-10-avg,
 * all) over plain arrays of metric values. */
#ifndef CTUNE_BEST_H
#define CTUNE_BEST_H

#include <stddef.h>
#include <stdint.h>
#include "spec.h"

enum best_scope {
  BEST_SCOPE_LAST = 0,    /* the last value */
  BEST_SCOPE_AVG,         /* mean of all values */
  BEST_SCOPE_LAST_5_AVG,  /* mean of the last 5 (or fewer) */
  BEST_SCOPE_LAST_10_AVG, /* mean of the last 10 (or fewer) */
  BEST_SCOPE_ALL,         /* the best value ever, by mode */
};

/* NULL or "" gives BEST_SCOPE_LAST. -EINVAL for anything else unknown. */
int best_scope_parse(const char *s, enum best_scope *out);
const char *best_scope_name(enum best_scope scope);

/* Scores one trial's values (in report order; NaN for null). last/avg/
 * last-N-avg: a non-finite value inside the window makes the score
 * non-finite; all: non-finite values are ignored. -ENOENT when the trial has
 * no values or its score is not finite. */
int best_score(const double *values, size_t n, enum best_scope scope, enum spec_mode mode,
               double *score);

/* A trial's scores under every scope, kept instead of its values once it
 * has ended (ARCHITECTURE.md#bounded-memory): NaN where best_score says
 * -ENOENT. BEST_SUM_MIN / _MAX are scope all by mode min / max. */
enum {
  BEST_SUM_LAST = 0,
  BEST_SUM_AVG,
  BEST_SUM_LAST5,
  BEST_SUM_LAST10,
  BEST_SUM_MIN,
  BEST_SUM_MAX,
  BEST_SUM_N
};
void best_summarize(const double *values, size_t n, double sum[BEST_SUM_N]);
/* best_score from a summary: the same answer as from the values. */
int best_score_summary(const double sum[BEST_SUM_N], enum best_scope scope, enum spec_mode mode,
                       double *score);

struct best_series {
  int64_t trial_id;
  const double *values;
  size_t n;
  const double *summary; /* non-NULL: scored from it (values unused) */
};

/* Picks the best trial by mode; trials whose score is missing or non-finite
 * are skipped; on a tie the earlier one in the array wins (pass trials in
 * creation order). -ENOENT when none has a score. */
int best_pick(const struct best_series *trials, size_t n, enum best_scope scope,
              enum spec_mode mode, size_t *index, double *score);

#endif
