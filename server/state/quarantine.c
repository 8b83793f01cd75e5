/* quarantine: see quarantine.h. The rules themselves (which attribution,
 * whether a retry elsewhere is due) are server/core/attribution.c; this
 * file gathers the facts from the model and carries the decisions out. */
#include "quarantine.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "attribution.h"
#include "lease_wait.h"
#include "log.h"
#include "state.h"

static uint32_t quarantine_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static int quarantine_in_service(const struct srv_worker *w) {
  return w && !w->gone && !w->lost && !w->quarantine[0] && w->secret[0];
}

/* Another worker in service that could run e's trials at all (its whole
 * capacity, not what is free now: a busy one frees up). */
static int quarantine_other_worker(struct server *s, const struct srv_experiment *e,
                                   const struct srv_worker *w) {
  const struct spec_resources *r = &e->spec.resources;
  for (int64_t i = 0; i < s->nworkers; i++) {
    const struct srv_worker *x = s->workers[i];
    if (!x || x == w || !quarantine_in_service(x)) continue;
    if (r->cpu > x->cpu + 1e-9 || r->gpu > x->gpu + 1e-9) continue;
    if (x->memory_mb > 0 && r->memory_mb > x->memory_mb) continue;
    return 1;
  }
  return 0;
}

/* Takes w out of service: why, persisted; the failures of its streak are
 * the machine's (each trial's attribution, and the count of those that
 * counted, while the trial has not ended); its RUNNING trials but `keep`
 * go back to PENDING. */
static int quarantine_put(struct server *s, struct srv_worker *w, const char *why,
                          const struct srv_trial *keep, uint64_t *ticket) {
  snprintf(w->quarantine, sizeof w->quarantine, "%s", why);
  log_warn("worker %lld (%s) quarantined: %s", (long long)w->id, w->name, w->quarantine);
  int rc = state_persist_worker(s, w, ticket);
  for (int i = 0; !rc && i < w->nrecent; i++) {
    struct worker_failure *f = &w->recent[i];
    struct srv_trial *t = server_trial(s, f->trial_id);
    if (!t || t->fail_worker_id != w->id) continue;
    t->attribution = ATTR_MACHINE;
    int open = t->status == TS_PENDING || t->status == TS_RUNNING || t->status == TS_PAUSED;
    if (f->counted && open && t->num_failures > 0) t->num_failures--;
    f->counted = 0;
    if (t != keep) rc = state_persist_trial(s, t, ticket);
  }
  char line[400];
  snprintf(line, sizeof line, "its worker was quarantined: %s", w->quarantine);
  for (int64_t j = 0; !rc && w->nrunning > 0 && j < s->ntrials; j++) {
    struct srv_trial *t = s->trials[j];
    if (!t || t == keep || t->status != TS_RUNNING || t->worker_id != w->id) continue;
    struct trial_event_args a = {.why_in = line};
    rc = state_trial_event(s, t, TE_REQUEUE, &a, ticket);
  }
  return rc;
}

/* w's streak is K long (K > 0) and another worker in service succeeds (its
 * last outcome was a success): the reason, or 0 when not. */
static int quarantine_streak_due(struct server *s, const struct srv_worker *w, char *why,
                                 size_t n) {
  int k = s->opt.quarantine_after;
  if (k <= 0 || w->fail_streak < k || w->quarantine[0]) return 0;
  for (int64_t i = 0; i < s->nworkers; i++) {
    const struct srv_worker *x = s->workers[i];
    if (!x || x == w || !quarantine_in_service(x) || x->nok == 0 || x->fail_streak) continue;
    const struct srv_trial *last =
        w->nrecent ? server_trial(s, w->recent[w->nrecent - 1].trial_id) : NULL;
    char sig[160] = "";
    if (last) attribution_signature(last->error, sig, sizeof sig);
    snprintf(why, n, "failed %d trials in a row (the last: %s) while worker %lld (%s) succeeded",
             w->fail_streak, sig[0] ? sig : "failed", (long long)x->id, x->name);
    return 1;
  }
  return 0;
}

/* A failure that may be the machine's on w's streak. */
static struct worker_failure *quarantine_push(struct srv_worker *w, int64_t trial_id) {
  if (w->nrecent == QUARANTINE_RECENT) {
    memmove(w->recent, w->recent + 1, (QUARANTINE_RECENT - 1) * sizeof *w->recent);
    w->nrecent--;
  }
  w->fail_streak++;
  struct worker_failure *f = &w->recent[w->nrecent++];
  *f = (struct worker_failure){.trial_id = trial_id};
  return f;
}

/* t's failure on w turned out to be the config's: off w's streak. */
static void quarantine_forget(struct srv_worker *w, int64_t trial_id) {
  for (int i = 0; w && i < w->nrecent; i++)
    if (w->recent[i].trial_id == trial_id) {
      memmove(w->recent + i, w->recent + i + 1, (size_t)(w->nrecent - i - 1) * sizeof *w->recent);
      w->nrecent--;
      if (w->fail_streak > 0) w->fail_streak--;
      return;
    }
}

int quarantine_on_fail(struct server *s, struct srv_trial *t, uint64_t now_ms, int *counts,
                       uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  struct srv_worker *w = server_worker(s, t->worker_id);
  char sig[256];
  attribution_signature(t->error, sig, sizeof sig);
  uint32_t h = quarantine_hash(sig);
  int64_t prev = t->fail_worker_id;
  struct attribution_in in = {
      .kind = attribution_kind(t->error),
      .had_result = t->nres > t->lease_nres,
      .worker_quarantined = w && w->quarantine[0],
      .same_elsewhere = prev && w && prev != w->id && t->fail_sig == h,
  };
  enum attribution a = attribution_decide(&in);
  int rc = 0;
  struct worker_failure *f = NULL;
  if (a == ATTR_CONFIG) quarantine_forget(server_worker(s, prev), t->id);
  if (a == ATTR_UNKNOWN && w) {
    /* Only a failure that may be the machine's makes a streak: a user
     * script's crash or a memory limit is the same on every machine. */
    f = quarantine_push(w, t->id);
    char why[256];
    t->fail_worker_id = w->id; /* quarantine_put looks at it */
    if (quarantine_streak_due(s, w, why, sizeof why)) rc = quarantine_put(s, w, why, t, ticket);
    if (w->quarantine[0]) a = ATTR_MACHINE, f = NULL; /* put cleared the streak's counts */
  }
  int retry =
      attribution_retry_elsewhere(a, t->retried_elsewhere, e && quarantine_other_worker(s, e, w));
  *counts = a != ATTR_MACHINE && !retry;
  if (f) f->counted = *counts;
  if (retry) {
    t->retried_elsewhere = 1;
    t->avoid_until_ms = now_ms + (uint64_t)(s->opt.lease_timeout_s * 1000);
  }
  t->attribution = a;
  t->fail_worker_id = w ? w->id : 0;
  t->fail_sig = h;
  return rc;
}

int quarantine_on_success(struct server *s, struct srv_trial *t, struct srv_worker *w,
                          uint64_t *ticket) {
  int rc = 0, k = s->opt.quarantine_after;
  if (w) {
    w->nok++;
    w->fail_streak = 0;
    w->nrecent = 0;
  }
  struct srv_worker *p = server_worker(s, t->fail_worker_id);
  if (p && p != w) {
    /* It failed on p and ended well here: p's failure. */
    if (t->attribution == ATTR_UNKNOWN) t->attribution = ATTR_MACHINE;
    int confirmed = 0;
    int64_t ids[2] = {0, 0};
    for (int i = 0; i < p->nrecent; i++) {
      if (p->recent[i].trial_id == t->id) p->recent[i].confirmed = 1;
      if (p->recent[i].confirmed) ids[confirmed++ % 2] = p->recent[i].trial_id;
    }
    if (k > 0 && !p->quarantine[0] && confirmed >= (k < 2 ? k : 2)) {
      char why[256];
      if (k < 2)
        snprintf(why, sizeof why, "trial %lld failed here and ended well on worker %lld (%s)",
                 (long long)t->id, (long long)(w ? w->id : 0), w ? w->name : "?");
      else
        snprintf(why, sizeof why,
                 "%d trials that failed here ended well on other workers (trials %lld and %lld)",
                 confirmed, (long long)ids[0], (long long)ids[1]);
      rc = quarantine_put(s, p, why, NULL, ticket);
    }
  }
  /* Another worker succeeds now: streaks that waited for that are due. */
  for (int64_t i = 0; !rc && w && k > 0 && i < s->nworkers; i++) {
    struct srv_worker *x = s->workers[i];
    char why[256];
    if (x && x != w && !x->gone && quarantine_streak_due(s, x, why, sizeof why))
      rc = quarantine_put(s, x, why, NULL, ticket);
  }
  return rc;
}

int quarantine_avoid(struct server *s, const struct srv_trial *t, const struct srv_worker *w,
                     uint64_t now_ms) {
  if (!t->retried_elsewhere || t->fail_worker_id != w->id || now_ms >= t->avoid_until_ms) return 0;
  const struct srv_experiment *e = server_experiment(s, t->experiment_id);
  return e && quarantine_other_worker(s, e, w);
}

int quarantine_release(struct server *s, struct srv_worker *w, uint64_t *ticket) {
  if (!w->quarantine[0]) return -EALREADY;
  log_info("worker %lld (%s) released from quarantine (%s)", (long long)w->id, w->name,
           w->quarantine);
  w->quarantine[0] = 0;
  w->fail_streak = 0;
  w->nrecent = 0;
  int rc = state_persist_worker(s, w, ticket);
  lease_wait_changed(s); /* its held lease requests may be served again */
  return rc;
}
