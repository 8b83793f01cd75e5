/* state_experiment: an experiment's life cycle (the diagram is in state.h).
 *
 * state_experiment_event is the one way an experiment's status changes;
 * experiment_set_status below is the only assignment of e->status outside
 * the loader. Every change persists the row, which keeps the live list (the
 * lease scan's RUNNING experiments), queues a finished experiment to go cold,
 * and notes the change feed (state_persist_experiment). */
#include "state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "decide.h"
#include "jsonout.h"
#include "log.h"
#include "state_internal.h"

_Static_assert(ES_RUNNING == 0, "an experiment is made RUNNING by calloc");

static const unsigned char experiment_can[ES_COUNT][ES_COUNT] = {
    /*                   RUNNING TERMINATED CANCELLED PAUSED */
    [ES_RUNNING] = {0, 1, 1, 1},
    [ES_TERMINATED] = {1, 0, 0, 0},
    [ES_CANCELLED] = {0, 0, 0, 0},
    [ES_PAUSED] = {1, 0, 1, 0},
};

/* The only writer of e->status (the loader aside). */
static int experiment_set_status(struct server *s, struct srv_experiment *e, enum exp_status st) {
  if (!experiment_can[e->status][st]) {
    log_error("experiment %lld: no transition %s -> %s", (long long)e->id,
              exp_status_names[e->status], exp_status_names[st]);
    return -EINVAL;
  }
  e->status = st;
  e->ended_at = st == ES_TERMINATED || st == ES_CANCELLED ? clock_wall_s() : 0;
  e->updated_seq = ++s->seq;
  lease_wait_changed(s);
  return 0;
}

int state_experiment_done(const struct srv_experiment *e) {
  int64_t plan = e->searcher_exhausted ? e->ntrials : e->num_trials;
  return e->ntrials >= plan && e->counts[TS_TERMINATED] + e->counts[TS_ERROR] == plan;
}

/* Over: every planned trial was made and ended, or the time budget is spent
 * and nothing runs or waits. */
static int experiment_over(const struct srv_experiment *e) {
  return state_experiment_done(e) ||
         (e->budget_spent && !e->counts[TS_RUNNING] && !e->counts[TS_PENDING]);
}

static int experiment_maybe_end(struct server *s, struct srv_experiment *e, uint64_t *ticket) {
  int rc = decide_maybe_end(s, e, ticket); /* PAUSED trials end with it */
  if (rc) return rc;
  if (e->status != ES_RUNNING || !experiment_over(e)) return 0;
  if ((rc = experiment_set_status(s, e, ES_TERMINATED))) return rc;
  log_info("experiment %lld ended%s%s: %lld terminated, %lld error", (long long)e->id,
           e->end_reason ? ": " : "", e->end_reason ? e->end_reason : "",
           (long long)e->counts[TS_TERMINATED], (long long)e->counts[TS_ERROR]);
  return state_persist_experiment(s, e, ticket);
}

static int experiment_cancel(struct server *s, struct srv_experiment *e, const char *reason,
                             uint64_t *ticket) {
  char *copy = reason ? strdup(reason) : NULL;
  if (reason && !copy) return -ENOMEM;
  /* Set first: the trials ended below leave their brackets without passing
   * through them, and none of them ends the experiment a second time. */
  int rc = experiment_set_status(s, e, ES_CANCELLED);
  if (rc) {
    free(copy);
    return rc;
  }
  free(e->end_reason);
  e->end_reason = copy;
  for (int64_t i = 0; !rc && i < e->ntrials; i++) {
    struct srv_trial *t = e->trials[i];
    if (t->status == TS_TERMINATED || t->status == TS_ERROR) continue;
    rc = state_trial_event(s, t, TE_STOP, NULL, ticket);
  }
  e->updated_seq = ++s->seq;
  return rc ? rc : state_persist_experiment(s, e, ticket);
}

int state_experiment_event(struct server *s, struct srv_experiment *e, enum exp_event ev,
                           const char *reason, uint64_t *ticket) {
  int rc;
  switch (ev) {
  case EE_MAYBE_END:
    return experiment_maybe_end(s, e, ticket);
  case EE_CANCEL:
    return experiment_cancel(s, e, reason, ticket);
  case EE_PAUSE:
    if (e->status != ES_RUNNING) return -EINVAL;
    /* No trial starts (the lease path takes RUNNING experiments only); each
     * RUNNING trial is answered stop at its next result and ends PAUSED with
     * its checkpoint when its lease ends (decide_override). */
    rc = experiment_set_status(s, e, ES_PAUSED);
    if (!rc) log_info("experiment %lld PAUSED by a user", (long long)e->id);
    return rc ? rc : state_persist_experiment(s, e, ticket);
  case EE_RESUME:
    if (e->status != ES_PAUSED) return -EINVAL;
    rc = experiment_set_status(s, e, ES_RUNNING);
    return rc ? rc : state_persist_experiment(s, e, ticket);
  case EE_REOPEN:
    /* An extend gave a finished experiment work again. */
    if (e->status != ES_TERMINATED || e->budget_spent) return 0;
    rc = experiment_set_status(s, e, ES_RUNNING);
    return rc ? rc : state_persist_experiment(s, e, ticket);
  }
  return -EINVAL;
}

/* The config to store: the submitted one with the searcher options in force
 * (spec->search_alg, where validate_experiment wrote today's defaults), so
 * that a reload replays what ran even after a default changes. *out is the
 * caller's. 0, -EINVAL (config_json is not a JSON object) or -ENOMEM. */
static int config_in_force(const char *config_json, const struct experiment_spec *spec,
                           char **out) {
  *out = NULL;
  if (!spec->search_alg) return (*out = strdup(config_json)) ? 0 : -ENOMEM;
  cJSON *cfg = cJSON_Parse(config_json), *sa = NULL;
  int rc = -ENOMEM;
  if (!cJSON_IsObject(cfg)) {
    rc = -EINVAL; /* validate_experiment parsed it: not out of memory either */
    goto out;
  }
  if (!(sa = cJSON_Duplicate(spec->search_alg, 1))) goto out;
  if (cJSON_GetObjectItemCaseSensitive(cfg, "search_alg")
          ? !cJSON_ReplaceItemInObjectCaseSensitive(cfg, "search_alg", sa)
          : !cJSON_AddItemToObject(cfg, "search_alg", sa)) {
    cJSON_Delete(sa);
    goto out;
  }
  rc = (*out = jsonout_print(cfg)) ? 0 : -ENOMEM;
out:
  cJSON_Delete(cfg);
  return rc;
}

int state_add_experiment(struct server *s, const char *config_json, struct experiment_spec *spec,
                         struct srv_experiment **out, uint64_t *ticket) {
  int64_t n = spec->num_trials;
  struct srv_experiment *e = calloc(1, sizeof *e); /* RUNNING */
  struct exp_op *op = NULL;
  if (!e) return -ENOMEM;
  int rc = -ENOMEM;
  if (!(e->name = strdup(spec->name))) goto fail;
  if ((rc = config_in_force(config_json, spec, &e->config))) goto fail;
  rc = -ENOMEM;
  rc = sched_create(&spec->sched, spec->mode, spec->seed, &e->sched);
  if (rc) goto fail;
  rc = -ENOMEM;
  if (state_grow((void ***)&s->exps, &s->capexps, s->nexps + 1)) goto fail;
  if (state_live_reserve(s, s->nlive + 1)) goto fail; /* the sync below cannot fail */
  e->id = s->nexps + 1;
  e->seed = spec->seed;
  e->created_at = clock_wall_s();
  e->updated_seq = ++s->seq;
  /* Nothing to run: over at once. */
  if (!n && (rc = experiment_set_status(s, e, ES_TERMINATED))) goto fail;
  /* The plan only: trials are made at lease time (state_create_trial). */
  e->num_trials = n;
  rc = -ENOMEM;
  if (!(op = state_exp_op_make(e, NULL, 0))) goto fail;
  /* The spec moves into the experiment; the caller's copy is emptied. */
  e->spec = *spec;
  memset(spec, 0, sizeof *spec);
  s->exps[s->nexps++] = e;
  state_live_sync(s, e); /* RUNNING ones are live (fair share) */
  *out = e;
  lease_wait_changed(s); /* held lease requests may take its first trials */
  return state_exp_op_enqueue(s, op, ticket);
fail:
  state_experiment_free(e);
  return rc;
}
