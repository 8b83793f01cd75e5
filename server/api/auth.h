/* auth: the token file (created beside the database by default), bearer and
 * dashboard-session checks, and the request-head checks against cross-site
 * requests and DNS rebinding (Host, Origin, Content-Type). */
#ifndef CTUNE_AUTH_H
#define CTUNE_AUTH_H

#include <stddef.h>

#include "route.h"

struct server;
struct api_resp;
struct auth_sessions;

/* The dashboard's read-only role: GET/HEAD on admin routes. Not a route
 * access level (route.h), only a caller's role. */
#define AUTH_VIEWER 100

/* Reads "admin=TOKEN" and "worker=TOKEN" lines, and an optional
 * "viewer=TOKEN" ('#' comments, blank lines allowed). admin and worker must be
 * present, all distinct, and 16..255 characters of [A-Za-z0-9._~+/=-]. A file
 * that group or other may read or write is refused (as ssh does). viewer may
 * be NULL (the line is then checked but dropped). -EINVAL / -EIO / -EPERM
 * with err saying what is wrong where and how to fix it. */
int auth_load(const char *path, char *admin, char *worker, char *viewer, size_t cap, char *err,
              size_t errlen);

/* The default token file: "<db>.tokens" is loaded when it exists, else
 * created with fresh tokens (admin, worker, viewer: 256 random bits each,
 * URL-safe base64), mode 0600, atomically (a temporary file linked into
 * place: two starts never both win, a reader never sees half a file).
 * *created says which. Same errors as auth_load. */
int auth_default_file(const char *db, char *path, size_t pathlen, char *admin, char *worker,
                      char *viewer, size_t cap, int *created, char *err, size_t errlen);

/* Access granted by an Authorization header value (may be NULL): RA_ADMIN,
 * RA_WORKER, AUTH_VIEWER (viewer may be "" for none), or -1 for none. */
int auth_role(const char *authorization, const char *admin, const char *worker, const char *viewer);

/* 1 when addr is a loopback address: "localhost", or a numeric IPv4 in
 * 127.0.0.0/8, ::1 or ::ffff:127.x (a name such as 127.example.com is not). */
int auth_is_loopback(const char *addr);

/* A token bucket: at most `burst` at once, then `per_s` a second. */
struct auth_rate {
  double tokens, last; /* tokens left at `last` (seconds, any monotonic clock) */
  int started;
};
/* Takes one token at time now: 0, or -EAGAIN with *wait_s the seconds until
 * the next one. */
int auth_rate_take(struct auth_rate *r, double burst, double per_s, double now, double *wait_s);

/* Dashboard sessions: random ids kept in memory, each mapped to a role. */
int auth_sessions_new(struct auth_sessions **out);
void auth_sessions_free(struct auth_sessions *ss);
/* Creates a session for role; id gets its value (cap >= 64). */
int auth_session_create(struct auth_sessions *ss, int role, char *id, size_t cap);
/* The role of session id, or -1. */
int auth_session_lookup(struct auth_sessions *ss, const char *id);
/* The role of the session named by the request's Cookie header, or -1. */
int auth_session_role(struct server *s, const char *cookie_header);
/* The session cookie's name: one per port, so that two servers on one host
 * (cookies ignore ports) do not overwrite each other's. */
void auth_cookie_name(const struct server *s, char *buf, size_t n);

/* Every check that needs only the request head, in this order: the Host is
 * one of this server's names (421 bad_host: DNS rebinding), a state-changing
 * request's Origin is this server (403 bad_origin: cross-site requests), a
 * POST with a body is application/json (415 unsupported_media_type: simple
 * cross-site form or text/plain posts), and the caller's token or session
 * grants the route (401 unauthorized / 403 forbidden). route is NULL when no
 * route matched (only the Host is checked). Returns 0 to go on, 1 after
 * filling resp with the refusal. */
int auth_check_request_head(struct server *s, void *conn,
                            const char *(*header)(void *conn, const char *key),
                            enum route_method meth, const char *url, const struct route *route,
                            struct api_resp *resp);

#endif
