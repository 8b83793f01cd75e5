/* events: the change feed (docs/protocol.md#events). The state code notes
 * every persisted change (kind, id) under s->lock; a bounded ring keeps the
 * newest EVENTS_RING of them with their ids (the global change counter,
 * strictly increasing). Readers (the API's SSE streams, server/api/sse.c)
 * copy what is new out of it without holding s->lock, and subscribe a wake
 * callback to learn that something was noted: the ring knows nothing of
 * connections. */
#ifndef CTUNE_EVENTS_H
#define CTUNE_EVENTS_H

#include <stdint.h>

struct server;

enum event_kind { EV_EXPERIMENT = 0, EV_TRIAL, EV_RESULT, EV_WORKER };

#define EVENTS_RING 8192
/* Result JSON longer than this is not copied into the ring: a reader reads
 * it back from the store by its seq. */
#define EVENTS_MAX_COPY 4096

struct event {
  int64_t id;
  enum event_kind kind;
  int64_t obj;  /* experiment, trial or worker id (EV_RESULT: the trial) */
  int64_t rseq; /* EV_RESULT: the result's seq */
  char *json;   /* EV_RESULT: the result, when short (NULL: read the store) */
};

struct events;

int events_new(struct events **out);
void events_free(struct events *ev);
/* The feed begins at seq: nothing before it can be resumed (after the
 * model is loaded, before the first reader). */
void events_begin(struct events *ev, int64_t seq);
/* wake(arg) is called after each note, outside the ring's lock; one
 * subscriber (NULL: none). */
void events_subscribe(struct events *ev, void (*wake)(void *arg), void *arg);
/* Notes one change (s->lock held). For EV_RESULT, id is the trial and
 * result_seq / json the result (copied when short). */
void events_note(struct server *s, enum event_kind kind, int64_t id, int64_t result_seq,
                 const char *json);
/* The newest id. */
int64_t events_last(struct events *ev);
/* Copies up to max events after *pos into out (each json a copy the caller
 * frees) and moves *pos to the last one copied; returns how many. When *pos
 * is older than the ring (or from before a restart: past its newest id),
 * copies nothing, moves *pos to the newest id and sets *reset: the reader
 * re-fetches its lists and follows from there. -ENOMEM. */
int events_read(struct events *ev, int64_t *pos, struct event *out, int max, int *reset);

#endif
