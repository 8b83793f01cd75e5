/* best: scores trials under Ray Tune's scopes and picks the best one. */
#include "best.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const scope_names[] = {"last", "avg", "last-5-avg", "last-10-avg", "all"};

int best_scope_parse(const char *s, enum best_scope *out) {
  if (!s || !s[0]) {
    *out = BEST_SCOPE_LAST;
    return 0;
  }
  for (int i = 0; i < 5; i++) {
    if (strcmp(s, scope_names[i]) == 0) {
      *out = (enum best_scope)i;
      return 0;
    }
  }
  return -EINVAL;
}

const char *best_scope_name(enum best_scope scope) {
  return (unsigned)scope < 5 ? scope_names[scope] : "unknown";
}

static double mean_of(const double *v, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += v[i];
  return sum / (double)n;
}

int best_score(const double *values, size_t n, enum best_scope scope, enum spec_mode mode,
               double *score) {
  double s;
  size_t w;
  if (n == 0) return -ENOENT;
  switch (scope) {
  case BEST_SCOPE_LAST:
    s = values[n - 1];
    break;
  case BEST_SCOPE_AVG:
    s = mean_of(values, n);
    break;
  case BEST_SCOPE_LAST_5_AVG:
  case BEST_SCOPE_LAST_10_AVG:
    w = scope == BEST_SCOPE_LAST_5_AVG ? 5 : 10;
    if (w > n) w = n;
    s = mean_of(values + n - w, w);
    break;
  case BEST_SCOPE_ALL: {
    int found = 0;
    s = 0;
    for (size_t i = 0; i < n; i++) {
      if (!isfinite(values[i])) continue;
      if (!found || (mode == SPEC_MODE_MAX ? values[i] > s : values[i] < s)) s = values[i];
      found = 1;
    }
    if (!found) return -ENOENT;
    break;
  }
  default:
    return -EINVAL;
  }
  if (!isfinite(s)) return -ENOENT;
  *score = s;
  return 0;
}

void best_summarize(const double *values, size_t n, double sum[BEST_SUM_N]) {
  static const enum best_scope scopes[BEST_SUM_N] = {BEST_SCOPE_LAST,       BEST_SCOPE_AVG,
                                                     BEST_SCOPE_LAST_5_AVG, BEST_SCOPE_LAST_10_AVG,
                                                     BEST_SCOPE_ALL,        BEST_SCOPE_ALL};
  for (int k = 0; k < BEST_SUM_N; k++) {
    enum spec_mode mode = k == BEST_SUM_MAX ? SPEC_MODE_MAX : SPEC_MODE_MIN;
    if (best_score(values, n, scopes[k], mode, &sum[k])) sum[k] = NAN;
  }
}

int best_score_summary(const double sum[BEST_SUM_N], enum best_scope scope, enum spec_mode mode,
                       double *score) {
  double s;
  switch (scope) {
  case BEST_SCOPE_LAST:
    s = sum[BEST_SUM_LAST];
    break;
  case BEST_SCOPE_AVG:
    s = sum[BEST_SUM_AVG];
    break;
  case BEST_SCOPE_LAST_5_AVG:
    s = sum[BEST_SUM_LAST5];
    break;
  case BEST_SCOPE_LAST_10_AVG:
    s = sum[BEST_SUM_LAST10];
    break;
  case BEST_SCOPE_ALL:
    s = sum[mode == SPEC_MODE_MAX ? BEST_SUM_MAX : BEST_SUM_MIN];
    break;
  default:
    return -EINVAL;
  }
  if (!isfinite(s)) return -ENOENT;
  *score = s;
  return 0;
}

int best_pick(const struct best_series *trials, size_t n, enum best_scope scope,
              enum spec_mode mode, size_t *index, double *score) {
  int found = 0;
  double best = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double s;
    int rc = trials[i].summary ? best_score_summary(trials[i].summary, scope, mode, &s)
                               : best_score(trials[i].values, trials[i].n, scope, mode, &s);
    if (rc == -ENOENT) continue;
    if (rc) return rc;
    /* Strictly better only: on a tie the earlier trial stays. */
    if (!found || (mode == SPEC_MODE_MAX ? s > best : s < best)) {
      best = s;
      at = i;
      found = 1;
    }
  }
  if (!found) return -ENOENT;
  *index = at;
  *score = best;
  return 0;
}
