/* fifo: the scheduler that lets every trial run to its end, or to max_t
 * when the spec sets one; the only one whose max_t may be raised while it
 * runs (nothing it planned depends on it). Its sched_ops table: it keeps no
 * state of its own, only the params in struct sched. */
#include "sched_ops.h"

#include <errno.h>

static int fifo_create(struct sched *s, const struct sched_params *params, uint64_t seed) {
  (void)params;
  (void)seed;
  s->st = NULL;
  return 0;
}

static void fifo_free(void *st) { (void)st; }

static size_t fifo_mem_bytes(const void *st) {
  (void)st;
  return 0;
}

static int fifo_add_trial(struct sched *s, int64_t trial_id, int64_t idx, const char *config_json) {
  (void)s;
  (void)trial_id;
  (void)idx;
  (void)config_json;
  return 0;
}

static int fifo_on_result(struct sched *s, int64_t trial_id, double t, const double *value,
                          struct sched_outcome *out) {
  (void)trial_id;
  (void)value;
  sched_outcome_max_t(s, t, out);
  return 0;
}

static int fifo_on_trial_end(struct sched *s, int64_t trial_id, int has_last, double t,
                             const double *last_value, struct sched_outcome *out) {
  (void)s;
  (void)trial_id;
  (void)has_last;
  (void)t;
  (void)last_value;
  if (out) sched_outcome_reset(out);
  return 0;
}

static int fifo_raise_max_t(struct sched *s, double max_t) {
  if (!(max_t >= s->p.max_t)) return -EINVAL;
  s->p.max_t = max_t;
  return 0;
}

static int fifo_state_json(const struct sched *s, cJSON **out) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return -ENOMEM;
  if (!cJSON_AddStringToObject(o, "type", "fifo") ||
      !cJSON_AddStringToObject(o, "time_attr", s->p.time_attr) ||
      !(s->p.has_max_t ? cJSON_AddNumberToObject(o, "max_t", s->p.max_t)
                       : cJSON_AddNullToObject(o, "max_t"))) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  *out = o;
  return 0;
}

const struct sched_ops fifo_sched_ops = {
    .create = fifo_create,
    .free = fifo_free,
    .mem_bytes = fifo_mem_bytes,
    .add_trial = fifo_add_trial,
    .on_result = fifo_on_result,
    .on_trial_end = fifo_on_trial_end,
    .raise_max_t = fifo_raise_max_t,
    .state_json = fifo_state_json,
};
