/* space: search-space domains (choice, uniform, quniform, loguniform,
 * qloguniform, randint, lograndint, qrandint, randn, pow2, grid_search,
 * constants and nested objects) — checking them and sampling trial configs. */
#ifndef CTUNE_SPACE_H
#define CTUNE_SPACE_H

#include <stdint.h>
#include "spec.h"

struct rng;

/* Checks a param_space object. Error paths start with path_prefix
 * (e.g. "param_space"). On success *grid_product holds the number of grid
 * combinations (1 without grids), saturated at INT64_MAX. -EINVAL / -ENOMEM. */
int space_check(const cJSON *param_space, const char *path_prefix, int64_t *grid_product,
                struct validate_error *err);

/* Number of trials: grid product x num_samples. -EINVAL when the space is
 * wrong or the count exceeds SPEC_NUM_SAMPLES_MAX. */
int space_count(const cJSON *param_space, int64_t num_samples, int64_t *count,
                struct validate_error *err);

/* Samples every trial config: a JSON array of objects, in Ray's order (for
 * each of num_samples repeats, every grid combination, the first grid
 * variable by sorted path varying fastest). Trial i draws from its own stream
 * rng_mix(seed, i), so the same (space, num_samples, seed) gives the same
 * configs on any machine. Integer domains give integral JSON numbers.
 * The caller owns *configs_out (cJSON_Delete). err may be NULL. */
int space_generate(const cJSON *param_space, int64_t num_samples, uint64_t seed,
                   cJSON **configs_out, struct validate_error *err);

/* One value of a domain object that space_check accepted (not a
 * grid_search), drawn from r exactly as space_generate draws it: the
 * searchers' random phase (tpe.c) calls this so their draws cannot drift
 * from space_generate's. NULL when out of memory. */
cJSON *space_sample(const cJSON *dom, struct rng *r);

/* Conditional spaces. An option of a choice or a grid_search that is an
 * object holding domains or grids (directly or in nested objects) is a
 * sub-space: only the chosen option's parameters are drawn, and the config
 * holds them in the option's shape (docs/scheduling.md#conditional-spaces).
 * Any other option is a constant. */
int space_option_is_space(const cJSON *option);
/* The values array of a choice or grid node that has a sub-space option;
 * NULL for any other node. */
const cJSON *space_options(const cJSON *node);
/* The index of the first option of opts that config value v comes from
 * (partial: v may lack parameters, as a point does), or -1. An option that
 * is a sub-space matches an object with no key it lacks and its constants
 * equal; a constant option matches an equal value. */
int space_option_index(const cJSON *opts, const cJSON *v, int partial);
/* A config of one option (a sub-space: drawn from r, its grids at a
 * combination drawn from r too; a constant: a copy). NULL: out of memory. */
cJSON *space_build_option(const cJSON *option, struct rng *r);

/* Index range [*klo, *khi] of the multiples of q inside [lower, upper]:
 * the values a q-domain (quniform, qloguniform, qrandint) can take. */
void space_q_range(double lower, double upper, double q, double *klo, double *khi);

#endif
