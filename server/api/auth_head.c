/* auth_head: the checks on a request head (Host, Origin, Content-Type,
 * token or dashboard session), run before any handler (auth.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "auth.h"
#include "state.h"

void auth_cookie_name(const struct server *s, char *buf, size_t n) {
  snprintf(buf, n, "ctune_%d", s->port);
}

int auth_session_role(struct server *s, const char *cookie_header) {
  if (!s->sessions || !cookie_header) return -1;
  char name[32], val[48] = "";
  auth_cookie_name(s, name, sizeof name);
  size_t nl = strlen(name);
  /* "a=1; ctune_8470=ID; b=2" */
  for (const char *p = cookie_header; *p;) {
    while (*p == ' ' || *p == ';') p++;
    size_t len = strcspn(p, ";");
    if (len > nl && !strncmp(p, name, nl) && p[nl] == '=') {
      size_t vl = len - nl - 1;
      while (vl && p[nl + vl] == ' ') vl--;
      if (vl < sizeof val) snprintf(val, sizeof val, "%.*s", (int)vl, p + nl + 1);
      break;
    }
    p += len;
  }
  if (!val[0]) return -1;
  return auth_session_lookup(s->sessions, val);
}

/* Splits "host[:port]" or "[v6]:port" into host (brackets dropped) and port
 * (-1 when absent). -1 when malformed. */
static int auth_split_hostport(const char *hp, char *host, size_t hcap, long *port) {
  const char *end;
  *port = -1;
  if (hp[0] == '[') {
    end = strchr(hp, ']');
    if (!end || (size_t)(end - hp - 1) >= hcap) return -1;
    snprintf(host, hcap, "%.*s", (int)(end - hp - 1), hp + 1);
    end++;
  } else {
    end = strchr(hp, ':');
    if (!end) end = hp + strlen(hp);
    if ((size_t)(end - hp) >= hcap) return -1;
    snprintf(host, hcap, "%.*s", (int)(end - hp), hp);
  }
  if (*end == ':') {
    char *e;
    errno = 0;
    *port = strtol(end + 1, &e, 10);
    if (e == end + 1 || *e || errno || *port < 0 || *port > 65535) return -1;
  } else if (*end) {
    return -1;
  }
  return host[0] ? 0 : -1;
}

/* Whether a Host header names this server: AUTH_HOST_OK, or why not.
 *
 * An IP literal is served on any port: DNS rebinding needs a name the
 * attacker controls, and a page that sends Host: 127.0.0.1:9000 reached
 * that address and port itself, as any cross-site request may; what stops it
 * then is the token and the Origin check, not the port. A forwarder that
 * changes the port (ssh -L 9000:127.0.0.1:8470, docker -p 18470:8470) keeps
 * working through the IP address.
 *
 * Names: localhost, the --bind name and --allowed-host names, on this
 * server's port (or with no port in Host), and --allowed-host NAME:PORT on
 * PORT: the port a forwarder listens on, named once by its operator. */
enum { AUTH_HOST_OK = 0, AUTH_HOST_NAME, AUTH_HOST_PORT };

static int auth_host_check(const struct server *s, const char *hosthdr, char *host, size_t hcap,
                           long *port) {
  if (auth_split_hostport(hosthdr, host, hcap, port)) {
    host[0] = '\0';
    return AUTH_HOST_NAME;
  }
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1)
    return AUTH_HOST_OK;
  int ours = *port < 0 || s->port <= 0 || *port == s->port, named = 0;
  if (!strcasecmp(host, "localhost") || !strcasecmp(host, s->opt.bind)) named = 1;
  for (int i = 0; i < s->opt.nallowed_hosts; i++) {
    char ah[256];
    long ap;
    if (auth_split_hostport(s->opt.allowed_hosts[i], ah, sizeof ah, &ap) || strcasecmp(host, ah))
      continue;
    named = 1;
    if (ap >= 0 && *port == ap) return AUTH_HOST_OK; /* NAME:PORT, a forwarded port */
  }
  if (!named) return AUTH_HOST_NAME;
  return ours ? AUTH_HOST_OK : AUTH_HOST_PORT;
}

/* Origin "scheme://host[:port]" names the same host and port as the Host
 * header (already known to be ours). "null" and anything else is foreign. */
static int auth_origin_ok(const char *origin, const char *hosthdr) {
  const char *p = strstr(origin, "://");
  if (!p || !hosthdr) return 0;
  if (strncmp(origin, "http://", 7) && strncmp(origin, "https://", 8)) return 0;
  const char *o = p + 3;
  size_t ol = strlen(o);
  while (ol && o[ol - 1] == '/') ol--;
  return ol == strlen(hosthdr) && !strncasecmp(o, hosthdr, ol);
}

/* application/json, with parameters (charset) allowed. */
static int auth_is_json(const char *ct) {
  if (!ct) return 0;
  while (*ct == ' ') ct++;
  size_t n = strcspn(ct, "; ");
  return n == 16 && !strncasecmp(ct, "application/json", 16);
}

int auth_check_request_head(struct server *s, void *conn,
                            const char *(*header)(void *conn, const char *key),
                            enum route_method meth, const char *url, const struct route *route,
                            struct api_resp *resp) {
  const char *hosthdr = header(conn, "Host");
  /* No Host at all is an HTTP/1.0 client, not a browser. */
  char host[256] = "";
  long port = -1;
  int why = hosthdr ? auth_host_check(s, hosthdr, host, sizeof host, &port) : AUTH_HOST_OK;
  if (why == AUTH_HOST_PORT) {
    api_error(resp, 421, "bad_host", url,
              "Host '%.100s' reaches this server (port %d) through port %ld, as a port "
              "forwarder does (ssh -L, docker -p): start the server with --allowed-host "
              "%.100s:%ld, or use its IP address (such as 127.0.0.1:%ld)",
              hosthdr, s->port, port, host, port, port);
    return 1;
  }
  if (why != AUTH_HOST_OK) {
    if (host[0])
      api_error(resp, 421, "bad_host", url,
                "Host '%.100s' is not a name of this server; start it with --allowed-host "
                "%.100s to serve that name (NAME:PORT when a forwarder changes the port)",
                hosthdr, host);
    else
      api_error(resp, 421, "bad_host", url,
                "Host '%.100s' is not a host name with an optional :PORT", hosthdr);
    return 1;
  }
  if (!route) return 0;
  int changes = meth == RM_POST || meth == RM_PUT || meth == RM_DELETE || meth == RM_PATCH;
  const char *origin = header(conn, "Origin");
  if (changes) {
    const char *site = header(conn, "Sec-Fetch-Site");
    if ((origin && !auth_origin_ok(origin, hosthdr)) || (site && !strcmp(site, "cross-site"))) {
      api_error(resp, 403, "bad_origin", url, "cross-site request refused (Origin '%.100s')",
                origin ? origin : "(none)");
      return 1;
    }
  }
  /* A browser sends a cross-site POST without a preflight only as a form or
   * text/plain: JSON endpoints take JSON only. PUTs (checkpoints, logs) keep
   * their types: PUT is never sent cross-site without a preflight. */
  if (meth == RM_POST || meth == RM_PATCH) {
    const char *cl = header(conn, "Content-Length"), *te = header(conn, "Transfer-Encoding");
    int has_body = te || (cl && strtoull(cl, NULL, 10) > 0);
    if (has_body && !auth_is_json(header(conn, "Content-Type"))) {
      const char *ct = header(conn, "Content-Type");
      api_error(resp, 415, "unsupported_media_type", url,
                "%s takes Content-Type: "
                "application/json (got '%.80s')",
                url, ct ? ct : "(none)");
      return 1;
    }
  }
  if (!s->auth || route->access == RA_PUBLIC) return 0;
  int role =
      auth_role(header(conn, "Authorization"), s->admin_token, s->worker_token, s->viewer_token);
  if (role < 0) {
    role = auth_session_role(s, header(conn, "Cookie"));
    /* Browsers send Origin with every POST; a cookie without one is not
     * from the dashboard. */
    if (role >= 0 && changes && !origin) {
      api_error(resp, 403, "bad_origin", url,
                "a state-changing request authenticated by a "
                "cookie needs an Origin header");
      return 1;
    }
  }
  if (role < 0) {
    api_error(resp, 401, "unauthorized", url,
              "missing or wrong token: send Authorization: Bearer <token> (the admin token is "
              "in the file <db>.tokens beside the server's database)");
    api_header(resp, "WWW-Authenticate", "Bearer");
    return 1;
  }
  /* The dashboard hides the controls a viewer session cannot use. */
  api_header(resp, API_ROLE_HEADER, "%s",
             role == AUTH_VIEWER ? "viewer"
             : role == RA_ADMIN  ? "admin"
                                 : "worker");
  const char *mname = meth == RM_GET     ? "GET"
                      : meth == RM_HEAD  ? "HEAD"
                      : meth == RM_POST  ? "POST"
                      : meth == RM_PUT   ? "PUT"
                      : meth == RM_PATCH ? "PATCH"
                                         : "DELETE";
  if (role == AUTH_VIEWER && (route->access != RA_ADMIN || (meth != RM_GET && meth != RM_HEAD))) {
    api_error(resp, 403, "forbidden", url, "a viewer token cannot call %s %s", mname, url);
    return 1;
  }
  if (route->access == RA_ADMIN && role == RA_WORKER) {
    api_error(resp, 403, "forbidden", url, "a worker token cannot call %s %s", mname, url);
    return 1;
  }
  return 0;
}
