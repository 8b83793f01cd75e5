/* state_live: the live experiments and the fair-share order of leases
 * (ARCHITECTURE.md#the-live-list, docs/protocol.md#fair-share).
 *
 * A lease that scanned every experiment ever submitted, in id order, would
 * pay for every finished experiment, and one large experiment would starve
 * every later one. s->live holds only the RUNNING experiments (an array with each
 * experiment's position in it, so entering and leaving are O(1)); a lease
 * collects the ones with work and room and tries them in the fair order:
 * smallest running/priority first, the older first on a tie. */
#include <errno.h>
#include <stdlib.h>

#include "state.h"

/* After this many experiments tried by scans (the first usually has a
 * trial), the rest of the candidates are sorted once: a lease stays
 * O(n log n) even when most experiments' schedulers wait (HyperBand). */
#define FAIR_SCANS 8

double state_experiment_priority(const struct srv_experiment *e) {
  return e->priority > 0 ? e->priority : 1.0;
}

int state_fair_before(const struct srv_experiment *a, const struct srv_experiment *b) {
  /* running_a / prio_a < running_b / prio_b, without the division's
   * rounding: both priorities are > 0. */
  double la = (double)a->counts[TS_RUNNING] * state_experiment_priority(b);
  double lb = (double)b->counts[TS_RUNNING] * state_experiment_priority(a);
  if (la != lb) return la < lb;
  return a->id < b->id;
}

static int fair_cmp(const void *pa, const void *pb) {
  const struct srv_experiment *a = *(struct srv_experiment *const *)pa;
  const struct srv_experiment *b = *(struct srv_experiment *const *)pb;
  if (state_fair_before(a, b)) return -1;
  if (state_fair_before(b, a)) return 1;
  return 0;
}

void state_fair_pick(struct srv_experiment **c, int64_t n, int64_t k) {
  if (k >= n || k > FAIR_SCANS) return; /* sorted at k == FAIR_SCANS */
  if (k == FAIR_SCANS) {
    qsort(c + k, (size_t)(n - k), sizeof *c, fair_cmp);
    return;
  }
  int64_t best = k;
  for (int64_t i = k + 1; i < n; i++)
    if (state_fair_before(c[i], c[best])) best = i;
  struct srv_experiment *tmp = c[k];
  c[k] = c[best];
  c[best] = tmp;
}

int state_live_reserve(struct server *s, int64_t need) {
  if (need <= s->caplive) return 0;
  int64_t nc = s->caplive ? s->caplive : 16;
  while (nc < need) nc *= 2;
  struct srv_experiment **live = realloc(s->live, (size_t)nc * sizeof *live);
  if (!live) return -ENOMEM;
  s->live = live;
  s->caplive = nc;
  return 0;
}

int state_live_sync(struct server *s, struct srv_experiment *e) {
  int running = e->status == ES_RUNNING;
  if (running && !e->live_pos) {
    int rc = state_live_reserve(s, s->nlive + 1);
    if (rc) return rc;
    s->live[s->nlive++] = e;
    e->live_pos = s->nlive;
  } else if (!running && e->live_pos) {
    /* Swap with the last: the order of s->live means nothing. */
    int64_t i = e->live_pos - 1;
    struct srv_experiment *last = s->live[--s->nlive];
    s->live[i] = last;
    last->live_pos = i + 1;
    e->live_pos = 0;
  }
  return 0;
}

int state_live_rebuild(struct server *s) {
  /* Room first, so that a failure leaves the old list as it was (a failed
   * state_reload puts the old model back). */
  int64_t n = 0;
  for (int64_t i = 0; i < s->nexps; i++) n += s->exps[i] && s->exps[i]->status == ES_RUNNING;
  int rc = state_live_reserve(s, n);
  if (rc) return rc;
  s->nlive = 0;
  for (int64_t i = 0; i < s->nexps; i++)
    if (s->exps[i]) s->exps[i]->live_pos = 0;
  for (int64_t i = 0; i < s->nexps; i++)
    if (s->exps[i]) (void)state_live_sync(s, s->exps[i]); /* room reserved: cannot fail */
  return 0;
}

void state_live_free(struct server *s) {
  free(s->live);
  free(s->fair);
  s->live = s->fair = NULL;
  s->nlive = s->caplive = s->capfair = 0;
}
