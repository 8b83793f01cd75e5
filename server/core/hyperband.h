/* hyperband: Ray Tune's HyperBandScheduler (bands of brackets, synchronous
 * successive halving, pausing at a rung until the rung is complete) for
 * trials created on demand, with every state change as a record that
 * hb_restore replays, so a restarted server decides exactly as one that never
 * stopped. Pure: no I/O, clock or globals. Differences from Ray:
 * docs/scheduling.md#hyperband; tests/server/unit/gen_hyperband_vectors.py
 * is the transcription test_hyperband.c checks against. */
#ifndef CTUNE_HYPERBAND_H
#define CTUNE_HYPERBAND_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>
#include "spec.h"

struct hyperband;

enum hb_action { HB_CONTINUE = 0, HB_PAUSE = 1, HB_STOP = 2 };
enum hb_choice_kind { HB_WAIT = 0, HB_NEW = 1, HB_RESUME = 2 };

#define HB_REASON_MAX 256
/* round(log(max_t) / log(reduction_factor)) + 1 at most (validate checks). */
#define HB_MAX_BRACKETS_PER_BAND 32

/* A paused trial a decision stopped (halved out, or its bracket finished). */
struct hb_stopped {
  int64_t trial_id;
  char reason[HB_REASON_MAX];
};

/* What a result or a trial's end did. Free with hb_outcome_clear. */
struct hb_outcome {
  enum hb_action action;      /* for the reporting trial */
  int stopped_early;          /* STOP by a halving, not at max_t */
  char reason[HB_REASON_MAX]; /* "" for a plain continue */
  struct hb_stopped *stopped; /* other (paused) trials now ended */
  size_t nstopped;
  int64_t *ready; /* paused trials now waiting to resume */
  size_t nready;
  cJSON *record; /* NULL or the event to persist (caller owns) */
};

struct hb_choice {
  enum hb_choice_kind kind;
  int64_t trial_id; /* RESUME */
  char reason[HB_REASON_MAX];
  cJSON *record; /* RESUME: the event to persist (caller owns) */
};

/* Checks the "scheduler" object of type hyperband at path and fills sp's
 * hyperband fields with Ray's defaults applied (sp->time_attr holds its
 * default already). 0, or -EINVAL with err naming the field. */
int hb_check(const cJSON *sched, const char *path, struct sched_params *sp,
             struct validate_error *err);

/* max_t >= 1, reduction_factor > 1 (validate checks); num_trials: the
 * experiment's plan (trials beyond it are never created), 1..SPEC cap. */
int hb_create(double max_t, double reduction_factor, enum spec_mode mode, int64_t num_trials,
              struct hyperband **out);
/* Several objectives (k of them, 2..SPEC_MAX_OBJECTIVES, right after
 * hb_create): a halving ranks the bracket's live trials by rung_mo_order()
 * (non-dominated sort, epsilon-net within a front, ties to the lower
 * index), non-finite vectors last, and results take hb_on_result_mo. 0,
 * -EINVAL or -ENOMEM. */
int hb_objectives(struct hyperband *h, int k, const enum spec_mode *modes);
void hb_free(struct hyperband *h);
/* Bytes the state holds: the plan's slots (one per planned trial, laid out
 * at create, as Ray's brackets need them), its brackets and the id map. */
size_t hb_mem_bytes(const struct hyperband *h);
void hb_outcome_clear(struct hb_outcome *out);

/* The bracket (creation order across bands, 0-based) of trial idx: a pure
 * function of idx, as Ray's with every trial added up front. -EINVAL when
 * idx is outside the plan. */
int hb_bracket_of(const struct hyperband *h, int64_t idx);

/* Trial idx now exists with this id (creation, or at load). Idempotent;
 * -EINVAL when idx is outside the plan or bound to another id. */
int hb_add_trial(struct hyperband *h, int64_t trial_id, int64_t idx);

/* One result; value NaN when the metric is missing, null or not finite (it
 * then ranks below every value). -ENOENT: unknown trial. A trial no longer
 * in its bracket is answered STOP and nothing changes. */
int hb_on_result(struct hyperband *h, int64_t trial_id, double t, double value,
                 struct hb_outcome *out);

/* hb_on_result with several objectives: values holds one per objective in
 * its own sign (NaN: missing, null or not finite; then the vector ranks
 * below every finite one). */
int hb_on_result_mo(struct hyperband *h, int64_t trial_id, double t, const double *values,
                    struct hb_outcome *out);

/* The trial ended (completed, errored, stopped by anything). Leaves its
 * bracket; the bracket is processed (others may be stopped or readied).
 * Ending a trial that already left is a no-op. */
int hb_on_trial_end(struct hyperband *h, int64_t trial_id, struct hb_outcome *out);

/* Which trial may start now, in Ray's choose_trial_to_run order: a readied
 * paused trial (RESUME), a trial not created yet (NEW: create the next
 * index; only when can_new), else WAIT. resumable (may be NULL): whether the
 * server can resume that trial now (a pause-pending one is skipped). A
 * RESUME is taken: persist its record. */
typedef int (*hb_resumable_fn)(void *ctx, int64_t trial_id);
int hb_choose(struct hyperband *h, int can_new, hb_resumable_fn resumable, void *ctx,
              struct hb_choice *out);

/* Replays one record from an outcome or choice, in the original order. */
int hb_restore(struct hyperband *h, int64_t trial_id, const cJSON *record);

/* {"s_max_1", "num_stopped", "brackets": [{"index", "band", "s", "n",
 *   "trials", "live", "rung_t", "halvings_left", "completed"}]} */
int hb_state_json(const struct hyperband *h, cJSON **out);

#endif
