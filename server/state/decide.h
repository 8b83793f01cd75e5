/* decide: applying scheduler decisions
 * (ARCHITECTURE.md#decisions-pause-and-exploit): a result's outcome (stop,
 * pause, exploit) plus the stop rules and the time budget, the end of a
 * lease with a decision due, resume, and the storage of reasons,
 * trial_events and sched_records in the decision's transaction. All callers
 * hold s->lock. */
#ifndef CTUNE_STATE_DECIDE_H
#define CTUNE_STATE_DECIDE_H

#include "state.h"

/* The reason of a trial paused by its experiment's pause (control.c). */
extern const char *const control_pause_reason;

/* Before the scheduler sees a new result of a RUNNING trial: the stop rules
 * and the time budget, as Ray's controller asks its stopper first. Returns 1
 * when they stop the trial (out is STOP with the reason, *event_kind
 * "stop_rule" or "time_budget"): the scheduler is not asked about this
 * result, so a trial that reached `stop` is never exploited or paused. 0:
 * the scheduler decides. */
int decide_stopper(const struct srv_experiment *e, const cJSON *result, struct sched_outcome *out,
                   const char **event_kind);

/* PBT ranked this result (the outcome has a record): notes its iteration
 * (training_iteration, else tv) as t->rank_iter and in the record ("iter",
 * read back by decide_load_record), the checkpoint a bottom trial that
 * clones t must get. 0 or -ENOMEM. */
int decide_note_rank(const struct srv_experiment *e, struct srv_trial *t, const cJSON *result,
                     double tv, struct sched_outcome *out);

/* After the scheduler answered a new result of RUNNING trial t (tv: its time
 * value): a paused experiment pauses a trial the scheduler let continue
 * (and, in a test build, the decision hook). Returns 0. */
int decide_override(struct server *s, struct srv_experiment *e, struct srv_trial *t,
                    const cJSON *result, double tv, struct sched_outcome *out,
                    const char **event_kind);

/* Sets t->reason to `reason` (NULL/"" keep it) and queues a trial_events
 * row (kind, reason, data JSON or NULL) and, when record is set, a
 * sched_records row — all into the caller's open group. */
int decide_note(struct server *s, struct srv_trial *t, const char *kind, const char *reason,
                const cJSON *data, const cJSON *record, uint64_t *ticket);

/* Queues a trial_events row (kind, reason, data) into the caller's open
 * group without touching t->reason, the scheduler's last decision: the
 * trial's attempts (leased, lease_lost, released, failed) and a worker's
 * notes (undelivered). */
int decide_event(struct server *s, struct srv_trial *t, const char *kind, const char *reason,
                 const cJSON *data, uint64_t *ticket);

/* PAUSE / EXPLOIT of a stored result (the trial stays RUNNING until its lease
 * ends; the worker was answered stop). EXPLOIT copies the donor's checkpoint
 * and replaces the config now. The trial row is queued by the caller. */
int decide_apply(struct server *s, struct srv_experiment *e, struct srv_trial *t, double tv,
                 struct sched_outcome *out, uint64_t *ticket);

/* The trial's lease ends (complete, release, lease expiry, a retried fail):
 * when a decision is due it is carried out — PAUSED (resources freed,
 * checkpoint kept) or PENDING from the donor's checkpoint — and 1 is
 * returned (the row is queued); 0 when nothing was due. */
int decide_lease_end(struct server *s, struct srv_trial *t, uint64_t *ticket);

/* PBT: trial d's checkpoint was stored (an upload): the exploits that wait
 * for it (decided while the donor's checkpoint of the result it was ranked
 * at was not stored yet) are carried out: the copy, and a trial PAUSED while
 * it waited goes PENDING. Queued into the caller's group. */
int decide_checkpoint_stored(struct server *s, struct srv_trial *d, uint64_t *ticket);
/* d's lease ended (complete, fail, release, expiry): nothing more comes from
 * it, so the exploits waiting for it get what it stored, or are skipped
 * (the trial keeps its config and resumes from its own checkpoint) when it
 * stored none. */
int decide_donor_done(struct server *s, struct srv_trial *d, uint64_t *ticket);

/* Whether a checkpoint upload from the trial's current lease is refused: an
 * exploit replaced its checkpoint (409 not_leased). */
int decide_refuses_checkpoint(const struct srv_trial *t);

/* sched_choose at lease time: RESUME makes the PAUSED trial PENDING (reason,
 * event, record) and returns it in *resumed; NEW/WAIT return 0 with
 * *resumed NULL and *kind set. */
int decide_choose(struct server *s, struct srv_experiment *e, int can_new,
                  enum sched_choice_kind *kind, struct srv_trial **resumed, uint64_t *ticket);

/* The experiment ended: its PAUSED trials end TERMINATED ("paused at the end
 * of the experiment, never promoted"). */
int decide_end_paused(struct server *s, struct srv_experiment *e, uint64_t *ticket);

/* Other trials a decision ended (out->ended: HyperBand's halving stops
 * PAUSED trials that did not make the cut): a PAUSED one ends TERMINATED
 * now with the reason and a "stopped" event; one still pause-pending ends
 * TERMINATED when its lease ends. Queued into the caller's group: the
 * decision's transaction. */
int decide_end_others(struct server *s, struct srv_experiment *e, const struct sched_outcome *out,
                      uint64_t *ticket);

/* Called where an experiment may end (EE_MAYBE_END, a lease
 * that found nothing to do): when nothing is RUNNING or PENDING, no new
 * trial can be made and the scheduler resumes nothing, the PAUSED trials
 * end TERMINATED (decide_end_paused) so the experiment can end. 0 or a
 * negative errno. */
int decide_maybe_end(struct server *s, struct srv_experiment *e, uint64_t *ticket);

/* time_budget_s: advances every running experiment's run_time_s (called
 * from the server's timer and before leasing); persists it at most once a
 * second; when a budget is spent: PENDING/PAUSED trials end TERMINATED, no
 * trial is created or leased, and the experiment ends TERMINATED with
 * end_reason "time_budget_s S spent" once its last running trial ended. */
int decide_tick(struct server *s, uint64_t now_ms, uint64_t *ticket);

/* lease_end_action as stored in the trials row (migration 009): "pause",
 * "exploit", "stop"; NULL for 0. parse: NULL -> 0; -EINVAL for an unknown
 * name. */
const char *decide_action_name(int action);
int decide_action_parse(const char *name, int *action);
/* The trial's lease_end_action as stored: decide_action_name, or
 * "exploit:D:I" for an exploit waiting for donor D's checkpoint of
 * iteration I (written into buf). decide_load_wait reads that back into
 * t->exploit_donor / exploit_iter (0 when text is anything else). */
const char *decide_action_text(const struct srv_trial *t, char *buf, size_t size);
void decide_load_wait(struct srv_trial *t, const char *text);

/* GET /trials/{id}: its decisions ("events") and its attempts (leased,
 * lease_lost, released, failed: decide_attempt_event), each oldest first,
 * as two JSON arrays of the same row shape. */
int decide_events_json(struct server *s, int64_t trial_id, cJSON **events, cJSON **attempts);
/* Whether a trial_events kind is one of an attempt's (not a decision). */
int decide_is_attempt_kind(const char *kind);

/* sched_records replay (loader callback shape). */
int decide_load_record(struct server *s, int64_t experiment_id, int64_t trial_id,
                       const char *record);

/* A RUNNING trial of a paused experiment is told to stop at its worker's
 * heartbeat too, not only at its next result: it pauses when its lease ends
 * (lease_end_action, persisted). 0 when it was told already. */
int decide_pause_lease(struct server *s, struct srv_trial *t, uint64_t *ticket);

#endif
