/* state_cold: bounded memory for finished experiments
 * (ARCHITECTURE.md#cold-experiments). A while after an experiment ends, its trials leave memory: it
 * is *cold* — its counts, its best (by its metric, scope last), its
 * scheduler and its row stay; its trials are SQLite's. A request that needs
 * them warms it (state_experiment_warm, state_load.c reads them back as
 * compact trials), and it goes cold again when it has not been needed for
 * a while. The structs it lets go are freed later still: a request may hold
 * a pointer it took before the lock was released. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "state.h"
#include "state_internal.h"

#define STATE_GRAVE_MS 30000

void state_cold_later(struct server *s, struct srv_experiment *e, uint64_t now_ms) {
  /* On no memory it stays warm: more memory, nothing wrong. */
  if (!e->cold && !e->deleted) due_queue_push(&s->coldq, e->id, now_ms + s->cold_delay_ms);
}

/* A struct let go, freed once no request can still hold it. */
static int grave_add(struct server *s, void *p, uint64_t now_ms) {
  if (s->graves_head > 0 && s->graves_head == s->graves_len) s->graves_head = s->graves_len = 0;
  if (s->graves_len == s->graves_cap) {
    int64_t nc = s->graves_cap ? s->graves_cap * 2 : 1024;
    struct grave *g = realloc(s->graves, (size_t)nc * sizeof *g);
    if (!g) return -ENOMEM;
    s->graves = g;
    s->graves_cap = nc;
  }
  s->graves[s->graves_len++] = (struct grave){p, now_ms + STATE_GRAVE_MS};
  return 0;
}

static int cold_eligible(const struct srv_experiment *e) {
  return !e->cold && !e->deleted && !e->unusable &&
         (e->status == ES_TERMINATED || e->status == ES_CANCELLED) &&
         e->counts[TS_PENDING] + e->counts[TS_RUNNING] + e->counts[TS_PAUSED] == 0;
}

/* Its trials leave memory. Room for the graves is made first, so that a
 * failure leaves it warm and whole. */
static void cold_make(struct server *s, struct srv_experiment *e, uint64_t now_ms) {
  for (int64_t i = 0; i < e->ntrials; i++)
    if (e->trials[i]->status != TS_TERMINATED && e->trials[i]->status != TS_ERROR) return;
  int64_t need = s->graves_len + e->ntrials;
  if (need > s->graves_cap) {
    struct grave *g = realloc(s->graves, (size_t)need * sizeof *g);
    if (!g) return;
    s->graves = g;
    s->graves_cap = need;
  }
  /* Its best as the experiment JSON shows it (api_best_memory: scope
   * last, its mode, the earliest of equals). */
  e->has_cold_best = 0;
  for (int64_t i = 0; i < e->ntrials; i++) {
    struct srv_trial *t = e->trials[i];
    state_trial_compact(s, t);
    double v = t->scores[BEST_SUM_LAST];
    /* Outcome constraints: the best among the feasible (api_best_memory). */
    if (e->spec.has_metric && isfinite(v) && t->violation == 0 &&
        (!e->has_cold_best ||
         (e->spec.mode == SPEC_MODE_MAX ? v > e->cold_best_value : v < e->cold_best_value))) {
      e->has_cold_best = 1;
      e->cold_best_id = t->id;
      e->cold_best_value = v;
    }
  }
  for (int64_t i = 0; i < e->ntrials; i++) {
    struct srv_trial *t = e->trials[i];
    s->trials[t->id - 1] = NULL;
    grave_add(s, t, now_ms); /* room made above */
  }
  free(e->trials); /* read under the lock only */
  s->ncompact -= e->ntrials;
  e->cold_ntrials = e->ntrials;
  e->trials = NULL;
  e->ntrials = e->captrials = 0;
  searcher_free(e->searcher); /* made again from its trials when needed */
  e->searcher = NULL;
  e->cold = 1;
  s->ncold++;
}

void state_cold_due(struct server *s, uint64_t now_ms) {
  for (int64_t id; (id = due_queue_pop(&s->coldq, now_ms));) {
    struct srv_experiment *e = server_experiment(s, id);
    if (!e || !cold_eligible(e)) continue;
    /* Read since it was queued: again, a delay after that read. */
    if (e->read_ms && now_ms < e->read_ms + s->cold_delay_ms)
      state_cold_later(s, e, e->read_ms);
    else
      cold_make(s, e, now_ms);
  }
  while (s->graves_head < s->graves_len && s->graves[s->graves_head].due_ms <= now_ms) {
    struct srv_trial *t = s->graves[s->graves_head++].p;
    state_trial_free(t);
  }
}

struct srv_trial *state_trial_ref(struct server *s, int64_t id) {
  struct srv_trial *t = server_trial(s, id);
  if (t || id < 1 || id > s->ntrials || s->trials[id - 1]) return t;
  /* An empty slot: a trial of a cold experiment. */
  int64_t eid = 0;
  if (store_trial_experiment(s->store, id, &eid)) return NULL;
  struct srv_experiment *e = server_experiment(s, eid);
  if (!e || !e->cold || state_experiment_warm(s, e)) return NULL;
  return server_trial(s, id);
}

void state_cold_free(struct server *s) {
  for (int64_t i = s->graves_head; i < s->graves_len; i++) state_trial_free(s->graves[i].p);
  free(s->graves);
  s->graves = NULL;
  s->graves_head = s->graves_len = s->graves_cap = 0;
  due_queue_free(&s->coldq);
}
