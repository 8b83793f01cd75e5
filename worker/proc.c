/* Trial process management over uv_spawn; see proc.h. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "execwrap.h"
#include "isolate.h"
#include "log.h"
#include "spawner.h"
#include "supervise.h"
#include "testhook.h"

/* A child that exited may leave a grandchild holding its pipes; after the
 * group is killed, stop waiting for end of file after this long. */
#define PROC_EOF_WAIT_MS 2000
/* How long the supervisor may take to report the trial's pid (a fork and a
 * write: milliseconds, unless the machine is very loaded). */
#define PROC_REPORT_WAIT_MS 10000
/* The fd the supervisor reports the trial's pid on. */
#define PROC_REPORT_FD 3

/* A pseudo-terminal for the trial's stdout, in raw mode: no echo, no
 * "\n" -> "\r\n", no signals from bytes. The master is close-on-exec (only
 * the worker reads it); the slave goes to the child as its fd 1 and is then
 * closed here, so the master reads EIO once every process holding the slave
 * is gone: its end of file. Never the controlling terminal (O_NOCTTY). */
static int proc_open_pty(int *master, int *slave) {
  int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0) return -errno;
  char name[128];
  int rc = 0;
  if (grantpt(m) != 0 || unlockpt(m) != 0 || ptsname_r(m, name, sizeof name) != 0) {
    rc = -errno;
    close(m);
    return rc;
  }
  int sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (sl < 0) {
    rc = -errno;
    close(m);
    return rc;
  }
  struct termios tio;
  if (tcgetattr(sl, &tio) == 0) {
    cfmakeraw(&tio);
    tcsetattr(sl, TCSANOW, &tio);
  }
  /* The trial's user owns its terminal, as a login would: a script that
   * writes to /dev/stdout (reopening /dev/pts/N) works under --run-as too. */
  int crc = isolate_chown(isolate_current(), sl, NULL);
  if (crc < 0)
    log_warn("cannot give a trial's pseudo-terminal to the --run-as user: %s", strerror(-crc));
  /* Some programs size their output to the terminal: a wide one. */
  struct winsize ws = {.ws_row = 50, .ws_col = 200};
  ioctl(sl, TIOCSWINSZ, &ws);
  *master = m;
  *slave = sl;
  return 0;
}

static void proc_handle_closed(uv_handle_t *h) {
  struct proc *p = h->data;
  if (--p->handles == 0 && p->cbs.on_closed) p->cbs.on_closed(p->arg);
}

static void proc_close_handle(struct proc *p, uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, proc_handle_closed);
  (void)p;
}

static void proc_maybe_report(struct proc *p) {
  if (p->exit_reported || !p->exited || p->out_open || p->err_open) return;
  p->exit_reported = 1;
  uv_timer_stop(&p->timer);
  if (p->cbs.on_exit) p->cbs.on_exit(p->arg, p->exit_code, p->term_signal);
}

static void proc_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  static char chunk[65536]; /* consumed synchronously in proc_on_read */
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void proc_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct proc *p = s->data;
  int is_err = s == (uv_stream_t *)&p->err;
  if (n > 0) {
    if (p->cbs.on_output) p->cbs.on_output(p->arg, is_err, buf->base, (size_t)n);
    return;
  }
  if (n == 0) return;
  /* EOF or error (EIO from a pty master: every slave fd is closed): this
   * stream is done. */
  uv_read_stop(s);
  if (is_err)
    p->err_open = 0;
  else
    p->out_open = 0;
  proc_maybe_report(p);
}

int proc_drain_stdout(struct proc *p) {
  if (!p->out_open || !p->reported) return 0;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&p->out, &fd) < 0) return 0;
  char buf[16384];
  /* The pipe is non-blocking (libuv made it so); libuv's own read later
   * simply finds less, or EAGAIN. EOF is left for libuv to see. */
  for (int i = 0; i < 64; i++) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (p->cbs.on_output) p->cbs.on_output(p->arg, 0, buf, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EIO && p->out_pty) break; /* its end: libuv sees it too */
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    break;
  }
  return 0;
}

static void proc_eof_timeout(uv_timer_t *t) {
  struct proc *p = t->data;
  if (p->out_open) {
    uv_read_stop((uv_stream_t *)&p->out);
    p->out_open = 0;
  }
  if (p->err_open) {
    uv_read_stop((uv_stream_t *)&p->err);
    p->err_open = 0;
  }
  proc_maybe_report(p);
}

static void proc_report_settle(struct proc *p, int err);

/* The supervisor ended and its report is settled. */
static void proc_ended(struct proc *p) {
  if (p->report_fault) { /* no report: a start that failed, however it ended */
    p->exit_code = EXECWRAP_EXIT_EXEC;
    p->term_signal = 0;
  }
  /* Whatever the trial left behind in its group goes with it: no orphans. */
  if (p->pid > 0) kill(-p->pid, SIGKILL);
  uv_timer_stop(&p->timer);
  uv_timer_start(&p->timer, proc_eof_timeout, PROC_EOF_WAIT_MS, 0);
  proc_maybe_report(p);
}

/* Reads what the supervisor has written of its report, without blocking.
 * final: it has exited, so what is there is all there will be. */
static void proc_report_read(struct proc *p, int final) {
  while (!p->reported && !p->settle_deferred) {
    ssize_t k = read(p->report_fd, p->rbuf + p->rlen, sizeof p->rbuf - 1 - p->rlen);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !final) return;
    if (k <= 0) { /* end of file (or an error): it ended before reporting */
      proc_report_settle(p, p->rlen ? -EPROTO : -ECHILD);
      return;
    }
    p->rlen += (size_t)k;
    p->rbuf[p->rlen] = '\0';
    if (memchr(p->rbuf, '\n', p->rlen)) {
      char *end;
      long pid = strtol(p->rbuf, &end, 10);
      int ok = end != p->rbuf && *end == '\n' && pid > 1 && pid <= INT_MAX;
      if (ok) p->pid = (int)pid;
      proc_report_settle(p, ok ? 0 : -EPROTO);
    } else if (p->rlen == sizeof p->rbuf - 1) {
      proc_report_settle(p, -EPROTO);
    }
  }
}

static void proc_on_report(uv_poll_t *h, int status, int events) {
  (void)events;
  struct proc *p = h->data;
  proc_report_read(p, status < 0);
}

static void proc_report_timeout(uv_timer_t *t) { proc_report_settle(t->data, -ETIMEDOUT); }

static void proc_report_closed(uv_handle_t *h) {
  struct proc *p = h->data;
  if (p->report_fd >= 0) close(p->report_fd);
  p->report_fd = -1;
  proc_handle_closed(h);
}

/* The report is in (err 0, p->pid set) or given up: from now on signals go
 * to the trial's group, its output is read and its end is reported. */
static void proc_report_settle(struct proc *p, int err) {
  if (p->reported) return;
  if (p->super_pid <= 0 && p->child) {
    /* The spawner has not answered yet: the report (or its failure)
     * counts once the supervisor is known (proc_on_child_pid). */
    p->settle_deferred = 1;
    p->settle_err = err;
    uv_poll_stop(&p->report);
    uv_timer_stop(&p->timer);
    return;
  }
  p->reported = 1;
  uv_timer_stop(&p->timer);
  if (!uv_is_closing((uv_handle_t *)&p->report))
    uv_close((uv_handle_t *)&p->report, proc_report_closed);
  if (err < 0) {
    /* Without a report the trial cannot be signalled reliably: a start
     * that failed. A supervisor still there is told to end; one that
     * ended said why on stderr, or not, so say it here too. Its own group
     * is the only one known. */
    char line[400];
    int n = snprintf(line, sizeof line,
                     "{\"error\": {\"code\": \"exec_failed\", \"message\": \"ctune-worker: the "
                     "trial's supervisor (pid %d) %s\"}}\n",
                     p->super_pid,
                     err == -ECHILD      ? "ended before reporting the trial's pid"
                     : err == -ETIMEDOUT ? "did not report the trial's pid in time: killed"
                                         : "reported something other than the trial's pid: "
                                           "killed");
    p->pid = p->super_pid;
    p->report_fault = 1;
    /* SIGUSR2 is its parent-death signal: it kills the whole tree and
     * exits. One that did not report in time may not listen: SIGKILL. */
    if (err != -ECHILD && !p->exited) kill(p->super_pid, err == -ETIMEDOUT ? SIGKILL : SIGUSR2);
    if (p->cbs.on_output && n > 0) p->cbs.on_output(p->arg, 1, line, (size_t)n);
  }
  if (p->cbs.on_spawned) p->cbs.on_spawned(p->arg, err);
  if (p->closing) return;
  if (p->out_open) uv_read_start((uv_stream_t *)&p->out, proc_alloc, proc_on_read);
  if (p->err_open) uv_read_start((uv_stream_t *)&p->err, proc_alloc, proc_on_read);
  if (p->exited)
    proc_ended(p); /* it ended before its report was read */
  else if (p->stop_deferred) {
    proc_stop(p, p->stop_grace_ms);
  }
}

static void proc_exited(struct proc *p, int64_t status, int sig) {
  p->running = 0;
  p->exited = 1;
  p->exit_code = sig ? -1 : (int)status;
  p->term_signal = sig;
  /* Its report, if any, is all in the pipe now. (Settling it starts the
   * reads and the clean-up below.) */
  if (!p->reported) {
    proc_report_read(p, 1);
    return;
  }
  proc_ended(p);
}

static void proc_on_exit(uv_process_t *h, int64_t status, int sig) {
  proc_exited(h->data, status, sig);
}

/* The spawner answered: the supervisor's pid, or it could not be started
 * (then a failed start, ended here: its pipes' other ends went with the
 * request). */
static void proc_on_child_pid(void *arg, int pid) {
  struct proc *p = arg;
  if (pid > 0) {
    p->super_pid = pid;
    if (p->settle_deferred) {
      p->settle_deferred = 0;
      proc_report_settle(p, p->settle_err);
    }
    return;
  }
  p->child = NULL;
  p->running = 0;
  p->exited = 1;
  p->reported = p->report_fault = 1;
  p->exit_code = EXECWRAP_EXIT_EXEC;
  uv_timer_stop(&p->timer);
  if (!uv_is_closing((uv_handle_t *)&p->report))
    uv_close((uv_handle_t *)&p->report, proc_report_closed);
  char line[300];
  int n = snprintf(line, sizeof line,
                   "{\"error\": {\"code\": \"exec_failed\", \"message\": \"ctune-worker: "
                   "cannot start the trial's supervisor: %s\"}}\n",
                   strerror(-pid));
  if (p->cbs.on_output && n > 0) p->cbs.on_output(p->arg, 1, line, (size_t)n);
  if (p->cbs.on_spawned) p->cbs.on_spawned(p->arg, pid);
  if (p->closing) return;
  p->out_open = p->err_open = 0; /* never read: nothing wrote them */
  proc_maybe_report(p);
}

static void proc_on_child_exit(void *arg, int status) {
  struct proc *p = arg;
  p->child = NULL; /* the spawner freed its record */
  proc_exited(p, WIFEXITED(status) ? WEXITSTATUS(status) : 0,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* The supervisor started by the spawner, off this loop: its stdout (unless
 * the pty) and stderr are pipes of ours. 0 (its pid comes as an event) or a
 * negative errno. */
static int proc_spawn_child(struct proc *p, const struct proc_supervisor *sup, const char **args,
                            char *const *env, const char *cwd, int pty_s, int report_w) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, rc = 0;
  if ((pty_s < 0 && pipe2(out, O_CLOEXEC) != 0) || pipe2(err, O_CLOEXEC) != 0) rc = -errno;
  if (rc == 0 && pty_s < 0 && (rc = uv_pipe_open(&p->out, out[0])) == 0) out[0] = -1;
  if (rc == 0 && (rc = uv_pipe_open(&p->err, err[0])) == 0) err[0] = -1;
  if (rc == 0) {
    struct spawner_req r = {
        sup->exe, (char *const *)args, env, cwd, {pty_s >= 0 ? pty_s : out[1], err[1], report_w}};
    rc = spawner_spawn(sup->spawner, &r, proc_on_child_pid, proc_on_child_exit, p, &p->child);
  }
  for (int i = 0; i < 2; i++) { /* the read ends the handles did not take, the write ends */
    if (out[i] >= 0) close(out[i]);
    if (err[i] >= 0) close(err[i]);
  }
  return rc;
}

/* The supervisor forked from the worker itself, by libuv. */
static int proc_uv_spawn(struct proc *p, uv_loop_t *loop, const struct proc_supervisor *sup,
                         const char **args, char *const *env, const char *cwd, int pty_s,
                         int report_w) {
  uv_stdio_container_t stdio[4];
  stdio[0].flags = UV_IGNORE;
  if (pty_s >= 0) {
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = pty_s;
  } else {
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&p->out;
  }
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&p->err;
  stdio[3].flags = UV_INHERIT_FD;
  stdio[3].data.fd = report_w;
  uv_process_options_t opt;
  memset(&opt, 0, sizeof opt);
  opt.file = sup->exe;
  opt.args = (char **)args;
  opt.env = (char **)env;
  opt.cwd = cwd;
  opt.exit_cb = proc_on_exit;
  /* DETACHED = setsid(): a session and process group of its own, so one
   * kill(-pgid) reaches the trial and everything it started. */
  opt.flags = UV_PROCESS_DETACHED;
  opt.stdio_count = 4;
  opt.stdio = stdio;
  return uv_spawn(loop, &p->process, &opt);
}

int proc_spawn(struct proc *p, uv_loop_t *loop, const struct proc_supervisor *sup,
               char *const *argv, char *const *env, const char *cwd, const char *trial_dir,
               const struct proc_limits *lim, const struct proc_cbs *cbs, void *arg) {
  memset(p, 0, sizeof *p);
  p->report_fd = -1;
  p->loop = loop;
  p->cbs = *cbs;
  p->arg = arg;
  size_t n = 0;
  while (argv[n]) n++;
  char rl[32], parent[32], rfd[16], uid[24], gid[24], hook[PATH_MAX];
  char groups[ISOLATE_MAX_GROUPS * 12 + 2] = "-";
  const char **args = calloc(n + 26 + 4 * ISOLATE_MAX_VIEW, sizeof *args);
  if (!args) return -ENOMEM;
  int report[2] = {-1, -1};
  /* The read end alone non-blocking: the supervisor's write end stays as
   * it was (O_NONBLOCK belongs to each end's open file). */
  if (pipe2(report, O_CLOEXEC) != 0 || fcntl(report[0], F_SETFL, O_NONBLOCK) != 0) {
    int e = -errno;
    if (report[0] >= 0) {
      close(report[0]);
      close(report[1]);
    }
    free(args);
    return e;
  }
  size_t k = 0;
  args[k++] = sup->exe;
  if (sup->flag) args[k++] = sup->flag;
  if (lim && lim->cpus && *lim->cpus) {
    args[k++] = "--cpus";
    args[k++] = lim->cpus;
  }
  if (lim && lim->rlimit_as_mb > 0) {
    snprintf(rl, sizeof rl, "%ld", lim->rlimit_as_mb);
    args[k++] = "--rlimit-as-mb";
    args[k++] = rl;
  }
  if (lim && lim->cgroup) {
    args[k++] = "--cgroup";
    args[k++] = lim->cgroup;
  }
  snprintf(parent, sizeof parent, "%d", (int)getpid());
  args[k++] = "--parent";
  args[k++] = parent;
  snprintf(rfd, sizeof rfd, "%d", PROC_REPORT_FD);
  args[k++] = "--report-fd";
  args[k++] = rfd;
  const struct isolate *iso = isolate_current();
  if (iso && iso->run_as) {
    /* The supervisor drops the trial to this user just before exec. */
    snprintf(uid, sizeof uid, "%u", (unsigned)iso->uid);
    snprintf(gid, sizeof gid, "%u", (unsigned)iso->gid);
    size_t gl = 0;
    for (int i = 0; i < iso->ngroups; i++)
      gl += (size_t)snprintf(groups + gl, sizeof groups - gl, "%s%u", i ? "," : "",
                             (unsigned)iso->groups[i]);
    args[k++] = "--uid";
    args[k++] = uid;
    args[k++] = "--gid";
    args[k++] = gid;
    args[k++] = "--groups";
    args[k++] = groups;
  }
  if (iso && iso->ns != SUPERVISE_NS_NONE) {
    /* The trial's private view: its own dir and the shared ones shown,
     * the worker's files hidden (supervise_private_view). */
    args[k++] = "--ns";
    args[k++] = iso->ns == SUPERVISE_NS_USER ? "user" : "mount";
    for (int i = 0; i < iso->nhide; i++) {
      args[k++] = "--hide";
      args[k++] = iso->hide[i];
    }
    if (trial_dir) {
      args[k++] = "--show";
      args[k++] = trial_dir;
    }
    for (int i = 0; i < iso->nshow; i++) {
      args[k++] = "--show";
      args[k++] = iso->show[i];
    }
  }
  /* Test builds: the supervisor of trial <id> misbehaves as the file
   * <dir>/<id> says (execwrap.h), <dir> being this site's value. */
  const char *hdir = TESTHOOK(TESTHOOK_SUPERVISE_REPORT);
  const char *tid = trial_dir ? strrchr(trial_dir, '/') : NULL;
  if (hdir && tid && snprintf(hook, sizeof hook, "%s%s", hdir, tid) < (int)sizeof hook) {
    args[k++] = "--test-report";
    args[k++] = hook;
  }
  args[k++] = "--";
  for (size_t i = 0; i < n; i++) args[k++] = argv[i];
  args[k] = NULL;

  int pty_m = -1, pty_s = -1;
  if (lim && lim->stdout_pty) {
    int prc = proc_open_pty(&pty_m, &pty_s);
    if (prc < 0)
      log_warn("cannot open a pseudo-terminal for a trial's stdout (%s): a pipe instead, so "
               "a program that does not flush delivers its results late",
               strerror(-prc));
  }

  uv_pipe_init(loop, &p->out, 0);
  uv_pipe_init(loop, &p->err, 0);
  uv_timer_init(loop, &p->timer);
  p->out.data = p->err.data = p->timer.data = p->process.data = p->report.data = p;
  p->handles = 3;
  if (pty_m >= 0) {
    int orc = uv_pipe_open(&p->out, pty_m);
    if (orc < 0) {
      log_warn("cannot read a pseudo-terminal through libuv (%s): a pipe instead",
               uv_strerror(orc));
      close(pty_m);
      close(pty_s);
      pty_m = pty_s = -1;
    } else {
      p->out_pty = 1;
    }
  }

  int rc, spid = 0, nproc = sup->spawner ? 0 : 1; /* the uv_process handle, if any */
  p->via_spawner = !nproc;
  if (sup->spawner) {
    rc = proc_spawn_child(p, sup, args, env, cwd, pty_s, report[1]);
  } else if ((rc = proc_uv_spawn(p, loop, sup, args, env, cwd, pty_s, report[1])) == 0) {
    spid = p->process.pid;
  }
  free(args);
  close(report[1]);
  if (pty_s >= 0) close(pty_s); /* the child's now: EIO follows its last close */
  if (rc == 0) {
    p->report_fd = report[0];
    rc = uv_poll_init(loop, &p->report, report[0]);
    if (rc < 0) {
      /* The supervisor runs: it is killed and its end reported as usual. */
      close(report[0]);
      p->report_fd = -1;
      p->handles = 3 + nproc;
      p->super_pid = p->pid = spid;
      p->running = p->reported = 1;
      log_error("cannot watch a trial's supervisor for its report: %s", uv_strerror(rc));
      proc_close(p);
      return rc;
    }
  }
  if (rc < 0) {
    close(report[0]);
    /* libuv wants the process handle closed even after a failed spawn. */
    p->handles = 3 + nproc;
    p->closing = 1;
    if (nproc) proc_close_handle(p, (uv_handle_t *)&p->process);
    proc_close_handle(p, (uv_handle_t *)&p->out);
    proc_close_handle(p, (uv_handle_t *)&p->err);
    proc_close_handle(p, (uv_handle_t *)&p->timer);
    return rc;
  }
  p->handles = 4 + nproc;
  p->super_pid = spid;
  p->running = 1;
  p->out_open = p->err_open = 1;
  /* Signals go to the trial's own process group, never to the supervisor:
   * a SIGSTOP (outbox full) must pause the trial, and a SIGKILL must leave
   * the supervisor alive to clean up what escaped the group. Its output is
   * read once the group is known (proc_report_settle). */
  uv_poll_start(&p->report, UV_READABLE, proc_on_report);
  uv_timer_start(&p->timer, proc_report_timeout, PROC_REPORT_WAIT_MS, 0);
  return 0;
}

static void proc_kill_timeout(uv_timer_t *t) {
  struct proc *p = t->data;
  if (!p->running) return;
  log_warn("trial pid %d ignored SIGTERM: sending SIGKILL to its process group", p->pid);
  kill(-p->pid, SIGKILL);
}

void proc_stop(struct proc *p, unsigned grace_ms) {
  if (!p->reported) { /* its group is not known yet: once it is */
    if (!p->stop_deferred || grace_ms < p->stop_grace_ms) p->stop_grace_ms = grace_ms;
    p->stop_deferred = 1;
    return;
  }
  /* A second stop must not push the SIGKILL deadline back (a trial that
   * ignores SIGTERM but keeps reporting gets "stop" for every result). */
  if (!p->running || (p->stopping && grace_ms > 0)) return;
  p->stopping = 1;
  kill(-p->pid, SIGTERM);
  kill(-p->pid, SIGCONT); /* a trial paused for a full outbox must see it */
  uv_timer_stop(&p->timer);
  uv_timer_start(&p->timer, proc_kill_timeout, grace_ms, 0);
}

void proc_close(struct proc *p) {
  if (p->closing) return;
  p->closing = 1;
  /* Before the report only the supervisor is known: its parent-death
   * signal makes it kill the whole tree and exit. */
  if (p->running && p->reported && p->pid > 0)
    kill(-p->pid, SIGKILL);
  else if (p->running && !p->reported && p->super_pid > 0)
    kill(p->super_pid, SIGUSR2);
  uv_timer_stop(&p->timer);
  if (!p->reported) {
    p->reported = 1;
    uv_close((uv_handle_t *)&p->report, proc_report_closed);
  }
  proc_close_handle(p, (uv_handle_t *)&p->out);
  proc_close_handle(p, (uv_handle_t *)&p->err);
  proc_close_handle(p, (uv_handle_t *)&p->timer);
  if (p->child) {                      /* started by the spawner: reaped there, no callback */
    spawner_forget(p->child, SIGUSR2); /* its pid may not be known yet */
    p->child = NULL;
  } else if (!p->via_spawner) {
    proc_close_handle(p, (uv_handle_t *)&p->process);
  }
}
