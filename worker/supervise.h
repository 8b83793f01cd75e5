/* The per-trial supervisor: the process between the worker and its trial.
 *
 * PR_SET_PDEATHSIG reaches only one process, and kill(-pgid) misses every
 * descendant that called setsid() or double-forked. So each trial runs under
 * a small supervisor (`ctune-worker --exec-trial`, see execwrap.h) that
 *  - is a child subreaper: every orphaned descendant of the trial becomes its
 *    child, so it can find and kill the whole tree (no matter which session or
 *    process group a descendant moved to) and reap it;
 *  - has PR_SET_PDEATHSIG itself, and checks its parent on every wake-up: when
 *    the worker dies (kill -9 included) it kills the whole tree and exits;
 *  - runs the trial in a process group of its own (the trial's pid), which it
 *    reports to the worker, so the worker's SIGTERM/SIGSTOP/SIGCONT/SIGKILL
 *    to that group reach the trial and never the supervisor;
 *  - when the trial's first process ends, kills what it left behind and exits
 *    with the trial's own status (same exit code, or dies by the same signal).
 * These functions are the pieces; execwrap.c wires them to the command line. */
#ifndef CTUNE_WORKER_SUPERVISE_H
#define CTUNE_WORKER_SUPERVISE_H

#include <sys/types.h>

/* Direct children of this process (from /proc/<pid>/task/<tid>/children, or
 * a scan of /proc/<pid>/stat when the kernel lacks that file). Returns how
 * many were written into pids (at most cap), or a negative errno. */
int supervise_children(pid_t *pids, int cap);

/* Sends SIGKILL to every process of cgroup dir cg (cgroup.kill where the
 * kernel has it, else each pid listed in cgroup.procs, pid self excepted).
 * check_fs: only when cg is on a cgroup2 file system (0 in tests, where a
 * plain directory stands in for it). Returns how many pids were signalled
 * (1 for cgroup.kill), or a negative errno. */
int supervise_kill_cgroup(const char *cg, int check_fs);

/* Kills the whole tree below this process: SIGKILL to process group pgid
 * (0 = none), to the cgroup cg (NULL = none), and to each child, again and
 * again, reaping them (this process should be a subreaper, so grandchildren
 * come back as children as their parents die), until no child is left or
 * timeout_ms passed. When the process `watch` is reaped on the way, its wait
 * status goes to *watch_status and *watch_reaped is set. Returns 0 once no
 * child is left, -ETIMEDOUT otherwise. */
int supervise_kill_tree(pid_t pgid, const char *cg, int timeout_ms, pid_t watch, int *watch_status,
                        int *watch_reaped);

/* A trial's private view of the file system: what it must not read (the
 * worker's work dir with its identity, outbox and other trials' dirs; its
 * token file) is covered by an empty read-only mount in a mount namespace
 * of the trial's own, and what it needs under those (its own dir, the data
 * cache, the MPS pipes) is bound back on top. Made in the trial's process
 * just before exec:
 *  - SUPERVISE_NS_USER: as the trial's own (unprivileged) user, a user
 *    namespace with a mount namespace (the trial's uid and gid map to
 *    themselves). The trial keeps no capability after exec, the mounts it
 *    inherits cannot be undone (the kernel locks them), and no process
 *    outside its user namespace (the worker, its supervisor, other trials)
 *    can be read through /proc (ptrace rules).
 *  - SUPERVISE_NS_MOUNT: a mount namespace made as root, before the trial
 *    drops to its --run-as user (where user namespaces are off).
 *  - SUPERVISE_NS_NONE: no private view (said loudly at the worker's start).
 */
enum { SUPERVISE_NS_NONE = 0, SUPERVISE_NS_MOUNT = 1, SUPERVISE_NS_USER = 2 };
#define SUPERVISE_MAX_VIEW 24

struct supervise_view {
  int ns; /* SUPERVISE_NS_* */
  /* Absolute paths. A dir is covered by an empty read-only tmpfs, a file by
   * an empty read-only file; one that does not exist (or is covered
   * already) is skipped. The first must be a directory. */
  const char *hide[SUPERVISE_MAX_VIEW];
  int nhide;
  /* Directories under hidden ones bound back in place (missing: skipped). */
  const char *show[SUPERVISE_MAX_VIEW];
  int nshow;
};

/* Makes the calling process's private view (v->ns not NONE), then returns
 * to the cwd it had (by path, so through the new mounts). 0, or a negative
 * errno with what failed in err. */
int supervise_private_view(const struct supervise_view *v, char *err, size_t len);

struct supervise_opts {
  pid_t parent;       /* the worker; 0 = do not watch for its death */
  const char *cgroup; /* the trial's cgroup to join and to kill; or NULL */
  const char *cpus;   /* CPU list to pin to; or NULL */
  long rlimit_as_mb;  /* 0 = none */
  int report_fd;      /* the trial's pid is written here ("%d\n"); -1 = none */
  /* --run-as: the trial drops to this user after joining its cgroup and
   * before exec (supplementary groups, gid, uid; then it is checked that
   * root cannot be regained). The supervisor itself keeps its user, so it can
   * still kill the tree. */
  int run_as;
  uid_t uid;
  gid_t gid;
  const gid_t *groups;
  int ngroups;
  /* The trial's view: SUPERVISE_NS_MOUNT is made before the drop to the
   * run-as user, SUPERVISE_NS_USER after it. */
  struct supervise_view view;
  /* Test builds only (testhook.h, TESTHOOK_SUPERVISE_REPORT): a file whose
   * word (hold, garbage, die) bends the report; NULL = none. */
  const char *test_report;
};

/* Becomes the supervisor of argv[0..] (execvp'ed in a forked child in its own
 * process group) and returns the trial's wait status once it and every
 * descendant are gone. When the parent dies, the tree is killed and the
 * returned status is that of the trial (killed). A negative errno when the
 * trial could not even be forked. */
int supervise_run(const struct supervise_opts *o, char **argv);

/* Exits the way a wait status says: exit(code), or death by the same signal
 * (without a core dump). Never returns. */
void supervise_exit(int status) __attribute__((noreturn));

#endif
