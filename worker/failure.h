/* failure: what a trial process that ended badly is reported as
 * (docs/protocol.md#fail-reasons): the fail reason and the sentence before
 * its stderr lines. A user's program (a command trainable) is not given
 * ctune-train's exit-code names: its exit 1 is "your program exited with
 * status 1" (trial_exit), not `internal`; a trial that ran out of the
 * memory it was limited to names memory_mb and the limit. Pure. */
#ifndef CTUNE_WORKER_FAILURE_H
#define CTUNE_WORKER_FAILURE_H

#include <cjson/cJSON.h>

struct failure_in {
  int command;            /* a command trainable: the user's program */
  int exit_code;          /* when term_signal is 0 */
  int term_signal;        /* 0: it exited */
  const char *lines;      /* the last lines of its stderr (NULL: none) */
  long memory_mb;         /* its memory limit (0: none) */
  const char *memory_how; /* how it is enforced ("cgroup memory.max", "RLIMIT_AS"), or NULL */
  int oom_kills;          /* its cgroup's memory.events oom_kill count (0: none or unknown) */
};

/* Whether the lease's trial runs a command trainable (else ctune-train). */
int failure_is_command(const cJSON *lease_trial);
/* *reason: a static name; *msg: the fail message (malloc'd; the sentence,
 * a newline and the lines, or either alone). 0 or -ENOMEM. */
int failure_describe(const struct failure_in *in, const char **reason, char **msg);
/* The oom_kill count of a cgroup v2 group's memory.events text (0 when
 * absent or unreadable). */
int failure_oom_kills(const char *memory_events);

#endif
