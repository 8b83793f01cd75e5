/* One leased trial on this worker: its directory, process, output files and
 * tails, and the results it prints. The protocol around it is worker.c's. */
#ifndef CTUNE_WORKER_TRIAL_H
#define CTUNE_WORKER_TRIAL_H

#include <stdint.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "alloc.h"
#include "linebuf.h"
#include "proc.h"
#include "result.h"
#include "tail.h"
#include "workdir.h"

#define TRIAL_LOG_TAIL (256 * 1024) /* what PUT /logs carries at most */
#define TRIAL_ERR_TAIL (16 * 1024)
#define TRIAL_FAIL_LINES 20 /* stderr lines a `fail` carries */

/* The life cycle of a trial on this worker. worker.c moves a trial between
 * these states in one transition function (worker_trial_event); nothing else
 * assigns t->state.
 *
 *   FETCHING --spawn--> SPAWNING --spawned--> RUNNING <--pause/resume--> PAUSED
 *      |                   | stop                | stop             stop |
 *      | stop / cannot     '-------------------> STOPPING <---------------'
 *      | start                                   | exit (also from SPAWNING,
 *      |                                         v       RUNNING, PAUSED)
 *      |                                       EXITED  (end message queued;
 *      |                                         |      handles closing)
 *      |                                         | closed
 *      '-------------------------------------> FLUSHING (last checkpoint and
 *                                                |       log uploads)
 *                                                | uploads over
 *                                                v
 *                                             DONE (unlinked and freed) */
enum trial_state {
  TRIAL_FETCHING = 0, /* leased; its checkpoint is downloading */
  TRIAL_SPAWNING,     /* its supervisor runs; the trial's pid is not reported yet */
  TRIAL_RUNNING,
  TRIAL_PAUSED,   /* SIGSTOPped: its results cannot be queued */
  TRIAL_STOPPING, /* SIGTERM sent (SIGKILL after the grace) */
  TRIAL_EXITED,   /* process gone, its handles closing */
  TRIAL_FLUSHING, /* last checkpoint and log uploads */
  TRIAL_DONE,
};

/* Why a trial was stopped: what its end message is. */
enum trial_stop {
  TRIAL_STOP_NONE = 0,
  TRIAL_STOP_DECISION, /* the scheduler answered "stop": report complete */
  TRIAL_STOP_SERVER,   /* heartbeat said stop (cancelled / leased elsewhere): nothing */
  TRIAL_STOP_DRAIN,    /* the worker is shutting down: release */
  TRIAL_STOP_FENCE,    /* no heartbeat for lease_timeout_s: release */
  TRIAL_STOP_OUTBOX,   /* its results could not be queued for too long: fail */
  TRIAL_STOP_METRIC,   /* its first result lacks the experiment's metric: fail */
  TRIAL_STOP_PREEMPT,  /* a preemption notice: release with reason preempted */
};

struct trial;

struct trial_events {
  /* Its supervisor reported the trial's pid (err 0) or failed to (proc.h:
   * its end follows, as a failed start). */
  void (*on_spawned)(void *arg, struct trial *t, int err);
  /* flat is the caller's to keep or delete. */
  void (*on_result)(void *arg, struct trial *t, cJSON *flat, double tv);
  void (*on_exit)(void *arg, struct trial *t, int exit_code, int term_signal);
  void (*on_closed)(void *arg, struct trial *t);
  /* checkpoint.bin in the trial dir was replaced (debounced), or a line
   * named the checkpoint file saved at it (now t->ckpt_held_fd). */
  void (*on_checkpoint)(void *arg, struct trial *t);
};

struct trial {
  int id;
  long attempt; /* from the lease: the fence is (worker id, attempt) */
  /* A gang trial's member (docs/worker.md#gang-members): its rank of world;
   * world 1: a trial of one process. rdzv_port: the rendezvous port rank 0
   * took here (0: none). */
  int rank, world, rdzv_port;
  int lease_worker; /* worker id the lease was granted to */
  uint64_t key;     /* unique per trial object: replies find it by this */
  enum trial_state state;
  enum trial_stop stop_why;
  int preempt_asked; /* sent SIGUSR1 at a preemption notice: stopped once it checkpoints */
  char *time_attr;
  char *dir;    /* <work dir>/trials/<id> */
  char *cgroup; /* its cgroup v2 dir, removed when it ends; or NULL */
  cJSON *lease; /* the lease's trial object, owned */
  struct alloc_grant grant;
  int has_grant;
  struct proc proc;
  uv_fs_event_t watch; /* the trial dir: new checkpoint.bin */
  uv_timer_t ckpt_timer;
  int handles; /* proc (as one) + watch + ckpt_timer while open */
  struct linebuf out_lb;
  struct tail log;    /* stdout+stderr in arrival order */
  struct tail err;    /* stderr only */
  int out_fd, err_fd; /* stdout.log and stderr.log in dir */
  double last_iter;   /* iteration of the last result (checkpoint header) */
  long nresults;
  /* Ray's habits (docs/protocol.md#results-the-worker-fills-in). */
  struct result_clock clock;
  int auto_iter;  /* time attribute is training_iteration: number results */
  int from_spare; /* its dir is a spare: 0700, the two empty 0600 logs, nothing else */
  char *metric;   /* the experiment's metric, or NULL */
  char *fail_msg; /* its first result lacks the metric: the fail message */
  /* Checkpoint uploads: one PUT in flight, wanted again when the file changed
   * or the server wants its results first (checkpoint_ahead). A failed try
   * waits outbox_backoff_ms(ckpt_tries) (until ckpt_next_ms) before the
   * next; ckpt_ahead counts checkpoint_ahead answers with none of its
   * results left to send. */
  int ckpt_inflight, ckpt_wanted, ckpt_tries, ckpt_ahead;
  uint64_t ckpt_next_ms;       /* monotonic ms; 0: at once */
  uint64_t ckpt_failing_since; /* first failed try of this run of failures (0: none) */
  long ckpt_last_status;       /* the last failure's HTTP status (0: no answer) */
  char ckpt_last_code[48];
  int ckpt_stuck; /* failing so long that it was said (once) */
  long long ckpt_mtime_ns, ckpt_size;
  /* In-band checkpoints (docs/worker.md#checkpoints): once a line names
   * its checkpoint file (RESULT_CKPT_KEY), the trial is keyed: the dir
   * watch is ignored and only a file a line named is uploaded, labelled
   * with that line's iteration. ckpt_held_fd: one such file, opened when it
   * was taken, so the trial's next rename cannot change what it holds; it
   * is kept until its upload is settled (-1: none). ckpt_named: the newest
   * line's file, not held; taken (if it is still the one in place) when
   * the slot is free. Each hold takes a new ckpt_held_seq, so an upload's
   * answer releases only its own. */
  int ckpt_keyed;
  int ckpt_held_fd;
  double ckpt_held_iter;
  uint64_t ckpt_held_seq;
  /* worker.c's: the held file goes once the outbox holds no result of this
   * lease queued before this sequence number (the results up to its line);
   * UINT64_MAX: once none at all is queued. */
  uint64_t ckpt_held_upto;
  struct {
    int valid;
    unsigned long long ino;
    long long size;
    double iter;
    uint64_t upto; /* worker.c's, as ckpt_held_upto */
  } ckpt_named;
  long dropped; /* results of this attempt that will never be stored */
  unsigned long long log_sent_total;
  int log_inflight;
  int log_dirty;     /* output arrived while a log upload was in flight */
  int log_in_end;    /* its complete/fail carries the final log tail (worker_end_queued) */
  int end_asks;      /* its complete asks for the next lease (worker_complete_will_ask) */
  double exited_at;  /* monotonic seconds when its exit was seen */
  cJSON *held;       /* result bodies waiting for outbox room (trial paused) */
  int held_err;      /* why: -ENOSPC from the bound, or the write's error */
  double held_since; /* monotonic seconds */
  double leased_at;  /* monotonic seconds when the lease arrived */
  int exit_code, term_signal;
  struct trial *next;
  const struct trial_events *ev;
  void *arg;
};

/* Takes ownership of lease on success. Creates the trial directory, by
 * renaming a spare of spares into place when there is one (NULL: none). */
int trial_new(cJSON *lease, const char *work_dir, struct workdir_spares *spares,
              struct trial **out);
/* Returns 0 with its supervisor running (the trial's pid follows:
 * ev->on_spawned), or a negative errno; then t->handles
 * says how many close callbacks are still to come (ev->on_closed after the
 * last; none when 0). */
int trial_start(struct trial *t, uv_loop_t *loop, const struct proc_supervisor *sup,
                char *const *argv, char *const *env, const char *cwd, const struct proc_limits *lim,
                const struct trial_events *ev, void *arg);
/* Where this attempt's numbering and clock start: the lease's
 * checkpoint_iteration and start_time_total_s when it resumes from the
 * checkpoint, else 0 (CTUNE_START_ITERATION, CTUNE_START_TIME_TOTAL_S). */
double trial_start_iteration(const cJSON *lease, int resume);
double trial_start_time_total(const cJSON *lease, int resume);
/* Closes the process handles (abandoning a live process with SIGKILL);
 * ev->on_closed follows, after which trial_free is allowed. Call once. */
void trial_close(struct trial *t);
void trial_free(struct trial *t);
/* Closes the held in-band checkpoint, if any. */
void trial_drop_held_checkpoint(struct trial *t);
/* When no checkpoint is held, takes the newest named one: opens
 * checkpoint.bin and keeps it if it is still that file (same inode and
 * size). 1 when one is held now (taken or already), else 0. */
int trial_hold_named_checkpoint(struct trial *t);
/* Path of a file in the trial dir, malloc'ed. */
char *trial_path(const struct trial *t, const char *name);
/* Opens <dir>/checkpoint.bin to read it: never through a symlink, only a
 * regular file (else logged and refused: -ELOOP / -EINVAL); st gets its
 * fstat. The fd, or -ENOENT when there is none, or another -errno. */
int trial_open_checkpoint(const struct trial *t, struct stat *st);
/* Writes <dir>/<name> atomically (temporary file and rename), 0600 and
 * owned by the --run-as user, following no symlink the trial may have left
 * there. 0 or -errno. */
int trial_write_file(const struct trial *t, const char *name, const void *data, size_t len);

#endif
