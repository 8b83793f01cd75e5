/* asha: the stopping variant of Asynchronous Successive Halving with Ray
 * Tune's semantics (see docs/scheduling.md), plus restore from persisted
 * records so a restarted server decides exactly as one that never stopped. */
#ifndef CTUNE_ASHA_H
#define CTUNE_ASHA_H

#include <stddef.h>
#include <stdint.h>
#include "spec.h"

struct asha;

enum asha_decision { ASHA_CONTINUE = 0, ASHA_STOP = 1 };

enum asha_reason {
  ASHA_REASON_NONE = 0,  /* continue */
  ASHA_REASON_MAX_T,     /* t >= max_t: the trial is done (not early) */
  ASHA_REASON_CUTOFF,    /* below the milestone's cutoff: stopped early */
  ASHA_REASON_NONFINITE, /* NaN/inf at a milestone: stopped early */
  ASHA_REASON_MO_RANK,   /* several objectives: ranked past the top 1/rf */
};

/* What one result (or a trial's end) did. When recorded is 1 the store must
 * persist (trial, bracket, milestone, value, stopped_early) in the same
 * transaction as the result and later replay it with asha_restore_record. */
struct asha_outcome {
  enum asha_decision decision;
  enum asha_reason reason;
  int stopped_early;   /* reason is CUTOFF or NONFINITE (not on trial end) */
  int recorded;        /* a value was recorded at a milestone */
  int bracket;         /* the trial's bracket */
  int milestone_index; /* 0 = lowest milestone of the bracket; -1 if none */
  double milestone;    /* its t value */
  double value;        /* what was recorded: sign-flipped (larger is better);
                          NaN when the metric was NaN/inf/null (persist as
                          NULL, restore as NAN) */
  int has_cutoff;      /* a cutoff was computed for this decision */
  double cutoff;       /* sign-flipped, like value */
  /* Several objectives (MOASHA; value, cutoff and recorded stay NaN/0: the
   * scheduler stores its own record, asha_restore_record_mo replays it). */
  int mo_recorded;                       /* a vector was recorded */
  double mo_values[SPEC_MAX_OBJECTIVES]; /* flipped: smaller is better;
                                            all NaN when one was not finite */
  int mo_ranked;                         /* the rung was ranked (finite) */
  int64_t mo_pos, mo_n, mo_keep;         /* 0-based position of n; keep continue */
  int mo_front, mo_nfronts;              /* 0-based front of nfronts */
};

/* Checks the "scheduler" object of type asha (both variants) at path and
 * fills sp's asha fields with Ray's defaults applied (sp->time_attr holds
 * its default already). 0, or -EINVAL with err naming the field. */
int asha_check(const cJSON *sched, const char *path, struct sched_params *sp,
               struct validate_error *err);

/* params must be type asha and valid (validate_experiment checks). */
int asha_create(const struct sched_params *params, enum spec_mode mode, uint64_t seed,
                struct asha **out);
void asha_free(struct asha *a);
/* Bytes the state holds (its struct, the planned brackets and rungs, the
 * recorded values' and trial slots' capacity, the id map), for tests and
 * sizing: it grows with what is recorded, not with the caps. 0 for NULL. */
size_t asha_mem_bytes(const struct asha *a);

int asha_num_brackets(const struct asha *a);
/* Milestones of bracket s, lowest first: grace_period * rf^(k+s). */
int asha_num_milestones(const struct asha *a, int bracket);
double asha_milestone(const struct asha *a, int bracket, int index);

/* The bracket of the trial_index-th trial (0-based creation order): drawn
 * with probability proportional to e^(milestones in the bracket), as a pure
 * function of (seed, trial_index) so a restart recomputes the same one. */
int asha_bracket_for(const struct asha *a, int64_t trial_index);

/* A trial joins (or, after a retry, rejoins) a bracket. Its earlier records,
 * if any, are kept. -EINVAL for a bad bracket or a bracket that contradicts
 * the trial's restored records; -ENOMEM. */
int asha_add_trial(struct asha *a, int64_t trial_id, int bracket);
/* 1 when the trial is in a bracket (added and not ended). */
int asha_has_trial(const struct asha *a, int64_t trial_id);

/* One result: t is the time attribute, value the metric in its own sign
 * (NaN for JSON null). -ENOENT when the trial is not in a bracket. */
int asha_on_result(struct asha *a, int64_t trial_id, double t, double value,
                   struct asha_outcome *out);

/* asha_on_result for several objectives (params' nobjectives values, each
 * in its own sign; NaN for JSON null): the rung ranks the finite vectors
 * recorded there by rung_mo_order() and stops a trial placed past the top
 * 1/rf (ASHA_REASON_MO_RANK). With one objective it is asha_on_result. */
int asha_on_result_mo(struct asha *a, int64_t trial_id, double t, const double *values,
                      struct asha_outcome *out);

/* The trial ended (completed, stopped or failed). When it reported
 * (has_last), its last result passes through its bracket once more (the
 * decision is ignored; out->recorded says whether something was recorded);
 * then it leaves the bracket. out may be NULL only when has_last is 0.
 * With several objectives value is not read: the last pass takes the vector
 * of the trial's last asha_on_result_mo when it was at t (none after a
 * restart that saw no result of the trial since: nothing is recorded then).
 * -ENOENT when the trial is not in a bracket. */
int asha_on_trial_end(struct asha *a, int64_t trial_id, int has_last, double t, double value,
                      struct asha_outcome *out);

/* Replays one persisted record (in the original order) into the state: the
 * value is the sign-flipped one from asha_outcome (NaN allowed), milestone
 * the t value. Works whether or not the trial is (yet) in a bracket.
 * -EINVAL when the bracket/milestone does not exist or the trial already has
 * a record there; -ENOMEM. */
int asha_restore_record(struct asha *a, int64_t trial_id, int bracket, double milestone,
                        double value, int stopped_early);

/* asha_restore_record for several objectives: values as in
 * asha_outcome.mo_values (NULL or NaN for a non-finite record), replayed in
 * the original order (ties rank by arrival). */
int asha_restore_record_mo(struct asha *a, int64_t trial_id, int bracket, double milestone,
                           const double *values, int stopped_early);

/* The cutoff a new value at (bracket, milestone index) would face, in the
 * metric's own sign; -ENOENT when nothing finite is recorded there. */
int asha_cutoff(const struct asha *a, int bracket, int index, double *cutoff);

/* [{"index", "stopped", "milestones": [{"t", "recorded", "cutoff"}]}] per
 * bracket; cutoff in the metric's own sign or null. "stopped" counts trials
 * stopped early in that bracket. */
int asha_state_json(const struct asha *a, cJSON **out);

#endif
