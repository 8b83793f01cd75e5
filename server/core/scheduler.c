/* sched: one interface over every scheduler. Each type fills its own
 * struct sched_ops (sched_ops.h) in its own file; this file picks the table
 * at create, checks what is common to every type, and answers for the
 * entries a type leaves NULL. */
#include "scheduler.h"
#include "sched_ops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void sched_choice_clear(struct sched_choice *c) {
  if (!c) return;
  cJSON_Delete(c->record);
  memset(c, 0, sizeof *c);
}

/* The one place that knows which table serves which params. */
static const struct sched_ops *ops_for(const struct sched_params *p) {
  switch (p->type) {
  case SPEC_SCHED_FIFO:
    return &fifo_sched_ops;
  case SPEC_SCHED_ASHA:
    return p->promotion ? &apromo_sched_ops : &asha_sched_ops;
  case SPEC_SCHED_HYPERBAND:
    return &hb_sched_ops;
  case SPEC_SCHED_PBT:
    return &pbt_sched_ops;
  case SPEC_SCHED_MEDIAN:
    return &median_sched_ops;
  }
  return NULL;
}

int sched_create(const struct sched_params *params, enum spec_mode mode, uint64_t seed,
                 struct sched **out) {
  const struct sched_ops *ops = params ? ops_for(params) : NULL;
  struct sched *s;
  int rc;
  *out = NULL;
  if (!ops) return -EINVAL;
  s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->ops = ops;
  s->p = *params;
  s->mode = mode;
  /* pbt keeps its own copy of the mutations; the spec's may go. */
  s->p.pbt.mutations = NULL;
  rc = ops->create(s, params, seed);
  if (rc) {
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

void sched_free(struct sched *s) {
  if (!s) return;
  s->ops->free(s->st);
  free(s);
}

size_t sched_mem_bytes(const struct sched *s) {
  if (!s) return 0;
  return sizeof *s + s->ops->mem_bytes(s->st);
}

enum spec_sched_type sched_type(const struct sched *s) { return s->p.type; }

int sched_bracket_for(const struct sched *s, int64_t idx) {
  return s->ops->bracket_for ? s->ops->bracket_for(s, idx) : 0;
}

int sched_add_trial(struct sched *s, int64_t trial_id, int64_t idx, const char *config_json) {
  if (idx < 0) return -EINVAL;
  return s->ops->add_trial(s, trial_id, idx, config_json);
}

int sched_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                    struct sched_outcome *out) {
  if (isnan(t)) return -EINVAL;
  return s->ops->on_result(s, trial_id, t, value, out);
}

int sched_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                       const double *last_value, struct sched_outcome *out) {
  return s->ops->on_trial_end(s, trial_id, has_last, t, last_value, out);
}

int sched_choose(struct sched *s, int can_new, sched_resumable_fn resumable, void *ctx,
                 struct sched_choice *out) {
  memset(out, 0, sizeof *out);
  if (s->ops->choose) return s->ops->choose(s, can_new, resumable, ctx, out);
  out->kind = can_new ? SCHED_CHOOSE_NEW : SCHED_CHOOSE_WAIT;
  return 0;
}

int sched_restore(struct sched *s, int64_t trial_id, const cJSON *record) {
  /* fifo and asha-stopping never return a record. */
  return s->ops->restore ? s->ops->restore(s, trial_id, record) : -EINVAL;
}

int sched_raise_max_t(struct sched *s, double max_t) {
  return s->ops->raise_max_t ? s->ops->raise_max_t(s, max_t) : -EOPNOTSUPP;
}

int sched_exploit_refused(struct sched *s, int64_t trial_id, struct sched_outcome *out) {
  return s->ops->exploit_refused ? s->ops->exploit_refused(s, trial_id, out) : 0;
}

int sched_restore_record(struct sched *s, int64_t trial_id, int bracket, double milestone,
                         double value, int stopped_early) {
  return s->ops->restore_record
             ? s->ops->restore_record(s, trial_id, bracket, milestone, value, stopped_early)
             : -EINVAL;
}

int sched_state_json(const struct sched *s, cJSON **out) {
  *out = NULL;
  return s->ops->state_json(s, out);
}
