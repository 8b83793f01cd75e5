/* scheduler: the one scheduler interface the daemon calls. Behind it, each
 * type (fifo: run to the end, or to max_t when set; asha, stopping or with
 * promotion; hyperband; pbt; median_stopping) fills its own struct sched_ops
 * (sched_ops.h) in its own file. ARCHITECTURE.md#schedulers is the
 * contract; this header is its C form. */
#ifndef CTUNE_SCHEDULER_H
#define CTUNE_SCHEDULER_H

#include <stdint.h>
#include "spec.h"
#include "asha.h"

struct sched;

/* What the server does with the trial after a result. */
enum sched_action {
  SCHED_CONTINUE = 0,
  SCHED_STOP = 1,    /* the trial ends TERMINATED (stopped_early says why) */
  SCHED_PAUSE = 2,   /* answered stop; PAUSED when its lease ends */
  SCHED_EXPLOIT = 3, /* answered stop; donor's checkpoint + new_config, then PENDING */
};

#define SCHED_REASON_MAX 256 /* a reason sentence: at most 255 bytes + NUL */

/* Another trial a decision ended (HyperBand's halving stops PAUSED trials
 * that did not make the cut): the server (decide_end_others) ends it
 * TERMINATED with the reason, in the decision's transaction. */
struct sched_ended {
  int64_t trial_id;
  char reason[SCHED_REASON_MAX];
};

/* One decision. Every field is set by sched_on_result / sched_on_trial_end
 * (zeroed first: reason "" = none, record NULL = nothing to store). The
 * caller owns record and new_config after the call: sched_outcome_clear. */
struct sched_outcome {
  enum sched_action action;
  int stopped_early;             /* STOP only: ended before max_t by the algorithm */
  char reason[SCHED_REASON_MAX]; /* e.g. "stopped at t=4: 0.41 worse than
                                 cutoff 0.39 of 9 trials at rung 4" */
  /* Stored by the server in the decision's transaction as
   * sched_records(experiment_id, seq, trial_id, record) and replayed at
   * load, in seq order, through sched_restore. */
  cJSON *record;
  /* EXPLOIT only: whose checkpoint to copy, and the trial's new config
   * (the whole config object). */
  int64_t donor_trial_id;
  cJSON *new_config;
  /* asha's stopping variant only: what it recorded, for asha_records
   * (asha.recorded = 0 for every other type). */
  struct asha_outcome asha;
  /* Other trials this decision ended (owned; freed by sched_outcome_clear). */
  struct sched_ended *ended;
  size_t nended;
};

/* Frees record and new_config and zeroes the outcome (safe on a zeroed one). */
void sched_outcome_clear(struct sched_outcome *o);

enum sched_choice_kind {
  SCHED_CHOOSE_NEW = 0,    /* create a new trial (when the plan allows) */
  SCHED_CHOOSE_RESUME = 1, /* resume PAUSED trial_id: it becomes PENDING */
  SCHED_CHOOSE_WAIT = 2,   /* neither now (e.g. HyperBand waits for a rung) */
};

struct sched_choice {
  enum sched_choice_kind kind;
  int64_t trial_id;              /* RESUME */
  char reason[SCHED_REASON_MAX]; /* RESUME: "promoted from rung 2 (top 3 of 9)" */
  cJSON *record;                 /* as in sched_outcome: the caller owns it */
};

/* Whether the server can resume this trial now (it is PAUSED: its lease
 * ended). A candidate that is still pause-pending is skipped. */
typedef int (*sched_resumable_fn)(void *ctx, int64_t trial_id);

int sched_create(const struct sched_params *params, enum spec_mode mode, uint64_t seed,
                 struct sched **out);
void sched_free(struct sched *s);
/* Bytes the scheduler state holds: its struct plus its variant's
 * (asha_mem_bytes, apromo_mem_bytes, hb_mem_bytes, median_mem_bytes,
 * pbt_mem_bytes: pbt's cJSON configs not counted). It grows with what is
 * recorded (and, for hyperband, with the planned trials), not with caps. */
size_t sched_mem_bytes(const struct sched *s);
enum spec_sched_type sched_type(const struct sched *s);

/* The bracket the idx-th trial (creation index) joins: a pure function of
 * (seed, idx); 0 for types without brackets. For display and trials.bracket. */
int sched_bracket_for(const struct sched *s, int64_t idx);
/* A trial was created (or, at load, is not ended): it joins the scheduler.
 * config_json: its config (may be NULL; PBT keeps it to explore from). */
int sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx, const char *config_json);

/* One result. value NULL: the result lacks the metric (asha answers continue
 * and records nothing, as Ray does); a JSON null metric is a pointer to NAN.
 * With several objectives (params' nobjectives > 1) value points to one
 * value per objective, in order, and is NULL when the result lacks one;
 * last_value of sched_on_trial_end is then only a flag (asha keeps each
 * trial's last vector itself).
 * fifo: stop when max_t is set and t >= max_t, else continue. -ENOENT when
 * the trial is not in the scheduler. */
int sched_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                    struct sched_outcome *out);
/* The trial ended (TERMINATED or ERROR). last_value NULL: no last result with
 * the metric. out->action is ignored by the server; record/asha are stored. */
int sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                       const double *last_value, struct sched_outcome *out);
/* At lease time, before a new trial is made. can_new: the plan still allows
 * a new trial. resumable may be NULL (every candidate is resumable). fifo and
 * asha-stopping: always NEW (or WAIT when !can_new). */
int sched_choose(struct sched *s, int can_new, sched_resumable_fn resumable, void *ctx,
                 struct sched_choice *out);
void sched_choice_clear(struct sched_choice *c);

/* Replays one sched_records row (load). fifo/asha-stopping: -EINVAL. */
int sched_restore(struct sched *s, int64_t trial_id, const cJSON *record);
/* The server could not carry out out's EXPLOIT (no stored donor checkpoint)
 * and lets the trial continue: the scheduler forgets that exploit and
 * rewrites out->record so a replay agrees (pbt). 0 for other types. */
int sched_exploit_refused(struct sched *s, int64_t trial_id, struct sched_outcome *out);
/* A PATCH's scheduler.max_t: raises fifo's max_t (the only scheduler whose
 * plan does not depend on it). -EOPNOTSUPP for the others, -EINVAL when
 * lower. */
int sched_raise_max_t(struct sched *s, double max_t);
/* asha-stopping's own records (asha_records); other types: -EINVAL. */
int sched_restore_record(struct sched *s, int64_t trial_id, int bracket, double milestone,
                         double value, int stopped_early);

/* {"type", "time_attr", "max_t", "grace_period", "reduction_factor",
 *  "brackets": [...asha_state_json...]} — fifo: {"type", "time_attr",
 *  "max_t" (null when unset)}. Matches docs/protocol.md#experiment-json. */
int sched_state_json(const struct sched *s, cJSON **out);

#endif
