/* pbt: Population Based Training with the semantics of Ray Tune's
 * PopulationBasedTraining in its asynchronous mode (docs/scheduling.md,
 * "PBT"). Pure: no I/O, clock or globals. Every random draw of a decision is
 * a pure function of (experiment seed, trial idx, t), so a restarted server
 * that replays the records decides exactly as one that never stopped. */
#ifndef CTUNE_PBT_H
#define CTUNE_PBT_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>

#include "spec.h"

#define PBT_MAX_FACTORS SPEC_PBT_MAX_FACTORS
#define PBT_REASON_MAX 256

/* struct pbt_params is in spec.h. */
struct pbt;

/* What one result did. exploit = 0: continue. The caller owns new_config and
 * record (cJSON_Delete) after the call; both may be NULL. */
struct pbt_outcome {
  int exploit;
  int64_t donor_trial_id;
  cJSON *new_config;           /* the trial's whole new config */
  char reason[PBT_REASON_MAX]; /* "exploited trial 7 at t=6: lr 0.01 → 0.012" */
  cJSON *record;               /* replay with pbt_restore */
};

/* Fills Ray's defaults (mutations NULL). */
void pbt_params_default(struct pbt_params *p);

/* Checks the scheduler object of type "pbt" (path e.g. "scheduler"): its
 * fields (unknown ones refused; custom_explore_fn and synch named as not
 * supported), hyperparam_mutations against param_space (every mutated key
 * must be in it) and, for the builtin trainable, no key that changes the
 * model's shape. Fills *p; p->mutations points into sched (not a copy). */
int pbt_check(const cJSON *sched, const char *path, const cJSON *param_space,
              const cJSON *trainable, struct pbt_params *p, struct validate_error *err);

int pbt_create(const struct pbt_params *p, enum spec_mode mode, uint64_t seed, struct pbt **out);
void pbt_free(struct pbt *b);
/* Bytes the state holds in its own tables (the struct and the trials);
 * the cJSON configs and mutations are not counted. */
size_t pbt_mem_bytes(const struct pbt *b);

/* A trial joins (created, or live at load; again after a retry). config may
 * be NULL when the trial is known already (restored); idx is its creation
 * index (ties in the quantiles keep creation order, as Ray's dict does). */
int pbt_add_trial(struct pbt *b, int64_t trial_id, int64_t idx, const cJSON *config);
/* A result with the metric (value may be NaN/inf: non-finite scores as the
 * worst). -ENOENT: unknown trial. */
int pbt_on_result(struct pbt *b, int64_t trial_id, double t, double value, struct pbt_outcome *out);
/* The trial ended: it leaves the quantiles (Ray's is_finished()). */
int pbt_on_trial_end(struct pbt *b, int64_t trial_id);
/* The server could not carry out the exploit just decided for trial_id
 * (the donor has no stored checkpoint): the trial keeps its config and goes
 * on. Reverts that decision and rewrites its record (in place) to the one of
 * a perturbation point without exploit, so a replay agrees. -ENOENT: no
 * exploit pending for it. */
int pbt_exploit_refused(struct pbt *b, int64_t trial_id, cJSON *record);
/* The same for an exploit whose record was stored already (the server
 * waited for the donor's checkpoint, which never came): reverts it and
 * returns in *record a new record (owned by the caller) whose replay
 * reverts it too. -ENOENT: no exploit of trial_id to undo (a result came
 * since, or a restart lost it). */
int pbt_exploit_undo(struct pbt *b, int64_t trial_id, cJSON **record);
/* Replays one record (in the original order), before or after add_trial. */
int pbt_restore(struct pbt *b, int64_t trial_id, const cJSON *record);
void pbt_outcome_clear(struct pbt_outcome *o);

/* {"perturbation_interval", ..., "perturbations": N,
 *  "trials": [{"trial_id", "score", "last_perturbation_time", ...}]} */
int pbt_state_json(const struct pbt *b, cJSON **out);

/* The explore step alone (Ray's _explore), for tests: new config from
 * config with the draws of stream r. ops may be NULL. */
struct rng;
cJSON *pbt_explore(const cJSON *config, const cJSON *mutations, double resample_probability,
                   const double *factors, int nfactors, struct rng *r);

#endif
