/* proc: the child programs of `ctune run` — finding them, starting them in
 * their own process group with output to a log file, and stopping them. */
#ifndef CTUNE_CLI_PROC_H
#define CTUNE_CLI_PROC_H

#include <stddef.h>
#include <signal.h>
#include <sys/types.h>

struct proc {
  pid_t pid;        /* 0 when not running */
  int status;       /* wait status once reaped */
  const char *name; /* for messages */
  int termed;       /* SIGTERM sent (proc_term): never a second one */
};

/* Path of program `name`: next to this executable first, then on PATH.
 * 0, or -ENOENT with err saying where it looked. */
int proc_find(const char *name, char *out, size_t outlen, char *err, size_t errlen);

/* Starts argv[0] with stdin from /dev/null and stdout+stderr appended to
 * log_path, in a new process group, terminated if ctune itself dies. */
int proc_spawn(struct proc *p, const char *name, char *const argv[], const char *log_path);

/* 1 if the child has exited (reaping it), 0 if it still runs. */
int proc_exited(struct proc *p);

/* Set (by a second Ctrl-C) to cut every grace short: proc_stop then kills
 * the child's process group at once. */
extern volatile sig_atomic_t proc_hurry;

/* SIGTERM, once: a second one would mean "at once" to ctune-worker (its
 * trials killed without their checkpoints), so proc_stop sends none after
 * it. */
void proc_term(struct proc *p);

/* SIGTERM (unless proc_term sent it), up to grace_ms for it to exit (less once proc_hurry is set),
 * then SIGKILL to its process group; always reaps. Its exit is awaited as
 * an event (a pidfd), so this returns as soon as it has exited. */
void proc_stop(struct proc *p, int grace_ms);

/* Waits up to timeout_ms for a line starting with prefix to appear in the log
 * file from byte `offset` on; copies the rest of that line to out. Stops early
 * with -ECHILD when p exits, -EINTR when *stop becomes non-zero.
 * 0, -ETIMEDOUT, -ECHILD, -EINTR. */
int proc_wait_log_line(struct proc *p, const char *log_path, long offset, const char *prefix,
                       int timeout_ms, const volatile sig_atomic_t *stop, char *out, size_t outlen);

/* The same for a line holding text anywhere (after a log line's time and
 * level); nothing is copied. Both wake when the log changes (inotify), not
 * at the next look of a poll loop. */
int proc_wait_log_text(struct proc *p, const char *log_path, long offset, const char *text,
                       int timeout_ms, const volatile sig_atomic_t *stop);

#endif
