/* state_trial: a trial's life cycle (the diagram is in state.h).
 *
 * state_trial_event is the one way a trial's status changes; trial_set_status
 * below is the only assignment of t->status outside the loader, and every
 * transition passes its table. Each event keeps, by itself, what a status
 * change implies: the experiment's counts and pending cursor, the worker's
 * resources, the compaction queue, the row and the change feed (through
 * state_persist_trial), and the experiment's end when the trial was its last
 * (state_experiment_event). API handlers parse, call one event and render. */
#include "state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attribution.h"
#include "clock.h"
#include "decide.h"
#include "jsonout.h"
#include "log.h"
#include "quarantine.h"
#include "state_internal.h"
#include "state_preempt.h"

_Static_assert(TS_PENDING == 0, "a trial is made PENDING by calloc (state_create_trial)");

/* Which status each status may become: the diagram in state.h as a table. */
static const unsigned char trial_can[TS_COUNT][TS_COUNT] = {
    /*                 PENDING RUNNING PAUSED TERMINATED ERROR */
    [TS_PENDING] = {0, 1, 0, 1, 0}, [TS_RUNNING] = {1, 0, 1, 1, 1},
    [TS_PAUSED] = {1, 0, 0, 1, 0},  [TS_TERMINATED] = {1, 0, 0, 0, 0},
    [TS_ERROR] = {0, 0, 0, 0, 0},
};

/* The statuses each event may start from (0: any; the fenced events check
 * the lease instead). The status table below is not enough on its own:
 * TERMINATED -> PENDING exists for TE_RESUME (an extend), not for a requeue,
 * and an event refused here changes nothing at all, not even a field before
 * its status. */
#define FROM(st) (1u << (st))
static const unsigned trial_event_from[] = {
    [TE_LEASE] = FROM(TS_PENDING),
    [TE_RESULTS] = 0,
    [TE_COMPLETE] = 0,
    [TE_FAIL] = 0,
    [TE_RELEASE] = 0,
    [TE_REQUEUE] = FROM(TS_RUNNING),
    [TE_STOP] = FROM(TS_PENDING) | FROM(TS_RUNNING) | FROM(TS_PAUSED),
    [TE_PAUSE] = FROM(TS_RUNNING),
    [TE_EXPLOIT] = FROM(TS_RUNNING),
    [TE_RESUME] = FROM(TS_RUNNING) | FROM(TS_PAUSED) | FROM(TS_TERMINATED),
};
static const char *const trial_event_names[] = {
    [TE_LEASE] = "TE_LEASE",   [TE_RESULTS] = "TE_RESULTS", [TE_COMPLETE] = "TE_COMPLETE",
    [TE_FAIL] = "TE_FAIL",     [TE_RELEASE] = "TE_RELEASE", [TE_REQUEUE] = "TE_REQUEUE",
    [TE_STOP] = "TE_STOP",     [TE_PAUSE] = "TE_PAUSE",     [TE_EXPLOIT] = "TE_EXPLOIT",
    [TE_RESUME] = "TE_RESUME",
};

/* The only writer of t->status (the loader aside). */
static int trial_set_status(struct server *s, struct srv_trial *t, enum trial_status st) {
  if (!trial_can[t->status][st]) {
    log_error("trial %lld: no transition %s -> %s", (long long)t->id, trial_status_names[t->status],
              trial_status_names[st]);
    return -EINVAL;
  }
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  e->counts[t->status]--;
  e->counts[st]++;
  /* Its lease ends here: the window of its final uploads starts. */
  if (t->status == TS_RUNNING && st != TS_RUNNING) t->lease_ended_ms = clock_mono_ms();
  t->status = st;
  t->updated_seq = ++s->seq;
  if (st == TS_PENDING && t->idx < e->pending_cursor) e->pending_cursor = t->idx;
  /* Bounded memory: an ended trial's history leaves memory a little later. */
  if (st == TS_TERMINATED || st == TS_ERROR) state_compact_later(s, t, clock_mono_ms());
  /* An end, a requeue or a pause may give a held lease its trial (a lease
   * itself gives none). */
  if (st != TS_RUNNING) lease_wait_changed(s);
  return 0;
}

/* ---- the history of attempts */

/* "worker 2 (w2)", or "worker 2" when it is not known any more. */
static void trial_worker_label(struct server *s, int64_t wid, char *buf, size_t len) {
  const struct srv_worker *w = server_worker(s, wid);
  if (w && w->name && w->name[0])
    snprintf(buf, len, "worker %lld (%s)", (long long)wid, w->name);
  else
    snprintf(buf, len, "worker %lld", (long long)wid);
}

/* One row of the trial's history for the current attempt (leased,
 * lease_lost, released, failed): the sentence, and as data the attempt,
 * the worker and, when known, the iteration it had reached or resumes from. */
static int trial_attempt_note_data(struct server *s, struct srv_trial *t, const char *kind,
                                   const char *sentence, int has_iteration, double iteration,
                                   cJSON *d, uint64_t *ticket) {
  if (!d || !cJSON_AddNumberToObject(d, "attempt", t->attempt) ||
      !cJSON_AddNumberToObject(d, "worker_id", (double)t->worker_id) ||
      !cJSON_AddItemToObject(d, "iteration",
                             has_iteration ? cJSON_CreateNumber(iteration) : cJSON_CreateNull())) {
    cJSON_Delete(d);
    return -ENOMEM;
  }
  int rc = decide_event(s, t, kind, sentence, d, ticket);
  cJSON_Delete(d);
  return rc;
}

static int trial_attempt_note(struct server *s, struct srv_trial *t, const char *kind,
                              const char *sentence, int has_iteration, double iteration,
                              uint64_t *ticket) {
  return trial_attempt_note_data(s, t, kind, sentence, has_iteration, iteration,
                                 cJSON_CreateObject(), ticket);
}

/* The lease of the current attempt ended without its holder ending the
 * trial (kind lease_lost or released); why says how. */
static int trial_note_lease_end(struct server *s, struct srv_trial *t, const char *kind,
                                const char *why, cJSON *data, uint64_t *ticket) {
  char who[300], line[640];
  trial_worker_label(s, t->worker_id, who, sizeof who);
  snprintf(line, sizeof line, "attempt %d on %s ended at iteration %g: %s", t->attempt, who,
           t->nres ? t->last_t : 0.0, why && why[0] ? why : "its lease ended");
  return trial_attempt_note_data(s, t, kind, line, t->nres > 0, t->nres ? t->last_t : 0,
                                 data ? data : cJSON_CreateObject(), ticket);
}

/* ---- ending: TE_STOP, and the end of complete, fail and a stop decision */

/* The trial ends (TERMINATED or ERROR): scheduler end, records, fail_fast,
 * the end of the experiment when it was the last. Queues what changed. */
static int trial_end(struct server *s, struct srv_trial *t, enum trial_status st,
                     uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  struct sched_outcome out = {0};
  if (t->status == TS_RUNNING) state_release(s, t);
  int rc = trial_set_status(s, t, st);
  if (rc) return rc;
  t->ended_at = clock_wall_s();
  t->worker_id = 0;
  /* Cancelled trials leave their bracket without passing through it. */
  int pass = (e->status == ES_RUNNING || e->status == ES_PAUSED) && t->nres > 0;
  rc = sched_on_trial_end(e->sched, t->id, pass, t->last_t,
                          pass && t->has_last_value ? &t->last_value : NULL, &out);
  if (rc && rc != -ENOENT) return rc;
  if (rc == -ENOENT) out.asha.recorded = 0;
  rc = state_queue_result(s, t, t->updated_seq, 0, NULL, NULL, &out.asha, NULL, 1, ticket);
  if (!rc) rc = decide_note(s, t, NULL, NULL, NULL, out.record, ticket);
  if (!rc) rc = decide_end_others(s, e, &out, ticket); /* HyperBand's halving */
  sched_outcome_clear(&out);
  if (rc) return rc;
  if (st == TS_ERROR && e->status == ES_RUNNING && e->spec.fail_fast) {
    /* docs/protocol.md#fail-fast: this trial's end and the cancel are queued
     * in the same hold of the lock, so they commit as one transaction. */
    char reason[1024];
    snprintf(reason, sizeof reason, "fail_fast: trial %lld (%s) failed: %s", (long long)t->id,
             t->name, t->error && t->error[0] ? t->error : "failed");
    rc = state_experiment_event(s, e, EE_CANCEL, reason, ticket);
    if (!rc)
      log_warn("experiment %lld cancelled by fail_fast (trial %lld failed)", (long long)e->id,
               (long long)t->id);
    return rc;
  }
  return state_experiment_event(s, e, EE_MAYBE_END, NULL, ticket);
}

/* RUNNING -> PENDING without counting a failure (lease expiry, unlisted,
 * release, a worker's clean stop): a pause or exploit due at the lease's end
 * is carried out instead. The next lease resumes it from its checkpoint. */
static int trial_requeue(struct server *s, struct srv_trial *t, const char *kind, const char *why,
                         cJSON *data, uint64_t *ticket) {
  int due = trial_note_lease_end(s, t, kind, why, data, ticket);
  if (due) return due;
  /* PBT exploits waiting for this trial's checkpoint get what it stored. */
  if ((due = decide_donor_done(s, t, ticket))) return due;
  due = decide_lease_end(s, t, ticket);
  if (due) return due < 0 ? due : 0;
  state_release(s, t);
  /* The lease is over without its holder ending the trial: anything it
   * still sends is stale. */
  t->lease_final = 0;
  t->unlisted_since_ms = 0;
  t->lease_deadline_ms = 0;
  int rc = trial_set_status(s, t, TS_PENDING);
  return rc ? rc : state_persist_trial(s, t, ticket);
}

/* ---- TE_LEASE */

/* The row (attempt, worker, status) is queued in the same hold, so the
 * lease reply is sent only once the lease it names is durable. */
static int trial_lease(struct server *s, struct srv_trial *t, struct srv_worker *w,
                       uint64_t *ticket) {
  int rc = trial_set_status(s, t, TS_RUNNING);
  if (rc) return rc;
  t->attempt++;
  t->lease_nres = t->nres; /* a failure with more had a result first */
  t->promoted = 0;
  t->started_at = clock_wall_s();
  state_charge(s, w, t);
  t->lease_final = 0;
  t->unlisted_since_ms = 0;
  t->listed_gen = 0;
  state_renew_lease(s, t, clock_mono_ms());
  rc = state_persist_trial(s, t, ticket);
  if (rc) return rc;
  char who[300], line[640];
  trial_worker_label(s, w->id, who, sizeof who);
  if (t->has_checkpoint)
    snprintf(line, sizeof line,
             "attempt %d leased to %s, resuming from its checkpoint at iteration %lld", t->attempt,
             who, (long long)t->checkpoint_iteration);
  else
    snprintf(line, sizeof line, "attempt %d leased to %s, from the start", t->attempt, who);
  return trial_attempt_note(s, t, "leased", line, t->has_checkpoint,
                            (double)t->checkpoint_iteration, ticket);
}

/* ---- TE_RESULTS */

/* The stored decision for time value tv ('c'/'s'), or 0 when none is stored
 * in the trial's current generation: after a PBT exploit the trial resumes
 * from its donor's checkpoint, maybe behind its own results, and reports
 * those time values again as new results. */
static char trial_stored_decision(struct server *s, const struct srv_trial *t, double tv) {
  if (t->compact) {
    /* Bounded memory: an ended trial's replays are looked up in SQLite
     * (rare: a reply to its last results was lost). */
    char d = 0;
    if (t->nres && tv <= t->max_t_seen &&
        store_trial_decision(s->store, t->experiment_id, t->id, t->first_seq, t->last_seq,
                             t->generation, tv, &d))
      d = 0;
    return d;
  }
  for (size_t i = t->nres; tv <= t->max_t_seen && i-- > t->gen_start;)
    if (t->ts[i] == tv) return t->decisions[i];
  return 0;
}

/* Stores one new result of a RUNNING trial with the scheduler's decision;
 * a stop ends the trial (and maybe its experiment) in the same hold. */
static int trial_store_result(struct server *s, struct srv_trial *t, struct srv_experiment *e,
                              const cJSON *r, double tv, char *decision, uint64_t *ticket) {
  char *json = NULL;
  /* Every objective (the one metric, or each of several: the scheduler
   * takes them all or none). */
  double mv[SPEC_MAX_OBJECTIVES];
  int has_m = e->spec.has_metric;
  for (int j = 0; has_m && j < (e->spec.nobjectives > 1 ? e->spec.nobjectives : 1); j++) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, e->spec.objectives[j]);
    has_m = m && (cJSON_IsNumber(m) || cJSON_IsNull(m));
    mv[j] = has_m && cJSON_IsNumber(m) ? m->valuedouble : NAN;
  }
  struct sched_outcome out = {0}, end = {0};
  const char *kind = NULL;
  /* Stop rules and the time budget first, as Ray's controller asks its
   * stopper before the scheduler: a trial they stop is not ranked, paused or
   * exploited at that result. */
  int rc = 0, stopped = decide_stopper(e, r, &out, &kind);
  if (!stopped) rc = sched_on_result(e->sched, t->id, tv, has_m ? mv : NULL, &out);
  if (rc == -ENOENT) { /* not in a bracket (should not happen while RUNNING) */
    sched_outcome_clear(&out);
    rc = 0;
  }
  if (!rc) rc = decide_note_rank(e, t, r, tv, &out);
  if (rc) goto out;
  if (!(json = jsonout_print(r))) {
    rc = -ENOMEM;
    goto out;
  }
  /* Pause and exploit are carried out (exploit's checkpoint copy and config
   * change are queued in this hold: the decision's transaction). */
  if (!stopped && (rc = decide_override(s, e, t, r, tv, &out, &kind))) goto out;
  if ((rc = decide_apply(s, e, t, tv, &out, ticket))) goto out;
  int64_t seq = ++s->seq;
  char d = out.action != SCHED_CONTINUE ? 's' : 'c';
  if ((rc = state_note_result(s, t, tv, d, r, json, seq))) goto out;
  if (d == 's' || out.record) {
    const cJSON *data = out.action == SCHED_EXPLOIT ? out.new_config : NULL;
    if ((rc = decide_note(s, t, d == 's' ? kind : NULL, out.reason, data, out.record, ticket)))
      goto out;
  }
  int ended = 0;
  if (d == 's' && out.action != SCHED_STOP) {
    /* PAUSE / EXPLOIT: answered stop, RUNNING until the lease ends. */
    t->updated_seq = ++s->seq;
    ended = 1; /* the trial row (its reason) goes with the result */
  } else if (d == 's') {
    /* The trial is done: it passes through its bracket once more and ends.
     * Its lease ended it: that attempt's final uploads are still taken. */
    state_release(s, t);
    if ((rc = trial_set_status(s, t, TS_TERMINATED))) goto out;
    t->lease_final = 1;
    t->stopped_early = out.stopped_early;
    t->ended_at = clock_wall_s();
    rc =
        sched_on_trial_end(e->sched, t->id, 1, tv, t->has_last_value ? &t->last_value : NULL, &end);
    if (rc == -ENOENT) rc = 0;
    if (rc) goto out;
    ended = 1;
  }
  rc = state_queue_result(s, t, seq, tv, d == 's' ? "stop" : "continue", json, &out.asha, &end.asha,
                          ended, ticket);
  if (!rc && ended && end.record) rc = decide_note(s, t, NULL, NULL, NULL, end.record, ticket);
  if (!rc && ended) rc = decide_end_others(s, e, &end, ticket); /* HyperBand's halving */
  /* The one definition of done (state_experiment_done, the searcher's end
   * included) and the one place that ends an experiment. */
  if (!rc && ended && out.action == SCHED_STOP)
    rc = state_experiment_event(s, e, EE_MAYBE_END, NULL, ticket);
  if (!rc) {
    atomic_fetch_add(&s->metrics.results_received, 1);
    *decision = d;
  }
out:
  sched_outcome_clear(&out);
  sched_outcome_clear(&end);
  free(json);
  return rc;
}

static int trial_results(struct server *s, struct srv_trial *t, struct trial_event_args *a,
                         uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  int fresh = 0;
  for (int i = 0; i < a->nresults && !fresh; i++)
    fresh = !trial_stored_decision(s, t, a->time_values[i]);
  /* Replays (a time value already stored) answer their stored decision
   * whatever the lease; a new result needs the trial's current lease, else
   * nothing of the batch is stored. */
  a->fence = state_check_fence(s, t, a->lease, a->why, sizeof a->why);
  if (a->fence != FENCE_CURRENT && fresh) return -ESTALE;
  int ended = 0, rc = 0;
  a->replayed = 0;
  for (int i = 0; i < a->nresults; i++) {
    char d = trial_stored_decision(s, t, a->time_values[i]);
    if (d) {
      a->replayed++;
    } else if (ended) {
      /* An earlier result of this batch stopped the trial: the rest are
       * past its end and not stored, as if sent after the stop. */
      d = 's';
    } else {
      if ((rc = trial_store_result(s, t, e, a->results[i], a->time_values[i], &d, ticket)))
        return rc;
      ended = d == 's';
    }
    a->decisions[i] = d;
  }
  if (a->replayed) atomic_fetch_add(&s->metrics.results_duplicate, (uint64_t)a->replayed);
  return 0;
}

/* ---- TE_COMPLETE, TE_FAIL, TE_RELEASE: a worker ends its lease */

static int trial_complete(struct server *s, struct srv_trial *t, struct trial_event_args *a,
                          uint64_t *ticket) {
  a->fence = state_check_fence(s, t, a->lease, a->why, sizeof a->why);
  if (a->fence == FENCE_STALE) return -ESTALE;
  /* Its uploads are over: PBT exploits waiting for its checkpoint get what
   * it stored. */
  int rc = decide_donor_done(s, t, ticket);
  if (rc) return rc;
  if (a->fence == FENCE_FINAL) return 0; /* ended by this lease: the same answer */
  /* A success for its worker, and for the failures of it elsewhere. */
  rc = quarantine_on_success(s, t, server_worker(s, t->worker_id), ticket);
  if (rc) return rc;
  /* A pause or exploit due at the lease's end: PAUSED / PENDING, not ended. */
  rc = decide_lease_end(s, t, ticket);
  if (rc) return rc < 0 ? rc : 0;
  t->lease_final = 1; /* its final checkpoint and log uploads are still taken */
  rc = trial_end(s, t, TS_TERMINATED, ticket);
  if (!rc) log_info("trial %lld completed", (long long)t->id);
  return rc;
}

/* A failed attempt in the trial's history: the error's first line (the
 * whole error is the trial's "error") and whether it is tried again. */
static int trial_note_failure(struct server *s, struct srv_trial *t, int64_t max_failures,
                              int counts, uint64_t *ticket) {
  char who[300], first[200], line[640];
  trial_worker_label(s, t->worker_id, who, sizeof who);
  size_t n = strcspn(t->error, "\n");
  if (n >= sizeof first) {
    n = sizeof first - 1;
    /* Never inside a character: the sentence goes out as JSON text. */
    while (n > 0 && ((unsigned char)t->error[n] & 0xC0) == 0x80) n--;
  }
  snprintf(first, sizeof first, "%.*s", (int)n, t->error);
  const char *attr = attribution_name(t->attribution);
  if (!counts)
    snprintf(line, sizeof line,
             "attempt %d on %s failed: %s; attribution %s; tried again on another worker, "
             "not counted",
             t->attempt, who, first, attr);
  else if (t->num_failures <= max_failures)
    snprintf(line, sizeof line,
             "attempt %d on %s failed: %s; attribution %s; tried again (%d of %lld)", t->attempt,
             who, first, attr, t->num_failures, (long long)max_failures);
  else
    snprintf(line, sizeof line, "attempt %d on %s failed: %s; attribution %s", t->attempt, who,
             first, attr);
  return trial_attempt_note(s, t, "failed", line, t->nres > 0, t->nres ? t->last_t : 0, ticket);
}

static int trial_fail(struct server *s, struct srv_trial *t, struct trial_event_args *a,
                      uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  a->fence = state_check_fence(s, t, a->lease, a->why, sizeof a->why);
  if (a->fence == FENCE_STALE) return -ESTALE;
  int rc0 = decide_donor_done(s, t, ticket); /* PBT exploits waiting for it */
  if (rc0) return rc0;
  if (a->fence == FENCE_FINAL) return 0; /* this lease's end again: counted once */
  char *copy = strdup(a->error && a->error[0] ? a->error : "failed");
  if (!copy) return -ENOMEM;
  free(t->error);
  t->error = copy;
  t->has_exit_code = a->has_exit_code;
  t->exit_code = a->has_exit_code ? a->exit_code : 0;
  /* docs/scheduling.md#failures-told-apart: a machine's failure, and the
   * one retry elsewhere, do not count against the trial. */
  int counts = 1;
  int rc = quarantine_on_fail(s, t, clock_mono_ms(), &counts, ticket);
  if (rc) return rc;
  t->num_failures += counts;
  t->lease_final = 1; /* its final checkpoint and log uploads are still taken */
  rc = trial_note_failure(s, t, e->spec.max_failures, counts, ticket);
  if (rc) return rc;
  int due = 0, again = !counts || t->num_failures <= e->spec.max_failures;
  if (again && (due = decide_lease_end(s, t, ticket)) != 0) {
    /* A pause or exploit was due: it is carried out instead. */
    rc = due < 0 ? due : 0;
  } else if (again) {
    /* Retry: back to PENDING; the next lease resumes from the checkpoint. */
    state_release(s, t);
    t->unlisted_since_ms = 0;
    rc = trial_set_status(s, t, TS_PENDING);
    if (!rc) rc = state_persist_trial(s, t, ticket);
    if (counts)
      log_warn("trial %lld failed (%s), retry %d of %lld", (long long)t->id, t->error,
               t->num_failures, (long long)e->spec.max_failures);
    else
      log_warn("trial %lld failed (%s), attribution %s: tried again, not counted", (long long)t->id,
               t->error, attribution_name(t->attribution));
  } else {
    rc = trial_end(s, t, TS_ERROR, ticket);
    log_warn("trial %lld failed (%s): ERROR", (long long)t->id, t->error);
  }
  return rc;
}

/* A release at a preemption notice: requeued as any release (no failure is
 * counted), its event says what was lost (state_preempt.h). */
static int trial_preempted(struct server *s, struct srv_trial *t, struct trial_event_args *a,
                           uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  struct preempt_loss l = state_preempt_loss(s, e, t);
  char why[320];
  snprintf(why, sizeof why,
           "preempted: its worker's machine is going away; %g iteration(s) and %.1f s of work "
           "past its checkpoint (at iteration %lld) are lost",
           l.iterations, l.seconds, t->has_checkpoint ? (long long)t->checkpoint_iteration : 0LL);
  cJSON *d = cJSON_CreateObject();
  if (!d || !cJSON_AddNumberToObject(d, "lost_iterations", l.iterations) ||
      !cJSON_AddNumberToObject(d, "lost_seconds", l.seconds) ||
      !cJSON_AddItemToObject(d, "notice_at",
                             a->notice_at > 0 ? cJSON_CreateNumber(a->notice_at)
                                              : cJSON_CreateNull())) {
    cJSON_Delete(d);
    return -ENOMEM;
  }
  int64_t from = t->worker_id;
  int rc = trial_requeue(s, t, "preempted", why, d, ticket);
  if (rc) return rc;
  state_preempt_count(e, &l);
  e->updated_seq = ++s->seq;
  log_info("trial %lld preempted on worker %lld: back to PENDING, %g iteration(s) and %.1f s lost",
           (long long)t->id, (long long)from, l.iterations, l.seconds);
  return state_persist_experiment(s, e, ticket);
}

static int trial_release(struct server *s, struct srv_trial *t, struct trial_event_args *a,
                         uint64_t *ticket) {
  a->fence = state_check_fence(s, t, a->lease, a->why, sizeof a->why);
  if (a->fence != FENCE_CURRENT) return -ESTALE;
  /* The body's worker_id (v1) must agree with the lease it names. */
  if (a->worker_id && a->worker_id != a->lease->worker_id) {
    snprintf(a->why, sizeof a->why, "trial %lld is leased to worker %lld, not %lld",
             (long long)t->id, (long long)t->worker_id, (long long)a->worker_id);
    a->fence = FENCE_STALE;
    return -ESTALE;
  }
  int64_t from = t->worker_id;
  if (a->preempted) return trial_preempted(s, t, a, ticket);
  int rc =
      trial_requeue(s, t, "released",
                    "released by its worker (a drain, a preemption or self-fencing)", NULL, ticket);
  if (!rc)
    log_info("trial %lld released by worker %lld at iteration %g: back to PENDING",
             (long long)t->id, (long long)from,
             a->has_iteration ? a->iteration : (t->nres ? t->last_t : 0));
  return rc;
}

/* ---- the one entry */

int state_trial_event(struct server *s, struct srv_trial *t, enum trial_event ev,
                      struct trial_event_args *a, uint64_t *ticket) {
  if ((unsigned)ev >= sizeof trial_event_from / sizeof *trial_event_from) return -EINVAL;
  if (trial_event_from[ev] && !(trial_event_from[ev] & FROM(t->status))) {
    log_error("trial %lld: %s does not apply to a %s trial", (long long)t->id,
              trial_event_names[ev], trial_status_names[t->status]);
    return -EINVAL;
  }
  int rc;
  switch (ev) {
  case TE_LEASE:
    return trial_lease(s, t, a->worker, ticket);
  case TE_RESULTS:
    return trial_results(s, t, a, ticket);
  case TE_COMPLETE:
    return trial_complete(s, t, a, ticket);
  case TE_FAIL:
    return trial_fail(s, t, a, ticket);
  case TE_RELEASE:
    return trial_release(s, t, a, ticket);
  case TE_REQUEUE:
    return trial_requeue(s, t, "lease_lost", a ? a->why_in : NULL, NULL, ticket);
  case TE_STOP:
    return trial_end(s, t, TS_TERMINATED, ticket);
  case TE_PAUSE:
    rc = trial_set_status(s, t, TS_PAUSED);
    return rc ? rc : state_persist_trial(s, t, ticket);
  case TE_EXPLOIT:
  case TE_RESUME:
    t->promoted = ev == TE_RESUME && t->status == TS_PAUSED;
    rc = trial_set_status(s, t, TS_PENDING);
    return rc ? rc : state_persist_trial(s, t, ticket);
  }
  return -EINVAL;
}

/* ---- creation */

/* Objective j > 0 of t at its last result (NaN: none): from its series in
 * memory, else from the stored last result (a compact trial). */
static int trial_objective(struct server *s, const struct srv_experiment *e,
                           const struct srv_trial *t, int j, double *v) {
  int key = state_key_index(e, e->spec.objectives[j]);
  char *last = NULL;
  *v = NAN;
  if (!t->compact && key >= 0 && key < t->nseries && t->series[key].n) {
    *v = t->series[key].v[t->series[key].n - 1];
    return 0;
  }
  if (state_trial_last_result(s, t, &last)) return -ENOMEM;
  cJSON *lr = last ? cJSON_Parse(last) : NULL;
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(lr, e->spec.objectives[j]);
  if (cJSON_IsNumber(x)) *v = x->valuedouble;
  cJSON_Delete(lr);
  free(last);
  return 0;
}

/* Feeds the searcher every trial that changed since it last saw it (made
 * on first use, so a restart rebuilds it from the loaded trials). */
static int trial_searcher_sync(struct server *s, struct srv_experiment *e) {
  if (!e->searcher) {
    struct validate_error verr = {{0}, {0}};
    int rc = searcher_create(&e->spec, &e->searcher, &verr);
    if (rc) {
      log_error("experiment %lld: cannot make its searcher: %s: %s", (long long)e->id, verr.path,
                verr.message);
      return rc;
    }
  }
  if (searcher_type(e->searcher) != SEARCHER_TPE) return 0;
  for (int64_t k = 0; k < e->ntrials; k++) {
    struct srv_trial *t = e->trials[k];
    if (t->searcher_seq == t->updated_seq) continue;
    cJSON *c = cJSON_Parse(t->config);
    if (!c) return -ENOMEM;
    int finished = t->status == TS_TERMINATED || t->status == TS_ERROR;
    /* A failed trial is finished with no value: the model ignores it. */
    double v[SPEC_MAX_OBJECTIVES];
    int rc = 0;
    v[0] = t->status != TS_ERROR && t->has_last_value ? t->last_value : NAN;
    for (int j = 1; j < searcher_objectives(e->searcher) && !rc; j++)
      if (t->status == TS_ERROR || !t->has_last_value)
        v[j] = NAN;
      else
        rc = trial_objective(s, e, t, j, &v[j]);
    if (!rc) rc = searcher_observe_mo(e->searcher, t->id, t->idx, c, v, finished);
    /* Outcome constraints: tpe ranks the infeasible after the feasible. */
    if (!rc && t->nres) rc = searcher_observe_violation(e->searcher, t->id, t->violation);
    cJSON_Delete(c);
    if (rc) return rc;
    t->searcher_seq = t->updated_seq;
  }
  return 0;
}

int state_create_trial(struct server *s, struct srv_experiment *e, struct srv_trial **out) {
  cJSON *cfg = NULL;
  struct srv_trial *t = NULL;
  *out = NULL;
  if (e->searcher_exhausted || e->ntrials >= e->num_trials) return -ENOENT;
  int rc = trial_searcher_sync(s, e);
  if (!rc) rc = searcher_suggest(e->searcher, e->ntrials, &cfg);
  if (rc == -ENOENT) e->searcher_exhausted = 1;
  if (rc) return rc;
  rc = -ENOMEM;
  if (state_grow((void ***)&s->trials, &s->captrials, s->ntrials + 1) ||
      state_grow((void ***)&e->trials, &e->captrials, e->ntrials + 1) ||
      !(t = calloc(1, sizeof *t))) /* PENDING */
    goto fail;
  t->id = s->ntrials + 1;
  t->experiment_id = e->id;
  t->idx = e->ntrials;
  char name[SPEC_NAME_MAX + 32];
  snprintf(name, sizeof name, "%s_%05lld", e->name, (long long)t->idx);
  t->name = strdup(name);
  t->config = jsonout_print(cfg);
  if (!t->name || !t->config) goto fail;
  t->created_at = clock_wall_s();
  t->bracket = sched_bracket_for(e->sched, t->idx);
  if ((rc = sched_add_trial(e->sched, t->id, t->idx, t->config))) goto fail;
  t->updated_seq = ++s->seq;
  t->created_seq = t->updated_seq; /* bounded memory: its results come after */
  s->trials[s->ntrials++] = t;
  e->trials[e->ntrials++] = t;
  e->counts[TS_PENDING]++;
  cJSON_Delete(cfg);
  *out = t;
  return 0;
fail:
  cJSON_Delete(cfg);
  state_trial_free(t);
  return rc;
}
