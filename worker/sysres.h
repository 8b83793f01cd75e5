/* What this worker may really use (docs/protocol.md#what-a-worker-advertises):
 * the cgroup CPU quota and memory limit along its own cgroup path (v1 and
 * v2, found through /proc/self/cgroup and /proc/self/mountinfo), MemTotal,
 * an inherited CUDA_VISIBLE_DEVICES, and CPU claims that keep two workers
 * on one machine off each other's cores (flock'd files in a run dir). */
#ifndef CTUNE_WORKER_SYSRES_H
#define CTUNE_WORKER_SYSRES_H

#include <stddef.h>

/* Where the readers look; NULL members mean the real files. Tests point
 * them at a fake tree: prefix is put before every mount point. */
struct sysres_fs {
  const char *proc_cgroup; /* /proc/self/cgroup */
  const char *mountinfo;   /* /proc/self/mountinfo */
  const char *meminfo;     /* /proc/meminfo */
  const char *prefix;      /* "" */
};

/* The smallest CPU quota along the process's cgroup path and its parents,
 * v1 cpu.cfs_quota_us / cpu.cfs_period_us and v2 cpu.max. Returns 1 with
 * *cpus = quota / period and where[] naming the file, 0 when no quota is
 * set anywhere (or no cgroup is mounted), or a negative errno. */
int sysres_cpu_quota(const struct sysres_fs *fs, double *cpus, char *where, size_t len);
/* The smallest memory limit along the path, v1 memory.limit_in_bytes and
 * v2 memory.max; same returns (v1's "unlimited" page-rounded LONG_MAX counts
 * as none). */
int sysres_memory_limit(const struct sysres_fs *fs, unsigned long long *bytes, char *where,
                        size_t len);
/* MemTotal of /proc/meminfo in bytes: 0, or a negative errno. */
int sysres_mem_total(const struct sysres_fs *fs, unsigned long long *bytes);
/* CPUs a quota allows as a whole count: rounded down, at least 1. */
int sysres_quota_cpus(double cpus);

/* An inherited CUDA_VISIBLE_DEVICES ("0,2"): the device indices, in its
 * order, up to cap. CUDA stops at the first entry that is not a device, so
 * does this; an entry that is a UUID (GPU-..., MIG-...) also stops it and
 * is copied into bad[] for the caller's message. "" or "-1" mean none.
 * Returns the count. */
int sysres_cuda_visible(const char *value, int *ids, int cap, char *bad, size_t badlen);

/* The run dir shared by the workers of one user on one machine:
 * $CTUNE_RUN_DIR, else systemd's $RUNTIME_DIRECTORY, else /run/ctune as
 * root, else $XDG_RUNTIME_DIR/ctune, else /tmp/ctune-<uid>. Created (0755
 * for root, else 0700) and must be the worker's own. */
int sysres_run_dir(char *buf, size_t len);

#define SYSRES_MAX_CLAIM 1024

/* The CPUs a worker claimed: a file <run dir>/cpu/<id>.<pid>-<n> per CPU it
 * uses, flock'd for the worker's life (O_CLOEXEC: trials do not inherit
 * them; the kernel drops the locks when the worker dies, kill -9 included,
 * and the next claimant removes the files). A CPU is in use while any of
 * its files is locked, so sharers count too. */
struct sysres_claim {
  int n; /* CPUs chosen */
  int ids[SYSRES_MAX_CLAIM];
  int nshared; /* of them, already claimed by another worker */
  int shared[SYSRES_MAX_CLAIM];
  char holders[512]; /* "worker w1, pid 123; ..." of the shared ones */
  int nfds;
  int fds[SYSRES_MAX_CLAIM];
};

/* exact: claim every id of cand (--cpu-list). Otherwise pick `want` ids of
 * cand, unclaimed ones first in cand's order, then the least shared ones.
 * name goes into the lock file beside the pid. Returns 0 (see nshared), or
 * a negative errno when the dir cannot be used (nothing is then claimed). */
int sysres_claim_cpus(const char *dir, const char *name, const int *cand, int ncand, int want,
                      int exact, struct sysres_claim *out);
void sysres_release(struct sysres_claim *c);

#endif
