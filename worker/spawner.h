/* The spawner: a small process forked once when the worker starts (before
 * its threads, libcurl and its heap exist) that starts each trial's
 * supervisor for it, so the worker's event loop never forks a large
 * process nor waits for an exec.
 *
 * The worker sends a request over a socketpair (the program, argv, env,
 * cwd, and the child's stdout, stderr and report fds with SCM_RIGHTS); the
 * spawner clones with CLONE_PARENT, so the new process is the WORKER's
 * child, exactly as with a fork of the worker: its parent-death signal,
 * its getppid() check and its exit status go to the worker, and a spawner
 * that dies leaves running trials alone. The spawner answers with the pid
 * once cloned, and the loop reads the answer as an event (the exec is the
 * child's own business: a failed one writes a line on the child's stderr
 * and exits 127). The child's exit is reaped by the worker (SIGCHLD,
 * waitpid on the pids it knows).
 *
 * The spawner's death (or 10 s without an answer) is a worker fault:
 * logged, the spawner killed, any child it cloned without answering ended,
 * and its unanswered requests sent again to a new one (one fork of the now
 * larger worker). It dies with the worker
 * (PR_SET_PDEATHSIG). Its loop allocates nothing and calls only
 * async-signal-safe functions, so it may be forked from a worker with
 * threads. */
#ifndef CTUNE_WORKER_SPAWNER_H
#define CTUNE_WORKER_SPAWNER_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

struct spawner;
struct spawner_child;

/* The child's stdio: fds[0..2] become its 1, 2 and 3 (stdin is /dev/null);
 * -1 leaves that one closed. */
struct spawner_req {
  const char *file;
  char *const *argv;
  char *const *env;
  const char *cwd; /* NULL: the worker's */
  int fds[3];
};

/* The spawner answered: the child's pid, or a negative errno (it could
 * not be started: clone failed, the request was refused, or two spawners
 * in a row were lost with it). */
typedef void (*spawner_pid_cb)(void *arg, int pid);
/* The child ended: its wait status (as waitpid gives it). */
typedef void (*spawner_exit_cb)(void *arg, int status);

/* Forks the spawner process. 0 or a negative errno. */
int spawner_new(struct spawner **out);
/* Watches the spawner's answers and reaps children on the loop (a SIGCHLD
 * handle that keeps the loop alive while a child is awaited). Needed
 * before spawner_spawn. */
int spawner_attach(struct spawner *s, uv_loop_t *loop);
/* Asks for r->file to be started in a session of its own and returns: the
 * pid comes to on_pid from the loop (never from inside this call), the
 * exit to on_exit, once each; *child tracks it until then or until
 * forgotten. 0, or a negative errno when the request could not be sent
 * (even to a new spawner). The request's fds are copied: the caller closes
 * its own at once. Blocks only while the request is written (bounded). */
int spawner_spawn(struct spawner *s, const struct spawner_req *r, spawner_pid_cb on_pid,
                  spawner_exit_cb on_exit, void *arg, struct spawner_child **child);
/* No callback for this child any more; it is still reaped, and sent sig
 * when its pid comes, if it had not come yet (0: none). */
void spawner_forget(struct spawner_child *c, int sig);
/* The spawner process's pid (tests, logs). */
pid_t spawner_pid(const struct spawner *s);
/* Ends the spawner process and frees what is left (after the loop ran its
 * closes: call spawner_detach first, then run the loop, then this). */
void spawner_detach(struct spawner *s);
#ifdef CTUNE_TESTHOOKS
/* Test builds: the spawner dies right after cloning the next request's
 * child, before answering (the window spawner_end_strays closes). */
void spawner_test_die_next(struct spawner *s);
#endif
void spawner_free(struct spawner *s);

#endif
