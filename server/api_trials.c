/* api_trials: one trial, its results (report with ASHA's decision, read back),
 * complete, fail with retries, release, checkpoint and log storage. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "api.h"
#include "clock.h"
#include "log.h"
#include "utf8.h"

static struct trial *api_find_trial(struct server *s, const struct api_req *req,
                                    struct api_resp *resp) {
  struct trial *t = server_trial(s, req->match->ids[0]);
  if (!t)
    api_error(resp, 404, "not_found", req->path, "trial %lld does not exist",
              (long long)req->match->ids[0]);
  return t;
}

int api_trial_get(struct server *s, const struct api_req *req, struct api_resp *resp) {
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  cJSON *o = t ? api_trial_json(s, t) : NULL;
  server_unlock(s);
  if (!t) return 0;
  return o ? api_json(resp, 200, o) : -ENOMEM;
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
  int64_t *seqs = NULL;
  size_t n = 0;
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  int64_t id = t ? t->id : 0;
  if (t && t->nres && (seqs = malloc(t->nres * sizeof *seqs))) {
    memcpy(seqs, t->seqs, t->nres * sizeof *seqs);
    n = t->nres;
  }
  int oom = t && t->nres && !seqs;
  server_unlock(s);
  if (!t || oom) return oom ? -ENOMEM : 0;
  /* The rows exist once everything queued before this read is committed. */
  commit_flush(s->commit);
  int rc = 0;
  cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "results");
  if (!rc) rc = arr ? store_results_by_seq(s->store, seqs, n, api_add_plain, arr) : -ENOMEM;
  free(seqs);
  if (!rc && !cJSON_AddNumberToObject(root, "trial_id", (double)id)) rc = -ENOMEM;
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  return api_json(resp, 200, root);
}

static int api_decision(struct api_resp *resp, const char *decision) {
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddStringToObject(o, "decision", decision)) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  return api_json(resp, 200, o);
}

/* A result is a flat object of numbers (null allowed: NaN). */
static int api_check_result(const cJSON *r, const char *time_attr, struct api_resp *resp,
                            double *t) {
  if (!r->child)
    return api_error(resp, 400, "invalid_result", "", "a result needs at least '%s'",
                     time_attr), -EINVAL;
  for (const cJSON *c = r->child; c; c = c->next) {
    if (!cJSON_IsNumber(c) && !cJSON_IsNull(c) && !cJSON_IsBool(c))
      return api_error(resp, 400, "invalid_result", c->string,
                       "%s: a result holds only numbers (null and booleans allowed)", c->string), -EINVAL;
  }
  const cJSON *tv = cJSON_GetObjectItemCaseSensitive(r, time_attr);
  if (!tv || !cJSON_IsNumber(tv) || !isfinite(tv->valuedouble) || tv->valuedouble < 0)
    return api_error(resp, 400, "invalid_result", time_attr,
                     "%s: the time attribute must be a finite number >= 0", time_attr), -EINVAL;
  *t = tv->valuedouble;
  return 0;
}

int api_trial_report(struct server *s, const struct api_req *req, struct api_resp *resp) {
  cJSON *r = api_body_object(req, resp, 0);
  char *json = NULL;
  int rc = 0;
  if (!r) return 0;
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  if (!t) goto out;
  struct experiment *e = server_experiment(s, t->experiment_id);
  double tv;
  if (api_check_result(r, e->spec.sched.time_attr, resp, &tv)) goto out;
  /* Idempotency: the same time value answers the stored decision, stored once.
   * Waiting for everything queued so far makes sure that decision is durable. */
  for (size_t i = t->nres; tv <= t->max_t_seen && i-- > 0;) {
    if (t->ts[i] == tv) {
      atomic_fetch_add(&s->metrics.results_duplicate, 1);
      resp->ticket = commit_last_ticket(s->commit);
      rc = api_decision(resp, t->decisions[i] == 's' ? "stop" : "continue");
      goto out;
    }
  }
  if (t->status != TS_RUNNING || e->status != ES_RUNNING) {
    /* Cancelled, ended, or no longer leased: the worker must stop it. The
     * change that says so may still be queued: answer once it is durable. */
    resp->ticket = commit_last_ticket(s->commit);
    rc = api_decision(resp, "stop");
    goto out;
  }
  const cJSON *m = e->spec.has_metric ? cJSON_GetObjectItemCaseSensitive(r, e->spec.metric)
                                      : NULL;
  double mv = NAN;
  int has_m = m && (cJSON_IsNumber(m) || cJSON_IsNull(m));
  if (has_m && cJSON_IsNumber(m)) mv = m->valuedouble;
  struct asha_outcome out = {0}, end = {0};
  rc = sched_on_result(e->sched, t->id, tv, has_m ? &mv : NULL, &out);
  if (rc == -ENOENT) { /* not in a bracket (should not happen while RUNNING) */
    memset(&out, 0, sizeof out);
    rc = 0;
  }
  if (rc) goto out;
  if (!(json = jsonout_print(r))) {
    rc = -ENOMEM;
    goto out;
  }
  int64_t seq = ++s->seq;
  char d = out.decision == ASHA_STOP ? 's' : 'c';
  if ((rc = state_note_result(s, t, tv, d, r, json, seq))) goto out;
  int ended = 0;
  if (d == 's') {
    /* The trial is done: it passes through its bracket once more and ends. */
    state_release(s, t);
    state_set_status(s, t, TS_TERMINATED);
    t->stopped_early = out.stopped_early;
    t->ended_at = clock_wall_s();
    rc = sched_on_trial_end(e->sched, t->id, 1, tv, t->has_last_value ? &t->last_value : NULL,
                            &end);
    if (rc == -ENOENT) rc = 0;
    if (rc) goto out;
    ended = 1;
  }
  rc = state_queue_result(s, t, seq, tv, d == 's' ? "stop" : "continue", json, &out, &end,
                          ended, &resp->ticket);
  if (!rc && ended) {
    if (e->counts[TS_TERMINATED] + e->counts[TS_ERROR] == e->num_trials) {
      e->status = ES_TERMINATED;
      e->ended_at = clock_wall_s();
      e->updated_seq = ++s->seq;
      rc = state_persist_experiment(s, e, &resp->ticket);
      log_info("experiment %lld ended", (long long)e->id);
    }
  }
  if (!rc) {
    atomic_fetch_add(&s->metrics.results_received, 1);
    rc = api_decision(resp, d == 's' ? "stop" : "continue");
  }
out:
  server_unlock(s);
  free(json);
  cJSON_Delete(r);
  return rc;
}

int api_trial_complete(struct server *s, const struct api_req *req, struct api_resp *resp) {
  cJSON *body = api_body_object(req, resp, 1);
  int rc = 0;
  if (!body) return 0;
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  if (!t) goto out;
  if (t->status == TS_RUNNING) {
    rc = state_end_trial(s, t, TS_TERMINATED, &resp->ticket);
    log_info("trial %lld completed", (long long)t->id);
  } else if (t->status == TS_PENDING || t->status == TS_PAUSED) {
    api_error(resp, 409, "not_running", req->path, "trial %lld is %s, not RUNNING",
              (long long)t->id, trial_status_names[t->status]);
    goto out;
  } else {
    resp->ticket = commit_last_ticket(s->commit); /* already ended: same answer */
  }
  cJSON *o = rc ? NULL : api_trial_json(s, t);
  if (!rc) rc = o ? api_json(resp, 200, o) : -ENOMEM;
out:
  server_unlock(s);
  cJSON_Delete(body);
  return rc;
}

int api_trial_fail(struct server *s, const struct api_req *req, struct api_resp *resp) {
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
  if (code && !cJSON_IsNull(code) && (!cJSON_IsNumber(code) || code->valuedouble != (int)code->valuedouble)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "exit_code", "exit_code must be an integer");
  }
  if (reason && !cJSON_IsString(reason) && !cJSON_IsNull(reason)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "reason", "reason must be a string");
  }
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  if (!t) goto out;
  struct experiment *e = server_experiment(s, t->experiment_id);
  if (t->status != TS_RUNNING) {
    if (t->status == TS_PENDING || t->status == TS_PAUSED) {
      api_error(resp, 409, "not_running", req->path, "trial %lld is %s, not RUNNING",
                (long long)t->id, trial_status_names[t->status]);
      goto out;
    }
    resp->ticket = commit_last_ticket(s->commit);
  } else {
    char msg[4096];
    snprintf(msg, sizeof msg, "%s%s%s", reason && cJSON_IsString(reason) ? reason->valuestring : "",
             reason && cJSON_IsString(reason) && err && cJSON_IsString(err) ? ": " : "",
             err && cJSON_IsString(err) ? err->valuestring : "");
    char *copy = strdup(msg[0] ? msg : "failed");
    if (!copy) {
      rc = -ENOMEM;
      goto out;
    }
    free(t->error);
    t->error = copy;
    t->has_exit_code = code && cJSON_IsNumber(code);
    t->exit_code = t->has_exit_code ? code->valueint : 0;
    t->num_failures++;
    if (t->num_failures <= e->spec.max_failures) {
      /* Retry: back to PENDING; the next lease resumes from the checkpoint. */
      state_release(s, t);
      state_set_status(s, t, TS_PENDING);
      rc = state_persist_trial(s, t, &resp->ticket);
      log_warn("trial %lld failed (%s), retry %d of %lld", (long long)t->id, t->error,
               t->num_failures, (long long)e->spec.max_failures);
    } else {
      rc = state_end_trial(s, t, TS_ERROR, &resp->ticket);
      log_warn("trial %lld failed (%s): ERROR", (long long)t->id, t->error);
    }
  }
  cJSON *o = rc ? NULL : api_trial_json(s, t);
  if (!rc) rc = o ? api_json(resp, 200, o) : -ENOMEM;
out:
  server_unlock(s);
  cJSON_Delete(body);
  return rc;
}

/* A worker gives a lease back (drain): the trial is PENDING again at once,
 * exactly as after a lease expiry, and no failure is counted. */
int api_trial_release(struct server *s, const struct api_req *req, struct api_resp *resp) {
  cJSON *body = api_body_object(req, resp, 1);
  int rc = 0;
  if (!body) return 0;
  const cJSON *wid = cJSON_GetObjectItemCaseSensitive(body, "worker_id");
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(body, "iteration");
  if (wid && !cJSON_IsNull(wid) &&
      (!cJSON_IsNumber(wid) || wid->valuedouble < 1 ||
       wid->valuedouble != (double)(int64_t)wid->valuedouble)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "worker_id",
                     "worker_id must be an integer >= 1");
  }
  if (it && !cJSON_IsNull(it) && (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
                                  it->valuedouble < 0)) {
    cJSON_Delete(body);
    return api_error(resp, 400, "invalid_body", "iteration",
                     "iteration must be a number >= 0");
  }
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  if (!t) goto out;
  if (t->status != TS_RUNNING) {
    api_error(resp, 409, "not_running", req->path, "trial %lld is %s, not RUNNING",
              (long long)t->id, trial_status_names[t->status]);
    goto out;
  }
  /* A release delivered late (from a worker's outbox after a restart) must
   * not take the trial away from the worker that leased it since. */
  if (wid && cJSON_IsNumber(wid) && (int64_t)wid->valuedouble != t->worker_id) {
    api_error(resp, 409, "not_leased", "worker_id",
              "trial %lld is leased to worker %lld, not %lld", (long long)t->id,
              (long long)t->worker_id, (long long)wid->valuedouble);
    goto out;
  }
  int64_t from = t->worker_id;
  if ((rc = state_requeue(s, t, &resp->ticket))) goto out;
  log_info("trial %lld released by worker %lld at iteration %g: back to PENDING",
           (long long)t->id, (long long)from,
           it && cJSON_IsNumber(it) ? it->valuedouble : (t->nres ? t->last_t : 0));
  cJSON *o = api_trial_json(s, t);
  rc = o ? api_json(resp, 200, o) : -ENOMEM;
out:
  server_unlock(s);
  cJSON_Delete(body);
  return rc;
}

struct blob_op {
  int64_t trial_id, iteration;
  uint32_t crc;
  size_t len;
  int is_log;
  char data[];
};

static int blob_op_apply(struct store *st, void *arg) {
  struct blob_op *op = arg;
  if (op->is_log) return store_put_log(st, op->trial_id, op->data, op->len);
  return store_put_checkpoint(st, op->trial_id, op->iteration, op->crc, op->data, op->len);
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
  const char *it_s = req->header(req->conn, "X-Ctune-Iteration");
  const char *crc_s = req->header(req->conn, "X-Ctune-Crc32");
  uint64_t it, crc;
  if (api_parse_u64(it_s, 10, INT64_MAX, &it))
    return api_error(resp, 400, "invalid_header", "X-Ctune-Iteration",
                     "X-Ctune-Iteration must be an integer >= 0");
  if (!crc_s || strlen(crc_s) != 8 || api_parse_u64(crc_s, 16, UINT32_MAX, &crc))
    return api_error(resp, 400, "invalid_header", "X-Ctune-Crc32",
                     "X-Ctune-Crc32 must be 8 hex digits (zlib crc32 of the body)");
  uint32_t have = (uint32_t)crc32(0L, (const Bytef *)req->body, (uInt)req->body_len);
  if (have != (uint32_t)crc)
    return api_error(resp, 400, "checksum_mismatch", "X-Ctune-Crc32",
                     "body crc32 is %08x but X-Ctune-Crc32 says %08x: upload corrupted",
                     have, (uint32_t)crc);
  struct blob_op *op = malloc(sizeof *op + req->body_len + 1);
  if (!op) return -ENOMEM;
  op->iteration = (int64_t)it;
  op->crc = (uint32_t)crc;
  op->len = req->body_len;
  op->is_log = 0;
  memcpy(op->data, req->body, req->body_len);
  int rc = 0;
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  if (!t) {
    free(op);
    goto out;
  }
  op->trial_id = t->id;
  if ((rc = commit_enqueue(s->commit, blob_op_apply, free, op, &resp->ticket))) goto out;
  t->has_checkpoint = 1;
  t->checkpoint_iteration = (int64_t)it;
  t->updated_seq = ++s->seq;
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
}

int api_checkpoint_get(struct server *s, const struct api_req *req, struct api_resp *resp) {
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
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

int api_log_put(struct server *s, const struct api_req *req, struct api_resp *resp) {
  struct blob_op *op = malloc(sizeof *op + req->body_len + 1);
  if (!op) return -ENOMEM;
  op->len = req->body_len;
  op->is_log = 1;
  op->iteration = 0;
  op->crc = 0;
  memcpy(op->data, req->body, req->body_len);
  op->data[req->body_len] = 0;
  /* A log tail is cut anywhere and may hold binary noise: store it as text. */
  utf8_sanitize(op->data, op->len);
  for (size_t i = 0; i < op->len; i++)
    if (!op->data[i]) op->data[i] = '?';
  int rc = 0;
  server_lock(s);
  struct trial *t = api_find_trial(s, req, resp);
  if (!t) {
    free(op);
    goto out;
  }
  op->trial_id = t->id;
  if ((rc = commit_enqueue(s->commit, blob_op_apply, free, op, &resp->ticket))) goto out;
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
  struct trial *t = api_find_trial(s, req, resp);
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
