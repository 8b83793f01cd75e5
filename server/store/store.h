/* store: every SQL statement of ctune-server. One writer connection (used only
 * by the commit thread) and one reader connection (shared under a mutex). */
#ifndef CTUNE_STORE_H
#define CTUNE_STORE_H

#include <stddef.h>
#include <stdint.h>

struct store;

/* Plain copies of rows; strings are owned by whoever filled the struct. */
struct store_experiment_row {
  int64_t id;
  const char *name;
  const char *status;
  const char *config;
  uint64_t seed;
  double created_at;
  int has_ended_at;
  double ended_at;
  int64_t updated_seq;
  const char *end_reason; /* NULL = SQL NULL (migration 005) */
  double run_time_s;      /* time_budget_s's clock (migration 007) */
  /* Migration 010: fair-share priority (> 0), notes, tags (JSON array text);
   * NULL notes/tags are stored as "" / "[]". */
  double priority;
  const char *notes, *tags;
};

struct store_trial_row {
  int64_t id, experiment_id, idx;
  const char *name;
  const char *status;
  int stopped_early;
  const char *config;
  int bracket;
  const char *error; /* NULL = SQL NULL */
  int has_exit_code;
  int exit_code;
  int num_failures, attempt;
  int64_t worker_id; /* 0 = none */
  double created_at;
  double started_at, ended_at; /* 0 = none */
  int64_t updated_seq;
  const char *reason; /* the last decision's sentence; NULL = none (007) */
  int64_t generation; /* PBT exploits applied so far (008) */
  /* 009: the decision due when the lease ends ("pause", "exploit", "stop";
   * NULL = none), and the time_total_s at a checkpoint copied from a PBT
   * donor (has_ck_time_total 0 = SQL NULL: the checkpoint is the trial's). */
  const char *lease_end_action;
  int has_ck_time_total;
  double ck_time_total_s;
  /* 011 (ARCHITECTURE.md#bounded-memory): res_known 0 = the rest unknown (an
   * older row); NaN in last_t / scores = SQL NULL. */
  int64_t created_seq;
  int res_known;
  int64_t nres, first_seq, last_seq;
  double last_t;
  double scores[6];        /* best.h BEST_SUM_*: last, avg, last5, last10, min, max */
  const char *attribution; /* 016: its last failure's ("config", ...); NULL = none */
};

/* One trial_events row (migration 007). */
struct store_event_row {
  int64_t seq, trial_id, experiment_id;
  double time;
  const char *kind, *reason;
  const char *data; /* JSON text or NULL */
};

struct store_result_row {
  int64_t seq, trial_id, experiment_id;
  int64_t gen; /* the trial's generation when it was reported (008) */
  double t;
  const char *decision;
  const char *data;
};

struct store_asha_row {
  int64_t experiment_id, trial_id;
  int bracket;
  double milestone;
  double value; /* NaN stored as NULL */
  int stopped_early;
  int64_t seq;
};

struct store_worker_row {
  int64_t id;
  const char *name;
  double cpu, gpu;
  int64_t memory_mb;
  double registered_at, last_heartbeat;
  char secret[72];      /* the worker's own credential ("" for rows from before 004) */
  char quarantine[256]; /* 016: why it gets no lease; "" = in service */
  int spot;             /* 017: registered with the spot label */
};

/* Opens (creating) the database in WAL mode and applies the migrations of
 * schema/ that user_version says are missing, each in its own transaction.
 * wal_frames: the WAL size (in pages) at which the writer checkpoints.
 * sync_full: durable commits: store_sync flushes the WAL to the disk, and
 * the commit thread calls it before any reply (an acknowledged write then
 * survives an OS crash or power cut); without it a commit reaches the OS
 * only (it survives a crash of the process, not of the machine).
 * On failure *err names the step. -EIO / -ENOMEM.
 *
 * Fault injection in test builds only (testhook.h): the site TESTHOOK_FAULT
 * ("busy=N,blob_limit=BYTES,kill_after_trial_end=1,delay_ms=MS,kill_before_exp_commit=1,
 * sync_fail_after_result=1,disk_full=1") makes the
 * next N transactions find the database busy, refuses values over BYTES the
 * way SQLite refuses values over its length limit, kill -9s the process
 * right after the first commit that ends a trial, and makes every
 * transaction wait MS first (so that requests line up in one batch), and
 * kill -9s the process just before the COMMIT of the first transaction
 * that writes or deletes an experiment row (a pause, an extend or a delete
 * cut by a crash must leave nothing of itself), and fails the flush
 * (store_sync) of the first transaction that stores a result and every
 * flush after it, each after 300 ms, and fails every COMMIT with SQLite's
 * "database or disk is full" (-ENOSPC). */
int store_open(const char *path, int wal_frames, int sync_full, struct store **out, char *err,
               size_t errlen);
/* The database at path, read only (ctune-server --read-only): opened with
 * SQLITE_OPEN_READONLY, so nothing (no migration, no checkpoint, no mode
 * change of the file) is ever written; safe beside a server that writes
 * it (a WAL reader). A schema other than this version's is refused, naming
 * both versions: an older one needs the migrations a writing server
 * applies. Every write through it fails. */
int store_open_read_only(const char *path, struct store **out, char *err, size_t errlen);
void store_close(struct store *st);

/* Writer side (commit thread only). Errors: -EBUSY (the database is locked
 * by another connection: try again), -EEXIST (constraint), -ENOSPC (the disk
 * is full), -EIO. */
int store_begin(struct store *st);
int store_commit(struct store *st);
int store_rollback(struct store *st);
/* One nameless savepoint level inside a transaction. */
int store_savepoint(struct store *st);
int store_rollback_to(struct store *st);
int store_release(struct store *st);
/* The global change counter: never lowered (meta table). */
int store_put_seq(struct store *st, int64_t seq);
/* fdatasync of the WAL: every commit before it is durable. 0 or -errno.
 * Callable from a thread of its own while the writer goes on. */
int store_sync(struct store *st);
/* Opened with sync_full. */
int store_sync_full(const struct store *st);
/* The writer's last error message. */
const char *store_errmsg(struct store *st);
int store_put_experiment(struct store *st, const struct store_experiment_row *r);
int store_put_trial(struct store *st, const struct store_trial_row *r);
int store_insert_result(struct store *st, const struct store_result_row *r);
int store_insert_asha(struct store *st, const struct store_asha_row *r);
int store_put_worker(struct store *st, const struct store_worker_row *r);
/* A decision's event, a scheduler's record, and exploit's copy of the donor's
 * checkpoint (nothing when the donor has none). */
int store_insert_event(struct store *st, const struct store_event_row *r);
int store_insert_sched_record(struct store *st, int64_t experiment_id, int64_t seq,
                              int64_t trial_id, const char *record);
int store_copy_checkpoint(struct store *st, int64_t from_trial, int64_t to_trial);
/* PBT (migration 012): keeps trial_id's stored checkpoint in
 * pbt_checkpoints (the one of the result it was ranked top at), and copies
 * that one to to_trial's checkpoint (an exploit). */
int store_snapshot_checkpoint(struct store *st, int64_t trial_id);
int store_copy_snapshot(struct store *st, int64_t from_trial, int64_t to_trial);
/* The loader's pass over pbt_checkpoints: fn(ctx, trial_id, iteration) for
 * each (0, or fn's error). */
int store_load_snapshots(struct store *st, int (*fn)(void *ctx, int64_t trial_id, int64_t it),
                         void *ctx);
int store_put_checkpoint(struct store *st, int64_t trial_id, int64_t iteration, uint32_t crc,
                         const void *data, size_t len);
/* The tail attempt's worker uploaded: replaces that attempt's output and
 * keeps the earlier attempts' (store_logs.h). */
int store_put_log(struct store *st, int64_t trial_id, int attempt, int64_t worker_id,
                  const char *log, size_t len);
/* The same for member rank of a gang trial (rank 0: store_put_log): each
 * member's output is a section of its own. */
int store_put_member_log(struct store *st, int64_t trial_id, int attempt, int64_t worker_id,
                         int rank, const char *log, size_t len);
/* Removes the experiment and everything of it (trials, results, records,
 * events, checkpoints, logs) inside the caller's transaction. */
int store_delete_experiment(struct store *st, int64_t experiment_id);

/* Copies committed WAL pages into the database without blocking the
 * writer (PASSIVE), on a connection of its own; called periodically from one
 * thread, off the commit path. *copied: 1 when the WAL moved since the last
 * call (writes are going on). */
int store_checkpoint(struct store *st, int *copied);

/* Reader side: the loader at start (callbacks return 0 or stop with an error). */
struct store_loader {
  void *ctx;
  int (*experiment)(void *ctx, const struct store_experiment_row *r);
  int (*trial)(void *ctx, const struct store_trial_row *r);
  /* every result in seq order (the in-memory indexes are rebuilt from it) */
  int (*result)(void *ctx, const struct store_result_row *r);
  int (*asha)(void *ctx, const struct store_asha_row *r);
  int (*worker)(void *ctx, const struct store_worker_row *r);
  int (*checkpoint)(void *ctx, int64_t trial_id, int64_t iteration);
  /* sched_records in seq order (may be NULL: skipped) */
  int (*sched_record)(void *ctx, int64_t experiment_id, int64_t seq, int64_t trial_id,
                      const char *record);
  /* When set (bounded memory), results are read per experiment instead:
   * results_since says from which seq (< 0: none of them are needed), and
   * results_done follows each experiment's results (*backfill set: some of
   * them are for summaries computed at this load); seq_seen gets the
   * largest result seq of all. */
  int64_t (*results_since)(void *ctx, int64_t experiment_id, int *backfill);
  int (*results_done)(void *ctx, int64_t experiment_id);
  void (*seq_seen)(void *ctx, int64_t seq);
  /* Before the trials: each experiment some trial of which is not ended
   * with a summary (it cannot start cold). May be NULL. */
  void (*not_cold)(void *ctx, int64_t experiment_id);
};
int store_load(struct store *st, const struct store_loader *l);
/* A meta value (0 when none): 'max_experiment_id' / 'max_trial_id' are the
 * largest ids a delete removed (ids are never reused). */
int store_get_meta(struct store *st, const char *key, int64_t *value);
/* The saved change counter (0 when none). */
int store_get_seq(struct store *st, int64_t *seq);

/* Results of one experiment after seq `since` (limit <= 0: all). The
 * callback sees (seq, trial_id, data). */
typedef int (*store_result_fn)(void *ctx, int64_t seq, int64_t trial_id, const char *data);
/* An experiment's trial rows in idx order, each with its checkpoint's
 * iteration when it has one (a cold experiment warmed, state_cold.c). */
typedef int (*store_trial_fn)(void *ctx, const struct store_trial_row *r, int has_checkpoint,
                              int64_t checkpoint_iteration);
int store_experiment_trials(struct store *st, int64_t experiment_id, store_trial_fn fn, void *ctx);
/* The experiment of trial_id: -ENOENT when there is no such row. */
int store_trial_experiment(struct store *st, int64_t trial_id, int64_t *experiment_id);
/* One trial's results with seq in [first_seq, last_seq], in seq order,
 * skipping `offset`, at most `limit` (<= 0: all): an ended trial's page. */
int store_trial_results(struct store *st, int64_t experiment_id, int64_t trial_id,
                        int64_t first_seq, int64_t last_seq, int64_t offset, int64_t limit,
                        store_result_fn fn, void *ctx);
/* The stored decision ('c' / 's') of trial_id's result with time value t
 * in generation gen, in [first_seq, last_seq]; 0 when none. */
int store_trial_decision(struct store *st, int64_t experiment_id, int64_t trial_id,
                         int64_t first_seq, int64_t last_seq, int64_t gen, double t,
                         char *decision);
/* Every result of trial_id in [first_seq, last_seq] as loader rows. */
typedef int (*store_row_fn)(void *ctx, const struct store_result_row *r);
int store_trial_rows(struct store *st, int64_t experiment_id, int64_t trial_id, int64_t first_seq,
                     int64_t last_seq, store_row_fn fn, void *ctx);
/* Writer side, before the commit thread runs (startup): the summaries the
 * loader computed for older rows, n at a time in one transaction. */
int store_put_trial_summaries(struct store *st, const struct store_trial_row *rows, size_t n);

/* Results by seq (their rowid), in the order given: a trial's results. */
int store_results_by_seq(struct store *st, const int64_t *seqs, size_t n, store_result_fn fn,
                         void *ctx);
int store_experiment_results(struct store *st, int64_t experiment_id, int64_t since, int64_t limit,
                             store_result_fn fn, void *ctx);
/* Values of `metric` for every result of the experiment, ordered by trial then
 * seq; non-numbers and missing keys arrive as has=0. */
typedef int (*store_metric_fn)(void *ctx, int64_t trial_id, int has, double v);
int store_experiment_metric(struct store *st, int64_t experiment_id, const char *metric,
                            store_metric_fn fn, void *ctx);
/* Checkpoint: -ENOENT when none. *data is malloc'd, the caller frees it. */
int store_get_checkpoint(struct store *st, int64_t trial_id, int64_t *iteration, uint32_t *crc,
                         void **data, size_t *len);
/* A trial's events in seq order (trial_events). */
typedef int (*store_event_fn)(void *ctx, const struct store_event_row *r);
int store_trial_events(struct store *st, int64_t trial_id, store_event_fn fn, void *ctx);
/* Every trial event of this kind, in order (a scan: startup only). */
int store_events_of_kind(struct store *st, const char *kind, store_event_fn fn, void *ctx);
/* Log tails of every attempt, each after a line naming it when there is
 * more than one (store_logs_render): -ENOENT when none. *log is malloc'd
 * (NUL-terminated). */
int store_get_log(struct store *st, int64_t trial_id, char **log, size_t *len);

#endif
