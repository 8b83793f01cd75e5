/* sched_ops: one scheduler type behind scheduler.h. Each scheduler fills its
 * own table in its own file (fifo.c, asha.c, asha_promo.c, hyperband.c,
 * median.c, pbt.c) and translates its own outcome there; scheduler.c picks
 * the table from the params once, at sched_create, and every sched_*
 * function calls through it. For those files only: the daemon includes
 * scheduler.h. */
#ifndef CTUNE_SCHED_OPS_H
#define CTUNE_SCHED_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>

#include "scheduler.h"

struct sched {
  const struct sched_ops *ops;
  void *st;              /* the type's own state; NULL for fifo */
  struct sched_params p; /* p.pbt.mutations is NULL: pbt keeps its own copy */
  enum spec_mode mode;
};

/* The arguments are sched_*'s (scheduler.h says what each must do); the
 * state is s->st. scheduler.c has already checked what is common to every
 * type: t is not NaN for on_result, idx >= 0 for add_trial, and choose's
 * out is zeroed. Required: create, free, mem_bytes, add_trial, on_result,
 * on_trial_end, state_json. A type without one of the others leaves it
 * NULL and scheduler.c answers for it: bracket_for 0, choose NEW (WAIT
 * when !can_new), restore and restore_record -EINVAL, exploit_refused 0,
 * raise_max_t -EOPNOTSUPP. */
struct sched_ops {
  /* Sets s->st from params (s->p is already params' copy). */
  int (*create)(struct sched *s, const struct sched_params *params, uint64_t seed);
  void (*free)(void *st);
  size_t (*mem_bytes)(const void *st);
  int (*bracket_for)(const struct sched *s, int64_t idx);
  int (*add_trial)(struct sched *s, int64_t trial_id, int64_t idx, const char *config_json);
  int (*on_result)(struct sched *s, int64_t trial_id, double t, const double *value,
                   struct sched_outcome *out);
  int (*on_trial_end)(struct sched *s, int64_t trial_id, int has_last, double t,
                      const double *last_value, struct sched_outcome *out);
  int (*choose)(struct sched *s, int can_new, sched_resumable_fn resumable, void *ctx,
                struct sched_choice *out);
  int (*restore)(struct sched *s, int64_t trial_id, const cJSON *record);
  int (*exploit_refused)(struct sched *s, int64_t trial_id, struct sched_outcome *out);
  int (*raise_max_t)(struct sched *s, double max_t);
  int (*restore_record)(struct sched *s, int64_t trial_id, int bracket, double milestone,
                        double value, int stopped_early);
  int (*state_json)(const struct sched *s, cJSON **out);
};

extern const struct sched_ops fifo_sched_ops;
extern const struct sched_ops asha_sched_ops;
extern const struct sched_ops apromo_sched_ops;
extern const struct sched_ops hb_sched_ops;
extern const struct sched_ops median_sched_ops;
extern const struct sched_ops pbt_sched_ops;

/* sched_outcome.c. Zeroes the outcome with asha's part saying "nothing
 * recorded". */
void sched_outcome_reset(struct sched_outcome *out);
/* sched_outcome_reset, then STOP with "reached max_t" when max_t is set and
 * t >= max_t: fifo's whole decision, and what the others answer for a
 * result without the metric. */
void sched_outcome_max_t(const struct sched *s, double t, struct sched_outcome *out);

#endif
