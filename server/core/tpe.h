/* tpe: a Tree-structured Parzen Estimator searcher over a param_space
 * (Optuna's TPESampler as the reference; see docs/scheduling.md#tpe).
 * Pure: no I/O, no clock, no global state. The caller feeds it every trial
 * it knows (tpe_observe) and asks for the config of the next trial
 * (tpe_suggest); the answer depends only on (param_space, options, mode,
 * seed, index, fixed keys, the set of observations), never on the order in
 * which observations arrived, so replaying the database rebuilds it. */
#ifndef CTUNE_TPE_H
#define CTUNE_TPE_H

#include <stdint.h>

#include "spec.h"

struct tpe;

enum tpe_trial_state { TPE_RUNNING = 0, TPE_FINISHED = 1 };

/* Checks a "search_alg" object of type "tpe" (fields, types, ranges;
 * unknown fields refused). Error paths start with path ("search_alg").
 * 0 or -EINVAL with err filled. err may be NULL. */
int tpe_options_check(const cJSON *search_alg, const char *path, struct validate_error *err);

/* Writes today's default of every option search_alg (a checked "tpe"
 * object) lacks into it, for an experiment of nobj objectives, so the
 * config stored for a new experiment says what runs: tpe_create reads an
 * absent field as the ORIGINAL default (one objective: multivariate and
 * constant_liar false), which a config stored before the defaults followed
 * Optuna 5.0 (multivariate and constant_liar true) relies on to replay as
 * it ran. Several objectives: gamma_max uncapped, multivariate and
 * constant_liar true, absent or written.
 * 0, -EINVAL (not an object) or -ENOMEM (search_alg may then hold some of
 * the fields). */
int tpe_options_fill(cJSON *search_alg, int nobj);

/* Builds a searcher. param_space as space_check accepts it (checked again
 * here, paths under "param_space"); search_alg may be NULL. An absent
 * option takes its original default (see tpe_options_fill).
 * The module keeps its own copies. 0, -EINVAL (err filled) or -ENOMEM. */
int tpe_create(const cJSON *param_space, const cJSON *search_alg, enum spec_mode mode,
               uint64_t seed, struct tpe **out, struct validate_error *err);
/* The same for nobj objectives (1..SPEC_MAX_OBJECTIVES), modes[k] the
 * direction of objective k: finished trials split as Optuna's MOTPE does
 * (non-dominated rank, then hypervolume; docs/scheduling.md#tpe). */
int tpe_create_mo(const cJSON *param_space, const cJSON *search_alg, const enum spec_mode *modes,
                  int nobj, uint64_t seed, struct tpe **out, struct validate_error *err);
void tpe_free(struct tpe *t);

/* Records (or replaces: same trial_id) what is known of one trial: its
 * config (the full config as suggested, or any config of the same space:
 * values outside the space are ignored for that parameter), its value (the
 * metric at the trial's last reported result, NaN when none) and state.
 * A finished trial with a NaN value (failed, no result) is not used; a
 * running trial is used only with constant_liar (as a bad result).
 * 0 or -ENOMEM (the searcher is unchanged then). */
int tpe_observe(struct tpe *t, int64_t trial_id, const cJSON *config, double value,
                enum tpe_trial_state state);
/* tpe_observe for any number of objectives: values holds one per objective
 * (NaN: unknown; a finished trial is used only when all are finite).
 * tpe_observe answers -EINVAL on a searcher of several objectives. */
int tpe_observe_mo(struct tpe *t, int64_t trial_id, const cJSON *config, const double *values,
                   enum tpe_trial_state state);

/* Sets the total constraint violation (constraint.h; 0 or less: feasible)
 * of an observed trial; tpe_observe resets it to 0. The split ranks the
 * feasible finished trials first by value, then the infeasible ones by
 * violation (Optuna's constrained TPE). 0, or -ENOENT for an unknown id. */
int tpe_set_violation(struct tpe *t, int64_t trial_id, double violation);

/* The config of the index-th trial (0-based, the same numbering as
 * space_generate). fixed (NULL or an object shaped like a config) holds
 * values decided by the caller: grid_search values, points_to_evaluate;
 * they are copied and only the other parameters are sampled. While fewer
 * than n_startup_trials finished trials have a value, the config is random
 * and identical to space_generate's trial `index` for the same seed (grid
 * values fixed as space_generate would). *config_out is the caller's
 * (cJSON_Delete). 0, -EINVAL (fixed names a key the space does not have)
 * or -ENOMEM. */
int tpe_suggest(const struct tpe *t, int64_t index, const cJSON *fixed, cJSON **config_out);

/* Whether the next suggestion is still random (fewer finished trials with
 * a value than n_startup_trials): what `ctune sample` can list ahead. */
int tpe_in_startup(const struct tpe *t);
/* n_startup_trials after defaults. */
int64_t tpe_n_startup(const struct tpe *t);

#endif
