/* http: libmicrohttpd glue — bodies, limits, auth, the routing table,
 * replies held back until their commit, latency metrics. */
#ifndef CTUNE_HTTP_H
#define CTUNE_HTTP_H

#include "state.h"

#define HTTP_MAX_BODY (1024 * 1024)
#define HTTP_MAX_LOG (256 * 1024)

struct http;
struct api_resp;
struct MHD_Response;

/* Binds and starts serving; *port_out is the bound port. -EADDRINUSE etc. */
int http_start(struct server *s, struct http **out, int *port_out, char *err, size_t errlen);
/* Stops accepting, answers what is in flight, stops. */
void http_stop(struct http *h);

/* The open connections: over how many HTTP threads, and the most that one
 * of them serves. */
void http_conn_spread(struct http *h, int *threads, int *most);

/* The replies most requests get (a result's decision, for each
 * X-Ctune-Role a result can carry), built once. */
#define HTTP_NSHARED 6
/* A buffered reply's libmicrohttpd response with its content type, headers
 * and the security headers; it takes p->body. NULL: out of memory. */
struct MHD_Response *http_response_new(struct api_resp *p);
/* Builds shared[]: 0 or -ENOMEM (none is left built). */
int http_shared_new(struct MHD_Response *shared[HTTP_NSHARED]);
void http_shared_free(struct MHD_Response *shared[HTTP_NSHARED]);
/* The shared response that answers p byte for byte (same body, content type
 * and headers), or NULL. */
struct MHD_Response *http_shared_find(struct MHD_Response *const shared[HTTP_NSHARED],
                                      const struct api_resp *p);

#endif
