/* median: the median stopping rule with the semantics of Ray Tune's
 * MedianStoppingRule (docs/scheduling.md#median-stopping). Pure: no I/O,
 * clock or globals. Every result it saw is a record, so a restarted server
 * rebuilds the same state by replaying them. */
#ifndef CTUNE_MEDIAN_H
#define CTUNE_MEDIAN_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>

#include "spec.h"

#define MEDIAN_REASON_MAX 256

/* struct median_params is in spec.h. */

enum median_action { MEDIAN_CONTINUE = 0, MEDIAN_STOP = 1, MEDIAN_PAUSE = 2 };

struct median_outcome {
  enum median_action action;
  char reason[MEDIAN_REASON_MAX];
  int compared;  /* a median was computed */
  double best;   /* the trial's best value so far (metric's sign) */
  double median; /* the median of the others' running averages */
  int others;    /* how many trials went into it */
  cJSON *record; /* the caller owns it; replay with median_restore */
};

struct median;

void median_params_default(struct median_params *p);
/* Checks the scheduler object of type "median_stopping" (unknown fields
 * refused; type and time_attr are the caller's). */
int median_check(const cJSON *sched, const char *path, struct median_params *p,
                 struct validate_error *err);

int median_create(const struct median_params *p, enum spec_mode mode, struct median **out);
void median_free(struct median *m);
/* Bytes the state holds: the trials and the capacity of their results. */
size_t median_mem_bytes(const struct median *m);

/* One result with the metric. -EINVAL: t is NaN. */
int median_on_result(struct median *m, int64_t trial_id, double t, double value,
                     struct median_outcome *out);
/* The trial ended; its last result counts (once) for the others. */
int median_on_trial_end(struct median *m, int64_t trial_id, int has_last, double t, double value,
                        struct median_outcome *out);
/* hard_stop false: a paused trial to resume when no new trial can start
 * (Ray's FIFO takes PENDING before PAUSED); in pause order. resumable may be
 * NULL. Returns 1 with *trial_id and a record to store, 0 when none. */
int median_choose_resume(struct median *m, int (*resumable)(void *, int64_t), void *ctx,
                         int64_t *trial_id, cJSON **record);
int median_restore(struct median *m, int64_t trial_id, const cJSON *record);
void median_outcome_clear(struct median_outcome *o);
/* {"grace_period", "min_samples_required", "min_time_slice", "hard_stop",
 *  "trials": N, "stopped": N} */
int median_state_json(const struct median *m, cJSON **out);

#endif
