/* gang: a trial of several member processes, placed all or none on the
 * fewest workers, its member leases delivered and fenced, and any member's
 * loss ending the attempt of all (gang.h, docs/scheduling.md#gang-trials). */
#include "gang.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "lease_wait.h"
#include "log.h"

int gang_place(const struct gang_slot *slots, int nslots, int n, int *node_of) {
  if (n < 1) return -EINVAL;
  int *order = malloc((size_t)(nslots > 0 ? nslots : 1) * sizeof *order);
  if (!order) return -ENOMEM;
  /* Members are alike, so the fewest workers are the largest first. An
   * insertion sort keeps equal capacities in the caller's order. */
  for (int i = 0; i < nslots; i++) {
    int j = i;
    while (j > 0 && slots[order[j - 1]].cap < slots[i].cap) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = i;
  }
  int placed = 0, nodes = 0;
  for (int k = 0; k < nslots && placed < n; k++) {
    int64_t take = slots[order[k]].cap;
    if (take <= 0) break;
    if (take > n - placed) take = n - placed;
    for (int64_t j = 0; j < take; j++) node_of[placed++] = order[k];
    nodes++;
  }
  free(order);
  return placed == n ? nodes : -ENOSPC;
}

int64_t gang_capacity(const struct spec_resources *r, double cpu, double gpu, int64_t memory_mb,
                      int64_t limit) {
  int64_t cap = limit;
  /* The slack is only for sums of fractions (see state.c's fits). */
  if (r->cpu > 0) {
    double c = cpu > 1e-9 ? floor((cpu + 1e-9) / r->cpu) : 0;
    if (c < (double)cap) cap = (int64_t)c;
  }
  if (r->gpu > 0) {
    double g = gpu > 1e-9 ? floor((gpu + 1e-9) / r->gpu) : 0;
    if (g < (double)cap) cap = (int64_t)g;
  }
  if (r->memory_mb > 0 && memory_mb != INT64_MAX) {
    int64_t m = memory_mb > 0 ? memory_mb / r->memory_mb : 0;
    if (m < cap) cap = m;
  }
  return cap > 0 ? cap : 0;
}

/* Lost, gone or quarantined (quarantine.c: out of service): no member. */
static int gang_worker_usable(const struct srv_worker *w) {
  return w && !w->lost && !w->gone && !w->quarantine[0];
}

static int64_t gang_free_memory(const struct srv_worker *w) {
  return w->memory_mb > 0 ? w->memory_mb - w->used_memory_mb : INT64_MAX;
}

/* Members of r the usable workers hold when idle. */
static int64_t gang_fleet_capacity(struct server *s, const struct spec_resources *r) {
  int64_t total = 0;
  for (int64_t i = 0; i < s->nworkers; i++) {
    const struct srv_worker *w = s->workers[i];
    if (!gang_worker_usable(w)) continue;
    total += gang_capacity(r, w->cpu, w->gpu, w->memory_mb > 0 ? w->memory_mb : INT64_MAX,
                           r->num_workers);
  }
  return total;
}

int gang_lease(struct server *s, struct srv_trial *t, struct srv_worker *asking, double cpu,
               double gpu, int64_t memory_mb, uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  const struct spec_resources *r = &e->spec.resources;
  int n = (int)r->num_workers, ns = 0, rc = 0;
  struct gang_slot *slots = calloc((size_t)s->nworkers + 1, sizeof *slots);
  int *node_of = calloc((size_t)n, sizeof *node_of);
  struct srv_gang *g = calloc(1, sizeof *g + (size_t)n * sizeof g->m[0]);
  if (!slots || !node_of || !g) {
    rc = -ENOMEM;
    goto done;
  }
  /* The asking worker first: among workers that hold as many members, it
   * takes rank 0, whose lease its request answers. */
  if (gang_worker_usable(asking)) {
    int64_t fm = gang_free_memory(asking);
    if (memory_mb < fm) fm = memory_mb;
    slots[ns] = (struct gang_slot){asking->id, gang_capacity(r, cpu, gpu, fm, n)};
    if (slots[ns].cap > 0) ns++;
  }
  for (int64_t i = 0; i < s->nworkers; i++) {
    const struct srv_worker *w = s->workers[i];
    if (!gang_worker_usable(w) || w == asking) continue;
    slots[ns] =
        (struct gang_slot){w->id, gang_capacity(r, w->cpu - w->used_cpu, w->gpu - w->used_gpu,
                                                gang_free_memory(w), n)};
    if (slots[ns].cap > 0) ns++;
  }
  int nodes = gang_place(slots, ns, n, node_of);
  if (nodes < 0) {
    rc = nodes != -ENOSPC ? nodes : gang_fleet_capacity(s, r) < n ? -E2BIG : -ENOSPC;
    goto done;
  }
  /* Node ranks in the order the placement filled them (rank 0's first). */
  int node_rank_of_slot_last = -1, node_rank = -1;
  for (int k = 0; k < n; k++) {
    if (node_of[k] != node_rank_of_slot_last) {
      node_rank_of_slot_last = node_of[k];
      node_rank++;
    }
    g->m[k].worker_id = slots[node_of[k]].worker_id;
    g->m[k].node_rank = node_rank;
    g->m[k].local_rank = k > 0 && node_of[k - 1] == node_of[k] ? g->m[k - 1].local_rank + 1 : 0;
  }
  for (int k = n - 1; k >= 0; k--)
    g->m[k].local_world = k + 1 < n && node_of[k + 1] == node_of[k] ? g->m[k + 1].local_world
                                                                    : g->m[k].local_rank + 1;
  g->world = n;
  g->nnodes = nodes;
  struct trial_event_args a = {.worker = server_worker(s, g->m[0].worker_id)};
  if ((rc = state_trial_event(s, t, TE_LEASE, &a, ticket))) goto done;
  uint64_t deadline = clock_mono_ms() + (uint64_t)(s->opt.lease_timeout_s * 1000);
  for (int k = 0; k < n; k++) {
    g->m[k].deadline_ms = deadline;
    if (k > 0) state_charge_worker(server_worker(s, g->m[k].worker_id), r);
  }
  g->attempt = t->attempt;
  g->active = 1;
  free(t->gang);
  t->gang = g;
  g = NULL;
  e->gang_waiting_ms = 0;
  /* The other workers' held lease requests take their members. */
  lease_wait_changed(s);
  log_info("trial %lld (attempt %d): %d members on %d worker(s), rank 0 on worker %lld",
           (long long)t->id, t->attempt, n, nodes, (long long)t->worker_id);
done:
  free(slots);
  free(node_of);
  free(g);
  return rc;
}

void gang_release(struct server *s, struct srv_trial *t) {
  struct srv_gang *g = t->gang;
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  if (!g || !g->active) return;
  g->active = 0;
  if (!e) return;
  for (int k = 1; k < g->world; k++) {
    struct srv_worker *w = server_worker(s, g->m[k].worker_id);
    if (w) state_uncharge_worker(w, &e->spec.resources);
  }
}

/* t's placement of its current attempt, or NULL. */
static struct srv_gang *gang_current(const struct srv_trial *t) {
  struct srv_gang *g = t->gang;
  return t->status == TS_RUNNING && g && g->active && g->attempt == t->attempt ? g : NULL;
}

void gang_deliver(struct server *s, struct srv_worker *w, struct srv_trial **out, int *rank) {
  *out = NULL;
  *rank = 0;
  /* Every lease request asks: the live experiments only (a paused one's
   * members wait; an undelivered member's lease runs out). */
  for (int64_t i = 0; i < s->nlive; i++) {
    struct srv_experiment *e = s->live[i];
    if (!e || e->spec.resources.num_workers < 2 || !e->counts[TS_RUNNING]) continue;
    for (int64_t k = 0; k < e->ntrials; k++) {
      struct srv_trial *t = e->trials[k];
      struct srv_gang *g = gang_current(t);
      for (int r = 0; g && r < g->world; r++) {
        struct gang_member *m = &g->m[r];
        /* Ranks >= 1 start once they can reach rank 0. */
        if (m->worker_id != w->id || m->delivered || (r > 0 && !g->master_port)) continue;
        m->delivered = 1;
        m->unlisted_since_ms = 0;
        m->deadline_ms = clock_mono_ms() + (uint64_t)(s->opt.lease_timeout_s * 1000);
        *out = t;
        *rank = r;
        return;
      }
    }
  }
}

static int gang_addr_ok(const char *a) {
  size_t n = a ? strlen(a) : 0;
  if (n == 0 || n >= sizeof((struct srv_gang *)0)->master_addr) return 0;
  for (size_t i = 0; i < n; i++)
    if (!strchr("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.:-_%[]", a[i]))
      return 0;
  return 1;
}

int gang_rendezvous(struct server *s, struct srv_trial *t, const struct lease_token *l,
                    const char *addr, int port, char *why, size_t whylen) {
  if (state_check_fence(s, t, l, why, whylen) != FENCE_CURRENT) return -ESTALE;
  struct srv_gang *g = gang_current(t);
  if (!g) {
    snprintf(why, whylen, "trial %lld is not a gang trial", (long long)t->id);
    return -EINVAL;
  }
  if (!gang_addr_ok(addr) || port < 1 || port > 65535) {
    snprintf(why, whylen, "master_addr must be a host name or address and master_port 1..65535");
    return -EINVAL;
  }
  if (g->master_port) {
    if (g->master_port == port && !strcmp(g->master_addr, addr)) return 0; /* a retry */
    snprintf(why, whylen, "attempt %d of trial %lld already meets at %s:%d", t->attempt,
             (long long)t->id, g->master_addr, g->master_port);
    return -EEXIST;
  }
  snprintf(g->master_addr, sizeof g->master_addr, "%s", addr);
  g->master_port = port;
  lease_wait_changed(s); /* the other members' leases may go out now */
  return 0;
}

int gang_has_worker(const struct srv_trial *t, int64_t worker_id, int current) {
  const struct srv_gang *g = current ? gang_current(t) : t->gang;
  for (int r = 0; g && r < g->world; r++)
    if (g->m[r].worker_id == worker_id) return 1;
  return 0;
}

enum fence gang_check_member(struct server *s, struct srv_trial *t, const struct lease_token *l,
                             int rank, char *why, size_t whylen) {
  if (rank == 0) return state_check_fence(s, t, l, why, whylen);
  struct srv_gang *g = t->gang;
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  if (!g || rank < 0 || rank >= g->world || g->attempt != l->attempt ||
      g->m[rank].worker_id != l->worker_id) {
    snprintf(why, whylen, "trial %lld has no member rank %d under lease %lld:%d", (long long)t->id,
             rank, (long long)l->worker_id, l->attempt);
    return FENCE_STALE;
  }
  if (gang_current(t) && (e->status == ES_RUNNING || e->status == ES_PAUSED)) return FENCE_CURRENT;
  if (t->status != TS_RUNNING && t->lease_final && t->attempt == l->attempt &&
      clock_mono_ms() - t->lease_ended_ms <= STATE_FINAL_WINDOW_MS)
    return FENCE_FINAL;
  snprintf(why, whylen, "trial %lld is %s, attempt %d, not member rank %d of %lld:%d",
           (long long)t->id, trial_status_names[t->status], t->attempt, rank,
           (long long)l->worker_id, l->attempt);
  return FENCE_STALE;
}

/* How long a running member's worker may stay silent: one heartbeat
 * interval, in which it sends four (docs/worker.md#gang-members), not a
 * whole lease timeout. Every other member waits in its collectives for a
 * lost one, so the gang is requeued as soon as a member's worker misses
 * its heartbeats, and the others hear it at their next. */
static uint64_t gang_member_grace_ms(const struct server *s) {
  double g = s->opt.heartbeat_interval_s;
  if (g > s->opt.lease_timeout_s) g = s->opt.lease_timeout_s;
  return (uint64_t)(g * 1000);
}

int gang_heartbeat_member(struct server *s, struct srv_worker *w, struct srv_trial *t, int attempt,
                          int rank, uint64_t gen, uint64_t now_ms) {
  struct srv_gang *g = gang_current(t);
  if (!g || g->attempt != attempt || rank < 0 || rank >= g->world || g->m[rank].worker_id != w->id)
    return 0;
  struct gang_member *m = &g->m[rank];
  m->delivered = 1; /* a lost lease reply that its worker got after all */
  m->listed_gen = gen;
  m->unlisted_since_ms = 0;
  m->deadline_ms = now_ms + gang_member_grace_ms(s);
  return 1;
}

/* The attempt of every member ends: once, whichever member was lost. */
static int gang_end_attempt(struct server *s, struct srv_trial *t, const char *why,
                            uint64_t *ticket) {
  struct trial_event_args a = {.why_in = why};
  log_warn("trial %lld (attempt %d): %s: every member stops, back to PENDING", (long long)t->id,
           t->attempt, why);
  return state_trial_event(s, t, TE_REQUEUE, &a, ticket);
}

int gang_reconcile_worker(struct server *s, struct srv_worker *w, uint64_t gen, uint64_t now_ms,
                          uint64_t *ticket) {
  uint64_t grace = (uint64_t)(2 * s->opt.heartbeat_interval_s * 1000);
  int n = 0;
  for (int64_t i = 0; w->nrunning > 0 && i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    if (!e || e->spec.resources.num_workers < 2) continue;
    for (int64_t k = 0; e->counts[TS_RUNNING] > 0 && k < e->ntrials; k++) {
      struct srv_trial *t = e->trials[k];
      struct srv_gang *g = gang_current(t);
      for (int r = 1; g && r < g->world; r++) {
        struct gang_member *m = &g->m[r];
        if (m->worker_id != w->id || !m->delivered || m->listed_gen == gen) continue;
        if (!m->unlisted_since_ms) {
          m->unlisted_since_ms = now_ms;
          continue;
        }
        if (now_ms - m->unlisted_since_ms < grace) continue;
        char why[200];
        snprintf(why, sizeof why,
                 "member rank %d on worker %lld was not listed by its heartbeats "
                 "for %.1f s",
                 r, (long long)w->id, (double)(now_ms - m->unlisted_since_ms) / 1000);
        int rc = gang_end_attempt(s, t, why, ticket);
        if (rc) return rc;
        n++;
        break;
      }
    }
  }
  return n;
}

int gang_member_fail(struct server *s, struct srv_trial *t, const struct lease_token *l, int rank,
                     const char *error, char *why, size_t whylen, uint64_t *ticket) {
  enum fence f = gang_check_member(s, t, l, rank, why, whylen);
  if (f == FENCE_STALE) return -ESTALE;
  if (f == FENCE_FINAL) return 0; /* the attempt already ended: counted once */
  char msg[1024];
  snprintf(msg, sizeof msg, "member rank %d on worker %lld: %s", rank, (long long)l->worker_id,
           error && error[0] ? error : "failed");
  struct lease_token l0 = {t->worker_id, t->attempt};
  struct trial_event_args a = {.lease = &l0, .error = msg};
  int rc = state_trial_event(s, t, TE_FAIL, &a, ticket);
  if (rc == -ESTALE) snprintf(why, whylen, "%s", a.why);
  return rc;
}

int gang_member_release(struct server *s, struct srv_trial *t, const struct lease_token *l,
                        int rank, char *why, size_t whylen, uint64_t *ticket) {
  enum fence f = gang_check_member(s, t, l, rank, why, whylen);
  if (f == FENCE_STALE) return -ESTALE;
  if (f == FENCE_FINAL) return 0; /* the attempt already ended */
  char msg[200];
  snprintf(msg, sizeof msg, "member rank %d on worker %lld gave its lease back (no room there)",
           rank, (long long)l->worker_id);
  return gang_end_attempt(s, t, msg, ticket);
}

void gang_expire(struct server *s, uint64_t now_ms) {
  for (int64_t i = 0; i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    if (!e || e->spec.resources.num_workers < 2) continue;
    for (int64_t k = 0; e->counts[TS_RUNNING] > 0 && k < e->ntrials; k++) {
      struct srv_trial *t = e->trials[k];
      if (t->status != TS_RUNNING) continue;
      struct srv_gang *g = gang_current(t);
      char why[200] = "";
      if (!g) snprintf(why, sizeof why, "its gang's placement was not kept (a server restart)");
      for (int r = 0; g && !why[0] && r < g->world; r++)
        if (now_ms > g->m[r].deadline_ms)
          snprintf(why, sizeof why, "the lease of member rank %d on worker %lld expired (%s)", r,
                   (long long)g->m[r].worker_id,
                   g->m[r].delivered ? "its worker went silent" : "its worker never fetched it");
      if (!why[0]) continue;
      uint64_t ticket;
      if (gang_end_attempt(s, t, why, &ticket))
        log_error("gang expiry: cannot queue trial %lld", (long long)t->id);
    }
  }
}

int gang_pending_reason(struct server *s, const struct srv_experiment *e, char *buf, size_t n) {
  const struct spec_resources *r = &e->spec.resources;
  if (r->num_workers < 2) return 0;
  int64_t cap = gang_fleet_capacity(s, r);
  if (cap < r->num_workers)
    snprintf(buf, n,
             "needs %lld members of cpu %g, gpu %g, memory_mb %lld but the workers hold %lld",
             (long long)r->num_workers, r->cpu, r->gpu, (long long)r->memory_mb, (long long)cap);
  else
    snprintf(buf, n, "waiting for room for all %lld members", (long long)r->num_workers);
  return 1;
}

int gang_holds_back(struct server *s, struct srv_experiment *e, struct srv_worker *w,
                    uint64_t now_ms) {
  if (!e->gang_waiting_ms) {
    e->gang_waiting_ms = now_ms;
    return 0;
  }
  if (now_ms - e->gang_waiting_ms < (uint64_t)(s->opt.lease_timeout_s * 1000)) return 0;
  /* Only workers the gang could use wait for it with it. */
  const struct spec_resources *r = &e->spec.resources;
  return gang_capacity(r, w->cpu, w->gpu, w->memory_mb > 0 ? w->memory_mb : INT64_MAX, 1) > 0;
}
