/* Unit tests (Check) for ctune-server's pure helpers: the routing table
 * matcher, static path safety and content types, tokens, flags, metrics. */
#include <check.h>
#include <microhttpd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "http.h"
#include "secret.h"
#include "metrics.h"
#include "opts.h"
#include "route.h"
#include "static_path.h"
#include "utf8.h"

static const struct route table[] = {
    {RM_GET, "/healthz", RA_PUBLIC, 0},
    {RM_POST, "/api/v1/experiments", RA_ADMIN, 1},
    {RM_GET, "/api/v1/experiments/{id}", RA_ADMIN, 2},
    {RM_POST, "/api/v1/trials/{id}/results", RA_WORKER, 3},
    {RM_GET, "/api/v1/trials/{id}/results", RA_ADMIN, 4},
    {RM_GET, "/vendor/*", RA_PUBLIC, 5},
    {RM_GET, "/*", RA_PUBLIC, 6},
};
#define NT (sizeof table / sizeof table[0])

START_TEST(route_matches_ids_and_methods) {
  struct route_match m;
  ck_assert_int_eq(route_find(table, NT, RM_GET, "/api/v1/experiments/42", &m), 0);
  ck_assert_int_eq(m.route->handler, 2);
  ck_assert_int_eq(m.nids, 1);
  ck_assert_int_eq(m.ids[0], 42);
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/api/v1/trials/7/results", &m), 0);
  ck_assert_int_eq(m.route->handler, 3);
  ck_assert_int_eq(route_find(table, NT, RM_GET, "/api/v1/trials/7/results", &m), 0);
  ck_assert_int_eq(m.route->handler, 4);
  ck_assert_int_eq(route_find(table, NT, RM_HEAD, "/healthz", &m), 0);
  ck_assert_int_eq(m.route->handler, 0);
}
END_TEST

START_TEST(route_rejects_bad_ids_and_methods) {
  struct route_match m;
  /* not ids: zero, leading zero, sign, letters, too long */
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/api/v1/trials/0/results", &m), -ENOENT);
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/api/v1/trials/07/results", &m), -ENOENT);
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/api/v1/trials/-1/results", &m), -ENOENT);
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/api/v1/trials/x/results", &m), -ENOENT);
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/api/v1/trials/1234567890123456789/results", &m),
                   -ENOENT);
  ck_assert_int_eq(route_find(table, NT, RM_DELETE, "/api/v1/experiments", &m), -EOPNOTSUPP);
  ck_assert_int_eq(route_find(table, NT, RM_PUT, "/api/v1/experiments/3", &m), -EOPNOTSUPP);
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/nothing", &m), -ENOENT);
  ck_assert_int_eq(route_find(table, NT, RM_POST, "/api/v1/experiments/", &m), -ENOENT);
}
END_TEST

START_TEST(route_wildcards) {
  struct route_match m;
  ck_assert_int_eq(route_find(table, NT, RM_GET, "/vendor/chart.js/chart.umd.js", &m), 0);
  ck_assert_int_eq(m.route->handler, 5);
  ck_assert_str_eq(m.rest, "chart.js/chart.umd.js");
  ck_assert_int_eq(route_find(table, NT, RM_GET, "/", &m), 0);
  ck_assert_int_eq(m.route->handler, 6);
  ck_assert_str_eq(m.rest, "");
  ck_assert_int_eq(route_find(table, NT, RM_GET, "/js/app.js", &m), 0);
  ck_assert_str_eq(m.rest, "js/app.js");
  ck_assert_int_eq(route_method_parse("PATCH"), RM_PATCH); /* PATCH /api/v1/experiments/{id} */
  ck_assert_int_eq(route_method_parse("TRACE"), RM_OTHER);
}
END_TEST

START_TEST(static_paths) {
  char buf[256];
  ck_assert_int_eq(static_path_check("js/app.js"), 0);
  ck_assert_int_eq(static_path_check("a/"), 0);
  ck_assert_int_eq(static_path_check(".."), -EINVAL);
  ck_assert_int_eq(static_path_check("../etc/passwd"), -EINVAL);
  ck_assert_int_eq(static_path_check("js/../../x"), -EINVAL);
  ck_assert_int_eq(static_path_check("js/./x"), -EINVAL);
  ck_assert_int_eq(static_path_check("js//x"), -EINVAL);
  ck_assert_int_eq(static_path_check("js\\..\\x"), -EINVAL);
  ck_assert_int_eq(static_path_check("a\nb"), -EINVAL);
  ck_assert_int_eq(static_path_check(".hidden..ok"), 0);
  ck_assert_int_eq(static_path_join("/w", "", buf, sizeof buf), 0);
  ck_assert_str_eq(buf, "/w/index.html");
  ck_assert_int_eq(static_path_join("/w", "docs/", buf, sizeof buf), 0);
  ck_assert_str_eq(buf, "/w/docs/index.html");
  ck_assert_int_eq(static_path_join("/w", "../x", buf, sizeof buf), -EINVAL);
  ck_assert_int_eq(static_path_join("/w", "abcdefghij", buf, 8), -ENAMETOOLONG);
}
END_TEST

START_TEST(static_types) {
  ck_assert_str_eq(static_content_type("index.html"), "text/html; charset=utf-8");
  ck_assert_str_eq(static_content_type("a/b.js"), "text/javascript; charset=utf-8");
  ck_assert_str_eq(static_content_type("m.mjs"), "text/javascript; charset=utf-8");
  ck_assert_str_eq(static_content_type("s.css"), "text/css; charset=utf-8");
  ck_assert_str_eq(static_content_type("i.svg"), "image/svg+xml");
  ck_assert_str_eq(static_content_type("i.PNG"), "image/png");
  ck_assert_str_eq(static_content_type("x.json"), "application/json");
  ck_assert_str_eq(static_content_type("x.js.map"), "application/json");
  ck_assert_str_eq(static_content_type("dir.js/file"), "application/octet-stream");
}
END_TEST

START_TEST(auth_compare_and_roles) {
  ck_assert(secret_equal("abc", "abc"));
  ck_assert(!secret_equal("abc", "abd"));
  ck_assert(!secret_equal("abc", "abcd"));
  ck_assert(!secret_equal("", "a"));
  const char *a = "admin-0123456789abcdef", *w = "worker-0123456789abcdef";
  ck_assert_int_eq(auth_role("Bearer admin-0123456789abcdef", a, w, ""), RA_ADMIN);
  ck_assert_int_eq(auth_role("bearer worker-0123456789abcdef", a, w, ""), RA_WORKER);
  ck_assert_int_eq(auth_role("Bearer admin-0123456789abcde", a, w, ""), -1);
  ck_assert_int_eq(auth_role("Basic admin-0123456789abcdef", a, w, ""), -1);
  ck_assert_int_eq(auth_role(NULL, a, w, ""), -1);
  ck_assert(auth_is_loopback("127.0.0.1"));
  ck_assert(auth_is_loopback("::1"));
  ck_assert(auth_is_loopback("localhost"));
  ck_assert(!auth_is_loopback("0.0.0.0"));
  ck_assert(!auth_is_loopback("10.0.0.1"));
  /* A name that merely starts with 127. is not an address (review L5). */
  ck_assert(!auth_is_loopback("127.0.0.1.invalid"));
  ck_assert(!auth_is_loopback("127.example.com"));
  ck_assert(auth_is_loopback("::ffff:127.0.0.1"));
  ck_assert_int_eq(auth_role("Bearer viewer-0123456789abcdef", a, w, "viewer-0123456789abcdef"),
                   AUTH_VIEWER);
  ck_assert_int_eq(auth_role("Bearer ", a, w, ""), -1);
}
END_TEST

static int write_file(char *path, const char *text) {
  strcpy(path, "/tmp/ctune-unit-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

START_TEST(auth_token_file) {
  char path[64], admin[256], worker[256], err[512];
  ck_assert_int_eq(write_file(path, "# c\n\nadmin=aaaaaaaaaaaaaaaa1\nworker=wwwwwwwwwwwwwwww1\n"),
                   0);
  ck_assert_int_eq(auth_load(path, admin, worker, NULL, sizeof admin, err, sizeof err), 0);
  ck_assert_str_eq(admin, "aaaaaaaaaaaaaaaa1");
  ck_assert_str_eq(worker, "wwwwwwwwwwwwwwww1");
  unlink(path);
  ck_assert_int_eq(write_file(path, "admin=aaaaaaaaaaaaaaaa1\n"), 0);
  ck_assert_int_eq(auth_load(path, admin, worker, NULL, sizeof admin, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "worker="));
  unlink(path);
  ck_assert_int_eq(write_file(path, "admin=aaaaaaaaaaaaaaaa1\nroot=x\n"), 0);
  ck_assert_int_eq(auth_load(path, admin, worker, NULL, sizeof admin, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, ":2:"));
  unlink(path);
  ck_assert_int_eq(write_file(path, "admin=aaaaaaaaaaaaaaaa1\nworker=aaaaaaaaaaaaaaaa1\n"), 0);
  ck_assert_int_eq(auth_load(path, admin, worker, NULL, sizeof admin, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "differ"));
  unlink(path);
  ck_assert_int_eq(
      auth_load("/nonexistent/tokens", admin, worker, NULL, sizeof admin, err, sizeof err), -EIO);
  /* Readable by others: refused, naming the file and the fix. */
  ck_assert_int_eq(write_file(path, "admin=aaaaaaaaaaaaaaaa1\nworker=wwwwwwwwwwwwwwww1\n"), 0);
  chmod(path, 0644);
  ck_assert_int_eq(auth_load(path, admin, worker, NULL, sizeof admin, err, sizeof err), -EPERM);
  ck_assert_ptr_nonnull(strstr(err, "chmod 600"));
  ck_assert_ptr_nonnull(strstr(err, path));
  unlink(path);
  /* The default file: created 0600 with three distinct 43-character tokens,
   * and the same ones read back on the next start. */
  char dir[64] = "/tmp/ctune-unit-XXXXXX", db[128], tp[256], a2[256], w2[256], v[256], v2[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/x.db", dir);
  int created = 0;
  ck_assert_int_eq(auth_default_file(db, tp, sizeof tp, admin, worker, v, sizeof admin, &created,
                                     err, sizeof err),
                   0);
  ck_assert_int_eq(created, 1);
  ck_assert_uint_eq(strlen(admin), 43);
  ck_assert_uint_eq(strlen(v), 43);
  struct stat st;
  ck_assert_int_eq(stat(tp, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  ck_assert_int_eq(
      auth_default_file(db, tp, sizeof tp, a2, w2, v2, sizeof a2, &created, err, sizeof err), 0);
  ck_assert_int_eq(created, 0);
  ck_assert_str_eq(admin, a2);
  ck_assert_str_eq(worker, w2);
  ck_assert_str_eq(v, v2);
  unlink(tp);
  rmdir(dir);
}
END_TEST

START_TEST(opts_defaults_and_errors) {
  struct server_options o;
  enum opts_action act;
  char err[256];
  char *a1[] = {"ctune-server", NULL};
  ck_assert_int_eq(opts_parse(1, a1, &o, &act, err, sizeof err), 0);
  ck_assert_int_eq(act, OPTS_RUN);
  ck_assert_int_eq(o.port, 8470);
  ck_assert_str_eq(o.bind, "127.0.0.1");
  ck_assert(o.lease_timeout_s == 30);
  ck_assert_int_eq(o.quarantine_after, 3); /* docs/server.md#quarantine */
  {
    char *q0[] = {"x", "--quarantine-after", "0", NULL};
    ck_assert_int_eq(opts_parse(3, q0, &o, &act, err, sizeof err), 0);
    ck_assert_int_eq(o.quarantine_after, 0);
    char *q17[] = {"x", "--quarantine-after", "17", NULL};
    ck_assert_int_eq(opts_parse(3, q17, &o, &act, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "--quarantine-after"));
  }
  char *a2[] = {"ctune-server", "--port", "0", "--db=/tmp/x.db", "--lease-timeout", "1.5", NULL};
  ck_assert_int_eq(opts_parse(6, a2, &o, &act, err, sizeof err), 0);
  ck_assert_int_eq(o.port, 0);
  ck_assert_str_eq(o.db_path, "/tmp/x.db");
  ck_assert(o.lease_timeout_s == 1.5 && o.heartbeat_interval_s == 0.5);
  ck_assert_int_eq(o.listen_fd, -1);
  char *lf[] = {"ctune-server", "--listen-fd", "5", NULL};
  ck_assert_int_eq(opts_parse(3, lf, &o, &act, err, sizeof err), 0);
  ck_assert_int_eq(o.listen_fd, 5);
  char *lf2[] = {"ctune-server", "--listen-fd", "2", NULL}; /* stderr is no socket of ours */
  ck_assert_int_eq(opts_parse(3, lf2, &o, &act, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "--listen-fd"));
  char *a3[] = {"ctune-server", "--port", "70000", NULL};
  ck_assert_int_eq(opts_parse(3, a3, &o, &act, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "--port"));
  char *a4[] = {"ctune-server", "--frobnicate", "1", NULL};
  ck_assert_int_eq(opts_parse(3, a4, &o, &act, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "--frobnicate"));
  char *a5[] = {"ctune-server", "--db", NULL};
  ck_assert_int_eq(opts_parse(2, a5, &o, &act, err, sizeof err), -EINVAL);
  char *a6[] = {"ctune-server", "--version", NULL};
  ck_assert_int_eq(opts_parse(2, a6, &o, &act, err, sizeof err), 0);
  ck_assert_int_eq(act, OPTS_VERSION);
  {
    char *a7[] = {"x", "--no-auth", "--allowed-host", "box.lan", "--allowed-host=h2", NULL};
    ck_assert_int_eq(opts_parse(5, a7, &o, &act, err, sizeof err), 0);
    ck_assert_int_eq(o.no_auth, 1);
    ck_assert_int_eq(o.read_only, 0);
    ck_assert_int_eq(o.nallowed_hosts, 2);
    ck_assert_str_eq(o.allowed_hosts[1], "h2");
    char *ro[] = {"x", "--read-only", "--port", "0", NULL}; /* a flag without a value */
    ck_assert_int_eq(opts_parse(4, ro, &o, &act, err, sizeof err), 0);
    ck_assert_int_eq(o.read_only, 1);
    ck_assert_int_eq(o.port, 0);
    char *a8[] = {"x", "--no-auth", "--token-file", "t", NULL};
    ck_assert_int_eq(opts_parse(4, a8, &o, &act, err, sizeof err), -EINVAL);
    char *a9[] = {"x", "--allowed-host", "fwd.lan:9000", NULL};
    ck_assert_int_eq(opts_parse(3, a9, &o, &act, err, sizeof err), 0);
    ck_assert_str_eq(o.allowed_hosts[0], "fwd.lan:9000");
    const char *bad[] = {"fwd.lan:0", "fwd.lan:70000", "fwd.lan:", ":9000", "a:1:2", "b:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      char *a10[] = {"x", "--allowed-host", (char *)bad[i], NULL};
      ck_assert_int_eq(opts_parse(3, a10, &o, &act, err, sizeof err), -EINVAL);
      ck_assert_ptr_nonnull(strstr(err, "NAME:PORT"));
    }
  }
}
END_TEST

/* A header lookup over a NULL-terminated list of name, value pairs. */
static const char *hdr_list(void *conn, const char *key) {
  const char *const *h = conn;
  for (; h[0]; h += 2)
    if (!strcasecmp(h[0], key)) return h[1];
  return NULL;
}

/* The Host check alone (no route): 0 served, else the 421's message. */
static int host_refused(struct server *s, const char *host, char *msg, size_t cap) {
  const char *h[] = {"Host", host, NULL};
  struct api_resp r;
  memset(&r, 0, sizeof r);
  int rc = auth_check_request_head(s, (void *)h, hdr_list, RM_GET, "/", NULL, &r);
  if (rc) ck_assert_int_eq(r.status, 421);
  snprintf(msg, cap, "%.*s", (int)r.len, r.body ? r.body : "");
  free(r.body);
  return rc;
}

START_TEST(auth_host_names_and_ports) {
  static struct server s;
  char msg[1024];
  memset(&s, 0, sizeof s);
  s.port = 8470;
  s.opt.bind = "127.0.0.1";
  s.opt.allowed_hosts[0] = "box.lan";
  s.opt.allowed_hosts[1] = "fwd.lan:9000";
  s.opt.nallowed_hosts = 2;
  /* IP literals on any port: a forwarder through the address just works. */
  ck_assert_int_eq(host_refused(&s, "127.0.0.1:8470", msg, sizeof msg), 0);
  ck_assert_int_eq(host_refused(&s, "127.0.0.1:9000", msg, sizeof msg), 0);
  ck_assert_int_eq(host_refused(&s, "[::1]:18470", msg, sizeof msg), 0);
  ck_assert_int_eq(host_refused(&s, "10.1.2.3", msg, sizeof msg), 0);
  /* Names on our port, or NAME:PORT as given. */
  ck_assert_int_eq(host_refused(&s, "localhost:8470", msg, sizeof msg), 0);
  ck_assert_int_eq(host_refused(&s, "LOCALHOST", msg, sizeof msg), 0);
  ck_assert_int_eq(host_refused(&s, "box.lan:8470", msg, sizeof msg), 0);
  ck_assert_int_eq(host_refused(&s, "fwd.lan:9000", msg, sizeof msg), 0);
  ck_assert_int_eq(host_refused(&s, "fwd.lan:8470", msg, sizeof msg), 0);
  /* A name on another port: the hint names the flag that serves it. */
  ck_assert_int_eq(host_refused(&s, "localhost:9000", msg, sizeof msg), 1);
  ck_assert_ptr_nonnull(strstr(msg, "--allowed-host localhost:9000"));
  ck_assert_ptr_nonnull(strstr(msg, "127.0.0.1:9000"));
  ck_assert_int_eq(host_refused(&s, "box.lan:9000", msg, sizeof msg), 1);
  ck_assert_int_eq(host_refused(&s, "fwd.lan:9001", msg, sizeof msg), 1);
  /* DNS rebinding: a foreign name, on any port. */
  ck_assert_int_eq(host_refused(&s, "evil.example:8470", msg, sizeof msg), 1);
  ck_assert_ptr_nonnull(strstr(msg, "--allowed-host evil.example"));
  ck_assert_int_eq(host_refused(&s, "127.0.0.1.nip.io:8470", msg, sizeof msg), 1);
  ck_assert_int_eq(host_refused(&s, "localhost.", msg, sizeof msg), 1);
  ck_assert_int_eq(host_refused(&s, "0x7f000001", msg, sizeof msg), 1);
  ck_assert_int_eq(host_refused(&s, "a, b", msg, sizeof msg), 1);
  ck_assert_int_eq(host_refused(&s, "evil:x", msg, sizeof msg), 1);
  ck_assert_ptr_null(strstr(msg, "--allowed-host evil"));
}
END_TEST

START_TEST(auth_rate_bucket) {
  struct auth_rate r;
  memset(&r, 0, sizeof r);
  double wait = -1;
  for (int i = 0; i < 3; i++) ck_assert_int_eq(auth_rate_take(&r, 3, 2, 100.0, &wait), 0);
  ck_assert_int_eq(auth_rate_take(&r, 3, 2, 100.0, &wait), -EAGAIN);
  ck_assert(wait > 0.49 && wait < 0.51); /* 2 a second: the next in 0.5 s */
  ck_assert_int_eq(auth_rate_take(&r, 3, 2, 100.25, &wait), -EAGAIN);
  ck_assert(wait > 0.24 && wait < 0.26);
  ck_assert_int_eq(auth_rate_take(&r, 3, 2, 100.5, &wait), 0);
  ck_assert_int_eq(auth_rate_take(&r, 3, 2, 100.5, &wait), -EAGAIN);
  /* A long quiet spell refills to the burst, not beyond. */
  for (int i = 0; i < 3; i++) ck_assert_int_eq(auth_rate_take(&r, 3, 2, 1000.0, &wait), 0);
  ck_assert_int_eq(auth_rate_take(&r, 3, 2, 1000.0, &wait), -EAGAIN);
  /* A clock that steps back takes nothing from the bucket. */
  ck_assert_int_eq(auth_rate_take(&r, 3, 2, 999.0, &wait), -EAGAIN);
  ck_assert_int_eq(auth_rate_take(&r, 3, 2, 1000.5, &wait), 0);
}
END_TEST

START_TEST(auth_sessions_viewer_cannot_evict_admin) {
  struct auth_sessions *ss = NULL;
  ck_assert_int_eq(auth_sessions_new(&ss), 0);
  char admin[64], id[64];
  ck_assert_int_eq(auth_session_create(ss, RA_ADMIN, admin, sizeof admin), 0);
  /* A viewer logs in far more often than there are slots. */
  for (int i = 0; i < 1000; i++)
    ck_assert_int_eq(auth_session_create(ss, AUTH_VIEWER, id, sizeof id), 0);
  ck_assert_int_eq(auth_session_lookup(ss, admin), RA_ADMIN);
  ck_assert_int_eq(auth_session_lookup(ss, id), AUTH_VIEWER);
  /* Admin logins (all slots taken) push out the oldest viewer session. */
  char admin2[64];
  ck_assert_int_eq(auth_session_create(ss, RA_ADMIN, admin2, sizeof admin2), 0);
  ck_assert_int_eq(auth_session_lookup(ss, admin), RA_ADMIN);
  ck_assert_int_eq(auth_session_lookup(ss, admin2), RA_ADMIN);
  auth_sessions_free(ss);
}
END_TEST

START_TEST(opts_durability) {
  struct server_options o;
  enum opts_action act;
  char err[256];
  char *a1[] = {"ctune-server", NULL};
  ck_assert_int_eq(opts_parse(1, a1, &o, &act, err, sizeof err), 0);
  ck_assert_int_eq(o.sync_full, 1); /* acknowledged means fsynced, by default */
  char *a2[] = {"ctune-server", "--durability", "normal", NULL};
  ck_assert_int_eq(opts_parse(3, a2, &o, &act, err, sizeof err), 0);
  ck_assert_int_eq(o.sync_full, 0);
  char *a3[] = {"ctune-server", "--durability=full", NULL};
  ck_assert_int_eq(opts_parse(2, a3, &o, &act, err, sizeof err), 0);
  ck_assert_int_eq(o.sync_full, 1);
  char *a4[] = {"ctune-server", "--durability", "fast", NULL};
  ck_assert_int_eq(opts_parse(3, a4, &o, &act, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "--durability"));
}
END_TEST

START_TEST(metrics_histogram) {
  static struct metrics m;
  memset(&m, 0, sizeof m);
  metrics_observe_request(&m, 0.00005);
  metrics_observe_request(&m, 0.003);
  metrics_observe_request(&m, 5.0);
  char buf[4096];
  ck_assert_int_gt(metrics_format(&m, buf, sizeof buf), 0);
  ck_assert_ptr_nonnull(
      strstr(buf, "ctune_http_request_duration_seconds_bucket{le=\"0.0001\"} 1\n"));
  ck_assert_ptr_nonnull(
      strstr(buf, "ctune_http_request_duration_seconds_bucket{le=\"0.005\"} 2\n"));
  ck_assert_ptr_nonnull(strstr(buf, "ctune_http_request_duration_seconds_bucket{le=\"1\"} 2\n"));
  ck_assert_ptr_nonnull(strstr(buf, "ctune_http_request_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
  ck_assert_ptr_nonnull(strstr(buf, "ctune_http_request_duration_seconds_count 3\n"));
  ck_assert_int_eq(metrics_format(&m, buf, 10), -ENOSPC);
}
END_TEST

/* Rule: a reply is answered with a shared, prebuilt response only when that
 * response is the reply byte for byte: the body a result's decision renders
 * to, application/json, no header but the caller's role; the shared one
 * carries the same headers as a response built for the reply. */
START_TEST(shared_reply_only_when_identical) {
  struct MHD_Response *shared[HTTP_NSHARED] = {NULL};
  ck_assert_int_eq(http_shared_new(shared), 0);
  const char *roles[] = {NULL, "worker", "admin"};
  for (int k = 0; k < 6; k++) {
    struct api_resp p = {0};
    cJSON *o = cJSON_CreateObject();
    ck_assert_ptr_nonnull(cJSON_AddStringToObject(o, "decision", k % 2 ? "stop" : "continue"));
    ck_assert_int_eq(api_json(&p, 200, o), 0);
    if (roles[k / 2]) api_header(&p, API_ROLE_HEADER, "%s", roles[k / 2]);
    struct MHD_Response *m = http_shared_find(shared, &p);
    ck_assert_ptr_nonnull(m);
    struct MHD_Response *own = http_response_new(&p); /* takes p.body */
    ck_assert_ptr_nonnull(own);
    const char *names[] = {MHD_HTTP_HEADER_CONTENT_TYPE, API_ROLE_HEADER,
                           "Content-Security-Policy",    "X-Frame-Options",
                           "X-Content-Type-Options",     "Referrer-Policy"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
      const char *a = MHD_get_response_header(m, names[i]);
      const char *b = MHD_get_response_header(own, names[i]);
      ck_assert_msg(a == b || (a && b && !strcmp(a, b)), "%s: %s against %s", names[i],
                    a ? a : "none", b ? b : "none");
    }
    /* no header more: the same count (Content-Length is MHD's own) */
    int n_shared = MHD_get_response_headers(m, NULL, NULL);
    ck_assert_int_eq(n_shared, MHD_get_response_headers(own, NULL, NULL));
    MHD_destroy_response(own);
  }
  /* anything else is built for itself */
  struct api_resp p = {.status = 200, .content_type = "application/json"};
  p.body = strdup("{\"decision\":\"continue\"}");
  p.len = strlen(p.body);
  api_header(&p, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  ck_assert_ptr_null(http_shared_find(shared, &p)); /* a header of its own */
  p.nheaders = 0;
  api_header(&p, "X-Other", "worker");
  ck_assert_ptr_null(http_shared_find(shared, &p)); /* a role's value, another name */
  p.nheaders = 0;
  api_header(&p, API_ROLE_HEADER, "viewer");
  ck_assert_ptr_null(http_shared_find(shared, &p)); /* a role without a shared reply */
  p.nheaders = 0;
  api_header(&p, API_ROLE_HEADER, "worker");
  api_header(&p, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  ck_assert_ptr_null(http_shared_find(shared, &p)); /* the role and one more */
  p.nheaders = 0;
  p.content_type = "text/plain";
  ck_assert_ptr_null(http_shared_find(shared, &p)); /* another type */
  p.content_type = "application/json";
  p.len--;
  ck_assert_ptr_null(http_shared_find(shared, &p)); /* another body */
  p.len++;
  ck_assert_ptr_nonnull(http_shared_find(shared, &p));
  free(p.body);
  http_shared_free(shared);
}
END_TEST

START_TEST(utf8_checks_and_repairs) {
  size_t bad = 99;
  ck_assert(utf8_valid("plain", 5, &bad));
  ck_assert(utf8_valid("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, &bad));
  ck_assert(!utf8_valid("ab\xff", 3, &bad));
  ck_assert_uint_eq(bad, 2);
  ck_assert(!utf8_valid("\xc0\xaf", 2, &bad));         /* overlong '/' */
  ck_assert(!utf8_valid("\xed\xa0\x80", 3, &bad));     /* a surrogate */
  ck_assert(!utf8_valid("\xe2\x82", 2, &bad));         /* cut short */
  ck_assert(!utf8_valid("\xf4\x90\x80\x80", 4, &bad)); /* past U+10FFFF */
  char s[] = "ok\xff\xc3\xa9\xe2\x82";
  ck_assert_uint_eq(utf8_sanitize(s, strlen(s)), 3);
  ck_assert_str_eq(s, "ok?\xc3\xa9??");
  ck_assert(utf8_valid(s, strlen(s), NULL));
}
END_TEST

int main(void) {
  Suite *s = suite_create("server_daemon");
  TCase *tc = tcase_create("pure");
  tcase_add_test(tc, route_matches_ids_and_methods);
  tcase_add_test(tc, route_rejects_bad_ids_and_methods);
  tcase_add_test(tc, route_wildcards);
  tcase_add_test(tc, static_paths);
  tcase_add_test(tc, static_types);
  tcase_add_test(tc, auth_compare_and_roles);
  tcase_add_test(tc, auth_token_file);
  tcase_add_test(tc, opts_defaults_and_errors);
  tcase_add_test(tc, opts_durability);
  tcase_add_test(tc, auth_host_names_and_ports);
  tcase_add_test(tc, auth_rate_bucket);
  tcase_add_test(tc, auth_sessions_viewer_cannot_evict_admin);
  tcase_add_test(tc, metrics_histogram);
  tcase_add_test(tc, shared_reply_only_when_identical);
  tcase_add_test(tc, utf8_checks_and_repairs);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
