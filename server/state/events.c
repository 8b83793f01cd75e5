/* events: the change-feed ring (events.h). Its own mutex, never held while
 * a subscriber is woken, so a reader may take its own locks around a read
 * (check, then park) without a lost wake-up: a note is in the ring before
 * its wake call starts. */
#include "events.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

struct events {
  pthread_mutex_t mu;
  struct event ring[EVENTS_RING];
  int64_t n;     /* events ever noted: ring[i % EVENTS_RING] for the newest */
  int64_t floor; /* a position below this cannot be resumed */
  int64_t last;  /* the newest id */
  void (*wake)(void *arg);
  void *wake_arg;
};

int events_new(struct events **out) {
  struct events *ev = calloc(1, sizeof *ev);
  if (!ev) return -ENOMEM;
  if (pthread_mutex_init(&ev->mu, NULL)) {
    free(ev);
    return -ENOMEM;
  }
  *out = ev;
  return 0;
}

void events_free(struct events *ev) {
  if (!ev) return;
  int64_t lo = ev->n > EVENTS_RING ? ev->n - EVENTS_RING : 0;
  for (int64_t i = lo; i < ev->n; i++) free(ev->ring[i % EVENTS_RING].json);
  pthread_mutex_destroy(&ev->mu);
  free(ev);
}

void events_begin(struct events *ev, int64_t seq) {
  pthread_mutex_lock(&ev->mu);
  ev->floor = ev->last = seq;
  pthread_mutex_unlock(&ev->mu);
}

void events_subscribe(struct events *ev, void (*wake)(void *arg), void *arg) {
  pthread_mutex_lock(&ev->mu);
  ev->wake = wake;
  ev->wake_arg = arg;
  pthread_mutex_unlock(&ev->mu);
}

void events_note(struct server *s, enum event_kind kind, int64_t id, int64_t result_seq,
                 const char *json) {
  struct events *ev = s->events;
  char *copy = json && strlen(json) <= EVENTS_MAX_COPY ? strdup(json) : NULL;
  pthread_mutex_lock(&ev->mu);
  /* Ids are the global change counter, kept strictly increasing: two notes
   * of one change get the next numbers, and the counter moves with them, so
   * the id is persisted with the hold's group (commit_group_close) and never
   * handed out again after a restart. */
  if (s->seq <= ev->last) s->seq = ev->last + 1;
  int64_t eid = s->seq;
  struct event *slot = &ev->ring[ev->n % EVENTS_RING];
  if (ev->n >= EVENTS_RING) {
    ev->floor = slot->id; /* overwritten: resuming before it is no longer possible */
    free(slot->json);
  }
  *slot = (struct event){.id = eid, .kind = kind, .obj = id, .rseq = result_seq, .json = copy};
  ev->n++;
  ev->last = eid;
  void (*wake)(void *) = ev->wake;
  void *arg = ev->wake_arg;
  pthread_mutex_unlock(&ev->mu);
  if (wake) wake(arg);
}

int64_t events_last(struct events *ev) {
  pthread_mutex_lock(&ev->mu);
  int64_t last = ev->last;
  pthread_mutex_unlock(&ev->mu);
  return last;
}

int events_read(struct events *ev, int64_t *pos, struct event *out, int max, int *reset) {
  int n = 0, rc = 0;
  *reset = 0;
  pthread_mutex_lock(&ev->mu);
  if (*pos < ev->floor || *pos > ev->last) {
    *pos = ev->last;
    *reset = 1;
  } else if (*pos < ev->last) {
    /* The first event after pos: ids increase along the ring. */
    int64_t lo = ev->n > EVENTS_RING ? ev->n - EVENTS_RING : 0, hi = ev->n;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (ev->ring[mid % EVENTS_RING].id <= *pos)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (int64_t i = lo; i < ev->n && n < max; i++) {
      const struct event *e = &ev->ring[i % EVENTS_RING];
      out[n] = *e;
      out[n].json = NULL;
      if (e->json && !(out[n].json = strdup(e->json))) {
        rc = -ENOMEM;
        break;
      }
      n++;
    }
    if (rc) {
      for (int i = 0; i < n; i++) free(out[i].json);
      n = 0;
    } else if (n) {
      *pos = out[n - 1].id;
    }
  }
  pthread_mutex_unlock(&ev->mu);
  return rc ? rc : n;
}
