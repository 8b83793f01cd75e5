/* stoprule: the experiment's "stop" dict (Ray Tune's `stop`), checked by the
 * server on every result after the scheduler. Pure: no I/O, no state. */
#ifndef CTUNE_STOPRULE_H
#define CTUNE_STOPRULE_H

#include <stddef.h>
#include <cJSON.h>
#include "spec.h"

#define STOPRULE_MAX_KEYS 32

/* Checks a "stop" value: an object of 1..STOPRULE_MAX_KEYS result keys (names
 * of 1..128 bytes), each a finite number. 0 or -EINVAL with err set (path
 * "stop.KEY"). */
int stoprule_validate(const cJSON *stop, struct validate_error *err);

/* Whether the result reaches one of the thresholds: the experiment's metric
 * (has_metric) by its mode (max: >=, min: <=), any other key with >=; keys
 * the result lacks, nulls and NaN reach nothing; booleans count as 0/1.
 * Returns 1 and writes the reason ("stop rule: accuracy 0.951 >= 0.95") for
 * the first key (in the dict's order) that is reached, 0 when none is. stop
 * NULL: 0. */
int stoprule_reached(const cJSON *stop, int has_metric, const char *metric, enum spec_mode mode,
                     const cJSON *result, char *reason, size_t reasonlen);

#endif
