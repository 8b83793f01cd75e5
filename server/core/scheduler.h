/* scheduler: the one scheduler interface the daemon calls; dispatches to fifo
 * (run to the end, or to max_t when set) or asha. */
#ifndef CTUNE_SCHEDULER_H
#define CTUNE_SCHEDULER_H

#include <stdint.h>
#include "spec.h"
#include "asha.h"

struct sched;

/* Outcomes are struct asha_outcome for both types; fifo never records
 * (recorded = 0, bracket = 0, milestone_index = -1). */

int sched_create(const struct sched_params *params, enum spec_mode mode,
		 uint64_t seed, struct sched **out);
void sched_free(struct sched *s);
enum spec_sched_type sched_type(const struct sched *s);

/* fifo: always 0. */
int sched_bracket_for(const struct sched *s, int64_t trial_index);
int sched_add_trial(struct sched *s, int64_t trial_id, int bracket);

/* value NULL: the result lacks the metric. asha then answers continue and
 * records nothing (as Ray does); fifo does not look at the value. A JSON
 * null metric is passed as a pointer to NAN. fifo: stop when max_t is set
 * and t >= max_t (reason MAX_T), else continue. */
int sched_on_result(struct sched *s, int64_t trial_id, double t,
		    const double *value, struct asha_outcome *out);
/* last_value NULL: no last result with the metric (nothing passes through). */
int sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
		       const double *last_value, struct asha_outcome *out);
/* asha only; fifo answers -EINVAL (it never records). */
int sched_restore_record(struct sched *s, int64_t trial_id, int bracket,
			 double milestone, double value, int stopped_early);

/* {"type", "time_attr", "max_t", "grace_period", "reduction_factor",
 *  "brackets": [...asha_state_json...]} — fifo: {"type", "time_attr",
 *  "max_t" (null when unset)}. Matches HACKING.md's experiment shape. */
int sched_state_json(const struct sched *s, cJSON **out);

#endif
