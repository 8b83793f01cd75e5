/* sse: the Server-Sent Events streams of GET /api/v1/events, fed by the
 * state layer's change-feed ring (state/events.h). */
#ifndef CTUNE_SSE_H
#define CTUNE_SSE_H

#include "api.h"

/* Starts the feed at the model's change counter (once the model is loaded),
 * subscribes to the ring, and starts the keepalive ticker. */
int sse_start(struct server *s);
/* Ends every stream (none stays suspended) and the ticker. */
void sse_stop(void);
/* GET /api/v1/events (routes.c). */
int sse_events(struct server *s, const struct api_req *req, struct api_resp *resp);

#endif
