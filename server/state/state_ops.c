/* state_ops: plain copies of changed rows, queued in order to the commit
 * thread, which applies them with the store's prepared statements. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attribution.h"
#include "clock.h"
#include "events.h"
#include "state.h"
#include "decide.h"
#include "state_internal.h"

struct trial_op {
  struct store_trial_row row;
  char *name, *config, *error, *reason;
  char lease_end[64]; /* decide_action_text */
};

static void trial_op_free(void *arg) {
  struct trial_op *op = arg;
  free(op->name);
  free(op->config);
  free(op->error);
  free(op->reason);
  free(op);
}

static int trial_op_apply(struct store *st, void *arg) {
  return store_put_trial(st, &((struct trial_op *)arg)->row);
}

static struct trial_op *trial_op_make(const struct srv_trial *t) {
  struct trial_op *op = calloc(1, sizeof *op);
  if (!op) return NULL;
  op->name = strdup(t->name);
  op->config = strdup(t->config);
  op->error = state_strdup_or_null(t->error);
  op->reason = state_strdup_or_null(t->reason); /* the last decision's */
  if (!op->name || !op->config || (t->error && !op->error) || (t->reason && !op->reason)) {
    trial_op_free(op);
    return NULL;
  }
  op->row = (struct store_trial_row){
      .id = t->id,
      .experiment_id = t->experiment_id,
      .idx = t->idx,
      .name = op->name,
      .status = trial_status_names[t->status],
      .stopped_early = t->stopped_early,
      .config = op->config,
      .bracket = t->bracket,
      .error = op->error,
      .has_exit_code = t->has_exit_code,
      .exit_code = t->exit_code,
      .num_failures = t->num_failures,
      .attempt = t->attempt,
      .worker_id = t->worker_id,
      .created_at = t->created_at,
      .started_at = t->started_at,
      .ended_at = t->ended_at,
      .updated_seq = t->updated_seq,
      .reason = op->reason,
      .generation = t->generation, /* PBT exploits applied */
      /* the decision due at the lease's end (migration 009) */
      .lease_end_action = decide_action_text(t, op->lease_end, sizeof op->lease_end),
      .has_ck_time_total = t->has_ck_time_total,
      .ck_time_total_s = t->ck_time_total_s,
      /* 016: NULL when it never failed */
      .attribution = t->attribution ? attribution_name(t->attribution) : NULL};
  state_trial_summary_row(t, &op->row); /* 011: bounded memory */
  return op;
}

int state_persist_trial(struct server *s, struct srv_trial *t, uint64_t *ticket) {
  struct trial_op *op = trial_op_make(t);
  if (!op) return -ENOMEM;
  int64_t seq = t->updated_seq;
  int rc = commit_enqueue(s->commit, trial_op_apply, trial_op_free, op, ticket);
  if (!rc) commit_cover_seq(s->commit, seq);
  if (!rc) events_note(s, EV_TRIAL, t->id, 0, NULL); /* the change feed */
  return rc;
}

struct exp_op {
  struct store_experiment_row row;
  char *name, *config, *end_reason;
  char *notes, *tags; /* migration 010 */
  /* experiment creation also carries its trials */
  struct trial_op **trials;
  int64_t ntrials;
};

void state_exp_op_free(void *arg) {
  struct exp_op *op = arg;
  free(op->name);
  free(op->config);
  free(op->end_reason);
  free(op->notes);
  free(op->tags);
  for (int64_t i = 0; i < op->ntrials; i++)
    if (op->trials[i]) trial_op_free(op->trials[i]);
  free(op->trials);
  free(op);
}

static int exp_op_apply(struct store *st, void *arg) {
  struct exp_op *op = arg;
  int rc = store_put_experiment(st, &op->row);
  for (int64_t i = 0; !rc && i < op->ntrials; i++) rc = store_put_trial(st, &op->trials[i]->row);
  return rc;
}

static struct exp_op *exp_op_make(const struct srv_experiment *e) {
  struct exp_op *op = calloc(1, sizeof *op);
  if (!op) return NULL;
  op->name = strdup(e->name);
  op->config = strdup(e->config);
  op->end_reason = state_strdup_or_null(e->end_reason);
  op->notes = state_strdup_or_null(e->notes);
  op->tags = state_strdup_or_null(e->tags);
  if (!op->name || !op->config || (e->end_reason && !op->end_reason) || (e->notes && !op->notes) ||
      (e->tags && !op->tags)) {
    state_exp_op_free(op);
    return NULL;
  }
  op->row = (struct store_experiment_row){
      .id = e->id,
      .name = op->name,
      .status = exp_status_names[e->status],
      .config = op->config,
      .seed = e->seed,
      .created_at = e->created_at,
      .has_ended_at = e->ended_at > 0,
      .ended_at = e->ended_at,
      .updated_seq = e->updated_seq,
      .end_reason = op->end_reason,
      .run_time_s = e->run_time_s,
      /* migration 010: NULL notes/tags are stored as their defaults */
      .priority = e->priority,
      .notes = op->notes,
      .tags = op->tags};
  return op;
}

int state_persist_experiment(struct server *s, struct srv_experiment *e, uint64_t *ticket) {
  int lrc = state_live_sync(s, e); /* every status change passes here */
  if (lrc) return lrc;
  /* Bounded memory: a finished experiment goes cold a while later. */
  if (e->status == ES_TERMINATED || e->status == ES_CANCELLED)
    state_cold_later(s, e, clock_mono_ms());
  struct exp_op *op = exp_op_make(e);
  if (!op) return -ENOMEM;
  return state_exp_op_enqueue(s, op, ticket);
}

struct worker_op {
  struct store_worker_row row;
  char *name;
};

static void worker_op_free(void *arg) {
  struct worker_op *op = arg;
  free(op->name);
  free(op);
}

static int worker_op_apply(struct store *st, void *arg) {
  return store_put_worker(st, &((struct worker_op *)arg)->row);
}

int state_persist_worker(struct server *s, struct srv_worker *w, uint64_t *ticket) {
  struct worker_op *op = calloc(1, sizeof *op);
  if (!op || !(op->name = strdup(w->name))) {
    free(op);
    return -ENOMEM;
  }
  op->row = (struct store_worker_row){.id = w->id,
                                      .name = op->name,
                                      .cpu = w->cpu,
                                      .gpu = w->gpu,
                                      .memory_mb = w->memory_mb,
                                      .registered_at = w->registered_at,
                                      .last_heartbeat = w->last_heartbeat,
                                      .spot = w->spot}; /* 017 */
  memcpy(op->row.secret, w->secret, sizeof op->row.secret);
  memcpy(op->row.quarantine, w->quarantine, sizeof op->row.quarantine); /* 016 */
  events_note(s, EV_WORKER, w->id, 0, NULL);                            /* the change feed */
  return commit_enqueue(s->commit, worker_op_apply, worker_op_free, op, ticket);
}

/* The hot path: one allocation holds the result row, the scheduler's records
 * and, when the trial ended, the trial row. */
struct result_op {
  struct store_result_row row;
  struct store_asha_row asha[2];
  int nasha;
  struct trial_op *trial;
  char data[]; /* decision, then the JSON */
};

static void result_op_free(void *arg) {
  struct result_op *op = arg;
  if (op->trial) trial_op_free(op->trial);
  free(op);
}

static int result_op_apply(struct store *st, void *arg) {
  struct result_op *op = arg;
  int rc = op->row.data ? store_insert_result(st, &op->row) : 0;
  for (int i = 0; !rc && i < op->nasha; i++) rc = store_insert_asha(st, &op->asha[i]);
  if (!rc && op->trial) rc = store_put_trial(st, &op->trial->row);
  return rc;
}

static void asha_row_fill(struct store_asha_row *r, const struct srv_trial *t,
                          const struct asha_outcome *o, int64_t seq) {
  *r = (struct store_asha_row){.experiment_id = t->experiment_id,
                               .trial_id = t->id,
                               .bracket = o->bracket,
                               .milestone = o->milestone,
                               .value = o->value,
                               .stopped_early = o->stopped_early,
                               .seq = seq};
}

int state_queue_result(struct server *s, struct srv_trial *t, int64_t seq, double time_value,
                       const char *decision, const char *json, const struct asha_outcome *rec1,
                       const struct asha_outcome *rec2, int with_trial_row, uint64_t *ticket) {
  size_t dl = decision ? strlen(decision) + 1 : 0, jl = json ? strlen(json) + 1 : 0;
  struct result_op *op = calloc(1, sizeof *op + dl + jl);
  if (!op) return -ENOMEM;
  if (json) {
    memcpy(op->data, decision, dl);
    memcpy(op->data + dl, json, jl);
    op->row = (struct store_result_row){.seq = seq,
                                        .trial_id = t->id,
                                        .experiment_id = t->experiment_id,
                                        .t = time_value,
                                        .gen = t->generation, /* the generation it came in */
                                        .decision = op->data,
                                        .data = op->data + dl};
  }
  if (rec1 && rec1->recorded) asha_row_fill(&op->asha[op->nasha++], t, rec1, seq);
  if (rec2 && rec2->recorded) asha_row_fill(&op->asha[op->nasha++], t, rec2, seq);
  if (with_trial_row && !(op->trial = trial_op_make(t))) {
    free(op);
    return -ENOMEM;
  }
  int64_t covered = json ? seq : 0;
  if (op->trial && op->trial->row.updated_seq > covered) covered = op->trial->row.updated_seq;
  const char *ev_json = json ? op->data + dl : NULL;        /* op is the commit's once queued */
  if (json) events_note(s, EV_RESULT, t->id, seq, ev_json); /* the change feed */
  if (op->trial) events_note(s, EV_TRIAL, t->id, 0, NULL);
  int rc = commit_enqueue(s->commit, result_op_apply, result_op_free, op, ticket);
  if (!rc) commit_cover_seq(s->commit, covered);
  return rc;
}

struct exp_op *state_exp_op_make(const struct srv_experiment *e, struct srv_trial *const *trials,
                                 int64_t n) {
  struct exp_op *op = exp_op_make(e);
  if (!op) return NULL;
  if (!(op->trials = calloc((size_t)(n ? n : 1), sizeof *op->trials))) goto fail;
  for (int64_t i = 0; i < n; i++) {
    if (!(op->trials[i] = trial_op_make(trials[i]))) goto fail;
    op->ntrials = i + 1;
  }
  return op;
fail:
  state_exp_op_free(op);
  return NULL;
}

int state_exp_op_enqueue(struct server *s, struct exp_op *op, uint64_t *ticket) {
  int64_t covered = op->row.updated_seq;
  for (int64_t i = 0; i < op->ntrials; i++)
    if (op->trials[i]->row.updated_seq > covered) covered = op->trials[i]->row.updated_seq;
  /* The change feed (the rows are noted before the op is handed over) */
  events_note(s, EV_EXPERIMENT, op->row.id, 0, NULL);
  for (int64_t i = 0; i < op->ntrials; i++)
    events_note(s, EV_TRIAL, op->trials[i]->row.id, 0, NULL);
  int rc = commit_enqueue(s->commit, exp_op_apply, state_exp_op_free, op, ticket);
  if (!rc) commit_cover_seq(s->commit, covered);
  return rc;
}
