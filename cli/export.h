/* export: an experiment's trials as CSV (one row per trial: config columns,
 * then last-result columns) or as one JSON document. Pure formatting. */
#ifndef CTUNE_CLI_EXPORT_H
#define CTUNE_CLI_EXPORT_H

#include <cJSON.h>

/* trials: the array (or {"trials": [...]}). Header: trial_id, name, status,
 * stopped_early, iteration, config/<key>..., <result key>..., error.
 * *out is malloc'd. 0, -EINVAL (wrong shape), -ENOMEM. */
int export_csv(const cJSON *trials, char **out);

/* {"experiment": ..., "trials": [... each with "results": [...]]} where the
 * results come from {"results": [{"trial_id", "result"}...]} (may be NULL).
 * *out is malloc'd, pretty-printed. 0, -EINVAL, -ENOMEM. */
int export_json(const cJSON *experiment, const cJSON *trials, const cJSON *results, char **out);

/* pareto: GET .../pareto's answer. Header: trial_id, status, one column per
 * objective (its score), config/<key>...; one row per trial on the front,
 * cells neutralised as export_csv's are. 0, -EINVAL, -ENOMEM. */
int export_pareto_csv(const cJSON *pareto, char **out);

#endif
