/* state: the model's shared machinery: init and free, a worker's resources
 * (charge, release), the lease scan (state_lease, fair share), lease
 * expiry and reconciliation, fencing, and a result's place in memory.
 * Status changes are state_trial.c's and state_experiment.c's; state_ops.c
 * carries each change to the commit thread; state_load.c rebuilds the model
 * at start. */
#include "state.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "constraint.h"
#include "events.h"
#include "gang.h"
#include "jsonout.h"
#include "log.h"
#include "quarantine.h"
#include "decide.h"
#include "secret.h"
#include "testhook.h"
#include "state_internal.h"
#include "state_preempt.h"
#include "validate.h"
#include "workers.h"

const char *const trial_status_names[TS_COUNT] = {"PENDING", "RUNNING", "PAUSED", "TERMINATED",
                                                  "ERROR"};
const char *const exp_status_names[ES_COUNT] = {"RUNNING", "TERMINATED", "CANCELLED", "PAUSED"};

int state_status_parse(const char *const *names, int n, const char *s) {
  for (int i = 0; i < n; i++)
    if (s && !strcmp(names[i], s)) return i;
  return -1;
}

char *state_strdup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* Grows an array of pointers to hold index id-1. */
int state_grow(void ***arr, int64_t *cap, int64_t need) {
  if (need <= *cap) return 0;
  int64_t nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void **p = realloc(*arr, (size_t)nc * sizeof *p);
  if (!p) return -ENOMEM;
  *arr = p;
  *cap = nc;
  return 0;
}

int state_init(struct server *s) {
  /* A test build may shorten the delays of bounded memory (testhook.h). */
  const char *d = TESTHOOK(TESTHOOK_COMPACT_DELAY_MS);
  s->compact_delay_ms = d ? strtoull(d, NULL, 10) : STATE_COMPACT_DELAY_MS;
  d = TESTHOOK(TESTHOOK_COLD_DELAY_MS);
  s->cold_delay_ms = d ? strtoull(d, NULL, 10) : STATE_COLD_DELAY_MS;
  int rc = events_new(&s->events);
  if (rc) return rc;
  if ((rc = lease_wait_new(&s->lease_waits)) || pthread_mutex_init(&s->lock, NULL)) {
    lease_wait_free(s->lease_waits);
    s->lease_waits = NULL;
    events_free(s->events);
    s->events = NULL;
    return -ENOMEM;
  }
  return 0;
}

void state_trial_free(struct srv_trial *t) {
  if (!t) return;
  free(t->name);
  free(t->config);
  free(t->error);
  free(t->reason);
  free(t->exploit_old_config);
  free(t->gang);
  state_trial_history_free(t);
  free(t);
}

void state_experiment_free(struct srv_experiment *e) {
  if (!e) return;
  free(e->name);
  free(e->config);
  free(e->end_reason);
  free(e->notes);
  free(e->tags);
  free(e->unusable);
  for (int i = 0; i < e->nkeys; i++) free(e->keys[i]);
  free(e->trials); /* the trials themselves are s->trials' */
  searcher_free(e->searcher);
  sched_free(e->sched);
  validate_spec_free(&e->spec);
  free(e);
}

void state_free(struct server *s) {
  for (int64_t i = 0; i < s->ntrials; i++) state_trial_free(s->trials[i]);
  for (int64_t i = 0; i < s->nexps; i++) state_experiment_free(s->exps[i]);
  for (int64_t i = 0; i < s->nworkers; i++) {
    if (s->workers[i]) free(s->workers[i]->name);
    free(s->workers[i]);
  }
  free(s->trials);
  free(s->exps);
  free(s->workers);
  state_live_free(s);
  state_compact_free(s);
  state_cold_free(s);
  events_free(s->events);
  s->events = NULL;
  lease_wait_free(s->lease_waits);
  s->lease_waits = NULL;
  pthread_mutex_destroy(&s->lock);
}

struct srv_worker *state_worker_by_secret(struct server *s, const char *tok) {
  char *end = NULL;
  if (!tok || *tok < '1' || *tok > '9') return NULL;
  errno = 0;
  long long id = strtoll(tok, &end, 10);
  if (errno || !end || *end != '.') return NULL;
  struct srv_worker *w = server_worker(s, id);
  /* A worker from before secrets existed has none: nothing matches it. */
  if (!w || !w->secret[0] || !secret_equal(tok, w->secret)) return NULL;
  return w;
}

void state_charge_worker(struct srv_worker *w, const struct spec_resources *r) {
  w->used_cpu += r->cpu;
  w->used_gpu += r->gpu;
  /* A worker that declared no memory is not accounted for it: charging it
   * would only show a negative free amount. */
  if (w->memory_mb > 0) w->used_memory_mb += r->memory_mb;
  w->nrunning++;
}

void state_charge(struct server *s, struct srv_worker *w, struct srv_trial *t) {
  state_charge_worker(w, &server_experiment(s, t->experiment_id)->spec.resources);
  t->worker_id = w->id;
  t->lease_worker_id = w->id;
}

void state_uncharge_worker(struct srv_worker *w, const struct spec_resources *r) {
  w->releases++;
  if (w->nrunning > 0) w->nrunning--;
  if (w->nrunning == 0) {
    /* Nothing left on it: exact zeros, whatever the sums of fractions
     * left behind in rounding. */
    w->used_cpu = w->used_gpu = 0;
    w->used_memory_mb = 0;
  } else {
    w->used_cpu -= r->cpu;
    w->used_gpu -= r->gpu;
    if (w->memory_mb > 0) w->used_memory_mb -= r->memory_mb;
    if (w->used_cpu < 1e-9) w->used_cpu = 0;
    if (w->used_gpu < 1e-9) w->used_gpu = 0;
    if (w->used_memory_mb < 0) w->used_memory_mb = 0;
  }
}

void state_release(struct server *s, struct srv_trial *t) {
  struct srv_worker *w = server_worker(s, t->worker_id);
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  gang_release(s, t); /* the other members of a gang end with rank 0's lease */
  /* worker_id is cleared below, so a second release of the same lease (an
   * end after a requeue, say) frees nothing twice. */
  if (w && e) state_uncharge_worker(w, &e->spec.resources);
  t->worker_id = 0;
}

/* The slack is only for sums of fractions (0.1 + 0.2): a resource the
 * worker has none of left never fits a trial that asks for any of it. */
static int fits(double need, double have) {
  if (need <= 0) return 1;
  return have > 1e-9 && need <= have + 1e-9;
}

/* No PENDING trial: the scheduler chooses (ARCHITECTURE.md#schedulers,
 * decide_choose): a PAUSED trial to resume, a new trial from the searcher,
 * or nothing now. 0 with *out (NULL: nothing), or an error (the experiment
 * is skipped). */
static int state_lease_choose(struct server *s, struct srv_experiment *e, int can_new,
                              struct srv_trial **out, uint64_t *ticket) {
  enum sched_choice_kind kind = SCHED_CHOOSE_WAIT;
  *out = NULL;
  int rc = decide_choose(s, e, can_new, &kind, out, ticket);
  /* Nothing to run or resume may mean the end (PAUSED trials end with it). */
  if (!rc && !*out && kind == SCHED_CHOOSE_WAIT)
    rc = state_experiment_event(s, e, EE_MAYBE_END, NULL, ticket);
  if (rc || *out || kind != SCHED_CHOOSE_NEW || !can_new) return rc;
  rc = state_create_trial(s, e, out);
  if (rc == -ENOENT) {
    /* The searcher has nothing more: the experiment may be over. */
    rc = state_experiment_event(s, e, EE_MAYBE_END, NULL, ticket);
  } else if (rc) {
    log_error("experiment %lld: cannot create trial %lld (%d)", (long long)e->id,
              (long long)e->ntrials, rc);
  }
  return rc;
}

int state_lease(struct server *s, struct srv_worker *w, double cpu, double gpu, int64_t memory_mb,
                int has_memory, struct srv_trial **out, uint64_t *ticket) {
  workers_touch(w);
  return state_lease_again(s, w, cpu, gpu, memory_mb, has_memory, out, ticket);
}

int state_lease_pick(struct server *s, struct srv_worker *w, double cpu, double gpu,
                     int64_t memory_mb, int has_memory, struct srv_trial **out, int *rank,
                     uint64_t *ticket) {
  *rank = 0;
  gang_deliver(s, w, out, rank);
  if (*out) return 0;
  int rc = state_lease_again(s, w, cpu, gpu, memory_mb, has_memory, out, ticket);
  if (!rc && *out && (*out)->gang) gang_deliver(s, w, out, rank);
  return rc;
}

int state_complete_and_lease(struct server *s, struct srv_trial *t, struct trial_event_args *args,
                             double cpu, double gpu, int64_t memory_mb, int has_memory,
                             struct srv_trial **next, int *rank, uint64_t *ticket) {
  *next = NULL;
  *rank = 0;
  int rc = state_trial_event(s, t, TE_COMPLETE, args, ticket);
  if (rc || args->fence != FENCE_CURRENT) return rc;
  struct srv_worker *w = workers_find(s, args->lease->worker_id);
  if (!w) return 0;
  return state_lease_pick(s, w, cpu, gpu, memory_mb, has_memory, next, rank, ticket);
}

int state_lease_again(struct server *s, struct srv_worker *w, double cpu, double gpu,
                      int64_t memory_mb, int has_memory, struct srv_trial **out, uint64_t *ticket) {
  *out = NULL;
  if (w->lost || w->quarantine[0]) return 0; /* quarantine.h: out of service */
  /* The server's own accounting caps what the worker says is free. */
  double fc = w->cpu - w->used_cpu, fg = w->gpu - w->used_gpu;
  if (cpu < fc) fc = cpu;
  if (gpu < fg) fg = gpu;
  int64_t fm = INT64_MAX;
  if (w->memory_mb > 0) fm = w->memory_mb - w->used_memory_mb;
  if (has_memory && memory_mb < fm) fm = memory_mb;
  /* docs/protocol.md#fair-share: the live experiments with work and room,
   * tried in the fair order (state_live.c). A copy: an experiment that ends
   * while it is tried leaves s->live, not this list. */
  if (s->capfair < s->nlive) {
    struct srv_experiment **f = realloc(s->fair, (size_t)s->nlive * sizeof *f);
    if (!f) {
      log_error("lease: no memory for %lld live experiments", (long long)s->nlive);
      return -ENOMEM;
    }
    s->fair = f;
    s->capfair = s->nlive;
  }
  int64_t nc = 0;
  uint64_t now_ms = clock_mono_ms();
  for (int64_t i = 0; i < s->nlive; i++) {
    struct srv_experiment *e = s->live[i];
    if (e->status != ES_RUNNING) continue;
    if (e->budget_spent) continue; /* time_budget_s spent: nothing more is leased */
    int can_new = !e->searcher_exhausted && e->ntrials < e->num_trials;
    if (!e->counts[TS_PENDING] && !can_new && !e->counts[TS_PAUSED]) continue;
    if (e->spec.max_concurrent_trials > 0 && e->counts[TS_RUNNING] >= e->spec.max_concurrent_trials)
      continue;
    const struct spec_resources *r = &e->spec.resources;
    /* A gang's members may go to other workers: gang_lease decides. */
    if (r->num_workers > 1) {
      s->fair[nc++] = e;
      continue;
    }
    /* Every trial of an experiment needs the same: one check per experiment. */
    if (!fits(r->cpu, fc) || !fits(r->gpu, fg) || r->memory_mb > fm) continue;
    s->fair[nc++] = e;
  }
  for (int64_t k = 0; k < nc; k++) {
    state_fair_pick(s->fair, nc, k);
    struct srv_experiment *e = s->fair[k];
    if (e->status != ES_RUNNING) continue;
    int can_new = !e->searcher_exhausted && e->ntrials < e->num_trials;
    struct srv_trial *t = NULL;
    while (!t && e->pending_cursor < e->ntrials) {
      t = e->trials[e->pending_cursor];
      if (t->status != TS_PENDING) {
        t = NULL;
        e->pending_cursor++;
      }
    }
    /* A trial being retried elsewhere passes its failed worker by: the next
     * PENDING one, or a new one, goes to it instead. */
    for (int64_t c = e->pending_cursor + 1; t && quarantine_avoid(s, t, w, now_ms);) {
      t = NULL;
      while (!t && c < e->ntrials)
        if ((t = e->trials[c++])->status != TS_PENDING) t = NULL;
    }
    /* A scheduler that waits (HyperBand's halving) passes to the next. */
    if (!t && state_lease_choose(s, e, can_new, &t, ticket)) continue;
    if (!t) continue;
    if (e->spec.resources.num_workers > 1) {
      /* All members or none; t stays PENDING when they do not fit. */
      int rc = gang_lease(s, t, w, fc, fg, fm, ticket);
      if (!rc) {
        *out = t;
        return 0;
      }
      if (rc == -ENOSPC && gang_holds_back(s, e, w, clock_mono_ms())) return 0;
      if (rc == -ENOSPC || rc == -E2BIG) continue;
      return rc;
    }
    /* A spot worker leaves a precious trial to a free non-spot one: it
     * takes the next PENDING trial that is not, else a new one. */
    for (int64_t j = t->idx + 1; t && state_preempt_defer(s, w, e, t); j++) {
      t = NULL;
      while (!t && j < e->ntrials)
        if (e->trials[j]->status == TS_PENDING)
          t = e->trials[j];
        else
          j++;
      if (!t && can_new) {
        can_new = 0; /* once */
        if (state_lease_choose(s, e, 1, &t, ticket)) t = NULL;
      }
    }
    if (!t) continue;
    struct trial_event_args a = {.worker = w};
    int rc = state_trial_event(s, t, TE_LEASE, &a, ticket);
    if (rc) return rc;
    *out = t;
    return 0;
  }
  return 0;
}

void state_pending_reason(struct server *s, const struct srv_trial *t, char *buf, size_t n) {
  buf[0] = 0;
  if (t->status != TS_PENDING) return;
  state_experiment_pending_reason(s, server_experiment(s, t->experiment_id), buf, n);
}

void state_experiment_pending_reason(struct server *s, const struct srv_experiment *e, char *buf,
                                     size_t n) {
  const struct spec_resources *r = &e->spec.resources;
  buf[0] = 0;
  if (e->status != ES_RUNNING) {
    snprintf(buf, n, "experiment is %s", exp_status_names[e->status]);
    return;
  }
  double max_cpu = -1, max_gpu = -1;
  int64_t max_mem = -1;
  int alive = 0, mem_unbounded = 0;
  for (int64_t i = 0; i < s->nworkers; i++) {
    const struct srv_worker *w = s->workers[i];
    if (!w || w->lost) continue;
    alive++;
    if (w->cpu > max_cpu) max_cpu = w->cpu;
    if (w->gpu > max_gpu) max_gpu = w->gpu;
    if (w->memory_mb == 0)
      mem_unbounded = 1;
    else if (w->memory_mb > max_mem)
      max_mem = w->memory_mb;
  }
  if (!alive)
    snprintf(buf, n, "no worker is connected");
  else if (!fits(r->cpu, max_cpu))
    snprintf(buf, n, "needs cpu %g but the largest worker has %g", r->cpu, max_cpu);
  else if (!fits(r->gpu, max_gpu))
    snprintf(buf, n, "needs gpu %g but the largest worker has %g", r->gpu, max_gpu);
  else if (!mem_unbounded && r->memory_mb > max_mem)
    snprintf(buf, n, "needs memory_mb %lld but the largest worker has %lld",
             (long long)r->memory_mb, (long long)max_mem);
  else if (e->spec.max_concurrent_trials > 0 &&
           e->counts[TS_RUNNING] >= e->spec.max_concurrent_trials)
    snprintf(buf, n, "max_concurrent_trials (%lld) reached",
             (long long)e->spec.max_concurrent_trials);
  else if (!gang_pending_reason(s, e, buf, n))
    snprintf(buf, n, "waiting for free resources");
}

void state_renew_lease(struct server *s, struct srv_trial *t, uint64_t now_ms) {
  t->lease_deadline_ms = now_ms + (uint64_t)(s->opt.lease_timeout_s * 1000);
}

/* Two heartbeat intervals: how long a RUNNING trial may go unlisted by its
 * worker's heartbeats (a lost lease reply) before it is requeued. */
static uint64_t state_unlisted_grace_ms(const struct server *s) {
  return (uint64_t)(2 * s->opt.heartbeat_interval_s * 1000);
}

int state_reconcile_worker(struct server *s, struct srv_worker *w, uint64_t gen, uint64_t now_ms,
                           uint64_t *ticket) {
  uint64_t grace = state_unlisted_grace_ms(s);
  int n = 0;
  for (int64_t i = 0; w->nrunning > 0 && i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    for (int64_t k = 0; e->counts[TS_RUNNING] > 0 && k < e->ntrials; k++) {
      struct srv_trial *t = e->trials[k];
      if (t->status != TS_RUNNING || t->worker_id != w->id || t->listed_gen == gen) continue;
      if (!t->unlisted_since_ms) {
        t->unlisted_since_ms = now_ms;
        continue;
      }
      if (now_ms - t->unlisted_since_ms < grace) continue;
      log_warn("trial %lld (attempt %d) not listed by worker %lld for %.1f s: back to PENDING",
               (long long)t->id, t->attempt, (long long)w->id,
               (double)(now_ms - t->unlisted_since_ms) / 1000);
      char why[160];
      snprintf(why, sizeof why, "its worker's heartbeats did not list it for %.1f s",
               (double)(now_ms - t->unlisted_since_ms) / 1000);
      struct trial_event_args a = {.why_in = why};
      int rc = state_trial_event(s, t, TE_REQUEUE, &a, ticket);
      if (rc) return rc;
      n++;
    }
  }
  return n;
}

/* The daemon ticks a few times a second. A longer gap means the server
 * itself stood still (SIGSTOP, a VM pause, swapping, a debugger) and could
 * not hear anyone: its workers' silence over that gap is its own, so every
 * deadline moves by the gap instead of expiring healthy leases at once. A
 * worker heartbeats more often than the lease timeout L, every H, so a gap
 * under L - H cannot make a live worker miss its lease by itself; from
 * min(L / 2, L - H) on the gap is forgiven, with a margin. A worker that
 * is really gone expires that much later. */
static void state_forgive_stall(struct server *s, uint64_t now_ms) {
  uint64_t last = s->last_tick_ms;
  s->last_tick_ms = now_ms;
  double l = s->opt.lease_timeout_s * 1000, h = s->opt.heartbeat_interval_s * 1000;
  double stall = l / 2 < l - h ? l / 2 : l - h;
  if (now_ms <= last || (double)(now_ms - last) <= stall) return;
  /* A stamp made after the last tick (a heartbeat just before the stall)
   * moves to now at most: never into the future. */
  uint64_t gap = now_ms - last, renewed = now_ms + (uint64_t)l;
#define STATE_PUSH(x, cap) ((x) = (x) + gap < (cap) ? (x) + gap : (cap))
  for (int64_t i = 0; i < s->nworkers; i++)
    if (s->workers[i]) STATE_PUSH(s->workers[i]->last_seen_ms, now_ms);
  for (int64_t i = 0; i < s->ntrials; i++) {
    struct srv_trial *t = s->trials[i];
    if (!t || t->status != TS_RUNNING) continue;
    if (t->lease_deadline_ms) STATE_PUSH(t->lease_deadline_ms, renewed);
    if (t->unlisted_since_ms) STATE_PUSH(t->unlisted_since_ms, now_ms);
  }
#undef STATE_PUSH
  log_warn("the server stood still for %.1f s (more than %.1f s between its ticks): leases and "
           "heartbeats are counted from now, not expired for the time it could not hear them",
           (double)gap / 1000, stall / 1000);
}

void state_expire_leases(struct server *s, uint64_t now_ms) {
  uint64_t limit = (uint64_t)(s->opt.lease_timeout_s * 1000);
  state_forgive_stall(s, now_ms);
  lease_wait_expire(s, now_ms); /* held lease requests whose wait is over */
  for (int64_t i = 0; i < s->nworkers; i++) {
    struct srv_worker *w = s->workers[i];
    if (!w || w->lost || now_ms - w->last_seen_ms <= limit) continue;
    w->lost = 1;
    log_warn("worker %lld (%s) missed heartbeats for %.1f s: lost (its %lld trial lease(s) "
             "expire on their own)",
             (long long)w->id, w->name, s->opt.lease_timeout_s, (long long)w->nrunning);
  }
  workers_prune(s, now_ms); /* lost past --worker-retention-s */
  if (now_ms < s->next_expiry_ms) return;
  s->next_expiry_ms = now_ms + 100;
  state_compact_due(s, now_ms); /* bounded memory: ended trials' histories */
  state_cold_due(s, now_ms);    /* and finished experiments' trials */
  uint64_t grace = state_unlisted_grace_ms(s);
  for (int64_t i = 0; i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    for (int64_t k = 0; e->counts[TS_RUNNING] > 0 && k < e->ntrials; k++) {
      struct srv_trial *t = e->trials[k];
      if (t->status != TS_RUNNING) continue;
      if (!t->lease_deadline_ms) {
        /* Loaded RUNNING: a restart counts as a heartbeat
         * (docs/protocol.md#a-restart-counts-as-a-heartbeat). */
        state_renew_lease(s, t, now_ms);
        continue;
      }
      const char *why;
      if (now_ms > t->lease_deadline_ms)
        why = "lease expired";
      else if (t->unlisted_since_ms && now_ms - t->unlisted_since_ms >= grace)
        why = "not listed by its worker's heartbeats";
      else
        continue;
      int64_t wid = t->worker_id;
      uint64_t ticket;
      /* The trial's history says whether its worker was lost (silent for a
       * lease timeout) or only this lease went unrenewed. */
      const struct srv_worker *lw = server_worker(s, wid);
      char line[200];
      if (now_ms > t->lease_deadline_ms && lw && lw->lost)
        snprintf(line, sizeof line, "lease expired: its worker was lost (no heartbeat for %.0f s)",
                 (double)(now_ms - lw->last_seen_ms) / 1000);
      else
        snprintf(line, sizeof line, "%s", why);
      struct trial_event_args a = {.why_in = line};
      if (state_trial_event(s, t, TE_REQUEUE, &a, &ticket))
        log_error("lease expiry: cannot queue trial %lld", (long long)t->id);
      else
        log_warn("trial %lld (worker %lld, attempt %d): %s, back to PENDING", (long long)t->id,
                 (long long)wid, t->attempt, why);
    }
  }
  gang_expire(s, now_ms); /* a gang's members other than rank 0 */
}

int state_parse_lease(const char *h, struct lease_token *out) {
  if (!h) return -EINVAL;
  int64_t v[2] = {0, 0};
  const char *p = h;
  for (int k = 0; k < 2; k++) {
    if (*p < '0' || *p > '9') return -EINVAL;
    while (*p >= '0' && *p <= '9') {
      if (v[k] > (INT32_MAX - 9) / 10) return -EINVAL; /* both fit an int */
      v[k] = v[k] * 10 + (*p++ - '0');
    }
    if (k == 0 && *p++ != ':') return -EINVAL;
  }
  if (*p || v[0] < 1 || v[1] < 1) return -EINVAL;
  out->worker_id = v[0];
  out->attempt = (int)v[1];
  return 0;
}

enum fence state_check_fence(struct server *s, struct srv_trial *t, const struct lease_token *l,
                             char *why, size_t whylen) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  /* A paused experiment's running trials still hold their leases (their next
   * result is answered stop, their lease's end pauses them). */
  if (t->status == TS_RUNNING && (e->status == ES_RUNNING || e->status == ES_PAUSED) &&
      t->worker_id == l->worker_id && t->attempt == l->attempt) {
    state_renew_lease(s, t, clock_mono_ms());
    return FENCE_CURRENT;
  }
  enum fence f = t->status != TS_RUNNING && t->lease_final && t->lease_worker_id == l->worker_id &&
                         t->attempt == l->attempt &&
                         clock_mono_ms() - t->lease_ended_ms <= STATE_FINAL_WINDOW_MS
                     ? FENCE_FINAL
                     : FENCE_STALE;
  /* Said for FENCE_FINAL too: a write that needs the current lease (a new
   * result) refuses it with the same words. */
  if (why && whylen) {
    if (t->status == TS_RUNNING)
      snprintf(why, whylen, "trial %lld is leased to %lld:%d, not %lld:%d", (long long)t->id,
               (long long)t->worker_id, t->attempt, (long long)l->worker_id, l->attempt);
    else if (f == FENCE_STALE && t->lease_final && t->lease_worker_id == l->worker_id &&
             t->attempt == l->attempt)
      snprintf(why, whylen,
               "trial %lld is %s: the final uploads of lease %lld:%d were taken for %llu s "
               "after its end",
               (long long)t->id, trial_status_names[t->status], (long long)l->worker_id, l->attempt,
               STATE_FINAL_WINDOW_MS / 1000);
    else
      snprintf(why, whylen, "trial %lld is %s, not leased to %lld:%d", (long long)t->id,
               trial_status_names[t->status], (long long)l->worker_id, l->attempt);
  }
  return f;
}

int state_key_index(const struct srv_experiment *e, const char *key) {
  for (int i = 0; i < e->nkeys; i++)
    if (!strcmp(e->keys[i], key)) return i;
  return -1;
}

/* Appends every numeric (or null) field of a result to the trial's series. */
static int state_note_series(struct srv_experiment *e, struct srv_trial *t, const cJSON *result) {
  for (const cJSON *c = result->child; c; c = c->next) {
    if (!cJSON_IsNumber(c) && !cJSON_IsNull(c)) continue;
    int k = state_key_index(e, c->string);
    if (k < 0) {
      if (e->nkeys == EXP_MAX_KEYS) {
        e->keys_overflow = 1;
        continue;
      }
      if (!(e->keys[e->nkeys] = strdup(c->string))) return -ENOMEM;
      k = e->nkeys++;
    }
    if (k >= t->nseries) {
      struct series *ns = realloc(t->series, (size_t)(k + 1) * sizeof *ns);
      if (!ns) return -ENOMEM;
      memset(ns + t->nseries, 0, (size_t)(k + 1 - t->nseries) * sizeof *ns);
      t->series = ns;
      t->nseries = k + 1;
    }
    struct series *sr = &t->series[k];
    if (sr->n == sr->cap) {
      uint32_t nc = sr->cap ? sr->cap * 2 : 4;
      double *v = realloc(sr->v, nc * sizeof *v);
      if (!v) return -ENOMEM;
      sr->v = v;
      sr->cap = nc;
    }
    sr->v[sr->n++] = cJSON_IsNumber(c) ? c->valuedouble : NAN;
  }
  return 0;
}

void state_trial_next_generation(struct srv_trial *t) {
  t->generation++;
  t->gen_start = t->nres;
  t->max_t_seen = -INFINITY;
  /* The next lease resumes from the stored checkpoint (the donor's after an
   * exploit, its own after a pause): no checkpoint may claim to be past it
   * before this generation's results say so. */
  t->max_iter_seen = t->has_checkpoint ? (double)t->checkpoint_iteration : 0;
}

/* The time_total_s of the stored result the trial's checkpoint was labelled
 * with (its training_iteration, else its time value: the worker's label), so
 * a resumed attempt continues the trial's clock instead of restarting it.
 * From memory: the per-key series line up with the results only when every
 * result had the key, which the worker's filling-in makes the rule; else the
 * last result, when it is the checkpoint's. 0 when none is known. */
double state_checkpoint_time_total(struct server *s, const struct srv_experiment *e,
                                   const struct srv_trial *t) {
  if (!t->has_checkpoint) return 0;
  /* A donor's checkpoint (PBT exploit): its time, copied with it. */

  if (t->has_ck_time_total) return t->ck_time_total_s;
  if (t->nres == 0) return 0;
  /* Bounded memory: an ended trial (a PBT donor) answers from SQLite. */
  if (t->compact) return state_compact_ck_time_total(s, t);
  double ck = (double)t->checkpoint_iteration;
  int kt = state_key_index(e, "time_total_s"), ki = state_key_index(e, "training_iteration");
  const struct series *tt = kt >= 0 && kt < t->nseries ? &t->series[kt] : NULL;
  const struct series *it = ki >= 0 && ki < t->nseries ? &t->series[ki] : NULL;
  int labels_aligned = (it && it->n == t->nres) || !it || it->n == 0;
  if (tt && tt->n == t->nres && labels_aligned) {
    for (size_t i = t->nres; i-- > 0;) {
      double label = it && it->n ? it->v[i] : t->ts[i];
      if (label == ck) return isfinite(tt->v[i]) ? tt->v[i] : 0;
    }
  }
  cJSON *last = t->last_result ? cJSON_Parse(t->last_result) : NULL;
  const cJSON *li = cJSON_GetObjectItemCaseSensitive(last, "training_iteration");
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(last, "time_total_s");
  double label = cJSON_IsNumber(li) ? li->valuedouble : t->last_t;
  double v = label == ck && cJSON_IsNumber(lt) && isfinite(lt->valuedouble) ? lt->valuedouble : 0;
  cJSON_Delete(last);
  return v;
}

int state_note_result(struct server *s, struct srv_trial *t, double time_value, char decision,
                      const cJSON *result, const char *json, int64_t seq) {
  if (t->compact) return -EINVAL; /* an ended trial's history is SQLite's: hydrate first */
  if (t->nres == t->capres) {
    size_t nc = t->capres ? t->capres * 2 : 8;
    double *ts = realloc(t->ts, nc * sizeof *ts);
    if (!ts) return -ENOMEM;
    t->ts = ts;
    char *d = realloc(t->decisions, nc);
    if (!d) return -ENOMEM;
    t->decisions = d;
    int64_t *q = realloc(t->seqs, nc * sizeof *q);
    if (!q) return -ENOMEM;
    t->seqs = q;
    t->capres = nc;
  }
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  const cJSON *m =
      e->spec.has_metric ? cJSON_GetObjectItemCaseSensitive(result, e->spec.metric) : NULL;
  if (m && (cJSON_IsNumber(m) || cJSON_IsNull(m))) {
    if (t->nvals == t->capvals) {
      size_t nc = t->capvals ? t->capvals * 2 : 8;
      double *v = realloc(t->values, nc * sizeof *v);
      if (!v) return -ENOMEM;
      t->values = v;
      t->capvals = nc;
    }
    double v = cJSON_IsNumber(m) ? m->valuedouble : NAN;
    t->values[t->nvals++] = v;
    t->has_last_value = 1;
    t->last_value = v;
  }
  if (state_note_series(e, t, result)) return -ENOMEM;
  t->violation = constraint_of_result(&e->spec, result);
  char *copy = strdup(json);
  if (!copy) return -ENOMEM;
  /* The checkpoint label the worker uses: training_iteration, else the
   * time value. */
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(result, "training_iteration");
  double iv = cJSON_IsNumber(it) ? it->valuedouble : time_value;
  if (t->nres == 0 || iv > t->max_iter_seen) t->max_iter_seen = iv;
  free(t->last_result);
  t->last_result = copy;
  t->ts[t->nres] = time_value;
  t->decisions[t->nres] = decision;
  t->seqs[t->nres] = seq;
  if (t->nres == 0) t->first_seq = seq; /* bounded memory: its results' seq range */
  t->last_seq = seq;
  t->nres++;
  t->last_t = time_value;
  if (t->nres == t->gen_start + 1 || time_value > t->max_t_seen) t->max_t_seen = time_value;
  if (seq > t->updated_seq) t->updated_seq = seq;
  return 0;
}
