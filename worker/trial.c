/* Trial runtime: directory, process, output capture and result lines. */
#include "trial.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "isolate.h"
#include "log.h"
#include "result.h"

/* A stdout line longer than this is log output, never a result. */
#define TRIAL_MAX_LINE (1024 * 1024)

/* <work dir>/trials/<id>: the parents are the worker's (0711 under --run-as,
 * so the trial's user can reach its own dir but list nothing), the trial dir
 * is 0700 and belongs to the trial's user. A spare (renamed there, so its
 * parents exist) is 0700 already: it only changes owner. */
static int trial_mkdirs(const char *path, int spare) {
  const struct isolate *iso = isolate_current();
  mode_t parent_mode = iso && iso->run_as ? 0711 : 0700;
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -ENAMETOOLONG;
  char *last = strrchr(buf, '/');
  struct stat st;
  /* The parents only when the dir cannot be made without them. */
  int made = spare || mkdir(buf, 0700) == 0;
  if (!made && errno == ENOENT) {
    for (char *p = buf + 1; *p; p++) {
      if (*p != '/') continue;
      *p = '\0';
      if (mkdir(buf, 0755) == 0) {
        /* Only the one the worker creates (trials/), never an existing parent. */
        if (p == last && chmod(buf, parent_mode) != 0) return -errno;
      } else if (errno != EEXIST) {
        return -errno;
      }
      *p = '/';
    }
    made = mkdir(buf, 0700) == 0;
  }
  if (!made && errno != EEXIST) return -errno;
  if (!spare) {
    /* It may be an earlier attempt's: whatever its mode was, it is 0700 now.
     * lstat: a trial could not have replaced it (its parent is the worker's),
     * but nothing here follows a symlink anyway. */
    if (lstat(buf, &st) != 0) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
    if (chmod(buf, 0700) != 0) return -errno;
  }
  int rc = isolate_chown(iso, -1, buf);
  if (rc == 0 && last && iso && iso->run_as) {
    /* trials/ made by an older worker without --run-as: let the user through. */
    *last = '\0';
    if (lstat(buf, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0111) != 0111)
      chmod(buf, (st.st_mode & 07777) | 0111);
  }
  return rc;
}

char *trial_path(const struct trial *t, const char *name) {
  char *p = NULL;
  if (asprintf(&p, "%s/%s", t->dir, name) < 0) return NULL;
  return p;
}

int trial_new(cJSON *lease, const char *work_dir, struct workdir_spares *spares,
              struct trial **out) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(lease, "id");
  const cJSON *ta = cJSON_GetObjectItemCaseSensitive(lease, "time_attr");
  if (!cJSON_IsNumber(id) || id->valuedouble < 1) return -EINVAL;
  struct trial *t = calloc(1, sizeof *t);
  if (!t) return -ENOMEM;
  t->out_fd = t->err_fd = t->ckpt_held_fd = -1;
  t->id = id->valueint;
  const cJSON *att = cJSON_GetObjectItemCaseSensitive(lease, "attempt");
  t->attempt = cJSON_IsNumber(att) ? (long)att->valuedouble : 0;
  static uint64_t keys;
  t->key = ++keys;
  t->state = TRIAL_FETCHING;
  int rc = -ENOMEM;
  t->time_attr = strdup(cJSON_IsString(ta) ? ta->valuestring : "training_iteration");
  if (!t->time_attr) goto fail;
  t->auto_iter = !strcmp(t->time_attr, "training_iteration");
  /* Every objective, and every constrained metric, must be in the first
   * result. */
  if ((rc = result_required_metrics(lease, &t->metric)) < 0) goto fail;
  rc = -ENOMEM;
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(lease, "gang");
  const cJSON *rank = cJSON_GetObjectItemCaseSensitive(g, "rank");
  const cJSON *world = cJSON_GetObjectItemCaseSensitive(g, "world_size");
  t->rank = cJSON_IsNumber(rank) ? rank->valueint : 0;
  t->world = cJSON_IsNumber(world) ? world->valueint : 1;
  /* A gang's other members here have dirs of their own inside rank 0's. */
  if ((t->rank > 0 ? asprintf(&t->dir, "%s/trials/%d/rank%d", work_dir, t->id, t->rank)
                   : asprintf(&t->dir, "%s/trials/%d", work_dir, t->id)) < 0) {
    t->dir = NULL;
    goto fail;
  }
  double made = clock_mono_s();
  /* A spare needs only trial_mkdirs' mode and owner (an existing dir's). */
  int spare = spares && workdir_spare_take(spares, t->dir) == 0;
  if ((rc = trial_mkdirs(t->dir, spare)) < 0) goto fail;
  t->from_spare = spare;
  /* What the loop spends on a trial's start, for bench/worker/bench_gap.py. */
  log_debug("trial %d: dir made, %.3f ms on the loop%s", t->id, (clock_mono_s() - made) * 1e3,
            spare ? " (a spare)" : "");
  if ((rc = tail_init(&t->log, TRIAL_LOG_TAIL)) < 0) goto fail;
  if ((rc = tail_init(&t->err, TRIAL_ERR_TAIL)) < 0) goto fail;
  linebuf_init(&t->out_lb, TRIAL_MAX_LINE);
  t->lease = lease;
  t->leased_at = clock_mono_s();
  *out = t;
  return 0;
fail:
  trial_free(t);
  return rc;
}

void trial_drop_held_checkpoint(struct trial *t) {
  if (t->ckpt_held_fd >= 0) close(t->ckpt_held_fd);
  t->ckpt_held_fd = -1;
}

int trial_hold_named_checkpoint(struct trial *t) {
  if (t->ckpt_held_fd >= 0) return 1;
  if (!t->ckpt_named.valid) return 0;
  t->ckpt_named.valid = 0;
  struct stat st;
  int fd = trial_open_checkpoint(t, &st);
  if (fd < 0) {
    if (fd != -ENOENT)
      log_warn("trial %d: cannot open the checkpoint of iteration %g: %s", t->id,
               t->ckpt_named.iter, strerror(-fd));
    return 0;
  }
  if ((unsigned long long)st.st_ino != t->ckpt_named.ino ||
      (long long)st.st_size != t->ckpt_named.size) {
    log_debug("trial %d: the checkpoint of iteration %g was replaced before it could be "
              "taken: the next one goes instead",
              t->id, t->ckpt_named.iter);
    close(fd);
    return 0;
  }
  t->ckpt_held_fd = fd;
  t->ckpt_held_iter = t->ckpt_named.iter;
  t->ckpt_held_upto = t->ckpt_named.upto;
  t->ckpt_held_seq++;
  return 1;
}

/* A line named the checkpoint file saved at it, labelled `label`: the
 * newest named one (worker.c takes it when no other is held). */
static void trial_note_checkpoint(struct trial *t, const struct result_ckpt *ck, double label) {
  if (!t->ckpt_keyed) {
    /* From now on the lines say which file is which: a rename alone (and
     * the debounce timer it started) uploads nothing. */
    t->ckpt_keyed = 1;
    uv_timer_stop(&t->ckpt_timer);
  }
  t->ckpt_named.valid = 1;
  t->ckpt_named.ino = ck->ino;
  t->ckpt_named.size = ck->size;
  t->ckpt_named.iter = label;
  t->ckpt_named.upto = UINT64_MAX;
}

/* A line that is not a result but names a checkpoint (save_checkpoint
 * after report): it belongs to the last result read, or to the earlier
 * iteration it names. */
static void trial_on_ckpt_line(struct trial *t, const struct result_ckpt *ck) {
  double label = t->last_iter;
  if (ck->has_iter) {
    if (ck->iter > t->last_iter) {
      log_warn("trial %d: ignoring its checkpoint of iteration %g: past its last result (%g)",
               t->id, ck->iter, t->last_iter);
      return;
    }
    label = ck->iter;
  }
  trial_note_checkpoint(t, ck, label);
  t->ev->on_checkpoint(t->arg, t);
}

static void trial_on_line(void *arg, const char *line, size_t len) {
  struct trial *t = arg;
  cJSON *flat = NULL;
  double tv = 0;
  struct result_ckpt ck;
  int r = result_parse_line_ckpt(line, len, t->time_attr, t->auto_iter, &flat, &tv, &ck);
  if (ck.state == RESULT_CKPT_BAD)
    log_warn("trial %d: ignoring the \"" RESULT_CKPT_KEY "\" of a stdout line: not "
             "{\"ino\": N, \"size\": S} of whole numbers: %.*s",
             t->id, (int)(len < 200 ? len : 200), line);
  if (r == 0 && ck.state == RESULT_CKPT_OK) {
    trial_on_ckpt_line(t, &ck);
    return;
  }
  if (r == RESULT_MALFORMED) {
    /* It looks like a result: say so instead of letting it vanish as log. */
    log_warn("trial %d: ignoring a stdout line that looks like a result but is not one "
             "(not one valid JSON object with a finite \"%s\"): %.*s",
             t->id, t->time_attr, (int)(len < 200 ? len : 200), line);
    return;
  }
  if (r < 0) {
    log_error("trial %d: out of memory parsing a result line", t->id);
    return;
  }
  if (r == 0) return; /* plain output: already in the log */
  /* The attempt's first result must carry the experiment's metric: named
   * with what the trial itself reported (before the worker's filling-in);
   * worker.c fails the trial on it. */
  if (t->nresults == 0 && t->metric && !t->fail_msg)
    t->fail_msg = result_missing_metric(flat, t->metric);
  r = result_fill(flat, t->time_attr, &t->clock, clock_mono_s(), clock_wall_s(), &tv);
  if (r < 0) {
    log_error("trial %d: cannot fill in a result: %s", t->id, strerror(-r));
    cJSON_Delete(flat);
    return;
  }
  t->nresults++;
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(flat, "training_iteration");
  t->last_iter = cJSON_IsNumber(it) ? it->valuedouble : tv;
  /* Noted before the result is queued, uploaded after it is stored. */
  int named = ck.state == RESULT_CKPT_OK;
  if (named) trial_note_checkpoint(t, &ck, t->last_iter);
  t->ev->on_result(t->arg, t, flat, tv);
  if (named) t->ev->on_checkpoint(t->arg, t);
}

static void trial_on_output(void *arg, int is_stderr, const char *data, size_t n) {
  struct trial *t = arg;
  int fd = is_stderr ? t->err_fd : t->out_fd;
  if (fd >= 0 && write(fd, data, n) != (ssize_t)n) {
    log_warn("trial %d: cannot write its %s log: %s", t->id, is_stderr ? "stderr" : "stdout",
             strerror(errno));
  }
  tail_append(&t->log, data, n);
  if (is_stderr)
    tail_append(&t->err, data, n);
  else if (linebuf_feed(&t->out_lb, data, n, trial_on_line, t) < 0)
    log_error("trial %d: out of memory splitting output lines", t->id);
}

static void trial_on_spawned(void *arg, int err) {
  struct trial *t = arg;
  t->ev->on_spawned(t->arg, t, err);
}

static void trial_on_exit(void *arg, int exit_code, int term_signal) {
  struct trial *t = arg;
  linebuf_flush(&t->out_lb, trial_on_line, t);
  t->ev->on_exit(t->arg, t, exit_code, term_signal);
}

static void trial_handle_closed(struct trial *t) {
  if (--t->handles == 0) t->ev->on_closed(t->arg, t);
}

static void trial_on_closed(void *arg) { trial_handle_closed(arg); }

static void trial_uv_closed(uv_handle_t *h) { trial_handle_closed(h->data); }

static void trial_on_ckpt_timer(uv_timer_t *h) {
  struct trial *t = h->data;
  t->ev->on_checkpoint(t->arg, t);
}

/* The trainer prints a result and then saves its checkpoint (temporary file
 * and rename); uploading when the file is replaced, shortly after the last
 * event, never sends an older checkpoint labelled with a newer iteration. */
static void trial_on_dir_event(uv_fs_event_t *h, const char *name, int events, int status) {
  (void)events;
  struct trial *t = h->data;
  if (status < 0 || !name || strcmp(name, "checkpoint.bin") != 0 || t->ckpt_keyed) return;
  uv_timer_start(&t->ckpt_timer, trial_on_ckpt_timer, 100, 0);
}

/* A file the worker made in the trial dir: mode 0600 (unless it is so
 * already), the trial's user's. */
static int trial_own(int fd, int is_0600) {
  if (!is_0600 && fchmod(fd, 0600) != 0) return -errno;
  return isolate_chown(isolate_current(), fd, NULL);
}

int trial_open_checkpoint(const struct trial *t, struct stat *st) {
  char *path = trial_path(t, "checkpoint.bin");
  if (!path) return -ENOMEM;
  int fd = isolate_open_file(path, O_RDONLY, 0, st);
  if (fd == -ELOOP || fd == -EINVAL)
    log_error("trial %d: %s is %s: refusing to read it (a checkpoint must be a regular "
              "file in the trial dir)",
              t->id, path, fd == -ELOOP ? "a symbolic link" : "not a regular file");
  free(path);
  return fd;
}

int trial_write_file(const struct trial *t, const char *name, const void *data, size_t len) {
  char *path = trial_path(t, name), *tmp = NULL;
  if (!path || asprintf(&tmp, "%s.part", path) < 0) {
    free(path);
    return -ENOMEM;
  }
  /* The trial's user owns the dir, so an old attempt may have planted a
   * symlink named like our temporary file: remove whatever is there and
   * create a new file (O_EXCL never follows a link). rename() replaces a
   * link at the final name itself, never its target. */
  unlink(tmp);
  int rc = 0;
  int fd = isolate_open_file(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600, NULL);
  if (fd < 0) {
    rc = fd;
    goto done;
  }
  const char *p = data;
  size_t off = 0;
  while (off < len) {
    ssize_t n = write(fd, p + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      break;
    }
    off += (size_t)n;
  }
  if (rc == 0) rc = trial_own(fd, 0);
  if (close(fd) != 0 && rc == 0) rc = -errno;
  if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
  if (rc < 0) unlink(tmp);
done:
  free(tmp);
  free(path);
  return rc;
}

double trial_start_iteration(const cJSON *lease, int resume) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(lease, "checkpoint_iteration");
  return resume && cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : 0;
}

double trial_start_time_total(const cJSON *lease, int resume) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(lease, "start_time_total_s");
  return resume && cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble > 0
             ? v->valuedouble
             : 0;
}

int trial_start(struct trial *t, uv_loop_t *loop, const struct proc_supervisor *sup,
                char *const *argv, char *const *env, const char *cwd, const struct proc_limits *lim,
                const struct trial_events *ev, void *arg) {
  static const struct proc_cbs cbs = {trial_on_spawned, trial_on_output, trial_on_exit,
                                      trial_on_closed};
  t->ev = ev;
  t->arg = arg;
  char *op = trial_path(t, "stdout.log"), *ep = trial_path(t, "stderr.log");
  int rc = -ENOMEM;
  if (!op || !ep) goto done;
  /* An earlier attempt may have left a symlink or a FIFO in their place:
   * never followed, refused. 0600, the trial's user's. */
  t->out_fd = isolate_open_file(op, O_WRONLY | O_CREAT | O_APPEND, 0600, NULL);
  t->err_fd = isolate_open_file(ep, O_WRONLY | O_CREAT | O_APPEND, 0600, NULL);
  if (t->out_fd < 0 || t->err_fd < 0) {
    rc = t->out_fd < 0 ? t->out_fd : t->err_fd;
    log_error("trial %d: cannot open its logs in %s: %s", t->id, t->dir, strerror(-rc));
    goto done;
  }
  /* A spare's logs are 0600. */
  if ((rc = trial_own(t->out_fd, t->from_spare)) < 0 ||
      (rc = trial_own(t->err_fd, t->from_spare)) < 0) {
    log_error("trial %d: cannot give its logs to the --run-as user: %s", t->id, strerror(-rc));
    goto done;
  }
  uv_timer_init(loop, &t->ckpt_timer);
  uv_fs_event_init(loop, &t->watch);
  t->ckpt_timer.data = t->watch.data = t;
  t->handles = 3;
  if (uv_fs_event_start(&t->watch, trial_on_dir_event, t->dir, 0) < 0)
    log_warn("trial %d: cannot watch %s: checkpoints upload only when it ends", t->id, t->dir);
  /* The attempt's clock starts with its process (result_fill). */
  t->clock.started_mono = t->clock.prev_mono = clock_mono_s();
  t->clock.nresults = 0;
  double asked = clock_mono_s();
  rc = proc_spawn(&t->proc, loop, sup, argv, env, cwd, t->dir, lim, &cbs, t);
  log_debug("trial %d: supervisor started, %.3f ms on the loop (%.3f ms since its lease)", t->id,
            (clock_mono_s() - asked) * 1e3, (clock_mono_s() - t->leased_at) * 1e3);
  if (rc < 0) {
    /* proc_spawn closes its own handles; on_closed follows all three. */
    uv_close((uv_handle_t *)&t->watch, trial_uv_closed);
    uv_close((uv_handle_t *)&t->ckpt_timer, trial_uv_closed);
  }
done:
  free(op);
  free(ep);
  return rc;
}

void trial_close(struct trial *t) {
  if (t->handles == 0) return; /* never started: nothing to close */
  uv_timer_stop(&t->ckpt_timer);
  uv_close((uv_handle_t *)&t->watch, trial_uv_closed);
  uv_close((uv_handle_t *)&t->ckpt_timer, trial_uv_closed);
  proc_close(&t->proc);
}

void trial_free(struct trial *t) {
  if (!t) return;
  if (t->out_fd >= 0) close(t->out_fd);
  if (t->err_fd >= 0) close(t->err_fd);
  trial_drop_held_checkpoint(t);
  linebuf_free(&t->out_lb);
  tail_free(&t->log);
  tail_free(&t->err);
  cJSON_Delete(t->lease);
  free(t->time_attr);
  free(t->dir);
  free(t->cgroup);
  free(t->metric);
  free(t->fail_msg);
  cJSON_Delete(t->held);
  free(t);
}
