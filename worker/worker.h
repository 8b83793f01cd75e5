/* The worker's protocol with ctune-server (docs/protocol.md#worker-protocol-v2):
 * register, heartbeat (listing each lease with its attempt),
 * lease, start trials, forward results through the per-trial outbox lanes
 * with the lease's fence, act on decisions for the current attempt only,
 * upload checkpoints and logs, fence itself when heartbeats fail for
 * lease_timeout_s, drain on SIGTERM. */
#ifndef CTUNE_WORKER_WORKER_H
#define CTUNE_WORKER_WORKER_H

#include <uv.h>

#include "alloc.h"
#include "cgroup.h"
#include "proc.h"

struct worker_opts {
  const char *server; /* base URL */
  const char *token;  /* bearer token or NULL */
  const char *name;
  const char *work_dir;
  const char *train_bin;      /* ctune-train */
  struct proc_supervisor sup; /* every trial's supervisor (execwrap.h) */
  int cpu_ids[ALLOC_MAX_CPUS];
  int ncpus;
  int gpu_ids[ALLOC_MAX_GPUS];
  long gpu_mem_mb[ALLOC_MAX_GPUS];
  int ngpus;
  long memory_mb;
  unsigned poll_ms;         /* lease poll interval when the server has nothing */
  unsigned stop_grace_ms;   /* SIGTERM -> SIGKILL */
  size_t max_queued;        /* outbox bound (results) */
  int keep_trial_dirs;      /* ended trials whose dirs (logs) are kept */
  unsigned outbox_stall_ms; /* results unwritable (disk full) this long: fail the trial; 0 never */
  const struct cgroup_ctx *cgroup; /* enabled: cpu.max/memory.max per trial */
  unsigned preempt_grace_ms;       /* a preemption notice's deadline (worker_preempt) */
  int spot;                        /* registered with "labels": {"spot": true} */
  const char *advertise_addr;      /* gang trials' MASTER_ADDR; NULL: the server link's */
};

struct worker;

int worker_new(uv_loop_t *loop, const struct worker_opts *opts, struct worker **out);
/* Registers and starts leasing. */
int worker_start(struct worker *w);
/* SIGTERM/SIGINT: stop leasing, stop trials (they checkpoint), upload their
 * checkpoints and logs, deliver the outbox, then close everything so the
 * loop ends. A second call kills the trials at once. */
void worker_drain(struct worker *w);
/* A preemption notice (SIGTERM with --preemption-grace-s, or the
 * --preemption-notice watch): stop leasing, ask each running trial to
 * checkpoint (SIGUSR1 when it catches it, and <checkpoint dir>/CHECKPOINT_NOW),
 * stop it once its checkpoint came (or a third of the grace passed), deliver
 * within the grace, and release every lease with reason "preempted"
 * (docs/worker.md#preemption). what: the notice, for the log. A call while
 * preempting (or draining) is worker_drain()'s second call: kill now. */
void worker_preempt(struct worker *w, const char *what);
/* After the loop has ended. */
void worker_free(struct worker *w);

#endif
