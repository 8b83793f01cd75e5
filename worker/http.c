/* libcurl multi-socket + libuv glue (curl's documented multi-uv pattern). */
#include "http.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

#include <curl/curl.h>

#include "log.h"

struct http_req {
  struct http_client *c;
  CURL *easy;
  struct curl_slist *hdrs;
  char *body; /* request body (PUT/POST), owned */
  struct http_resp resp;
  http_cb cb;
  void *arg;
  int oom;
  char curl_err[CURL_ERROR_SIZE]; /* curl's words for a failed transfer */
  struct http_req *prev, *next;
};

#define HTTP_IDLE_EASY 8

/* A socket of curl's and its poll handle, from its first use to its close
 * (http_close_socket): stopped between transfers, not remade for each. */
struct http_sock {
  uv_poll_t poll;
  curl_socket_t fd;
  struct http_client *c;
  struct http_sock *next;
};

struct http_client {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  char *base;
  char *auth; /* "Authorization: Bearer ..." or NULL */
  struct http_req *reqs;
  int pending;
  int closing;
  int tls_warned; /* a certificate failure was logged; again after a success */
  /* Ended requests' easy handles, reset, for the next requests: a handle
   * made and freed per request was most of the worker's malloc work. */
  CURL *idle[HTTP_IDLE_EASY];
  int nidle;
  struct http_sock *socks; /* curl's open sockets that have a poll handle */
};

/* --ca-file (http_set_ca_file): one per process, as the worker has one server. */
static const char *http_ca_file;

void http_set_ca_file(const char *path) { http_ca_file = path; }

/* An easy handle with every option at its default: an idle one, else new. */
static CURL *http_easy_take(struct http_client *c) {
  return c->nidle > 0 ? c->idle[--c->nidle] : curl_easy_init();
}

/* Done with e (out of the multi): kept idle, reset (no option, header list
 * or buffer of the request it ran is left in it), or freed. */
static void http_easy_give(struct http_client *c, CURL *e) {
  if (!e) return;
  if (c->closing || c->nidle == HTTP_IDLE_EASY) {
    curl_easy_cleanup(e);
    return;
  }
  curl_easy_reset(e);
  c->idle[c->nidle++] = e;
}

static void http_check_done(struct http_client *c) {
  CURLMsg *msg;
  int left;
  while ((msg = curl_multi_info_read(c->multi, &left))) {
    if (msg->msg != CURLMSG_DONE) continue;
    struct http_req *r = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    CURLcode res = msg->data.result;
    int err = 0;
    if (res == CURLE_OK && !r->oom) {
      curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->resp.status);
      char *ip = NULL;
      if (curl_easy_getinfo(r->easy, CURLINFO_LOCAL_IP, &ip) == CURLE_OK && ip)
        snprintf(r->resp.local_ip, sizeof r->resp.local_ip, "%s", ip);
      c->tls_warned = 0;
    } else {
      /* A server whose certificate is not trusted looks like any network
       * error to the caller (it retries); say once what it is and the fix. */
      if ((res == CURLE_PEER_FAILED_VERIFICATION || res == CURLE_SSL_CACERT_BADFILE) &&
          !c->tls_warned) {
        c->tls_warned = 1;
        log_error("TLS: cannot verify the server at %s: %s; %s", c->base,
                  r->curl_err[0] ? r->curl_err : curl_easy_strerror(res),
                  res == CURLE_SSL_CACERT_BADFILE
                      ? "--ca-file must be a readable PEM CA bundle"
                      : "pass --ca-file with the CA that signed its certificate (or use the "
                        "host name it was issued for)");
      }
      r->resp.status = 0;
      err = r->oom                            ? -ENOMEM
            : res == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
            : res == CURLE_COULDNT_CONNECT    ? -ECONNREFUSED
                                              : -EIO;
    }
    curl_multi_remove_handle(c->multi, r->easy);
    if (r->prev)
      r->prev->next = r->next;
    else
      c->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    c->pending--;
    if (!r->resp.body) r->resp.body = calloc(1, 1);
    r->cb(r->arg, err, &r->resp);
    http_easy_give(c, r->easy);
    curl_slist_free_all(r->hdrs);
    free(r->body);
    free(r->resp.body);
    free(r->resp.headers);
    free(r);
  }
}

static void http_on_poll(uv_poll_t *h, int status, int events) {
  struct http_sock *s = h->data;
  struct http_client *c = s->c;
  int flags = 0, running;
  if (status < 0) flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  curl_multi_socket_action(c->multi, s->fd, flags, &running);
  http_check_done(c);
}

static void http_on_timer(uv_timer_t *t) {
  struct http_client *c = t->data;
  int running;
  curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  http_check_done(c);
}

static int http_timer_cb(CURLM *multi, long timeout_ms, void *userp) {
  (void)multi;
  struct http_client *c = userp;
  if (timeout_ms < 0)
    uv_timer_stop(&c->timer);
  else
    uv_timer_start(&c->timer, http_on_timer, (uint64_t)timeout_ms, 0);
  return 0;
}

static void http_sock_closed(uv_handle_t *h) { free(h->data); }

static struct http_sock **http_sock_find(struct http_client *c, curl_socket_t fd) {
  struct http_sock **pp = &c->socks;
  while (*pp && (*pp)->fd != fd) pp = &(*pp)->next;
  return pp;
}

static void http_sock_drop(struct http_sock **pp) {
  struct http_sock *s = *pp;
  *pp = s->next;
  uv_close((uv_handle_t *)&s->poll, http_sock_closed);
}

/* curl closes a socket (CURLOPT_CLOSESOCKETFUNCTION, kept by its
 * connection): its handle goes first, while the fd is still its own. */
static int http_close_socket(void *clientp, curl_socket_t fd) {
  struct http_client *c = clientp;
  struct http_sock **pp = http_sock_find(c, fd);
  if (*pp) http_sock_drop(pp);
  return close(fd);
}

static int http_socket_cb(CURL *easy, curl_socket_t fd, int action, void *userp, void *socketp) {
  (void)easy;
  struct http_client *c = userp;
  struct http_sock *s = socketp;
  if (!s) s = *http_sock_find(c, fd);
  if (action == CURL_POLL_REMOVE) {
    /* A kept-alive connection between transfers: the handle waits for the
     * next one (or for the socket's close), stopped. */
    if (s) uv_poll_stop(&s->poll);
    return 0;
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return -1;
    if (uv_poll_init_socket(c->loop, &s->poll, fd) != 0) {
      free(s);
      return -1;
    }
    s->fd = fd;
    s->c = c;
    s->poll.data = s;
    s->next = c->socks;
    c->socks = s;
  }
  if (!socketp) curl_multi_assign(c->multi, fd, s);
  int events = 0;
  if (action != CURL_POLL_OUT) events |= UV_READABLE;
  if (action != CURL_POLL_IN) events |= UV_WRITABLE;
  uv_poll_start(&s->poll, events, http_on_poll);
  return 0;
}

int http_sockets(const struct http_client *c) {
  int n = 0;
  for (const struct http_sock *s = c->socks; s; s = s->next) n++;
  return n;
}

static size_t http_append(char **buf, size_t *len, const char *data, size_t n, int *oom) {
  char *b = realloc(*buf, *len + n + 1);
  if (!b) {
    *oom = 1;
    return 0; /* makes curl abort the transfer */
  }
  memcpy(b + *len, data, n);
  *len += n;
  b[*len] = '\0';
  *buf = b;
  return n;
}

static size_t http_on_body(char *data, size_t size, size_t nmemb, void *userp) {
  struct http_req *r = userp;
  return http_append(&r->resp.body, &r->resp.len, data, size * nmemb, &r->oom);
}

static size_t http_on_header(char *data, size_t size, size_t nmemb, void *userp) {
  struct http_req *r = userp;
  return http_append(&r->resp.headers, &r->resp.hlen, data, size * nmemb, &r->oom);
}

int http_client_new(uv_loop_t *loop, const char *base_url, const char *token,
                    struct http_client **out) {
  static int global_done;
  if (!global_done) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return -EIO;
    global_done = 1;
  }
  struct http_client *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->loop = loop;
  c->base = strdup(base_url);
  if (!c->base) goto oom;
  size_t bl = strlen(c->base);
  while (bl > 0 && c->base[bl - 1] == '/') c->base[--bl] = '\0';
  if (token && *token) {
    if (asprintf(&c->auth, "Authorization: Bearer %s", token) < 0) {
      c->auth = NULL;
      goto oom;
    }
  }
  c->multi = curl_multi_init();
  if (!c->multi) goto oom;
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, http_socket_cb);
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, http_timer_cb);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
  uv_timer_init(loop, &c->timer);
  c->timer.data = c;
  *out = c;
  return 0;
oom:
  free(c->base);
  free(c->auth);
  free(c);
  return -ENOMEM;
}

int http_client_set_token(struct http_client *c, const char *token) {
  char *a = NULL;
  if (token && *token && asprintf(&a, "Authorization: Bearer %s", token) < 0) return -ENOMEM;
  free(c->auth);
  c->auth = a;
  return 0;
}

int http_request(struct http_client *c, const char *method, const char *path,
                 const char *content_type, const char *body, size_t len,
                 const char *const *extra_headers, long timeout_ms, http_cb cb, void *arg) {
  if (c->closing) return -ECANCELED;
  struct http_req *r = calloc(1, sizeof *r);
  char *url = NULL, *ct = NULL;
  int rc = -ENOMEM;
  if (!r) return -ENOMEM;
  r->c = c;
  r->cb = cb;
  r->arg = arg;
  if (asprintf(&url, "%s%s", c->base, path) < 0) {
    url = NULL;
    goto fail;
  }
  if (!(r->easy = http_easy_take(c))) goto fail;
  struct curl_slist *h;
  /* "Expect: 100-continue" would add a round trip to every upload. */
  if (!(h = curl_slist_append(r->hdrs, "Expect:"))) goto fail;
  r->hdrs = h;
  if (content_type) {
    if (asprintf(&ct, "Content-Type: %s", content_type) < 0) {
      ct = NULL;
      goto fail;
    }
    if (!(h = curl_slist_append(r->hdrs, ct))) goto fail;
    r->hdrs = h;
  }
  /* An Authorization among the extra headers (registration's shared worker
   * token) replaces the client's own (the worker's secret). */
  int own_auth = 1;
  for (const char *const *e = extra_headers; e && *e; e++)
    if (!strncasecmp(*e, "Authorization:", 14)) own_auth = 0;
  if (c->auth && own_auth) {
    if (!(h = curl_slist_append(r->hdrs, c->auth))) goto fail;
    r->hdrs = h;
  }
  for (const char *const *e = extra_headers; e && *e; e++) {
    if (!(h = curl_slist_append(r->hdrs, *e))) goto fail;
    r->hdrs = h;
  }
  CURL *e = r->easy;
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_PRIVATE, r);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, http_on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_err);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, http_close_socket);
  curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c);
  /* https:// is always verified (peer and host name: curl's defaults, never
   * turned off) against --ca-file or the system store; http and https only. */
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  if (http_ca_file) curl_easy_setopt(e, CURLOPT_CAINFO, http_ca_file);
  if (strcmp(method, "GET") != 0) {
    if (len > 0) {
      if (!(r->body = malloc(len))) goto fail;
      memcpy(r->body, body, len);
    }
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "");
    if (strcmp(method, "POST") != 0) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  }
  if (curl_multi_add_handle(c->multi, e) != CURLM_OK) {
    rc = -EIO;
    goto fail;
  }
  r->next = c->reqs;
  if (c->reqs) c->reqs->prev = r;
  c->reqs = r;
  c->pending++;
  free(url);
  free(ct);
  return 0;
fail:
  http_easy_give(c, r->easy);
  curl_slist_free_all(r->hdrs);
  free(r->body);
  free(r);
  free(url);
  free(ct);
  return rc;
}

int http_pending(const struct http_client *c) { return c->pending; }

const char *http_resp_header(const struct http_resp *r, const char *name, char *buf, size_t len) {
  size_t nl = strlen(name);
  const char *p = r->headers;
  const char *end = p ? p + r->hlen : NULL;
  while (p && p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    if ((size_t)(eol - p) > nl && !strncasecmp(p, name, nl) && p[nl] == ':') {
      const char *v = p + nl + 1;
      while (v < eol && isspace((unsigned char)*v)) v++;
      const char *ve = eol;
      while (ve > v && isspace((unsigned char)ve[-1])) ve--;
      size_t vl = (size_t)(ve - v);
      if (vl >= len) vl = len - 1;
      memcpy(buf, v, vl);
      buf[vl] = '\0';
      return buf;
    }
    p = eol + 1;
  }
  return NULL;
}

static void http_client_freed(uv_handle_t *h) {
  struct http_client *c = h->data;
  free(c->base);
  free(c->auth);
  free(c);
}

void http_client_close(struct http_client *c) {
  if (!c) return;
  c->closing = 1;
  struct http_req *r = c->reqs;
  while (r) {
    struct http_req *next = r->next;
    curl_multi_remove_handle(c->multi, r->easy);
    /* Callbacks own their arguments: let them free them (new requests are
     * refused from here on). */
    char empty[1] = "";
    struct http_resp none = {0, empty, 0, NULL, 0, ""};
    r->cb(r->arg, -ECANCELED, &none);
    curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->hdrs);
    free(r->body);
    free(r->resp.body);
    free(r->resp.headers);
    free(r);
    r = next;
  }
  c->reqs = NULL;
  c->pending = 0;
  while (c->nidle > 0) curl_easy_cleanup(c->idle[--c->nidle]);
  curl_multi_cleanup(c->multi);
  while (c->socks) http_sock_drop(&c->socks); /* any curl closed without telling */
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, http_client_freed);
}
