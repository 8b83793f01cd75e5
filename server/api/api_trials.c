/* api_trials: one trial, its results (report with ASHA's decision, read back),
 * complete, fail with retries, release, checkpoint and log storage. */
#include <errno.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "api.h"
#include "gang.h"
#include "clock.h"
#include "log.h"
#include "decide.h"
#include "utf8.h"
#include "workers.h"

static struct srv_trial *api_find_trial(struct server *s, const struct api_req *req,
                                        struct api_resp *resp) {
  int64_t id = req->match->ids[0];
  struct srv_trial *t = state_trial_ref(s, id); /* a cold experiment's is read back */
  /* A trial of an experiment startup could not use: its tombstone keeps
   * the experiment's id. */
  const char *why = NULL;
  if (!t && id >= 1 && id <= s->ntrials) {
    int64_t eid = 0;
    if (s->trials[id - 1])
      eid = s->trials[id - 1]->experiment_id;
    else if (store_trial_experiment(s->store, id, &eid))
      eid = 0; /* an empty slot */
    why = server_unusable(s, eid);
  }
  if (why)
    api_error(resp, 409, "unusable", req->path, "%s", why);
  else if (!t)
    api_error(resp, 404, "not_found", req->path, "trial %lld does not exist", (long long)id);
  return t;
}

int api_trial_get(struct server *s, const struct api_req *req, struct api_resp *resp) {
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  int64_t id = t ? t->id : 0;
  cJSON *o = t ? api_trial_json(s, t) : NULL;
  server_unlock(s);
  if (!t) return 0;
  if (!o) return -ENOMEM;
  /* The decisions on this trial and its attempts, oldest first. */
  cJSON *ev = NULL, *att = NULL;
  int rc = api_pareto_rank_add(s, id, o);
  if (!rc) rc = decide_events_json(s, id, &ev, &att);
  int in = !rc && cJSON_AddItemToObject(o, "events", ev);
  if (!in) cJSON_Delete(ev);
  if (rc || !in || !cJSON_AddItemToObject(o, "attempts", att)) {
    cJSON_Delete(att);
    cJSON_Delete(o);
    return rc ? rc : -ENOMEM;
  }
  return api_json(resp, 200, o);
}

static int api_add_plain(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  (void)seq;
  (void)trial_id;
  cJSON *v = cJSON_Parse(data);
  if (!v) return -ENOMEM;
  cJSON_AddItemToArray(ctx, v);
  return 0;
}

int api_trial_results(struct server *s, const struct api_req *req, struct api_resp *resp) {
  /* docs/protocol.md#pages: in report order, 1000 a page by default; the
   * cursor is the index after the page (results are only appended). */
  int64_t limit, after;
  if (api_page_args(req, resp, 1000, &limit, &after)) return 0;
  int64_t *seqs = NULL;
  size_t n = 0, total = 0;
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  int64_t id = t ? t->id : 0, gen = t ? t->generation : 0;
  size_t gen_start = t ? t->gen_start : 0;
  size_t from = t && (uint64_t)after < t->nres ? (size_t)after : t ? t->nres : 0;
  if (t) {
    total = t->nres;
    n = total - from < (uint64_t)limit ? total - from : (size_t)limit;
  }
  /* Bounded memory: a compact trial's results are a range of SQLite's. */
  int compact = t && t->compact;
  int64_t eid = t ? t->experiment_id : 0, first_seq = t ? t->first_seq : 0;
  int64_t last_seq = t ? t->last_seq : 0;
  if (t && n && !compact && (seqs = malloc(n * sizeof *seqs)))
    memcpy(seqs, t->seqs + from, n * sizeof *seqs);
  int oom = t && n && !compact && !seqs;
  server_unlock(s);
  if (!t || oom) return oom ? -ENOMEM : 0;
  /* The rows exist once everything queued before this read is committed. */
  commit_flush(s->commit);
  int rc = 0;
  cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "results");
  if (!arr)
    rc = -ENOMEM;
  else if (compact && n)
    rc = store_trial_results(s->store, eid, id, first_seq, last_seq, (int64_t)from, (int64_t)n,
                             api_add_plain, arr);
  else if (n)
    rc = store_results_by_seq(s->store, seqs, n, api_add_plain, arr);
  free(seqs);
  if (!rc && !cJSON_AddNumberToObject(root, "trial_id", (double)id)) rc = -ENOMEM;
  /* Every generation's results are listed, in report order; the trial's
   * current generation (PBT exploits applied) and the index of its first
   * result tell the latest ones apart. */
  if (!rc && (!cJSON_AddNumberToObject(root, "generation", (double)gen) ||
              !cJSON_AddNumberToObject(root, "generation_start", (double)gen_start)))
    rc = -ENOMEM;
  if (!rc) rc = api_page_next(root, from + n < total, (int64_t)(from + n));
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  return api_json(resp, 200, root);
}

/* The lease a trial-scoped write names (X-Ctune-Lease: W:A); a 400
 * missing_lease when it is absent or malformed. */
static int api_lease(const struct api_req *req, struct api_resp *resp, struct lease_token *l) {
  if (!state_parse_lease(req->header(req->conn, "X-Ctune-Lease"), l)) return 0;
  api_error(resp, 400, "missing_lease", "X-Ctune-Lease",
            "trial writes need the header X-Ctune-Lease: <worker_id>:<attempt> (the "
            "attempt from the lease reply)");
  return -EINVAL;
}

/* A gang member's rank (X-Ctune-Rank: R, docs/protocol.md#gang-trials);
 * absent: 0 (rank 0, or a trial of one process). A 400 when malformed. */
static int api_rank(const struct api_req *req, struct api_resp *resp, int *rank) {
  const char *h = req->header(req->conn, "X-Ctune-Rank");
  char *end = NULL;
  long v = h ? strtol(h, &end, 10) : 0;
  *rank = (int)v;
  if (!h || (end != h && !*end && v >= 0 && v < SPEC_GANG_MAX && h[0] >= '0' && h[0] <= '9'))
    return 0;
  api_error(resp, 400, "invalid_rank", "X-Ctune-Rank",
            "X-Ctune-Rank must be an integer from 0 to %d", SPEC_GANG_MAX - 1);
  return -EINVAL;
}

/* 409 not_leased: nothing of the request was stored or counted. What made
 * the lease stale may still be queued: the reply waits until it is durable.
 * For results the body also says "decision": "stop". */
static int api_not_leased(struct server *s, struct api_resp *resp, const char *path,
                          const char *why, int with_stop) {
  cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
  if (!e || !cJSON_AddStringToObject(e, "code", "not_leased") ||
      !cJSON_AddStringToObject(e, "message", why) || !cJSON_AddStringToObject(e, "path", path) ||
      (with_stop && !cJSON_AddStringToObject(root, "decision", "stop"))) {
    cJSON_Delete(root);
    return -ENOMEM;
  }
  int rc = api_json(resp, 409, root);
  resp->ticket = commit_last_ticket(s->commit);
  return rc;
}

/* A result is a flat object of numbers (null allowed: NaN). */
static int api_check_result(const cJSON *r, const char *time_attr, struct api_resp *resp,
                            double *t) {
  if (!cJSON_IsObject(r))
    return api_error(resp, 400, "invalid_result", "",
                     "a result is a flat JSON object of "
                     "numbers"),
           -EINVAL;
  if (!r->child)
    return api_error(resp, 400, "invalid_result", "", "a result needs at least '%s'", time_attr),
           -EINVAL;
  for (const cJSON *c = r->child; c; c = c->next) {
    if (!cJSON_IsNumber(c) && !cJSON_IsNull(c) && !cJSON_IsBool(c))
      return api_error(resp, 400, "invalid_result", c->string,
                       "%s: a result holds only numbers (null and booleans allowed)", c->string),
             -EINVAL;
  }
  const cJSON *tv = cJSON_GetObjectItemCaseSensitive(r, time_attr);
  if (!tv || !cJSON_IsNumber(tv) || !isfinite(tv->valuedouble) || tv->valuedouble < 0)
    return api_error(resp, 400, "invalid_result", time_attr,
                     "%s: the time attribute must be a finite number >= 0", time_attr),
           -EINVAL;
  *t = tv->valuedouble;
  return 0;
}

#define API_MAX_BATCH 1000

/* The results body: one object, or an array of them (a batch). NULL after
 * filling a 400. */
static cJSON *api_results_body(const struct api_req *req, struct api_resp *resp) {
  size_t i = 0;
  while (i < req->body_len && (req->body[i] == ' ' || req->body[i] == '\t' ||
                               req->body[i] == '\r' || req->body[i] == '\n'))
    i++;
  if (i == req->body_len || req->body[i] != '[') return api_body_object(req, resp, 0);
  cJSON *a = api_body_json(req, resp);
  if (!a) return NULL;
  int n = cJSON_GetArraySize(a);
  if (n < 1 || n > API_MAX_BATCH) {
    cJSON_Delete(a);
    api_error(resp, 400, "invalid_result", "", "a batch holds 1 to %d results, not %d",
              API_MAX_BATCH, n);
    return NULL;
  }
  return a;
}

/* POST /trials/{id}/results: one result or a batch, fenced. Replays (a time
 * value already stored) answer their stored decision whatever the lease; a
 * new result needs the trial's current lease, else nothing of the request is
 * stored (409 not_leased, "decision": "stop"). A batch is stored in one hold
 * of the lock: one transaction. */
int api_trial_report(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct lease_token l;
  if (api_lease(req, resp, &l)) return 0;
  cJSON *body = api_results_body(req, resp);
  if (!body) return 0;
  int batch = cJSON_IsArray(body), n = batch ? cJSON_GetArraySize(body) : 1, rc = 0;
  /* One result (nearly every report): no allocation for its arrays. */
  double tv1;
  char dec1;
  const cJSON *rs1;
  double *tvs = n == 1 ? &tv1 : malloc((size_t)n * sizeof *tvs);
  char *dec = n == 1 ? &dec1 : malloc((size_t)n);
  const cJSON **rs = n == 1 ? &rs1 : malloc((size_t)n * sizeof *rs);
  cJSON *o = NULL;
  if (!tvs || !dec || !rs) {
    rc = -ENOMEM;
    goto out_unlocked;
  }
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  if (!t) goto out;
  struct srv_experiment *e = server_experiment(s, t->experiment_id);
  /* Every result is checked before any is stored: one bad result refuses
   * the whole batch. */
  int i = 0;
  for (const cJSON *r = batch ? body->child : body; r; r = batch ? r->next : NULL, i++) {
    if (api_check_result(r, e->spec.sched.time_attr, resp, &tvs[i])) goto out;
    rs[i] = r;
  }
  struct trial_event_args a = {
      .lease = &l, .results = rs, .time_values = tvs, .nresults = n, .decisions = dec};
  rc = state_trial_event(s, t, TE_RESULTS, &a, &resp->ticket);
  if (rc == -ESTALE) {
    rc = api_not_leased(s, resp, req->path, a.why, 1);
    goto out;
  }
  if (rc) goto out;
  /* A replayed decision must be durable before it is repeated. */
  if (a.replayed) resp->ticket = commit_last_ticket(s->commit);
  if (!batch) {
    rc = api_json_text(resp, 200, api_decision_json(dec[0] == 's'));
    goto out;
  }
  o = cJSON_CreateObject();
  cJSON *arr = o && batch ? cJSON_AddArrayToObject(o, "decisions") : NULL;
  int ok = o && (!batch || arr);
  for (int k = 0; ok && batch && k < n; k++)
    ok = cJSON_AddItemToArray(arr, cJSON_CreateString(dec[k] == 's' ? "stop" : "continue"));
  ok = ok && cJSON_AddStringToObject(o, "decision", dec[n - 1] == 's' ? "stop" : "continue");
  rc = ok ? api_json(resp, 200, o) : -ENOMEM;
  if (!ok) cJSON_Delete(o);
out:
  server_unlock(s);
out_unlocked:
  if (n != 1) {
    free(tvs);
    free(dec);
    free(rs);
  }
  cJSON_Delete(body);
  return rc;
}

struct blob_op;
static struct blob_op *api_log_blob(const char *text, size_t len);
static int api_log_enqueue(struct server *s, struct blob_op *op, const struct srv_trial *t,
                           const struct lease_token *l, int rank, uint64_t *ticket);
static void blob_op_free(void *arg);

/* The log tail an end carries ("log": the trial's latest output, what PUT
 * .../logs would send): *out NULL when absent, a 400 naming "log" when it
 * is not a string. */
static int api_end_log(const cJSON *body, struct api_resp *resp, struct blob_op **out) {
  const cJSON *log = cJSON_GetObjectItemCaseSensitive(body, "log");
  *out = NULL;
  if (!log) return 0;
  if (!cJSON_IsString(log)) {
    api_error(resp, 400, "invalid_body", "log",
              "log must be a string: the trial's output (its tail of at most 256 KiB)");
    return -EINVAL;
  }
  if (!(*out = api_log_blob(log->valuestring, strlen(log->valuestring)))) return -ENOMEM;
  return 0;
}

/* The reply to a fenced end (complete, fail, release): the trial as it is
 * now, with the next lease granted with it (lease: NULL or the lease
 * reply, taken); a stale lease's 409 names why. FENCE_FINAL (this lease's
 * end again, a retried delivery) answers as before and waits for what ended
 * it. */
static int api_trial_ended(struct server *s, const struct api_req *req, struct api_resp *resp,
                           struct srv_trial *t, const struct trial_event_args *a, int rc,
                           cJSON *lease) {
  if (rc == -ESTALE) return api_not_leased(s, resp, req->path, a->why, 0);
  if (rc) return rc;
  if (a->fence == FENCE_FINAL) resp->ticket = commit_last_ticket(s->commit);
  cJSON *o = api_trial_json(s, t);
  if (lease && (!o || !cJSON_AddItemToObject(o, "lease", lease))) {
    cJSON_Delete(lease);
    cJSON_Delete(o);
    return -ENOMEM;
  }
  return o ? api_json(resp, 200, o) : -ENOMEM;
}

/* What a complete asks for its worker's next lease ("lease": {"free"}). */
struct api_lease_ask {
  double cpu, gpu;
  int64_t mem;
  int has_mem;
};

/* The skeleton every fenced end shares (complete, fail, release): find the
 * trial, one event under the lock (a complete that asks for the next lease:
 * state_complete_and_lease), the log tail the end carries (log: NULL or
 * taken) in the same hold once the lease is found good, the reply. args are
 * built from the body beforehand: nothing of them depends on the trial. */
static int api_trial_end_event(struct server *s, const struct api_req *req, struct api_resp *resp,
                               enum trial_event ev, struct trial_event_args *a, struct blob_op *log,
                               const struct api_lease_ask *ask) {
  int rc = 0;
  cJSON *lease = NULL;
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp), *next = NULL;
  if (t) {
    int rank = 0;
    rc = ask ? state_complete_and_lease(s, t, a, ask->cpu, ask->gpu, ask->mem, ask->has_mem, &next,
                                        &rank, &resp->ticket)
             : state_trial_event(s, t, ev, a, &resp->ticket);
    if (!rc && log) {
      rc = api_log_enqueue(s, log, t, a->lease, 0, &resp->ticket);
      log = NULL;
    }
    if (!rc && next && !(lease = api_lease_reply(s, workers_find(s, next->worker_id), next, rank)))
      rc = -ENOMEM;
    rc = api_trial_ended(s, req, resp, t, a, rc, lease);
  }
  server_unlock(s);
  if (log) blob_op_free(log);
  return rc;
}

/* A gang member's (rank >= 1) fail (error) or release (error NULL): the
 * one end of its trial's attempt (gang_member_fail, gang_member_release). */
static int api_trial_member_end(struct server *s, const struct api_req *req, struct api_resp *resp,
                                const struct lease_token *l, int rank, const char *error) {
  struct trial_event_args a = {.lease = l};
  int rc = 0;
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  if (t) {
    rc = error ? gang_member_fail(s, t, l, rank, error, a.why, sizeof a.why, &resp->ticket)
               : gang_member_release(s, t, l, rank, a.why, sizeof a.why, &resp->ticket);
    a.fence = FENCE_FINAL; /* the reply waits for the end it caused, or an earlier one */
    rc = api_trial_ended(s, req, resp, t, &a, rc, NULL);
  }
  server_unlock(s);
  return rc;
}

int api_trial_complete(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct lease_token l;
  if (api_lease(req, resp, &l)) return 0;
  cJSON *body = api_body_object(req, resp, 1);
  int rc = 0;
  if (!body) return 0;
  struct trial_event_args a = {.lease = &l};
  struct blob_op *log = NULL;
  /* "lease": the worker's next lease granted with the complete
   * (docs/protocol.md#worker-routes); "free" as a lease request's. */
  const cJSON *ask_o = cJSON_GetObjectItemCaseSensitive(body, "lease");
  struct api_lease_ask ask = {1e9, 1e9, 0, 0};
  if (ask_o) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(ask_o, "free");
    if (!cJSON_IsObject(ask_o) || (ask_o->child && (!f || ask_o->child->next))) {
      api_error(resp, 400, "invalid_body", "lease",
                "lease must be an object like {\"free\": {\"cpu\": 1, \"gpu\": 0, "
                "\"memory_mb\": 1000}}: what the worker has free for its next lease");
      goto done;
    }
    if (f && api_resources(f, "lease.free", resp, &ask.cpu, &ask.gpu, &ask.mem, &ask.has_mem))
      goto done;
  }
  if ((rc = api_end_log(body, resp, &log))) {
    rc = rc == -EINVAL ? 0 : rc;
    goto done;
  }
  rc = api_trial_end_event(s, req, resp, TE_COMPLETE, &a, log, ask_o ? &ask : NULL);
done:
  cJSON_Delete(body);
  return rc;
}

int api_trial_fail(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct lease_token l;
  int rank;
  if (api_lease(req, resp, &l) || api_rank(req, resp, &rank)) return 0;
  cJSON *body = api_body_object(req, resp, 1);
  int rc = 0;
  if (!body) return 0;
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(body, "error");
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(body, "exit_code");
  const cJSON *reason = cJSON_GetObjectItemCaseSensitive(body, "reason");
  if (err && !cJSON_IsString(err) && !cJSON_IsNull(err)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "error", "error must be a string");
  }
  /* Range first: casting an out-of-range double to int is undefined. */
  if (code && !cJSON_IsNull(code) &&
      (!cJSON_IsNumber(code) || !(code->valuedouble >= INT_MIN && code->valuedouble <= INT_MAX) ||
       code->valuedouble != (int)code->valuedouble)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "exit_code", "exit_code must be an integer");
  }
  if (reason && !cJSON_IsString(reason) && !cJSON_IsNull(reason)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "reason", "reason must be a string");
  }
  char msg[4096];
  snprintf(msg, sizeof msg, "%s%s%s", reason && cJSON_IsString(reason) ? reason->valuestring : "",
           reason && cJSON_IsString(reason) && err && cJSON_IsString(err) ? ": " : "",
           err && cJSON_IsString(err) ? err->valuestring : "");
  /* snprintf may have cut a multi-byte character at the end: replies must
   * stay valid UTF-8. */
  utf8_sanitize(msg, strlen(msg));
  struct trial_event_args a = {.lease = &l,
                               .error = msg,
                               .has_exit_code = code && cJSON_IsNumber(code),
                               .exit_code = code && cJSON_IsNumber(code) ? code->valueint : 0};
  /* A gang's member: one failure of the trial, under rank 0's lease. */
  struct blob_op *log = NULL;
  if (rank == 0 && (rc = api_end_log(body, resp, &log))) {
    cJSON_Delete(body);
    return rc == -EINVAL ? 0 : rc;
  }
  rc = rank > 0 ? api_trial_member_end(s, req, resp, &l, rank, msg)
                : api_trial_end_event(s, req, resp, TE_FAIL, &a, log, NULL);
  cJSON_Delete(body);
  return rc;
}

/* A worker gives a lease back (drain, preemption): the trial is PENDING
 * again at once, exactly as after a lease expiry, and no failure is counted. */
int api_trial_release(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct lease_token l;
  int rank;
  if (api_lease(req, resp, &l) || api_rank(req, resp, &rank)) return 0;
  cJSON *body = api_body_object(req, resp, 1);
  int rc = 0;
  if (!body) return 0;
  const cJSON *wid = cJSON_GetObjectItemCaseSensitive(body, "worker_id");
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(body, "iteration");
  if (wid && !cJSON_IsNull(wid) &&
      (!cJSON_IsNumber(wid) || !(wid->valuedouble >= 1 && wid->valuedouble < 9.2e18) ||
       wid->valuedouble != (double)(int64_t)wid->valuedouble)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "worker_id", "worker_id must be an integer >= 1");
  }
  if (it && !cJSON_IsNull(it) &&
      (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "iteration", "iteration must be a number >= 0");
  }
  /* reason: absent (a drain or self-fencing) or "preempted" with the
   * notice's time (docs/protocol.md#stop-drain-and-release). */
  const cJSON *why = cJSON_GetObjectItemCaseSensitive(body, "reason");
  const cJSON *notice = cJSON_GetObjectItemCaseSensitive(body, "notice_at");
  if (why && !cJSON_IsNull(why) &&
      (!cJSON_IsString(why) ||
       (strcmp(why->valuestring, "preempted") && strcmp(why->valuestring, "drain")))) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "reason",
                     "reason must be \"preempted\" or \"drain\"");
  }
  if (notice && !cJSON_IsNull(notice) &&
      (!cJSON_IsNumber(notice) || !isfinite(notice->valuedouble) || notice->valuedouble < 0)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "notice_at",
                     "notice_at must be a time in seconds since the epoch");
  }
  struct trial_event_args a = {
      .lease = &l,
      .preempted = cJSON_IsString(why) && !strcmp(why->valuestring, "preempted"),
      .notice_at = cJSON_IsNumber(notice) ? notice->valuedouble : 0,
      .worker_id = wid && cJSON_IsNumber(wid) ? (int64_t)wid->valuedouble : 0,
      .has_iteration = it && cJSON_IsNumber(it),
      .iteration = it && cJSON_IsNumber(it) ? it->valuedouble : 0};
  /* A gang's member that cannot start: the attempt of all ends. */
  rc = rank > 0 ? api_trial_member_end(s, req, resp, &l, rank, NULL)
                : api_trial_end_event(s, req, resp, TE_RELEASE, &a, NULL, NULL);
  cJSON_Delete(body);
  return rc;
}

struct blob_op {
  int64_t trial_id, iteration;
  int64_t worker_id; /* logs: the lease that uploaded them */
  int attempt;
  uint32_t crc;
  size_t len;
  int is_log;
  int rank; /* logs: a gang's member */
  int fd;   /* >= 0: the bytes are in this spool file, not in data */
  char data[];
};

static int blob_op_apply(struct store *st, void *arg) {
  struct blob_op *op = arg;
  if (op->is_log)
    return store_put_member_log(st, op->trial_id, op->attempt, op->worker_id, op->rank, op->data,
                                op->len);
  if (op->fd < 0)
    return store_put_checkpoint(st, op->trial_id, op->iteration, op->crc, op->data, op->len);
  /* A spooled upload is mapped only while the commit thread writes it: no
   * request holds its bytes in memory while it waits. */
  void *map = mmap(NULL, op->len, PROT_READ, MAP_SHARED, op->fd, 0);
  if (map == MAP_FAILED) {
    log_error("checkpoint of trial %lld: cannot map its spool file: %s", (long long)op->trial_id,
              strerror(errno));
    return -EIO;
  }
  int rc = store_put_checkpoint(st, op->trial_id, op->iteration, op->crc, map, op->len);
  munmap(map, op->len);
  return rc;
}

static void blob_op_free(void *arg) {
  struct blob_op *op = arg;
  if (op->fd >= 0) close(op->fd);
  free(op);
}

/* crc32 of a spooled body, read back in chunks. */
static int api_spool_crc(int fd, size_t len, uint32_t *out) {
  static __thread unsigned char buf[64 * 1024];
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t off = 0; off < len;) {
    size_t want = len - off < sizeof buf ? len - off : sizeof buf;
    ssize_t k = pread(fd, buf, want, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -EIO;
    crc = crc32(crc, buf, (uInt)k);
    off += (size_t)k;
  }
  *out = (uint32_t)crc;
  return 0;
}

static int api_parse_u64(const char *s, int base, uint64_t max, uint64_t *out) {
  if (!s || !*s) return -EINVAL;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, base);
  if (*end || errno || v > max || *s == '-' || *s == '+' || *s == ' ') return -EINVAL;
  *out = v;
  return 0;
}

int api_checkpoint_put(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct lease_token l;
  if (api_lease(req, resp, &l)) return 0;
  const char *it_s = req->header(req->conn, "X-Ctune-Iteration");
  const char *crc_s = req->header(req->conn, "X-Ctune-Crc32");
  uint64_t it, crc;
  if (api_parse_u64(it_s, 10, INT64_MAX, &it))
    return api_error(resp, 400, "invalid_header", "X-Ctune-Iteration",
                     "X-Ctune-Iteration must be an integer >= 0");
  if (!crc_s || strlen(crc_s) != 8 || api_parse_u64(crc_s, 16, UINT32_MAX, &crc))
    return api_error(resp, 400, "invalid_header", "X-Ctune-Crc32",
                     "X-Ctune-Crc32 must be 8 hex digits (zlib crc32 of the body)");
  /* An empty upload would replace a real checkpoint with nothing to resume. */
  if (req->body_len == 0)
    return api_error(resp, 400, "empty_checkpoint", "", "the checkpoint body is empty");
  uint32_t have;
  if (!req->body_spooled)
    have = (uint32_t)crc32(0L, (const Bytef *)req->body, (uInt)req->body_len);
  else if (api_spool_crc(req->body_fd, req->body_len, &have))
    return -EIO;
  if (have != (uint32_t)crc)
    return api_error(resp, 400, "bad_crc", "X-Ctune-Crc32",
                     "body crc32 is %08x but X-Ctune-Crc32 says %08x: upload corrupted", have,
                     (uint32_t)crc);
  struct blob_op *op = malloc(sizeof *op + (req->body_spooled ? 0 : req->body_len) + 1);
  if (!op) return -ENOMEM;
  op->iteration = (int64_t)it;
  op->crc = (uint32_t)crc;
  op->len = req->body_len;
  op->is_log = 0;
  op->rank = 0;
  op->fd = -1;
  if (!req->body_spooled)
    memcpy(op->data, req->body, req->body_len);
  else if ((op->fd = fcntl(req->body_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
    free(op);
    return -errno;
  }
  int rc = 0;
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  if (!t) goto refuse;
  /* Only the current lease, or the final upload of the lease that ended the
   * trial: a stale attempt never replaces a newer attempt's state. */
  char why[256];
  if (state_check_fence(s, t, &l, why, sizeof why) == FENCE_STALE) {
    rc = api_not_leased(s, resp, req->path, why, 0);
    goto refuse;
  }
  if (decide_refuses_checkpoint(t)) {
    /* An exploit replaced this trial's checkpoint with its donor's: the old
     * lease's own checkpoint must not overwrite it. */
    snprintf(why, sizeof why, "trial %lld: exploit_pending (its checkpoint is its donor's now)",
             (long long)t->id);
    rc = api_not_leased(s, resp, req->path, why, 0);
    goto refuse;
  }
  if (t->has_checkpoint && (int64_t)it < t->checkpoint_iteration) {
    api_error(resp, 409, "stale_checkpoint", "X-Ctune-Iteration",
              "iteration %llu is older than the stored checkpoint's (%lld)", (unsigned long long)it,
              (long long)t->checkpoint_iteration);
    goto refuse;
  }
  /* The next attempt resumes from the checkpoint and from the results after
   * the last stored one: a checkpoint past that would skip results. */
  double bound = t->nres ? t->max_iter_seen : 0;
  if ((double)it > bound) {
    api_error(resp, 409, "checkpoint_ahead", "X-Ctune-Iteration",
              "iteration %llu is past the last stored result (%g): send it again once its "
              "results are acknowledged",
              (unsigned long long)it, bound);
    goto refuse;
  }
  op->trial_id = t->id;
  if ((rc = commit_enqueue(s->commit, blob_op_apply, blob_op_free, op, &resp->ticket))) goto out;
  t->has_checkpoint = 1;
  t->checkpoint_iteration = (int64_t)it;
  t->has_ck_time_total = 0; /* its own now: its results know the time */
  t->updated_seq = ++s->seq;
  /* The trial row carries updated_seq: the change counter it took is saved
   * with the checkpoint, so it never goes backwards after a restart. */
  if ((rc = state_persist_trial(s, t, &resp->ticket))) goto out;
  /* PBT exploits waiting for this checkpoint, in the same transaction. */
  if ((rc = decide_checkpoint_stored(s, t, &resp->ticket))) goto out;
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddNumberToObject(o, "trial_id", (double)t->id) ||
      !cJSON_AddNumberToObject(o, "iteration", (double)it) ||
      !cJSON_AddNumberToObject(o, "size", (double)req->body_len)) {
    cJSON_Delete(o);
    rc = -ENOMEM;
    goto out;
  }
  rc = api_json(resp, 200, o);
out:
  server_unlock(s);
  return rc;
refuse:
  server_unlock(s);
  blob_op_free(op);
  return rc;
}

int api_checkpoint_get(struct server *s, const struct api_req *req, struct api_resp *resp) {
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  int64_t id = t ? t->id : 0;
  server_unlock(s);
  if (!t) return 0;
  commit_flush(s->commit);
  int64_t it;
  uint32_t crc;
  void *data = NULL;
  size_t len = 0;
  int rc = store_get_checkpoint(s->store, id, &it, &crc, &data, &len);
  if (rc == -ENOENT)
    return api_error(resp, 404, "not_found", req->path, "trial %lld has no checkpoint",
                     (long long)id);
  if (rc) return rc;
  free(resp->body);
  resp->status = 200;
  resp->body = data;
  resp->len = len;
  resp->content_type = "application/octet-stream";
  api_header(resp, "X-Ctune-Iteration", "%lld", (long long)it);
  api_header(resp, "X-Ctune-Crc32", "%08x", crc);
  return 0;
}

/* Rank 0's worker says where the other members of a gang meet it
 * (docs/protocol.md#gang-trials); their leases go out after it. */
int api_trial_rendezvous(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct lease_token l;
  if (api_lease(req, resp, &l)) return 0;
  cJSON *body = api_body_object(req, resp, 0);
  if (!body) return 0;
  const cJSON *addr = cJSON_GetObjectItemCaseSensitive(body, "master_addr");
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(body, "master_port");
  int rc = 0;
  if (!cJSON_IsString(addr) || !cJSON_IsNumber(port) ||
      port->valuedouble != (int)port->valuedouble) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body",
                     !cJSON_IsString(addr) ? "master_addr" : "master_port",
                     "the body is {\"master_addr\": \"HOST\", \"master_port\": 1..65535}");
  }
  char why[256] = "";
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  if (t) {
    rc = gang_rendezvous(s, t, &l, addr->valuestring, port->valueint, why, sizeof why);
    if (rc == -ESTALE)
      rc = api_not_leased(s, resp, req->path, why, 0);
    else if (rc == -EINVAL)
      rc = api_error(resp, 400, "invalid_body", "master_port", "%s", why);
    else if (rc == -EEXIST)
      rc = api_error(resp, 409, "rendezvous_taken", "master_port", "%s", why);
    else if (!rc) {
      cJSON *o = cJSON_CreateObject();
      if (!o || !cJSON_AddStringToObject(o, "master_addr", addr->valuestring) ||
          !cJSON_AddNumberToObject(o, "master_port", port->valueint)) {
        cJSON_Delete(o);
        rc = -ENOMEM;
      } else {
        rc = api_json(resp, 200, o);
      }
    }
  }
  server_unlock(s);
  cJSON_Delete(body);
  return rc;
}

/* A log tail as the store keeps it (text: a tail is cut anywhere and may
 * hold binary noise); NULL when out of memory. */
static struct blob_op *api_log_blob(const char *text, size_t len) {
  struct blob_op *op = malloc(sizeof *op + len + 1);
  if (!op) return NULL;
  op->len = len;
  op->is_log = 1;
  op->fd = -1;
  op->iteration = 0;
  op->crc = 0;
  memcpy(op->data, text, len);
  op->data[len] = 0;
  utf8_sanitize(op->data, op->len);
  for (size_t i = 0; i < op->len; i++)
    if (!op->data[i]) op->data[i] = '?';
  return op;
}

/* Queues t's log tail op (taken) as the upload of lease l's rank, into the
 * caller's hold. */
static int api_log_enqueue(struct server *s, struct blob_op *op, const struct srv_trial *t,
                           const struct lease_token *l, int rank, uint64_t *ticket) {
  op->trial_id = t->id;
  op->worker_id = l->worker_id;
  op->attempt = l->attempt;
  op->rank = rank;
  return commit_enqueue(s->commit, blob_op_apply, blob_op_free, op, ticket);
}

int api_log_put(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct lease_token l;
  int rank;
  if (api_lease(req, resp, &l) || api_rank(req, resp, &rank)) return 0;
  struct blob_op *op = api_log_blob(req->body, req->body_len);
  if (!op) return -ENOMEM;
  int rc = 0;
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  if (!t) {
    free(op);
    goto out;
  }
  char why[256];
  /* A gang's member sends its own output, fenced by its attempt and rank. */
  if (gang_check_member(s, t, &l, rank, why, sizeof why) == FENCE_STALE) {
    free(op);
    rc = api_not_leased(s, resp, req->path, why, 0);
    goto out;
  }
  if ((rc = api_log_enqueue(s, op, t, &l, rank, &resp->ticket))) goto out;
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddNumberToObject(o, "trial_id", (double)t->id) ||
      !cJSON_AddNumberToObject(o, "size", (double)req->body_len)) {
    cJSON_Delete(o);
    rc = -ENOMEM;
    goto out;
  }
  rc = api_json(resp, 200, o);
out:
  server_unlock(s);
  return rc;
}

int api_log_get(struct server *s, const struct api_req *req, struct api_resp *resp) {
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  int64_t id = t ? t->id : 0;
  server_unlock(s);
  if (!t) return 0;
  commit_flush(s->commit);
  char *log = NULL;
  size_t len = 0;
  int rc = store_get_log(s->store, id, &log, &len);
  if (rc && rc != -ENOENT) return rc;
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddNumberToObject(o, "trial_id", (double)id) ||
      !cJSON_AddStringToObject(o, "log", log ? log : "")) {
    cJSON_Delete(o);
    free(log);
    return -ENOMEM;
  }
  free(log);
  return api_json(resp, 200, o);
}

/* docs/protocol.md#experiment-control: POST /trials/{id}/stop — a user
 * ends one trial TERMINATED ("stopped by user"), results and checkpoint
 * kept; its worker learns it from its next heartbeat or result. */
int api_trial_stop(struct server *s, const struct api_req *req, struct api_resp *resp) {
  int rc = 0;
  server_lock(s);
  struct srv_trial *t = api_find_trial(s, req, resp);
  if (!t) goto out;
  rc = control_stop_trial(s, t, &resp->ticket);
  if (rc == -EINVAL) {
    rc = api_error(resp, 409, "ended", req->path, "trial %lld is already %s", (long long)t->id,
                   trial_status_names[t->status]);
    goto out;
  }
  if (!rc) {
    cJSON *o = api_trial_json(s, t);
    rc = o ? api_json(resp, 200, o) : -ENOMEM;
  }
out:
  server_unlock(s);
  return rc;
}
