/* events: the change feed behind GET /api/v1/events (issue 14, HACKING.md
 * "Events"). The state code notes every persisted change (kind, id) under
 * s->lock; a bounded ring keeps the newest EVENTS_RING of them with their
 * ids (the global change counter, strictly increasing), and the SSE streams
 * (api_events.c) read it without holding s->lock while they wait. */
#ifndef CTUNE_EVENTS_H
#define CTUNE_EVENTS_H

#include <stdint.h>

#include "server.h"

enum event_kind { EV_EXPERIMENT = 0, EV_TRIAL, EV_RESULT, EV_WORKER };

#define EVENTS_RING 8192

/* Notes one change (s->lock held). For EV_RESULT, id is the trial and
 * result_seq / json the result (copied; NULL json: read from the store). */
void events_note(struct server *s, enum event_kind kind, int64_t id, int64_t result_seq,
                 const char *json);
/* Starts the keepalive ticker (once, after the model is loaded: the feed
 * begins at s->seq) and ends every stream at shutdown. */
int events_start(struct server *s);
void events_stop(void);

/* issue 14 (api_workers.c): workers lost for --worker-retention-s leave the
 * list (lock held; run with the lease scan). */
void api_workers_prune(struct server *s, uint64_t now_ms);

#endif
