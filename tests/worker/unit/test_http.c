/* The worker's HTTP client against a local server (libmicrohttpd): each
 * request goes as it was asked for, whatever the requests before it on the
 * same client were (their easy handles are reused). */
#include <check.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "http.h"

struct upload {
  char body[256];
  size_t len;
};

/* Answers "METHOD|X-Test|body|Content-Type" ("-" for a header not sent);
 * closes the connection after it for /close. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **state) {
  (void)cls, (void)version;
  struct upload *u = *state;
  if (!u) {
    *state = calloc(1, sizeof *u);
    return *state ? MHD_YES : MHD_NO;
  }
  if (*size) {
    size_t n = *size < sizeof u->body - 1 - u->len ? *size : sizeof u->body - 1 - u->len;
    memcpy(u->body + u->len, data, n);
    u->len += n;
    *size = 0;
    return MHD_YES;
  }
  const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Test");
  const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
  char text[512];
  int n = snprintf(text, sizeof text, "%s|%s|%s|%s", method, x ? x : "-", u->body, ct ? ct : "-");
  struct MHD_Response *r = MHD_create_response_from_buffer((size_t)n, text, MHD_RESPMEM_MUST_COPY);
  if (!strcmp(url, "/close")) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ok = MHD_queue_response(conn, 200, r);
  MHD_destroy_response(r);
  return ok;
}

static void on_done(void *cls, struct MHD_Connection *conn, void **state,
                    enum MHD_RequestTerminationCode code) {
  (void)cls, (void)conn, (void)code;
  free(*state);
  *state = NULL;
}

struct got {
  int done, err;
  long status;
  char body[512];
};

static void on_reply(void *arg, int err, const struct http_resp *resp) {
  struct got *g = arg;
  g->done = 1;
  g->err = err;
  g->status = resp->status;
  snprintf(g->body, sizeof g->body, "%s", resp->body ? resp->body : "");
}

static void ask_at(uv_loop_t *loop, struct http_client *c, const char *path, const char *method,
                   const char *body, const char *ct, const char *const *hdrs, const char *want) {
  struct got g = {0};
  ck_assert_int_eq(
      http_request(c, method, path, ct, body, body ? strlen(body) : 0, hdrs, 5000, on_reply, &g),
      0);
  while (!g.done && uv_run(loop, UV_RUN_ONCE)) {
  }
  ck_assert_int_eq(g.done, 1);
  ck_assert_int_eq(g.err, 0);
  ck_assert_int_eq(g.status, 200);
  ck_assert_str_eq(g.body, want);
}

static void ask(uv_loop_t *loop, struct http_client *c, const char *method, const char *body,
                const char *ct, const char *const *hdrs, const char *want) {
  ask_at(loop, c, "/x", method, body, ct, hdrs, want);
}

/* Rule: a request carries its own method, headers and body alone: nothing
 * of an earlier request on the same client (a reused easy handle is reset);
 * a socket's poll handle lives as long as the socket. */
START_TEST(requests_do_not_inherit_earlier_ones) {
  struct MHD_Daemon *d =
      MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, on_request, NULL,
                       MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL, MHD_OPTION_END);
  ck_assert_ptr_nonnull(d);
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  ck_assert_ptr_nonnull(info);
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", (unsigned)info->port);
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  struct http_client *c = NULL;
  ck_assert_int_eq(http_client_new(&loop, base, NULL, &c), 0);
  const char *const x[] = {"X-Test: 1", NULL};
  for (int round = 0; round < 2; round++) {
    ask(&loop, c, "PUT", "up", "application/json", x, "PUT|1|up|application/json");
    ask(&loop, c, "GET", NULL, NULL, NULL, "GET|-||-");
    ask(&loop, c, "POST", "{}", "application/json", NULL, "POST|-|{}|application/json");
  }
  /* The kept-alive connection's socket keeps its poll handle between
   * requests; a connection the server closes takes its handle with it, and
   * the next request opens another. */
  ck_assert_int_eq(http_sockets(c), 1);
  ask_at(&loop, c, "/close", "GET", NULL, NULL, NULL, "GET|-||-");
  ck_assert_int_eq(http_sockets(c), 0);
  ask(&loop, c, "POST", "{}", "application/json", NULL, "POST|-|{}|application/json");
  ck_assert_int_eq(http_sockets(c), 1);
  http_client_close(c);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  MHD_stop_daemon(d);
}
END_TEST

int main(void) {
  Suite *s = suite_create("http");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, requests_do_not_inherit_earlier_ones);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
