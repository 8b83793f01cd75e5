/* failure: see failure.h. */
#include "failure.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "execwrap.h"
#include "exit_codes.h"

int failure_is_command(const cJSON *lease_trial) {
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(lease_trial, "trainable");
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(tr, "type");
  return cJSON_IsString(ty) && !strcmp(ty->valuestring, "command");
}

int failure_oom_kills(const char *ev) {
  for (const char *p = ev; p && *p;) {
    if (!strncmp(p, "oom_kill ", 9)) return atoi(p + 9);
    p = strchr(p, '\n');
    if (p) p++;
  }
  return 0;
}

/* What a process says when an allocation fails under RLIMIT_AS (Python,
 * C++, C's perror, PyTorch/NumPy). */
static int failure_says_memory(const char *lines) {
  static const char *const words[] = {"MemoryError",   "std::bad_alloc", "Cannot allocate memory",
                                      "out of memory", "Out of memory",  "OutOfMemoryError"};
  for (size_t i = 0; lines && i < sizeof words / sizeof words[0]; i++)
    if (strstr(lines, words[i])) return 1;
  return 0;
}

static int failure_out_of_memory(const struct failure_in *in) {
  if (in->memory_mb <= 0 || !in->memory_how) return 0;
  if (in->oom_kills > 0) return 1; /* the kernel's OOM killer in its cgroup */
  if (in->term_signal) return 0;
  if (!in->command && in->exit_code == TRAIN_EXIT_OOM) return 1;
  return in->exit_code != 0 && failure_says_memory(in->lines);
}

int failure_describe(const struct failure_in *in, const char **reason, char **msg) {
  char head[256] = "";
  int sig = in->term_signal, code = in->exit_code;
  *msg = NULL;
  if (failure_out_of_memory(in)) {
    /* server/core/attribution.c knows this head (resource): change both. */
    *reason = "out_of_memory";
    snprintf(head, sizeof head,
             "out of memory: the trial is limited to memory_mb %ld (%s); give it more "
             "(resources_per_trial.memory_mb) or use less",
             in->memory_mb, in->memory_how);
  } else if (sig) {
    *reason = "signal";
    snprintf(head, sizeof head, "killed by signal %d (%s)", sig, strsignal(sig));
  } else if (code == EXECWRAP_EXIT_EXEC) {
    *reason = "exec_failed";
  } else if (in->command) {
    /* The user's own exit codes mean what the user's program means. */
    *reason = "trial_exit";
    snprintf(head, sizeof head, "your program exited with status %d", code);
  } else {
    const char *n = train_exit_name(code);
    *reason = n ? n : "exit_code";
  }
  const char *lines = in->lines ? in->lines : "";
  int rc = asprintf(msg, "%s%s%s", head, head[0] && lines[0] ? "\n" : "", lines);
  if (rc < 0) {
    *msg = NULL;
    return -ENOMEM;
  }
  return 0;
}
