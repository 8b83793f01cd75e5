/* Worker protocol state machine over the loop; see worker.h and HACKING.md. */
#include "worker.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "clock.h"
#include "cpuset.h"
#include "exit_codes.h"
#include "execwrap.h"
#include "http.h"
#include "log.h"
#include "outbox.h"
#include "trainable.h"
#include "trial.h"

extern char **environ;

#define WORKER_REQ_TIMEOUT_MS 10000L
#define WORKER_UPLOAD_TIMEOUT_MS 60000L
#define WORKER_LOG_PERIOD_MS 2000
#define WORKER_DRAIN_EXTRA_MS 10000
#define WORKER_MAX_CHECKPOINT (1024L * 1024 * 1024)
#define WORKER_CKPT_GET_TRIES 6

struct worker {
  uv_loop_t *loop;
  struct worker_opts o;
  struct http_client *http;
  struct alloc_pool pool;
  struct outbox ob;
  int id;
  double hb_interval_s;
  int reg_inflight, hb_inflight, lease_inflight, ob_inflight;
  int reg_attempts, lease_failures;
  int lease_again;  /* something freed up while a lease request was out */
  int ckpt_failing; /* checkpoint uploads failing since the last success */
  int ob_down_logged;
  uv_timer_t reg_timer, hb_timer, lease_timer, ob_timer, log_timer, drain_timer;
  int handles;
  struct trial *trials;
  int uploads;  /* checkpoint/log requests in flight */
  int draining, drain_kill, shut;
  uint64_t drain_deadline_ms;
  int no_fit_warned;
};

/* What a response callback needs; never a pointer to a trial, which may be
 * gone when the answer comes. */
struct wreq {
  struct worker *w;
  int trial_id;
  long long mtime_ns, size;
  unsigned long long log_total;
  int resume_attempt;
};

static void worker_pump_outbox(struct worker *w);
static void worker_kick_lease(struct worker *w, unsigned delay_ms);
static void worker_register(struct worker *w);
static void worker_check_drained(struct worker *w);
static void worker_spawn_trial(struct worker *w, struct trial *t, int resume);

static struct trial *worker_find(struct worker *w, int id) {
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->id == id && !t->exited) return t;
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->id == id) return t;
  return NULL;
}

static struct wreq *wreq_new(struct worker *w, int trial_id) {
  struct wreq *r = calloc(1, sizeof *r);
  if (r) {
    r->w = w;
    r->trial_id = trial_id;
  }
  return r;
}

static int worker_post_json(struct worker *w, const char *path, cJSON *body, http_cb cb,
                            void *arg) {
  char *text = cJSON_PrintUnformatted(body);
  if (!text) return -ENOMEM;
  int rc = http_request(w->http, "POST", path, "application/json", text, strlen(text), NULL,
                        WORKER_REQ_TIMEOUT_MS, cb, arg);
  free(text);
  return rc;
}

static int worker_is_unknown(const struct http_resp *resp) {
  return resp->status == 404 && resp->body && strstr(resp->body, "unknown_worker");
}

/* ---- trial ends ------------------------------------------------------- */

static void worker_queue_end(struct worker *w, int trial_id, const char *what, cJSON *body) {
  char path[96], *text = cJSON_PrintUnformatted(body);
  snprintf(path, sizeof path, "/api/v1/trials/%d/%s", trial_id, what);
  int rc = text ? outbox_push(&w->ob, OUTBOX_END, trial_id, path, text) : -ENOMEM;
  if (rc < 0)
    log_error("trial %d: cannot queue its %s message: %s", trial_id, what, strerror(-rc));
  free(text);
  worker_pump_outbox(w);
}

static void worker_queue_fail(struct worker *w, int trial_id, const char *error,
                              int exit_code, const char *reason) {
  cJSON *b = cJSON_CreateObject();
  if (!b) return;
  cJSON_AddStringToObject(b, "error", error ? error : "");
  if (exit_code >= 0) cJSON_AddNumberToObject(b, "exit_code", exit_code);
  else cJSON_AddNullToObject(b, "exit_code");
  cJSON_AddStringToObject(b, "reason", reason);
  worker_queue_end(w, trial_id, "fail", b);
  cJSON_Delete(b);
}

/* ---- uploads: checkpoints and logs ---------------------------------- */

static void worker_maybe_free(struct worker *w, struct trial *t);
static void worker_upload_checkpoint(struct worker *w, struct trial *t);
static void worker_upload_logs(struct worker *w, struct trial *t);

static void worker_on_ckpt_put(void *arg, int err, const struct http_resp *resp) {
  struct wreq *r = arg;
  struct worker *w = r->w;
  w->uploads--;
  struct trial *t = worker_find(w, r->trial_id);
  if (!err && resp->status / 100 == 2) {
    if (t) {
      t->ckpt_mtime_ns = r->mtime_ns;
      t->ckpt_size = r->size;
    }
    log_debug("trial %d: checkpoint uploaded (%lld bytes)", r->trial_id, r->size);
    w->ckpt_failing = 0;
  } else if (!w->ckpt_failing++) {  /* once per outage, not once per epoch */
    log_warn("trial %d: checkpoint upload failed (%s, HTTP %ld %.200s); retrying with the "
             "next checkpoint or at the end", r->trial_id, err ? strerror(-err) : "refused",
             resp->status, resp->body ? resp->body : "");
  }
  if (t) {
    t->ckpt_inflight = 0;
    if (t->ckpt_dirty) {
      t->ckpt_dirty = 0;
      worker_upload_checkpoint(w, t);
    }
    worker_maybe_free(w, t);
  }
  free(r);
  worker_check_drained(w);
}

static void worker_upload_checkpoint(struct worker *w, struct trial *t) {
  if (t->ckpt_inflight) {
    t->ckpt_dirty = 1;
    return;
  }
  char *path = trial_path(t, "checkpoint.bin");
  if (!path) return;
  struct stat st;
  unsigned char *data = NULL;
  struct wreq *r = NULL;
  int fd = -1;
  if (stat(path, &st) != 0) goto done;
  long long mt = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  if (mt == t->ckpt_mtime_ns && (long long)st.st_size == t->ckpt_size) goto done;
  if (st.st_size > WORKER_MAX_CHECKPOINT) {
    log_warn("trial %d: checkpoint of %lld bytes is too large to upload", t->id,
             (long long)st.st_size);
    goto done;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) goto done;
  size_t len = (size_t)st.st_size, got = 0;
  data = malloc(len ? len : 1);
  if (!data) goto done;
  while (got < len) {
    ssize_t n = read(fd, data + got, len - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  if (got != len) {
    log_warn("trial %d: checkpoint changed while reading it; next result retries", t->id);
    goto done;
  }
  uLong crc = crc32(0L, data, (uInt)len);
  char h_iter[64], h_crc[64], up[96];
  snprintf(h_iter, sizeof h_iter, "X-Ctune-Iteration: %lld", (long long)t->last_iter);
  snprintf(h_crc, sizeof h_crc, "X-Ctune-Crc32: %08lx", (unsigned long)crc);
  snprintf(up, sizeof up, "/api/v1/trials/%d/checkpoint", t->id);
  const char *hdrs[] = {h_iter, h_crc, NULL};
  if (!(r = wreq_new(w, t->id))) goto done;
  r->mtime_ns = mt;
  r->size = (long long)len;
  if (http_request(w->http, "PUT", up, "application/octet-stream", (const char *)data, len,
                   hdrs, WORKER_UPLOAD_TIMEOUT_MS, worker_on_ckpt_put, r) == 0) {
    r = NULL;
    t->ckpt_inflight = 1;
    w->uploads++;
  }
done:
  if (fd >= 0) close(fd);
  free(data);
  free(r);
  free(path);
}

static void worker_on_log_put(void *arg, int err, const struct http_resp *resp) {
  struct wreq *r = arg;
  struct worker *w = r->w;
  w->uploads--;
  struct trial *t = worker_find(w, r->trial_id);
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
    worker_maybe_free(w, t);
  }
  free(r);
  worker_check_drained(w);
}

static void worker_upload_logs(struct worker *w, struct trial *t) {
  if (t->log.total == t->log_sent_total) return;
  if (t->log_inflight) {
    t->log_dirty = 1;
    return;
  }
  size_t len;
  char *text = tail_copy(&t->log, &len);
  struct wreq *r = wreq_new(w, t->id);
  char path[96];
  snprintf(path, sizeof path, "/api/v1/trials/%d/logs", t->id);
  if (text && r) {
    r->log_total = t->log.total;
    if (http_request(w->http, "PUT", path, "text/plain; charset=utf-8", text, len, NULL,
                     WORKER_UPLOAD_TIMEOUT_MS, worker_on_log_put, r) == 0) {
      r = NULL;
      t->log_inflight = 1;
      w->uploads++;
    }
  }
  free(r);
  free(text);
}

static void worker_on_log_timer(uv_timer_t *h) {
  struct worker *w = h->data;
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->spawned) worker_upload_logs(w, t);
}

/* ---- trial lifecycle -------------------------------------------------- */

/* A trial stopped by the drain gives its lease back once its process has
 * exited and its last checkpoint upload is over. The release goes through the
 * outbox behind the trial's results (FIFO), so the server has everything
 * before the trial is PENDING again. If the server is unreachable until the
 * drain's deadline the message stays in the outbox; the lease expires anyway,
 * and a late delivery names this worker id, which the server refuses (409)
 * once the trial is leased elsewhere. */
static void worker_queue_release(struct worker *w, struct trial *t) {
  if (t->stop_why != TRIAL_STOP_DRAIN || !w->id || w->shut) return;
  cJSON *b = cJSON_CreateObject();
  if (!b || !cJSON_AddNumberToObject(b, "worker_id", w->id) ||
      !cJSON_AddNumberToObject(b, "iteration", t->last_iter)) {
    log_error("trial %d: cannot build its release: its lease will expire", t->id);
    cJSON_Delete(b);
    return;
  }
  worker_queue_end(w, t->id, "release", b);
  cJSON_Delete(b);
}

static void worker_maybe_free(struct worker *w, struct trial *t) {
  if (!t->closed || t->ckpt_inflight || t->log_inflight) return;
  worker_queue_release(w, t);
  struct trial **pp = &w->trials;
  while (*pp && *pp != t) pp = &(*pp)->next;
  if (*pp) *pp = t->next;
  trial_free(t);
}

static void worker_release(struct worker *w, struct trial *t) {
  if (!t->has_grant) return;
  alloc_release(&w->pool, &t->grant);
  t->has_grant = 0;
  worker_kick_lease(w, 0);
}

/* Held results go to the outbox as soon as it has room; the paused trial
 * continues once all of them are queued. */
static void worker_unhold(struct worker *w) {
  for (struct trial *t = w->trials; t; t = t->next) {
    if (!t->held) continue;
    while (cJSON_GetArraySize(t->held) > 0 && outbox_has_room(&w->ob)) {
      cJSON *first = cJSON_DetachItemFromArray(t->held, 0);
      char path[96];
      snprintf(path, sizeof path, "/api/v1/trials/%d/results", t->id);
      if (outbox_push(&w->ob, OUTBOX_RESULT, t->id, path, first->valuestring) < 0) {
        cJSON_InsertItemInArray(t->held, 0, first);
        break;
      }
      cJSON_Delete(first);
    }
    if (cJSON_GetArraySize(t->held) == 0) {
      cJSON_Delete(t->held);
      t->held = NULL;
      if (t->spawned && !t->exited) {
        log_info("trial %d: outbox has room again, resuming the trial", t->id);
        kill(-t->proc.pid, SIGCONT);
      }
    }
  }
}

static void worker_on_result(void *arg, struct trial *t, cJSON *flat, double tv) {
  struct worker *w = arg;
  char *body = cJSON_PrintUnformatted(flat);
  cJSON_Delete(flat);
  if (!body) {
    log_error("trial %d: out of memory queuing result %g", t->id, tv);
    return;
  }
  char path[96];
  snprintf(path, sizeof path, "/api/v1/trials/%d/results", t->id);
  int rc = t->held ? -ENOSPC : outbox_push(&w->ob, OUTBOX_RESULT, t->id, path, body);
  if (rc < 0) {
    /* Never drop a result: keep it and pause the trial until there is room. */
    if (!t->held) {
      t->held = cJSON_CreateArray();
      if (t->spawned && !t->exited) {
        log_warn("trial %d: outbox full (%zu results queued) or unwritable (%s): pausing "
                 "the trial until the server takes results again",
                 t->id, w->ob.n_results, strerror(-rc));
        if (kill(-t->proc.pid, SIGSTOP) != 0)
          log_warn("trial %d: cannot pause process group %d: %s", t->id, t->proc.pid,
                   strerror(errno));
      }
    }
    cJSON *s = cJSON_CreateString(body);
    if (!t->held || !s || !cJSON_AddItemToArray(t->held, s)) {
      cJSON_Delete(s);
      log_error("trial %d: out of memory holding result %g: lost", t->id, tv);
    }
  }
  free(body);
  worker_pump_outbox(w);
}

static void worker_on_checkpoint(void *arg, struct trial *t) {
  worker_upload_checkpoint(arg, t);
}

static const char *worker_exit_reason(int code, int sig) {
  if (sig) return "signal";
  if (code == EXECWRAP_EXIT_EXEC) return "exec_failed";
  const char *n = train_exit_name(code);
  return n ? n : "exit_code";
}

static void worker_on_exit(void *arg, struct trial *t, int code, int sig) {
  struct worker *w = arg;
  worker_release(w, t);
  worker_upload_checkpoint(w, t);
  worker_upload_logs(w, t);
  /* Results still held go ahead of the trial's end, beyond the bound. */
  if (t->held) {
    char path[96];
    snprintf(path, sizeof path, "/api/v1/trials/%d/results", t->id);
    cJSON *s;
    cJSON_ArrayForEach(s, t->held)
      if (outbox_push(&w->ob, OUTBOX_END, t->id, path, s->valuestring) < 0)
        log_error("trial %d: cannot queue a held result", t->id);
    cJSON_Delete(t->held);
    t->held = NULL;
  }
  double ran = clock_mono_s() - t->leased_at;
  switch (t->stop_why) {
    case TRIAL_STOP_SERVER:
      log_info("trial %d stopped at the server's request after %.1f s", t->id, ran);
      break;
    case TRIAL_STOP_DRAIN:
      log_info("trial %d stopped by the drain at iteration %g (exit %d); its lease is "
               "released once its checkpoint and results are delivered, and it resumes "
               "from its checkpoint elsewhere", t->id, t->last_iter, code);
      break;
    case TRIAL_STOP_DECISION:
    case TRIAL_STOP_NONE:
      if (t->stop_why == TRIAL_STOP_DECISION || (code == 0 && !sig)) {
        log_info("trial %d %s after %ld result(s), %.1f s", t->id,
                 t->stop_why == TRIAL_STOP_DECISION ? "stopped by the scheduler" : "finished",
                 t->nresults, ran);
        cJSON *b = cJSON_CreateObject();
        if (b) worker_queue_end(w, t->id, "complete", b);
        cJSON_Delete(b);
      } else {
        char *lines = tail_last_lines(&t->err, TRIAL_FAIL_LINES);
        char *msg = NULL;
        if (sig && asprintf(&msg, "killed by signal %d (%s)%s%s", sig, strsignal(sig),
                            lines && *lines ? "\n" : "", lines ? lines : "") < 0)
          msg = NULL;
        const char *reason = worker_exit_reason(code, sig);
        log_warn("trial %d failed: %s (exit %d, signal %d)", t->id, reason, code, sig);
        worker_queue_fail(w, t->id, msg ? msg : lines, sig ? -1 : code, reason);
        free(msg);
        free(lines);
      }
      break;
  }
  trial_close(t);
}

static void worker_on_closed(void *arg, struct trial *t) {
  struct worker *w = arg;
  t->closed = 1;
  if (t->cgroup) cgroup_trial_remove(t->cgroup);
  worker_release(w, t);
  worker_maybe_free(w, t);
  worker_check_drained(w);
}

static const struct trial_events worker_trial_events = {
    worker_on_result, worker_on_exit, worker_on_closed, worker_on_checkpoint};

static void worker_abort_trial(struct worker *w, struct trial *t, const char *msg,
                               const char *reason) {
  log_warn("trial %d cannot start: %s", t->id, msg);
  worker_queue_fail(w, t->id, msg, -1, reason);
  worker_release(w, t);
  t->closed = 1;
  worker_maybe_free(w, t);
  worker_check_drained(w);
}

static void worker_spawn_trial(struct worker *w, struct trial *t, int resume) {
  char cpus[ALLOC_MAX_CPUS * 5], gpus[ALLOC_MAX_GPUS * 5], err[512] = "";
  cpuset_format(t->grant.cpus, t->grant.ncpus, cpus, sizeof cpus);
  cpuset_format(t->grant.gpus, t->grant.ngpus, gpus, sizeof gpus);
  if (w->draining) {
    worker_release(w, t);
    t->stop_why = TRIAL_STOP_DRAIN; /* leased but never started: give it back */
    t->closed = 1;
    worker_maybe_free(w, t);
    worker_check_drained(w);
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
  };
  struct trainable_cmd cmd;
  int rc = trainable_build(t->lease, &ctx, &cmd, err, sizeof err);
  if (rc < 0) {
    worker_abort_trial(w, t, rc == -EINVAL ? err : strerror(-rc),
                       rc == -EINVAL ? "bad_config" : "internal");
    return;
  }
  /* Memory: a cgroup would cap resident memory; RLIMIT_AS caps address
   * space, which CUDA reserves by the terabyte, so GPU trials go without. */
  struct proc_limits lim = {cpus, 0, NULL};
  char cg[4300];
  if (w->o.cgroup && w->o.cgroup->enabled) {
    rc = cgroup_trial_create(w->o.cgroup, t->id, t->grant.cpu_quota, t->grant.memory_mb, cg,
                             sizeof cg);
    if (rc == 0 && (t->cgroup = strdup(cg))) lim.cgroup = t->cgroup;
    else log_warn("trial %d: cannot create its cgroup (%s): cpu/memory not capped", t->id,
                  strerror(rc < 0 ? -rc : ENOMEM));
  } else if (t->grant.memory_mb > 0 && t->grant.ngpus == 0) {
    lim.rlimit_as_mb = t->grant.memory_mb;
  }
  rc = trial_start(t, w->loop, w->o.self_exe, cmd.argv, cmd.env, cmd.cwd, &lim,
                   &worker_trial_events, w);
  trainable_cmd_free(&cmd);
  if (rc < 0) {
    char msg[600];
    snprintf(msg, sizeof msg, "cannot start the trial process: %s", strerror(-rc));
    log_warn("trial %d: %s", t->id, msg);
    worker_queue_fail(w, t->id, msg, -1, "internal");
    worker_release(w, t);
    if (!t->closing) {  /* spawn failed before the process existed */
      t->closed = 1;
      worker_maybe_free(w, t);
    }
    return;
  }
  log_info("trial %d running: pid %d, cpus %s, gpus [%s]%s, dispatch %.2f ms", t->id,
           t->proc.pid, cpus, gpus, resume ? ", resumed from checkpoint" : "",
           (clock_mono_s() - t->leased_at) * 1e3);
}

static int worker_write_file(const char *path, const char *data, size_t len) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.part", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  size_t off = 0;
  int rc = 0;
  while (off < len) {
    ssize_t n = write(fd, data + off, len - off);
    if (n < 0) { rc = -errno; break; }
    off += (size_t)n;
  }
  if (close(fd) != 0 && rc == 0) rc = -errno;
  if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
  if (rc < 0) unlink(tmp);
  return rc;
}

/* A checkpoint download to try again shortly: a restarting server should not
 * make a trial throw away its progress. */
struct retry {
  uv_timer_t timer;
  struct worker *w;
  int trial_id, attempt;
};

static int worker_get_checkpoint(struct worker *w, int trial_id, int attempt);

static void worker_retry_closed(uv_handle_t *h) { free(h->data); }

static void worker_on_ckpt_retry(uv_timer_t *h) {
  struct retry *rt = h->data;
  struct trial *t = worker_find(rt->w, rt->trial_id);
  if (t && !t->spawned && !t->closed &&
      worker_get_checkpoint(rt->w, rt->trial_id, rt->attempt) < 0)
    worker_spawn_trial(rt->w, t, 0);
  uv_close((uv_handle_t *)h, worker_retry_closed);
}

static void worker_on_ckpt_get(void *arg, int err, const struct http_resp *resp) {
  struct wreq *r = arg;
  struct worker *w = r->w;
  struct trial *t = worker_find(w, r->trial_id);
  int attempt = r->resume_attempt;
  free(r);
  if (!t || t->spawned || t->closed) return;
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
               "from scratch", t->id, want, got);
    } else if (!path || worker_write_file(path, resp->body, resp->len) < 0) {
      log_warn("trial %d: cannot write the checkpoint to %s: starting from scratch", t->id,
               t->dir);
    } else {
      struct stat st;
      if (stat(path, &st) == 0) {  /* no need to upload it straight back */
        t->ckpt_mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        t->ckpt_size = (long long)st.st_size;
      }
      resume = 1;
    }
    free(path);
  } else if ((err || resp->status >= 500) && attempt < WORKER_CKPT_GET_TRIES && !w->draining) {
    log_warn("trial %d: checkpoint download failed (%s, HTTP %ld): retry %d of %d in 1 s",
             t->id, err ? strerror(-err) : "server error", resp->status, attempt,
             WORKER_CKPT_GET_TRIES - 1);
    struct retry *rt = calloc(1, sizeof *rt);
    if (rt) {
      rt->w = w;
      rt->trial_id = t->id;
      rt->attempt = attempt + 1;
      uv_timer_init(w->loop, &rt->timer);
      rt->timer.data = rt;
      uv_timer_start(&rt->timer, worker_on_ckpt_retry, 1000, 0);
      return;
    }
  } else {
    log_warn("trial %d: lease says it has a checkpoint but GET gave %s (HTTP %ld): "
             "starting from scratch", t->id, err ? strerror(-err) : "no body", resp->status);
  }
  worker_spawn_trial(w, t, resume);
}

static int worker_get_checkpoint(struct worker *w, int trial_id, int attempt) {
  char path[96];
  snprintf(path, sizeof path, "/api/v1/trials/%d/checkpoint", trial_id);
  struct wreq *r = wreq_new(w, trial_id);
  if (!r) return -ENOMEM;
  r->resume_attempt = attempt;
  int rc = http_request(w->http, "GET", path, NULL, NULL, 0, NULL, WORKER_UPLOAD_TIMEOUT_MS,
                        worker_on_ckpt_get, r);
  if (rc < 0) free(r);
  return rc;
}

static void worker_take_trial(struct worker *w, cJSON *lease_trial) {
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
  int rc = trial_new(lease_trial, w->o.work_dir, &t);
  if (rc < 0) {
    log_error("lease: cannot set up trial %d in %s: %s", tid, w->o.work_dir, strerror(-rc));
    if (tid > 0) worker_queue_fail(w, tid, "worker cannot create the trial directory", -1,
                                   "internal");
    cJSON_Delete(lease_trial);
    return;
  }
  t->next = w->trials;
  w->trials = t;
  rc = alloc_take(&w->pool, t->id, &req, &t->grant);
  if (rc < 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "worker %d cannot fit cpu %g, gpu %g, memory_mb %ld%s", w->id,
             req.cpu, req.gpu, req.memory_mb,
             rc == -EINVAL ? " (invalid request)" : " (taken since the lease)");
    worker_abort_trial(w, t, msg, "no_resources");
    return;
  }
  t->has_grant = 1;
  const cJSON *hc = cJSON_GetObjectItemCaseSensitive(lease_trial, "has_checkpoint");
  char *ck = trial_path(t, "checkpoint.bin");
  if (cJSON_IsTrue(hc)) {
    if (worker_get_checkpoint(w, t->id, 1) == 0) {
      free(ck);
      return;
    }
    log_warn("trial %d: cannot request its checkpoint: starting from scratch", t->id);
  }
  /* A checkpoint left by an earlier attempt here is not what the server
   * expects this attempt to start from. */
  if (ck) unlink(ck);
  free(ck);
  worker_spawn_trial(w, t, 0);
}

/* ---- outbox delivery ------------------------------------------------ */

static void worker_on_ob_timer(uv_timer_t *h) { worker_pump_outbox(h->data); }

static void worker_on_ob_done(void *arg, int err, const struct http_resp *resp) {
  struct worker *w = arg;
  w->ob_inflight = 0;
  struct outbox_item *it = outbox_head(&w->ob);
  if (!it || w->shut) return;
  long st = resp->status;
  if (!err && st / 100 == 2) {
    if (w->ob_down_logged) {
      log_info("server reachable again: delivering %zu queued message(s)", w->ob.n);
      w->ob_down_logged = 0;
    }
    if (it->kind == OUTBOX_RESULT) {
      cJSON *b = cJSON_Parse(resp->body);
      const cJSON *d = cJSON_GetObjectItemCaseSensitive(b, "decision");
      if (cJSON_IsString(d) && !strcmp(d->valuestring, "stop")) {
        struct trial *t = worker_find(w, it->trial_id);
        if (t && t->spawned && !t->exited && t->stop_why == TRIAL_STOP_NONE) {
          log_info("trial %d: scheduler decided stop", t->id);
          trial_stop(t, TRIAL_STOP_DECISION, w->o.stop_grace_ms);
        }
      }
      cJSON_Delete(b);
    }
    /* A trial's end frees a slot in the server's max_concurrent_trials
     * count too: ask for work now rather than after the poll interval. */
    int ended = it->kind == OUTBOX_END;
    outbox_ack(&w->ob);
    worker_unhold(w);
    if (ended) worker_kick_lease(w, 0);
  } else if (!err && (st == 400 || st == 404 || st == 409 || st == 410 || st == 422)) {
    log_warn("server refused %s with HTTP %ld (%.200s): dropping it", it->path, st,
             resp->body ? resp->body : "");
    outbox_ack(&w->ob);
    worker_unhold(w);
  } else {
    outbox_failed(&w->ob, clock_mono_ms());
    if (!w->ob_down_logged) {
      log_warn("cannot deliver %s (%s, HTTP %ld): %zu message(s) kept in the outbox, "
               "retrying with backoff", it->path, err ? strerror(-err) : "server error", st,
               w->ob.n);
      w->ob_down_logged = 1;
    }
  }
  worker_pump_outbox(w);
  worker_check_drained(w);
}

static void worker_pump_outbox(struct worker *w) {
  if (w->ob_inflight || w->shut || !outbox_head(&w->ob)) return;
  uint64_t now = clock_mono_ms();
  if (!outbox_ready(&w->ob, now)) {
    uv_timer_start(&w->ob_timer, worker_on_ob_timer, w->ob.next_try_ms - now, 0);
    return;
  }
  struct outbox_item *it = outbox_head(&w->ob);
  if (http_request(w->http, "POST", it->path, "application/json", it->body,
                   strlen(it->body), NULL, WORKER_REQ_TIMEOUT_MS, worker_on_ob_done, w) == 0)
    w->ob_inflight = 1;
  else {
    outbox_failed(&w->ob, now);
    uv_timer_start(&w->ob_timer, worker_on_ob_timer, outbox_backoff_ms(w->ob.attempts), 0);
  }
}

/* The server answered something: queued messages need not wait out their
 * backoff any longer. */
static void worker_server_alive(struct worker *w) {
  if (w->ob.attempts > 0 && !w->ob_inflight) {
    w->ob.next_try_ms = 0;
    worker_pump_outbox(w);
  }
  /* A checkpoint whose upload failed during an outage goes now, not only
   * with the next one (a no-op for checkpoints already on the server). */
  if (w->ckpt_failing)
    for (struct trial *t = w->trials; t; t = t->next)
      if (t->spawned && !t->closed) worker_upload_checkpoint(w, t);
}

/* ---- lease ------------------------------------------------------------ */

static void worker_on_lease(void *arg, int err, const struct http_resp *resp) {
  struct worker *w = arg;
  w->lease_inflight = 0;
  if (w->shut) return;
  if (!err && resp->status / 100 < 5) worker_server_alive(w);
  if (!err && resp->status == 200) {
    w->lease_failures = 0;
    cJSON *b = cJSON_Parse(resp->body);
    cJSON *tr = cJSON_DetachItemFromObjectCaseSensitive(b, "trial");
    cJSON_Delete(b);
    if (!cJSON_IsObject(tr)) {
      log_warn("lease: 200 without a trial object: %.200s", resp->body);
      cJSON_Delete(tr);
      worker_kick_lease(w, w->o.poll_ms);
      return;
    }
    worker_take_trial(w, tr);
    worker_kick_lease(w, 0);
  } else if (!err && resp->status == 204) {
    w->lease_failures = 0;
    worker_kick_lease(w, w->lease_again ? 0 : w->o.poll_ms);
    w->lease_again = 0;
  } else if (!err && worker_is_unknown(resp)) {
    log_warn("server does not know worker %d: registering again", w->id);
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

static void worker_on_lease_timer(uv_timer_t *h) {
  struct worker *w = h->data;
  if (w->lease_inflight) {
    w->lease_again = 1;
    return;
  }
  if (!w->id || w->draining || w->shut) return;
  struct alloc_free f;
  alloc_free_amounts(&w->pool, &f);
  if (f.cpu <= 0 && f.gpu <= 0) return;  /* a trial's end kicks us again */
  cJSON *b = cJSON_CreateObject();
  cJSON *fr = cJSON_AddObjectToObject(b, "free");
  if (!fr || !cJSON_AddNumberToObject(fr, "cpu", f.cpu) ||
      !cJSON_AddNumberToObject(fr, "gpu", f.gpu) ||
      !cJSON_AddNumberToObject(fr, "memory_mb", (double)f.memory_mb)) {
    cJSON_Delete(b);
    worker_kick_lease(w, w->o.poll_ms);
    return;
  }
  char path[64];
  snprintf(path, sizeof path, "/api/v1/workers/%d/lease", w->id);
  if (worker_post_json(w, path, b, worker_on_lease, w) == 0) w->lease_inflight = 1;
  else worker_kick_lease(w, w->o.poll_ms);
  cJSON_Delete(b);
}

static void worker_kick_lease(struct worker *w, unsigned delay_ms) {
  if (w->draining || w->shut || !w->id) return;
  uv_timer_start(&w->lease_timer, worker_on_lease_timer, delay_ms, 0);
}

/* ---- heartbeat -------------------------------------------------------- */

static void worker_on_heartbeat(void *arg, int err, const struct http_resp *resp) {
  struct worker *w = arg;
  w->hb_inflight = 0;
  if (w->shut) return;
  if (!err && resp->status == 200) {
    worker_server_alive(w);
    cJSON *b = cJSON_Parse(resp->body);
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(b, "stop"), *s;
    cJSON_ArrayForEach(s, stop) {
      if (!cJSON_IsNumber(s)) continue;
      struct trial *t = worker_find(w, s->valueint);
      if (t && t->spawned && !t->exited && t->stop_why != TRIAL_STOP_SERVER) {
        log_info("trial %d: server says stop (cancelled or no longer ours)", t->id);
        trial_stop(t, TRIAL_STOP_SERVER, w->o.stop_grace_ms);
      }
    }
    cJSON_Delete(b);
  } else if (!err && worker_is_unknown(resp)) {
    log_warn("server does not know worker %d: registering again", w->id);
    w->id = 0;
    worker_register(w);
  } else {
    log_debug("heartbeat failed (%s, HTTP %ld)", err ? strerror(-err) : "error", resp->status);
  }
}

static void worker_on_hb_timer(uv_timer_t *h) {
  struct worker *w = h->data;
  if (w->hb_inflight || !w->id || w->shut) return;
  cJSON *b = cJSON_CreateObject();
  cJSON *run = cJSON_AddArrayToObject(b, "running");
  for (struct trial *t = w->trials; run && t; t = t->next)
    if (!t->exited && !t->closed) cJSON_AddItemToArray(run, cJSON_CreateNumber(t->id));
  char path[64];
  snprintf(path, sizeof path, "/api/v1/workers/%d/heartbeat", w->id);
  if (run && worker_post_json(w, path, b, worker_on_heartbeat, w) == 0) w->hb_inflight = 1;
  cJSON_Delete(b);
}

/* ---- registration ------------------------------------------------------ */

static void worker_on_reg_timer(uv_timer_t *h) { worker_register(h->data); }

static void worker_on_registered(void *arg, int err, const struct http_resp *resp) {
  struct worker *w = arg;
  w->reg_inflight = 0;
  if (w->shut) return;
  cJSON *b = (!err && resp->status / 100 == 2) ? cJSON_Parse(resp->body) : NULL;
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
  if (!cJSON_IsNumber(id)) {
    unsigned d = 250u << (w->reg_attempts < 5 ? w->reg_attempts : 5);
    if (w->reg_attempts++ == 0 || w->reg_attempts % 20 == 0)
      log_warn("cannot register with %s (%s, HTTP %ld %.200s): retrying%s", w->o.server,
               err ? strerror(-err) : "bad answer", resp->status, resp->body ? resp->body : "",
               resp->status == 401 || resp->status == 403
                   ? "; the server wants its worker token: --token-file" : "");
    uv_timer_start(&w->reg_timer, worker_on_reg_timer, d > 5000 ? 5000 : d, 0);
    cJSON_Delete(b);
    return;
  }
  const cJSON *hb = cJSON_GetObjectItemCaseSensitive(b, "heartbeat_interval_s");
  w->id = id->valueint;
  w->reg_attempts = 0;
  w->hb_interval_s = cJSON_IsNumber(hb) && hb->valuedouble > 0 ? hb->valuedouble : 5;
  cJSON_Delete(b);
  log_info("registered with %s as worker %d (cpu %d, gpu %d, memory_mb %ld, heartbeat %.1f s)",
           w->o.server, w->id, w->o.ncpus, w->o.ngpus, w->o.memory_mb, w->hb_interval_s);
  uint64_t ms = (uint64_t)(w->hb_interval_s * 1000);
  uv_timer_start(&w->hb_timer, worker_on_hb_timer, ms, ms);
  worker_on_hb_timer(&w->hb_timer);  /* tell the server at once what still runs here */
  worker_server_alive(w);
  worker_kick_lease(w, 0);
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
  if (worker_post_json(w, "/api/v1/workers", b, worker_on_registered, w) == 0)
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

static void worker_shutdown(struct worker *w) {
  if (w->shut) return;
  w->shut = 1;
  if (w->ob.n)
    log_warn("exiting with %zu undelivered message(s) kept in %s/outbox for the next start",
             w->ob.n, w->o.work_dir);
  log_info("drained: exiting");
  uv_timer_t *timers[] = {&w->reg_timer, &w->hb_timer, &w->lease_timer,
                          &w->ob_timer, &w->log_timer, &w->drain_timer};
  for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++) {
    uv_timer_stop(timers[i]);
    uv_close((uv_handle_t *)timers[i], worker_handle_closed);
  }
  http_client_close(w->http);
  w->http = NULL;
}

static void worker_check_drained(struct worker *w) {
  if (!w->draining || w->shut) return;
  uint64_t now = clock_mono_ms();
  if (w->trials) {
    /* Trials that outlive the deadline are killed by proc's grace timer. */
    return;
  }
  if (now < w->drain_deadline_ms && (w->uploads > 0 || w->ob_inflight || w->ob.n > 0)) return;
  worker_shutdown(w);
}

static void worker_on_drain_timer(uv_timer_t *h) { worker_check_drained(h->data); }

void worker_drain(struct worker *w) {
  if (w->shut) return;
  if (w->draining) {
    log_warn("second stop signal: killing trials now");
    for (struct trial *t = w->trials; t; t = t->next)
      if (t->spawned && !t->exited) trial_stop(t, TRIAL_STOP_DRAIN, 0);
    w->drain_deadline_ms = clock_mono_ms();
    worker_check_drained(w);
    return;
  }
  w->draining = 1;
  int n = 0;
  for (struct trial *t = w->trials; t; t = t->next)
    if (t->spawned && !t->exited) {
      trial_stop(t, TRIAL_STOP_DRAIN, w->o.stop_grace_ms);
      n++;
    }
  log_info("draining: no new leases, stopping %d trial(s) (they checkpoint), delivering "
           "%zu queued message(s)", n, w->ob.n);
  uv_timer_stop(&w->lease_timer);
  uv_timer_stop(&w->reg_timer);
  w->drain_deadline_ms = clock_mono_ms() + w->o.stop_grace_ms + WORKER_DRAIN_EXTRA_MS;
  uv_timer_start(&w->drain_timer, worker_on_drain_timer, 200, 200);
  worker_check_drained(w);
}

int worker_new(uv_loop_t *loop, const struct worker_opts *opts, struct worker **out) {
  struct worker *w = calloc(1, sizeof *w);
  if (!w) return -ENOMEM;
  w->loop = loop;
  w->o = *opts;
  int rc = alloc_init(&w->pool, opts->cpu_ids, opts->ncpus, opts->gpu_ids, opts->gpu_mem_mb,
                      opts->ngpus, opts->memory_mb);
  if (rc < 0) goto fail;
  char *obdir = NULL;
  if (asprintf(&obdir, "%s/outbox", opts->work_dir) < 0) { rc = -ENOMEM; goto fail; }
  rc = outbox_open(&w->ob, obdir, opts->max_queued);
  free(obdir);
  if (rc < 0) goto fail;
  rc = http_client_new(loop, opts->server, opts->token, &w->http);
  if (rc < 0) goto fail_ob;
  uv_timer_t *timers[] = {&w->reg_timer, &w->hb_timer, &w->lease_timer,
                          &w->ob_timer, &w->log_timer, &w->drain_timer};
  for (size_t i = 0; i < sizeof timers / sizeof timers[0]; i++) {
    uv_timer_init(loop, timers[i]);
    timers[i]->data = w;
    w->handles++;
  }
  *out = w;
  return 0;
fail_ob:
  outbox_close(&w->ob);
fail:
  free(w);
  return rc;
}

int worker_start(struct worker *w) {
  uv_timer_start(&w->log_timer, worker_on_log_timer, WORKER_LOG_PERIOD_MS,
                 WORKER_LOG_PERIOD_MS);
  worker_register(w);
  worker_pump_outbox(w);  /* messages left by an earlier run */
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
  free(w);
}
