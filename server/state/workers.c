/* workers: the worker registry (workers.h). */
#include "workers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"
#include "decide.h"
#include "events.h"
#include "gang.h"
#include "log.h"
#include "state.h"

/* The id lets a request find the worker without a scan; the hex part is what
 * is compared (constant time, state_worker_by_secret). */
static int workers_new_secret(int64_t id, char *out, size_t cap) {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    got += (size_t)n;
  }
  int k = snprintf(out, cap, "%lld.", (long long)id);
  for (size_t i = 0; i < sizeof raw && k > 0 && (size_t)k + 2 < cap; i++)
    k += snprintf(out + k, cap - (size_t)k, "%02x", raw[i]);
  return 0;
}

int workers_register(struct server *s, const char *name, double cpu, double gpu, int64_t memory_mb,
                     int spot, struct srv_worker **out, uint64_t *ticket) {
  if (s->nworkers == s->capworkers) {
    int64_t nc = s->capworkers ? s->capworkers * 2 : 16;
    struct srv_worker **p = realloc(s->workers, (size_t)nc * sizeof *p);
    if (!p) return -ENOMEM;
    s->workers = p;
    s->capworkers = nc;
  }
  struct srv_worker *w = calloc(1, sizeof *w);
  if (!w || !(w->name = strdup(name))) {
    free(w);
    return -ENOMEM;
  }
  w->id = s->nworkers + 1;
  int rc = workers_new_secret(w->id, w->secret, sizeof w->secret);
  if (rc) {
    free(w->name);
    free(w);
    return rc;
  }
  w->cpu = cpu;
  w->gpu = gpu;
  w->memory_mb = memory_mb;
  w->spot = spot != 0;
  w->registered_at = w->last_heartbeat = clock_wall_s();
  w->last_seen_ms = clock_mono_ms();
  s->workers[s->nworkers++] = w;
  *out = w;
  return state_persist_worker(s, w, ticket);
}

struct srv_worker *workers_find(struct server *s, int64_t id) {
  struct srv_worker *w = server_worker(s, id);
  return w && w->gone != 2 ? w : NULL;
}

void workers_touch(struct srv_worker *w) {
  w->last_heartbeat = clock_wall_s();
  w->last_seen_ms = clock_mono_ms();
  if (w->lost) log_info("worker %lld (%s) is back", (long long)w->id, w->name);
  w->lost = 0;
  w->gone = 0;
}

int workers_heartbeat(struct server *s, struct srv_worker *w, const struct workers_listed *listed,
                      int n, struct workers_stop *stops, int *requeued, uint64_t now_ms,
                      uint64_t *ticket) {
  workers_touch(w);
  uint64_t gen = ++s->hb_gen;
  int nstops = 0, rc = 0;
  for (int i = 0; !rc && i < n; i++) {
    struct srv_trial *t = server_trial(s, listed[i].trial_id);
    int attempt = listed[i].has_attempt ? listed[i].attempt : t ? t->attempt : 0;
    const char *why = "not_leased";
    if (listed[i].rank > 0) {
      /* A gang's other member: renewed while its attempt runs. */
      if (t && gang_heartbeat_member(s, w, t, attempt, listed[i].rank, gen, now_ms)) continue;
      if (t && (t->status == TS_TERMINATED || t->status == TS_ERROR)) why = "ended";
    } else if (t && t->status == TS_RUNNING && t->worker_id == w->id && t->attempt == attempt) {
      /* Listed by its lessee: the lease is renewed. */
      t->listed_gen = gen;
      if (t->gang) gang_heartbeat_member(s, w, t, attempt, 0, gen, now_ms); /* rank 0 */
      t->unlisted_since_ms = 0;
      state_renew_lease(s, t, now_ms);
      /* Its worker cannot deliver what it has of this attempt (the server
       * answers, but refuses for now): said once per attempt on the trial,
       * where `ctune trial` and the dashboard show it. */
      if (listed[i].stuck && t->stuck_noted != attempt) {
        char why[600];
        snprintf(why, sizeof why, "worker %lld (%s) %s", (long long)w->id, w->name,
                 listed[i].stuck);
        if ((rc = decide_event(s, t, "undelivered", why, NULL, ticket))) break;
        t->stuck_noted = attempt;
        log_warn("trial %lld: %s", (long long)t->id, why);
      }
      /* Its experiment is paused: it stops now (a trial that reports
       * rarely would run on until its next result), and pauses with its
       * checkpoint when this lease ends. */
      if (server_experiment(s, t->experiment_id)->status != ES_PAUSED) continue;
      if ((rc = decide_pause_lease(s, t, ticket))) break;
      why = "paused";
    } else if (t && (t->status == TS_TERMINATED || t->status == TS_ERROR)) {
      struct srv_experiment *e = server_experiment(s, t->experiment_id);
      why = e->status == ES_CANCELLED ? "cancelled" : "ended";
    }
    stops[nstops++] = (struct workers_stop){listed[i].trial_id, attempt, why, listed[i].rank};
  }
  if (rc) return rc;
  /* The other direction: what the server has RUNNING here and the worker
   * does not run (a lost lease reply) goes back to PENDING. */
  int back = state_reconcile_worker(s, w, gen, now_ms, ticket);
  if (back < 0) return back;
  int members = gang_reconcile_worker(s, w, gen, now_ms, ticket);
  if (members < 0) return members;
  back += members;
  if (requeued) *requeued = back;
  return nstops;
}

int workers_deregister(struct server *s, struct srv_worker *w, uint64_t *ticket) {
  int rc = 0;
  for (int64_t j = 0; !rc && w->nrunning > 0 && j < s->ntrials; j++) {
    struct srv_trial *t = s->trials[j];
    if (t && t->status == TS_RUNNING && t->worker_id == w->id) {
      struct trial_event_args a = {.why_in = "its worker stopped (deregistered)"};
      rc = state_trial_event(s, t, TE_REQUEUE, &a, ticket);
    }
  }
  if (rc) return rc;
  w->gone = 2;
  w->secret[0] = '\0';
  lease_wait_changed(s); /* its held lease requests end (unknown worker) */
  rc = state_persist_worker(s, w, ticket);
  if (!rc) events_note(s, EV_WORKER, w->id, 0, NULL);
  if (!rc) log_info("worker %lld (%s) deregistered", (long long)w->id, w->name);
  return rc;
}

void workers_prune(struct server *s, uint64_t now_ms) {
  double keep_ms = s->opt.worker_retention_s > 0 ? s->opt.worker_retention_s * 1000 : 3600e3;
  for (int64_t i = 0; i < s->nworkers; i++) {
    struct srv_worker *w = s->workers[i];
    if (!w || w->gone || !w->lost || w->nrunning > 0) continue;
    if ((double)(now_ms - w->last_seen_ms) < keep_ms) continue;
    w->gone = 1;
    events_note(s, EV_WORKER, w->id, 0, NULL);
    log_info("worker %lld (%s) lost for %g s: pruned from the list", (long long)w->id, w->name,
             s->opt.worker_retention_s);
  }
}
