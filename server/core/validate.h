/* validate: turns a submitted experiment config (cJSON) into an
 * experiment_spec, or names the first wrong field and the rule it broke. */
#ifndef CTUNE_VALIDATE_H
#define CTUNE_VALIDATE_H

#include <stddef.h>

#include "spec.h"

/* Checks every field (unknown fields are rejected at every level) and fills
 * *out with defaults applied. Returns 0; -EINVAL with *err filled when the
 * config is wrong (then *out holds nothing to free); -ENOMEM. err may be NULL.
 * On success the caller frees *out with validate_spec_free. */
int validate_experiment(const cJSON *config, struct experiment_spec *out,
                        struct validate_error *err);
/* The same for a config the store already holds (loading a database): the
 * checks that only guard a new submission (argv/env/cwd placeholders) are
 * skipped, so a database written before them still loads. */
int validate_experiment_stored(const cJSON *config, struct experiment_spec *out,
                               struct validate_error *err);
void validate_spec_free(struct experiment_spec *spec);

#endif
