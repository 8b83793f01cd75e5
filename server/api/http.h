/* http: libmicrohttpd glue — bodies, limits, auth, the routing table,
 * replies held back until their commit, latency metrics. */
#ifndef CTUNE_HTTP_H
#define CTUNE_HTTP_H

#include "state.h"

#define HTTP_MAX_BODY (1024 * 1024)
#define HTTP_MAX_LOG (256 * 1024)

struct http;

/* Binds and starts serving; *port_out is the bound port. -EADDRINUSE etc. */
int http_start(struct server *s, struct http **out, int *port_out, char *err, size_t errlen);
/* Stops accepting, answers what is in flight, stops. */
void http_stop(struct http *h);

#endif
