/* sched_outcome: building and freeing a struct sched_outcome. Apart from
 * scheduler.c so that each scheduler's own file (its sched_ops table) uses
 * these without depending on the dispatcher that depends on it. */
#include "sched_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sched_outcome_clear(struct sched_outcome *o) {
  if (!o) return;
  cJSON_Delete(o->record);
  cJSON_Delete(o->new_config);
  free(o->ended);
  memset(o, 0, sizeof *o);
  o->asha.milestone_index = -1;
}

void sched_outcome_reset(struct sched_outcome *out) {
  memset(out, 0, sizeof *out);
  out->asha.milestone_index = -1;
  out->asha.milestone = NAN;
  out->asha.value = NAN;
  out->asha.cutoff = NAN;
}

void sched_outcome_max_t(const struct sched *s, double t, struct sched_outcome *out) {
  sched_outcome_reset(out);
  if (s->p.has_max_t && t >= s->p.max_t) {
    out->action = SCHED_STOP;
    out->asha.decision = ASHA_STOP;
    out->asha.reason = ASHA_REASON_MAX_T;
    snprintf(out->reason, sizeof out->reason, "reached max_t %g (%s %g)", s->p.max_t,
             s->p.time_attr, t);
  }
}
