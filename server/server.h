/* server: the daemon's in-memory model (experiments, trials, workers) and the
 * one lock that guards it. SQLite is the truth; this is its fast index, built
 * at start by state_load and kept in step by ops queued to the commit thread. */
#ifndef CTUNE_SERVER_H
#define CTUNE_SERVER_H

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

enum trial_status { TS_PENDING = 0, TS_RUNNING, TS_PAUSED, TS_TERMINATED, TS_ERROR, TS_COUNT };
/* ES_PAUSED (issue 14): a user's pause; no trial starts, running ones pause
 * at their next result; resume makes it RUNNING again. */
enum exp_status { ES_RUNNING = 0, ES_TERMINATED, ES_CANCELLED, ES_PAUSED, ES_COUNT };

extern const char *const trial_status_names[TS_COUNT];
extern const char *const exp_status_names[ES_COUNT];

struct series {
  double *v;
  uint32_t n, cap;
};

#define EXP_MAX_KEYS 32

struct trial {
  int64_t id, experiment_id, idx;
  char *name;
  char *config; /* JSON text */
  enum trial_status status;
  int stopped_early;
  int bracket;
  char *error;
  /* issue 13 (decide, state_decide.c): the last decision's sentence (NULL:
   * none), and what is due when the current lease ends: SCHED_PAUSE (then
   * PAUSED) or SCHED_EXPLOIT (then PENDING from the donor's checkpoint) or
   * SCHED_STOP (a pause-pending trial a later decision ended); 0: nothing.
   * Written with the trial row in the decision's transaction and cleared in
   * the write that carries it out (trials.lease_end_action, migration 009),
   * so a restart in between keeps it. */
  char *reason;
  int lease_end_action;
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
  /* PBT (issue 13): exploits applied so far, and the index in ts of the
   * first result of the current generation. Only results from gen_start on
   * are the idempotency index: a trial sent back to an older donor
   * checkpoint reports time values again, and those are new results. */
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
  /* issue 13: the time_total_s at a checkpoint copied from a PBT donor (the
   * trial's own results do not know it); has_ck_time_total 0 once the trial
   * uploads a checkpoint of its own (then its results are looked up).
   * Persisted with the row (migration 009), as is lease_end_action. */
  int has_ck_time_total;
  double ck_time_total_s;
  /* The largest iteration a stored result names (its training_iteration,
   * else its time value): no checkpoint may claim to be past it. */
  double max_iter_seen;
  /* The fence (HACKING.md "Worker protocol v2"). The last lease is
   * (lease_worker_id, attempt); it is kept after the trial leaves RUNNING so
   * that the lease that ended the trial itself (lease_final: its complete,
   * fail or a stop decision) may still send its final uploads, and so that a
   * stale attempt is told apart. In memory only: after a restart an ended
   * trial takes no final uploads. */
  int64_t lease_worker_id;
  int lease_final;
  uint64_t lease_deadline_ms;   /* monotonic; 0: not set yet (after a load) */
  uint64_t unlisted_since_ms;   /* first heartbeat of its worker that left it out */
  uint64_t listed_gen;          /* the heartbeat that last listed it */
  /* issue 14 (control): its experiment was deleted; the struct stays as a
   * tombstone in s->trials (ids are indexes), server_trial hides it. */
  int deleted;
  /* Bounded memory (HACKING.md, migration 011). created_seq: the change
   * counter when it was made (its results' seqs are larger; 0: unknown).
   * first_seq / last_seq: its results' seq range (0: none yet). compact:
   * it has ended and its history (ts, decisions, seqs, values, series,
   * last_result) was freed: nres, last_t, max_t_seen, max_iter_seen,
   * has_last_value / last_value and scores (the metric under every scope,
   * best.h) stand for it, and SQLite has the rest. */
  int compact;
  int64_t created_seq, first_seq, last_seq;
  double scores[BEST_SUM_N];
};

struct experiment {
  int64_t id;
  char *name;
  char *config; /* the submitted config, JSON text */
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
   * lease time, so ids need not be contiguous (HACKING.md). */
  struct trial **trials;
  int64_t ntrials, captrials;
  int searcher_exhausted; /* the searcher has no more configs: the plan is ntrials */
  /* issue 13 (decide): time_budget_s's clock. run_time_s counts only while
   * a server runs (persisted with the row); run_clock_ms: when it was last
   * advanced (monotonic, 0 = not yet in this process); budget_spent: no
   * trial is created or leased, running ones are stopped at their next
   * result. */
  double run_time_s;
  uint64_t run_clock_ms, run_saved_ms;
  int budget_spent;
  int64_t counts[TS_COUNT];
  int64_t pending_cursor; /* no PENDING trial has a smaller idx */
  char *keys[EXP_MAX_KEYS]; /* result keys seen, in first-seen order */
  int nkeys;
  int keys_overflow;        /* more keys than EXP_MAX_KEYS: best reads SQLite */
  /* issue 14 (fair share): its weight in the lease share; <= 0 means the
   * default 1. Read only through state_experiment_priority (state_live.c). */
  double priority;
  /* issue 14 (fair share, state_live.c): its place in s->live plus one; 0
   * while it is not RUNNING. Kept by state_live_sync. */
  int64_t live_pos;
  /* issue 14 (control, migration 010): notes (never NULL after load or
   * create: "" default), tags as JSON array text ("[]"), and a deleted
   * experiment's tombstone mark (server_experiment hides it; its trials are
   * tombstones too; the struct stays because ids are indexes). */
  char *notes, *tags;
  int deleted;
  /* Startup could not use its rows (HACKING.md "Startup tolerates rows it
   * cannot use"): a tombstone (deleted) whose URLs answer 409 unusable with
   * this sentence; its rows stay in SQLite untouched. NULL otherwise. */
  char *unusable;
  /* Bounded memory (HACKING.md, state_cold.c): a finished experiment is
   * *cold* a while after its end: its trials leave memory (their s->trials
   * slots are NULL, e->trials is empty: ntrials 0) and what stays is this
   * summary, the counts, the scheduler and the row. Anything that needs its
   * trials warms it first (state_experiment_warm: reads them back). */
  int cold;
  int64_t cold_ntrials;           /* its trials (e->ntrials when warm) */
  int has_cold_best;              /* best by its metric, scope last, its mode */
  int64_t cold_best_id;
  double cold_best_value;
  uint64_t read_ms; /* monotonic: its trials were last needed (cold 60 s later) */
};

struct worker {
  int64_t id;
  char *name;
  double cpu, gpu;
  int64_t memory_mb;  /* 0: not declared, not accounted */
  double used_cpu, used_gpu;
  int64_t used_memory_mb;
  double registered_at;
  double last_heartbeat;    /* wall clock, for display */
  uint64_t last_seen_ms;    /* monotonic: "lost" (display) after a lease timeout */
  int lost;
  int64_t nrunning;         /* RUNNING trials charged to it */
  /* Its own credential, "<id>.<64 hex digits>" (256 bits from getrandom),
   * returned once by registration and persisted: Authorization: Bearer of
   * every later call of this worker (http.c). "" for a worker registered
   * before secrets existed: it cannot authenticate and registers again. */
  char secret[72];
  /* issue 14: 1 pruned (lost past --worker-retention-s; listed again when it
   * comes back), 2 deregistered (a clean stop: unknown from then on). */
  int gone;
};

struct server_options {
  const char *db_path;
  const char *bind;
  int port;
  const char *token_file;
  double lease_timeout_s;
  double heartbeat_interval_s;
  const char *web_dir;
  const char *vendor_dir;
  int threads;
  int64_t max_checkpoint_bytes;
  int wal_frames;
  int sync_full; /* --durability full (1, default) | normal (0) */
  const char *tls_cert, *tls_key; /* --tls-cert/--tls-key paths (both or neither) */
  char *tls_cert_pem, *tls_key_pem; /* their contents, read by main (tls.h) */
  int no_auth;   /* --no-auth: an open server (loopback binds only) */
  const char *allowed_hosts[16]; /* --allowed-host NAME: more Host names served */
  int nallowed_hosts;
  double worker_retention_s; /* issue 14: lost workers leave the list after it */
};

/* Ids (trials or experiments) due at a time, in the order queued (each push
 * adds the same delay, so the order is the due order): state_compact.c. */
struct due_queue {
  struct due { int64_t id; uint64_t due_ms; } *v;
  int64_t head, len, cap;
};

struct server {
  struct server_options opt;
  struct store *store;
  struct commit *commit;
  struct metrics metrics;
  char admin_token[256], worker_token[256];
  char viewer_token[256];          /* optional viewer= line: read-only ("" none) */
  int auth;
  struct auth_sessions *sessions;  /* dashboard logins (auth.c) */
  char tokens_path[4096];          /* the default token file, when used */
  int port;                        /* the port listened on, once known */

  pthread_mutex_t lock; /* guards everything below */
  struct experiment **exps; /* index id-1 */
  int64_t nexps, capexps;
  struct trial **trials;    /* index id-1 */
  int64_t ntrials, captrials;
  struct worker **workers;  /* index id-1 */
  int64_t nworkers, capworkers;
  int64_t seq;              /* the global change counter */
  uint64_t hb_gen;          /* counts heartbeats (listed_gen marks) */
  uint64_t next_expiry_ms;  /* the lease scan runs at most every 100 ms */
  /* issue 14 (fair share, state_live.c): the RUNNING experiments, in no
   * particular order, so that a lease looks at live experiments only, not
   * at every experiment ever submitted; fair: the lease's scratch list. */
  struct experiment **live;
  int64_t nlive, caplive;
  struct experiment **fair;
  int64_t capfair;
  int64_t unusable_rows; /* rows the last load skipped (ctune_unusable_rows) */
  /* Bounded memory: trials that ended, in order, compacted once their end
   * is STATE_COMPACT_DELAY_MS old (state_compact_due), so the replies and
   * events of the end still see the whole trial. */
  struct due_queue cq;
  uint64_t compact_delay_ms; /* STATE_COMPACT_DELAY_MS (a test may shorten it) */
  int64_t ncompact;          /* compact trials now (ctune_trials_compact) */
  /* Experiments to make cold when due (ended, or warmed for a read), and the
   * trial structs a cold experiment let go, freed a while later (a request
   * may still hold a pointer it took before the lock was released). */
  struct due_queue coldq;
  struct grave { void *p; uint64_t due_ms; } *graves;
  int64_t graves_head, graves_len, graves_cap;
  int64_t ncold;             /* cold experiments now (ctune_experiments_cold) */
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

static inline struct trial *server_trial(struct server *s, int64_t id) {
  return id >= 1 && id <= s->ntrials && s->trials[id - 1] && !s->trials[id - 1]->deleted
             ? s->trials[id - 1] : NULL;
}
static inline struct experiment *server_experiment(struct server *s, int64_t id) {
  return id >= 1 && id <= s->nexps && s->exps[id - 1] && !s->exps[id - 1]->deleted
             ? s->exps[id - 1] : NULL;
}
static inline struct worker *server_worker(struct server *s, int64_t id) {
  return id >= 1 && id <= s->nworkers ? s->workers[id - 1] : NULL;
}

/* Why experiment id was not loaded (HACKING.md "Startup tolerates rows it
 * cannot use"), or NULL when it was (or does not exist). */
static inline const char *server_unusable(struct server *s, int64_t id) {
  return id >= 1 && id <= s->nexps && s->exps[id - 1] ? s->exps[id - 1]->unusable : NULL;
}

/* state.c — all callers hold s->lock unless the comment says otherwise. */
int state_init(struct server *s);
void state_free(struct server *s);
/* Rebuilds the model from the store (no lock needed: before serving). */
int state_load(struct server *s, char *err, size_t errlen);
/* Self-repair of what a crash between non-atomic writes (older versions)
 * could leave: an experiment RUNNING whose trials all ended is TERMINATED, a
 * CANCELLED one gets its unfinished trials ended. Queues the fixes (lock
 * held, commit thread running). */
int state_repair(struct server *s);
/* After a write the store refused: the model again from the store, then
 * state_repair (lock held). The change counter keeps its value. On failure
 * the old model stays. */
int state_reload(struct server *s, char *err, size_t errlen);
/* Frees the models state_reload replaced (at exit, after state_free). */
void state_reload_cleanup(void);

/* Stores a new experiment (no trials yet: they are made at lease time). */
int state_add_experiment(struct server *s, const char *config_json,
                         struct experiment_spec *spec, struct experiment **out,
                         uint64_t *ticket);
/* Whether every planned trial was created and has ended. */
int state_experiment_done(const struct experiment *e);
/* Ends a RUNNING experiment TERMINATED once state_experiment_done. */
int state_experiment_maybe_end(struct server *s, struct experiment *e, uint64_t *ticket);
/* Creates the experiment's next trial from its searcher (PENDING, counted,
 * joined to the scheduler; the caller queues its row, with the lease that
 * takes it). -ENOENT: the plan or the searcher is exhausted. */
int state_create_trial(struct server *s, struct experiment *e, struct trial **out);
/* Queues the trial's / experiment's / worker's current row for the store. */
int state_persist_trial(struct server *s, struct trial *t, uint64_t *ticket);
int state_persist_experiment(struct server *s, struct experiment *e, uint64_t *ticket);
int state_persist_worker(struct server *s, struct worker *w, uint64_t *ticket);

/* Status changes keep the experiment's counts and cursor right. */
void state_set_status(struct server *s, struct trial *t, enum trial_status st);
/* The trial left its worker: give the worker its resources back. */
void state_release(struct server *s, struct trial *t);
/* The trial ends (TERMINATED or ERROR): scheduler end, records, end of the
 * experiment when it was the last. Queues what changed. */
int state_end_trial(struct server *s, struct trial *t, enum trial_status st,
                    uint64_t *ticket);
/* Cancels a RUNNING experiment: status CANCELLED, end_reason `reason`,
 * every unfinished trial ended TERMINATED (workers learn it from their next
 * heartbeat or result). Queues what changed, in the caller's hold of the lock
 * (one transaction). Returns how many trials it stopped, or a negative error. */
int64_t state_cancel_experiment(struct server *s, struct experiment *e, const char *reason,
                                uint64_t *ticket);
/* issue 14 (control, state_control.c): pause/resume, PATCH, one trial's
 * stop, delete. Each queues its whole change into the caller's hold of the
 * lock (one transaction); -EINVAL / -EBUSY etc. after writing why into
 * err (field name in field). */
int control_pause(struct server *s, struct experiment *e, uint64_t *ticket);
int control_resume(struct server *s, struct experiment *e, uint64_t *ticket);
struct control_patch {
  int has_num_samples, has_max_concurrent, has_priority, has_notes, has_tags, has_max_t;
  int64_t num_samples, max_concurrent;
  double priority, max_t;
  const char *notes;
  const char *tags; /* JSON array text, already checked */
};
int control_patch(struct server *s, struct experiment *e, const struct control_patch *p,
                  char *field, size_t fieldlen, char *err, size_t errlen, uint64_t *ticket);
int control_stop_trial(struct server *s, struct trial *t, uint64_t *ticket);
/* -EBUSY: trials run and force is 0. */
int control_delete(struct server *s, struct experiment *e, int force, uint64_t *ticket);
/* A tombstone for a deleted id (the loader fills gaps with them). */
struct experiment *control_tombstone_experiment(int64_t id);
struct trial *control_tombstone_trial(int64_t id);

/* issue 14 (fair share, state_live.c). s->live holds exactly the RUNNING
 * experiments: every change of an experiment's status goes through
 * state_persist_experiment, which calls state_live_sync; a change made
 * without persisting the row must call state_live_sync itself. -ENOMEM when
 * the list cannot grow (state_live_reserve first makes that impossible). */
int state_live_sync(struct server *s, struct experiment *e);
int state_live_reserve(struct server *s, int64_t need);
/* The list from scratch (end of state_load): every RUNNING experiment. */
int state_live_rebuild(struct server *s);
void state_live_free(struct server *s);
/* The experiment's share weight: priority > 0, default 1. The one accessor. */
double state_experiment_priority(const struct experiment *e);
/* Whether a goes before b in the fair order: smaller running/priority, then
 * the older (smaller id). */
int state_fair_before(const struct experiment *a, const struct experiment *b);
/* Moves the fair order's k-th experiment of c[0..n) to c[k], given that
 * c[0..k) already hold the first k: cheap for the first few k (a scan each),
 * then the rest is sorted once. */
void state_fair_pick(struct experiment **c, int64_t n, int64_t k);
/* Leases a trial to w from the live experiment that is furthest below its
 * fair share (state_fair_before) among those with work to give and room
 * (max_concurrent_trials, resources that fit what w has free); an
 * experiment whose scheduler waits is passed over for the next. NULL when
 * none. */
struct trial *state_lease(struct server *s, struct worker *w, double cpu, double gpu,
                          int64_t memory_mb, int has_memory);
/* Why a PENDING trial is not running; writes "" when nothing blocks it. */
void state_pending_reason(struct server *s, const struct trial *t, char *buf, size_t n);
/* Why an experiment's next trial does not run (or is not made) now: the same
 * sentences; for a RUNNING experiment with work left. */
void state_experiment_pending_reason(struct server *s, const struct experiment *e, char *buf,
                                     size_t n);
/* A RUNNING trial goes back to PENDING without counting a failure (lease
 * expiry, release by its worker): resources freed, row queued. The next lease
 * resumes it from its checkpoint. */
int state_requeue(struct server *s, struct trial *t, uint64_t *ticket);
/* Leases are per trial: a RUNNING trial whose lease was not renewed for
 * lease_timeout_s, or that its worker's heartbeats have left out for two
 * heartbeat intervals, goes back to PENDING. Workers silent for a lease
 * timeout are shown "lost". */
void state_expire_leases(struct server *s, uint64_t now_ms);

/* The fence: the lease a trial-scoped write names (X-Ctune-Lease: W:A). */
struct lease_token {
  int64_t worker_id;
  int attempt;
};
/* Parses "W:A" (decimal, W >= 1, A >= 1). -EINVAL when missing or malformed. */
int state_parse_lease(const char *header, struct lease_token *out);
enum fence {
  FENCE_CURRENT = 0, /* the trial's current lease (RUNNING) */
  FENCE_FINAL = 1,   /* the lease that ended the trial itself: final uploads */
  FENCE_STALE = 2    /* anything else: 409 not_leased, nothing stored */
};
/* Checks l against t's lease; FENCE_CURRENT renews the trial's lease (a
 * fenced write is a sign of life). Writes why a stale lease is refused into
 * why (may be NULL). */
enum fence state_check_fence(struct server *s, struct trial *t, const struct lease_token *l,
                             char *why, size_t whylen);
/* Renews a RUNNING trial's lease until now + lease_timeout_s. */
void state_renew_lease(struct server *s, struct trial *t, uint64_t now_ms);
/* The worker whose own secret (Authorization: Bearer, "<id>.<hex>") tok is;
 * NULL when none (compared in constant time). */
struct worker *state_worker_by_secret(struct server *s, const char *tok);
/* Charges a RUNNING trial's resources to its worker (lease, load). */
void state_charge(struct server *s, struct worker *w, struct trial *t);
/* Heartbeat v2 reconciliation for worker w: after the listed trials were
 * marked (listed_gen == gen), every trial RUNNING on w that was not listed
 * starts (or continues) its unlisted time; two heartbeat intervals of it and
 * it is requeued at once. Returns how many were requeued, or a negative
 * error. */
int state_reconcile_worker(struct server *s, struct worker *w, uint64_t gen, uint64_t now_ms,
                           uint64_t *ticket);
/* Records one acknowledged result in memory (also used by the loader). */
int state_note_result(struct server *s, struct trial *t, double time_value, char decision,
                      const cJSON *result, const char *json, int64_t seq);

/* The trial starts its next generation (an exploit's lease ended: it resumes
 * from the donor's checkpoint): later results are new even where their time
 * values repeat earlier ones, and no checkpoint may claim to be past the
 * donor's until this generation's results say so. The caller persists the
 * trial row in the same transaction. */
void state_trial_next_generation(struct trial *t);
/* The time_total_s the trial's stored checkpoint was taken at (what a lease
 * that resumes from it sends as start_time_total_s): a donor's copied value,
 * else its own stored result labelled with the checkpoint's iteration
 * (training_iteration, else the time value); 0 when none is known. */
double state_checkpoint_time_total(struct server *s, const struct experiment *e,
                                   const struct trial *t);
/* The same for a compact trial, read from its stored results. */
double state_compact_ck_time_total(struct server *s, const struct trial *t);

/* Bounded memory (HACKING.md, state_compact.c). */
#define STATE_COMPACT_DELAY_MS 5000
#define STATE_COLD_DELAY_MS 60000 /* finished (or read) this long ago: cold */
/* Fills sum with the trial's metric scores: from its values, or its
 * summary when compact. */
void state_trial_scores(const struct trial *t, double sum[BEST_SUM_N]);
/* Appends (id, due_ms); on no memory nothing (the caller's work is an
 * optimization that is then skipped). */
void due_queue_push(struct due_queue *q, int64_t id, uint64_t due_ms);
/* The next id due by now_ms, or 0. */
int64_t due_queue_pop(struct due_queue *q, uint64_t now_ms);
void due_queue_free(struct due_queue *q);
/* Frees a trial's result history (ts, decisions, seqs, values, series,
 * last_result) and zeroes what described it. */
void state_trial_history_free(struct trial *t);
/* Frees an ended trial's history, keeping the summary (t->scores first). */
void state_trial_compact(struct server *s, struct trial *t);
/* Queues an ended trial for state_compact_due (after the delay). */
void state_compact_later(struct server *s, struct trial *t, uint64_t now_ms);
/* Compacts the queued trials whose delay is over and that are still ended. */
void state_compact_due(struct server *s, uint64_t now_ms);
/* One stored result back into a trial's history (the loader, hydrate):
 * -EBADMSG when its data is not a JSON object (nothing noted). */
int state_replay_result(struct server *s, struct trial *t, const struct store_result_row *r);
/* Makes a compact trial whole again from SQLite (before an extend resumes
 * it); 0 when it is not compact. */
int state_trial_hydrate(struct server *s, struct trial *t);
/* The trial's last result as JSON text (malloc'd; *out NULL when none):
 * from memory, or SQLite when compact. Lock held. */
int state_trial_last_result(struct server *s, const struct trial *t, char **out);
void state_compact_free(struct server *s);
/* Cold experiments (state_cold.c). How many trials e has made. */
static inline int64_t state_experiment_created(const struct experiment *e) {
  return e->cold ? e->cold_ntrials : e->ntrials;
}
/* Queues e to go cold once due (it ended, or was warmed for a read). */
void state_cold_later(struct server *s, struct experiment *e, uint64_t now_ms);
/* Makes the due experiments cold (those still finished), frees old graves. */
void state_cold_due(struct server *s, uint64_t now_ms);
/* Reads a cold experiment's trials back (compact); 0 when it is warm. */
int state_experiment_warm(struct server *s, struct experiment *e);
/* server_trial for a request: a trial of a cold experiment is warmed first
 * (NULL: no such trial, or it could not be read). Lock held. */
struct trial *state_trial_ref(struct server *s, int64_t id);
void state_cold_free(struct server *s);

/* Index of a result key in e->keys, or -1. */
int state_key_index(const struct experiment *e, const char *key);

/* Queues a result op: the row plus what the scheduler recorded. */
int state_queue_result(struct server *s, struct trial *t, int64_t seq, double time_value,
                       const char *decision, const char *json,
                       const struct asha_outcome *rec1, const struct asha_outcome *rec2,
                       int with_trial_row, uint64_t *ticket);

#endif
