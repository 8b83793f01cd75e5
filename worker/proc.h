/* One trial process: spawned under its supervisor (the exec wrapper, in a
 * session of its own; see supervise.h) in a process group of its own, its
 * stdout/stderr read by the loop, stopped with SIGTERM to the group and
 * SIGKILL after a grace period. The supervisor kills whatever the trial
 * leaves behind (setsid'd and double-forked descendants included) when the
 * trial ends or the worker dies, and exits with the trial's status. */
#ifndef CTUNE_WORKER_PROC_H
#define CTUNE_WORKER_PROC_H

#include <uv.h>

struct spawner;
struct spawner_child;

struct proc;

struct proc_cbs {
  /* The supervisor reported the trial's pid (err 0), or could not: it ended
   * first (-ECHILD), reported something else (-EPROTO) or nothing in time
   * (-ETIMEDOUT); then it is killed (unless it ended) and its end is
   * reported as a failed start (exit code EXECWRAP_EXIT_EXEC), with a line
   * on stderr saying why. Called once, before any output and the exit. */
  void (*on_spawned)(void *arg, int err);
  void (*on_output)(void *arg, int is_stderr, const char *data, size_t n);
  /* The process exited and its output was fully read. exit_code is -1 when a
   * signal killed it. */
  void (*on_exit)(void *arg, int exit_code, int term_signal);
  /* All handles closed after proc_close: the proc may be freed now. */
  void (*on_closed)(void *arg);
};

/* The supervisor to run (execwrap.h): its path, and its first argument
 * (NULL; EXECWRAP_FLAG when it is ctune-worker itself). */
struct proc_supervisor {
  const char *exe;
  const char *flag;
  struct spawner *spawner; /* starts it (spawner.h); NULL: uv_spawn, a fork of the worker */
};

struct proc_limits {
  const char *cpus;   /* "0,1"; NULL or "" = no pinning */
  long rlimit_as_mb;  /* 0 = none */
  const char *cgroup; /* cgroup v2 dir to join; NULL = none */
  int stdout_pty;     /* stdout is a pty in raw mode (else a pipe): C stdio
                         and other runtimes line-buffer a terminal, so
                         results arrive as they are printed */
};

struct proc {
  uv_loop_t *loop;
  uv_process_t process;
  uv_pipe_t out, err;
  uv_poll_t report; /* the supervisor's pid report, read as an event */
  uv_timer_t timer; /* report deadline; SIGKILL after grace; EOF wait after exit */
  int report_fd;    /* its read end (-1 once closed) */
  char rbuf[32];    /* the report so far */
  size_t rlen;
  int reported;        /* the report was read (or given up): pid is set */
  int report_fault;    /* given up and the supervisor killed: a failed start */
  int stop_deferred;   /* proc_stop before the report: applied once it is read */
  int settle_deferred; /* the report came before the spawner's answer: */
  int settle_err;      /* settled with this once the supervisor's pid is known */
  unsigned stop_grace_ms;
  int pid;                     /* the trial's first process = its process group */
  int super_pid;               /* its supervisor, the worker's child */
  int via_spawner;             /* started by the spawner: no uv_process handle */
  struct spawner_child *child; /* the spawner's record of it until it exits */
  int running;
  int out_open, err_open;
  int out_pty; /* out reads a pty master: EIO is its end of file */
  int exited, exit_code, term_signal;
  int exit_reported;
  int stopping; /* SIGTERM sent, SIGKILL timer armed */
  int handles;  /* open libuv handles, for on_closed */
  int closing;
  struct proc_cbs cbs;
  void *arg;
};

/* Reads what the trial has already written to its stdout, now, and hands it
 * to on_output as the loop would later. 0 or a negative errno. (The worker
 * calls it between snapshotting a checkpoint and labelling it: a trainer
 * prints a result before saving the checkpoint of that iteration, so every
 * result the snapshot holds is in the pipe by then.) */
int proc_drain_stdout(struct proc *p);

/* argv/env/cwd of the trial itself, run under sup; trial_dir (or NULL) is the dir the trial's
 * private view shows it (the installed isolate policy says what else it shows and hides). Returns
 * at once: the supervisor's report of the trial's pid is read as a loop event (on_spawned), so
 * spawns overlap and the loop serves meanwhile. */
int proc_spawn(struct proc *p, uv_loop_t *loop, const struct proc_supervisor *sup,
               char *const *argv, char *const *env, const char *cwd, const char *trial_dir,
               const struct proc_limits *lim, const struct proc_cbs *cbs, void *arg);
/* SIGTERM to the group now, SIGKILL to the group after grace_ms (before the
 * report: once it is read). */
void proc_stop(struct proc *p, unsigned grace_ms);
/* Closes the handles (after on_exit, or to abandon a process: it is then
 * SIGKILLed). on_closed follows. */
void proc_close(struct proc *p);

#endif
