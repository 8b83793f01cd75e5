/* api_workers: register, heartbeat (answering which trials to stop), lease
 * (first pending trial that fits), list. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "auth.h"
#include "clock.h"
#include "gang.h"
#include "quarantine.h"
#include "workers.h"
#include "log.h"
#include "decide.h"

/* Reads {"cpu", "gpu", "memory_mb"}; each optional, numbers >= 0. */
int api_resources(const cJSON *o, const char *where, struct api_resp *resp, double *cpu,
                  double *gpu, int64_t *mem, int *has_mem) {
  if (!o || !cJSON_IsObject(o))
    return api_error(resp, 400, "invalid_body", where,
                     "%s must be an object like "
                     "{\"cpu\": 2, \"gpu\": 0, \"memory_mb\": 4096}",
                     where),
           -EINVAL;
  *has_mem = 0;
  for (const cJSON *c = o->child; c; c = c->next) {
    double *dst = NULL;
    if (!strcmp(c->string, "cpu"))
      dst = cpu;
    else if (!strcmp(c->string, "gpu"))
      dst = gpu;
    else if (strcmp(c->string, "memory_mb"))
      return api_error(resp, 400, "invalid_body", where,
                       "%s.%s: unknown field (cpu, gpu, "
                       "memory_mb)",
                       where, c->string),
             -EINVAL;
    if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble) || c->valuedouble < 0 ||
        c->valuedouble > 1e9)
      return api_error(resp, 400, "invalid_body", where, "%s.%s must be a number >= 0", where,
                       c->string),
             -EINVAL;
    if (dst)
      *dst = c->valuedouble;
    else {
      *mem = (int64_t)c->valuedouble;
      *has_mem = 1;
    }
  }
  return 0;
}

/* Registrations: a burst of this many at once (a cluster starting), then
 * this many a second. Anyone with the worker token may register, and every
 * registration may take trials: without a bound one token could add
 * thousands of fake workers in a second. */
#define API_REG_BURST 200.0
#define API_REG_PER_S 20.0
static struct auth_rate api_reg_rate; /* under the server's lock */

int api_worker_register(struct server *s, const struct api_req *req, struct api_resp *resp) {
  cJSON *b = api_body_object(req, resp, 0);
  if (!b) return 0;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
  double cpu = 1, gpu = 0;
  int64_t mem = 0;
  int has_mem, rc = 0;
  for (const cJSON *c = b->child; c; c = c->next)
    if (strcmp(c->string, "name") && strcmp(c->string, "resources") &&
        strcmp(c->string, "labels")) {
      rc = api_error(resp, 400, "invalid_body", c->string,
                     "%s: unknown field (name, resources, labels)", c->string);
      goto out;
    }
  /* labels: {"spot": bool} (docs/scheduling.md#spot-workers). */
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(b, "labels");
  const cJSON *spot = cJSON_GetObjectItemCaseSensitive(labels, "spot");
  if (labels && !cJSON_IsObject(labels)) {
    rc = api_error(resp, 400, "invalid_body", "labels", "labels must be an object");
    goto out;
  }
  for (const cJSON *c = labels ? labels->child : NULL; c; c = c->next)
    if (strcmp(c->string, "spot") || !cJSON_IsBool(c)) {
      rc = api_error(resp, 400, "invalid_body", "labels", "labels.%s: %s", c->string,
                     strcmp(c->string, "spot") ? "unknown label (spot)" : "must be true or false");
      goto out;
    }
  if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 255) {
    rc = api_error(resp, 400, "invalid_body", "name",
                   "name must be a string of 1 to 255 "
                   "characters");
    goto out;
  }
  if (api_resources(cJSON_GetObjectItemCaseSensitive(b, "resources"), "resources", resp, &cpu, &gpu,
                    &mem, &has_mem))
    goto out;
  const char *over = cpu > WORKERS_MAX_CPU                 ? "resources.cpu"
                     : gpu > WORKERS_MAX_GPU               ? "resources.gpu"
                     : (double)mem > WORKERS_MAX_MEMORY_MB ? "resources.memory_mb"
                                                           : NULL;
  if (over) {
    rc = api_error(resp, 400, "invalid_body", over,
                   "%s is more than one machine has (limits: "
                   "cpu %g, gpu %g, memory_mb %g)",
                   over, WORKERS_MAX_CPU, WORKERS_MAX_GPU, WORKERS_MAX_MEMORY_MB);
    goto out;
  }
  server_lock(s);
  double wait_s = 0;
  if (auth_rate_take(&api_reg_rate, API_REG_BURST, API_REG_PER_S, clock_mono_s(), &wait_s)) {
    server_unlock(s);
    rc = api_error(resp, 429, "too_many_registrations", req->path,
                   "more than %g workers registered at once (then %g a second are taken); "
                   "retry in %.1f s",
                   API_REG_BURST, API_REG_PER_S, wait_s);
    api_header(resp, "Retry-After", "%d", (int)wait_s + 1);
    goto out;
  }
  struct srv_worker *w = NULL;
  rc = workers_register(s, name->valuestring, cpu, gpu, mem, cJSON_IsTrue(spot), &w, &resp->ticket);
  server_unlock(s);
  if (rc) goto out;
  log_info("worker %lld registered: %s cpu %g gpu %g memory_mb %lld", (long long)w->id, w->name,
           cpu, gpu, (long long)mem);
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddNumberToObject(o, "id", (double)w->id) ||
      !cJSON_AddStringToObject(o, "secret", w->secret) ||
      !cJSON_AddNumberToObject(o, "heartbeat_interval_s", s->opt.heartbeat_interval_s) ||
      !cJSON_AddNumberToObject(o, "lease_timeout_s", s->opt.lease_timeout_s) ||
      /* This server holds a lease request that sends wait_ms (a long-poll):
       * a worker that reads no such field polls. */
      !cJSON_AddNumberToObject(o, "lease_wait_max_ms", LEASE_WAIT_MAX_MS)) {
    cJSON_Delete(o);
    rc = -ENOMEM;
    goto out;
  }
  rc = api_json(resp, 201, o);
out:
  cJSON_Delete(b);
  return rc;
}

static struct srv_worker *api_find_worker(struct server *s, const struct api_req *req,
                                          struct api_resp *resp) {
  struct srv_worker *w = workers_find(s, req->match->ids[0]);
  if (!w)
    api_error(resp, 404, "unknown_worker", req->path,
              "worker %lld is not registered: "
              "register again",
              (long long)req->match->ids[0]);
  return w;
}

static int api_is_id(const cJSON *c) {
  return c && cJSON_IsNumber(c) && c->valuedouble >= 1 && c->valuedouble < 9.2e18 &&
         c->valuedouble == (double)(int64_t)c->valuedouble;
}

#define API_STUCK_MAX 512 /* bytes of a heartbeat's "stuck" note */

int api_worker_heartbeat(struct server *s, const struct api_req *req, struct api_resp *resp) {
  cJSON *b = api_body_object(req, resp, 1), *out = NULL, *stop;
  struct workers_listed *listed = NULL;
  struct workers_stop *stops = NULL;
  int rc = 0;
  if (!b) return 0;
  const cJSON *running = cJSON_GetObjectItemCaseSensitive(b, "running");
  if (running && !cJSON_IsArray(running)) {
    rc = api_error(resp, 400, "invalid_body", "running",
                   "running must be an array of {\"id\": N, \"attempt\": A}");
    goto done;
  }
  /* v2 lists {id, attempt}; a bare id (v1) stands for "whatever attempt is
   * leased to me" and only renews. */
  int n = running ? cJSON_GetArraySize(running) : 0, i = 0;
  if (!(listed = calloc((size_t)n + 1, sizeof *listed)) ||
      !(stops = calloc((size_t)n + 1, sizeof *stops))) {
    rc = -ENOMEM;
    goto done;
  }
  for (const cJSON *c = running ? running->child : NULL; c; c = c->next, i++) {
    const cJSON *id = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "id") : c;
    const cJSON *at = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "attempt") : NULL;
    if (!api_is_id(id) || (cJSON_IsObject(c) && (!api_is_id(at) || at->valuedouble > INT32_MAX))) {
      char where[32];
      snprintf(where, sizeof where, "running[%d]", i);
      rc = api_error(resp, 400, "invalid_body", where,
                     "running must hold {\"id\": N, "
                     "\"attempt\": A} (integers >= 1)");
      goto done;
    }
    /* The worker's note that it cannot deliver this attempt's messages. */
    const cJSON *stuck = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "stuck") : NULL;
    if (stuck && (!cJSON_IsString(stuck) || !stuck->valuestring[0] ||
                  strlen(stuck->valuestring) > API_STUCK_MAX)) {
      char where[48];
      snprintf(where, sizeof where, "running[%d].stuck", i);
      rc = api_error(resp, 400, "invalid_body", where,
                     "stuck must be a non-empty string of at most %d bytes", API_STUCK_MAX);
      goto done;
    }
    /* A gang trial's member other than rank 0 (gang.h). */
    const cJSON *rank = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "rank") : NULL;
    if (rank &&
        (!cJSON_IsNumber(rank) || !(rank->valuedouble >= 0) || rank->valuedouble >= SPEC_GANG_MAX ||
         rank->valuedouble != (int)rank->valuedouble)) {
      char where[48];
      snprintf(where, sizeof where, "running[%d].rank", i);
      rc = api_error(resp, 400, "invalid_body", where, "rank must be an integer from 0 to %d",
                     SPEC_GANG_MAX - 1);
      goto done;
    }
    listed[i] =
        (struct workers_listed){(int64_t)id->valuedouble, at ? (int)at->valuedouble : 0, at != NULL,
                                stuck ? stuck->valuestring : NULL, rank ? rank->valueint : 0};
  }
  if (!(out = cJSON_CreateObject()) || !(stop = cJSON_AddArrayToObject(out, "stop")) ||
      !cJSON_AddNumberToObject(out, "lease_timeout_s", s->opt.lease_timeout_s) ||
      !cJSON_AddNumberToObject(out, "heartbeat_interval_s", s->opt.heartbeat_interval_s)) {
    rc = -ENOMEM;
    goto done;
  }
  server_lock(s);
  struct srv_worker *w = api_find_worker(s, req, resp);
  int nstops = 0;
  if (w) nstops = workers_heartbeat(s, w, listed, n, stops, NULL, clock_mono_ms(), &resp->ticket);
  if (nstops < 0) rc = nstops;
  for (int k = 0; !rc && k < nstops; k++) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(stop, o) ||
        !cJSON_AddNumberToObject(o, "id", (double)stops[k].trial_id) ||
        !cJSON_AddNumberToObject(o, "attempt", stops[k].attempt) ||
        !cJSON_AddStringToObject(o, "reason", stops[k].reason) ||
        (stops[k].rank > 0 && !cJSON_AddNumberToObject(o, "rank", stops[k].rank))) {
      if (o && !o->prev) cJSON_Delete(o); /* not in the array yet */
      rc = -ENOMEM;
    }
  }
  /* Whatever made a trial stoppable must be durable before we say so. */
  if (w && !rc && nstops) resp->ticket = commit_last_ticket(s->commit);
  server_unlock(s);
  if (w && !rc) {
    rc = api_json(resp, 200, out);
    out = NULL;
  }
done:
  free(listed);
  free(stops);
  cJSON_Delete(out);
  cJSON_Delete(b);
  return rc;
}

/* A gang member's place (docs/protocol.md#gang-trials): torchrun's
 * variables, and where rank 0 listens (null for rank 0 itself, which
 * chooses the port and reports it). */
static int api_add_gang(cJSON *o, const struct srv_trial *t, int rank) {
  const struct srv_gang *g = t->gang;
  if (!g) return 1;
  const struct gang_member *m = &g->m[rank];
  cJSON *j = cJSON_AddObjectToObject(o, "gang");
  return j && cJSON_AddNumberToObject(j, "rank", rank) &&
         cJSON_AddNumberToObject(j, "world_size", g->world) &&
         cJSON_AddNumberToObject(j, "node_rank", m->node_rank) &&
         cJSON_AddNumberToObject(j, "num_nodes", g->nnodes) &&
         cJSON_AddNumberToObject(j, "local_rank", m->local_rank) &&
         cJSON_AddNumberToObject(j, "local_world_size", m->local_world) &&
         cJSON_AddItemToObject(j, "master_addr",
                               g->master_port ? cJSON_CreateString(g->master_addr)
                                              : cJSON_CreateNull()) &&
         cJSON_AddItemToObject(j, "master_port",
                               g->master_port ? cJSON_CreateNumber(g->master_port)
                                              : cJSON_CreateNull());
}

static cJSON *api_lease_json(struct server *s, const struct srv_trial *t, int rank) {
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "trial"), *res;
  int ok =
      o && cJSON_AddNumberToObject(o, "id", (double)t->id) &&
      cJSON_AddNumberToObject(o, "experiment_id", (double)t->experiment_id) &&
      cJSON_AddStringToObject(o, "name", t->name) &&
      cJSON_AddItemToObject(o, "config", cJSON_Parse(t->config)) &&
      cJSON_AddItemToObject(o, "trainable", cJSON_Duplicate(e->spec.trainable, 1)) &&
      (res = cJSON_AddObjectToObject(o, "resources")) &&
      cJSON_AddNumberToObject(res, "cpu", e->spec.resources.cpu) &&
      cJSON_AddNumberToObject(res, "gpu", e->spec.resources.gpu) &&
      cJSON_AddNumberToObject(res, "memory_mb", (double)e->spec.resources.memory_mb) &&
      cJSON_AddItemToObject(o, "metric",
                            e->spec.has_metric ? cJSON_CreateString(e->spec.metric)
                                               : cJSON_CreateNull()) &&
      cJSON_AddItemToObject(o, "mode",
                            e->spec.has_metric
                                ? cJSON_CreateString(e->spec.mode == SPEC_MODE_MAX ? "max" : "min")
                                : cJSON_CreateNull()) &&
      cJSON_AddStringToObject(o, "time_attr", e->spec.sched.time_attr) &&
      cJSON_AddItemToObject(o, "max_t",
                            e->spec.sched.has_max_t ? cJSON_CreateNumber(e->spec.sched.max_t)
                                                    : cJSON_CreateNull()) &&
      /* Where the worker resumes: the checkpoint's iteration (after an
       * exploit the donor's, maybe behind the trial's own results),
       * else the last reported time value (a fresh start from 0). */
      cJSON_AddNumberToObject(o, "start_iteration",
                              t->has_checkpoint ? (double)t->checkpoint_iteration
                              : t->nres         ? floor(t->last_t)
                                                : 0) &&
      cJSON_AddBoolToObject(o, "has_checkpoint", t->has_checkpoint) &&
      cJSON_AddItemToObject(o, "checkpoint_iteration",
                            t->has_checkpoint ? cJSON_CreateNumber((double)t->checkpoint_iteration)
                                              : cJSON_CreateNull()) &&
      cJSON_AddNumberToObject(o, "start_time_total_s", state_checkpoint_time_total(s, e, t)) &&
      cJSON_AddNumberToObject(o, "attempt", t->attempt) && !api_add_objectives(o, &e->spec) &&
      !api_add_constraint_metrics(o, &e->spec) && api_add_gang(o, t, rank);
  if (!ok) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

/* What is left of a resource: never below zero, and no rounding dust from
 * sums of fractions (0.1 + 0.2 - 0.3). */
static double api_free_amount(double cap, double used) {
  double f = cap - used;
  return f < 1e-9 ? 0 : f;
}

/* Whether worker w has more of a resource free, by the leases this server
 * counts, than a lease request said (cpu, gpu; mem when has_mem). */
static int api_worker_has_more(const struct srv_worker *w, double cpu, double gpu, int64_t mem,
                               int has_mem) {
  const double eps = 1e-6;
  return api_free_amount(w->cpu, w->used_cpu) > cpu + eps ||
         api_free_amount(w->gpu, w->used_gpu) > gpu + eps ||
         (has_mem &&
          api_free_amount((double)w->memory_mb, (double)w->used_memory_mb) > (double)mem + eps);
}

cJSON *api_lease_reply(struct server *s, const struct srv_worker *w, const struct srv_trial *t,
                       int rank) {
  cJSON *o = api_lease_json(s, t, rank);
  if (o && t->gang)
    log_info("trial %lld member rank %d leased to worker %lld (attempt %d)", (long long)t->id, rank,
             (long long)w->id, t->attempt);
  else if (o)
    log_info("trial %lld leased to worker %lld (attempt %d, from iteration %g)", (long long)t->id,
             (long long)w->id, t->attempt, t->nres ? t->last_t : 0.0);
  return o;
}

int api_worker_lease(struct server *s, const struct api_req *req, struct api_resp *resp) {
  cJSON *b = api_body_object(req, resp, 1);
  int rc = 0;
  if (!b) return 0;
  double cpu = 1e9, gpu = 1e9;
  int64_t mem = 0;
  int has_mem = 0;
  const cJSON *free_o = cJSON_GetObjectItemCaseSensitive(b, "free");
  if (free_o && api_resources(free_o, "free", resp, &cpu, &gpu, &mem, &has_mem)) goto done;
  /* wait_ms: with nothing to lease now, hold the reply up to this long
   * until a trial may be leasable (lease_wait.h); the first try sets the
   * deadline, a held request tried again keeps it. */
  const cJSON *wait = cJSON_GetObjectItemCaseSensitive(b, "wait_ms");
  if (wait && (!cJSON_IsNumber(wait) || !(wait->valuedouble >= 0) ||
               wait->valuedouble > LEASE_WAIT_MAX_MS)) {
    api_error(resp, 400, "invalid_body", "wait_ms",
              "wait_ms must be a number of milliseconds from 0 to %d", LEASE_WAIT_MAX_MS);
    goto done;
  }
  uint64_t now = clock_mono_ms();
  uint64_t until = req->held_until_ms ? req->held_until_ms
                   : wait             ? now + (uint64_t)wait->valuedouble
                                      : 0;
  server_lock(s);
  uint64_t gen = lease_wait_gen(s), mark = 0;
  struct srv_worker *w = api_find_worker(s, req, resp);
  struct srv_trial *t = NULL;
  cJSON *o = NULL;
  /* A held request is no sign of life: a worker lost meanwhile (no
   * heartbeat) gets nothing from it (state_lease_again). */
  if (w && req->held_until_ms && w->lost) {
    until = 0;
  } else if (w) {
    /* A lease of this worker ended since the request was first held: the
     * worker has more free than the request says. Granted what its free
     * fits, or answered now (204), so that the worker asks again with all
     * it has rather than wait out the hold with a part of it. */
    if (req->held_until_ms && w->releases != req->held_mark) until = 0;
    mark = req->held_until_ms ? req->held_mark : w->releases;
    int rank = 0;
    if (!req->held_until_ms) workers_touch(w); /* asking is a sign of life (state_lease) */
    rc = state_lease_pick(s, w, cpu, gpu, mem, has_mem, &t, &rank, &resp->ticket);
    if (!rc && t && !(o = api_lease_reply(s, w, t, rank))) rc = -ENOMEM;
    /* Woken (a held request is tried again only when a trial may be
     * leasable) and nothing fits what it asked with, while its worker has
     * more free than that by this server's count: its leases ended before
     * it asked (a cancel, an expiry), as it still saw them running. 204 now,
     * so that the worker asks again with all it has, rather than wait out
     * the hold beside a trial it could run. Once a wake: a worker whose
     * own count is still behind asks with the same and is held again. */
    if (!rc && !t && req->held_until_ms && api_worker_has_more(w, cpu, gpu, mem, has_mem))
      until = 0;
  }
  server_unlock(s);
  if (w && !rc && !o && until > now) {
    resp->hold_until_ms = until;
    resp->hold_gen = gen;
    resp->hold_mark = mark;
  } else if (w && !rc) {
    rc = o ? api_json(resp, 200, o) : api_no_content(resp);
  }
done:
  cJSON_Delete(b);
  return rc;
}

/* The members of gang trial t on worker wid, each with its rank and what
 * it is charged (resources_per_trial, per member); none when t's placement
 * is not its running attempt's. Returns 0 when out of memory. */
static int api_worker_gang_members(struct server *s, const struct srv_trial *t, int64_t wid,
                                   cJSON *arr) {
  const struct srv_gang *g = t->gang;
  const struct srv_experiment *e = server_experiment(s, t->experiment_id);
  if (!e || !gang_has_worker(t, wid, 1)) return 1;
  const struct spec_resources *r = &e->spec.resources;
  for (int k = 0; k < g->world; k++) {
    if (g->m[k].worker_id != wid) continue;
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(arr, m)) {
      cJSON_Delete(m);
      return 0;
    }
    if (!cJSON_AddNumberToObject(m, "trial_id", (double)t->id) ||
        !cJSON_AddNumberToObject(m, "rank", k) || !cJSON_AddNumberToObject(m, "cpu", r->cpu) ||
        !cJSON_AddNumberToObject(m, "gpu", r->gpu) ||
        !cJSON_AddNumberToObject(m, "memory_mb", (double)r->memory_mb))
      return 0;
  }
  return 1;
}

cJSON *api_worker_json(struct server *s, const struct srv_worker *w) {
  cJSON *o = cJSON_CreateObject(), *res, *fr, *run;
  int ok =
      o && cJSON_AddNumberToObject(o, "id", (double)w->id) &&
      cJSON_AddStringToObject(o, "name", w->name) &&
      (res = cJSON_AddObjectToObject(o, "resources")) &&
      cJSON_AddNumberToObject(res, "cpu", w->cpu) && cJSON_AddNumberToObject(res, "gpu", w->gpu) &&
      cJSON_AddNumberToObject(res, "memory_mb", (double)w->memory_mb) &&
      (fr = cJSON_AddObjectToObject(o, "free")) &&
      cJSON_AddNumberToObject(fr, "cpu", api_free_amount(w->cpu, w->used_cpu)) &&
      cJSON_AddNumberToObject(fr, "gpu", api_free_amount(w->gpu, w->used_gpu)) &&
      cJSON_AddNumberToObject(fr, "memory_mb",
                              api_free_amount((double)w->memory_mb, (double)w->used_memory_mb)) &&
      (run = cJSON_AddArrayToObject(o, "running_trials")) &&
      cJSON_AddNumberToObject(o, "last_heartbeat", w->last_heartbeat) &&
      cJSON_AddStringToObject(o, "status",
                              w->gone == 2       ? "deregistered"
                              : w->gone          ? "pruned"
                              : w->quarantine[0] ? "quarantined"
                              : w->lost          ? "lost"
                                                 : "alive") &&
      /* docs/server.md#quarantine: why it gets no lease, or null */
      cJSON_AddItemToObject(o, "quarantine_reason",
                            w->quarantine[0] ? cJSON_CreateString(w->quarantine)
                                             : cJSON_CreateNull());
  cJSON *gm = ok ? cJSON_AddArrayToObject(o, "gang_members") : NULL;
  ok = ok && gm;
  /* Only a worker charged with running trials costs a scan of them. A gang
   * trial is listed under every worker that holds one of its members. */
  for (int64_t j = 0; ok && w->nrunning > 0 && j < s->ntrials; j++) {
    const struct srv_trial *t = s->trials[j];
    if (!t || t->status != TS_RUNNING) continue;
    if (t->worker_id == w->id || (t->gang && gang_has_worker(t, w->id, 1)))
      ok = cJSON_AddItemToArray(run, cJSON_CreateNumber((double)t->id));
    if (ok && t->gang) ok = api_worker_gang_members(s, t, w->id, gm);
  }
  cJSON *labels = ok ? cJSON_AddObjectToObject(o, "labels") : NULL;
  if (ok) ok = labels && cJSON_AddBoolToObject(labels, "spot", w->spot);
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* docs/protocol.md#pages: workers by id after the cursor; deregistered and
 * pruned workers are not listed. */
int api_worker_list(struct server *s, const struct api_req *req, struct api_resp *resp) {
  int64_t limit, after;
  if (api_page_args(req, resp, 100, &limit, &after)) return 0;
  cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "workers");
  int rc = arr ? 0 : -ENOMEM, more = 0;
  int64_t n = 0, last = after;
  server_lock(s);
  for (int64_t i = after < 0 ? 0 : after; !rc && i < s->nworkers; i++) {
    struct srv_worker *w = s->workers[i];
    if (!w || w->gone) continue;
    if (n == limit) {
      more = 1;
      break;
    }
    cJSON *o = api_worker_json(s, w);
    if (!o)
      rc = -ENOMEM;
    else
      cJSON_AddItemToArray(arr, o), n++, last = w->id;
  }
  server_unlock(s);
  if (!rc) rc = api_page_next(root, more, last);
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  return api_json(resp, 200, root);
}

/* A worker that stops cleanly says so and leaves the list. Its trials (a
 * drain released them already) go back to PENDING; its secret is revoked
 * (persisted empty: the row stays hidden after a restart) and it registers
 * anew when it starts again. */
int api_worker_deregister(struct server *s, const struct api_req *req, struct api_resp *resp) {
  int rc = 0;
  server_lock(s);
  struct srv_worker *w = api_find_worker(s, req, resp);
  if (w) rc = workers_deregister(s, w, &resp->ticket);
  server_unlock(s);
  if (!w || rc) return rc;
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddNumberToObject(o, "id", (double)req->match->ids[0]) ||
      !cJSON_AddStringToObject(o, "status", "deregistered")) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  return api_json(resp, 200, o);
}

/* An admin puts a quarantined worker back in service
 * (docs/server.md#quarantine); 409 not_quarantined when it is not. */
int api_worker_release_quarantine(struct server *s, const struct api_req *req,
                                  struct api_resp *resp) {
  int rc = 0;
  cJSON *o = NULL;
  server_lock(s);
  struct srv_worker *w = api_find_worker(s, req, resp);
  if (w) rc = quarantine_release(s, w, &resp->ticket);
  if (w && !rc && !(o = api_worker_json(s, w))) rc = -ENOMEM;
  server_unlock(s);
  if (rc == -EALREADY)
    return api_error(resp, 409, "not_quarantined", req->path, "worker %lld is not quarantined",
                     (long long)req->match->ids[0]);
  if (!w || rc) return rc;
  return api_json(resp, 200, o);
}

/* Every registered worker loses its secret at once, as a deregistration
 * does (its RUNNING trials go back to PENDING). With a new token file this
 * rotates the worker credentials: a worker that has only the old worker
 * token cannot register again (docs/server.md#security). */
int api_worker_revoke_all(struct server *s, const struct api_req *req, struct api_resp *resp) {
  (void)req;
  int rc = 0, n = 0;
  server_lock(s);
  for (int64_t i = 0; !rc && i < s->nworkers; i++) {
    struct srv_worker *w = s->workers[i];
    if (!w || !w->secret[0]) continue;
    rc = workers_deregister(s, w, &resp->ticket);
    n += !rc;
  }
  server_unlock(s);
  if (rc) return rc;
  log_info("revoked the secrets of %d worker(s)", n);
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddNumberToObject(o, "revoked", n)) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  return api_json(resp, 200, o);
}
