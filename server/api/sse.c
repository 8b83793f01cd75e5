/* sse: GET /api/v1/events, a Server-Sent Events stream of the change feed
 * (state/events.h; docs/protocol.md#events).
 *
 * The feed is the state layer's ring of (id, kind, object id). A stream is a libmicrohttpd callback
 * response: its reader copies what is new out of the ring, renders it (taking s->lock only for
 * that, never while it waits) and, when there is nothing to send, suspends its connection; the
 * ring's wake-up (sse_wake) and the keepalive ticker resume it. So a waiting stream holds neither
 * the server's lock nor one of libmicrohttpd's threads, and is not cut by the idle timeout (http.c
 * sets its connection's timeout to none). A parked connection is not watched by libmicrohttpd, so
 * the ticker looks at the parked sockets every second itself: one whose client hung up (POLLRDHUP)
 * is resumed and ended at once, rather than at the next ": keepalive" comment 15 s later. */
#include "sse.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "auth.h"
#include "commit.h"
#include "events.h"
#include "log.h"
#include "store.h"
#include "testhook.h"

/* Streams at once, and per credential (a token, a dashboard session, or
 * without tokens a client address): one viewer cannot take them all. */
#define SSE_MAX_STREAMS 256
#define SSE_MAX_PER_CREDENTIAL 16
/* How often parked sockets are checked for a client that hung up (s). */
#define SSE_GONE_CHECK_S 1.0
/* Events rendered per reader call: a burst bigger than this goes out over
 * several calls, each continuing after the last id it sent. */
#define SSE_BATCH 64

struct stream {
  struct stream *prev, *next;
  struct MHD_Connection *conn;
  int64_t pos;   /* the last id sent (or asked to resume after) */
  int suspended; /* 1 parked by its reader, -1 resumed and not yet read (F.mu) */
  int ka_due;    /* the ticker asks for a keepalive */
  int gone;      /* the ticker saw its client hang up */
  int fd;        /* its socket (read by the ticker while parked) */
  uint64_t cred; /* which credential opened it (sse_credential) */
  char *out;     /* rendered, not yet handed to libmicrohttpd */
  size_t len, off;
};

/* The open streams. F.mu is taken before the ring's own lock (a reader
 * checks the ring and parks under F.mu), never after it: the ring calls
 * sse_wake after letting its lock go. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, stopping;
  struct stream *streams;
  int nstreams, nsuspended;
  pthread_t ticker;
  struct server *s;
  double keepalive_s;
} F = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void sse_wake_locked(void) {
  for (struct stream *c = F.streams; c; c = c->next)
    if (c->suspended == 1) {
      c->suspended = -1; /* still counted until its reader runs again */
      MHD_resume_connection(c->conn);
    }
}

/* The ring's subscriber: something was noted. */
static void sse_wake(void *arg) {
  (void)arg;
  pthread_mutex_lock(&F.mu);
  sse_wake_locked();
  pthread_mutex_unlock(&F.mu);
}

/* Parked streams whose client hung up are resumed to end. A parked
 * connection stays open (libmicrohttpd closes none while suspended), so its
 * fd is safe to poll under F.mu. */
static void sse_find_gone_locked(void) {
  struct pollfd pf[64];
  struct stream *who[64];
  struct stream *c = F.streams;
  while (c) {
    int n = 0;
    for (; c && n < 64; c = c->next)
      if (c->suspended == 1 && c->fd >= 0) {
        pf[n] = (struct pollfd){.fd = c->fd, .events = POLLRDHUP};
        who[n++] = c;
      }
    if (n && poll(pf, (nfds_t)n, 0) > 0)
      for (int i = 0; i < n; i++)
        if (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
          who[i]->gone = 1;
          who[i]->suspended = -1; /* still counted until its reader runs again */
          MHD_resume_connection(who[i]->conn);
        }
  }
}

static double sse_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *sse_ticker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&F.mu);
  double tick = F.keepalive_s < SSE_GONE_CHECK_S ? F.keepalive_s : SSE_GONE_CHECK_S;
  double next_ka = sse_now() + F.keepalive_s;
  while (!F.stopping) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double when = (double)ts.tv_sec + ts.tv_nsec / 1e9 + tick;
    ts.tv_sec = (time_t)when;
    ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
    int rc = pthread_cond_timedwait(&F.cv, &F.mu, &ts);
    if (F.stopping) break;
    if (rc != ETIMEDOUT) continue;
    sse_find_gone_locked();
    if (sse_now() < next_ka) continue;
    next_ka = sse_now() + F.keepalive_s;
    for (struct stream *c = F.streams; c; c = c->next) c->ka_due = 1;
    sse_wake_locked();
  }
  pthread_mutex_unlock(&F.mu);
  return NULL;
}

int sse_start(struct server *s) {
  events_begin(s->events, s->seq); /* nothing before the load is in the feed */
  events_subscribe(s->events, sse_wake, NULL);
  pthread_mutex_lock(&F.mu);
  F.s = s;
  F.stopping = 0;
  F.keepalive_s = 15;
  const char *env = TESTHOOK(TESTHOOK_SSE_KEEPALIVE_S);
  if (env && atof(env) > 0) F.keepalive_s = atof(env);
  int rc = F.started ? 0 : pthread_create(&F.ticker, NULL, sse_ticker, NULL);
  if (!rc) F.started = 1;
  pthread_mutex_unlock(&F.mu);
  return -rc;
}

void sse_stop(void) {
  pthread_mutex_lock(&F.mu);
  F.stopping = 1;
  pthread_cond_broadcast(&F.cv);
  sse_wake_locked();
  int started = F.started;
  F.started = 0;
  pthread_mutex_unlock(&F.mu);
  if (started) pthread_join(F.ticker, NULL);
  /* libmicrohttpd must not stop with a suspended connection: every resumed
   * stream's reader runs once more and ends it. */
  for (int i = 0; i < 400; i++) {
    pthread_mutex_lock(&F.mu);
    sse_wake_locked();
    int left = F.nsuspended;
    pthread_mutex_unlock(&F.mu);
    if (!left) break;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Appends one SSE frame: "id:", "event:", "data:" (one line: cJSON prints
 * compact JSON without newlines). */
static int sse_frame(char **out, size_t *len, int64_t id, const char *event, const char *data) {
  size_t need = strlen(data) + strlen(event) + 64;
  char *b = realloc(*out, *len + need);
  if (!b) return -ENOMEM;
  *out = b;
  *len += (size_t)snprintf(b + *len, need, "id: %lld\nevent: %s\ndata: %s\n\n", (long long)id,
                           event, data);
  return 0;
}

static int sse_result_cb(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  (void)seq;
  (void)trial_id;
  char **json = ctx;
  free(*json);
  *json = strdup(data);
  return *json ? 0 : -ENOMEM;
}

static const char *const sse_names[] = {"experiment", "trial", "result", "worker"};

/* The changed object as it is now; a deleted one as {"id", "deleted": true}. */
static cJSON *sse_object(struct server *s, const struct event *e) {
  cJSON *o = NULL;
  if (e->kind == EV_EXPERIMENT) {
    struct srv_experiment *x = server_experiment(s, e->obj);
    if (x) return api_experiment_json(s, x, 1);
  } else if (e->kind == EV_TRIAL) {
    struct srv_trial *t = state_trial_ref(s, e->obj); /* a cold experiment's: read back */
    if (t) return api_trial_json(s, t);
  } else if (e->kind == EV_WORKER) {
    struct srv_worker *w = server_worker(s, e->obj);
    if (w) return api_worker_json(s, w);
  }
  o = cJSON_CreateObject();
  if (o && (!cJSON_AddNumberToObject(o, "id", (double)e->obj) ||
            !cJSON_AddBoolToObject(o, "deleted", 1))) {
    cJSON_Delete(o);
    o = NULL;
  }
  return o;
}

/* Renders evs[0..n) into c->out. */
static int sse_render(struct server *s, struct stream *c, struct event *evs, int n) {
  int rc = 0, flushed = 0;
  for (int i = 0; !rc && i < n; i++) {
    struct event *e = &evs[i];
    char *text = NULL;
    if (e->kind == EV_RESULT) {
      if (!e->json) {
        /* The row exists once what was queued before this read committed. */
        if (!flushed) commit_flush(s->commit), flushed = 1;
        rc = store_results_by_seq(s->store, &e->rseq, 1, sse_result_cb, &e->json);
      }
      cJSON *o = cJSON_CreateObject(), *r = e->json ? cJSON_Parse(e->json) : cJSON_CreateNull();
      if (!o || !r || !cJSON_AddNumberToObject(o, "trial_id", (double)e->obj) ||
          !jsonout_add_int64(o, "seq", e->rseq) || !cJSON_AddItemToObject(o, "result", r)) {
        if (o && r && !cJSON_GetObjectItemCaseSensitive(o, "result")) cJSON_Delete(r);
        cJSON_Delete(o);
        rc = rc ? rc : -ENOMEM;
        break;
      }
      text = jsonout_print(o);
      cJSON_Delete(o);
    } else {
      server_lock(s);
      cJSON *o = sse_object(s, e);
      server_unlock(s);
      text = o ? jsonout_print(o) : NULL;
      cJSON_Delete(o);
    }
    if (!text)
      rc = -ENOMEM;
    else
      rc = sse_frame(&c->out, &c->len, e->id, sse_names[e->kind], text);
    free(text);
  }
  return rc;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  struct stream *c = cls;
  if (c->off < c->len) {
    size_t k = c->len - c->off < max ? c->len - c->off : max;
    memcpy(buf, c->out + c->off, k);
    c->off += k;
    return (ssize_t)k;
  }
  c->off = c->len = 0;
  struct event evs[SSE_BATCH];
  int n = 0, ka = 0, reset = 0;
  int64_t reset_at = -1;
  pthread_mutex_lock(&F.mu);
  if (c->suspended == -1) { /* resumed: the reader runs again */
    c->suspended = 0;
    F.nsuspended--;
  }
  if (F.stopping) {
    pthread_mutex_unlock(&F.mu);
    return MHD_CONTENT_READER_END_OF_STREAM;
  }
  if (c->gone) { /* nobody reads it: close the connection, no final chunk */
    pthread_mutex_unlock(&F.mu);
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  n = events_read(F.s->events, &c->pos, evs, SSE_BATCH, &reset);
  if (n < 0) {
    pthread_mutex_unlock(&F.mu);
    log_error("events: cannot read the feed (%d): closing the stream", n);
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  /* The client's position is older than the ring (or from before a
   * restart): it re-fetches its lists and follows from here. */
  if (reset) reset_at = c->pos;
  if (!n && reset_at < 0) {
    if (c->ka_due) {
      ka = 1;
      c->ka_due = 0;
    } else {
      /* Nothing to say: park the connection until events_note or the
       * ticker resumes it (no thread, no lock held meanwhile). */
      c->suspended = 1;
      F.nsuspended++;
      MHD_suspend_connection(c->conn);
      pthread_mutex_unlock(&F.mu);
      return 0;
    }
  }
  pthread_mutex_unlock(&F.mu);
  int rc = 0;
  if (reset_at >= 0) {
    char data[64];
    snprintf(data, sizeof data, "{\"seq\":%lld}", (long long)reset_at);
    rc = sse_frame(&c->out, &c->len, reset_at, "reset", data);
  } else if (ka) {
    static const char k[] = ": keepalive\n\n";
    char *b = realloc(c->out, sizeof k);
    if (!b)
      rc = -ENOMEM;
    else
      memcpy(b, k, sizeof k - 1), c->out = b, c->len = sizeof k - 1;
  } else {
    rc = sse_render(F.s, c, evs, n);
  }
  for (int i = 0; i < n; i++) free(evs[i].json);
  if (rc) {
    log_error("events: cannot render the stream (%d): closing it", rc);
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  return sse_read(cls, pos, buf, max);
}

static void sse_free(void *cls) {
  struct stream *c = cls;
  pthread_mutex_lock(&F.mu);
  if (c->prev)
    c->prev->next = c->next;
  else
    F.streams = c->next;
  if (c->next) c->next->prev = c->prev;
  F.nstreams--;
  if (c->suspended) F.nsuspended--;
  pthread_mutex_unlock(&F.mu);
  free(c->out);
  free(c);
}

static uint64_t sse_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull; /* FNV-1a */
  return h;
}

/* Which credential a request stands for: its bearer token, else its
 * dashboard session's id, else (a server without tokens) its address. */
static uint64_t sse_credential(struct server *s, const struct api_req *req) {
  uint64_t h = 14695981039346656037ull;
  const char *auth = req->header(req->conn, "Authorization");
  if (auth && *auth) return sse_hash(sse_hash(h, "A", 1), auth, strlen(auth));
  const char *cookie = req->header(req->conn, "Cookie");
  char name[32];
  auth_cookie_name(s, name, sizeof name);
  size_t nl = strlen(name);
  for (const char *p = cookie; p && *p;) {
    while (*p == ' ' || *p == ';') p++;
    size_t len = strcspn(p, ";");
    if (len > nl && !strncmp(p, name, nl) && p[nl] == '=')
      return sse_hash(sse_hash(h, "C", 1), p + nl + 1, len - nl - 1);
    p += len;
  }
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci ? ci->client_addr : NULL;
  h = sse_hash(h, "I", 1);
  if (sa && sa->sa_family == AF_INET)
    return sse_hash(h, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  if (sa && sa->sa_family == AF_INET6)
    return sse_hash(h, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  return h;
}

int sse_events(struct server *s, const struct api_req *req, struct api_resp *resp) {
  int64_t since = -1;
  if (api_query_int(req, resp, "since", 0, INT64_MAX, -1, &since)) return 0;
  const char *last = req->header(req->conn, "Last-Event-ID");
  if (last && *last) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(last, &end, 10);
    if (errno || *end || v < 0)
      return api_error(resp, 400, "invalid_header", "Last-Event-ID",
                       "Last-Event-ID must be "
                       "an event id (a non-negative integer)");
    since = v; /* the header wins: it is where the client's stream really is */
  }
  struct stream *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->conn = req->conn;
  c->fd = -1;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci) c->fd = ci->connect_fd;
  c->cred = sse_credential(s, req);
  pthread_mutex_lock(&F.mu);
  int mine = 0;
  for (struct stream *x = F.streams; x; x = x->next) mine += x->cred == c->cred && !x->gone;
  if (F.nstreams >= SSE_MAX_STREAMS || mine >= SSE_MAX_PER_CREDENTIAL || !F.started) {
    int started = F.started, all = F.nstreams;
    pthread_mutex_unlock(&F.mu);
    free(c);
    if (!started)
      api_error(resp, 503, "stopping", req->path, "the server is stopping");
    else if (mine >= SSE_MAX_PER_CREDENTIAL)
      api_error(resp, 503, "too_many_streams", req->path,
                "this token or session holds %d event streams already, the most one may hold; "
                "close one (or poll) and retry",
                mine);
    else
      api_error(resp, 503, "busy", req->path,
                "%d event streams are open, the most this server holds; retry later", all);
    api_header(resp, "Retry-After", "5");
    return 0;
  }
  /* No position: from now on. */
  c->pos = since < 0 ? events_last(s->events) : since;
  c->next = F.streams;
  if (F.streams) F.streams->prev = c;
  F.streams = c;
  F.nstreams++;
  pthread_mutex_unlock(&F.mu);
  resp->status = 200;
  resp->content_type = "text/event-stream";
  resp->stream_read = sse_read;
  resp->stream_free = sse_free;
  resp->stream_cls = c;
  api_header(resp, "Cache-Control", "no-cache");
  api_header(resp, "X-Accel-Buffering", "no");
  return 0;
}
