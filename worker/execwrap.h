/* `ctune-worker --exec-trial ...`: the tiny first stage of every trial. It
 * runs in the freshly spawned child (already its own session and process
 * group), pins itself to the trial's CPU ids, applies the memory limit, then
 * execs the trial. Limits are in place before the trial's first instruction:
 * no window where it runs unpinned, unlike setting them on a pid after spawn. */
#ifndef CTUNE_WORKER_EXECWRAP_H
#define CTUNE_WORKER_EXECWRAP_H

#define EXECWRAP_FLAG "--exec-trial"
/* Exit status when the trial could not be started (like a shell's 127). */
#define EXECWRAP_EXIT_EXEC 127

/* argv[1] is EXECWRAP_FLAG. Usage:
 *   ctune-worker --exec-trial [--cpus LIST] [--rlimit-as-mb N]
 *                [--cgroup DIR] [--parent PID] -- PROGRAM ARGS...
 * --parent: the worker's pid; the trial gets SIGKILL when the worker dies.
 * Returns only on failure, with the exit status to use. */
int execwrap_main(int argc, char **argv);

#endif
