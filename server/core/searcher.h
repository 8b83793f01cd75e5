/* searcher: proposes the config of an experiment's next trial
 * (ARCHITECTURE.md#searchers): random (default) and grid give
 * space_generate's configs for the same seed in the same order; tpe is server/core/tpe.h. Pure: no
 * I/O, no clock, no globals. points_to_evaluate take trial indices 0..k-1
 * (partial configs completed by the searcher); warm_start trials (stored in
 * the config at submission) are observed by tpe as finished trials. */
#ifndef CTUNE_SEARCHER_H
#define CTUNE_SEARCHER_H

#include <stdint.h>

#include "spec.h"

struct searcher;

enum searcher_type { SEARCHER_RANDOM = 0, SEARCHER_GRID = 1, SEARCHER_TPE = 2 };

/* Builds the searcher of a validated spec (param_space, num_trials, seed,
 * mode, search_alg, points_to_evaluate, warm_start). 0, -EINVAL (err filled)
 * or -ENOMEM. */
int searcher_create(const struct experiment_spec *spec, struct searcher **out,
                    struct validate_error *err);
void searcher_free(struct searcher *s);
enum searcher_type searcher_type(const struct searcher *s);
/* "random", "grid" or "tpe". */
const char *searcher_type_name(const struct searcher *s);
/* The type a spec gets, without building it (for display). */
enum searcher_type searcher_type_of(const struct experiment_spec *spec);

/* What is known of one trial of the experiment (any order, again with the
 * same id replaces): value is the metric at its last result (NaN: none),
 * finished is 1 once it ended. random/grid ignore it. 0 or -ENOMEM. */
int searcher_observe(struct searcher *s, int64_t trial_id, int64_t idx, const cJSON *config,
                     double value, int finished);
/* searcher_observe with one value per objective (searcher_objectives of
 * them, in the spec's order): what tpe learns from with several. */
int searcher_observe_mo(struct searcher *s, int64_t trial_id, int64_t idx, const cJSON *config,
                        const double *values, int finished);
/* How many objective values searcher_observe_mo takes (1 but for tpe with
 * several objectives). */
int searcher_objectives(const struct searcher *s);

/* The total constraint violation of an observed trial at its last result
 * (constraint.h; after searcher_observe, which forgets it): tpe ranks
 * infeasible trials after the feasible ones; random/grid ignore it. 0. */
int searcher_observe_violation(struct searcher *s, int64_t trial_id, double violation);

/* The config of the idx-th trial (creation index). -ENOENT: idx is past the
 * plan (num_trials). The caller owns *config. */
int searcher_suggest(struct searcher *s, int64_t idx, cJSON **config);

/* How many generated configs it holds now (random/grid: the plan not made
 * yet; 0 before the first suggestion). */
int64_t searcher_configs_held(const struct searcher *s);

/* The configs known in advance, for trials 0..n-1 (the grid and random
 * draws; tpe: its random startup points), as a JSON array the caller owns,
 * and how many of the plan are decided later (by tpe from results). */
int searcher_known(struct searcher *s, cJSON **configs, int64_t *n_decided_later);

/* Checks points_to_evaluate against a param_space: an array of at most
 * max_points objects whose keys (nested objects recurse into nested spaces)
 * name parameters of the space. Paths like "points_to_evaluate[1].model.lr".
 * 0 or -EINVAL. */
int searcher_check_points(const cJSON *points, const cJSON *param_space, int64_t max_points,
                          struct validate_error *err);

#endif
