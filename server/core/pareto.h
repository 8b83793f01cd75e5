/* pareto: the non-dominated (Pareto-optimal) points of a set scored on
 * several objectives, each minimised or maximised. */
#ifndef CTUNE_PARETO_H
#define CTUNE_PARETO_H

#include <stddef.h>
#include "spec.h"

/* values: n points of k objectives, row-major (point i's objective j at
 * values[i * k + j]). Sets on_front[i] to 1 when point i is feasible (every
 * objective finite) and no feasible point dominates it (at least as good on
 * every objective and better on one), else 0. Equal points do not dominate
 * each other: duplicates on the front are all kept. *nfront = how many are
 * on it. -EINVAL when k is outside 1..SPEC_MAX_OBJECTIVES, -ENOMEM. */
int pareto_front(const double *values, size_t n, int k, const enum spec_mode *modes,
                 unsigned char *on_front, size_t *nfront);

/* 1 when a dominates b (both of k finite values), else 0. */
int pareto_dominates(const double *a, const double *b, int k, const enum spec_mode *modes);

#endif
