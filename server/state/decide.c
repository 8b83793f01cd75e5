/* decide: carrying out scheduler decisions. See decide.h and
 * ARCHITECTURE.md#decisions-pause-and-exploit. Every change is queued into
 * the caller's open group, so it commits in the decision's transaction. */
#include "decide.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "jsonout.h"
#include "log.h"
#include "state_internal.h"
#include "stoprule.h"
#include "testhook.h"

/* One trial_events and/or sched_records row. */
struct decide_op {
  struct store_event_row ev;
  int has_event;
  int64_t rec_exp, rec_seq, rec_trial;
  char *record, *kind, *reason, *data;
  int64_t copy_from, copy_to; /* exploit: checkpoint copy (0: none) */
  int copy_snap;              /* from copy_from's snapshot (pbt_checkpoints) */
  int64_t snap_of;            /* keep this trial's checkpoint as its snapshot (0: none) */
};

static void decide_op_free(void *arg) {
  struct decide_op *op = arg;
  free(op->record);
  free(op->kind);
  free(op->reason);
  free(op->data);
  free(op);
}

static int decide_op_apply(struct store *st, void *arg) {
  struct decide_op *op = arg;
  int rc = 0;
  if (op->snap_of) rc = store_snapshot_checkpoint(st, op->snap_of);
  if (!rc && op->copy_from)
    rc = op->copy_snap ? store_copy_snapshot(st, op->copy_from, op->copy_to)
                       : store_copy_checkpoint(st, op->copy_from, op->copy_to);
  if (!rc && op->has_event) rc = store_insert_event(st, &op->ev);
  if (!rc && op->record)
    rc = store_insert_sched_record(st, op->rec_exp, op->rec_seq, op->rec_trial, op->record);
  return rc;
}

static int decide_set_reason(struct srv_trial *t, const char *reason) {
  if (!reason || !reason[0]) return 0;
  char *copy = strdup(reason);
  if (!copy) return -ENOMEM;
  free(t->reason);
  t->reason = copy;
  return 0;
}

static int decide_enqueue(struct server *s, struct decide_op *op, uint64_t *ticket) {
  /* No commit_cover_seq: the loader does not read events' seqs, so the
   * group writes the counter itself and it never goes back after a restart. */
  return commit_enqueue(s->commit, decide_op_apply, decide_op_free, op, ticket);
}

static int decide_note_row(struct server *s, struct srv_trial *t, const char *kind,
                           const char *reason, const cJSON *data, const cJSON *record,
                           int set_reason, uint64_t *ticket) {
  if ((!kind || !reason || !reason[0]) && !record) return 0;
  struct decide_op *op = calloc(1, sizeof *op);
  if (!op) return -ENOMEM;
  int rc = -ENOMEM;
  if (kind && reason && reason[0]) {
    if (!(op->kind = strdup(kind)) || !(op->reason = strdup(reason)) ||
        (data && !(op->data = jsonout_print(data))))
      goto fail;
    op->has_event = 1;
    op->ev = (struct store_event_row){.seq = ++s->seq,
                                      .trial_id = t->id,
                                      .experiment_id = t->experiment_id,
                                      .time = clock_wall_s(),
                                      .kind = op->kind,
                                      .reason = op->reason,
                                      .data = op->data};
    if (set_reason && (rc = decide_set_reason(t, reason))) goto fail;
  }
  if (record) {
    if (!(op->record = jsonout_print(record))) goto fail;
    op->rec_exp = t->experiment_id;
    op->rec_seq = ++s->seq;
    op->rec_trial = t->id;
  }
  return decide_enqueue(s, op, ticket);
fail:
  decide_op_free(op);
  return rc;
}

int decide_note(struct server *s, struct srv_trial *t, const char *kind, const char *reason,
                const cJSON *data, const cJSON *record, uint64_t *ticket) {
  return decide_note_row(s, t, kind, reason, data, record, 1, ticket);
}

int decide_event(struct server *s, struct srv_trial *t, const char *kind, const char *reason,
                 const cJSON *data, uint64_t *ticket) {
  return decide_note_row(s, t, kind, reason, data, NULL, 0, ticket);
}

/* A test-build scheduler hook (TESTHOOK_DECIDE: "pause_at=T" or
 * "exploit_at=T,donor=ID,set=KEY:VALUE"): the server's own decision
 * framework is tested with real processes before every algorithm exists.
 * Never set outside tests. */
static void decide_test_hook(struct srv_trial *t, double tv, struct sched_outcome *out) {
  const char *spec = TESTHOOK(TESTHOOK_DECIDE);
  if (!spec || out->action != SCHED_CONTINUE) return;
  double at;
  if (sscanf(spec, "pause_at=%lf", &at) == 1 && tv == at) {
    out->action = SCHED_PAUSE;
    snprintf(out->reason, sizeof out->reason, "paused at rung %g (t=%g)", at, tv);
    return;
  }
  long long donor;
  char key[64];
  double v;
  if (sscanf(spec, "exploit_at=%lf,donor=%lld,set=%63[^:]:%lf", &at, &donor, key, &v) == 4 &&
      tv == at && t->id != donor) {
    cJSON *c = cJSON_Parse(t->config);
    if (!c) return;
    cJSON_DeleteItemFromObjectCaseSensitive(c, key);
    if (!cJSON_AddNumberToObject(c, key, v)) {
      cJSON_Delete(c);
      return;
    }
    out->action = SCHED_EXPLOIT;
    out->donor_trial_id = donor;
    out->new_config = c;
    snprintf(out->reason, sizeof out->reason, "exploited trial %lld at t=%g: %s → %g", donor, tv,
             key, v);
  }
}

int decide_stopper(const struct srv_experiment *e, const cJSON *result, struct sched_outcome *out,
                   const char **event_kind) {
  char why[SCHED_REASON_MAX];
  if (stoprule_reached(e->spec.stop, e->spec.has_metric, e->spec.metric, e->spec.mode, result, why,
                       sizeof why)) {
    out->action = SCHED_STOP;
    out->stopped_early = 0;
    snprintf(out->reason, sizeof out->reason, "%s", why);
    *event_kind = "stop_rule";
    return 1;
  }
  if (e->budget_spent) {
    out->action = SCHED_STOP;
    out->stopped_early = 0;
    snprintf(out->reason, sizeof out->reason, "time_budget_s %g spent", e->spec.time_budget_s);
    *event_kind = "time_budget";
    return 1;
  }
  return 0;
}

int decide_note_rank(const struct srv_experiment *e, struct srv_trial *t, const cJSON *result,
                     double tv, struct sched_outcome *out) {
  if (!out->record || sched_type(e->sched) != SPEC_SCHED_PBT) return 0;
  /* The checkpoint label the worker uses: training_iteration, else the time
   * value. A donor's checkpoint must reach it (decide_apply). */
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(result, "training_iteration");
  t->rank_iter = cJSON_IsNumber(it) ? it->valuedouble : tv;
  t->rank_top = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out->record, "ckpt"));
  cJSON_DeleteItemFromObjectCaseSensitive(out->record, "iter");
  return cJSON_AddNumberToObject(out->record, "iter", t->rank_iter) ? 0 : -ENOMEM;
}

int decide_override(struct server *s, struct srv_experiment *e, struct srv_trial *t,
                    const cJSON *result, double tv, struct sched_outcome *out,
                    const char **event_kind) {
  (void)s;
  (void)result;
  decide_test_hook(t, tv, out);
  *event_kind = out->action == SCHED_STOP      ? "stopped"
                : out->action == SCHED_PAUSE   ? "paused"
                : out->action == SCHED_EXPLOIT ? "exploited"
                                               : NULL;
  if (out->action != SCHED_CONTINUE) return 0;
  if (e->status == ES_PAUSED) {
    /* A user paused the experiment: answered stop, the trial ends PAUSED with
     * its checkpoint when its lease ends. */
    out->action = SCHED_PAUSE;
    snprintf(out->reason, sizeof out->reason, "%s", control_pause_reason);
    *event_kind = "paused";
  }
  return 0;
}

/* Which stored checkpoint of donor d holds the result of iteration need:
 * DONOR_SNAP its snapshot (the first upload that covered the result it was
 * ranked top at: the one Ray would clone), DONOR_LIVE its checkpoint (it
 * covers need without a snapshot, or, with any, whatever an ended donor
 * stored), DONOR_NONE not stored yet. */
enum { DONOR_NONE, DONOR_LIVE, DONOR_SNAP };

static int decide_donor_source(const struct srv_trial *d, double need, int any) {
  if (d->has_snap && (double)d->snap_iter >= need) return DONOR_SNAP;
  if (d->has_checkpoint && ((double)d->checkpoint_iteration >= need || any)) return DONOR_LIVE;
  return DONOR_NONE;
}

/* The exploit's checkpoint copy, queued in the caller's group, and in
 * memory what it does in the store; the donor's time_total_s at that
 * checkpoint goes with it (start_time_total_s of the next lease: the
 * trial's own results do not know it), persisted with the trial row. */
static int decide_copy_donor(struct server *s, struct srv_experiment *e, struct srv_trial *t,
                             struct srv_trial *d, int src, uint64_t *ticket) {
  struct decide_op *op = calloc(1, sizeof *op);
  if (!op) return -ENOMEM;
  op->copy_from = d->id;
  op->copy_to = t->id;
  op->copy_snap = src == DONOR_SNAP;
  op->rec_seq = s->seq;
  int rc = decide_enqueue(s, op, ticket);
  if (rc) return rc;
  if (src == DONOR_SNAP) {
    /* The snapshot is one of d's own uploads: its results know the time. */
    struct srv_trial at = *d;
    at.checkpoint_iteration = d->snap_iter;
    at.has_checkpoint = 1;
    at.has_ck_time_total = 0;
    t->ck_time_total_s = state_checkpoint_time_total(s, e, &at);
    t->checkpoint_iteration = d->snap_iter;
  } else {
    t->ck_time_total_s = state_checkpoint_time_total(s, e, d);
    t->checkpoint_iteration = d->checkpoint_iteration;
  }
  t->has_ck_time_total = 1;
  t->has_checkpoint = 1;
  if (d->max_iter_seen > t->max_iter_seen) t->max_iter_seen = d->max_iter_seen;
  return 0;
}

int decide_apply(struct server *s, struct srv_experiment *e, struct srv_trial *t, double tv,
                 struct sched_outcome *out, uint64_t *ticket) {
  int erc = decide_end_others(s, e, out, ticket);
  if (erc) return erc;
  if (out->action == SCHED_PAUSE) {
    t->lease_end_action = SCHED_PAUSE;
    log_info("trial %lld: %s (pauses when its lease ends)", (long long)t->id, out->reason);
    return 0;
  }
  if (out->action != SCHED_EXPLOIT) return 0;
  struct srv_trial *d = server_trial(s, out->donor_trial_id);
  /* Ray waits for the donor's checkpoint of the result it ranked (its
   * pending save): here the donor's upload, which the worker sends after
   * that result's acknowledgement. A running donor is waited for; an ended
   * one gives what it stored. */
  int src = d ? decide_donor_source(d, d->rank_iter, d->status != TS_RUNNING) : DONOR_NONE;
  int wait = d && src == DONOR_NONE && d->status == TS_RUNNING;
  if (!d || d->experiment_id != e->id || d == t || !out->new_config || (!src && !wait)) {
    /* Nothing to exploit from: the trial goes on (the worker was not told
     * anything else yet). */
    int rc = sched_exploit_refused(e->sched, t->id, out); /* pbt forgets it too */
    if (rc) return rc;
    out->action = SCHED_CONTINUE;
    out->reason[0] = 0;
    return 0;
  }
  char *cfg = jsonout_print(out->new_config);
  cJSON *data = cJSON_CreateObject(), *old = cJSON_Parse(t->config);
  int rc = -ENOMEM;
  if (!cfg || !data || !old || !cJSON_AddNumberToObject(data, "donor", (double)d->id) ||
      !cJSON_AddNumberToObject(data, "t", tv) ||
      !cJSON_AddNumberToObject(data, "donor_iteration", d->rank_iter) ||
      !cJSON_AddItemToObject(data, "old_config", old))
    goto out;
  old = NULL;
  if (!cJSON_AddItemToObject(data, "new_config", cJSON_Duplicate(out->new_config, 1))) goto out;
  if (wait) {
    /* Carried out when the donor's checkpoint of that result is stored
     * (decide_checkpoint_stored) or its lease ends (decide_donor_done);
     * the trial's own lease ends into PAUSED meanwhile. */
    char *keep = strdup(t->config);
    if (!keep) goto out;
    free(t->exploit_old_config);
    t->exploit_old_config = keep;
    t->exploit_donor = d->id;
    t->exploit_iter = d->rank_iter;
    e->exploit_waits++;
    log_info("trial %lld: %s (waits for trial %lld's checkpoint of iteration %g)", (long long)t->id,
             out->reason, (long long)d->id, d->rank_iter);
  } else {
    if ((rc = decide_copy_donor(s, e, t, d, src, ticket))) goto out;
    log_info("trial %lld: %s", (long long)t->id, out->reason);
  }
  free(t->config);
  t->config = cfg;
  cfg = NULL;
  t->lease_end_action = SCHED_EXPLOIT;
  rc = 0;
  /* The event carries the data; decide_note is called by the caller with
   * it: keep it on the outcome. */
  cJSON_Delete(out->new_config);
  out->new_config = data;
  data = NULL;
out:
  free(cfg);
  cJSON_Delete(old);
  cJSON_Delete(data);
  return rc;
}

const char *decide_action_name(int action) {
  return action == SCHED_PAUSE     ? "pause"
         : action == SCHED_EXPLOIT ? "exploit"
         : action == SCHED_STOP    ? "stop"
                                   : NULL;
}

const char *decide_action_text(const struct srv_trial *t, char *buf, size_t size) {
  if (t->lease_end_action != SCHED_EXPLOIT || !t->exploit_donor)
    return decide_action_name(t->lease_end_action);
  snprintf(buf, size, "exploit:%lld:%.17g", (long long)t->exploit_donor, t->exploit_iter);
  return buf;
}

/* "exploit:D:I": the donor and the iteration its checkpoint must reach. */
static int decide_parse_wait(const char *text, int64_t *donor, double *iter) {
  long long d;
  double it;
  int n = 0;
  if (sscanf(text, "exploit:%lld:%lf%n", &d, &it, &n) != 2 || text[n] || d <= 0 || !isfinite(it))
    return -EINVAL;
  *donor = d;
  *iter = it;
  return 0;
}

int decide_action_parse(const char *name, int *action) {
  static const int all[] = {SCHED_PAUSE, SCHED_EXPLOIT, SCHED_STOP};
  int64_t d;
  double it;
  *action = 0;
  if (!name) return 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(name, decide_action_name(all[i]))) {
      *action = all[i];
      return 0;
    }
  if (!decide_parse_wait(name, &d, &it)) {
    *action = SCHED_EXPLOIT;
    return 0;
  }
  return -EINVAL;
}

void decide_load_wait(struct srv_trial *t, const char *text) {
  t->exploit_donor = 0;
  if (text && decide_parse_wait(text, &t->exploit_donor, &t->exploit_iter)) t->exploit_donor = 0;
}

/* ---- PBT: exploits waiting for their donor's checkpoint ---- */

/* A waiting exploit the server cannot carry out (its donor stored no
 * checkpoint): the trial keeps its config and resumes from its own
 * checkpoint, and the scheduler forgets the exploit (a revert record, so a
 * replay agrees). */
static int decide_skip_exploit(struct server *s, struct srv_experiment *e, struct srv_trial *t,
                               uint64_t *ticket) {
  struct sched_outcome o = {0};
  char why[SCHED_REASON_MAX];
  o.action = SCHED_EXPLOIT;
  int rc = sched_exploit_refused(e->sched, t->id, &o);
  if (rc == -ENOENT) rc = 0;
  if (rc) return rc;
  if (t->exploit_old_config) {
    free(t->config);
    t->config = t->exploit_old_config;
    t->exploit_old_config = NULL;
  }
  snprintf(why, sizeof why, "exploit of trial %lld skipped: it stored no checkpoint",
           (long long)t->exploit_donor);
  log_warn("trial %lld: %s", (long long)t->id, why);
  t->exploit_donor = 0;
  rc = decide_note(s, t, "resumed", why, NULL, o.record, ticket);
  sched_outcome_clear(&o);
  return rc;
}

/* Carries out (or skips) the waiting exploits of e's trials whose donor is
 * d (NULL: every donor): those whose donor stored a checkpoint of the
 * result it was ranked at; with final (the donor's lease ended: nothing
 * more comes), every one with what the donor stored. A trial PAUSED while
 * it waited becomes PENDING in its next generation; a running one becomes
 * PENDING when its lease ends, as any exploit. */
static int decide_resolve_waits(struct server *s, struct srv_experiment *e,
                                const struct srv_trial *d, int final, uint64_t *ticket) {
  int64_t left = 0;
  int rc = 0;
  for (int64_t k = 0; !rc && k < e->ntrials; k++) {
    struct srv_trial *t = e->trials[k];
    if (!t || !t->exploit_donor) continue;
    if (t->lease_end_action != SCHED_EXPLOIT ||
        (t->status != TS_RUNNING && t->status != TS_PAUSED)) {
      t->exploit_donor = 0; /* ended or stopped meanwhile: nothing due */
      continue;
    }
    if (d && t->exploit_donor != d->id) {
      left++;
      continue;
    }
    struct srv_trial *dn = server_trial(s, t->exploit_donor);
    int src = dn ? decide_donor_source(dn, t->exploit_iter, final) : DONOR_NONE;
    if (!src && !final) {
      left++;
      continue;
    }
    if (src) {
      rc = decide_copy_donor(s, e, t, dn, src, ticket);
      if (!rc)
        log_info("trial %lld: trial %lld's checkpoint of iteration %lld copied", (long long)t->id,
                 (long long)dn->id, (long long)t->checkpoint_iteration);
      free(t->exploit_old_config);
      t->exploit_old_config = NULL;
      t->exploit_donor = 0;
    } else {
      rc = decide_skip_exploit(s, e, t, ticket);
    }
    if (rc) break;
    if (t->status == TS_PAUSED) {
      t->lease_end_action = 0;
      state_trial_next_generation(t);
      rc = state_trial_event(s, t, TE_RESUME, NULL, ticket);
    } else {
      t->updated_seq = ++s->seq;
      rc = state_persist_trial(s, t, ticket);
    }
  }
  e->exploit_waits = rc ? e->exploit_waits : left;
  return rc;
}

int decide_checkpoint_stored(struct server *s, struct srv_trial *d, uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, d->experiment_id);
  if (!e) return 0;
  if (d->rank_top && (double)d->checkpoint_iteration >= d->rank_iter &&
      !(d->has_snap && (double)d->snap_iter >= d->rank_iter)) {
    /* The first upload that covers the result it was ranked top at: kept
     * for the trials that clone it, while it goes on uploading. */
    struct decide_op *op = calloc(1, sizeof *op);
    if (!op) return -ENOMEM;
    op->snap_of = d->id;
    op->rec_seq = s->seq;
    int rc = decide_enqueue(s, op, ticket);
    if (rc) return rc;
    d->has_snap = 1;
    d->snap_iter = d->checkpoint_iteration;
  }
  if (e->exploit_waits <= 0) return 0;
  return decide_resolve_waits(s, e, d, 0, ticket);
}

int decide_donor_done(struct server *s, struct srv_trial *d, uint64_t *ticket) {
  struct srv_experiment *e = server_experiment(s, d->experiment_id);
  if (!e || e->exploit_waits <= 0) return 0;
  return decide_resolve_waits(s, e, d, 1, ticket);
}

int decide_refuses_checkpoint(const struct srv_trial *t) {
  return t->lease_end_action == SCHED_EXPLOIT;
}

int decide_lease_end(struct server *s, struct srv_trial *t, uint64_t *ticket) {
  int action = t->lease_end_action;
  if (!action || t->status != TS_RUNNING) return 0;
  t->lease_end_action = 0;
  state_release(s, t);
  t->worker_id = 0;
  t->unlisted_since_ms = 0;
  int rc;
  struct srv_experiment *ue = server_experiment(s, t->experiment_id);
  if (action == SCHED_STOP) {
    /* A pause-pending trial a later decision stopped (decide_end_others):
     * it ends now, its final uploads still taken. */
    t->lease_final = 1;
    rc = state_trial_event(s, t, TE_STOP, NULL, ticket);
  } else if (action == SCHED_PAUSE && ue && ue->status == ES_RUNNING && t->reason &&
             !strcmp(t->reason, control_pause_reason)) {
    /* Its experiment was paused and resumed before this lease ended: it
     * goes straight back to PENDING (resumed from its checkpoint by its next
     * lease). */
    t->lease_final = 1;
    state_trial_next_generation(t);
    rc = state_trial_event(s, t, TE_RESUME, NULL, ticket);
    if (!rc) log_info("trial %lld PENDING: its experiment was resumed", (long long)t->id);
  } else if (action == SCHED_PAUSE) {
    /* Its final uploads (from the lease that paused it) are still taken. */
    t->lease_final = 1;
    rc = state_trial_event(s, t, TE_PAUSE, NULL, ticket);
    if (!rc) log_info("trial %lld PAUSED", (long long)t->id);
  } else if (t->exploit_donor) {
    /* Its donor's checkpoint is not stored yet: PAUSED until it is
     * (decide_resolve_waits), the exploit still due; its own uploads stay
     * refused. */
    t->lease_end_action = SCHED_EXPLOIT;
    t->lease_final = 0;
    rc = state_trial_event(s, t, TE_PAUSE, NULL, ticket);
    if (!rc)
      log_info("trial %lld PAUSED: waits for trial %lld's checkpoint", (long long)t->id,
               (long long)t->exploit_donor);
  } else {
    /* The old lease wrote its last: its checkpoint was replaced. Its next
     * results are a new generation (persisted with the row); the old
     * lease's replays are told stop (not_leased). */
    t->lease_final = 0;
    state_trial_next_generation(t);
    rc = state_trial_event(s, t, TE_EXPLOIT, NULL, ticket);
    if (!rc) log_info("trial %lld PENDING: resumes from its donor's checkpoint", (long long)t->id);
  }
  return rc ? rc : 1;
}

struct decide_resume_ctx {
  struct server *s;
};

static int decide_resumable(void *ctx, int64_t trial_id) {
  struct decide_resume_ctx *c = ctx;
  struct srv_trial *t = server_trial(c->s, trial_id);
  return t && t->status == TS_PAUSED;
}

int decide_choose(struct server *s, struct srv_experiment *e, int can_new,
                  enum sched_choice_kind *kind, struct srv_trial **resumed, uint64_t *ticket) {
  struct sched_choice c;
  struct decide_resume_ctx ctx = {s};
  *resumed = NULL;
  int rc = sched_choose(e->sched, can_new, decide_resumable, &ctx, &c);
  if (rc) return rc;
  *kind = c.kind;
  if (c.kind == SCHED_CHOOSE_RESUME) {
    struct srv_trial *t = server_trial(s, c.trial_id);
    if (!t || t->experiment_id != e->id || t->status != TS_PAUSED) {
      sched_choice_clear(&c);
      *kind = SCHED_CHOOSE_WAIT;
      return 0;
    }
    t->lease_final = 0;
    /* Its next lease resumes from its checkpoint, which may be older than
     * the result where it paused: the time values it sends again are new
     * results of its next generation, answered by the scheduler, not
     * replays of the stored stop (the pause). Persisted with the row, in
     * the write that makes it PENDING. */
    state_trial_next_generation(t);
    rc = state_trial_event(s, t, TE_RESUME, NULL, ticket);
    const char *ek = !strncmp(c.reason, "promoted", 8) ? "promoted" : "resumed";
    if (!rc) rc = decide_note(s, t, ek, c.reason[0] ? c.reason : "resumed", NULL, c.record, ticket);
    if (!rc) *resumed = t;
  }
  sched_choice_clear(&c);
  return rc;
}

static int decide_end_one(struct server *s, struct srv_trial *t, const char *kind, const char *why,
                          uint64_t *ticket) {
  int rc = decide_note(s, t, kind, why, NULL, NULL, ticket);
  if (!rc) rc = state_trial_event(s, t, TE_STOP, NULL, ticket);
  return rc;
}

int decide_end_paused(struct server *s, struct srv_experiment *e, uint64_t *ticket) {
  int rc = 0;
  /* Over the server's trials: works whether or not the experiment keeps its
   * own list. */
  for (int64_t k = 0; !rc && e->counts[TS_PAUSED] > 0 && k < s->ntrials; k++) {
    struct srv_trial *t = s->trials[k];
    if (t && t->experiment_id == e->id && t->status == TS_PAUSED)
      rc = decide_end_one(s, t, "stopped",
                          "never promoted: the experiment ended while it was "
                          "paused",
                          ticket);
  }
  return rc;
}

int decide_end_others(struct server *s, struct srv_experiment *e, const struct sched_outcome *out,
                      uint64_t *ticket) {
  int rc = 0;
  for (size_t i = 0; !rc && out && i < out->nended; i++) {
    struct srv_trial *t = server_trial(s, out->ended[i].trial_id);
    const char *why = out->ended[i].reason[0] ? out->ended[i].reason : "stopped";
    if (!t || t->experiment_id != e->id) continue;
    if (t->status == TS_PAUSED) {
      t->stopped_early = 1;
      rc = decide_end_one(s, t, "stopped", why, ticket);
    } else if (t->status == TS_RUNNING && t->lease_end_action == SCHED_PAUSE) {
      /* Still uploading its final checkpoint: it ends with its lease. */
      t->lease_end_action = SCHED_STOP;
      t->stopped_early = 1;
      t->updated_seq = ++s->seq;
      rc = decide_note(s, t, "stopped", why, NULL, NULL, ticket);
      if (!rc) rc = state_persist_trial(s, t, ticket);
    }
  }
  return rc;
}

/* decide_end_paused ends trials through state_trial_event, which comes back
 * here through state_experiment_event: one pass at a time (all callers hold
 * s->lock). */
static int decide_ending;

int decide_maybe_end(struct server *s, struct srv_experiment *e, uint64_t *ticket) {
  if (decide_ending || e->status != ES_RUNNING || !e->counts[TS_PAUSED] || e->counts[TS_RUNNING] ||
      e->counts[TS_PENDING] || e->budget_spent)
    return 0;
  int can_new = !e->searcher_exhausted && e->ntrials < e->num_trials;
  if (can_new) return 0;
  if (e->exploit_waits > 0) {
    /* Nothing runs: no donor's checkpoint is on its way any more. */
    int rc = decide_resolve_waits(s, e, NULL, 1, ticket);
    if (rc || e->counts[TS_PENDING]) return rc;
  }
  enum sched_choice_kind kind = SCHED_CHOOSE_WAIT;
  struct srv_trial *resumed = NULL;
  int rc = decide_choose(s, e, 0, &kind, &resumed, ticket);
  if (rc || resumed) return rc; /* a promotion: PENDING, leased next */
  decide_ending = 1;
  rc = decide_end_paused(s, e, ticket);
  decide_ending = 0;
  if (!rc) rc = state_experiment_event(s, e, EE_MAYBE_END, NULL, ticket);
  return rc;
}

int decide_tick(struct server *s, uint64_t now_ms, uint64_t *ticket) {
  int rc = 0;
  for (int64_t i = 0; !rc && i < s->nexps; i++) {
    struct srv_experiment *e = s->exps[i];
    if (!e || e->status != ES_RUNNING || !(e->spec.time_budget_s > 0)) continue;
    if (e->run_clock_ms && now_ms > e->run_clock_ms)
      e->run_time_s += (double)(now_ms - e->run_clock_ms) / 1000.0;
    e->run_clock_ms = now_ms;
    int persist = now_ms - e->run_saved_ms >= 1000;
    if (!e->budget_spent && e->run_time_s >= e->spec.time_budget_s) {
      e->budget_spent = 1;
      /* Nothing more is created or leased: the lease path checks
       * budget_spent (docs/protocol.md#stop-rules-and-time-budget). */
      persist = 1;
      char why[SCHED_REASON_MAX];
      snprintf(why, sizeof why, "time_budget_s %g spent", e->spec.time_budget_s);
      log_info("experiment %lld: %s", (long long)e->id, why);
      for (int64_t k = 0; !rc && k < s->ntrials; k++) {
        struct srv_trial *t = s->trials[k];
        if (t && t->experiment_id == e->id && (t->status == TS_PENDING || t->status == TS_PAUSED))
          rc = decide_end_one(s, t, "time_budget", why, ticket);
      }
      if (!rc && !e->end_reason && !(e->end_reason = strdup(why))) rc = -ENOMEM;
    }
    if (!rc && e->budget_spent && e->status == ES_RUNNING && e->counts[TS_RUNNING] == 0 &&
        e->counts[TS_PENDING] == 0) {
      /* Spent and idle: over (state_experiment_event persists the row). */
      e->run_saved_ms = now_ms;
      rc = state_experiment_event(s, e, EE_MAYBE_END, NULL, ticket);
      persist = 0;
    }
    if (!rc && persist) {
      e->run_saved_ms = now_ms;
      e->updated_seq = ++s->seq;
      rc = state_persist_experiment(s, e, ticket);
    }
  }
  return rc;
}

struct decide_events_ctx {
  cJSON *arr, *attempts;
};

int decide_is_attempt_kind(const char *kind) {
  static const char *const kinds[] = {"leased", "lease_lost", "released", "preempted", "failed"};
  for (size_t i = 0; kind && i < sizeof kinds / sizeof kinds[0]; i++)
    if (!strcmp(kind, kinds[i])) return 1;
  return 0;
}

static int decide_event_row(void *ctx, const struct store_event_row *r) {
  struct decide_events_ctx *c = ctx;
  cJSON *o = cJSON_CreateObject();
  cJSON *into = decide_is_attempt_kind(r->kind) ? c->attempts : c->arr;
  if (!o || !cJSON_AddItemToArray(into, o)) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  cJSON *data = r->data ? cJSON_Parse(r->data) : cJSON_CreateNull();
  if (!cJSON_AddNumberToObject(o, "seq", (double)r->seq) ||
      !cJSON_AddNumberToObject(o, "time", r->time) ||
      !cJSON_AddStringToObject(o, "kind", r->kind ? r->kind : "") ||
      !cJSON_AddStringToObject(o, "reason", r->reason ? r->reason : "") ||
      !cJSON_AddItemToObject(o, "data", data ? data : cJSON_CreateNull()))
    return -ENOMEM;
  return 0;
}

int decide_events_json(struct server *s, int64_t trial_id, cJSON **events, cJSON **attempts) {
  struct decide_events_ctx c = {cJSON_CreateArray(), cJSON_CreateArray()};
  *events = *attempts = NULL;
  int rc = c.arr && c.attempts ? 0 : -ENOMEM;
  /* The rows exist once everything queued before this read is committed. */
  if (!rc) commit_flush(s->commit);
  if (!rc) rc = store_trial_events(s->store, trial_id, decide_event_row, &c);
  if (rc) {
    cJSON_Delete(c.arr);
    cJSON_Delete(c.attempts);
    return rc;
  }
  *events = c.arr;
  *attempts = c.attempts;
  return 0;
}

int decide_load_record(struct server *s, int64_t experiment_id, int64_t trial_id,
                       const char *record) {
  struct srv_experiment *e = server_experiment(s, experiment_id);
  cJSON *r = record ? cJSON_Parse(record) : NULL;
  int rc = e && r ? sched_restore(e->sched, trial_id, r) : -EINVAL;
  /* PBT's ranked result's iteration (decide_note_rank). */
  const cJSON *it = r ? cJSON_GetObjectItemCaseSensitive(r, "iter") : NULL;
  struct srv_trial *t = cJSON_IsNumber(it) ? server_trial(s, trial_id) : NULL;
  if (!rc && t) {
    t->rank_iter = it->valuedouble;
    t->rank_top = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ckpt"));
  }
  cJSON_Delete(r);
  return rc;
}

int decide_pause_lease(struct server *s, struct srv_trial *t, uint64_t *ticket) {
  if (t->status != TS_RUNNING || t->lease_end_action == SCHED_PAUSE) return 0;
  /* What a result would have been answered (decide_override): stop, and
   * PAUSED with its checkpoint when this lease ends. */
  t->lease_end_action = SCHED_PAUSE;
  int rc = decide_note(s, t, "paused", control_pause_reason, NULL, NULL, ticket);
  if (rc) return rc;
  t->updated_seq = ++s->seq;
  log_info("trial %lld: %s (told at its heartbeat; pauses when its lease ends)", (long long)t->id,
           control_pause_reason);
  return state_persist_trial(s, t, ticket);
}
