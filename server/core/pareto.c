/* pareto: see pareto.h. Each point is compared with the current front only
 * (the non-dominated set of the points seen so far; dominance is transitive,
 * so a point dominated by a dropped one is dominated by its dropper): O(n x
 * front x k), which is O(n k) for the usual small front. */
#include "pareto.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int pareto_dominates(const double *a, const double *b, int k, const enum spec_mode *modes) {
  int better = 0;
  for (int j = 0; j < k; j++) {
    double x = modes[j] == SPEC_MODE_MAX ? -a[j] : a[j];
    double y = modes[j] == SPEC_MODE_MAX ? -b[j] : b[j];
    if (x > y) return 0;
    if (x < y) better = 1;
  }
  return better;
}

static int pareto_feasible(const double *p, int k) {
  for (int j = 0; j < k; j++)
    if (!isfinite(p[j])) return 0;
  return 1;
}

int pareto_front(const double *values, size_t n, int k, const enum spec_mode *modes,
                 unsigned char *on_front, size_t *nfront) {
  if (k < 1 || k > SPEC_MAX_OBJECTIVES) return -EINVAL;
  size_t *front = malloc((n ? n : 1) * sizeof *front), nf = 0;
  if (!front) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    const double *p = values + i * (size_t)k;
    on_front[i] = 0;
    if (!pareto_feasible(p, k)) continue;
    int dominated = 0;
    size_t keep = 0;
    for (size_t f = 0; f < nf; f++) {
      const double *q = values + front[f] * (size_t)k;
      if (!dominated && pareto_dominates(q, p, k, modes)) dominated = 1;
      /* p dominated means p dominates none of the front (transitivity and
       * the front's own non-domination), so dropping stays exact. */
      if (!dominated && pareto_dominates(p, q, k, modes)) continue;
      front[keep++] = front[f];
    }
    nf = keep;
    if (!dominated) front[nf++] = i;
  }
  for (size_t f = 0; f < nf; f++) on_front[front[f]] = 1;
  free(front);
  *nfront = nf;
  return 0;
}
