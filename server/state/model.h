/* model: the daemon's in-memory model (experiments, trials, workers) and the
 * one lock that guards it. SQLite is the truth; this is its fast index, built
 * at start by state_load and kept in step by ops queued to the commit thread.
 * Types only: the functions that change the model are in state.h. */
#ifndef CTUNE_MODEL_H
#define CTUNE_MODEL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "best.h"
#include "commit.h"
#include "metrics.h"
#include "spec.h"
#include "scheduler.h"
#include "searcher.h"
#include "store.h"

struct events;
struct srv_gang; /* gang.h */

enum trial_status { TS_PENDING = 0, TS_RUNNING, TS_PAUSED, TS_TERMINATED, TS_ERROR, TS_COUNT };
/* ES_PAUSED: a user's pause; no trial starts, running ones pause at their
 * next result; resume makes it RUNNING again. */
enum exp_status { ES_RUNNING = 0, ES_TERMINATED, ES_CANCELLED, ES_PAUSED, ES_COUNT };

extern const char *const trial_status_names[TS_COUNT];
extern const char *const exp_status_names[ES_COUNT];

struct series {
  double *v;
  uint32_t n, cap;
};

#define EXP_MAX_KEYS 32

struct srv_trial {
  int64_t id, experiment_id, idx;
  char *name;
  char *config; /* JSON text */
  enum trial_status status;
  int stopped_early;
  int bracket;
  char *error;
  /* Decisions (decide.c): the last decision's sentence (NULL: none), and what
   * is due when the current lease ends: SCHED_PAUSE (then PAUSED) or
   * SCHED_EXPLOIT (then PENDING from the donor's checkpoint) or SCHED_STOP (a
   * pause-pending trial a later decision ended); 0: nothing. Written with the
   * trial row in the decision's transaction and cleared in the write that
   * carries it out (trials.lease_end_action, migration 009), so a restart in
   * between keeps it. */
  char *reason;
  int lease_end_action;
  /* PBT (decide.c, docs/scheduling.md#pbt): an exploit decided while the
   * donor's checkpoint of the result it was ranked at (donor's rank_iter)
   * was not stored yet waits for it: exploit_donor (0: none) and
   * exploit_iter, persisted inside lease_end_action ("exploit:D:I"). The
   * trial's lease ends into PAUSED while it waits. exploit_old_config: its
   * config before the exploit, in memory, for a skipped exploit. rank_iter:
   * the iteration of the last result PBT ranked (from the record's "iter"),
   * rank_top: it was in the top quantile there (the record's "ckpt"); its
   * first upload that covers that result is kept as its snapshot
   * (pbt_checkpoints, migration 012: has_snap, snap_iter), the checkpoint
   * the trials that clone it get. */
  int64_t exploit_donor;
  double exploit_iter;
  char *exploit_old_config;
  double rank_iter;
  int rank_top;
  int has_snap;
  int64_t snap_iter;
  int has_exit_code, exit_code;
  int num_failures, attempt;
  int64_t worker_id;
  double created_at, started_at, ended_at;
  int64_t updated_seq;
  int64_t searcher_seq; /* updated_seq when the searcher last observed it */
  /* Every acknowledged result's time value and decision ('c'/'s'), in order
   * (every generation's): the trial's history. */
  double *ts;
  char *decisions;
  int64_t *seqs; /* each result's seq: its row in SQLite */
  size_t nres, capres;
  /* PBT: exploits applied so far, and the index in ts of the first result of
   * the current generation. Only results from gen_start on are the
   * idempotency index: a trial sent back to an older donor checkpoint reports
   * time values again, and those are new results. */
  int64_t generation;
  size_t gen_start;
  /* The experiment's metric per result that had it (NaN for null): best. */
  double *values;
  size_t nvals, capvals;
  /* Every other numeric key too, by the experiment's key index, so best by
   * any metric is answered from memory (compact: doubles only). */
  struct series *series;
  int nseries;
  char *last_result; /* JSON text of the last result, NULL before any */
  double last_t;
  double max_t_seen; /* largest time value of this generation: larger ones are never repeats */
  int has_last_value;
  double last_value;
  int has_checkpoint;
  int64_t checkpoint_iteration;
  /* Resumed from PAUSED (a promotion) and not leased since: a spot worker
   * leaves it to a free non-spot one (state_preempt_defer). In memory. */
  int promoted;
  /* The time_total_s at a checkpoint copied from a PBT donor (the trial's own
   * results do not know it); has_ck_time_total 0 once the trial uploads a
   * checkpoint of its own (then its results are looked up). Persisted with
   * the row (migration 009), as is lease_end_action. */
  int has_ck_time_total;
  double ck_time_total_s;
  /* The largest iteration a stored result names (its training_iteration,
   * else its time value): no checkpoint may claim to be past it. */
  double max_iter_seen;
  /* The fence (docs/protocol.md#leases-and-fencing). The last lease is
   * (lease_worker_id, attempt); it is kept after the trial leaves RUNNING so
   * that the lease that ended the trial itself (lease_final: its complete,
   * fail or a stop decision) may still send its final uploads, and so that a
   * stale attempt is told apart. In memory only: after a restart an ended
   * trial takes no final uploads. lease_ended_ms (monotonic) is when that
   * lease ended the trial (it left RUNNING): the final uploads are taken only
   * for STATE_FINAL_WINDOW_MS after it, so a worker's secret that leaks later
   * cannot rewrite an ended trial's checkpoint or logs. */
  int64_t lease_worker_id;
  int lease_final;
  uint64_t lease_ended_ms;
  uint64_t lease_deadline_ms; /* monotonic; 0: not set yet (after a load) */
  uint64_t unlisted_since_ms; /* first heartbeat of its worker that left it out */
  uint64_t listed_gen;        /* the heartbeat that last listed it */
  /* Failures told apart (quarantine.c, docs/scheduling.md#failures-told-apart):
   * the attribution of its last failed attempt (enum attribution; persisted,
   * migration 016), and in memory the worker and signature hash of that
   * failure, whether it was retried elsewhere once already (then the worker
   * that failed it is avoided until avoid_until_ms), and its result count
   * when the current lease began (a result before the failure). */
  int attribution;
  int64_t fail_worker_id;
  uint32_t fail_sig;
  int retried_elsewhere;
  uint64_t avoid_until_ms;
  size_t lease_nres;
  int stuck_noted; /* the attempt whose "undelivered" event is stored (0: none) */
  /* Its experiment was deleted; the struct stays as a tombstone in s->trials
   * (ids are indexes), server_trial hides it. */
  int deleted;
  /* ARCHITECTURE.md#bounded-memory (migration 011). created_seq: the change
   * counter when it was made (its results' seqs are larger; 0: unknown).
   * first_seq / last_seq: its results' seq range (0: none yet). compact: it
   * has ended and its history (ts, decisions, seqs, values, series,
   * last_result) was freed: nres, last_t, max_t_seen, max_iter_seen,
   * has_last_value / last_value and scores (the metric under every scope,
   * best.h) stand for it, and SQLite has the rest. */
  int compact;
  int64_t created_seq, first_seq, last_seq;
  double scores[BEST_SUM_N];
  /* Outcome constraints (docs/scheduling.md#outcome-constraints): the total
   * violation of the experiment's constraints at its last result
   * (constraint_of_result; 0: feasible, +inf: a constrained value missing);
   * meaningful once nres > 0. Kept by state_note_result; a compact trial's
   * is read back from its last result at load (state_violations_restore). */
  double violation;
  /* A gang trial's placement (gang.h; NULL for a trial of one process). */
  struct srv_gang *gang;
};

struct srv_experiment {
  int64_t id;
  char *name;
  char *config; /* the submitted config with the searcher options in force, JSON text */
  uint64_t seed;
  enum exp_status status;
  double created_at, ended_at;
  char *end_reason; /* why it ended early (fail_fast, a user's cancel); NULL otherwise */
  int64_t updated_seq;
  struct experiment_spec spec;
  struct sched *sched;
  /* The searcher (server/core/searcher.h): made on the first suggestion,
   * after a restart too, and fed every trial before each (state_suggest). */
  struct searcher *searcher;
  int64_t num_trials; /* the plan: grid product x num_samples */
  /* Its trials in creation order (trials[k]->idx == k); made on demand at
   * lease time, so ids need not be contiguous
   * (ARCHITECTURE.md#trials-made-on-demand). */
  struct srv_trial **trials;
  int64_t ntrials, captrials;
  int searcher_exhausted; /* the searcher has no more configs: the plan is ntrials */
  /* time_budget_s's clock. run_time_s counts only while a server runs
   * (persisted with the row); run_clock_ms: when it was last advanced
   * (monotonic, 0 = not yet in this process); budget_spent: no trial is
   * created or leased, running ones are stopped at their next result. */
  double run_time_s;
  uint64_t run_clock_ms, run_saved_ms;
  int budget_spent;
  /* Preempted releases of its trials and the work they lost (each since the
   * checkpoint its trial resumes from: state_preempt.c), rebuilt at load
   * from the "preempted" trial_events. */
  int64_t preemptions;
  double lost_iterations, lost_seconds;
  int64_t counts[TS_COUNT];
  int64_t exploit_waits;    /* trials maybe waiting for a PBT donor's checkpoint (an upper bound) */
  int64_t pending_cursor;   /* no PENDING trial has a smaller idx */
  char *keys[EXP_MAX_KEYS]; /* result keys seen, in first-seen order */
  int nkeys;
  int keys_overflow; /* more keys than EXP_MAX_KEYS: best reads SQLite */
  /* Fair share: its weight in the lease share; <= 0 means the default 1. Read
   * only through state_experiment_priority (state_live.c). */
  double priority;
  /* Fair share (state_live.c): its place in s->live plus one; 0 while it is
   * not RUNNING. Kept by state_live_sync. */
  int64_t live_pos;
  /* What a user edits (migration 010): notes (never NULL after load or
   * create: "" default), tags as JSON array text ("[]"), and a deleted
   * experiment's tombstone mark (server_experiment hides it; its trials are
   * tombstones too; the struct stays because ids are indexes). */
  char *notes, *tags;
  int deleted;
  /* Startup could not use its rows
   * (ARCHITECTURE.md#startup-tolerates-rows-it-cannot-use): a tombstone
   * (deleted) whose URLs answer 409 unusable with this sentence; its rows
   * stay in SQLite untouched. NULL otherwise. */
  char *unusable;
  /* ARCHITECTURE.md#cold-experiments (state_cold.c): a finished experiment is
   * *cold* a while after its end: its trials leave memory (their s->trials
   * slots are NULL, e->trials is empty: ntrials 0) and what stays is this
   * summary, the counts, the scheduler and the row. Anything that needs its
   * trials warms it first (state_experiment_warm: reads them back). */
  int cold;
  int64_t cold_ntrials; /* its trials (e->ntrials when warm) */
  int has_cold_best;    /* best by its metric, scope last, its mode */
  int64_t cold_best_id;
  double cold_best_value;
  uint64_t read_ms; /* monotonic: its trials were last needed (cold 60 s later) */
  /* A gang experiment: when its trial first found no room (monotonic; 0:
   * not waiting), for the starvation rule (gang_holds_back). */
  uint64_t gang_waiting_ms;
};

/* Failed attempts a worker remembers (the rest of a longer streak is a count). */
#define QUARANTINE_RECENT 16

struct srv_worker {
  int64_t id;
  char *name;
  double cpu, gpu;
  int64_t memory_mb; /* 0: not declared, not accounted */
  double used_cpu, used_gpu;
  int64_t used_memory_mb;
  double registered_at;
  double last_heartbeat; /* wall clock, for display */
  uint64_t last_seen_ms; /* monotonic: "lost" (display) after a lease timeout */
  int lost;
  int64_t nrunning; /* RUNNING trials charged to it */
  int spot;         /* registered with "labels": {"spot": true} (in memory) */
  /* Leases of it that ended (state_release): a lease request held since
   * an earlier count asked with less free than the worker has now. */
  uint64_t releases;
  /* Its own credential, "<id>.<64 hex digits>" (256 bits from getrandom),
   * returned once by registration and persisted: Authorization: Bearer of
   * every later call of this worker (http.c). "" for a worker registered
   * before secrets existed: it cannot authenticate and registers again. */
  char secret[72];
  /* 1 pruned (lost past --worker-retention-s; listed again when it comes
   * back), 2 deregistered (a clean stop: unknown from then on). */
  int gone;
  /* Quarantine (quarantine.c): why it gets no lease ("": in service;
   * persisted, migration 016), its successes, and the failures of its
   * current streak (the last QUARANTINE_RECENT of them: bounded memory);
   * confirmed: that trial then ended well on another worker. */
  char quarantine[256];
  int64_t nok;
  int fail_streak, nrecent;
  struct worker_failure {
    int64_t trial_id;
    int counted, confirmed;
  } recent[QUARANTINE_RECENT];
};

struct server_options {
  const char *db_path;
  const char *bind;
  int port;
  int listen_fd; /* --listen-fd: an inherited listening socket (-1: none) */
  const char *token_file;
  double lease_timeout_s;
  double heartbeat_interval_s;
  const char *web_dir;
  const char *vendor_dir;
  int threads;
  int64_t max_checkpoint_bytes;
  int wal_frames;
  int sync_full;                    /* --durability full (1, default) | normal (0) */
  const char *tls_cert, *tls_key;   /* --tls-cert/--tls-key paths (both or neither) */
  char *tls_cert_pem, *tls_key_pem; /* their contents, read by main (tls.h) */
  int no_auth;                      /* --no-auth: an open server (loopback binds only) */
  const char *allowed_hosts[16];    /* --allowed-host NAME: more Host names served */
  int nallowed_hosts;
  double worker_retention_s; /* lost workers leave the list after it */
  /* --quarantine-after K: K failures in a row while other workers succeed
   * take a worker out of service (0: never; docs/server.md#quarantine). */
  int quarantine_after;
  /* --read-only: the database is read, never written (docs/server.md#read-only) */
  int read_only;
};

/* Ids (trials or experiments) due at a time, in the order queued (each push
 * adds the same delay, so the order is the due order): state_compact.c. */
struct due_queue {
  struct due {
    int64_t id;
    uint64_t due_ms;
  } * v;
  int64_t head, len, cap;
};

struct server {
  struct server_options opt;
  struct store *store;
  struct commit *commit;
  struct metrics metrics;
  struct events *events;           /* the change feed (events.h) */
  struct lease_waits *lease_waits; /* held lease requests (lease_wait.h) */
  char admin_token[256], worker_token[256];
  char viewer_token[256]; /* optional viewer= line: read-only ("" none) */
  int auth;
  struct auth_sessions *sessions; /* dashboard logins (auth.c) */
  char tokens_path[4096];         /* the default token file, when used */
  int port;                       /* the port listened on, once known */

  pthread_mutex_t lock;         /* guards everything below */
  struct srv_experiment **exps; /* index id-1 */
  int64_t nexps, capexps;
  struct srv_trial **trials; /* index id-1 */
  int64_t ntrials, captrials;
  struct srv_worker **workers; /* index id-1 */
  int64_t nworkers, capworkers;
  int64_t seq;             /* the global change counter */
  uint64_t hb_gen;         /* counts heartbeats (listed_gen marks) */
  uint64_t next_expiry_ms; /* the lease scan runs at most every 100 ms */
  uint64_t last_tick_ms;   /* the previous state_expire_leases (or state_load) */
  /* ARCHITECTURE.md#the-live-list: the RUNNING experiments, in no particular
   * order, so that a lease looks at live experiments only, not at every
   * experiment ever submitted; fair: the lease's scratch list. */
  struct srv_experiment **live;
  int64_t nlive, caplive;
  struct srv_experiment **fair;
  int64_t capfair;
  int64_t unusable_rows; /* rows the last load skipped (ctune_unusable_rows) */
  /* Bounded memory: trials that ended, in order, compacted once their end
   * is STATE_COMPACT_DELAY_MS old (state_compact_due), so the replies and
   * events of the end still see the whole trial. */
  struct due_queue cq;
  uint64_t compact_delay_ms; /* STATE_COMPACT_DELAY_MS (a test may shorten it) */
  uint64_t cold_delay_ms;    /* STATE_COLD_DELAY_MS (a test may shorten it) */
  int64_t ncompact;          /* compact trials now (ctune_trials_compact) */
  /* Experiments to make cold when due (ended, or warmed for a read), and the
   * trial structs a cold experiment let go, freed a while later (a request
   * may still hold a pointer it took before the lock was released). */
  struct due_queue coldq;
  struct grave {
    void *p;
    uint64_t due_ms;
  } * graves;
  int64_t graves_head, graves_len, graves_cap;
  int64_t ncold; /* cold experiments now (ctune_experiments_cold) */
};

/* Every handler takes the model's lock through these two. A change made
 * under one hold of the lock is one transaction: server_unlock is where the
 * ops queued during the hold are handed to the commit thread together (see
 * commit.h), so a reply can never acknowledge half of it. */
static inline void server_lock(struct server *s) { pthread_mutex_lock(&s->lock); }
static inline void server_unlock(struct server *s) {
  /* Closed before the lock is released, so groups reach the commit thread in
   * the order of the holds; the group's ticket lands in the current request's
   * hold record (http.c), which is what its reply waits for. */
  if (s->commit) commit_group_close(s->commit, s->seq);
  pthread_mutex_unlock(&s->lock);
}

static inline struct srv_trial *server_trial(struct server *s, int64_t id) {
  return id >= 1 && id <= s->ntrials && s->trials[id - 1] && !s->trials[id - 1]->deleted
             ? s->trials[id - 1]
             : NULL;
}
static inline struct srv_experiment *server_experiment(struct server *s, int64_t id) {
  return id >= 1 && id <= s->nexps && s->exps[id - 1] && !s->exps[id - 1]->deleted ? s->exps[id - 1]
                                                                                   : NULL;
}
static inline struct srv_worker *server_worker(struct server *s, int64_t id) {
  return id >= 1 && id <= s->nworkers ? s->workers[id - 1] : NULL;
}

/* Why experiment id was not loaded
 * (ARCHITECTURE.md#startup-tolerates-rows-it-cannot-use), or NULL when it
 * was (or does not exist). */
static inline const char *server_unusable(struct server *s, int64_t id) {
  return id >= 1 && id <= s->nexps && s->exps[id - 1] ? s->exps[id - 1]->unusable : NULL;
}

#endif
