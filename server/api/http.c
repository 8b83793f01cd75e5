/* http: one libmicrohttpd daemon (epoll, a small thread pool). A write's reply
 * is held (the connection suspended) until the commit thread made it durable. */
#include "http.h"
#include "gang.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "clock.h"
#include "lease_wait.h"
#include "secret.h"
#include "sse.h"
#include "log.h"
#include "static_path.h"
#include "testhook.h"
#include "trace.h"

/* Past this much of an oversized chunked body (no Content-Length) the
 * connection is closed unanswered. */
#define HTTP_MAX_DROP (64u * 1024 * 1024)
/* Request bodies held in memory by all connections together: past it a new
 * body is answered 503 before it is read. Checkpoints go to a spool file on
 * disk and are not counted. */
#define HTTP_BODY_BUDGET ((size_t)256 * 1024 * 1024)
/* Connections one client address may hold, of every kind (one host's
 * flood). Those without a credential have their own, smaller budgets below,
 * so that they never use this one up. */
#define HTTP_PER_IP_CONNECTIONS 1024u
/* Connections that have not (yet) sent a request with a valid credential:
 * one address may hold this many, all addresses together HTTP_ANON_TOTAL
 * (loopback has 2^24 addresses). A new connection past either closes the
 * oldest idle one of them: a slow or idle anonymous client loses its
 * socket, a new one (whose head takes milliseconds) is served. */
#define HTTP_ANON_PER_IP 64
#define HTTP_ANON_TOTAL 1024
/* A connection idle this long (a request head or body that stopped coming,
 * an idle keep-alive) is closed. A test build may shorten it (testhook.h).
 * A first request head must be complete a third of it (10 s) after the
 * connection was accepted (slowloris: one header byte every few seconds is
 * never idle). */
#define HTTP_IDLE_TIMEOUT_S 30u

/* One accepted connection (MHD's socket context), for the budgets above. */
struct http_conn {
  struct http_conn *prev, *next;
  unsigned char addr[16]; /* the client's address (IPv4 in the first 4 bytes) */
  int family;
  int fd;
  double t0;           /* accepted (clock_mono_s) */
  int heads;           /* request heads that arrived */
  int authed;          /* a request on it carried a valid credential */
  int busy;            /* inside a request: never closed from outside */
  int evicted;         /* shut down by us; MHD closes it */
  uint64_t trace_done; /* its last reply went out (trace builds) */
  const void *thread;  /* the libmicrohttpd thread (worker daemon) serving it */
};

struct http {
  struct server *s;
  struct MHD_Daemon *d;
  /* MHD must not be stopped while a connection is suspended: count them
   * (until MHD hands them back to us) and refuse new work when stopping. */
  atomic_int suspended;
  atomic_int stopping;
  atomic_int active;        /* handlers between dispatch and suspend-or-reply */
  atomic_size_t body_bytes; /* in-memory request bodies reserved (budget) */
  char spool_dir[4096];     /* checkpoint uploads are spooled here (the db's dir) */
  /* The open connections (conns_mu). A connection is shut down from
   * another thread only under conns_mu and while it is listed: MHD's
   * NOTIFY_CLOSED unlists it (taking conns_mu) before it closes the fd. */
  pthread_mutex_t conns_mu;
  pthread_cond_t conns_cv;
  struct http_conn *conns;
  int nanon;            /* listed, not authed, not evicted */
  double head_deadline; /* a third of the idle timeout */
  pthread_t reaper;
  int reaper_started, reaper_stop;
  struct MHD_Response *shared[HTTP_NSHARED]; /* http_shared_new */
  /* The listening socket and the thread that accepts on it (http_acceptor). */
  int listen_fd;
  pthread_t acceptor;
  int acceptor_started;
  atomic_int accept_stop;
};

/* REQ_PARKED: a lease request held until a trial may be leasable for it
 * (lease_wait.h); resumed, it is dispatched again. */
enum req_state { REQ_READING = 0, REQ_WAITING, REQ_READY, REQ_PARKED, REQ_SENT };

struct http_req {
  struct http *h;
  struct server *s;
  struct MHD_Connection *conn;
  struct http_conn *hc; /* its connection's budget entry (NULL: none) */
  double t0;
  char *body;
  size_t len, cap, limit;
  int too_large;
  size_t dropped;
  int fd;          /* >= 0: the body goes to this spool file (checkpoint PUT) */
  int io_error;    /* writing the spool file failed: its errno */
  size_t reserved; /* bytes of the in-memory budget this request holds */
  enum req_state state;
  uint64_t ticket;         /* what the reply waits for: the request's lock holds */
  struct commit_hold hold; /* its lock holds: own groups and what it saw */
  int commit_status;
  struct api_resp resp;
  struct lease_waiter wait; /* REQ_PARKED: its place among the held leases */
  uint64_t held_until_ms;   /* a held request's deadline (0: not held yet) */
  uint64_t held_mark;       /* what its handler noted when it first held it */
  uint64_t tr[5];           /* trace builds: head, dispatch, handled, committed, resumed */
  struct route_match m;     /* the route http_head found (m.route NULL: none) */
};

static const char *http_query(void *conn, const char *key) {
  return MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);
}

static const char *http_header(void *conn, const char *key) {
  return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, key);
}

static int http_ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

/* -- connection budgets ------------------------------------------------ */

static int http_same_addr(const struct http_conn *a, const struct http_conn *b) {
  return a->family == b->family && !memcmp(a->addr, b->addr, sizeof a->addr);
}

/* Shuts down c's socket: MHD sees the end, closes it and calls
 * http_conn_notify(CLOSED). Under conns_mu. */
static void http_conn_evict(struct http *h, struct http_conn *c, const char *why) {
  if (c->evicted) return;
  c->evicted = 1;
  if (!c->authed) h->nanon--;
  if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
  log_debug("http: closed a connection %s", why);
}

/* The oldest idle connection without a credential: of c's address, or
 * (same == NULL) of any. Under conns_mu. */
static struct http_conn *http_conn_oldest_anon(struct http *h, const struct http_conn *same,
                                               int *count) {
  struct http_conn *oldest = NULL;
  int n = 0;
  for (struct http_conn *x = h->conns; x; x = x->next) {
    if (x->authed || x->evicted || (same && !http_same_addr(x, same))) continue;
    n++;
    if (!x->busy && (!oldest || x->t0 < oldest->t0)) oldest = x;
  }
  if (count) *count = n;
  return oldest;
}

static void http_conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe) {
  struct http *h = cls;
  if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
    struct http_conn *c = *socket_context;
    if (!c) return;
    pthread_mutex_lock(&h->conns_mu);
    if (!c->authed && !c->evicted) h->nanon--;
    if (c->prev)
      c->prev->next = c->next;
    else
      h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&h->conns_mu);
    free(c);
    *socket_context = NULL;
    return;
  }
  struct http_conn *c = calloc(1, sizeof *c);
  if (!c) return; /* not counted: it is served like any other */
  c->t0 = clock_mono_s();
  c->fd = -1;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci) c->fd = ci->connect_fd;
  ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
  c->thread = ci ? ci->daemon : NULL;
  ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci ? ci->client_addr : NULL;
  if (sa && sa->sa_family == AF_INET) {
    c->family = AF_INET;
    memcpy(c->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else if (sa && sa->sa_family == AF_INET6) {
    c->family = AF_INET6;
    memcpy(c->addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  }
  pthread_mutex_lock(&h->conns_mu);
  int mine = 0;
  struct http_conn *old = http_conn_oldest_anon(h, c, &mine);
  if (mine >= HTTP_ANON_PER_IP && old)
    http_conn_evict(h, old, "without a credential: its address holds too many");
  else if (h->nanon >= HTTP_ANON_TOTAL && (old = http_conn_oldest_anon(h, NULL, NULL)))
    http_conn_evict(h, old, "without a credential: the server holds too many");
  c->next = h->conns;
  if (h->conns) h->conns->prev = c;
  h->conns = c;
  h->nanon++;
  pthread_mutex_unlock(&h->conns_mu);
  *socket_context = c;
}

/* A request's head arrived on c (busy until http_completed). */
static void http_conn_begin(struct http *h, struct http_conn *c) {
  if (!c) return;
  pthread_mutex_lock(&h->conns_mu);
  c->heads++;
  c->busy = 1;
  pthread_mutex_unlock(&h->conns_mu);
}

/* The request on c carried a valid credential: c leaves the anonymous
 * budgets for good (keep-alive requests on it are the same client's). */
static void http_conn_authed(struct http *h, struct http_conn *c) {
  if (!c) return;
  pthread_mutex_lock(&h->conns_mu);
  if (!c->authed && !c->evicted) h->nanon--;
  c->authed = 1;
  pthread_mutex_unlock(&h->conns_mu);
}

static void http_conn_end(struct http *h, struct http_conn *c) {
  if (!c) return;
  pthread_mutex_lock(&h->conns_mu);
  c->busy = 0;
  pthread_mutex_unlock(&h->conns_mu);
}

/* Ends connections whose first request head is late (slowloris). */
static void *http_reaper(void *arg) {
  struct http *h = arg;
  double tick = h->head_deadline / 4 < 1 ? h->head_deadline / 4 : 1, last = clock_mono_s();
  pthread_mutex_lock(&h->conns_mu);
  while (!h->reaper_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double when = (double)ts.tv_sec + ts.tv_nsec / 1e9 + tick;
    ts.tv_sec = (time_t)when;
    ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&h->conns_cv, &h->conns_mu, &ts);
    double now = clock_mono_s();
    /* The whole process stood still (SIGSTOP, a paused VM): that time was
     * not the clients'. Their heads may be in the socket, unread. */
    if (now - last > tick + 1)
      for (struct http_conn *c = h->conns; c; c = c->next) c->t0 += now - last - tick;
    last = now;
    for (struct http_conn *c = h->conns; c; c = c->next)
      if (!c->heads && !c->busy && now - c->t0 > h->head_deadline)
        http_conn_evict(h, c, "whose request head did not arrive in time");
  }
  pthread_mutex_unlock(&h->conns_mu);
  return NULL;
}

static void http_response_headers(struct MHD_Response *m, const struct api_resp *p) {
  if (p->content_type) MHD_add_response_header(m, MHD_HTTP_HEADER_CONTENT_TYPE, p->content_type);
  for (int i = 0; i < p->nheaders; i++)
    MHD_add_response_header(m, p->headers[i].name, p->headers[i].value);
  for (size_t i = 0; i < static_nsecurity_headers; i++) /* CSP, framing, nosniff */
    MHD_add_response_header(m, static_security_headers[i].name, static_security_headers[i].value);
}

struct MHD_Response *http_response_new(struct api_resp *p) {
  struct MHD_Response *m =
      MHD_create_response_from_buffer(p->len, p->body ? p->body : (void *)"",
                                      p->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!m) return NULL;
  p->body = NULL; /* MHD owns it now */
  http_response_headers(m, p);
  return m;
}

/* api_trial_report's replies to one result (api_decision_json), and the
 * X-Ctune-Role header the head check adds (none without tokens). */
static const char *const http_shared_roles[] = {NULL, "worker", "admin"};
#define HTTP_NROLES (sizeof http_shared_roles / sizeof http_shared_roles[0])
_Static_assert(HTTP_NSHARED == 2 * HTTP_NROLES, "one shared reply per body and role");

int http_shared_new(struct MHD_Response *shared[HTTP_NSHARED]) {
  for (int i = 0; i < HTTP_NSHARED; i++) {
    const char *body = api_decision_json((int)(i / HTTP_NROLES)),
               *role = http_shared_roles[i % HTTP_NROLES];
    struct api_resp p = {.status = 200, .len = strlen(body), .content_type = "application/json"};
    if (role) api_header(&p, API_ROLE_HEADER, "%s", role);
    /* a constant body: MHD must not free it */
    shared[i] = MHD_create_response_from_buffer(p.len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!shared[i]) {
      http_shared_free(shared);
      return -ENOMEM;
    }
    http_response_headers(shared[i], &p);
  }
  return 0;
}

void http_shared_free(struct MHD_Response *shared[HTTP_NSHARED]) {
  for (int i = 0; i < HTTP_NSHARED; i++) {
    if (shared[i]) MHD_destroy_response(shared[i]);
    shared[i] = NULL;
  }
}

struct MHD_Response *http_shared_find(struct MHD_Response *const shared[HTTP_NSHARED],
                                      const struct api_resp *p) {
  if (p->nheaders > 1 || p->stream_read || !p->body || !p->content_type ||
      strcmp(p->content_type, "application/json"))
    return NULL;
  size_t role = 0; /* no header */
  if (p->nheaders) {
    if (strcmp(p->headers[0].name, API_ROLE_HEADER)) return NULL;
    for (role = 1; role < HTTP_NROLES && strcmp(p->headers[0].value, http_shared_roles[role]);)
      role++;
    if (role == HTTP_NROLES) return NULL;
  }
  for (int stop = 0; stop < 2; stop++) {
    const char *body = api_decision_json(stop);
    if (p->len == strlen(body) && !memcmp(p->body, body, p->len))
      return shared[(size_t)stop * HTTP_NROLES + role];
  }
  return NULL;
}

static enum MHD_Result http_send(struct http_req *r) {
  struct api_resp *p = &r->resp;
  /* Every group is done once the ticket is (tickets end in order). One of
   * this request's own groups failed: 500 with the reason. Only a change it
   * saw (not its own) failed: what it answered from memory may not hold,
   * so 503, retry. */
  uint64_t failed = 0;
  int own_refused = 0;
  for (int i = 0; r->ticket && i < r->hold.nown && !failed; i++) {
    int st = commit_ticket_status(r->s->commit, r->hold.own[i]);
    if (st == -EIO)
      failed = r->hold.own[i];
    else if (st)
      own_refused = 1;
  }
  if (failed)
    r->commit_status = -EIO, r->ticket = failed;
  else if (own_refused || r->commit_status)
    r->commit_status = -EAGAIN;
  if (r->commit_status) {
    /* Whatever the handler answered is not true: its change is not stored. */
    char why[160];
    commit_failure_reason(r->s->commit, r->ticket, why, sizeof why);
    free(p->body);
    if (p->stream_read && p->stream_free) p->stream_free(p->stream_cls);
    memset(p, 0, sizeof *p);
    int rc = r->commit_status == -EAGAIN
                 ? api_error(p, 503, "store_retry", "",
                             "this change was not stored: it was queued "
                             "behind a change the database refused (%s); nothing of it was kept, "
                             "retry",
                             why[0] ? why : "unknown error")
                 : api_error(p, 500, "store_error", "",
                             "the database did not commit this change "
                             "(%s); nothing of it was stored",
                             why[0] ? why : "unknown error");
    if (rc) p->status = r->commit_status == -EAGAIN ? 503 : 500;
    if (r->commit_status == -EAGAIN) api_header(p, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  }
  struct MHD_Response *m;
  if (p->stream_read && !r->commit_status) {
    /* A stream (SSE): no size, read as it comes; an open stream is not idle,
     * its keepalives find dead clients instead of the idle timeout. */
    m = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, p->stream_read,
                                          p->stream_cls, p->stream_free);
    if (!m) return MHD_NO;
    p->stream_read = NULL; /* MHD owns stream_cls now */
    MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    http_response_headers(m, p);
  } else if (!r->commit_status && (m = http_shared_find(r->h->shared, p))) {
    /* the same bytes as a response of its own: queued again (MHD counts) */
    free(p->body);
    p->body = NULL;
    return MHD_queue_response(r->conn, (unsigned)p->status, m);
  } else if (!(m = http_response_new(p))) {
    return MHD_NO;
  }
  enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)p->status, m);
  MHD_destroy_response(m);
  return ret;
}

static void http_suspend(void *ctx) {
  struct http_req *r = ctx;
  r->state = REQ_WAITING;
  atomic_fetch_add(&r->h->suspended, 1);
  MHD_suspend_connection(r->conn);
}

static void http_park(void *ctx) {
  struct http_req *r = ctx;
  r->state = REQ_PARKED;
  atomic_fetch_add(&r->h->suspended, 1);
  MHD_suspend_connection(r->conn);
}

static void http_unpark(void *ctx) {
  struct http_req *r = ctx;
  MHD_resume_connection(r->conn);
}

/* A held request whose client hung up meanwhile: a parked connection is not
 * watched by libmicrohttpd, so its socket is looked at before the request is
 * tried again (a lease granted to it would be a lost reply). */
static int http_client_gone(struct http_req *r) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return 0;
  struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void http_committed(void *ctx, int status) {
  struct http_req *r = ctx;
  r->tr[3] = trace_ns();
  r->commit_status = status;
  r->state = REQ_READY;
  MHD_resume_connection(r->conn);
}

/* auth_check_request_head knows the admin, worker and viewer tokens; a
 * worker's own secret is shown to it as the worker token (what it is allowed
 * beyond that is decided by http_worker_access below). */
struct http_hdr_view {
  void *conn;
  const char *authorization; /* replaces the Authorization header when set */
};

static const char *http_header_view(void *ctx, const char *key) {
  struct http_hdr_view *v = ctx;
  if (v->authorization && !strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION)) return v->authorization;
  return http_header(v->conn, key);
}

static const char *http_bearer(void *conn) {
  const char *a = http_header(conn, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!a || strncasecmp(a, "Bearer ", 7)) return NULL;
  a += 7;
  while (*a == ' ') a++;
  return a;
}

/* Per-worker credentials (docs/protocol.md#worker-credentials): on a worker
 * route, the admin token reaches everything; the shared worker token only
 * registers; a worker's own secret reaches its own heartbeat and lease and
 * the trials it holds the lease of (the X-Ctune-Lease worker must be itself).
 * wid is the worker the secret belongs to (0: none). 1 after filling resp. */
static int http_worker_access(struct http_req *r, const struct route_match *m,
                              enum route_method meth, const char *url, int64_t wid) {
  struct server *s = r->s;
  struct api_resp *resp = &r->resp;
  const char *tok = http_bearer(r->conn);
  if (tok && secret_equal(tok, s->admin_token)) return 0;
  const char *pat = m->route->pattern;
  if (!strcmp(pat, "/api/v1/workers")) { /* registration */
    if (!wid) return 0;
    api_error(resp, 403, "forbidden", url,
              "register with the worker token, not with a "
              "worker's own secret");
    return 1;
  }
  if (!wid) {
    api_error(resp, 403, "forbidden", url,
              "the worker token only registers a worker: send "
              "the secret that registration returned (Authorization: Bearer <secret>)");
    return 1;
  }
  if (!strncmp(pat, "/api/v1/workers/{id}/", 21)) {
    if (m->ids[0] == wid) return 0;
    api_error(resp, 403, "forbidden", url, "worker %lld cannot act as worker %lld", (long long)wid,
              (long long)m->ids[0]);
    return 1;
  }
  if (strncmp(pat, "/api/v1/trials/{id}/", 20)) return 0;
  struct lease_token l = {0, 0};
  if (meth != RM_GET && state_parse_lease(http_header(r->conn, "X-Ctune-Lease"), &l)) {
    api_error(resp, 400, "missing_lease", "X-Ctune-Lease",
              "a trial-scoped write needs the "
              "header X-Ctune-Lease: <worker_id>:<attempt> (your worker id and the attempt "
              "from the lease reply)");
    return 1;
  }
  if (meth != RM_GET && l.worker_id != wid) {
    api_error(resp, 403, "forbidden", "X-Ctune-Lease",
              "worker %lld cannot write under worker "
              "%lld's lease",
              (long long)wid, (long long)l.worker_id);
    return 1;
  }
  pthread_mutex_lock(&s->lock); /* read only: nothing to commit */
  struct srv_trial *t = server_trial(s, m->ids[0]);
  /* A gang's member on another worker holds the trial's lease with rank 0
   * (its writes are fenced by rank too: gang_check_member). */
  int holds = t && (t->lease_worker_id == wid || gang_has_worker(t, wid, 0));
  int running_here =
      t && t->status == TS_RUNNING && (t->worker_id == wid || gang_has_worker(t, wid, 1));
  pthread_mutex_unlock(&s->lock);
  if (!t) return 0; /* the handler's 404 */
  if (meth == RM_GET && !running_here) {
    api_error(resp, 403, "forbidden", url,
              "trial %lld is not leased to worker %lld: only its "
              "current lessee may read its checkpoint",
              (long long)m->ids[0], (long long)wid);
    return 1;
  }
  if (meth != RM_GET && !holds) {
    /* Its own lease, but the trial went to another worker since: the same
     * answer the fence gives (the worker ends that attempt's queue). */
    api_error(resp, 409, "not_leased", url,
              "trial %lld is leased to another worker; nothing "
              "of this request was stored",
              (long long)m->ids[0]);
    return 1;
  }
  return 0;
}

/* A test build's spool fault (testhook.h): the errno that `what` ("open" or
 * "write") fails with, or 0. "WHAT=ERRNO@FILE" holds only while FILE exists,
 * so a test can end the fault of a running server (tests run as root, whom
 * chmod does not stop). */
static int http_spool_fault(const char *what) {
  const char *v = TESTHOOK(TESTHOOK_SPOOL_FAULT);
  size_t n = strlen(what);
  if (!v || strncmp(v, what, n) || v[n] != '=') return 0;
  const char *at = strchr(v + n + 1, '@');
  if (at && access(at + 1, F_OK) != 0) return 0;
  return atoi(v + n + 1);
}

/* Opens an unnamed file for a spooled body: O_TMPFILE beside the database,
 * else a named one unlinked at once. -1 with errno set. */
static int http_spool_open(const char *dir) {
  int fault = http_spool_fault("open");
  if (fault > 0) {
    errno = fault;
    return -1;
  }
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  char path[4200];
  snprintf(path, sizeof path, "%s/.ctune-upload-XXXXXX", dir);
  fd = mkostemp(path, O_CLOEXEC);
  if (fd >= 0) unlink(path);
  return fd;
}

/* Everything decided on the request head, before a byte of its body is
 * read: stopping, route (404/405), Host/Origin/Content-Type and token
 * (auth_check_request_head), per-worker access, the body's size (413, 411),
 * the memory budget (503), and where the body goes (an exact buffer, or a
 * spool file for checkpoints). 1 after filling r->resp: answer now. */
static int http_head(struct http_req *r, const char *url, const char *method) {
  struct server *s = r->s;
  struct api_resp *resp = &r->resp;
  struct route_match m;
  enum route_method meth = route_method_parse(method);
  if (atomic_load(&r->h->stopping)) {
    api_error(resp, 503, "stopping", url, "the server is shutting down; retry shortly");
    api_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    return 1;
  }
  int rc = route_find(api_routes, api_nroutes, meth, url, &m);
  if (!rc) r->m = m; /* the handler's, when the head passes */
  if (rc == -EOPNOTSUPP) {
    static const char *const names[] = {"GET", "POST", "PUT", "DELETE", "PATCH"};
    char allow[64] = "";
    struct route_match other;
    for (int i = 0; i < 5; i++)
      if (!route_find(api_routes, api_nroutes, (enum route_method)i, url, &other) && !other.rest) {
        if (allow[0]) strcat(allow, ", ");
        strcat(allow, names[i]);
      }
    api_error(resp, 405, "method_not_allowed", url, "%s is not allowed on %s (allowed: %s)", method,
              url, allow);
    api_header(resp, MHD_HTTP_HEADER_ALLOW, "%s", allow);
    return 1;
  }
  if (rc) {
    api_error(resp, 404, "not_found", url, "no route for %s %s", method, url);
    return 1;
  }
  /* The one check of --read-only: every route that is not a read changes
   * something, so none of them reaches a handler. */
  if (s->opt.read_only && meth != RM_GET && meth != RM_HEAD) {
    api_error(resp, 405, "read_only", url,
              "%s %s: this ctune-server serves %s read-only (--read-only): it changes "
              "nothing; send writes to the server that runs the experiments",
              method, url, s->opt.db_path);
    api_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    return 1;
  }
  /* A worker's own secret: which worker (0: none). */
  int64_t wid = 0;
  const char *tok = s->auth && m.route->access != RA_PUBLIC ? http_bearer(r->conn) : NULL;
  if (tok) {
    pthread_mutex_lock(&s->lock);
    struct srv_worker *w = state_worker_by_secret(s, tok);
    wid = w ? w->id : 0;
    pthread_mutex_unlock(&s->lock);
  }
  char as_worker[300];
  snprintf(as_worker, sizeof as_worker, "Bearer %s", s->worker_token);
  struct http_hdr_view view = {r->conn, wid ? as_worker : NULL};
  /* THE pre-body check of the request head (engineer "auth-default", auth.c):
   * Host, Origin, Content-Type, token or session. It runs here, on the first
   * call of the access handler, so its 401/403/415/421 go out before any of
   * the body is read. Add head checks inside it, not after this line. */
  if (auth_check_request_head(s, &view, http_header_view, meth, url, m.route, resp)) return 1;
  /* A credential this server gave (or no tokens at all): the connection
   * leaves the anonymous budgets. A public route proves nothing. */
  if (m.route->access != RA_PUBLIC) http_conn_authed(r->h, r->hc);
  if (s->auth && m.route->access == RA_WORKER && http_worker_access(r, &m, meth, url, wid))
    return 1;

  /* The body: refused or given its exact room before any of it arrives. */
  if (meth != RM_POST && meth != RM_PUT && meth != RM_PATCH) return 0;
  const char *cl = http_header(r->conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
  unsigned long long want = 0;
  if (cl) {
    char *end = NULL;
    errno = 0;
    want = strtoull(cl, &end, 10);
    if (errno || end == cl || *end || *cl == '-') {
      api_error(resp, 400, "invalid_header", "Content-Length", "bad Content-Length");
      return 1;
    }
    if (want > r->limit) {
      /* Authorised, a little too large: read and dropped (nothing kept) so
       * that a client that writes its whole body first still gets its 413
       * JSON; far too large: answered at once. */
      r->too_large = 1;
      if (want <= r->limit + HTTP_MAX_DROP) return 0;
      api_error(resp, 413, "payload_too_large", "", "request body is larger than %zu bytes",
                r->limit);
      return 1;
    }
  }
  if (meth == RM_PUT && http_ends_with(url, "/checkpoint")) {
    if (!cl) {
      api_error(resp, 411, "length_required", "Content-Length",
                "a checkpoint upload needs "
                "a Content-Length");
      return 1;
    }
    r->fd = http_spool_open(r->h->spool_dir);
    if (r->fd < 0) {
      /* The cause goes to the client too: a worker's log then says what
       * its operator must fix (a folder's permissions, a full disk). */
      const char *why = strerror(errno);
      log_error("http: cannot open a spool file in %s: %s", r->h->spool_dir, why);
      api_error(resp, 503, "spool_unavailable", "",
                "the server cannot take an upload now: it cannot create a spool file in its "
                "database's folder %.200s: %s; nothing was stored, retry",
                r->h->spool_dir, why);
      api_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "5");
      return 1;
    }
    return 0;
  }
  /* Without a length (chunked) the room is the route's limit. */
  size_t room = cl ? (size_t)want : r->limit;
  if (!room) return 0;
  size_t before = atomic_fetch_add(&r->h->body_bytes, room);
  r->reserved = room;
  if (before + room > HTTP_BODY_BUDGET) {
    api_error(resp, 503, "busy", "",
              "too many request bodies in flight (%zu MiB held of the server's %zu MiB); "
              "retry shortly",
              before >> 20, HTTP_BODY_BUDGET >> 20);
    api_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    return 1;
  }
  if (cl) {
    if (!(r->body = malloc(room + 1))) {
      api_error(resp, 503, "busy", "", "out of memory for the request body; retry shortly");
      return 1;
    }
    r->cap = room + 1;
  }
  return 0;
}

static void http_dispatch(struct http_req *r, const char *url, const char *method) {
  struct server *s = r->s;
  struct api_resp *resp = &r->resp;
  enum route_method meth = route_method_parse(method);
  if (atomic_load(&r->h->stopping)) {
    api_error(resp, 503, "stopping", url, "the server is shutting down; retry shortly");
    api_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    return;
  }
  if (r->too_large) {
    api_error(resp, 413, "payload_too_large", "", "request body is larger than %zu bytes",
              r->limit);
    return;
  }
  if (r->io_error) {
    api_error(resp, 503, "spool_error", "",
              "the server could not write the upload to its spool file in its database's "
              "folder %.200s: %s; nothing was stored, retry",
              r->h->spool_dir, r->io_error > 0 ? strerror(r->io_error) : "short write");
    api_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "5");
    return;
  }
  /* Routed and authorised on the head (http_head), which kept the match
   * (its rest points into the URL, which lives as long as the request). */
  if (!r->m.route) {
    api_error(resp, 404, "not_found", url, "no route for %s %s", method, url);
    return;
  }
  struct api_req req = {.method = meth,
                        .path = url,
                        .match = &r->m,
                        .body = r->body ? r->body : "",
                        .body_len = r->len,
                        .conn = r->conn,
                        .query = http_query,
                        .header = http_header,
                        .body_spooled = r->fd >= 0,
                        .body_fd = r->fd,
                        .held_until_ms = r->held_until_ms,
                        .held_mark = r->held_mark};
  int rc = api_handlers[r->m.route->handler](s, &req, resp);
  if (rc || (!resp->status && !resp->hold_until_ms)) {
    log_error("%s %s: handler failed (%d)", method, url, rc);
    free(resp->body);
    if (resp->stream_read && resp->stream_free) resp->stream_free(resp->stream_cls);
    memset(resp, 0, sizeof *resp);
    if (api_error(resp, 500, "internal", url, "internal error (%d)", rc)) resp->status = 500;
  }
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls) {
  (void)version;
  struct http *h = cls;
  struct http_req *r = *con_cls;
  if (!r) {
    r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    r->h = h;
    r->s = h->s;
    r->conn = conn;
    r->t0 = clock_mono_s();
    r->tr[0] = trace_ns();
    r->limit = HTTP_MAX_BODY;
    if (!strcmp(method, "PUT") && http_ends_with(url, "/checkpoint"))
      r->limit = (size_t)h->s->opt.max_checkpoint_bytes;
    else if (!strcmp(method, "PUT") && http_ends_with(url, "/logs"))
      r->limit = HTTP_MAX_LOG;
    r->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->hc = ci ? ci->socket_context : NULL;
    http_conn_begin(h, r->hc);
    *con_cls = r;
    /* Everything the head decides is answered before any of the body is
     * read (MHD then closes the connection: a client that writes its whole
     * body before reading sees a reset). */
    if (http_head(r, url, method)) {
      r->state = REQ_SENT;
      return http_send(r);
    }
    return MHD_YES;
  }
  if (r->state == REQ_READING && *upload_data_size && r->fd >= 0) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (r->io_error) return MHD_YES;
    if (r->len + n > r->limit) {
      r->too_large = 1; /* MHD holds the client to its Content-Length: not reached */
      return MHD_YES;
    }
    int fault = http_spool_fault("write");
    for (size_t off = 0; off < n;) {
      ssize_t k = fault > 0 ? (errno = fault, -1) : write(r->fd, upload_data + off, n - off);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        log_error("http: spooling an upload: %s", k < 0 ? strerror(errno) : "short write");
        r->io_error = k < 0 ? errno : -1;
        break;
      }
      off += (size_t)k;
    }
    r->len += n;
    return MHD_YES;
  }
  if (r->state == REQ_READING && *upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (r->too_large || r->len + n > r->limit) {
      /* Keep reading and dropping to answer 413 at the end, but not forever. */
      r->too_large = 1;
      r->dropped += n;
      return r->dropped > HTTP_MAX_DROP ? MHD_NO : MHD_YES; /* chunked, no length */
    }
    if (r->len + n + 1 > r->cap) {
      size_t nc = r->cap ? r->cap : 4096;
      while (nc < r->len + n + 1) nc *= 2;
      char *b = realloc(r->body, nc);
      if (!b) return MHD_NO;
      r->body = b;
      r->cap = nc;
    }
    memcpy(r->body + r->len, upload_data, n);
    r->len += n;
    r->body[r->len] = 0;
    return MHD_YES;
  }
  if (r->state == REQ_READY) {
    r->tr[4] = trace_ns();
    atomic_fetch_sub(&h->suspended, 1); /* MHD resumed it and called us */
    r->state = REQ_SENT;
    return http_send(r);
  }
  if (r->state == REQ_PARKED) { /* a held lease: woken, its wait over, or the server stops */
    atomic_fetch_sub(&h->suspended, 1);
    r->state = REQ_SENT;
    if (http_client_gone(r)) return MHD_NO;
    r->state = REQ_READING; /* dispatched again below, with the same body */
    *upload_data_size = 0;
  }
  if (r->state != REQ_READING) { /* waiting, or answered already (early 413) */
    *upload_data_size = 0;
    return MHD_YES;
  }

  /* Counted before http_dispatch looks at `stopping`, so that http_stop,
   * which sets `stopping` first and then waits for this count to drop, can
   * never miss a handler about to suspend its connection. */
  atomic_fetch_add(&h->active, 1);
  r->tr[1] = trace_ns();
  /* Reply-after-commit is structural: every group the handler's lock holds
   * handed to the commit thread (and, for a write, everything before its
   * holds) is recorded here by server_unlock, so the reply cannot go out
   * before it, whatever the handler or an error helper did with resp. */
  for (;;) {
    r->resp.hold_until_ms = 0;
    commit_hold_begin(&r->hold, strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0);
    http_dispatch(r, url, method);
    commit_hold_end();
    /* A held request keeps what its earlier tries queued (an experiment
     * the lease found over, say): its reply waits for the newest. */
    if (r->hold.ticket > r->ticket) r->ticket = r->hold.ticket;
    if (r->resp.ticket > r->ticket) r->ticket = r->resp.ticket;
    if (r->resp.status || !r->resp.hold_until_ms) break;
    /* The handler asks to hold the request (a lease that found nothing):
     * parked until the state may have work for it, or its deadline. */
    r->held_until_ms = r->resp.hold_until_ms;
    r->held_mark = r->resp.hold_mark;
    int prc = lease_wait_park(h->s, &r->wait, r->resp.hold_gen, r->held_until_ms, http_park,
                              http_unpark, r);
    if (prc == 0) {
      atomic_fetch_sub(&h->active, 1);
      return MHD_YES;
    }
    r->resp.hold_until_ms = 0;
    if (prc < 0) { /* the server stops: nothing now */
      api_no_content(&r->resp);
      break;
    }
    /* prc == 1: something changed since the handler looked: try again now */
  }
  r->tr[2] = trace_ns();
  if (r->ticket) {
    int status = 0;
    int rc = commit_when_done(h->s->commit, r->ticket, http_suspend, http_committed, r, &status);
    if (rc == 0) { /* suspended; http_committed resumes us */
      atomic_fetch_sub(&h->active, 1);
      return MHD_YES;
    }
    r->commit_status = rc == 1 ? status : -EIO;
  }
  atomic_fetch_sub(&h->active, 1);
  r->state = REQ_SENT;
  return http_send(r);
}

/* Trace builds: a request that waited for a commit, its times (trace.h). */
static void http_trace(struct http_req *r) {
#ifdef CTUNE_TRACE
  if (!r->ticket || !r->hc) return;
  uint64_t now = trace_ns();
  uint64_t v[] = {
      r->ticket, (uint64_t)r->hc->fd, r->tr[0],          r->tr[1], r->tr[2], r->tr[3], r->tr[4],
      now,       r->hc->trace_done,   (uint64_t)gettid()};
  r->hc->trace_done = now;
  trace_put(TRACE_REQ, v, (int)(sizeof v / sizeof v[0]));
#else
  (void)r;
#endif
}

static void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe) {
  (void)conn;
  (void)toe;
  struct http *h = cls;
  struct http_req *r = *con_cls;
  if (!r) return;
  /* A held reply whose client hung up: MHD resumed the connection, found it
   * closed and ends it here without calling http_access again. It is held
   * no longer (http_stop waits for this count). */
  if (r->state == REQ_WAITING || r->state == REQ_READY || r->state == REQ_PARKED)
    atomic_fetch_sub(&h->suspended, 1);
  http_conn_end(h, r->hc);
  http_trace(r);
  metrics_observe_request(&h->s->metrics, clock_mono_s() - r->t0);
  free(r->resp.body);
  if (r->resp.stream_read && r->resp.stream_free) r->resp.stream_free(r->resp.stream_cls);
  free(r->body);
  if (r->fd >= 0) close(r->fd);
  if (r->reserved) atomic_fetch_sub(&h->body_bytes, r->reserved);
  free(r);
  *con_cls = NULL;
}

/* libmicrohttpd's own messages, on only with TLS: while the daemon starts they
 * say why (a key that does not match its certificate); afterwards they are
 * per-connection handshake failures (a client that does not trust the
 * certificate), worth a debug line at most. */
static char http_start_msg[256];
static atomic_int http_started;

static void http_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char line[256];
  vsnprintf(line, sizeof line, fmt, ap);
  line[strcspn(line, "\n")] = '\0';
  if (!atomic_load(&http_started)) {
    if (!http_start_msg[0]) snprintf(http_start_msg, sizeof http_start_msg, "%s", line);
  } else {
    log_debug("http: %s", line);
  }
}

/* Connections at once, all addresses together. */
#define HTTP_CONNECTIONS 4000u

/* Every connection is a file descriptor: lift the soft limit (often 1024)
 * to the hard one, so that HTTP_CONNECTIONS, not EMFILE, is the bound. */
static void http_raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= HTTP_CONNECTIONS + 256) return;
  rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > HTTP_CONNECTIONS + 256
                    ? HTTP_CONNECTIONS + 256
                    : rl.rlim_max;
  if (want <= rl.rlim_cur) return;
  rl.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &rl))
    log_warn("http: cannot raise the open-file limit: %s", strerror(errno));
}

/* Connections are accepted here and handed to libmicrohttpd
 * (MHD_add_connection), which gives each to one of its --threads HTTP threads
 * by the socket's number modulo the threads: connections accepted one after
 * another get consecutive numbers and so equal shares. With libmicrohttpd's
 * own accept every thread races for the listening socket and one took up to
 * 53 of 64 benchmark connections, whose replies then queued behind each
 * other in that one thread (p50 5.1 ms against 2.2 ms on the other). */
static void *http_acceptor(void *arg) {
  struct http *h = arg;
  int short_of = 0; /* accepts failed for want of descriptors or memory, in a row */
  for (;;) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(h->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) {
      if (atomic_load(&h->accept_stop)) break;
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors or memory: nothing to wait for but time (the
         * client waits in the backlog meanwhile). */
        if (!short_of++) log_warn("http: cannot accept a connection: %s", strerror(errno));
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
        continue;
      }
      log_error("http: accepting connections failed: %s", strerror(errno));
      break;
    }
    if (short_of) log_info("http: accepting again after %d failed tries", short_of);
    short_of = 0;
    /* Refused (the limits): libmicrohttpd has closed it. */
    MHD_add_connection(h->d, fd, (struct sockaddr *)&ss, sl);
  }
  return NULL;
}

/* Ends the acceptor (a shut-down socket wakes its accept) and closes the
 * listening socket: no new connection after this. */
static void http_accept_stop(struct http *h) {
  if (h->acceptor_started) {
    atomic_store(&h->accept_stop, 1);
    shutdown(h->listen_fd, SHUT_RDWR);
    pthread_join(h->acceptor, NULL);
    h->acceptor_started = 0;
  }
  if (h->listen_fd >= 0) close(h->listen_fd);
  h->listen_fd = -1;
}

/* The listening socket, as libmicrohttpd made its own: address reuse, IPv6
 * only on an IPv6 address. -errno. */
static int http_listen(const struct addrinfo *ai) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;
  if (fd < 0) return -errno;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) ||
      (ai->ai_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on)) ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024)) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

/* --listen-fd: a listening TCP socket inherited from whoever started this
 * server (ctune run makes it, so that its worker, given the URL at once,
 * starts while this server opens its database). It must be bound to the
 * --bind address, which names this server everywhere else (login URL, Host
 * checks, the loopback rule). The fd, or a negative error said in err. */
static int http_adopt(int fd, const struct addrinfo *ai, const char *bind, char *err,
                      size_t errlen) {
  int on = 0, type = 0;
  socklen_t ol = sizeof on, tl = sizeof type;
  struct sockaddr_storage a;
  socklen_t al = sizeof a;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) ||
      getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) || !on || type != SOCK_STREAM ||
      getsockname(fd, (struct sockaddr *)&a, &al) ||
      (a.ss_family != AF_INET && a.ss_family != AF_INET6)) {
    snprintf(err, errlen, "--listen-fd %d: not a listening TCP socket", fd);
    return -ENOTSOCK;
  }
  int same =
      a.ss_family == ai->ai_family &&
      (a.ss_family == AF_INET
           ? !memcmp(&((struct sockaddr_in *)&a)->sin_addr,
                     &((const struct sockaddr_in *)ai->ai_addr)->sin_addr, sizeof(struct in_addr))
           : !memcmp(&((struct sockaddr_in6 *)&a)->sin6_addr,
                     &((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr,
                     sizeof(struct in6_addr)));
  if (!same) {
    snprintf(err, errlen, "--listen-fd %d: the socket is not bound to --bind %s", fd, bind);
    return -EINVAL;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) || fcntl(fd, F_SETFD, FD_CLOEXEC)) {
    snprintf(err, errlen, "--listen-fd %d: %s", fd, strerror(errno));
    return -EINVAL;
  }
  return fd;
}

void http_conn_spread(struct http *h, int *threads, int *most) {
  const void *seen[64];
  int count[64], n = 0;
  pthread_mutex_lock(&h->conns_mu);
  for (struct http_conn *c = h->conns; c; c = c->next) {
    int i = 0;
    while (i < n && seen[i] != c->thread) i++;
    if (i == n && n < 64) seen[n] = c->thread, count[n++] = 0;
    if (i < n) count[i]++;
  }
  pthread_mutex_unlock(&h->conns_mu);
  *threads = n;
  *most = 0;
  for (int i = 0; i < n; i++)
    if (count[i] > *most) *most = count[i];
}

/* What http_start made, before or without the daemon. */
static void http_free(struct http *h) {
  if (h->reaper_started) {
    pthread_mutex_lock(&h->conns_mu);
    h->reaper_stop = 1;
    pthread_cond_broadcast(&h->conns_cv);
    pthread_mutex_unlock(&h->conns_mu);
    pthread_join(h->reaper, NULL);
  }
  http_accept_stop(h);
  http_shared_free(h->shared);
  pthread_cond_destroy(&h->conns_cv);
  pthread_mutex_destroy(&h->conns_mu);
  free(h);
}

int http_start(struct server *s, struct http **out, int *port_out, char *err, size_t errlen) {
  struct http *h = calloc(1, sizeof *h);
  if (!h) return -ENOMEM;
  h->s = s;
  h->listen_fd = -1;
  /* Spool files live beside the database (the same disk, never in RAM). */
  snprintf(h->spool_dir, sizeof h->spool_dir, "%s", s->opt.db_path);
  char *slash = strrchr(h->spool_dir, '/');
  if (!slash)
    snprintf(h->spool_dir, sizeof h->spool_dir, ".");
  else if (slash == h->spool_dir)
    slash[1] = '\0';
  else
    *slash = '\0';
  unsigned idle_s = HTTP_IDLE_TIMEOUT_S;
  const char *t_env = TESTHOOK(TESTHOOK_HTTP_TIMEOUT_S);
  if (t_env && atoi(t_env) > 0) idle_s = (unsigned)atoi(t_env);
  h->head_deadline = idle_s / 3.0;
  if (pthread_mutex_init(&h->conns_mu, NULL)) {
    free(h);
    return -ENOMEM;
  }
  if (pthread_cond_init(&h->conns_cv, NULL)) {
    pthread_mutex_destroy(&h->conns_mu);
    free(h);
    return -ENOMEM;
  }
  if (http_shared_new(h->shared)) {
    http_free(h);
    return -ENOMEM;
  }
  http_raise_fd_limit();
  struct addrinfo hints = {.ai_flags = AI_NUMERICSERV | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", s->opt.port);
  int gai = getaddrinfo(s->opt.bind, port, &hints, &ai);
  if (gai) {
    snprintf(err, errlen, "--bind %s: %s", s->opt.bind, gai_strerror(gai));
    http_free(h);
    return -EINVAL;
  }
  if (s->opt.listen_fd >= 0) {
    h->listen_fd = http_adopt(s->opt.listen_fd, ai, s->opt.bind, err, errlen);
    if (h->listen_fd < 0) {
      int rc = h->listen_fd;
      freeaddrinfo(ai);
      http_free(h);
      return rc;
    }
    log_info("serving on the listening socket of --listen-fd %d", h->listen_fd);
  } else {
    h->listen_fd = http_listen(ai);
  }
  if (h->listen_fd < 0) {
    snprintf(err, errlen, "cannot listen on %s port %d (%s)", s->opt.bind, s->opt.port,
             strerror(-h->listen_fd));
    freeaddrinfo(ai);
    http_free(h);
    return -EADDRINUSE;
  }
  /* No listening socket of its own: http_acceptor hands it the connections. */
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY |
                   MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET |
                   MHD_USE_ITC;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  /* --tls-cert/--tls-key: libmicrohttpd's own TLS (GnuTLS). The PEM text is
   * main's and outlives the daemon. Without TLS the array is just its END. */
  int tls = s->opt.tls_cert_pem != NULL;
  struct MHD_OptionItem tls_opts[] = {{MHD_OPTION_HTTPS_MEM_CERT, 0, s->opt.tls_cert_pem},
                                      {MHD_OPTION_HTTPS_MEM_KEY, 0, s->opt.tls_key_pem},
                                      {MHD_OPTION_END, 0, NULL}};
  if (tls) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
      snprintf(err, errlen, "--tls-cert: this libmicrohttpd was built without TLS support");
      freeaddrinfo(ai);
      http_free(h);
      return -ENOTSUP;
    }
    flags |= MHD_USE_TLS | MHD_USE_ERROR_LOG;
  }
  http_start_msg[0] = '\0';
  /* The logger must come first; it speaks only with MHD_USE_ERROR_LOG (TLS). */
  h->d = MHD_start_daemon(
      flags, 0, NULL, NULL, http_access, h, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, NULL,
      MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->opt.threads, MHD_OPTION_NOTIFY_COMPLETED,
      http_completed, h, MHD_OPTION_NOTIFY_CONNECTION, http_conn_notify, h,
      MHD_OPTION_CONNECTION_LIMIT, HTTP_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      HTTP_PER_IP_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_ARRAY,
      tls ? tls_opts : tls_opts + 2, MHD_OPTION_END);
  freeaddrinfo(ai);
  atomic_store(&http_started, 1);
  if (!h->d && tls && http_start_msg[0]) {
    /* libmicrohttpd's words say which: the certificate and key, or the bind. */
    snprintf(err, errlen, "cannot serve HTTPS on %s port %d with --tls-cert %s --tls-key %s: %s",
             s->opt.bind, s->opt.port, s->opt.tls_cert, s->opt.tls_key, http_start_msg);
    http_free(h);
    return -EINVAL;
  }
  if (!h->d) {
    snprintf(err, errlen, "cannot serve HTTP on %s port %d: libmicrohttpd did not start",
             s->opt.bind, s->opt.port);
    http_free(h);
    return -EIO;
  }
  struct sockaddr_storage bound;
  socklen_t blen = sizeof bound;
  int bound_port = s->opt.port;
  if (!getsockname(h->listen_fd, (struct sockaddr *)&bound, &blen))
    bound_port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                   : ((struct sockaddr_in *)&bound)->sin_port);
  if (pthread_create(&h->acceptor, NULL, http_acceptor, h)) {
    snprintf(err, errlen, "cannot serve HTTP on %s port %d: no thread to accept connections",
             s->opt.bind, s->opt.port);
    MHD_stop_daemon(h->d);
    http_free(h);
    return -EAGAIN;
  }
  h->acceptor_started = 1;
  if (pthread_create(&h->reaper, NULL, http_reaper, h))
    log_warn("http: no thread for the request-head deadline");
  else
    h->reaper_started = 1;
  if (sse_start(s)) log_warn("http: no keepalive thread for event streams");
  *port_out = bound_port;
  *out = h;
  return 0;
}

void http_stop(struct http *h) {
  if (!h) return;
  atomic_store(&h->stopping, 1);
  sse_stop();             /* open event streams end (none stays suspended) */
  lease_wait_close(h->s); /* held lease requests are answered now */
  /* Held replies are released by the commit thread, which still runs. */
  for (int i = 0; i < 1000 && (atomic_load(&h->suspended) > 0 || atomic_load(&h->active) > 0);
       i++) {
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (atomic_load(&h->suspended) > 0) {
    log_error("http: %d replies still held after 5 s; exiting without them",
              atomic_load(&h->suspended));
    _exit(1); /* MHD would abort; everything acknowledged is committed */
  }
  http_accept_stop(h);   /* no connection is handed over to a stopped daemon */
  MHD_stop_daemon(h->d); /* every connection is closed (and unlisted) */
  http_free(h);
}
