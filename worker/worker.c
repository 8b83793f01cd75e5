/* Worker protocol v2 over the loop (docs/protocol.md#worker-protocol-v2;
 * see worker.h). Three parts:
 *  - the trial life cycle: one state machine, worker_trial_event, through
 *    which every event about a trial goes (trial.h draws the states);
 *  - delivery: the outbox's per-trial lanes, each message fenced with the
 *    lease it belongs to (X-Ctune-Lease), results batched, a refusal dropping
 *    only what it refuses;
 *  - the lease loop: register, heartbeat v2 (renews each lease, reconciles
 *    what runs here), self-fencing when heartbeats fail for lease_timeout_s,
 *    drain on SIGTERM. */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "clock.h"
#include "cpuset.h"
#include "exit_codes.h"
#include "execwrap.h"
#include "failure.h"
#include "http.h"
#include "jsonout.h"
#include "log.h"
#include "sdnotify.h"
#include "outbox.h"
#include "preempt.h"
#include "rdzv.h"
#include "sysres.h"
#include "testhook.h"
#include "trainable.h"
#include "trial.h"
#include "workdir.h"

extern char **environ;

#define WORKER_REQ_TIMEOUT_MS 10000L
/* How long a lease request asks the server to hold it when nothing is free
 * for it (capped by the server's lease_wait_max_ms). */
#define WORKER_LEASE_WAIT_MS 5000u
#define WORKER_UPLOAD_TIMEOUT_MS 60000L
#define WORKER_LOG_PERIOD_MS 2000
#define WORKER_DRAIN_EXTRA_MS 10000
#define WORKER_DRAIN_REG_MS 500 /* a registration reply awaited by a drain */
#define WORKER_MAX_CHECKPOINT (1024L * 1024 * 1024)
#define WORKER_CKPT_GET_TRIES 6
#define WORKER_CKPT_PUT_TRIES 5 /* checkpoint_ahead with none of its results queued */
/* A message or checkpoint failing for this many heartbeat intervals is
 * stuck: said once in the log and, through the heartbeat, on the trial. */
#define WORKER_STUCK_HEARTBEATS 3
#define WORKER_BATCH_MAX 256 /* results per POST */
#define WORKER_BATCH_BYTES (512 * 1024)
#define WORKER_MAX_RESULT (512 * 1024) /* one result's JSON (server takes 1 MiB) */
/* The stderr tail a `fail` carries: the server keeps "reason: error" in 4 KiB. */
#define WORKER_FAIL_BYTES 3800

struct worker {
  uv_loop_t *loop;
  struct worker_opts o;
  struct http_client *http;
  /* Gang trials (docs/worker.md#gang-members): the rendezvous ports its
   * rank-0 members hold, and the address this worker reaches the server
   * from (MASTER_ADDR without --advertise-addr). */
  struct rdzv_ports rdzv;
  char local_ip[64];
  struct alloc_pool pool;
  struct outbox ob;
  int id;
  /* Its own credential from registration (docs/protocol.md#worker-credentials),
   * kept in <work dir>/identity (0600) so that a restart delivers the outbox
   * under the same identity. Every request but registration sends it. */
  char secret[160];
  int identity_loaded; /* id/secret come from the file: not confirmed yet */
  double hb_interval_s, lease_timeout_s;
  int reg_inflight, hb_inflight, lease_inflight;
  int ob_inflight; /* lanes with a request out */
  int reg_attempts, lease_failures;
  int lease_again;   /* something freed up while a lease request was out */
  int asks_inflight; /* completes out that ask for the next lease (worker_end_body) */
  /* A server that holds lease requests (its registration's
   * lease_wait_max_ms): each asks to wait this long (0: the server answers
   * at once, and the worker polls every poll_ms). One is out at a time: its
   * `free` is what was free when it went, and only grows meanwhile, so what
   * it is granted always fits. */
  unsigned lease_wait_ms;
  int ckpt_failing; /* checkpoint uploads failing since the last success */
  int ob_down_logged;
  int fenced; /* no heartbeat for lease_timeout_s: trials stopped, no leasing */
  uv_timer_t reg_timer, hb_timer, lease_timer, ob_timer, log_timer, drain_timer, fence_timer;
  int handles;
  struct trial *trials;
  /* Fresh trial dirs made ahead of their leases, off the loop (workdir.h);
   * spare_job: the batch being made, NULL when none. */
  struct workdir_spares spares;
  struct worker_spare_job *spare_job;
  /* Housekeeping of trial dirs, batched once the burst of starts and ends
   * that asked for it has passed: ended trials' dirs swept (sweep_wanted),
   * the swept ones removed and spares made on the thread pool. */
  uv_timer_t house_timer;
  int sweep_wanted, gone_pending, house_again;
  unsigned spare_peak; /* the most trials this worker has run at once */
  unsigned gone_seq;
  int uploads; /* checkpoint/log requests in flight */
  int draining, drain_kill, shut;
  int deregistering; /* the clean stop's deregistration is out */
  uint64_t drain_deadline_ms;
  uint64_t drain_reg_deadline_ms; /* until then a drain awaits a registration reply */
  /* A preemption notice (worker_preempt): the drain releases with reason
   * preempted; notice_at is its wall-clock time (s), sent with each release. */
  int preempting;
  double notice_at;
  struct preempt_plan preempt;
  uint64_t preempt_ask_until_ms; /* trials asked to checkpoint are stopped then */
};

/* What a response callback needs; never a pointer to a trial, which may be
 * gone when the answer comes: the trial object's unique key instead (two
 * attempts of one trial may both be here, one ending, one starting). */
struct wreq {
  struct worker *w;
  int trial_id;
  uint64_t key;
  long long mtime_ns, size;
  uint64_t held_seq; /* the in-band checkpoint it carries (trial.ckpt_held_seq), 0: none */
  unsigned long long log_total;
  int resume_attempt;
};

/* Events of the trial life cycle (worker_trial_event). */
enum trial_event {
  TEV_SPAWNED,      /* its supervisor started */
  TEV_REPORTED,     /* its supervisor reported the trial's pid (a = 0) or failed to (a < 0) */
  TEV_START_FAILED, /* it could not start; a = 1 when close callbacks follow */
  TEV_STOP,         /* a = enum trial_stop */
  TEV_KILL,         /* second drain signal: SIGKILL now */
  TEV_PAUSE,        /* a result could not be queued (a = the error) */
  TEV_RESUME,       /* every held result is queued */
  TEV_EXIT,         /* process ended: a = exit code, b = signal */
  TEV_CLOSED,       /* process handles closed */
  TEV_UPLOADED,     /* an upload finished (or gave up) */
};

static void worker_pump_outbox(struct worker *w);
static void worker_kick_lease(struct worker *w, unsigned delay_ms);
static void worker_register(struct worker *w);
static void worker_check_drained(struct worker *w);
static void worker_spawn_trial(struct worker *w, struct trial *t, int resume);
static void worker_trial_event(struct worker *w, struct trial *t, enum trial_event ev, int a,
                               int b);
static void worker_upload_checkpoint(struct worker *w, struct trial *t);
static void worker_upload_logs(struct worker *w, struct trial *t);
static void worker_stop_attempt(struct worker *w, int id, long attempt, enum trial_stop why,
                                const char *what);

static struct trial *worker_by_key(struct worker *w, uint64_t key) {
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->key == key) return t;
  return NULL;
}

/* What the allocator and the cgroups know a trial's process by: its id, or
 * for a gang's member of rank >= 1 (another process of the same trial here)
 * a number no trial id is. */
static int worker_slot_id(const struct trial *t) {
  return t->rank > 0 ? (1 << 30) + (t->id % (1 << 23)) * 64 + t->rank : t->id;
}

/* The trial's current attempt here: the one whose process may run. */
static struct trial *worker_current(struct worker *w, int id) {
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->id == id && t->state < TRIAL_EXITED) return t;
  return NULL;
}

/* The outbox carries rank 0's messages only (a gang's other members send
 * none), so its replies are rank 0's. */
static struct trial *worker_by_lease(struct worker *w, int id, const struct outbox_lease *l) {
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->id == id && t->attempt == l->attempt && t->lease_worker == l->worker_id && !t->rank)
      return t;
  return NULL;
}

static struct outbox_lease trial_fence(const struct trial *t) {
  struct outbox_lease l = {t->lease_worker, t->attempt};
  return l;
}

static int lease_same(const struct outbox_lease *a, const struct outbox_lease *b) {
  return a->worker_id == b->worker_id && a->attempt == b->attempt;
}

static void fence_header(const struct outbox_lease *l, char *buf, size_t len) {
  snprintf(buf, len, "X-Ctune-Lease: %d:%ld", l->worker_id, l->attempt);
}

static struct wreq *wreq_new(struct worker *w, const struct trial *t, int trial_id) {
  struct wreq *r = calloc(1, sizeof *r);
  if (r) {
    r->w = w;
    r->trial_id = t ? t->id : trial_id;
    r->key = t ? t->key : 0;
  }
  return r;
}

static int worker_post_json(struct worker *w, const char *path, cJSON *body, http_cb cb,
                            void *arg) {
  char *text = jsonout_print(body);
  if (!text) return -ENOMEM;
  int rc = http_request(w->http, "POST", path, "application/json", text, strlen(text), NULL,
                        WORKER_REQ_TIMEOUT_MS, cb, arg);
  free(text);
  return rc;
}

static int worker_is_unknown(const struct http_resp *resp) {
  return resp->status == 404 && resp->body && strstr(resp->body, "unknown_worker");
}

/* The server's error code ("not_leased", ...) into buf; "" when none. */
static const char *worker_err_code(const struct http_resp *resp, char *buf, size_t len) {
  buf[0] = '\0';
  cJSON *b = resp->body ? cJSON_Parse(resp->body) : NULL;
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(b, "error");
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
  if (cJSON_IsString(c)) snprintf(buf, len, "%s", c->valuestring);
  cJSON_Delete(b);
  return buf;
}

/* 409 that means "this lease is over": everything of it is refused. */
/* Whether any CPU or GPU is free here: a lease may be asked for. */
static int worker_has_free(struct worker *w) {
  struct alloc_free f;
  alloc_free_amounts(&w->pool, &f);
  return f.cpu > 0 || f.gpu > 0;
}

/* Adds "free": what is free here now, as a lease request sends it, to o
 * (NULL: out of memory); 1 when done. */
static int worker_add_free(struct worker *w, cJSON *o) {
  struct alloc_free f;
  alloc_free_amounts(&w->pool, &f);
  cJSON *fr = o ? cJSON_AddObjectToObject(o, "free") : NULL;
  return fr && cJSON_AddNumberToObject(fr, "cpu", f.cpu) &&
         cJSON_AddNumberToObject(fr, "gpu", f.gpu) &&
         cJSON_AddNumberToObject(fr, "memory_mb", (double)f.memory_mb);
}

static int worker_lease_over(const struct http_resp *resp) {
  char code[64];
  if (resp->status != 409) return 0;
  worker_err_code(resp, code, sizeof code);
  return !strcmp(code, "not_leased") || !strcmp(code, "not_running");
}

/* The wait the server asked for with Retry-After (429 too_many_registrations,
 * 503 spool_unavailable ...): a floor under the retry's own backoff, so a
 * worker that backs off 100 ms does not knock again before the server said
 * it could answer (outbox_retry_after_ms). 0 when no answer came. */
static uint64_t worker_retry_after_ms(int err, const struct http_resp *resp) {
  char v[32];
  if (err || !resp) return 0;
  return outbox_retry_after_ms(resp->status, http_resp_header(resp, "Retry-After", v, sizeof v));
}

/* A 4xx that retrying cannot cure (the message itself is refused). 401
 * (this identity is unknown: registering again, see worker_on_ob_done), 408
 * and 429 are the server's state, not the message's: retried. 403 (not this
 * worker's trial) never changes: permanent. */
static int worker_refused(long st) {
  return st >= 400 && st < 500 && st != 401 && st != 408 && st != 429;
}

/* ---- queuing messages --------------------------------------------------- */

/* What a queued message is: "results", "fail", "complete", "release". */
static const char *worker_msg_what(const struct outbox_item *it) {
  const char *slash = strrchr(it->path, '/');
  return slash ? slash + 1 : it->path;
}

static const char *worker_end_queued(struct worker *w, const struct trial *t);
static void worker_keep_end_log(struct worker *w, struct trial *t);

static void worker_queue_end(struct worker *w, const struct trial *t, const char *what,
                             cJSON *body) {
  char path[96], *text = jsonout_print(body);
  snprintf(path, sizeof path, "/api/v1/trials/%d/%s", t->id, what);
  struct outbox_lease l = trial_fence(t);
  /* A trial's end must not wait for a full disk: memory is the fallback. */
  int rc = text ? outbox_push(&w->ob, OUTBOX_END, t->id, &l, path, text, OUTBOX_F_MEM) : -ENOMEM;
  if (rc < 0) log_error("trial %d: cannot queue its %s message: %s", t->id, what, strerror(-rc));
  free(text);
}

/* The last lines of stderr, bounded (kept from the end, cut at a character
 * boundary) and valid UTF-8: a tail cut inside a multi-byte character must
 * not make the server refuse the report. */
static char *worker_fail_text(const char *s) {
  if (!s) s = "";
  size_t len = strlen(s);
  if (len > WORKER_FAIL_BYTES) {
    s += len - WORKER_FAIL_BYTES;
    while ((*s & 0xC0) == 0x80) s++;
    len = strlen(s);
  }
  return outbox_utf8_clean(s, len, NULL);
}

static void worker_gang_post(struct worker *w, const struct trial *t, const char *route,
                             cJSON *body);

/* A gang's member other than rank 0 sends its fail at once (no outbox):
 * docs/worker.md#gang-members. */
static void worker_queue_fail(struct worker *w, const struct trial *t, const char *error,
                              int exit_code, const char *reason) {
  cJSON *b = cJSON_CreateObject();
  char *clean = worker_fail_text(error);
  if (b && clean) {
    cJSON_AddStringToObject(b, "error", clean);
    if (exit_code >= 0)
      cJSON_AddNumberToObject(b, "exit_code", exit_code);
    else
      cJSON_AddNullToObject(b, "exit_code");
    cJSON_AddStringToObject(b, "reason", reason);
    if (t->rank > 0)
      worker_gang_post(w, t, "fail", b);
    else
      worker_queue_end(w, t, "fail", b);
  } else {
    log_error("trial %d: out of memory building its fail message", t->id);
  }
  free(clean);
  cJSON_Delete(b);
}

static void worker_queue_release(struct worker *w, const struct trial *t) {
  cJSON *b = cJSON_CreateObject();
  int pre = t->stop_why == TRIAL_STOP_PREEMPT;
  if (!b || !cJSON_AddNumberToObject(b, "worker_id", t->lease_worker) ||
      !cJSON_AddNumberToObject(b, "iteration", t->last_iter) ||
      (pre && (!cJSON_AddStringToObject(b, "reason", "preempted") ||
               !cJSON_AddNumberToObject(b, "notice_at", w->notice_at)))) {
    log_error("trial %d: cannot build its release: its lease will expire", t->id);
  } else if (t->rank > 0) {
    /* A gang's member gives its lease back (no room here) at once, fenced
     * by its attempt and rank: the server ends the attempt of all. */
    worker_gang_post(w, t, "release", b);
  } else {
    worker_queue_end(w, t, "release", b);
  }
  cJSON_Delete(b);
}

static void worker_push_result(struct worker *w, struct trial *t, const char *body, int flags,
                               int *err) {
  char path[96];
  snprintf(path, sizeof path, "/api/v1/trials/%d/results", t->id);
  struct outbox_lease l = trial_fence(t);
  *err = outbox_push(&w->ob, OUTBOX_RESULT, t->id, &l, path, body, flags);
}

/* Held results go to the outbox as soon as it has room (or the disk has
 * space again); the paused trial continues once all of them are queued. */
static void worker_unhold(struct worker *w) {
  for (struct trial *t = w->trials; t; t = t->next) {
    if (!t->held) continue;
    int rc = 0;
    while (cJSON_GetArraySize(t->held) > 0) {
      cJSON *first = cJSON_GetArrayItem(t->held, 0);
      worker_push_result(w, t, first->valuestring, 0, &rc);
      if (rc < 0) break;
      cJSON_DeleteItemFromArray(t->held, 0);
    }
    if (rc < 0) {
      if (rc != -ENOSPC || t->held_err != -ENOSPC) t->held_err = rc;
      continue;
    }
    cJSON_Delete(t->held);
    t->held = NULL;
    worker_trial_event(w, t, TEV_RESUME, 0, 0);
  }
  worker_pump_outbox(w);
}

/* A trial whose results cannot be written (disk full) waits, but not for
 * ever: after --outbox-stall-s it is stopped and reported failed. A full
 * queue (server away) needs no such bound: self-fencing stops the trial. */
static void worker_check_stalls(struct worker *w) {
  double now = clock_mono_s();
  for (struct trial *t = w->trials; t; t = t->next) {
    if (!t->held || t->state != TRIAL_PAUSED) continue;
    int disk = !(t->held_err == -ENOSPC && !outbox_has_room(&w->ob));
    if (disk && w->o.outbox_stall_ms &&
        (now - t->held_since) * 1000 >= (double)w->o.outbox_stall_ms) {
      log_error("trial %d: its results cannot be written to %s/outbox for %.0f s (%s): "
                "stopping it and reporting it failed",
                t->id, w->o.work_dir, now - t->held_since, strerror(-t->held_err));
      worker_trial_event(w, t, TEV_STOP, TRIAL_STOP_OUTBOX, 0);
    }
  }
}

static void worker_on_result(void *arg, struct trial *t, cJSON *flat, double tv) {
  struct worker *w = arg;
  /* Results come from rank 0 only: another member's lines are its log. */
  if (t->rank > 0) {
    cJSON_Delete(flat);
    return;
  }
  /* As Ray does: an attempt whose first result lacks the experiment's metric
   * fails at once, naming the metric and what it did report, instead of
   * running unscheduled (ASHA would never see a value). That result and any
   * after it are not posted. trial.c wrote why. */
  if (t->fail_msg) {
    cJSON_Delete(flat);
    if (t->nresults == 1) {
      log_warn("trial %d failed: %s", t->id, t->fail_msg);
      worker_trial_event(w, t, TEV_STOP, TRIAL_STOP_METRIC, 0);
    }
    return;
  }
  char *body = jsonout_print(flat); /* exact numbers, bit for bit */
  cJSON_Delete(flat);
  if (!body) {
    log_error("trial %d: out of memory queuing result %g", t->id, tv);
    return;
  }
  if (strlen(body) > WORKER_MAX_RESULT) {
    log_error("trial %d: result %g is %zu bytes of JSON, more than the %d the worker sends: "
              "dropped",
              t->id, tv, strlen(body), WORKER_MAX_RESULT);
    free(body);
    t->dropped++;
    return;
  }
  int rc = -ENOSPC;
  if (!t->held) worker_push_result(w, t, body, 0, &rc);
  if (rc < 0) {
    /* Never drop a result: keep it and pause the trial until there is room. */
    cJSON *s = cJSON_CreateString(body);
    if (!t->held) {
      t->held = cJSON_CreateArray();
      t->held_err = rc;
      t->held_since = clock_mono_s();
    }
    if (!t->held || !s || !cJSON_AddItemToArray(t->held, s)) {
      cJSON_Delete(s);
      log_error("trial %d: out of memory holding result %g: lost", t->id, tv);
    }
    worker_trial_event(w, t, TEV_PAUSE, rc, 0);
  }
  free(body);
  worker_pump_outbox(w);
}

static void worker_on_checkpoint(void *arg, struct trial *t) {
  struct worker *w = arg;
  if (t->rank > 0) return; /* checkpoints come from rank 0 */
  /* A named file waits only for the results queued so far (its own line's
   * among them), not for those printed after it: a trial that reports
   * faster than the server acknowledges would else never have one uploaded
   * before it ends. Results held back from a full outbox are not queued
   * yet: then it waits for all. The held file stays until its upload is
   * settled (a newer one would wait for its own, newer, results: with
   * results always in flight, none would go); the newest named is taken
   * then (worker_upload_checkpoint). */
  if (t->ckpt_keyed) {
    t->ckpt_named.upto = t->held ? UINT64_MAX : w->ob.next_seq;
    trial_hold_named_checkpoint(t); /* now, before the trial replaces it */
  }
  t->ckpt_wanted = 1;
  worker_upload_checkpoint(w, t);
  /* Asked to checkpoint at a preemption notice, and it did: stop it now. */
  if (t->preempt_asked) worker_trial_event(w, t, TEV_STOP, TRIAL_STOP_PREEMPT, 0);
}

static void worker_release_grant(struct worker *w, struct trial *t) {
  if (!t->has_grant) return;
  alloc_release(&w->pool, &t->grant);
  t->has_grant = 0;
  worker_kick_lease(w, 0);
}

/* The message that ends this attempt, queued behind its results (the lane
 * sends it after the last checkpoint upload: worker_lane_blocked). */
static void worker_queue_trial_end(struct worker *w, struct trial *t) {
  int code = t->exit_code, sig = t->term_signal;
  double ran = clock_mono_s() - t->leased_at;
  if (t->rank > 0) {
    /* A gang's other member: rank 0 ends the trial; a member that failed
     * on its own ends the attempt of all (one failure). */
    int own = t->stop_why == TRIAL_STOP_NONE || t->stop_why == TRIAL_STOP_OUTBOX;
    log_info("trial %d rank %d ended (exit %d, signal %d) after %.1f s", t->id, t->rank, code, sig,
             ran);
    if (own && (code != 0 || sig)) {
      char *lines = tail_last_lines(&t->err, TRIAL_FAIL_LINES);
      worker_queue_fail(w, t, lines ? lines : "", sig ? -1 : code, "member_failed");
      free(lines);
    }
    return;
  }
  switch (t->stop_why) {
  case TRIAL_STOP_SERVER:
    log_info("trial %d stopped at the server's request after %.1f s", t->id, ran);
    return;
  case TRIAL_STOP_DRAIN:
  case TRIAL_STOP_FENCE:
  case TRIAL_STOP_PREEMPT:
    log_info("trial %d (attempt %ld) stopped by the %s at iteration %g (exit %d); its lease "
             "is released once its checkpoint and results are delivered, and it resumes "
             "from its checkpoint",
             t->id, t->attempt,
             t->stop_why == TRIAL_STOP_DRAIN   ? "drain"
             : t->stop_why == TRIAL_STOP_FENCE ? "self-fencing"
                                               : "preemption notice",
             t->last_iter, code);
    if (t->lease_worker) worker_queue_release(w, t);
    return;
  case TRIAL_STOP_OUTBOX:
    worker_queue_fail(w, t,
                      "the worker could not write the trial's results to its outbox "
                      "(disk full or unwritable) for longer than --outbox-stall-s",
                      -1, "internal");
    return;
  case TRIAL_STOP_METRIC:
    worker_queue_fail(w, t, t->fail_msg ? t->fail_msg : "result has no metric", -1,
                      "missing_metric");
    return;
  case TRIAL_STOP_DECISION:
  case TRIAL_STOP_NONE:
    break;
  }
  if (t->stop_why == TRIAL_STOP_DECISION || (code == 0 && !sig)) {
    log_info("trial %d %s after %ld result(s), %.1f s", t->id,
             t->stop_why == TRIAL_STOP_DECISION ? "stopped by the scheduler" : "finished",
             t->nresults, ran);
    cJSON *b = cJSON_CreateObject();
    if (b) worker_queue_end(w, t, "complete", b);
    cJSON_Delete(b);
    return;
  }
  char *lines = tail_last_lines(&t->err, TRIAL_FAIL_LINES);
  char *msg = NULL;
  const char *reason = "internal";
  /* How its memory was limited (worker_spawn_trial), for an out-of-memory end. */
  int rlimit = !(w->o.cgroup && w->o.cgroup->enabled) && t->grant.ngpus == 0;
  struct failure_in fi = {.command = failure_is_command(t->lease),
                          .exit_code = code,
                          .term_signal = sig,
                          .lines = lines,
                          .memory_mb = t->grant.memory_mb,
                          .memory_how = t->cgroup ? "cgroup memory.max"
                                        : rlimit  ? "RLIMIT_AS"
                                                  : NULL,
                          .oom_kills = t->cgroup ? cgroup_trial_oom_kills(t->cgroup) : 0};
  if (failure_describe(&fi, &reason, &msg)) msg = NULL;
  log_warn("trial %d failed: %s (exit %d, signal %d)", t->id, reason, code, sig);
  worker_queue_fail(w, t, msg ? msg : lines, sig ? -1 : code, reason);
  free(msg);
  free(lines);
}

static void worker_trial_done(struct worker *w, struct trial *t) {
  if (t->rdzv_port) rdzv_port_put(&w->rdzv, t->rdzv_port);
  struct trial **pp = &w->trials;
  while (*pp && *pp != t) pp = &(*pp)->next;
  if (*pp) *pp = t->next;
  trial_free(t);
  worker_pump_outbox(w); /* its end message may go now */
  worker_check_drained(w);
}

static const char *const trial_state_names[] = {"FETCHING", "SPAWNING", "RUNNING",  "PAUSED",
                                                "STOPPING", "EXITED",   "FLUSHING", "DONE"};

static void worker_trial_set(struct trial *t, enum trial_state s) {
  log_debug("trial %d attempt %ld: %s -> %s", t->id, t->attempt, trial_state_names[t->state],
            trial_state_names[s]);
  t->state = s;
}

/* FLUSHING ends when the last checkpoint (and log) upload is over. */
static void worker_trial_flushed(struct worker *w, struct trial *t) {
  if (t->state != TRIAL_FLUSHING || t->ckpt_inflight || t->log_inflight || t->ckpt_wanted) return;
  worker_trial_set(t, TRIAL_DONE);
  worker_trial_done(w, t);
}

/* The trial life cycle: every event about a trial goes through here, and
 * this is the only place that changes t->state. An event that makes no sense
 * in a state (a stop for a trial already stopping, a pause after its exit)
 * is ignored. */
static void worker_trial_event(struct worker *w, struct trial *t, enum trial_event ev, int a,
                               int b) {
  switch (ev) {
  case TEV_SPAWNED:
    if (t->state == TRIAL_FETCHING) worker_trial_set(t, TRIAL_SPAWNING);
    return;
  case TEV_REPORTED:
    /* A failed report ends it as a failed start (proc.h): its exit comes. A
     * stop that came first stays (proc applies it now). */
    if (t->state == TRIAL_SPAWNING) worker_trial_set(t, TRIAL_RUNNING);
    return;
  case TEV_START_FAILED:
    /* The caller queued the fail. */
    if (t->state != TRIAL_FETCHING) return;
    worker_release_grant(w, t);
    if (a)
      worker_trial_set(t, TRIAL_EXITED); /* TEV_CLOSED follows */
    else {
      worker_trial_set(t, TRIAL_FLUSHING);
      worker_trial_flushed(w, t);
    }
    return;
  case TEV_STOP:
    switch (t->state) {
    case TRIAL_FETCHING:
      /* Leased but not started: drain and fence give the lease back. */
      t->stop_why = (enum trial_stop)a;
      worker_release_grant(w, t);
      if (a == TRIAL_STOP_DRAIN || a == TRIAL_STOP_FENCE || a == TRIAL_STOP_PREEMPT)
        worker_queue_release(w, t);
      worker_trial_set(t, TRIAL_FLUSHING);
      worker_trial_flushed(w, t);
      return;
    case TRIAL_SPAWNING: /* proc stops it once its pid is reported */
    case TRIAL_RUNNING:
    case TRIAL_PAUSED:
      t->stop_why = (enum trial_stop)a;
      worker_trial_set(t, TRIAL_STOPPING);
      proc_stop(&t->proc, a == TRIAL_STOP_PREEMPT
                              ? w->preempt.term_ms
                              : w->o.stop_grace_ms); /* SIGCONT too when paused */
      return;
    default:
      return; /* already stopping: the first reason decides its end message */
    }
  case TEV_KILL:
    if (t->state == TRIAL_SPAWNING || t->state == TRIAL_RUNNING || t->state == TRIAL_PAUSED) {
      t->stop_why = w->preempting ? TRIAL_STOP_PREEMPT : TRIAL_STOP_DRAIN;
      worker_trial_set(t, TRIAL_STOPPING);
    }
    if (t->state == TRIAL_STOPPING) proc_stop(&t->proc, 0);
    return;
  case TEV_PAUSE:
    if (t->state != TRIAL_RUNNING) return;
    log_warn("trial %d: outbox full (%zu results queued) or unwritable (%s): pausing the "
             "trial until its results can be queued",
             t->id, w->ob.n_results, strerror(a < 0 ? -a : ENOSPC));
    if (kill(-t->proc.pid, SIGSTOP) != 0)
      log_warn("trial %d: cannot pause process group %d: %s", t->id, t->proc.pid, strerror(errno));
    worker_trial_set(t, TRIAL_PAUSED);
    return;
  case TEV_RESUME:
    if (t->state != TRIAL_PAUSED) return;
    log_info("trial %d: outbox has room again, resuming the trial", t->id);
    kill(-t->proc.pid, SIGCONT);
    worker_trial_set(t, TRIAL_RUNNING);
    return;
  case TEV_EXIT:
    if (t->state != TRIAL_SPAWNING && t->state != TRIAL_RUNNING && t->state != TRIAL_PAUSED &&
        t->state != TRIAL_STOPPING)
      return;
    t->exit_code = a;
    t->term_signal = b;
    worker_trial_set(t, TRIAL_EXITED);
    worker_release_grant(w, t);
    /* Results still held go ahead of the trial's end, beyond the bound. */
    if (t->held) {
      cJSON *s;
      int rc;
      cJSON_ArrayForEach(s, t->held) {
        worker_push_result(w, t, s->valuestring, OUTBOX_F_FORCE | OUTBOX_F_MEM, &rc);
        if (rc < 0) log_error("trial %d: cannot queue a held result: %s", t->id, strerror(-rc));
      }
      cJSON_Delete(t->held);
      t->held = NULL;
    }
    worker_queue_trial_end(w, t);
    t->ckpt_wanted = 1; /* the last one, once its results are acknowledged */
    t->ckpt_ahead = 0;
    worker_upload_checkpoint(w, t);
    const char *end = worker_end_queued(w, t);
    t->log_in_end = end && (!strcmp(end, "complete") || !strcmp(end, "fail"));
    /* Its complete will ask for the next lease: no lease request of its own
     * meanwhile (worker_complete_will_ask). */
    t->end_asks = end && !strcmp(end, "complete") && t->lease_worker == w->id;
    t->exited_at = clock_mono_s();
    worker_upload_logs(w, t);
    trial_close(t);
    worker_pump_outbox(w);
    return;
  case TEV_CLOSED:
    if (t->state != TRIAL_EXITED) return;
    if (t->log_in_end) worker_keep_end_log(w, t);
    if (t->cgroup) cgroup_trial_remove(t->cgroup);
    worker_trial_set(t, TRIAL_FLUSHING);
    worker_trial_flushed(w, t);
    return;
  case TEV_UPLOADED:
    worker_trial_flushed(w, t);
    return;
  }
}

static void worker_on_spawned(void *arg, struct trial *t, int err) {
  char cpus[ALLOC_MAX_CPUS * 5], gpus[ALLOC_MAX_GPUS * 5];
  cpuset_format(t->grant.cpus, t->grant.ncpus, cpus, sizeof cpus);
  cpuset_format(t->grant.gpus, t->grant.ngpus, gpus, sizeof gpus);
  if (err < 0)
    log_error("trial %d: its supervisor (pid %d) did not report the trial's pid (%s): a failed "
              "start",
              t->id, t->proc.super_pid, strerror(-err));
  else
    log_info("trial %d running: pid %d, cpus %s, gpus [%s], dispatch %.2f ms", t->id, t->proc.pid,
             cpus, gpus, (clock_mono_s() - t->leased_at) * 1e3);
  worker_trial_event(arg, t, TEV_REPORTED, err, 0);
}

static void worker_on_exit(void *arg, struct trial *t, int code, int sig) {
  worker_trial_event(arg, t, TEV_EXIT, code, sig);
}

static void worker_on_closed(void *arg, struct trial *t) {
  struct worker *w = arg;
  worker_trial_event(w, t, TEV_CLOSED, 0, 0);
  worker_check_drained(w);
}

static const struct trial_events worker_trial_events = {
    worker_on_spawned, worker_on_result, worker_on_exit, worker_on_closed, worker_on_checkpoint};

/* ---- uploads: checkpoints and logs ---------------------------------- */

/* Results of t's lease still queued that its checkpoint waits for. */
static size_t worker_ckpt_waits_for(struct worker *w, const struct trial *t,
                                    const struct outbox_lease *l) {
  const struct outbox_lane *lane = outbox_lane(&w->ob, t->id);
  if (!t->ckpt_keyed || t->ckpt_held_upto == UINT64_MAX) return outbox_lane_results(lane, l);
  size_t n = 0;
  for (const struct outbox_item *it = lane ? lane->head : NULL; it; it = it->next)
    n += it->kind == OUTBOX_RESULT && it->seq < t->ckpt_held_upto &&
         it->lease.worker_id == l->worker_id && it->lease.attempt == l->attempt;
  return n;
}

/* A checkpoint upload that failed for a reason that may pass (no answer,
 * 5xx, 401/408/429): tried again after outbox_backoff_ms, as a queued
 * message is, for as long as its lease holds (a final one too: the trial's
 * end waits for it; a server that ended the lease answers 409 not_leased). */
static void worker_ckpt_failed(struct trial *t, long st, const char *code, uint64_t at_least_ms) {
  uint64_t now = clock_mono_ms();
  if (!t->ckpt_failing_since) t->ckpt_failing_since = now ? now : 1;
  t->ckpt_tries++;
  uint64_t d = outbox_backoff_ms(t->ckpt_tries);
  t->ckpt_next_ms = now + (d > at_least_ms ? d : at_least_ms);
  t->ckpt_last_status = st;
  snprintf(t->ckpt_last_code, sizeof t->ckpt_last_code, "%s", code);
  t->ckpt_wanted = 1;
}

/* This file is not sent again; a new one starts afresh. */
static void worker_ckpt_settled(struct trial *t, const struct wreq *r) {
  if (r->held_seq) {
    /* Its held file is done with; a newer named one goes next. */
    if (r->held_seq == t->ckpt_held_seq) trial_drop_held_checkpoint(t);
    if (t->ckpt_named.valid) t->ckpt_wanted = 1;
  } else {
    t->ckpt_mtime_ns = r->mtime_ns;
    t->ckpt_size = r->size;
  }
  t->ckpt_tries = 0;
  t->ckpt_next_ms = 0;
  t->ckpt_failing_since = 0;
  t->ckpt_last_status = 0;
  t->ckpt_last_code[0] = '\0';
  t->ckpt_stuck = 0;
}

static void worker_on_ckpt_put(void *arg, int err, const struct http_resp *resp) {
  struct wreq *r = arg;
  struct worker *w = r->w;
  w->uploads--;
  struct trial *t = worker_by_key(w, r->key);
  char code[64] = "";
  long st = resp->status;
  if (!err) worker_err_code(resp, code, sizeof code);
  if (t) t->ckpt_inflight = 0;
  if (!err && st / 100 == 2) {
    if (t) {
      worker_ckpt_settled(t, r);
      t->ckpt_ahead = 0;
    }
    log_debug("trial %d: checkpoint uploaded (%lld bytes)", r->trial_id, r->size);
    w->ckpt_failing = 0;
  } else if (!err && st == 409 && !strcmp(code, "checkpoint_ahead")) {
    struct outbox_lease l = t ? trial_fence(t) : (struct outbox_lease){0, 0};
    if (!t) {
      /* gone: nothing to send again */
    } else if (worker_ckpt_waits_for(w, t, &l) > 0) {
      /* Its results are not all stored yet: again once they are
       * acknowledged (worker_after_ack). */
      log_debug("trial %d: checkpoint ahead of the stored results: again once they are",
                r->trial_id);
      t->ckpt_wanted = 1;
    } else if (!t->dropped && ++t->ckpt_ahead < WORKER_CKPT_PUT_TRIES) {
      /* None queued and none dropped: stored since the server looked.
       * Again after a backoff, a few times, never in a loop. */
      log_debug("trial %d: checkpoint ahead of the stored results, none queued: again in "
                "%llu ms",
                r->trial_id, (unsigned long long)outbox_backoff_ms(t->ckpt_ahead));
      t->ckpt_wanted = 1;
      t->ckpt_next_ms = clock_mono_ms() + outbox_backoff_ms(t->ckpt_ahead);
    } else {
      /* Some of its results were refused for good (or never sent): the
       * server can never take this file, and the trial's end must not wait
       * for it. */
      if (t->dropped)
        log_warn("trial %d: checkpoint ahead of the results the server stored (%ld of this "
                 "attempt's results will never be stored): not uploaded",
                 r->trial_id, t->dropped);
      else
        log_warn("trial %d: checkpoint ahead of the results the server stored, none left to "
                 "send: not uploaded",
                 r->trial_id);
      worker_ckpt_settled(t, r);
    }
  } else if (!err && (worker_refused(st) || st == 409)) {
    log_warn("trial %d: server refused its checkpoint (HTTP %ld %s): %.200s", r->trial_id, st, code,
             resp->body ? resp->body : "");
    if (t) worker_ckpt_settled(t, r); /* not this file again */
  } else {
    if (!w->ckpt_failing++) /* once per outage, not once per epoch */
      log_warn("trial %d: checkpoint upload failed (%s, HTTP %ld %.200s); retrying with backoff",
               r->trial_id, err ? strerror(-err) : "server error", st,
               resp->body ? resp->body : "");
    if (t && !w->shut) {
      worker_ckpt_failed(t, err ? 0 : st, code, worker_retry_after_ms(err, resp));
      log_debug("trial %d: checkpoint upload failed (try %d): again in %llu ms", r->trial_id,
                t->ckpt_tries, (unsigned long long)(t->ckpt_next_ms - clock_mono_ms()));
    }
  }
  free(r);
  if (t) {
    worker_upload_checkpoint(w, t); /* when wanted, due and its results are stored */
    worker_trial_event(w, t, TEV_UPLOADED, 0, 0);
  }
  worker_pump_outbox(w); /* arms the timer of a retry */
  worker_check_drained(w);
}

/* Uploads a checkpoint when it is wanted, no PUT is in flight, its
 * backoff is over, and every result of this attempt is acknowledged (the
 * server refuses a checkpoint ahead of its stored results; a keyed trial's
 * held file waits only for the results up to its line). A keyed trial
 * (docs/worker.md#checkpoints) sends its held file, labelled with its
 * line's iteration; any other sends checkpoint.bin as it is now, labelled
 * with the last result read. */
static void worker_upload_checkpoint(struct worker *w, struct trial *t) {
  if (!t->ckpt_wanted || t->ckpt_inflight || w->shut) return;
  if (t->fail_msg || t->rank > 0) {
    /* Its results lack the metric and were never sent: the server would
     * answer checkpoint_ahead for ever, and its fail must not wait. A
     * gang's member other than rank 0 uploads none. */
    t->ckpt_wanted = 0;
    return;
  }
  if (t->ckpt_next_ms && clock_mono_ms() < t->ckpt_next_ms) return; /* backing off */
  if (t->ckpt_keyed) trial_hold_named_checkpoint(t);                /* when none is held */
  struct outbox_lease l = trial_fence(t);
  if (worker_ckpt_waits_for(w, t, &l) > 0) return;
  if (t->held && (!t->ckpt_keyed || t->ckpt_held_upto == UINT64_MAX))
    return; /* results not queued yet: after them (worker_after_ack) */
  t->ckpt_wanted = 0;
  struct stat st;
  unsigned char *data = NULL;
  struct wreq *r = NULL;
  int fd = -1, rfd;
  double label = t->last_iter;
  long long mt = 0;
  if (t->ckpt_keyed) {
    /* The held file (none: the last one named is uploaded already). */
    if ((rfd = t->ckpt_held_fd) < 0 || fstat(rfd, &st) != 0) goto done;
    label = t->ckpt_held_iter;
  } else {
    /* Never through a symlink the trial planted (it would upload any file
     * the worker can read): trial_open_checkpoint refuses and logs it. */
    if ((rfd = fd = trial_open_checkpoint(t, &st)) < 0) goto done;
    mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (mt == t->ckpt_mtime_ns && (long long)st.st_size == t->ckpt_size) goto done;
  }
  if (st.st_size > WORKER_MAX_CHECKPOINT || st.st_size == 0) {
    log_warn("trial %d: checkpoint of %lld bytes is not uploaded", t->id, (long long)st.st_size);
    if (t->ckpt_keyed) {
      trial_drop_held_checkpoint(t);
      t->ckpt_wanted = t->ckpt_named.valid; /* the next named one */
    }
    goto done;
  }
  size_t len = (size_t)st.st_size, got = 0;
  data = malloc(len);
  if (!data) goto done;
  while (got < len) {
    /* pread: a held file is read again from its start after a failed try. */
    ssize_t n = pread(rfd, data + got, len - got, (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  if (got != len) {
    log_warn("trial %d: checkpoint changed while reading it; next result retries", t->id);
    if (t->ckpt_keyed) {
      trial_drop_held_checkpoint(t);
      t->ckpt_wanted = t->ckpt_named.valid;
    }
    goto done;
  }
  if (!t->ckpt_keyed) {
    /* The label is the last result seen, so first read the results the
     * trial printed before it saved this snapshot (they may still sit in
     * the pipe: a checkpoint labelled 2 held iteration 3 in a chaos run).
     * New results go first; the upload follows once they are acknowledged.
     * A line read now may make the trial keyed: then its held file goes. */
    long seen = t->nresults;
    proc_drain_stdout(&t->proc);
    if (t->nresults != seen || t->ckpt_keyed) {
      t->ckpt_wanted = 1;
      goto done;
    }
  }
  uLong crc = crc32(0L, data, (uInt)len);
  char h_iter[64], h_crc[64], h_lease[64], up[96];
  snprintf(h_iter, sizeof h_iter, "X-Ctune-Iteration: %lld", (long long)label);
  snprintf(h_crc, sizeof h_crc, "X-Ctune-Crc32: %08lx", (unsigned long)crc);
  fence_header(&l, h_lease, sizeof h_lease);
  snprintf(up, sizeof up, "/api/v1/trials/%d/checkpoint", t->id);
  const char *hdrs[] = {h_iter, h_crc, h_lease, NULL};
  if (!(r = wreq_new(w, t, 0))) goto done;
  r->mtime_ns = mt;
  r->size = (long long)len;
  r->held_seq = t->ckpt_keyed ? t->ckpt_held_seq : 0;
  if (http_request(w->http, "PUT", up, "application/octet-stream", (const char *)data, len, hdrs,
                   WORKER_UPLOAD_TIMEOUT_MS, worker_on_ckpt_put, r) == 0) {
    log_debug("trial %d: uploading its checkpoint (%zu bytes, iteration %lld)", t->id, len,
              (long long)label);
    r = NULL;
    t->ckpt_inflight = 1;
    w->uploads++;
  }
done:
  if (fd >= 0) close(fd);
  free(data);
  free(r);
}

static void worker_on_log_put(void *arg, int err, const struct http_resp *resp) {
  struct wreq *r = arg;
  struct worker *w = r->w;
  w->uploads--;
  struct trial *t = worker_by_key(w, r->key);
  if (err || resp->status / 100 != 2)
    log_debug("trial %d: log upload failed (%s, HTTP %ld)", r->trial_id,
              err ? strerror(-err) : "refused", resp->status);
  if (t) {
    t->log_inflight = 0;
    if (!err && resp->status / 100 == 2) t->log_sent_total = r->log_total;
    if (t->log_dirty) {
      t->log_dirty = 0;
      worker_upload_logs(w, t);
    }
  }
  free(r);
  if (t) worker_trial_event(w, t, TEV_UPLOADED, 0, 0);
  worker_check_drained(w);
}

/* The log tail as it goes to the server (at most TRIAL_LOG_TAIL bytes of
 * the end, valid UTF-8, cut at a character); *len its length. NULL when out
 * of memory. */
static char *worker_log_text(struct trial *t, size_t *len) {
  size_t n = 0, clen = 0;
  char *text = tail_copy(&t->log, &n);
  /* The tail may start inside a character, and a trial may print anything. */
  char *clean = text ? outbox_utf8_clean(text, n, &clen) : NULL;
  free(text);
  if (clean && clen > TRIAL_LOG_TAIL) {
    /* Replacement characters may grow it: keep the end within the limit. */
    const char *send = clean + (clen - TRIAL_LOG_TAIL);
    while ((*send & 0xC0) == 0x80) send++;
    clen = strlen(send);
    memmove(clean, send, clen + 1);
  }
  *len = clen;
  return clean;
}

static void worker_upload_logs(struct worker *w, struct trial *t) {
  /* A trial whose complete/fail carries its final tail sends none alone. */
  if (t->log_in_end || t->log.total == t->log_sent_total || w->shut) return;
  if (t->log_inflight) {
    t->log_dirty = 1;
    return;
  }
  size_t clen = 0;
  char *clean = worker_log_text(t, &clen);
  struct wreq *r = wreq_new(w, t, 0);
  char path[96], h_lease[64];
  snprintf(path, sizeof path, "/api/v1/trials/%d/logs", t->id);
  struct outbox_lease l = trial_fence(t);
  fence_header(&l, h_lease, sizeof h_lease);
  char h_rank[32];
  snprintf(h_rank, sizeof h_rank, "X-Ctune-Rank: %d", t->rank);
  const char *hdrs[] = {h_lease, t->rank > 0 ? h_rank : NULL, NULL};
  if (clean && r) {
    r->log_total = t->log.total;
    if (http_request(w->http, "PUT", path, "text/plain; charset=utf-8", clean, clen, hdrs,
                     WORKER_UPLOAD_TIMEOUT_MS, worker_on_log_put, r) == 0) {
      r = NULL;
      t->log_inflight = 1;
      w->uploads++;
    }
  }
  free(r);
  free(clean);
}

/* The end message just queued for t's lease ("complete", "fail",
 * "release"), or NULL. A complete or fail carries the final log tail
 * (docs/worker.md#logs), one request fewer between a trial's end and the
 * next. */
static const char *worker_end_queued(struct worker *w, const struct trial *t) {
  const struct outbox_lane *l = outbox_lane(&w->ob, t->id);
  const struct outbox_item *it = l ? l->tail : NULL;
  struct outbox_lease f = trial_fence(t);
  if (t->rank > 0 || !it || it->kind != OUTBOX_END || !lease_same(&it->lease, &f)) return NULL;
  return worker_msg_what(it);
}

/* At the pty's end (the output is whole): the final tail, kept for the
 * end message (worker_end_body). */
static void worker_keep_end_log(struct worker *w, struct trial *t) {
  struct outbox_lane *l = outbox_lane(&w->ob, t->id);
  if (!l || t->log.total == t->log_sent_total) return;
  size_t len = 0;
  char *text = worker_log_text(t, &len);
  if (!text) {
    log_warn("trial %d: no memory for its final log tail: it is not sent", t->id);
    return;
  }
  free(l->end_log);
  l->end_log = text;
  l->end_log_lease = trial_fence(t);
}

/* "HTTP 503 spool_unavailable" or "no answer from the server". */
static void worker_why(long st, const char *code, char *buf, size_t len) {
  if (st)
    snprintf(buf, len, "HTTP %ld%s%s", st, code && *code ? " " : "", code ? code : "");
  else
    snprintf(buf, len, "no answer from the server");
}

/* The note a heartbeat carries for a trial whose delivery is stuck while
 * the server answers (docs/protocol.md#heartbeat): the server
 * stores it as an event of the trial. An outage is left out: the server
 * sees that by itself, and its end delivers everything. 0 and "" when the
 * trial's delivery is not stuck. */
static int worker_stuck_note(struct worker *w, int id, long attempt, char *buf, size_t len) {
  uint64_t now = clock_mono_ms();
  char why[96];
  buf[0] = '\0';
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->id == id && t->attempt == attempt && t->ckpt_stuck && t->ckpt_last_status) {
      worker_why(t->ckpt_last_status, t->ckpt_last_code, why, sizeof why);
      snprintf(buf, len,
               "could not upload the trial's %scheckpoint for %.0f s (%s); retrying with "
               "backoff%s",
               t->state >= TRIAL_EXITED ? "final " : "",
               (double)(now - t->ckpt_failing_since) / 1000, why,
               t->state >= TRIAL_EXITED ? "; the trial's end waits for it" : "");
      return 1;
    }
  const struct outbox_lane *l = outbox_lane(&w->ob, id);
  if (l && l->head && l->stuck && l->last_status && l->head->lease.attempt == attempt) {
    worker_why(l->last_status, l->last_code, why, sizeof why);
    snprintf(buf, len, "could not deliver the trial's %s for %.0f s (%s); retrying with backoff",
             worker_msg_what(l->head), (double)outbox_failing_ms(l, now) / 1000, why);
    return 1;
  }
  return 0;
}

/* A message or checkpoint failing for WORKER_STUCK_HEARTBEATS heartbeat
 * intervals is said once (not at every retry): a warning here, and a note
 * in the heartbeats (worker_stuck_note) until it goes through. */
static void worker_check_stuck(struct worker *w) {
  uint64_t now = clock_mono_ms();
  uint64_t after = (uint64_t)(WORKER_STUCK_HEARTBEATS * w->hb_interval_s * 1000);
  char why[96];
  for (struct outbox_lane *l = w->ob.lanes; l; l = l->next) {
    if (!l->head || l->stuck || outbox_failing_ms(l, now) < after) continue;
    l->stuck = 1;
    worker_why(l->last_status, l->last_code, why, sizeof why);
    log_warn("trial %d: its %s has not been delivered for %.0f s (%s, %d tries): %zu "
             "message(s) held, retrying with backoff (at most %.0f s apart, or as the server asks)",
             l->trial_id, worker_msg_what(l->head), (double)outbox_failing_ms(l, now) / 1000, why,
             l->attempts, l->n, (double)outbox_backoff_ms(1000) / 1000);
  }
  for (struct trial *t = w->trials; t; t = t->next) {
    if (!t->ckpt_wanted || !t->ckpt_failing_since || t->ckpt_stuck ||
        now - t->ckpt_failing_since < after)
      continue;
    t->ckpt_stuck = 1;
    worker_why(t->ckpt_last_status, t->ckpt_last_code, why, sizeof why);
    log_warn("trial %d: its %scheckpoint has not been uploaded for %.0f s (%s, %d tries): "
             "retrying with backoff (at most %.0f s apart, or as the server asks)%s",
             t->id, t->state >= TRIAL_EXITED ? "final " : "",
             (double)(now - t->ckpt_failing_since) / 1000, why, t->ckpt_tries,
             (double)outbox_backoff_ms(1000) / 1000,
             t->state >= TRIAL_EXITED ? "; the trial's end waits for it" : "");
  }
}

/* Every 2 s (a test build may tick faster: worker_start): logs that
 * changed, checkpoints that wait for a retry, trials waiting for outbox
 * space, deliveries stuck for long. */
static void worker_on_log_timer(uv_timer_t *h) {
  struct worker *w = h->data;
  worker_unhold(w);
  worker_check_stalls(w);
  worker_check_stuck(w);
  struct trial *t = w->trials;
  while (t) {
    struct trial *next = t->next; /* an upload that cannot start may end t */
    if (t->state == TRIAL_RUNNING || t->state == TRIAL_PAUSED || t->state == TRIAL_STOPPING)
      worker_upload_logs(w, t);
    if (t->ckpt_wanted) worker_upload_checkpoint(w, t);
    worker_trial_flushed(w, t);
    t = next;
  }
}

/* ---- leasing and starting trials ---------------------------------------- */

static void worker_abort_trial(struct worker *w, struct trial *t, const char *msg,
                               const char *reason) {
  log_warn("trial %d cannot start: %s", t->id, msg);
  worker_queue_fail(w, t, msg, -1, reason);
  worker_trial_event(w, t, TEV_START_FAILED, 0, 0);
  worker_pump_outbox(w);
}

/* A member's end and rank 0's rendezvous go straight to the server, not
 * through the outbox: a worker that dies takes its members with it, and the
 * server ends that attempt on its own (docs/worker.md#gang-members). */
static void worker_on_gang_reply(void *arg, int err, const struct http_resp *resp) {
  char *what = arg;
  if (err || resp->status / 100 != 2)
    log_warn("%s: %s (HTTP %ld %.200s)", what, err ? strerror(-err) : "refused", resp->status,
             resp->body ? resp->body : "");
  free(what);
}

static void worker_gang_post(struct worker *w, const struct trial *t, const char *route,
                             cJSON *body) {
  char path[96], h_lease[64], h_rank[32], *what = NULL;
  snprintf(path, sizeof path, "/api/v1/trials/%d/%s", t->id, route);
  struct outbox_lease l = trial_fence(t);
  fence_header(&l, h_lease, sizeof h_lease);
  snprintf(h_rank, sizeof h_rank, "X-Ctune-Rank: %d", t->rank);
  const char *hdrs[] = {h_lease, h_rank, NULL};
  char *text = body ? cJSON_PrintUnformatted(body) : NULL;
  if (text && asprintf(&what, "trial %d rank %d: %s", t->id, t->rank, route) < 0) what = NULL;
  if (!text || !what ||
      http_request(w->http, "POST", path, "application/json", text, strlen(text), hdrs,
                   WORKER_UPLOAD_TIMEOUT_MS, worker_on_gang_reply, what) < 0) {
    log_warn("trial %d rank %d: cannot send %s", t->id, t->rank, route);
    free(what);
  }
  free(text);
}

/* Rank 0 of a gang: a port free here that no other trial of this worker
 * holds, written into its lease (the members' MASTER_PORT) and reported. */
static int worker_gang_rendezvous(struct worker *w, struct trial *t) {
  cJSON *g = cJSON_GetObjectItemCaseSensitive(t->lease, "gang");
  if (t->world < 2 || t->rank != 0 || !cJSON_IsObject(g) || t->rdzv_port) return 0;
  const char *addr = w->o.advertise_addr ? w->o.advertise_addr : w->local_ip;
  if (!addr[0]) return -EADDRNOTAVAIL;
  int port = rdzv_port_take(&w->rdzv, rdzv_probe_free_port, NULL);
  if (port < 0) return port;
  t->rdzv_port = port;
  cJSON *b = cJSON_CreateObject();
  if (!b || !cJSON_AddStringToObject(b, "master_addr", addr) ||
      !cJSON_AddNumberToObject(b, "master_port", port)) {
    cJSON_Delete(b);
    return -ENOMEM;
  }
  cJSON_ReplaceItemInObjectCaseSensitive(g, "master_addr", cJSON_CreateString(addr));
  cJSON_ReplaceItemInObjectCaseSensitive(g, "master_port", cJSON_CreateNumber(port));
  log_info("trial %d: rank 0 of %d meets its members at %s:%d", t->id, t->world, addr, port);
  worker_gang_post(w, t, "rendezvous", b);
  cJSON_Delete(b);
  return 0;
}

static void worker_spawn_trial(struct worker *w, struct trial *t, int resume) {
  char cpus[ALLOC_MAX_CPUS * 5], gpus[ALLOC_MAX_GPUS * 5], err[512] = "";
  cpuset_format(t->grant.cpus, t->grant.ncpus, cpus, sizeof cpus);
  cpuset_format(t->grant.gpus, t->grant.ngpus, gpus, sizeof gpus);
  if (t->state != TRIAL_FETCHING) return;
  if (w->draining || w->fenced) { /* leased but never started: give it back */
    worker_trial_event(w, t, TEV_STOP, w->draining ? TRIAL_STOP_DRAIN : TRIAL_STOP_FENCE, 0);
    return;
  }
  struct trainable_ctx ctx = {
      .train_bin = w->o.train_bin,
      .trial_dir = t->dir,
      .resume = resume,
      .threads = t->grant.ncpus > 0 && !t->grant.cpu_shared ? t->grant.ncpus : 1,
      .cuda_visible = gpus,
      .ngpus = t->grant.ngpus,
      .gpu_mem_limit_mb = t->grant.gpu_mem_mb,
      .base_env = environ,
      .iso = isolate_current(),
  };
  struct trainable_cmd cmd;
  int rc = worker_gang_rendezvous(w, t);
  if (rc < 0) {
    worker_abort_trial(w, t, "cannot choose a rendezvous port or address for the gang", "internal");
    return;
  }
  t->clock.prev_iter = trial_start_iteration(t->lease, resume);
  t->clock.start_total = trial_start_time_total(t->lease, resume);
  rc = trainable_build(t->lease, &ctx, &cmd, err, sizeof err);
  if (rc < 0) {
    worker_abort_trial(w, t, rc == -EINVAL ? err : strerror(-rc),
                       rc == -EINVAL ? "bad_config" : "internal");
    return;
  }
  /* Memory: a cgroup would cap resident memory; RLIMIT_AS caps address
   * space, which CUDA reserves by the terabyte, so GPU trials go without. */
  struct proc_limits lim = {cpus, 0, NULL, !cmd.stdout_pipe};
  char cg[4300];
  if (w->o.cgroup && w->o.cgroup->enabled) {
    rc = cgroup_trial_create(w->o.cgroup, worker_slot_id(t), t->grant.cpu_quota, t->grant.memory_mb,
                             cg, sizeof cg);
    if (rc == 0 && (t->cgroup = strdup(cg)))
      lim.cgroup = t->cgroup;
    else
      log_warn("trial %d: cannot create its cgroup (%s): cpu/memory not capped", t->id,
               strerror(rc < 0 ? -rc : ENOMEM));
  } else if (t->grant.memory_mb > 0 && t->grant.ngpus == 0) {
    lim.rlimit_as_mb = t->grant.memory_mb;
  }
  rc =
      trial_start(t, w->loop, &w->o.sup, cmd.argv, cmd.env, cmd.cwd, &lim, &worker_trial_events, w);
  trainable_cmd_free(&cmd);
  if (rc < 0) {
    char msg[600];
    snprintf(msg, sizeof msg, "cannot start the trial process: %s", strerror(-rc));
    log_warn("trial %d: %s", t->id, msg);
    worker_queue_fail(w, t, msg, -1, "internal");
    worker_trial_event(w, t, TEV_START_FAILED, t->handles > 0, 0);
    worker_pump_outbox(w);
    return;
  }
  /* Its supervisor reports the trial's pid later (worker_on_spawned). */
  worker_trial_event(w, t, TEV_SPAWNED, 0, 0);
  if (resume) log_info("trial %d resumes from its checkpoint", t->id);
}

/* A checkpoint download to try again shortly: a restarting server should not
 * make a trial throw away its progress. */
struct retry {
  uv_timer_t timer;
  struct worker *w;
  int trial_id, attempt;
  uint64_t key;
};

static int worker_get_checkpoint(struct worker *w, struct trial *t, int attempt);

static void worker_retry_closed(uv_handle_t *h) { free(h->data); }

static void worker_on_ckpt_retry(uv_timer_t *h) {
  struct retry *rt = h->data;
  struct trial *t = rt->w->shut ? NULL : worker_by_key(rt->w, rt->key);
  if (t && t->state == TRIAL_FETCHING && worker_get_checkpoint(rt->w, t, rt->attempt) < 0)
    worker_spawn_trial(rt->w, t, 0);
  uv_close((uv_handle_t *)h, worker_retry_closed);
}

static void worker_on_ckpt_get(void *arg, int err, const struct http_resp *resp) {
  struct wreq *r = arg;
  struct worker *w = r->w;
  struct trial *t = worker_by_key(w, r->key);
  int attempt = r->resume_attempt;
  free(r);
  if (!t || t->state != TRIAL_FETCHING || w->shut) return;
  int resume = 0;
  char crc_hdr[32];
  if (!err && resp->status == 200) {
    uLong crc = crc32(0L, (const unsigned char *)resp->body, (uInt)resp->len);
    char want[16];
    snprintf(want, sizeof want, "%08lx", (unsigned long)crc);
    const char *got = http_resp_header(resp, "X-Ctune-Crc32", crc_hdr, sizeof crc_hdr);
    char *path = trial_path(t, "checkpoint.bin");
    if (got && strcasecmp(got, want) != 0) {
      log_warn("trial %d: downloaded checkpoint has crc32 %s, header says %s: starting "
               "from scratch",
               t->id, want, got);
    } else if (!path || trial_write_file(t, "checkpoint.bin", resp->body, resp->len) < 0) {
      log_warn("trial %d: cannot write the checkpoint to %s: starting from scratch", t->id, t->dir);
    } else {
      struct stat st;
      if (stat(path, &st) == 0) { /* no need to upload it straight back */
        t->ckpt_mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        t->ckpt_size = (long long)st.st_size;
      }
      resume = 1;
    }
    free(path);
  } else if ((err || resp->status >= 500) && attempt < WORKER_CKPT_GET_TRIES && !w->draining) {
    log_warn("trial %d: checkpoint download failed (%s, HTTP %ld): retry %d of %d in 1 s", t->id,
             err ? strerror(-err) : "server error", resp->status, attempt,
             WORKER_CKPT_GET_TRIES - 1);
    struct retry *rt = calloc(1, sizeof *rt);
    if (rt) {
      rt->w = w;
      rt->trial_id = t->id;
      rt->key = t->key;
      rt->attempt = attempt + 1;
      uv_timer_init(w->loop, &rt->timer);
      rt->timer.data = rt;
      uv_timer_start(&rt->timer, worker_on_ckpt_retry, 1000, 0);
      return;
    }
  } else {
    log_warn("trial %d: lease says it has a checkpoint but GET gave %s (HTTP %ld): "
             "starting from scratch",
             t->id, err ? strerror(-err) : "no body", resp->status);
  }
  worker_spawn_trial(w, t, resume);
}

static int worker_get_checkpoint(struct worker *w, struct trial *t, int attempt) {
  char path[96];
  snprintf(path, sizeof path, "/api/v1/trials/%d/checkpoint", t->id);
  struct wreq *r = wreq_new(w, t, 0);
  if (!r) return -ENOMEM;
  r->resume_attempt = attempt;
  int rc = http_request(w->http, "GET", path, NULL, NULL, 0, NULL, WORKER_UPLOAD_TIMEOUT_MS,
                        worker_on_ckpt_get, r);
  if (rc < 0) free(r);
  return rc;
}

/* ---- trial dir housekeeping ------------------------------------------ */

#define WORKER_SPARES_MAX 64
/* How long housekeeping waits after the start or end that asked for it:
 * trials started together end together, and their starts need the CPU. */
#define WORKER_HOUSE_DELAY_MS 200

/* A batch made on libuv's thread pool, so that the inode allocations and
 * frees (the worker's largest CPU cost on ext4 without a journal) never
 * hold up the loop: spares first + 0..n-1, then the swept dirs removed. */
struct worker_spare_job {
  uv_work_t req;
  struct worker *w;
  unsigned first, n;
  int remove_gone;
  uint64_t made; /* bit i: spare first + i was made */
};

static void worker_house_work(uv_work_t *req) {
  struct worker_spare_job *j = req->data;
  /* The swept dirs first, each a spare if it is clean (no inode made or
   * freed), then fresh spares for the rest. A swept dir's trial is fully
   * ended: the worker sweeps only trials off its list, which leave it once
   * their supervisor has exited, and the supervisor exits once its trial's
   * process group, cgroup and every descendant (it is their subreaper)
   * are killed and reaped (supervise_kill_tree). Should one outlive that
   * (its bounded wait ran out), the logs are reused only when open nowhere. */
  if (j->remove_gone) workdir_remove_gone(j->w->o.work_dir, j->first, j->n, &j->made);
  for (unsigned i = 0; i < j->n; i++)
    if (!((j->made >> i) & 1) && workdir_spare_make(j->w->spares.trials, j->first + i) == 0)
      j->made |= 1ull << i;
}

static void worker_house_job(struct worker *w);
static int worker_dir_needed(void *arg, int trial_id);

static void worker_house_done(uv_work_t *req, int status) {
  struct worker_spare_job *j = req->data;
  struct worker *w = j->w;
  (void)status;
  w->spare_job = NULL;
  unsigned made = 0;
  for (unsigned i = 0; i < j->n; i++)
    if (((j->made >> i) & 1) && workdir_spares_add(&w->spares, j->first + i) == 0) made++;
  if (made < j->n)
    log_debug("spare trial dirs: %u of %u made", made, j->n); /* made at the lease instead */
  free(j);
  if (w->house_again) {
    w->house_again = 0;
    worker_house_job(w);
  }
}

/* Queues the batch: spares up to one per trial running here, and the
 * removal of the swept dirs. */
static void worker_house_job(struct worker *w) {
  if (w->spare_job) {
    w->house_again = 1;
    return;
  }
  size_t want = w->draining || w->shut || w->spares.off || !w->spares.trials ? 0 : w->spare_peak;
  unsigned n = want > w->spares.n ? (unsigned)(want - w->spares.n) : 0;
  if (!n && !w->gone_pending) return;
  struct worker_spare_job *j = calloc(1, sizeof *j);
  if (!j) return;
  j->req.data = j;
  j->w = w;
  j->n = n;
  j->first = w->spares.next;
  j->remove_gone = w->gone_pending;
  if (uv_queue_work(w->loop, &j->req, worker_house_work, worker_house_done) != 0) {
    free(j);
    return;
  }
  w->spares.next += n;
  w->gone_pending = 0;
  w->spare_job = j;
}

static void worker_log_swept(int n, int keep) {
  if (n > 0) log_info("removed %d trial dir(s) of ended trials (the last %d are kept)", n, keep);
}

/* Removes the dirs of ended trials beyond the most recent few: out of the
 * way now, deleted on the thread pool. */
static void worker_on_house_timer(uv_timer_t *h) {
  struct worker *w = h->data;
  if (w->sweep_wanted) {
    w->sweep_wanted = 0;
    int n = workdir_sweep_trials(w->o.work_dir, w->o.keep_trial_dirs, worker_dir_needed, w,
                                 &w->gone_seq);
    worker_log_swept(n, w->o.keep_trial_dirs);
    if (n > 0) w->gone_pending = 1;
  }
  worker_house_job(w);
}

/* A spare for each of the most trials run here at once (up to
 * WORKER_SPARES_MAX): what a round of trials ending together takes. */
static void worker_want_spares(struct worker *w) {
  unsigned n = 0;
  for (struct trial *t = w->trials; t && n < WORKER_SPARES_MAX; t = t->next) n++;
  if (n > w->spare_peak) w->spare_peak = n;
}

static void worker_house_arm(struct worker *w) {
  if (!w->shut && !uv_is_active((uv_handle_t *)&w->house_timer))
    uv_timer_start(&w->house_timer, worker_on_house_timer, WORKER_HOUSE_DELAY_MS, 0);
}

/* Takes a granted lease: 1 when it was given back for want of room now
 * (the next lease request waits a poll interval), else 0. */
static int worker_take_trial(struct worker *w, cJSON *lease_trial) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(lease_trial, "id");
  int tid = cJSON_IsNumber(id) ? id->valueint : 0;
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(lease_trial, "resources");
  const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(res, "cpu");
  const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(res, "gpu");
  const cJSON *mem = cJSON_GetObjectItemCaseSensitive(res, "memory_mb");
  struct alloc_req req = {cJSON_IsNumber(cpu) ? cpu->valuedouble : 1,
                          cJSON_IsNumber(gpu) ? gpu->valuedouble : 0,
                          cJSON_IsNumber(mem) ? (long)mem->valuedouble : 0};
  struct trial *t = NULL;
  int rc = trial_new(lease_trial, w->o.work_dir, &w->spares, &t);
  if (rc < 0) {
    log_error("lease: cannot set up trial %d in %s: %s", tid, w->o.work_dir, strerror(-rc));
    if (tid > 0) {
      /* No trial object: fence the fail with the lease by hand. */
      const cJSON *att = cJSON_GetObjectItemCaseSensitive(lease_trial, "attempt");
      struct trial fake = {.id = tid,
                           .lease_worker = w->id,
                           .attempt = cJSON_IsNumber(att) ? (long)att->valuedouble : 0};
      worker_queue_fail(w, &fake, "worker cannot create the trial directory", -1, "internal");
    }
    cJSON_Delete(lease_trial);
    return 0;
  }
  t->lease_worker = w->id;
  /* An older attempt of this trial still here is stale by definition: the
   * server has just leased the trial again. */
  struct trial *old = worker_current(w, t->id);
  if (old && old->attempt != t->attempt)
    worker_stop_attempt(w, old->id, old->attempt, TRIAL_STOP_SERVER,
                        "leased again: an older attempt is over");
  t->next = w->trials;
  w->trials = t;
  log_info("trial %d: leased (attempt %ld)", t->id, t->attempt);
  rc = alloc_take(&w->pool, worker_slot_id(t), &req, &t->grant);
  if (rc == -ENOSPC && alloc_could_ever_fit(&w->pool, &req)) {
    /* No room now (the lease was asked for with more free than is left):
     * not the trial's failure. Given back at once (PENDING on the server,
     * its failures unchanged), never held here waiting for room. */
    log_warn("trial %d: no room for cpu %g, gpu %g, memory_mb %ld now: lease given back", t->id,
             req.cpu, req.gpu, req.memory_mb);
    worker_queue_release(w, t);
    worker_trial_event(w, t, TEV_STOP, TRIAL_STOP_SERVER, 0);
    worker_pump_outbox(w);
    return 1;
  }
  if (rc < 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "worker %d cannot fit cpu %g, gpu %g, memory_mb %ld%s", w->id,
             req.cpu, req.gpu, req.memory_mb,
             rc == -EINVAL ? " (invalid request)" : " (more than it has)");
    worker_abort_trial(w, t, msg, "no_resources");
    return 0;
  }
  t->has_grant = 1;
  if (w->draining || w->fenced) {
    /* A lease granted as the drain (or fence) began: give it back at once,
     * without fetching a checkpoint it will not run from. */
    worker_spawn_trial(w, t, 0);
    return 0;
  }
  const cJSON *hc = cJSON_GetObjectItemCaseSensitive(lease_trial, "has_checkpoint");
  char *ck = trial_path(t, "checkpoint.bin");
  if (cJSON_IsTrue(hc)) {
    if (worker_get_checkpoint(w, t, 1) == 0) {
      free(ck);
      return 0;
    }
    log_warn("trial %d: cannot request its checkpoint: starting from scratch", t->id);
  }
  /* A checkpoint left by an earlier attempt here is not what the server
   * expects this attempt to start from (a spare has none). */
  if (ck && !t->from_spare) unlink(ck);
  free(ck);
  worker_spawn_trial(w, t, 0);
  worker_want_spares(w);
  worker_house_arm(w); /* a spare for the next start */
  return 0;
}

/* The lease a complete's reply carries ("lease": {"trial"}), if any: taken
 * as a lease reply's (worker_take_trial) when it was asked for this
 * registration. 1 when it was given back for want of room now. */
static int worker_take_next(struct worker *w, int ended, const struct outbox_lease *asked_as,
                            const struct http_resp *resp) {
  cJSON *b = cJSON_Parse(resp->body);
  cJSON *tr = cJSON_DetachItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "lease"),
                                                      "trial");
  cJSON_Delete(b);
  if (!cJSON_IsObject(tr)) {
    cJSON_Delete(tr);
    return 0;
  }
  if (asked_as->worker_id != w->id) {
    /* As for a lease reply of an earlier registration: not this one's. */
    log_warn("lease: a trial leased to worker %d (an earlier registration) is left to expire",
             asked_as->worker_id);
    cJSON_Delete(tr);
    return 0;
  }
  log_debug("lease: a trial leased with the complete of trial %d", ended);
  return worker_take_trial(w, tr);
}

/* ---- outbox delivery: one lane per trial ------------------------------ */

/* What a delivery callback needs: the lane is found again by trial id (a
 * lane with a request out is never freed). */
struct obreq {
  struct worker *w;
  int trial_id;
  int asked_lease; /* a complete that asked for the next lease */
  size_t n;        /* items in the request */
  enum outbox_kind kind;
  struct outbox_lease lease;
  char path[96];
};

/* Checkpoint uploads whose backoff is over. */
static void worker_retry_checkpoints(struct worker *w) {
  uint64_t now = clock_mono_ms();
  struct trial *t = w->trials;
  while (t) {
    struct trial *next = t->next; /* an upload that cannot start may end t */
    if (t->ckpt_wanted && !t->ckpt_inflight && t->ckpt_next_ms && now >= t->ckpt_next_ms) {
      worker_upload_checkpoint(w, t);
      worker_trial_event(w, t, TEV_UPLOADED, 0, 0);
    }
    t = next;
  }
}

/* The delivery timer: queued messages and checkpoint uploads whose backoff
 * is over. */
static void worker_on_ob_timer(uv_timer_t *h) {
  worker_retry_checkpoints(h->data);
  worker_pump_outbox(h->data);
}

/* A trial's end waits for its attempt's last checkpoint upload (results,
 * then checkpoint, then release/complete/fail). */
static int worker_lane_blocked(struct worker *w, const struct outbox_lane *l) {
  const struct outbox_item *h = l->head;
  return h->kind == OUTBOX_END && worker_by_lease(w, h->trial_id, &h->lease) != NULL;
}

/* A trial dir is needed while its trial is on this worker or its outbox
 * lane holds undelivered messages (workdir.h). */
static int worker_dir_needed(void *arg, int trial_id) {
  struct worker *w = arg;
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->id == trial_id) return 1;
  const struct outbox_lane *l = outbox_lane(&w->ob, trial_id);
  return l && l->n > 0;
}

/* Once an ended trial's last message is delivered its dir may go. */
static void worker_sweep_after_ack(struct worker *w, int trial_id) {
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->id == trial_id) return;
  const struct outbox_lane *l = outbox_lane(&w->ob, trial_id);
  if (!l || l->n == 0) {
    w->sweep_wanted = 1;
    worker_house_arm(w);
  }
}

/* Messages of this trial were acknowledged: its dir may go, and its
 * checkpoint may go once its results are all stored. */
static void worker_after_ack(struct worker *w, int trial_id) {
  worker_sweep_after_ack(w, trial_id);
  struct trial *t = w->trials;
  while (t) {
    struct trial *next = t->next;
    if (t->id == trial_id && t->ckpt_wanted) {
      worker_upload_checkpoint(w, t);
      worker_trial_event(w, t, TEV_UPLOADED, 0, 0);
    }
    t = next;
  }
}

/* A stop from the server (result reply, heartbeat) for (id, attempt): acted
 * on only when that attempt is the one running here now. */
static void worker_stop_attempt(struct worker *w, int id, long attempt, enum trial_stop why,
                                const char *what) {
  struct trial *t = worker_current(w, id);
  if (!t) return;
  if (t->attempt != attempt) {
    log_info("trial %d: ignoring a %s for attempt %ld (attempt %ld runs here)", id, what, attempt,
             t->attempt);
    return;
  }
  /* Every member of a gang's attempt here: the attempt ends for all. */
  struct trial *next;
  for (t = w->trials; t; t = next) {
    next = t->next; /* a stop may end and free it at once */
    if (t->id != id || t->attempt != attempt || t->state >= TRIAL_STOPPING) continue;
    log_info("trial %d: %s (attempt %ld, rank %d)", id, what, attempt, t->rank);
    worker_trial_event(w, t, TEV_STOP, why, 0);
  }
}

static void worker_on_results_reply(struct worker *w, const struct obreq *q,
                                    const struct http_resp *resp) {
  cJSON *b = cJSON_Parse(resp->body);
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(b, "decisions");
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(b, "decision"), *e;
  int stop = cJSON_IsString(d) && !strcmp(d->valuestring, "stop");
  cJSON_ArrayForEach(e, ds) if (cJSON_IsString(e) && !strcmp(e->valuestring, "stop")) stop = 1;
  cJSON_Delete(b);
  if (stop)
    worker_stop_attempt(w, q->trial_id, q->lease.attempt, TRIAL_STOP_DECISION,
                        "scheduler decided stop");
}

/* The lane's head failed for now: it backs off, and what the server
 * answered is kept to say why if it goes on (worker_check_stuck). */
static void worker_lane_failed(struct outbox_lane *l, long st, const char *code,
                               uint64_t at_least_ms) {
  outbox_failed(l, clock_mono_ms(), at_least_ms);
  l->last_status = st;
  snprintf(l->last_code, sizeof l->last_code, "%s", code);
}

static void worker_on_ob_done(void *arg, int err, const struct http_resp *resp) {
  struct obreq *q = arg;
  struct worker *w = q->w;
  w->ob_inflight--;
  w->asks_inflight -= q->asked_lease;
  /* A trial's end frees a slot in the server's max_concurrent_trials count
   * too, and a complete that asked for the next lease held back the lease
   * request: ask for work now rather than after the poll interval, whatever
   * the end's fate (a delivered complete's own lease first). */
  unsigned end_kick_ms = 0;
  int end_kick = q->kind == OUTBOX_END;
  struct outbox_lane *l = outbox_lane(&w->ob, q->trial_id);
  if (l) l->inflight = 0;
  if (!l || !l->head || w->shut) {
    free(q);
    return;
  }
  long st = resp->status;
  char code[64] = "";
  if (!err) worker_err_code(resp, code, sizeof code);
  if (!err && st / 100 == 2) {
    if (w->ob_down_logged) {
      log_info("server reachable again: delivering %zu queued message(s)", w->ob.n);
      w->ob_down_logged = 0;
    }
    if (q->kind == OUTBOX_RESULT) worker_on_results_reply(w, q, resp);
    if (q->kind == OUTBOX_END && l->end_log && lease_same(&l->end_log_lease, &q->lease)) {
      free(l->end_log);
      l->end_log = NULL;
    }
    outbox_ack(&w->ob, l, q->n);
    /* The next lease granted with the complete starts first, before the
     * ended trial's clean-up (its dir's sweep). */
    if (q->asked_lease && worker_take_next(w, q->trial_id, &q->lease, resp))
      end_kick_ms = w->o.poll_ms; /* given back for want of room now */
    worker_unhold(w);
    worker_after_ack(w, q->trial_id);
  } else if (!err && st == 409 && worker_lease_over(resp)) {
    /* The lease is over: nothing more of it will be taken. The next attempt
     * redoes this work from the stored checkpoint. */
    size_t n = outbox_drop_lease(&w->ob, l, &q->lease);
    /* Once per lease: a stopping trial may print more results after it. */
    int again = l->dropped_worker == q->lease.worker_id && l->dropped_attempt == q->lease.attempt;
    l->dropped_worker = q->lease.worker_id;
    l->dropped_attempt = q->lease.attempt;
    log_msg(again ? LOG_DEBUG : LOG_WARN,
            "trial %d: server refused %s: lease %d:%ld is over (%s): dropping its %zu "
            "queued message(s); the next attempt redoes them from the stored checkpoint",
            q->trial_id, q->path, q->lease.worker_id, q->lease.attempt, code, n);
    if (q->kind == OUTBOX_RESULT)
      worker_stop_attempt(w, q->trial_id, q->lease.attempt, TRIAL_STOP_SERVER,
                          "server says its lease is over");
    worker_unhold(w);
    worker_after_ack(w, q->trial_id);
  } else if (!err && (st == 401 || st == 403) && q->lease.attempt && q->lease.worker_id != w->id) {
    /* A message of an identity this worker had before (the server forgot
     * it, and this worker registered again): it can never be delivered.
     * Its attempt is fenced anyway; the next one redoes it. */
    size_t n = outbox_drop_lease(&w->ob, l, &q->lease);
    log_warn("trial %d: server refused %s (HTTP %ld %s) of the old identity worker %d: "
             "dropping its %zu queued message(s)",
             q->trial_id, q->path, st, code, q->lease.worker_id, n);
    worker_unhold(w);
    worker_after_ack(w, q->trial_id);
  } else if (!err && st == 401) {
    /* This identity is unknown to the server (a new database): register
     * again; the message is kept and then dropped as an old identity's. */
    worker_lane_failed(l, st, code, 0);
    if (w->id && q->lease.worker_id == w->id) {
      log_warn("server refused worker %d's credentials (401): registering again", w->id);
      w->id = 0;
      worker_register(w);
    }
  } else if (!err && worker_refused(st) && q->n > 1) {
    /* One result of the batch is refused: find which, one at a time. */
    log_warn("trial %d: server refused a batch of %zu results (HTTP %ld %s): sending them "
             "one by one",
             q->trial_id, q->n, st, code);
    l->single = 1;
  } else if (!err && worker_refused(st)) {
    log_error("trial %d: server refused %s with HTTP %ld (%s): %.300s: dropping that message",
              q->trial_id, q->path, st, code, resp->body ? resp->body : "");
    struct trial *t = worker_by_lease(w, q->trial_id, &q->lease);
    if (t && q->kind == OUTBOX_RESULT) t->dropped++; /* its checkpoint is ahead for good */
    outbox_ack(&w->ob, l, 1);
    worker_unhold(w);
    worker_after_ack(w, q->trial_id);
  } else {
    worker_lane_failed(l, err ? 0 : st, code, worker_retry_after_ms(err, resp));
    log_debug("trial %d: %s failed (%s, HTTP %ld %s, try %d): again in %llu ms", q->trial_id,
              q->path, err ? strerror(-err) : "server error", st, code, l->attempts,
              (unsigned long long)(l->next_try_ms - clock_mono_ms()));
    if (!w->ob_down_logged) {
      log_warn("cannot deliver %s (%s, HTTP %ld): %zu message(s) kept in the outbox, "
               "retrying with backoff",
               q->path, err ? strerror(-err) : "server error", st, w->ob.n);
      w->ob_down_logged = 1;
    }
  }
  free(q);
  outbox_gc(&w->ob);
  worker_pump_outbox(w);
  if (end_kick) worker_kick_lease(w, end_kick_ms);
  worker_check_drained(w);
}

/* An end message as it goes: with the final log tail kept for it
 * (worker_keep_end_log), and a complete of this registration asks for the
 * next lease with what is free (docs/protocol.md#worker-routes): neither is
 * in the outbox, so a delivery after a restart goes without them. *body is
 * replaced; -ENOMEM leaves it as it was. */
static int worker_end_body(struct worker *w, const struct outbox_lane *l, char **body, int *asked) {
  const struct outbox_item *h = l->head;
  int log = l->end_log && lease_same(&l->end_log_lease, &h->lease);
  int ask = !strcmp(worker_msg_what(h), "complete") && w->id && h->lease.worker_id == w->id &&
            !w->draining && !w->fenced && worker_has_free(w);
  if (!log && !ask) return 0;
  cJSON *b = cJSON_Parse(*body);
  char *text = NULL;
  if (b && (!log || cJSON_AddStringToObject(b, "log", l->end_log)) &&
      (!ask || worker_add_free(w, cJSON_AddObjectToObject(b, "lease"))))
    text = jsonout_print(b);
  cJSON_Delete(b);
  if (!text) return -ENOMEM;
  free(*body);
  *body = text;
  *asked = ask;
  return 0;
}

static int worker_send_lane(struct worker *w, struct outbox_lane *l) {
  size_t n = 0;
  const struct outbox_item *h = l->head;
  char *body = outbox_batch(l, WORKER_BATCH_MAX, WORKER_BATCH_BYTES, &n);
  struct obreq *q = calloc(1, sizeof *q);
  int rc = -ENOMEM;
  if (body && q && h->kind == OUTBOX_END && worker_end_body(w, l, &body, &q->asked_lease) < 0)
    log_warn("trial %d: no memory to add its log tail or next lease to its end: sent without",
             l->trial_id);
  if (body && q) {
    q->w = w;
    q->trial_id = l->trial_id;
    q->n = n;
    q->kind = h->kind;
    q->lease = h->lease;
    snprintf(q->path, sizeof q->path, "%s", h->path);
    char fence[64];
    fence_header(&h->lease, fence, sizeof fence);
    /* attempt 0: a message from before protocol v2, sent as it was. */
    const char *hdrs[] = {h->lease.attempt ? fence : NULL, NULL};
    int asked = q->asked_lease;
    rc = http_request(w->http, "POST", h->path, "application/json", body, strlen(body), hdrs,
                      WORKER_REQ_TIMEOUT_MS, worker_on_ob_done, q);
    if (rc == 0) {
      q = NULL;
      w->asks_inflight += asked;
      l->inflight = 1;
      w->ob_inflight++;
      if (n > 1) log_debug("trial %d: sending %zu results in one batch", l->trial_id, n);
    }
  }
  free(q);
  free(body);
  return rc;
}

static void worker_pump_outbox(struct worker *w) {
  if (w->shut) return;
  uint64_t now = clock_mono_ms(), wake = 0;
  for (struct outbox_lane *l = w->ob.lanes; l; l = l->next) {
    if (!l->head || l->inflight || worker_lane_blocked(w, l)) continue;
    if (!outbox_ready(l, now)) {
      if (!wake || l->next_try_ms < wake) wake = l->next_try_ms;
      continue;
    }
    if (worker_send_lane(w, l) < 0) {
      outbox_failed(l, now, 0);
      if (!wake || l->next_try_ms < wake) wake = l->next_try_ms;
    }
  }
  /* Checkpoint uploads backing off wake the same timer (only those still
   * to come: one due now is waiting for its results, not for the timer). */
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->ckpt_wanted && !t->ckpt_inflight && t->ckpt_next_ms > now &&
        (!wake || t->ckpt_next_ms < wake))
      wake = t->ckpt_next_ms;
  if (wake) uv_timer_start(&w->ob_timer, worker_on_ob_timer, wake > now ? wake - now : 1, 0);
}

/* The server answered something: what failed for want of an answer (an
 * outage) need not wait out its backoff any longer. What the server itself
 * refused for now (5xx, 429) keeps backing off: it answers, and sending it
 * again at each answer would undo the backoff. */
static void worker_server_alive(struct worker *w) {
  for (struct outbox_lane *l = w->ob.lanes; l; l = l->next)
    if (l->attempts > 0 && !l->inflight && !l->last_status) l->next_try_ms = 0;
  worker_pump_outbox(w);
  /* A checkpoint whose upload failed during an outage goes now, not only
   * after its backoff. */
  struct trial *t = w->trials;
  while (t) {
    struct trial *next = t->next;
    if (t->ckpt_wanted && t->ckpt_failing_since && !t->ckpt_last_status &&
        t->state != TRIAL_FETCHING) {
      t->ckpt_next_ms = 0;
      worker_upload_checkpoint(w, t);
      worker_trial_event(w, t, TEV_UPLOADED, 0, 0);
    }
    t = next;
  }
}

/* ---- lease ------------------------------------------------------------ */

/* The lease request out: for which registration. */
struct lease_req {
  struct worker *w;
  int worker_id;
};

static void worker_on_lease(void *arg, int err, const struct http_resp *resp) {
  struct lease_req *q = arg;
  struct worker *w = q->w;
  int for_id = q->worker_id;
  w->lease_inflight = 0;
  free(q);
  if (w->shut) return;
  if (!err && resp->status / 100 < 5) worker_server_alive(w);
  if (w->draining && (err || resp->status != 200)) {
    worker_check_drained(w); /* nothing was leased: the drain may end now */
    return;
  }
  if (for_id != w->id) {
    /* Asked for an earlier registration: a trial leased to it is not this
     * one's to run (its fence names the old id); the server takes it back
     * when that registration's leases expire. */
    if (!err && resp->status == 200)
      log_warn("lease: a trial leased to worker %d (an earlier registration) is left to expire",
               for_id);
    worker_kick_lease(w, 0);
    return;
  }
  if (!err && resp->status == 200) {
    w->lease_failures = 0;
    if (resp->local_ip[0]) snprintf(w->local_ip, sizeof w->local_ip, "%s", resp->local_ip);
    cJSON *b = cJSON_Parse(resp->body);
    cJSON *tr = cJSON_DetachItemFromObjectCaseSensitive(b, "trial");
    cJSON_Delete(b);
    if (!cJSON_IsObject(tr)) {
      log_warn("lease: 200 without a trial object: %.200s", resp->body);
      cJSON_Delete(tr);
      worker_kick_lease(w, w->o.poll_ms);
      return;
    }
    int gave_back = worker_take_trial(w, tr);
    worker_kick_lease(w, gave_back ? w->o.poll_ms : 0);
  } else if (!err && resp->status == 204) {
    w->lease_failures = 0;
    /* A server that holds requests answers 204 when the wait is over, or
     * early when a lease of this worker ended meanwhile (it has more free
     * than it asked with): either way the next request goes at once, and is
     * held in turn. Without held requests: the poll interval, unless
     * something freed up while the request was out. */
    worker_kick_lease(w, w->lease_again || w->lease_wait_ms ? 0 : w->o.poll_ms);
    w->lease_again = 0;
  } else if (!err && (worker_is_unknown(resp) || resp->status == 401) && w->id) {
    log_warn("server does not know worker %d (HTTP %ld): registering again", w->id, resp->status);
    w->id = 0;
    worker_register(w);
  } else {
    if (w->lease_failures++ == 0)
      log_warn("lease failed (%s, HTTP %ld %.200s): retrying", err ? strerror(-err) : "error",
               resp->status, resp->body ? resp->body : "");
    unsigned d = w->o.poll_ms << (w->lease_failures < 4 ? w->lease_failures : 4);
    worker_kick_lease(w, d > 5000 ? 5000 : d);
  }
}

/* A trial's exit frees what its complete asks a lease for (worker_end_body):
 * a lease request sent meanwhile could not be granted that slot before the
 * complete is recorded, and would be answered 204 after it. So none goes
 * while such a complete is out (its delivery, whatever its fate, asks again:
 * worker_on_ob_done) or its trial is closing, for at most
 * WORKER_ASK_HOLD_S after the exit. The ms to hold back, or 0. */
#define WORKER_ASK_HOLD_S 2.0
static uint64_t worker_complete_will_ask(struct worker *w) {
  if (w->asks_inflight > 0) return (uint64_t)(WORKER_ASK_HOLD_S * 1000);
  double now = clock_mono_s(), left = 0;
  for (const struct trial *t = w->trials; t; t = t->next) {
    double l = t->exited_at + WORKER_ASK_HOLD_S - now;
    if (t->end_asks && t->state >= TRIAL_EXITED && l > left) left = l;
  }
  return left > 0 ? (uint64_t)(left * 1000) + 1 : 0;
}

static void worker_on_lease_timer(uv_timer_t *h) {
  struct worker *w = h->data;
  /* One out at a time. A second one, sent for what freed up while the
   * first is held, would split what is free into parts that may each be too
   * small for a trial that the whole fits (fractional CPUs): the held one
   * is woken by the same end on the server (its `complete`) instead, and
   * the worker asks again with everything at once after its reply. */
  if (w->lease_inflight) {
    w->lease_again = 1;
    return;
  }
  if (!w->id || w->draining || w->shut || w->fenced) return;
  uint64_t hold_ms = worker_complete_will_ask(w);
  if (hold_ms) {
    uv_timer_start(&w->lease_timer, worker_on_lease_timer, hold_ms, 0);
    return;
  }
  if (!worker_has_free(w)) return; /* a trial's end kicks us again */
  struct lease_req *q = calloc(1, sizeof *q);
  cJSON *b = cJSON_CreateObject();
  if (!q || !worker_add_free(w, b) ||
      (w->lease_wait_ms && !cJSON_AddNumberToObject(b, "wait_ms", w->lease_wait_ms))) {
    free(q);
    cJSON_Delete(b);
    worker_kick_lease(w, w->o.poll_ms);
    return;
  }
  *q = (struct lease_req){w, w->id};
  char path[64], *text = jsonout_print(b);
  snprintf(path, sizeof path, "/api/v1/workers/%d/lease", w->id);
  cJSON_Delete(b);
  int rc = text ? http_request(w->http, "POST", path, "application/json", text, strlen(text), NULL,
                               WORKER_REQ_TIMEOUT_MS + (long)w->lease_wait_ms, worker_on_lease, q)
                : -ENOMEM;
  free(text);
  if (rc == 0) {
    w->lease_inflight = 1;
  } else {
    free(q);
    worker_kick_lease(w, w->o.poll_ms);
  }
}

static void worker_kick_lease(struct worker *w, unsigned delay_ms) {
  if (w->draining || w->shut || !w->id || w->fenced) return;
  uv_timer_start(&w->lease_timer, worker_on_lease_timer, delay_ms, 0);
}

/* ---- heartbeat v2 and self-fencing ------------------------------------ */

static void worker_on_hb_timer(uv_timer_t *h);

/* heartbeat_interval_s and lease_timeout_s from a registration or heartbeat
 * reply; the heartbeat timer follows a changed interval. */
static void worker_read_timing(struct worker *w, const cJSON *b) {
  const cJSON *hb = cJSON_GetObjectItemCaseSensitive(b, "heartbeat_interval_s");
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(b, "lease_timeout_s");
  if (cJSON_IsNumber(lt) && lt->valuedouble > 0) w->lease_timeout_s = lt->valuedouble;
  if (cJSON_IsNumber(hb) && hb->valuedouble > 0 && hb->valuedouble != w->hb_interval_s) {
    w->hb_interval_s = hb->valuedouble;
    if (uv_is_active((uv_handle_t *)&w->hb_timer)) {
      uint64_t ms = (uint64_t)(w->hb_interval_s * 1000);
      uv_timer_start(&w->hb_timer, worker_on_hb_timer, ms, ms);
    }
  }
}

/* No successful heartbeat for lease_timeout_s: the server has given this
 * worker's leases away (or will at any moment), so a trial still running
 * here would run beside its next attempt. Stop them all (SIGTERM: they save
 * their checkpoints), keep every undelivered message, and lease again only
 * once a heartbeat gets through. */
static void worker_on_fence(uv_timer_t *h) {
  struct worker *w = h->data;
  if (w->shut || w->fenced) return;
  w->fenced = 1;
  uv_timer_stop(&w->lease_timer);
  int n = 0;
  struct trial *t = w->trials;
  while (t) {
    struct trial *next = t->next;
    if (t->state < TRIAL_STOPPING) {
      worker_trial_event(w, t, TEV_STOP, TRIAL_STOP_FENCE, 0);
      n++;
    }
    t = next;
  }
  log_warn("self-fencing: no heartbeat reached the server for %.1f s (its lease timeout): "
           "stopping %d trial(s) (they keep their checkpoints), keeping %zu undelivered "
           "message(s); leasing again once the server answers",
           w->lease_timeout_s, n, w->ob.n);
}

static void worker_arm_fence(struct worker *w) {
  uv_timer_start(&w->fence_timer, worker_on_fence, (uint64_t)(w->lease_timeout_s * 1000), 0);
}

static void worker_on_heartbeat(void *arg, int err, const struct http_resp *resp) {
  struct worker *w = arg;
  w->hb_inflight = 0;
  if (w->shut) return;
  if (!err && resp->status == 200) {
    cJSON *b = cJSON_Parse(resp->body);
    worker_read_timing(w, b);
    worker_arm_fence(w);
    if (w->fenced) {
      w->fenced = 0;
      log_info("server answers heartbeats again: leasing again");
      worker_kick_lease(w, 0);
    }
    worker_server_alive(w);
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(b, "stop"), *s;
    cJSON_ArrayForEach(s, stop) {
      const cJSON *id = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "id") : s;
      const cJSON *att = cJSON_GetObjectItemCaseSensitive(s, "attempt");
      const cJSON *why = cJSON_GetObjectItemCaseSensitive(s, "reason");
      if (!cJSON_IsNumber(id)) continue;
      struct trial *t = worker_current(w, id->valueint);
      if (!t) continue;
      /* A bare id (protocol v1) names whatever runs; v2 names the attempt. */
      long a = cJSON_IsNumber(att) ? (long)att->valuedouble : t->attempt;
      char what[96];
      snprintf(what, sizeof what, "server says stop (%s)",
               cJSON_IsString(why) ? why->valuestring : "cancelled or no longer ours");
      /* "paused" (a user's pause): the server wants the trial back with its
       * checkpoint, as after a scheduler's stop: complete is reported. */
      int paused = cJSON_IsString(why) && !strcmp(why->valuestring, "paused");
      worker_stop_attempt(w, id->valueint, a, paused ? TRIAL_STOP_DECISION : TRIAL_STOP_SERVER,
                          what);
    }
    cJSON_Delete(b);
  } else if (!err && (worker_is_unknown(resp) || resp->status == 401) && w->id) {
    log_warn("server does not know worker %d (HTTP %ld): registering again", w->id, resp->status);
    w->id = 0;
    uv_timer_stop(&w->hb_timer);
    worker_register(w);
  } else {
    log_debug("heartbeat failed (%s, HTTP %ld %.200s)", err ? strerror(-err) : "error",
              resp->status, resp->body ? resp->body : "");
  }
}

static int worker_hb_add(cJSON *run, int id, long attempt, int rank) {
  const cJSON *e;
  cJSON_ArrayForEach(e, run) {
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(e, "id");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "attempt");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "rank");
    if (i->valueint == id && (long)a->valuedouble == attempt && (r ? r->valueint : 0) == rank)
      return 0;
  }
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddNumberToObject(o, "id", id) ||
      !cJSON_AddNumberToObject(o, "attempt", (double)attempt) ||
      (rank > 0 && !cJSON_AddNumberToObject(o, "rank", rank)) || !cJSON_AddItemToArray(run, o)) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  return 0;
}

/* Heartbeat v2: every lease this worker holds, with its attempt: trials
 * whose process may run, and attempts that ended here but whose messages
 * (results, the release or complete/fail) are still queued, so the server
 * does not requeue a trial whose end is on its way. */
static void worker_on_hb_timer(uv_timer_t *h) {
  struct worker *w = h->data;
  /* While a gang's member runs here, four heartbeats per interval: the
   * server ends a gang's attempt one interval after a member's worker went
   * silent, so that the other members stop within two
   * (docs/worker.md#gang-members). */
  int gang = 0;
  for (struct trial *t = w->trials; t && !gang; t = t->next)
    gang = t->world > 1 && t->state < TRIAL_EXITED;
  uint64_t period = (uint64_t)(w->hb_interval_s * 1000) / (gang ? 4 : 1);
  if (period && uv_timer_get_repeat(h) != period) uv_timer_set_repeat(h, period);
  if (w->hb_inflight || !w->id || w->shut) return;
  cJSON *b = cJSON_CreateObject();
  cJSON *run = cJSON_AddArrayToObject(b, "running");
  int rc = run ? 0 : -ENOMEM;
  for (struct trial *t = w->trials; rc == 0 && t; t = t->next)
    if (t->state < TRIAL_EXITED && t->lease_worker == w->id)
      rc = worker_hb_add(run, t->id, t->attempt, t->rank);
  for (struct outbox_lane *l = w->ob.lanes; rc == 0 && l; l = l->next)
    for (struct outbox_item *it = l->head; rc == 0 && it; it = it->next)
      if (it->lease.worker_id == w->id && it->lease.attempt)
        rc = worker_hb_add(run, it->trial_id, it->lease.attempt, 0);
  /* A delivery stuck while the server answers is said on its trial. */
  cJSON *e;
  cJSON_ArrayForEach(e, run) {
    char note[320];
    if (rc == 0 &&
        worker_stuck_note(w, cJSON_GetObjectItemCaseSensitive(e, "id")->valueint,
                          (long)cJSON_GetObjectItemCaseSensitive(e, "attempt")->valuedouble, note,
                          sizeof note) &&
        !cJSON_AddStringToObject(e, "stuck", note))
      rc = -ENOMEM;
  }
  char path[64];
  snprintf(path, sizeof path, "/api/v1/workers/%d/heartbeat", w->id);
  if (rc == 0 && worker_post_json(w, path, b, worker_on_heartbeat, w) == 0) w->hb_inflight = 1;
  cJSON_Delete(b);
}

/* ---- registration ------------------------------------------------------ */

/* <work dir>/identity: {"server", "id", "secret", "cpu", "gpu", "memory_mb"},
 * mode 0600, replaced atomically. */
static void worker_save_identity(struct worker *w) {
  char *path = NULL, *tmp = NULL, *text = NULL;
  cJSON *o = cJSON_CreateObject();
  int fd = -1;
  if (!o || !cJSON_AddStringToObject(o, "server", w->o.server) ||
      !cJSON_AddNumberToObject(o, "id", w->id) ||
      !cJSON_AddStringToObject(o, "secret", w->secret) ||
      !cJSON_AddNumberToObject(o, "cpu", w->o.ncpus) ||
      !cJSON_AddNumberToObject(o, "gpu", w->o.ngpus) ||
      !cJSON_AddNumberToObject(o, "memory_mb", (double)w->o.memory_mb) ||
      !(text = jsonout_print(o)) || asprintf(&path, "%s/identity", w->o.work_dir) < 0 ||
      asprintf(&tmp, "%s/identity.tmp", w->o.work_dir) < 0) {
    log_warn("cannot save the worker identity: out of memory");
    goto out;
  }
  size_t len = strlen(text);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || fchmod(fd, 0600) || write(fd, text, len) != (ssize_t)len || fsync(fd) ||
      rename(tmp, path)) {
    log_warn("cannot save the worker identity in %s: %s (a restart registers anew)", path,
             strerror(errno));
    if (fd >= 0) unlink(tmp);
  }
out:
  if (fd >= 0) close(fd);
  cJSON_Delete(o);
  free(text);
  free(path);
  free(tmp);
}

/* The identity an earlier run saved, when it is for this server and these
 * resources (another --cpus is another registration). */
static void worker_load_identity(struct worker *w) {
  char *path = NULL, buf[1024];
  if (asprintf(&path, "%s/identity", w->o.work_dir) < 0) return;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  free(path);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  cJSON *o = cJSON_Parse(buf);
  const cJSON *srv = cJSON_GetObjectItemCaseSensitive(o, "server");
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
  const cJSON *sec = cJSON_GetObjectItemCaseSensitive(o, "secret");
  const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(o, "cpu");
  const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(o, "gpu");
  const cJSON *mem = cJSON_GetObjectItemCaseSensitive(o, "memory_mb");
  if (cJSON_IsString(srv) && !strcmp(srv->valuestring, w->o.server) && cJSON_IsNumber(id) &&
      id->valueint > 0 && cJSON_IsString(sec) && strlen(sec->valuestring) < sizeof w->secret &&
      cJSON_IsNumber(cpu) && cpu->valueint == w->o.ncpus && cJSON_IsNumber(gpu) &&
      gpu->valueint == w->o.ngpus && cJSON_IsNumber(mem) &&
      (long)mem->valuedouble == w->o.memory_mb &&
      http_client_set_token(w->http, sec->valuestring) == 0) {
    w->id = id->valueint;
    snprintf(w->secret, sizeof w->secret, "%s", sec->valuestring);
    w->identity_loaded = 1;
    log_info("resuming as worker %d (identity in %s/identity)", w->id, w->o.work_dir);
  }
  cJSON_Delete(o);
}

/* After registering anew: messages of an earlier identity can never be
 * delivered (the server refuses them: 401/403); drop them now, logged.
 * Every fenced message queued so far is such a one, whatever its worker
 * id: a server on a fresh database numbers workers from 1 again, so the
 * new identity can carry the old one's id. Lanes with a request out are
 * left to its reply. */
static void worker_drop_old_identity(struct worker *w) {
  size_t total = 0;
  for (struct outbox_lane *l = w->ob.lanes; l; l = l->next) {
    while (!l->inflight && l->head && l->head->lease.attempt) {
      struct outbox_lease old = l->head->lease;
      size_t n = outbox_drop_lease(&w->ob, l, &old);
      if (!n) break;
      total += n;
      worker_after_ack(w, l->trial_id);
    }
  }
  if (total) {
    log_warn("dropped %zu queued message(s) of an earlier identity of this worker (the "
             "server no longer knows it); their attempts are redone from stored checkpoints",
             total);
    worker_unhold(w);
    outbox_gc(&w->ob);
  }
}

/* Registered or resumed: heartbeats, self-fencing and leasing start. */
static void worker_begin(struct worker *w) {
  worker_arm_fence(w);
  uint64_t ms = (uint64_t)(w->hb_interval_s * 1000);
  uv_timer_start(&w->hb_timer, worker_on_hb_timer, ms, ms);
  worker_on_hb_timer(&w->hb_timer); /* tell the server at once what still runs here */
  worker_server_alive(w);
  worker_kick_lease(w, 0);
}

static void worker_on_reg_timer(uv_timer_t *h) { worker_register(h->data); }

static void worker_on_registered(void *arg, int err, const struct http_resp *resp) {
  struct worker *w = arg;
  w->reg_inflight = 0;
  if (w->shut) return;
  cJSON *b = (!err && resp->status / 100 == 2) ? cJSON_Parse(resp->body) : NULL;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
  if (!cJSON_IsNumber(id) && w->draining) {
    cJSON_Delete(b);
    worker_check_drained(w); /* not registered: nothing to leave */
    return;
  }
  if (!cJSON_IsNumber(id)) {
    unsigned d = 250u << (w->reg_attempts < 5 ? w->reg_attempts : 5);
    if (d > 5000) d = 5000;
    uint64_t ra = worker_retry_after_ms(err, resp); /* 429 too_many_registrations */
    if (ra > d) d = (unsigned)ra;
    if (w->reg_attempts++ == 0 || w->reg_attempts % 20 == 0)
      log_warn("cannot register with %s (%s, HTTP %ld %.200s): retrying%s", w->o.server,
               err ? strerror(-err) : "bad answer", resp->status, resp->body ? resp->body : "",
               resp->status == 401 || resp->status == 403
                   ? "; the server wants its worker token: --token-file"
                   : "");
    uv_timer_start(&w->reg_timer, worker_on_reg_timer, d, 0);
    cJSON_Delete(b);
    return;
  }
  const cJSON *sec = cJSON_GetObjectItemCaseSensitive(b, "secret");
  if (cJSON_IsString(sec) && strlen(sec->valuestring) < sizeof w->secret &&
      http_client_set_token(w->http, sec->valuestring) == 0) {
    snprintf(w->secret, sizeof w->secret, "%s", sec->valuestring);
  } else {
    /* A server without per-worker secrets (older, or --no-auth answers
     * one anyway): keep the token we have. */
    w->secret[0] = '\0';
    if (!cJSON_IsString(sec)) http_client_set_token(w->http, w->o.token);
  }
  w->id = id->valueint;
  w->identity_loaded = 0;
  w->reg_attempts = 0;
  w->hb_interval_s = 5;
  w->lease_timeout_s = 30;
  worker_read_timing(w, b);
  const cJSON *lw = cJSON_GetObjectItemCaseSensitive(b, "lease_wait_max_ms");
  w->lease_wait_ms = !cJSON_IsNumber(lw) || lw->valuedouble < 1 ? 0
                     : lw->valuedouble < WORKER_LEASE_WAIT_MS   ? (unsigned)lw->valuedouble
                                                                : WORKER_LEASE_WAIT_MS;
  cJSON_Delete(b);
  if (w->secret[0]) worker_save_identity(w);
  worker_drop_old_identity(w);
  log_info("registered with %s as worker %d (cpu %d, gpu %d, memory_mb %ld, heartbeat %.1f s, "
           "lease timeout %.1f s)",
           w->o.server, w->id, w->o.ncpus, w->o.ngpus, w->o.memory_mb, w->hb_interval_s,
           w->lease_timeout_s);
  sdnotify("READY=1"); /* systemd Type=notify: registered */
  if (w->draining) {
    /* The stop signal came while this reply was on its way: the server
     * lists this worker now, so leave that list (worker_check_drained
     * deregisters) instead of starting to work. */
    worker_check_drained(w);
    return;
  }
  worker_begin(w);
}

static void worker_register(struct worker *w) {
  if (w->reg_inflight || w->shut || w->draining) return;
  cJSON *b = cJSON_CreateObject();
  cJSON *r = cJSON_CreateObject();
  if (!b || !r || !cJSON_AddStringToObject(b, "name", w->o.name) ||
      !cJSON_AddNumberToObject(r, "cpu", w->o.ncpus) ||
      !cJSON_AddNumberToObject(r, "gpu", w->o.ngpus) ||
      !cJSON_AddNumberToObject(r, "memory_mb", (double)w->o.memory_mb)) {
    cJSON_Delete(b);
    cJSON_Delete(r);
    uv_timer_start(&w->reg_timer, worker_on_reg_timer, 1000, 0);
    return;
  }
  cJSON_AddItemToObject(b, "resources", r);
  /* A spot worker may go away at short notice: the server keeps the trials
   * it would lose most by for the others (docs/scheduling.md#spot-workers). */
  cJSON *labels = w->o.spot ? cJSON_AddObjectToObject(b, "labels") : NULL;
  if (labels) cJSON_AddTrueToObject(labels, "spot");
  /* Registration alone goes with the shared worker token (--token-file). */
  char *auth = NULL, *text = jsonout_print(b);
  int rc = -ENOMEM;
  if (text && (!w->o.token || !*w->o.token ||
               asprintf(&auth, "Authorization: Bearer %s", w->o.token) >= 0)) {
    const char *hdrs[] = {auth, NULL};
    rc = http_request(w->http, "POST", "/api/v1/workers", "application/json", text, strlen(text),
                      auth ? hdrs : NULL, WORKER_REQ_TIMEOUT_MS, worker_on_registered, w);
  }
  free(auth);
  free(text);
  if (rc == 0)
    w->reg_inflight = 1;
  else
    uv_timer_start(&w->reg_timer, worker_on_reg_timer, 1000, 0);
  cJSON_Delete(b);
}

/* ---- start, drain, shutdown ------------------------------------------ */

static void worker_handle_closed(uv_handle_t *h) {
  struct worker *w = h->data;
  w->handles--;
}

#define WORKER_TIMERS(w)                                                                           \
  {                                                                                                \
    &(w)->reg_timer, &(w)->hb_timer, &(w)->lease_timer, &(w)->ob_timer, &(w)->log_timer,           \
        &(w)->drain_timer, &(w)->fence_timer, &(w)->house_timer                                    \
  }

static void worker_shutdown(struct worker *w) {
  if (w->shut) return;
  w->shut = 1;
  if (w->ob.n)
    log_warn("exiting with %zu undelivered message(s) kept in %s/outbox for the next start",
             w->ob.n, w->o.work_dir);
  log_info("drained: exiting");
  uv_timer_t *timers[] = WORKER_TIMERS(w);
  for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++) {
    uv_timer_stop(timers[i]);
    uv_close((uv_handle_t *)timers[i], worker_handle_closed);
  }
  http_client_close(w->http);
  w->http = NULL;
}

/* Lanes that can still make progress: not blocked for good. */
static int worker_ob_busy(struct worker *w) {
  if (w->ob_inflight) return 1;
  for (struct outbox_lane *l = w->ob.lanes; l; l = l->next)
    if (l->head) return 1;
  return 0;
}

/* A clean stop (no trial left, nothing undelivered) leaves the
 * server's worker list at once instead of showing "lost" until pruned. Any
 * failure just exits: the server prunes the worker later. */
static void worker_on_deregister(void *arg, int err, const struct http_resp *resp) {
  struct worker *w = arg;
  if (!err && resp->status == 200) {
    /* The server revoked this identity: the next start registers anew. */
    char path[4200];
    snprintf(path, sizeof path, "%s/identity", w->o.work_dir);
    if (unlink(path) && errno != ENOENT)
      log_warn("cannot remove %s: %s (the next start registers anew anyway)", path,
               strerror(errno));
    log_info("deregistered from the server");
  } else
    log_warn("deregistration failed (%s): the server shows this worker lost",
             err ? "no answer" : "refused");
  worker_shutdown(w);
}

static void worker_deregister_and_exit(struct worker *w) {
  if (w->deregistering) return;
  if (!w->id || w->trials || w->ob.n || w->fenced) {
    worker_shutdown(w);
    return;
  }
  w->deregistering = 1;
  char path[64];
  snprintf(path, sizeof path, "/api/v1/workers/%d/deregister", w->id);
  cJSON *b = cJSON_CreateObject();
  if (!b || worker_post_json(w, path, b, worker_on_deregister, w)) worker_shutdown(w);
  cJSON_Delete(b);
}

static void worker_check_drained(struct worker *w) {
  if (!w->draining || w->shut) return;
  if (w->deregistering) return;
  uint64_t now = clock_mono_ms();
  for (struct trial *t = w->trials; t; t = t->next)
    /* A live process is killed by proc's grace timer; its exit comes. */
    if (t->state < TRIAL_EXITED && t->state != TRIAL_FETCHING) return;
  /* A lease request still in flight may have been granted: the server has
   * that trial RUNNING here. Its reply starts nothing while draining but
   * gives the trial back (worker_spawn_trial); exiting before it would leave
   * the trial to the lease timeout. A request the server holds is not waited
   * for: the deregistration requeues what it may have been granted and ends
   * the wait (unknown worker). */
  if (now < w->drain_deadline_ms && (w->trials || w->uploads > 0 || worker_ob_busy(w) ||
                                     (w->lease_inflight && !w->lease_wait_ms)))
    return;
  /* A registration still in flight may have made this worker known to
   * the server: wait a moment for its reply (worker_on_registered) to
   * deregister, or the server would list a worker that is gone until it is
   * pruned. Only a moment: a server that does not answer must not hold the
   * stop up. */
  if (now < w->drain_reg_deadline_ms && w->reg_inflight) return;
  worker_deregister_and_exit(w);
}

/* A trial asked to checkpoint at a preemption notice that has not done so
 * by the end of its window is stopped (SIGTERM: it may still save). */
static void worker_preempt_tick(struct worker *w) {
  if (!w->preempting || clock_mono_ms() < w->preempt_ask_until_ms) return;
  struct trial *t = w->trials;
  while (t) {
    struct trial *next = t->next;
    if (t->preempt_asked && t->state < TRIAL_STOPPING)
      worker_trial_event(w, t, TEV_STOP, TRIAL_STOP_PREEMPT, 0);
    t = next;
  }
}

static void worker_on_drain_timer(uv_timer_t *h) {
  worker_preempt_tick(h->data);
  worker_check_drained(h->data);
}

static void worker_drain_kill(struct worker *w) {
  log_warn("second stop signal: killing trials now");
  for (struct trial *t = w->trials; t; t = t->next) worker_trial_event(w, t, TEV_KILL, 0, 0);
  w->drain_deadline_ms = w->drain_reg_deadline_ms = clock_mono_ms();
  worker_check_drained(w);
}

/* No new leases; the drain ends by deadline_ms at the latest. */
static void worker_drain_begin(struct worker *w, uint64_t deadline_ms) {
  w->draining = 1;
  uv_timer_stop(&w->lease_timer);
  uv_timer_stop(&w->reg_timer);
  w->drain_deadline_ms = deadline_ms;
  w->drain_reg_deadline_ms = clock_mono_ms() + WORKER_DRAIN_REG_MS;
  uv_timer_start(&w->drain_timer, worker_on_drain_timer, 200, 200);
}

void worker_drain(struct worker *w) {
  if (w->shut) return;
  if (w->draining) {
    worker_drain_kill(w);
    return;
  }
  int n = 0;
  struct trial *t = w->trials;
  w->draining = 1;
  while (t) {
    struct trial *next = t->next;
    if (t->state >= TRIAL_SPAWNING && t->state <= TRIAL_PAUSED) n++;
    /* A trial still fetching its checkpoint gives its lease back at once. */
    if (t->state < TRIAL_STOPPING) worker_trial_event(w, t, TEV_STOP, TRIAL_STOP_DRAIN, 0);
    t = next;
  }
  log_info("draining: no new leases, stopping %d trial(s) (they checkpoint), delivering "
           "%zu queued message(s)",
           n, w->ob.n);
  worker_drain_begin(w, clock_mono_ms() + w->o.stop_grace_ms + WORKER_DRAIN_EXTRA_MS);
  worker_pump_outbox(w);
  worker_check_drained(w);
}

void worker_preempt(struct worker *w, const char *what) {
  if (w->shut) return;
  if (w->draining) {
    worker_drain_kill(w);
    return;
  }
  unsigned grace = w->o.preempt_grace_ms ? w->o.preempt_grace_ms : PREEMPT_DEFAULT_GRACE_MS;
  uint64_t now = clock_mono_ms();
  w->preempting = 1;
  w->notice_at = clock_wall_s();
  w->preempt = preempt_plan(grace, w->o.stop_grace_ms);
  w->preempt_ask_until_ms = now + w->preempt.ask_ms;
  w->draining = 1; /* a lease granted meanwhile is given back (worker_spawn_trial) */
  int asked = 0, stopped = 0;
  struct trial *t = w->trials;
  while (t) {
    struct trial *next = t->next;
    if (t->state >= TRIAL_SPAWNING && t->state <= TRIAL_PAUSED) {
      int frc = t->dir ? preempt_request_file(t->dir) : 0;
      if (frc < 0)
        log_warn("trial %d: cannot create %s/%s: %s", t->id, t->dir, PREEMPT_REQUEST_FILE,
                 strerror(-frc));
      /* SIGUSR1's default action kills: sent only to a process that
       * catches it (the Python helpers do); the others save on SIGTERM. */
      if (t->state == TRIAL_RUNNING && t->proc.pid > 0 && preempt_catches(t->proc.pid, SIGUSR1) &&
          kill(t->proc.pid, SIGUSR1) == 0) {
        t->preempt_asked = 1;
        asked++;
        t = next;
        continue;
      }
      stopped++;
    }
    /* One that never ran here (fetching its checkpoint) lost nothing: a
     * plain release, as for a lease granted from now on. */
    if (t->state < TRIAL_STOPPING)
      worker_trial_event(w, t, TEV_STOP,
                         t->state == TRIAL_FETCHING ? TRIAL_STOP_DRAIN : TRIAL_STOP_PREEMPT, 0);
    t = next;
  }
  log_warn("preemption notice (%s): no new leases; %d trial(s) asked to checkpoint (SIGUSR1), "
           "%d stopped (SIGTERM: they checkpoint); every lease is released as preempted "
           "within %u ms",
           what, asked, stopped, grace);
  worker_drain_begin(w, now + grace);
  worker_pump_outbox(w);
  worker_check_drained(w);
}

int worker_new(uv_loop_t *loop, const struct worker_opts *opts, struct worker **out) {
  struct worker *w = calloc(1, sizeof *w);
  if (!w) return -ENOMEM;
  w->loop = loop;
  w->o = *opts;
  w->hb_interval_s = 5;
  w->lease_timeout_s = 30;
  int rc = alloc_init(&w->pool, opts->cpu_ids, opts->ncpus, opts->gpu_ids, opts->gpu_mem_mb,
                      opts->ngpus, opts->memory_mb);
  if (rc < 0) goto fail;
  char *obdir = NULL;
  if (asprintf(&obdir, "%s/outbox", opts->work_dir) < 0) {
    rc = -ENOMEM;
    goto fail;
  }
  rc = outbox_open(&w->ob, obdir, opts->max_queued);
  free(obdir);
  if (rc < 0) goto fail;
  /* What an earlier run left: kept only while needed. */
  workdir_remove_gone(opts->work_dir, 0, 0, NULL);
  int swept =
      workdir_sweep_trials(opts->work_dir, opts->keep_trial_dirs, worker_dir_needed, w, NULL);
  worker_log_swept(swept, opts->keep_trial_dirs);
  if (workdir_spares_open(&w->spares, opts->work_dir) < 0)
    log_warn("spare trial dirs: cannot read %s/trials: trial dirs are made at their lease",
             opts->work_dir);
  /* Rendezvous ports are claimed machine-wide where the CPU claims are. */
  char run_dir[4096];
  if (sysres_run_dir(run_dir, sizeof run_dir) < 0 || rdzv_ports_init(&w->rdzv, run_dir) < 0)
    log_warn("rendezvous ports: no claim dir: only this worker's gang trials are kept apart");
  rc = http_client_new(loop, opts->server, opts->token, &w->http);
  if (rc < 0) goto fail_ob;
  uv_timer_t *timers[] = WORKER_TIMERS(w);
  for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++) {
    uv_timer_init(loop, timers[i]);
    timers[i]->data = w;
    w->handles++;
  }
  *out = w;
  return 0;
fail_ob:
  workdir_spares_close(&w->spares);
  outbox_close(&w->ob);
fail:
  free(w);
  return rc;
}

int worker_start(struct worker *w) {
  /* A test build may tick faster, so that tests wait less for what the
   * tick does (testhook.h). */
  const char *tick = TESTHOOK(TESTHOOK_WORKER_TICK_MS);
  uint64_t period =
      tick && strtoul(tick, NULL, 10) > 0 ? strtoul(tick, NULL, 10) : WORKER_LOG_PERIOD_MS;
  uv_timer_start(&w->log_timer, worker_on_log_timer, period, period);
  worker_load_identity(w);
  if (w->id)
    worker_begin(w); /* its first heartbeat confirms the identity */
  else
    worker_register(w);
  worker_pump_outbox(w); /* messages left by an earlier run */
  return 0;
}

void worker_free(struct worker *w) {
  if (!w) return;
  while (w->trials) {
    struct trial *t = w->trials;
    w->trials = t->next;
    trial_free(t);
  }
  outbox_close(&w->ob);
  workdir_spares_close(&w->spares);
  rdzv_ports_free(&w->rdzv);
  free(w);
}
