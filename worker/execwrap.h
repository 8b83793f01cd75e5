/* `ctune-supervise ...` (and the same as `ctune-worker --exec-trial ...`):
 * the supervisor of every trial (see supervise.h). The worker runs the small
 * ctune-supervise found beside its own executable (it links libc alone, so
 * it starts in about a millisecond; ctune-worker links libcurl and its
 * dozens of libraries), and itself with --exec-trial only where that file
 * is missing. It runs in the freshly spawned child (its own session), forks
 * the trial into a process group of its own, which pins itself to the
 * trial's CPU ids, joins its cgroup and applies the memory limit, then execs.
 * Limits are in place before the trial's first instruction: no window where
 * it runs unpinned, unlike setting them on a pid after spawn. The supervisor
 * stays: it kills the whole process tree when the trial ends or the worker
 * dies, and exits with the trial's status. */
#ifndef CTUNE_WORKER_EXECWRAP_H
#define CTUNE_WORKER_EXECWRAP_H

#define EXECWRAP_FLAG "--exec-trial"
/* Exit status when the trial could not be started (like a shell's 127). */
#define EXECWRAP_EXIT_EXEC 127

#define EXECWRAP_PROGRAM "ctune-supervise"

/* The options start at argv[first] (1 for ctune-supervise, 2 after
 * EXECWRAP_FLAG). Usage:
 *   ctune-supervise [--cpus LIST] [--rlimit-as-mb N]
 *                [--cgroup DIR] [--parent PID] [--report-fd FD]
 *                [--uid U --gid G --groups G1,G2|-] -- PROGRAM ARGS...
 * --parent: the worker's pid; the trial's whole tree is killed when the
 * worker dies. --report-fd: the trial's pid (= its process group) is
 * written there as "%d\n" once it exists. --uid/--gid/--groups: the trial
 * runs as that user (ctune-worker --run-as), never as root. In test builds
 * --test-report FILE bends the report as FILE says (supervise_opts). Returns
 * only on failure, with the exit status to use; otherwise exits as the
 * trial did. */
int execwrap_main(int argc, char **argv, int first);

#endif
