/* constraint: outcome constraints (docs/scheduling.md#outcome-constraints).
 * A trial is feasible when every constraint's metric meets its bound; its
 * violation is the sum over constraints of how far past the bound it is
 * (Optuna's infeasible-trial score), +inf when a constrained value is
 * missing or not finite. Pure. */
#ifndef CTUNE_CONSTRAINT_H
#define CTUNE_CONSTRAINT_H

#include <stddef.h>

#include "best.h"
#include "spec.h"

/* How far value is past c's bound: 0 when it meets it, +inf when value is
 * not finite (a missing or null value counts as violated). */
double constraint_violation(const struct spec_constraint *c, double value);

/* Sum of constraint_violation over spec's constraints, vals[i] the value of
 * constraints[i].metric. 0 without constraints. */
double constraint_total(const struct experiment_spec *spec, const double *vals);

/* constraint_total of one result object (flat: metric names as keys; a key
 * absent or not a number counts as NaN). NaN when result is NULL (no result
 * yet: neither feasible nor infeasible); 0 without constraints. */
double constraint_of_result(const struct experiment_spec *spec, const cJSON *result);

/* The mode under which the best-trial scope "all" scores a constrained
 * metric: its most favourable value (min for <=, max for >=). */
enum spec_mode constraint_mode(const struct spec_constraint *c);

/* Leaves out of a best_pick every trial i with violation[i] not 0 (an
 * infeasible trial, or one whose feasibility is unknown). */
void constraint_drop_series(struct best_series *ser, size_t n, const double *violation);

/* Sets every objective of point i (k values, row-major as pareto_front
 * takes them) to NaN when violation[i] is not 0, so that pareto_front
 * leaves it off the front. */
void constraint_drop_points(double *values, size_t n, int k, const double *violation);

#endif
