/* hypervolume: the volume of objective space that a set of points dominates
 * up to a reference point (the S-metric), exact for 1 to SPEC_MAX_OBJECTIVES
 * objectives; the reference point derived from the points when the config
 * gives none; the volume after each point of a sequence; and each point's
 * non-dominated sorting rank. Pure (docs/scheduling.md#several-objectives). */
#ifndef CTUNE_HYPERVOLUME_H
#define CTUNE_HYPERVOLUME_H

#include <stddef.h>
#include "spec.h"

/* Above this many points on a 4-objective front the exact volume (slicing,
 * O(n^3)) is not computed: -E2BIG. */
#define HYPERVOLUME_MAX_4D 400
/* hypervolume_series with 3 or 4 objectives recomputes the volume each time
 * the front changes, about f^(k-1) for a front of f: past this much in all
 * it stops with -E2BIG (a 3-objective front of about 500 trials). */
#define HYPERVOLUME_SERIES_WORK 5e7

/* x dominates y, both minimised (k values each): no worse on any, better on
 * one. Inline: the TPE searcher's front peeling calls it O(n^2) times. */
static inline int hypervolume_dominates(const double *x, const double *y, int k) {
  int better = 0;
  for (int j = 0; j < k; j++) {
    if (x[j] > y[j]) return 0;
    better |= x[j] < y[j];
  }
  return better;
}

/* values: n points of k objectives, row-major, in the objectives' own
 * directions (modes); ref: k values in the same units. *hv = the volume of
 * the union of the boxes [p, ref] over the points p that are all finite and
 * strictly better than ref on every objective (the others add nothing), as
 * pymoo and Optuna compute it after turning max objectives into min. 0,
 * -EINVAL (k outside 1..SPEC_MAX_OBJECTIVES, a ref entry not finite),
 * -E2BIG (see HYPERVOLUME_MAX_4D), -ENOMEM. */
int hypervolume_compute(const double *values, size_t n, int k, const enum spec_mode *modes,
                        const double *ref, double *hv);

/* hypervolume_compute of n points already minimised (every objective a
 * loss, ref too), without its cap on 4-objective sets: the TPE searcher's
 * hypervolume subset selection and weights (tpe_mo.c) need a volume for
 * every below group they are given. 0 with *hv set, -EINVAL (k outside 1..SPEC_MAX_OBJECTIVES, a
 * ref entry not finite), -ENOMEM. */
int hypervolume_min(const double *pts, size_t n, int k, const double *ref, double *hv);

/* The derived reference point: on each objective, the worst value among the
 * all-finite points (the nadir when they are a front) moved 10% of their
 * range further in the worse direction (or 10% of max(|worst|, 1) when
 * every point has the same value), so each extreme point adds volume.
 * -ENOENT when no point is all finite, -EINVAL for a bad k. */
int hypervolume_reference(const double *values, size_t n, int k, const enum spec_mode *modes,
                          double *ref);

/* The hypervolume after each point of the sequence values[order[0]],
 * values[order[1]], ... : hv[i] is the volume of the first i + 1 of them
 * (points that are not all finite add nothing). Two objectives: O(n f) for
 * a front of f. Errors as hypervolume_compute, and -E2BIG past
 * HYPERVOLUME_SERIES_WORK. */
int hypervolume_series(const double *values, const size_t *order, size_t n, int k,
                       const enum spec_mode *modes, const double *ref, double *hv);

/* Non-dominated sorting (NSGA-II's fronts): rank[i] = 1 for the points no
 * other dominates, 2 for those only rank-1 points dominate, and so on; 0 for
 * a point that is not all finite (it has no rank). -EINVAL, -ENOMEM. */
int hypervolume_ranks(const double *values, size_t n, int k, const enum spec_mode *modes,
                      int *rank);

/* The rank hypervolume_ranks gives point i, from i's dominators alone
 * (O(n k + d^2 k) for d of them): 0 when i is not all finite. -EINVAL (a
 * bad k or i >= n), -ENOMEM. */
int hypervolume_rank_of(const double *values, size_t n, int k, const enum spec_mode *modes,
                        size_t i, int *rank);

#endif
