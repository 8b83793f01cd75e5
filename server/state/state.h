/* state: the state layer's API. Everything that changes the model
 * (model.h) goes through these functions, with s->lock held unless a comment
 * says otherwise; each queues the rows it changed to the commit thread, so a
 * change made under one hold of the lock is one transaction. The API layer
 * (server/api) calls down into this; nothing here knows HTTP. */
#ifndef CTUNE_STATE_H
#define CTUNE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "lease_wait.h"
#include "model.h"

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

/* Stores a new experiment (no trials yet: they are made at lease time).
 * The stored config is config_json with spec->search_alg in place of its
 * own: the searcher options in force, defaults written in. */
int state_add_experiment(struct server *s, const char *config_json, struct experiment_spec *spec,
                         struct srv_experiment **out, uint64_t *ticket);
/* Whether every planned trial was created and has ended. */
int state_experiment_done(const struct srv_experiment *e);
/* Creates the experiment's next trial from its searcher (PENDING, counted,
 * joined to the scheduler; the caller queues its row, with the lease that
 * takes it). -ENOENT: the plan or the searcher is exhausted. */
int state_create_trial(struct server *s, struct srv_experiment *e, struct srv_trial **out);
/* Queues the trial's / experiment's / worker's current row for the store. */
int state_persist_trial(struct server *s, struct srv_trial *t, uint64_t *ticket);
int state_persist_experiment(struct server *s, struct srv_experiment *e, uint64_t *ticket);
int state_persist_worker(struct server *s, struct srv_worker *w, uint64_t *ticket);

/* The trial left its worker: give the worker its resources back. */
void state_release(struct server *s, struct srv_trial *t);
/* control.c (docs/protocol.md#experiment-control): pause/resume, PATCH, one
 * trial's stop, delete. Each queues its whole change into the caller's hold
 * of the lock (one transaction); -EINVAL / -EBUSY etc. after writing why into
 * err (field name in field). */
int control_pause(struct server *s, struct srv_experiment *e, uint64_t *ticket);
int control_resume(struct server *s, struct srv_experiment *e, uint64_t *ticket);
struct control_patch {
  int has_num_samples, has_max_concurrent, has_priority, has_notes, has_tags, has_max_t;
  int64_t num_samples, max_concurrent;
  double priority, max_t;
  const char *notes;
  const char *tags; /* JSON array text, already checked */
};
int control_patch(struct server *s, struct srv_experiment *e, const struct control_patch *p,
                  char *field, size_t fieldlen, char *err, size_t errlen, uint64_t *ticket);
int control_stop_trial(struct server *s, struct srv_trial *t, uint64_t *ticket);
/* -EBUSY: trials run and force is 0. */
int control_delete(struct server *s, struct srv_experiment *e, int force, uint64_t *ticket);

/* ARCHITECTURE.md#the-live-list (state_live.c). s->live holds exactly the
 * RUNNING experiments: every change of an experiment's status
 * (state_experiment_event) persists the row through state_persist_experiment,
 * which calls state_live_sync; a change made without persisting the row must
 * call state_live_sync itself. -ENOMEM when the list cannot grow
 * (state_live_reserve first makes that impossible). */
int state_live_sync(struct server *s, struct srv_experiment *e);
int state_live_reserve(struct server *s, int64_t need);
/* The list from scratch (end of state_load): every RUNNING experiment. */
int state_live_rebuild(struct server *s);
void state_live_free(struct server *s);
/* The experiment's share weight: priority > 0, default 1. The one accessor. */
double state_experiment_priority(const struct srv_experiment *e);
/* Whether a goes before b in the fair order: smaller running/priority, then
 * the older (smaller id). */
int state_fair_before(const struct srv_experiment *a, const struct srv_experiment *b);
/* Moves the fair order's k-th experiment of c[0..n) to c[k], given that
 * c[0..k) already hold the first k: cheap for the first few k (a scan each),
 * then the rest is sorted once. */
void state_fair_pick(struct srv_experiment **c, int64_t n, int64_t k);
/* Leases a trial to w from the live experiment that is furthest below its
 * fair share (state_fair_before) among those with work to give and room
 * (max_concurrent_trials, resources that fit what w has free); an
 * experiment whose scheduler waits is passed over for the next. Asking is
 * a sign of life: w is touched (workers_touch) whether or not a trial is
 * leased. *out is the leased trial, its row queued under *ticket
 * (TE_LEASE), or NULL when none; 0 or a negative error. */
int state_lease(struct server *s, struct srv_worker *w, double cpu, double gpu, int64_t memory_mb,
                int has_memory, struct srv_trial **out, uint64_t *ticket);
/* The same for a held lease request tried again (lease_wait.h): no sign of
 * life (w is not touched: a worker whose heartbeats stopped is found lost
 * on time), and nothing for a worker that is lost. */
int state_lease_again(struct server *s, struct srv_worker *w, double cpu, double gpu,
                      int64_t memory_mb, int has_memory, struct srv_trial **out, uint64_t *ticket);
/* What a lease request of w with this free gets (api_worker_lease): a gang
 * member placed on w earlier first (it is charged already), else
 * state_lease_again's pick, and when that placed a gang, w's own member of
 * it. *rank is the member's rank (0 for a trial of one process). */
int state_lease_pick(struct server *s, struct srv_worker *w, double cpu, double gpu,
                     int64_t memory_mb, int has_memory, struct srv_trial **out, int *rank,
                     uint64_t *ticket);
/* Why a PENDING trial is not running; writes "" when nothing blocks it. */
void state_pending_reason(struct server *s, const struct srv_trial *t, char *buf, size_t n);
/* Why an experiment's next trial does not run (or is not made) now: the same
 * sentences; for a RUNNING experiment with work left. */
void state_experiment_pending_reason(struct server *s, const struct srv_experiment *e, char *buf,
                                     size_t n);
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
/* How long after its end a trial still takes the final uploads (checkpoint,
 * logs, a repeated complete) of the lease that ended it: the worker sends
 * them at once, so a minute covers a slow link and a retry or two. Later,
 * that lease is as stale as any other. */
#define STATE_FINAL_WINDOW_MS 60000ull
enum fence {
  FENCE_CURRENT = 0, /* the trial's current lease (RUNNING) */
  FENCE_FINAL = 1,   /* the lease that ended the trial itself, within
                        STATE_FINAL_WINDOW_MS of the end: final uploads */
  FENCE_STALE = 2    /* anything else: 409 not_leased, nothing stored */
};
/* Checks l against t's lease; FENCE_CURRENT renews the trial's lease (a
 * fenced write is a sign of life). Writes why a stale lease is refused into
 * why (may be NULL). */
enum fence state_check_fence(struct server *s, struct srv_trial *t, const struct lease_token *l,
                             char *why, size_t whylen);
/* ---- Life cycles: the only writers of t->status and e->status ----------
 *
 * A trial (state_trial.c):
 *
 *            TE_LEASE                TE_RESULTS (a stop) / TE_COMPLETE
 *   PENDING ─────────► RUNNING ──────────────────────────────────► TERMINATED
 *    ▲ ▲ ▲              │ │ │ │                                      ▲  │
 *    │ │ └──────────────┘ │ │ │ TE_FAIL, no retry left               │  │
 *    │ │  TE_REQUEUE,     │ │ └──────────────────────────► ERROR     │  │
 *    │ │  TE_RELEASE,     │ │ TE_PAUSE (a pause due at the lease's   │  │
 *    │ │  TE_FAIL (retry),│ ▼ end: a promotion rung, a user's pause)  │  │
 *    │ │  TE_EXPLOIT      │ PAUSED ────────────────────────────────┤  │
 *    │ └── TE_RESUME ─────┼─┘        TE_STOP (cancel, budget, stop,  │  │
 *    │   (promoted, resumed)         a stop due at the lease's end) │  │
 *    └──── TE_RESUME (an extend of max_t) ──────────────────────────┼──┘
 *          TE_STOP also ends a PENDING trial ───────────────────────┘
 *
 * Fenced events (TE_RESULTS, TE_COMPLETE, TE_FAIL, TE_RELEASE) check the
 * lease the write names first: -ESTALE (nothing changed) with args->why
 * when it is not the trial's current lease; FENCE_FINAL (the lease that ended
 * the trial, writing again) changes nothing and answers as before. */
enum trial_event {
  TE_LEASE,    /* PENDING -> RUNNING on args->worker; the row is queued */
  TE_RESULTS,  /* results, each decided; a stop ends the trial */
  TE_COMPLETE, /* -> TERMINATED, or what was due at the lease's end */
  TE_FAIL,     /* -> PENDING while failures <= max_failures, else ERROR */
  TE_RELEASE,  /* -> PENDING: its worker gave the lease back (drain) */
  TE_REQUEUE,  /* -> PENDING: lease expired, unlisted, worker deregistered */
  TE_STOP,     /* -> TERMINATED: cancel, budget, a user's or a decision's stop */
  TE_PAUSE,    /* RUNNING -> PAUSED at the lease's end */
  TE_EXPLOIT,  /* RUNNING -> PENDING from a donor's checkpoint, at the lease's end */
  TE_RESUME,   /* PAUSED or TERMINATED (or RUNNING, a pause lifted) -> PENDING */
};
struct trial_event_args {
  /* in */
  struct srv_worker *worker;       /* TE_LEASE */
  const struct lease_token *lease; /* fenced events */
  const cJSON *const *results;     /* TE_RESULTS: checked results and their */
  const double *time_values;       /* time values, nresults of each */
  int nresults;
  const char *error; /* TE_FAIL: the message ("failed" when empty) */
  int has_exit_code, exit_code;
  int64_t worker_id; /* TE_RELEASE: the body's worker_id (0: none) */
  int has_iteration;
  double iteration;
  int preempted;      /* TE_RELEASE: reason "preempted" (state_preempt.h) */
  double notice_at;   /* TE_RELEASE: when its worker got the notice (wall s; 0: unknown) */
  const char *why_in; /* TE_REQUEUE: why the lease ended (the trial's history) */
  /* out */
  enum fence fence; /* fenced events: what the lease was */
  char why[256];    /* -ESTALE: why the lease was refused */
  char *decisions;  /* TE_RESULTS: nresults of 's' (stop) / 'c', caller's array */
  int replayed;     /* TE_RESULTS: how many were replays of stored results */
};
/* The trial's next status for event ev (args may be NULL where no field is
 * read); queues what changed into the caller's hold of the lock. -ESTALE,
 * -EINVAL (no such transition: nothing changed), -ENOMEM. */
int state_trial_event(struct server *s, struct srv_trial *t, enum trial_event ev,
                      struct trial_event_args *args, uint64_t *ticket);
/* A `complete` that asks for its worker's next lease
 * (docs/protocol.md#worker-routes): TE_COMPLETE with args, then, only when
 * this request ended the trial (its lease was the current one: a retried
 * complete or a stale lease gets none), what a lease request of the lease's
 * worker with this free gets (state_lease_pick: the same fences, quarantine,
 * gang and spot rules, the server's own account). Both under the caller's
 * hold, so one commit carries both. *next NULL: nothing leased. */
int state_complete_and_lease(struct server *s, struct srv_trial *t, struct trial_event_args *args,
                             double cpu, double gpu, int64_t memory_mb, int has_memory,
                             struct srv_trial **next, int *rank, uint64_t *ticket);

/* An experiment (state_experiment.c):
 *
 *              EE_PAUSE                      EE_MAYBE_END (every planned trial
 *   PAUSED ◄──────────── RUNNING ───────────► TERMINATED   ended, or the
 *     │    ───────────►   ▲  │   ◄─────────── │            budget spent and
 *     │      EE_RESUME    │  │    EE_REOPEN   │            nothing runs)
 *     │                   │  │ EE_CANCEL      (an extend)
 *     └── EE_CANCEL ──────┼──┴──────────────► CANCELLED (fail_fast, a user,
 *                         │                              a delete)
 *   made RUNNING (TERMINATED at once when its plan is empty)
 */
enum exp_event {
  EE_MAYBE_END, /* RUNNING -> TERMINATED when over; nothing otherwise */
  EE_CANCEL,    /* RUNNING|PAUSED -> CANCELLED (reason): every unfinished trial stops */
  EE_PAUSE,     /* RUNNING -> PAUSED: nothing starts; running trials pause */
  EE_RESUME,    /* PAUSED -> RUNNING (its paused trials: control_resume) */
  EE_REOPEN,    /* TERMINATED -> RUNNING: an extend gave it work (not once its
                 * budget is spent) */
};
/* -EINVAL when e is not in a status the event starts from (EE_PAUSE,
 * EE_RESUME). Queues the row, in the caller's hold of the lock. */
int state_experiment_event(struct server *s, struct srv_experiment *e, enum exp_event ev,
                           const char *reason, uint64_t *ticket);

/* Renews a RUNNING trial's lease until now + lease_timeout_s. */
void state_renew_lease(struct server *s, struct srv_trial *t, uint64_t now_ms);
/* The worker whose own secret (Authorization: Bearer, "<id>.<hex>") tok is;
 * NULL when none (compared in constant time). */
struct srv_worker *state_worker_by_secret(struct server *s, const char *tok);
/* Charges a RUNNING trial's resources to its worker (lease, load). */
void state_charge(struct server *s, struct srv_worker *w, struct srv_trial *t);
/* One process's resources r on w, and back (a gang's members: gang.c). */
void state_charge_worker(struct srv_worker *w, const struct spec_resources *r);
void state_uncharge_worker(struct srv_worker *w, const struct spec_resources *r);
/* Heartbeat v2 reconciliation for worker w: after the listed trials were
 * marked (listed_gen == gen), every trial RUNNING on w that was not listed
 * starts (or continues) its unlisted time; two heartbeat intervals of it and
 * it is requeued at once. Returns how many were requeued, or a negative
 * error. */
int state_reconcile_worker(struct server *s, struct srv_worker *w, uint64_t gen, uint64_t now_ms,
                           uint64_t *ticket);
/* Records one acknowledged result in memory (also used by the loader). */
int state_note_result(struct server *s, struct srv_trial *t, double time_value, char decision,
                      const cJSON *result, const char *json, int64_t seq);

/* The trial starts its next generation (an exploit's lease ended: it resumes
 * from the donor's checkpoint): later results are new even where their time
 * values repeat earlier ones, and no checkpoint may claim to be past the
 * donor's until this generation's results say so. The caller persists the
 * trial row in the same transaction. */
void state_trial_next_generation(struct srv_trial *t);
/* The time_total_s the trial's stored checkpoint was taken at (what a lease
 * that resumes from it sends as start_time_total_s): a donor's copied value,
 * else its own stored result labelled with the checkpoint's iteration
 * (training_iteration, else the time value); 0 when none is known. */
double state_checkpoint_time_total(struct server *s, const struct srv_experiment *e,
                                   const struct srv_trial *t);
/* The same for a compact trial, read from its stored results. */
double state_compact_ck_time_total(struct server *s, const struct srv_trial *t);

/* ARCHITECTURE.md#bounded-memory (state_compact.c). */
#define STATE_COMPACT_DELAY_MS 5000
#define STATE_COLD_DELAY_MS 60000 /* finished (or read) this long ago: cold */
/* Fills sum with the trial's metric scores: from its values, or its
 * summary when compact. */
void state_trial_scores(const struct srv_trial *t, double sum[BEST_SUM_N]);
/* Appends (id, due_ms); on no memory nothing (the caller's work is an
 * optimization that is then skipped). */
void due_queue_push(struct due_queue *q, int64_t id, uint64_t due_ms);
/* The next id due by now_ms, or 0. */
int64_t due_queue_pop(struct due_queue *q, uint64_t now_ms);
void due_queue_free(struct due_queue *q);
/* Frees a trial's result history (ts, decisions, seqs, values, series,
 * last_result) and zeroes what described it. */
void state_trial_history_free(struct srv_trial *t);
/* Frees an ended trial's history, keeping the summary (t->scores first). */
void state_trial_compact(struct server *s, struct srv_trial *t);
/* Queues an ended trial for state_compact_due (after the delay). */
void state_compact_later(struct server *s, struct srv_trial *t, uint64_t now_ms);
/* Compacts the queued trials whose delay is over and that are still ended. */
void state_compact_due(struct server *s, uint64_t now_ms);
/* One stored result back into a trial's history (the loader, hydrate):
 * -EBADMSG when its data is not a JSON object (nothing noted). */
int state_replay_result(struct server *s, struct srv_trial *t, const struct store_result_row *r);
/* Makes a compact trial whole again from SQLite (before an extend resumes
 * it); 0 when it is not compact. */
int state_trial_hydrate(struct server *s, struct srv_trial *t);
/* The trial's last result as JSON text (malloc'd; *out NULL when none):
 * from memory, or SQLite when compact. Lock held. */
int state_trial_last_result(struct server *s, const struct srv_trial *t, char **out);
void state_compact_free(struct server *s);
/* An experiment with outcome constraints: every compact trial of e that has
 * results gets its violation back from its last result (one read of
 * SQLite for them all). 0 without constraints or such trials; -ENOMEM,
 * a store error. Lock held. */
int state_violations_restore(struct server *s, struct srv_experiment *e);
/* Cold experiments (state_cold.c). How many trials e has made. */
static inline int64_t state_experiment_created(const struct srv_experiment *e) {
  return e->cold ? e->cold_ntrials : e->ntrials;
}
/* Queues e to go cold once due (it ended, or was warmed for a read). */
void state_cold_later(struct server *s, struct srv_experiment *e, uint64_t now_ms);
/* Makes the due experiments cold (those still finished), frees old graves. */
void state_cold_due(struct server *s, uint64_t now_ms);
/* Reads a cold experiment's trials back (compact); 0 when it is warm. */
int state_experiment_warm(struct server *s, struct srv_experiment *e);
/* server_trial for a request: a trial of a cold experiment is warmed first
 * (NULL: no such trial, or it could not be read). Lock held. */
struct srv_trial *state_trial_ref(struct server *s, int64_t id);
void state_cold_free(struct server *s);

/* Index of a result key in e->keys, or -1. */
int state_key_index(const struct srv_experiment *e, const char *key);

/* Queues a result op: the row plus what the scheduler recorded. */
int state_queue_result(struct server *s, struct srv_trial *t, int64_t seq, double time_value,
                       const char *decision, const char *json, const struct asha_outcome *rec1,
                       const struct asha_outcome *rec2, int with_trial_row, uint64_t *ticket);

#endif
