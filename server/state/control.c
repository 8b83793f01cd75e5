/* control: a user's control of a live experiment
 * (docs/protocol.md#experiment-control): pause, resume, PATCH (extend
 * num_samples or max_t, max_concurrent_trials, priority, notes, tags), one
 * trial's stop and delete. Each queues all of its change into the caller's hold of the lock:
 * one transaction, committed before the reply. All callers hold s->lock. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "clock.h"
#include "jsonout.h"
#include "log.h"
#include "state.h"
#include "decide.h"
#include "state_internal.h"
#include "validate.h"

/* The sentence a trial paused by its experiment's pause carries (reason
 * column): resume tells these from the scheduler's own pauses (a promotion
 * rung), which it must leave alone. */
const char *const control_pause_reason = "paused: the experiment was paused by a user";

static int control_is_user_paused(const struct srv_trial *t) {
  return t->reason && !strcmp(t->reason, control_pause_reason);
}

int control_pause(struct server *s, struct srv_experiment *e, uint64_t *ticket) {
  return state_experiment_event(s, e, EE_PAUSE, NULL, ticket);
}

/* A PAUSED trial (of a user's pause) goes back to PENDING: its next lease,
 * on any worker, resumes it from its checkpoint. */
static int control_requeue_paused(struct server *s, struct srv_trial *t, const char *why,
                                  uint64_t *ticket) {
  /* Bounded memory: an ended trial that an extend resumes gets its history
   * back from SQLite first (idempotency, checkpoint time, best). */
  int rc = state_trial_hydrate(s, t);
  if (rc) return rc;
  t->lease_final = 0;
  t->ended_at = 0;
  state_trial_next_generation(t);
  rc = state_trial_event(s, t, TE_RESUME, NULL, ticket);
  if (!rc) rc = decide_note(s, t, "resumed", why, NULL, NULL, ticket);
  return rc;
}

int control_resume(struct server *s, struct srv_experiment *e, uint64_t *ticket) {
  int rc = state_experiment_event(s, e, EE_RESUME, NULL, ticket);
  if (rc) return rc;
  for (int64_t k = 0; !rc && k < e->ntrials; k++) {
    struct srv_trial *t = e->trials[k];
    if (t->status == TS_PAUSED && control_is_user_paused(t))
      rc = control_requeue_paused(s, t, "resumed: the experiment was resumed", ticket);
  }
  /* Everything may have ended while it was paused. */
  if (!rc) rc = state_experiment_event(s, e, EE_MAYBE_END, NULL, ticket);
  log_info("experiment %lld resumed", (long long)e->id);
  return rc;
}

/* The config with the patch's plan fields set; checked by the validator a
 * restart uses, so an edit can never make the stored row unloadable. */
static int control_new_config(const struct srv_experiment *e, const struct control_patch *p,
                              char **out, int64_t *num_trials, char *field, size_t fl, char *err,
                              size_t el) {
  cJSON *c = cJSON_Parse(e->config);
  struct experiment_spec spec;
  struct validate_error verr = {{0}, {0}};
  int rc = -ENOMEM;
  memset(&spec, 0, sizeof spec);
  *out = NULL;
  if (!c) return -ENOMEM;
  if (p->has_num_samples) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "num_samples");
    if (!cJSON_AddNumberToObject(c, "num_samples", (double)p->num_samples)) goto out;
  }
  if (p->has_max_concurrent) {
    cJSON_DeleteItemFromObjectCaseSensitive(c, "max_concurrent_trials");
    if (!cJSON_AddNumberToObject(c, "max_concurrent_trials", (double)p->max_concurrent)) goto out;
  }
  if (p->has_max_t) {
    cJSON *sc = cJSON_GetObjectItemCaseSensitive(c, "scheduler");
    if (!cJSON_IsObject(sc)) {
      rc = -EINVAL;
      snprintf(field, fl, "scheduler.max_t");
      snprintf(err, el, "the experiment has no scheduler object to raise max_t in");
      goto out;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(sc, "max_t");
    if (!cJSON_AddNumberToObject(sc, "max_t", p->max_t)) goto out;
  }
  rc = validate_experiment_stored(c, &spec, &verr);
  if (rc) {
    snprintf(field, fl, "%s", verr.path);
    snprintf(err, el, "%s", verr.message);
    rc = -EINVAL;
    goto out;
  }
  *num_trials = spec.num_trials;
  if (!(*out = jsonout_print(c))) rc = -ENOMEM;
out:
  validate_spec_free(&spec);
  cJSON_Delete(c);
  return rc;
}

int control_patch(struct server *s, struct srv_experiment *e, const struct control_patch *p,
                  char *field, size_t fl, char *err, size_t el, uint64_t *ticket) {
  char *cfg = NULL, *notes = NULL, *tags = NULL;
  int64_t num_trials = e->num_trials;
  int rc = -EINVAL;
  int plan = p->has_num_samples || p->has_max_t || p->has_max_concurrent;
  field[0] = err[0] = 0;
  if ((p->has_num_samples || p->has_max_t) && e->status == ES_CANCELLED) {
    snprintf(field, fl, "%s", p->has_num_samples ? "num_samples" : "scheduler.max_t");
    snprintf(err, el, "experiment %lld is CANCELLED: it cannot be extended", (long long)e->id);
    return -EBUSY;
  }
  if (p->has_num_samples) {
    if (p->num_samples < e->spec.num_samples) {
      snprintf(field, fl, "num_samples");
      snprintf(err, el, "num_samples can only go up (now %lld)", (long long)e->spec.num_samples);
      return -EINVAL;
    }
    if (e->spec.sched.type == SPEC_SCHED_HYPERBAND || e->spec.sched.type == SPEC_SCHED_PBT) {
      snprintf(field, fl, "num_samples");
      snprintf(err, el,
               "num_samples cannot change for a %s scheduler (its brackets or "
               "population are planned for the trial count)",
               e->spec.sched.type == SPEC_SCHED_HYPERBAND ? "hyperband" : "pbt");
      return -EINVAL;
    }
  }
  if (p->has_max_t) {
    if (e->spec.sched.type != SPEC_SCHED_FIFO) {
      snprintf(field, fl, "scheduler.max_t");
      snprintf(err, el,
               "max_t can be raised only for the fifo scheduler (the other "
               "schedulers' rungs and brackets are planned for the max_t they started with)");
      return -EINVAL;
    }
    if (!e->spec.sched.has_max_t) {
      snprintf(field, fl, "scheduler.max_t");
      snprintf(err, el, "the experiment has no max_t: its trials already run to their end");
      return -EINVAL;
    }
    if (!(p->max_t >= e->spec.sched.max_t)) {
      snprintf(field, fl, "scheduler.max_t");
      snprintf(err, el, "max_t can only go up (now %g)", e->spec.sched.max_t);
      return -EINVAL;
    }
  }
  if (plan && (rc = control_new_config(e, p, &cfg, &num_trials, field, fl, err, el))) return rc;
  rc = -ENOMEM;
  if (p->has_notes && !(notes = strdup(p->notes))) goto fail;
  if (p->has_tags && !(tags = strdup(p->tags))) goto fail;
  if (p->has_max_t && (rc = sched_raise_max_t(e->sched, p->max_t))) {
    snprintf(field, fl, "scheduler.max_t");
    snprintf(err, el, "this scheduler cannot raise max_t");
    rc = -EINVAL;
    goto fail;
  }
  /* Nothing below fails before the row is queued. */
  if (cfg) {
    free(e->config);
    e->config = cfg;
    cfg = NULL;
  }
  if (notes) {
    free(e->notes);
    e->notes = notes;
    notes = NULL;
  }
  if (tags) {
    free(e->tags);
    e->tags = tags;
    tags = NULL;
  }
  if (p->has_priority) e->priority = p->priority;
  if (p->has_max_concurrent) e->spec.max_concurrent_trials = p->max_concurrent;
  if (p->has_priority || p->has_max_concurrent) lease_wait_changed(s);
  int again = 0;
  if (p->has_num_samples && num_trials > e->num_trials) {
    e->spec.num_samples = p->num_samples;
    e->spec.num_trials = num_trials;
    e->num_trials = num_trials;
    /* The searcher is made again from the new plan on the next suggestion
     * and fed every trial made so far. */
    searcher_free(e->searcher);
    e->searcher = NULL;
    e->searcher_exhausted = 0;
    for (int64_t k = 0; k < e->ntrials; k++) e->trials[k]->searcher_seq = -1;
    again = 1;
  }
  rc = 0;
  if (p->has_max_t) {
    e->spec.sched.max_t = p->max_t;
    /* Trials that the old max_t ended and the new one would continue resume
     * from their checkpoints. */
    for (int64_t k = 0; !rc && k < e->ntrials; k++) {
      struct srv_trial *t = e->trials[k];
      if (t->status != TS_TERMINATED || t->stopped_early || !t->reason ||
          strncmp(t->reason, "reached max_t", 13) || !(t->last_t < p->max_t))
        continue;
      rc = control_requeue_paused(s, t, "extended: max_t was raised", ticket);
      again = 1;
    }
  }
  if (!rc && again) rc = state_experiment_event(s, e, EE_REOPEN, NULL, ticket);
  e->updated_seq = ++s->seq;
  if (!rc) rc = state_persist_experiment(s, e, ticket);
  return rc;
fail:
  free(cfg);
  free(notes);
  free(tags);
  return rc;
}

int control_stop_trial(struct server *s, struct srv_trial *t, uint64_t *ticket) {
  if (t->status == TS_TERMINATED || t->status == TS_ERROR) return -EINVAL;
  /* Whatever a decision had due at its lease's end is moot now; the lease
   * that held it may still send its final uploads (lease_final). */
  t->lease_end_action = 0;
  if (t->status == TS_RUNNING) t->lease_final = 1;
  int rc = decide_note(s, t, "stopped", "stopped by user", NULL, NULL, ticket);
  if (!rc) rc = state_trial_event(s, t, TE_STOP, NULL, ticket);
  log_info("trial %lld stopped by a user", (long long)t->id);
  return rc;
}

static int control_delete_apply(struct store *st, void *arg) {
  return store_delete_experiment(st, *(int64_t *)arg);
}

int control_delete(struct server *s, struct srv_experiment *e, int force, uint64_t *ticket) {
  if (e->counts[TS_RUNNING] > 0 && !force) return -EBUSY;
  int64_t *arg = malloc(sizeof *arg);
  if (!arg) return -ENOMEM;
  *arg = e->id;
  int rc = 0;
  if (e->status == ES_RUNNING || e->status == ES_PAUSED) {
    /* Its trials end first (resources back to their workers, which learn
     * it from their next heartbeat), in this same transaction. */
    rc = state_experiment_event(s, e, EE_CANCEL, "deleted", ticket);
  }
  if (rc) {
    free(arg);
    return rc;
  }
  if ((rc = commit_enqueue(s->commit, control_delete_apply, free, arg, ticket))) return rc;
  /* Tombstones: ids are indexes into s->exps / s->trials. */
  e->deleted = 1;
  for (int64_t k = 0; k < e->ntrials; k++) {
    struct srv_trial *t = e->trials[k];
    if (t->status == TS_RUNNING) state_release(s, t);
    t->deleted = 1;
    state_trial_compact(s, t); /* bounded memory: a tombstone keeps no history */
  }
  e->updated_seq = ++s->seq;
  events_note(s, EV_EXPERIMENT, e->id, 0, NULL); /* data: {"id", "deleted": true} */
  log_info("experiment %lld deleted", (long long)e->id);
  return state_live_sync(s, e);
}
