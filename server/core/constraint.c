/* constraint: see constraint.h. */
#include "constraint.h"

#include <math.h>

double constraint_violation(const struct spec_constraint *c, double value) {
  if (!isfinite(value)) return INFINITY;
  double past = c->op == SPEC_CON_LE ? value - c->value : c->value - value;
  return past > 0 ? past : 0;
}

double constraint_total(const struct experiment_spec *spec, const double *vals) {
  double sum = 0;
  for (int i = 0; i < spec->nconstraints; i++)
    sum += constraint_violation(&spec->constraints[i], vals[i]);
  return sum;
}

double constraint_of_result(const struct experiment_spec *spec, const cJSON *result) {
  double vals[SPEC_MAX_CONSTRAINTS];
  if (!result) return NAN;
  for (int i = 0; i < spec->nconstraints; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(result, spec->constraints[i].metric);
    vals[i] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  }
  return constraint_total(spec, vals);
}

enum spec_mode constraint_mode(const struct spec_constraint *c) {
  return c->op == SPEC_CON_LE ? SPEC_MODE_MIN : SPEC_MODE_MAX;
}

void constraint_drop_series(struct best_series *ser, size_t n, const double *violation) {
  for (size_t i = 0; i < n; i++)
    if (violation[i] != 0) ser[i] = (struct best_series){ser[i].trial_id, NULL, 0, NULL};
}

void constraint_drop_points(double *values, size_t n, int k, const double *violation) {
  for (size_t i = 0; i < n; i++)
    if (violation[i] != 0)
      for (int j = 0; j < k; j++) values[i * (size_t)k + (size_t)j] = NAN;
}
