/* state_compact: bounded memory (ARCHITECTURE.md#bounded-memory). An ended
 * trial keeps a summary instead of its history; SQLite has the rest. This
 * file makes the summary, frees the history a little after the end (so the
 * end's replies and events still see it), brings it back from SQLite when
 * an extend resumes the trial, and reads a compact trial's last result. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cJSON.h"
#include "constraint.h"
#include "log.h"
#include "state.h"
#include "state_internal.h"

void state_trial_scores(const struct srv_trial *t, double sum[BEST_SUM_N]) {
  if (t->compact)
    memcpy(sum, t->scores, sizeof t->scores);
  else
    best_summarize(t->values, t->nvals, sum);
}

void state_trial_summary_row(const struct srv_trial *t, struct store_trial_row *row) {
  row->created_seq = t->created_seq;
  row->res_known = 1;
  row->nres = (int64_t)t->nres;
  row->first_seq = t->first_seq;
  row->last_seq = t->last_seq;
  row->last_t = t->nres ? t->last_t : NAN;
  state_trial_scores(t, row->scores);
}

struct restore_ctx {
  struct srv_experiment *e;
  struct srv_trial **t; /* by position in the seqs read */
  const int64_t *seqs;
  size_t i, n;
};

static int restore_one(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  (void)trial_id;
  struct restore_ctx *r = ctx;
  while (r->i < r->n && r->seqs[r->i] != seq) r->i++;
  if (r->i == r->n || !data) return 0;
  cJSON *res = cJSON_Parse(data);
  /* Not an object (state_replay_result leaves such a row out): unknown. */
  r->t[r->i++]->violation = cJSON_IsObject(res) ? constraint_of_result(&r->e->spec, res) : INFINITY;
  cJSON_Delete(res);
  return 0;
}

int state_violations_restore(struct server *s, struct srv_experiment *e) {
  size_t k = 0;
  if (!e->spec.nconstraints) return 0;
  for (int64_t i = 0; i < e->ntrials; i++)
    k += e->trials[i]->compact && e->trials[i]->nres && e->trials[i]->last_seq;
  if (!k) return 0;
  int64_t *seqs = malloc(k * sizeof *seqs);
  struct srv_trial **ts = malloc(k * sizeof *ts);
  int rc = seqs && ts ? 0 : -ENOMEM;
  k = 0;
  for (int64_t i = 0; !rc && i < e->ntrials; i++) {
    struct srv_trial *t = e->trials[i];
    if (!t->compact || !t->nres || !t->last_seq) continue;
    t->violation = INFINITY; /* unless its last result says otherwise */
    seqs[k] = t->last_seq;
    ts[k++] = t;
  }
  if (!rc)
    rc = store_results_by_seq(s->store, seqs, k, restore_one,
                              &(struct restore_ctx){e, ts, seqs, 0, k});
  free(seqs);
  free(ts);
  return rc;
}

void state_trial_history_free(struct srv_trial *t) {
  free(t->ts);
  free(t->decisions);
  free(t->seqs);
  free(t->values);
  for (int i = 0; i < t->nseries; i++) free(t->series[i].v);
  free(t->series);
  free(t->last_result);
  t->ts = t->values = NULL;
  t->decisions = t->last_result = NULL;
  t->seqs = NULL;
  t->series = NULL;
  t->nseries = 0;
  t->capres = t->nvals = t->capvals = 0;
}

void state_trial_compact(struct server *s, struct srv_trial *t) {
  if (t->compact) return;
  s->ncompact++;
  state_trial_scores(t, t->scores);
  state_trial_history_free(t);
  t->compact = 1;
}

void due_queue_push(struct due_queue *q, int64_t id, uint64_t due_ms) {
  if (q->head > 0 && q->head == q->len) q->head = q->len = 0;
  if (q->len == q->cap) {
    if (q->head > q->cap / 2) { /* reuse the consumed front */
      memmove(q->v, q->v + q->head, (size_t)(q->len - q->head) * sizeof *q->v);
      q->len -= q->head;
      q->head = 0;
    } else {
      int64_t nc = q->cap ? q->cap * 2 : 256;
      struct due *v = realloc(q->v, (size_t)nc * sizeof *v);
      if (!v) return;
      q->v = v;
      q->cap = nc;
    }
  }
  q->v[q->len++] = (struct due){id, due_ms};
}

int64_t due_queue_pop(struct due_queue *q, uint64_t now_ms) {
  return q->head < q->len && q->v[q->head].due_ms <= now_ms ? q->v[q->head++].id : 0;
}

void due_queue_free(struct due_queue *q) {
  free(q->v);
  memset(q, 0, sizeof *q);
}

void state_compact_later(struct server *s, struct srv_trial *t, uint64_t now_ms) {
  /* On no memory it stays whole: more memory, nothing wrong. */
  if (!t->compact) due_queue_push(&s->cq, t->id, now_ms + s->compact_delay_ms);
}

void state_compact_due(struct server *s, uint64_t now_ms) {
  for (int64_t id; (id = due_queue_pop(&s->cq, now_ms));) {
    struct srv_trial *t = server_trial(s, id);
    /* Resumed since (an extend) or deleted: nothing to do. */
    if (t && (t->status == TS_TERMINATED || t->status == TS_ERROR)) state_trial_compact(s, t);
  }
}

void state_compact_free(struct server *s) { due_queue_free(&s->cq); }

struct hydrate_ctx {
  struct server *s;
  struct srv_trial *t;
};

int state_replay_result(struct server *s, struct srv_trial *t, const struct store_result_row *r) {
  cJSON *obj = cJSON_Parse(r->data);
  if (!cJSON_IsObject(obj)) {
    cJSON_Delete(obj);
    return -EBADMSG;
  }
  int rc = state_note_result(s, t, r->t, r->decision && r->decision[0] == 's' ? 's' : 'c', obj,
                             r->data, r->seq);
  cJSON_Delete(obj);
  if (!rc && r->gen < t->generation) {
    /* An earlier generation's result: history only, not the idempotency index
     * nor the checkpoint bound (completed after the load from the checkpoint,
     * which is the donor's or newer). */
    t->gen_start = t->nres;
    t->max_t_seen = -INFINITY;
    t->max_iter_seen = -INFINITY;
  }
  return rc;
}

static int hydrate_row(void *ctx, const struct store_result_row *r) {
  struct hydrate_ctx *h = ctx;
  int rc = state_replay_result(h->s, h->t, r);
  if (rc == -EBADMSG)
    log_warn("trial %lld: stored result %lld is not a JSON object: left out", (long long)h->t->id,
             (long long)r->seq);
  return rc == -EBADMSG ? 0 : rc;
}

int state_trial_hydrate(struct server *s, struct srv_trial *t) {
  if (!t->compact) return 0;
  struct srv_trial saved = *t;
  int64_t first = t->first_seq, last = t->last_seq;
  size_t nres = t->nres;
  t->compact = 0;
  s->ncompact--;
  t->nres = t->gen_start = 0;
  t->has_last_value = 0;
  t->first_seq = t->last_seq = 0;
  int rc = nres ? store_trial_rows(s->store, t->experiment_id, t->id, first, last, hydrate_row,
                                   &(struct hydrate_ctx){s, t})
                : 0;
  if (rc) {
    /* Back to the summary as it was: the partial history goes. */
    state_trial_history_free(t);
    *t = saved;
    s->ncompact++;
    log_error("trial %lld: its results could not be read back (%d)", (long long)t->id, rc);
    return rc;
  }
  /* The checkpoint bound, as after a load. */
  double ck = t->has_checkpoint ? (double)t->checkpoint_iteration : 0;
  if (t->generation > 0 && !(t->max_iter_seen >= ck)) t->max_iter_seen = ck;
  return 0;
}

static int last_result_copy(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  (void)seq;
  (void)trial_id;
  char **out = ctx;
  return data && (*out = strdup(data)) == NULL ? -ENOMEM : 0;
}

int state_trial_last_result(struct server *s, const struct srv_trial *t, char **out) {
  *out = NULL;
  if (!t->compact) return t->last_result && !(*out = strdup(t->last_result)) ? -ENOMEM : 0;
  if (!t->nres || !t->last_seq) return 0;
  return store_results_by_seq(s->store, &t->last_seq, 1, last_result_copy, out);
}

struct ck_time_ctx {
  double label, found;
};

/* The checkpoint label a stored result stands for: training_iteration,
 * else its time value (the worker's label); its time_total_s when it is
 * the checkpoint's. The last match wins, as from memory. */
static int ck_time_row(void *ctx, const struct store_result_row *r) {
  struct ck_time_ctx *c = ctx;
  cJSON *obj = cJSON_Parse(r->data);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, "training_iteration");
  const cJSON *tt = cJSON_GetObjectItemCaseSensitive(obj, "time_total_s");
  double label = cJSON_IsNumber(it) ? it->valuedouble : r->t;
  if (label == c->label)
    c->found = cJSON_IsNumber(tt) && isfinite(tt->valuedouble) ? tt->valuedouble : 0;
  cJSON_Delete(obj);
  return 0;
}

double state_compact_ck_time_total(struct server *s, const struct srv_trial *t) {
  struct ck_time_ctx c = {(double)t->checkpoint_iteration, 0};
  if (!t->has_checkpoint || !t->nres) return 0;
  if (store_trial_rows(s->store, t->experiment_id, t->id, t->first_seq, t->last_seq, ck_time_row,
                       &c))
    return 0;
  return c.found;
}
