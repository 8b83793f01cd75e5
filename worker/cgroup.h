/* Fractional CPU (cpu.max) and memory (memory.max) limits through a
 * delegated cgroup v2 subtree, when the worker may create one. */
#ifndef CTUNE_WORKER_CGROUP_H
#define CTUNE_WORKER_CGROUP_H

#include <stddef.h>

struct cgroup_ctx {
  int enabled;
  int real_fs;     /* base is on cgroup2 (not a test's plain directory) */
  char base[4096]; /* the worker's own cgroup dir; trials go under it */
  /* The caller's: a dir in the (locked) work dir where each trial group
   * created is recorded, so a restarted worker removes the ones its killed
   * predecessor left, and never another worker's. "" = no record. */
  char marks[4096];
};

/* root: the cgroup2 mount ("/sys/fs/cgroup"); self: this process's path in
 * it (the "0::" line of /proc/self/cgroup, NULL = read it). Moves the worker
 * into <base>/worker (no process may sit in a cgroup that delegates
 * controllers) and enables +cpu +memory for children. Returns 0 with
 * enabled set, or a negative errno with why[] saying what was missing; the
 * worker then falls back to RLIMIT_AS. */
int cgroup_setup(struct cgroup_ctx *c, const char *root, const char *self, char *why,
                 size_t whylen);
/* "quota period" for cpu.max: 0.5 CPU -> "50000 100000"; 0 -> "max 100000". */
int cgroup_cpu_max(double cpus, char *buf, size_t len);
/* Creates <base>/trial-<id> with cpu.max and memory.max (memory_mb 0 = max);
 * path receives the directory for the exec wrapper to join. */
int cgroup_trial_create(const struct cgroup_ctx *c, int trial_id, double cpus, long memory_mb,
                        char *path, size_t len);
/* How many times the kernel's OOM killer acted in the trial group (its
 * memory.events oom_kill), 0 when none or unreadable. */
int cgroup_trial_oom_kills(const char *path);
/* Removes it (and its record), killing any process still in it first. */
void cgroup_trial_remove(const char *path);
/* At start: kills the processes of every trial group recorded in c->marks
 * and removes the groups and their records. Returns how many groups were
 * removed, or a negative errno. */
int cgroup_sweep(struct cgroup_ctx *c);

#endif
