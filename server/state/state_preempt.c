/* state_preempt: preempted releases, their lost work and the experiment's
 * counts of them, and the spot placement rule (state_preempt.h). */
#include "state_preempt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "store.h"

/* The number at key in t's last result (NAN: none). */
static double preempt_last(const struct srv_experiment *e, const struct srv_trial *t,
                           const char *key) {
  int k = state_key_index(e, key);
  if (k >= 0 && k < t->nseries && t->series[k].n > 0) return t->series[k].v[t->series[k].n - 1];
  cJSON *last = t->last_result ? cJSON_Parse(t->last_result) : NULL;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(last, key);
  double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  cJSON_Delete(last);
  return x;
}

struct preempt_loss state_preempt_loss(struct server *s, const struct srv_experiment *e,
                                       const struct srv_trial *t) {
  struct preempt_loss l = {0, 0};
  if (t->nres == 0) return l;
  double it = preempt_last(e, t, "training_iteration");
  if (!isfinite(it)) it = t->last_t;
  double ck = t->has_checkpoint ? (double)t->checkpoint_iteration : 0;
  if (it > ck) l.iterations = it - ck;
  double total = preempt_last(e, t, "time_total_s");
  double ck_total = state_checkpoint_time_total(s, e, t);
  if (isfinite(total) && total > ck_total) l.seconds = total - ck_total;
  return l;
}

void state_preempt_count(struct srv_experiment *e, const struct preempt_loss *l) {
  e->preemptions++;
  e->lost_iterations += l->iterations;
  e->lost_seconds += l->seconds;
}

int state_preempt_load_row(void *server, const struct store_event_row *r) {
  struct server *s = server;
  struct srv_experiment *e = server_experiment(s, r->experiment_id);
  if (!e) return 0; /* a deleted experiment's */
  cJSON *d = r->data ? cJSON_Parse(r->data) : NULL;
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(d, "lost_iterations");
  const cJSON *sec = cJSON_GetObjectItemCaseSensitive(d, "lost_seconds");
  struct preempt_loss l = {cJSON_IsNumber(it) ? it->valuedouble : 0,
                           cJSON_IsNumber(sec) ? sec->valuedouble : 0};
  cJSON_Delete(d);
  state_preempt_count(e, &l);
  return 0;
}

int state_preempt_rule(int worker_spot, int trial_precious, int nonspot_free) {
  return worker_spot && trial_precious && nonspot_free;
}

/* Resumed from PAUSED, or the PENDING trial of e with the most work behind
 * its checkpoint (ties: each of them). */
static int preempt_precious(const struct srv_experiment *e, const struct srv_trial *t) {
  if (t->promoted) return 1;
  if (!t->has_checkpoint) return 0;
  for (int64_t k = e->pending_cursor; k < e->ntrials; k++) {
    const struct srv_trial *o = e->trials[k];
    if (o != t && o->status == TS_PENDING && o->has_checkpoint &&
        o->checkpoint_iteration > t->checkpoint_iteration)
      return 0;
  }
  return 1;
}

static int preempt_has_room(const struct srv_worker *o, const struct spec_resources *r) {
  if (r->cpu > 0 && o->cpu - o->used_cpu < r->cpu - 1e-9) return 0;
  if (r->gpu > 0 && o->gpu - o->used_gpu < r->gpu - 1e-9) return 0;
  if (o->memory_mb > 0 && r->memory_mb > o->memory_mb - o->used_memory_mb) return 0;
  return 1;
}

int state_preempt_defer(struct server *s, const struct srv_worker *w,
                        const struct srv_experiment *e, const struct srv_trial *t) {
  if (!w->spot || !preempt_precious(e, t)) return 0;
  int nonspot_free = 0;
  for (int64_t i = 0; i < s->nworkers && !nonspot_free; i++) {
    const struct srv_worker *o = s->workers[i];
    nonspot_free =
        o && o != w && !o->spot && !o->lost && !o->gone && preempt_has_room(o, &e->spec.resources);
  }
  return state_preempt_rule(w->spot, 1, nonspot_free);
}
