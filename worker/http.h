/* Asynchronous HTTP client: libcurl's multi-socket interface driven by the
 * worker's libuv loop (uv_poll per socket, one uv_timer for curl's timeouts),
 * so no request ever blocks the loop. */
#ifndef CTUNE_WORKER_HTTP_H
#define CTUNE_WORKER_HTTP_H

#include <stddef.h>

#include <uv.h>

struct http_resp {
  long status; /* 0 when no response arrived */
  char *body;  /* NUL-terminated (may contain NULs for binary bodies) */
  size_t len;
  char *headers; /* raw response header lines */
  size_t hlen;
  char local_ip[64]; /* this end of the connection ("" unknown) */
};

/* err is 0 when a response arrived (any status), else -EIO/-ETIMEDOUT/
 * -ECONNREFUSED with resp->status 0. resp is only valid during the call. */
typedef void (*http_cb)(void *arg, int err, const struct http_resp *resp);

struct http_client;

/* PEM CA bundle that verifies an https:// server instead of the system
 * store (CURLOPT_CAINFO); the string must outlive every client. NULL (the
 * default): the system store. Verification is never turned off. */
void http_set_ca_file(const char *path);

int http_client_new(uv_loop_t *loop, const char *base_url, const char *token,
                    struct http_client **out);
/* The bearer token of later requests (the worker's own secret once it has
 * registered); NULL or "" for none. Requests already made keep theirs. */
int http_client_set_token(struct http_client *c, const char *token);
/* method "GET", "POST" or "PUT"; body may be NULL; extra_headers is a
 * NULL-terminated list of "Name: value" (an "Authorization: ..." among them
 * replaces the client's token for that request) or NULL. 0 or -ENOMEM/-EIO.
 */
int http_request(struct http_client *c, const char *method, const char *path,
                 const char *content_type, const char *body, size_t len,
                 const char *const *extra_headers, long timeout_ms, http_cb cb, void *arg);
/* Requests in flight. */
int http_pending(const struct http_client *c);

/* The sockets of curl's open connections that the client has a poll
 * handle for (kept between transfers, dropped when curl closes them). */
int http_sockets(const struct http_client *c);
/* Value of a response header (case-insensitive name) copied into buf; NULL
 * when absent. */
const char *http_resp_header(const struct http_resp *r, const char *name, char *buf, size_t len);
/* Abandons requests in flight, calling their callbacks with -ECANCELED (and
 * refusing new requests), and closes the handles; the memory is freed once
 * the loop has run the close callbacks. */
void http_client_close(struct http_client *c);

#endif
