/* api: what a route handler sees (a parsed request) and fills (a response),
 * independent of libmicrohttpd; plus the JSON reply helpers. */
#ifndef CTUNE_API_H
#define CTUNE_API_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "jsonout.h"
#include "route.h"
#include "state.h"

struct api_req {
  enum route_method method;
  const char *path;
  const struct route_match *match;
  const char *body;
  size_t body_len;
  /* A checkpoint upload is spooled to disk (http.c), never held in memory:
   * then body is "" and its body_len bytes are in the file body_fd (the
   * request's; a handler that keeps it past the call dup()s it). */
  int body_spooled;
  int body_fd;
  void *conn;
  /* A held request tried again (lease_wait.h): the deadline its first try
   * set; 0 on a first try. */
  uint64_t held_until_ms, held_mark;
  const char *(*query)(void *conn, const char *key);
  const char *(*header)(void *conn, const char *key);
};

#define API_MAX_HEADERS 4

struct api_resp {
  int status;
  char *body; /* malloc'd, owned by the response */
  size_t len;
  const char *content_type;
  struct {
    const char *name;
    char value[128]; /* a session cookie with its attributes fits */
  } headers[API_MAX_HEADERS];
  int nheaders;
  /* When nonzero the reply waits until this commit ticket is durable; a
   * failed commit turns it into a 500. */
  uint64_t ticket;
  /* A streamed reply (the event streams of sse.c): when stream_read is set,
   * http.c answers with a libmicrohttpd callback response of unknown size (no
   * idle timeout on that connection); stream_free(stream_cls) runs when it
   * ends. The signatures are libmicrohttpd's content reader's. */
  ssize_t (*stream_read)(void *cls, uint64_t pos, char *buf, size_t max);
  void (*stream_free)(void *cls);
  void *stream_cls;
  /* No reply yet (status 0): hold the request until the lease state's
   * generation moves past hold_gen or until hold_until_ms (clock_mono_ms),
   * then call the handler again (api_worker_lease's long-poll); hold_mark
   * comes back to it as held_mark. */
  uint64_t hold_until_ms, hold_gen, hold_mark;
};

typedef int (*api_handler)(struct server *s, const struct api_req *req, struct api_resp *resp);

/* The routing table (routes.c) and its handlers. */
extern const struct route api_routes[];
extern const size_t api_nroutes;
extern const api_handler api_handlers[];

/* The header that names the caller's role (auth_head.c) on every reply to an
 * authenticated request. */
#define API_ROLE_HEADER "X-Ctune-Role"

/* Replies. Each returns 0 (the handler's own return value) or -ENOMEM. */
int api_json(struct api_resp *r, int status, cJSON *body); /* takes body */
int api_error(struct api_resp *r, int status, const char *code, const char *path, const char *fmt,
              ...) __attribute__((format(printf, 5, 6)));
int api_no_content(struct api_resp *r);
/* A JSON reply of constant text (copied). */
int api_json_text(struct api_resp *r, int status, const char *text);
/* The reply to one result: {"decision":"continue"} or {"decision":"stop"},
 * as jsonout prints them (http.c answers them with shared responses). */
const char *api_decision_json(int stop);
void api_header(struct api_resp *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parses the body as one JSON object; on failure fills a 400 and returns NULL. */
/* The body as any JSON value: valid UTF-8, strict (jsonstrict), parsed; NULL
 * with a 400 in resp otherwise. */
cJSON *api_body_json(const struct api_req *req, struct api_resp *resp);
cJSON *api_body_object(const struct api_req *req, struct api_resp *resp, int empty_ok);
/* Strict JSON (common/jsonstrict.h) before any cJSON parse of a body: -EINVAL
 * after filling a 400 invalid_json naming the path of a NUL, a duplicate key or
 * trailing data. */
int api_json_strict(const struct api_req *req, struct api_resp *resp);
/* Parses an integer query parameter in [lo, hi]; absent gives *out = dflt.
 * -EINVAL after filling a 400 naming the parameter. */
int api_query_int(const struct api_req *req, struct api_resp *resp, const char *key, int64_t lo,
                  int64_t hi, int64_t dflt, int64_t *out);

/* Reads a resources object {"cpu", "gpu", "memory_mb"} (each optional, a
 * number >= 0) named `where` in a 400 when it is not one. */
int api_resources(const cJSON *o, const char *where, struct api_resp *resp, double *cpu,
                  double *gpu, int64_t *mem, int *has_mem);

/* JSON views of the model (the caller holds s->lock). */
cJSON *api_trial_json(struct server *s, const struct srv_trial *t);
/* The lease reply {"trial": {...}} of t (a gang member's with its rank) just
 * leased to w, logged as leased; NULL when out of memory. */
cJSON *api_lease_reply(struct server *s, const struct srv_worker *w, const struct srv_trial *t,
                       int rank);
/* The same in two steps, so that a long list is copied under the lock and
 * turned into JSON after it: take (lock held), json and drop (no lock). */
struct api_trial_view {
  struct srv_trial t; /* scalars, plus owned copies of the four strings */
  struct spec_resources res;
  char reason[256];
  int constrained; /* its experiment has outcome constraints */
};
int api_trial_view_take(struct server *s, const struct srv_trial *t, struct api_trial_view *v);
cJSON *api_trial_view_json(const struct api_trial_view *v);
/* Bounded memory: reads the last result of the compact trials among views
 * from SQLite (one statement; no lock needed). */
int api_trial_views_fill(struct server *s, struct api_trial_view *views, size_t n);
void api_trial_view_drop(struct api_trial_view *v);
cJSON *api_experiment_json(struct server *s, struct srv_experiment *e, int with_config);
/* Wall-clock time as JSON: a number, or null when 0. */
cJSON *api_time(double t);
/* Several objectives: adds "metrics" and "modes" (every objective, in
 * order) to o; nothing for one metric or none. 0 or -ENOMEM. */
int api_add_objectives(cJSON *o, const struct experiment_spec *spec);
/* Outcome constraints: adds "constraint_metrics" (each constrained metric
 * once, in order: what every result must carry besides the objectives) to
 * o; nothing without constraints. 0 or -ENOMEM. */
int api_add_constraint_metrics(cJSON *o, const struct experiment_spec *spec);

/* GET .../pareto (docs/protocol.md#pareto-front), api_pareto.c: adds
 * reference_point (and its source), hypervolume and hypervolume_history to
 * o, from the scores of the trials ids[0..n) (sorted; n x k, NaN: none) and
 * their front (on). Takes the lock itself (the reference point of
 * experiment exp_id, the order of the trials' last changes). 0 or -ENOMEM. */
int api_pareto_summary(struct server *s, cJSON *o, int64_t exp_id, const int64_t *ids,
                       const double *scores, const unsigned char *on, size_t n, int k,
                       const enum spec_mode *modes);
/* GET /trials/{id} of an experiment with several objectives: adds
 * "pareto_rank" (by the trials' last results) to o (api_experiments.c).
 * Takes the lock itself. */
int api_pareto_rank_add(struct server *s, int64_t trial_id, cJSON *o);

/* docs/protocol.md#pages: `limit` (1..API_PAGE_MAX, default dflt_limit) and
 * `cursor` (the previous page's next_cursor; absent: from the start) of a
 * list request; *after is the position the page starts after. -EINVAL after
 * filling a 400. api_page_next adds "next_cursor" (null when !more). */
#define API_PAGE_MAX 10000
int api_page_args(const struct api_req *req, struct api_resp *resp, int64_t dflt_limit,
                  int64_t *limit, int64_t *after);
int api_page_next(cJSON *root, int more, int64_t after);
/* A worker as GET /workers lists it (lock held). */
cJSON *api_worker_json(struct server *s, const struct srv_worker *w);

#endif
