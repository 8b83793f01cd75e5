/* state_preempt: preemption is not failure (docs/scheduling.md#preemption).
 * A release with reason "preempted" requeues the trial like any release
 * (no failure counted) and says, in its "preempted" event, how much work
 * was lost: the iterations and seconds (its results' time_total_s) its
 * last result was past the checkpoint it resumes from. The experiment
 * counts its preemptions and the lost work. Spot workers (registered with
 * "labels": {"spot": true}) leave the trials that would lose most to a free
 * non-spot worker (state_preempt_defer). */
#ifndef CTUNE_STATE_PREEMPT_H
#define CTUNE_STATE_PREEMPT_H

#include "state.h"

struct store_event_row;

struct preempt_loss {
  double iterations; /* last result's training_iteration - the checkpoint's (>= 0) */
  double seconds;    /* last result's time_total_s - the checkpoint's (>= 0) */
};

/* What t (RUNNING, being released) loses when it resumes from its checkpoint. */
struct preempt_loss state_preempt_loss(struct server *s, const struct srv_experiment *e,
                                       const struct srv_trial *t);
/* Adds one preemption and its loss to the experiment's counts. */
void state_preempt_count(struct srv_experiment *e, const struct preempt_loss *l);
/* A stored "preempted" event (state_load): counted into its experiment. */
int state_preempt_load_row(void *server, const struct store_event_row *r);

/* The placement rule, pure: a spot worker leaves a precious trial (resumed
 * from PAUSED, or the pending trial with the most work behind its
 * checkpoint) to a free non-spot worker when one exists. 1: leave it. */
int state_preempt_rule(int worker_spot, int trial_precious, int nonspot_free);
/* The rule for worker w and t, a PENDING trial of e it is about to lease:
 * precious, and some other worker not spot, not lost, with room for e's
 * resources_per_trial. */
int state_preempt_defer(struct server *s, const struct srv_worker *w,
                        const struct srv_experiment *e, const struct srv_trial *t);

#endif
