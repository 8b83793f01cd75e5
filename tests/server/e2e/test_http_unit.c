/* Unit tests (Check) for ctune-server's HTTP glue in-process: the state
 * harness's server (tests/server/state/harness.h) served by http_start on a
 * loopback port. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "http.h"

#define NCONN 32

/* One GET /healthz on fd, a socket of this process, its reply read: the
 * connection is open and listed when this returns. 0 or -1. */
static int get_healthz(int fd, int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {5, 0}; /* bounded: a test never hangs */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) return -1;
  const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) return -1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  if (n <= 0) return -1;
  buf[n] = 0;
  return strstr(buf, " 200 ") ? 0 : -1;
}

/* Rule: the server's connections are spread evenly over its HTTP threads
 * (accepted by one thread, handed to libmicrohttpd, which gives each to a
 * thread by its socket number), not to whichever thread wins the race for
 * the listening socket. */
START_TEST(connections_spread_over_the_threads) {
  struct harness h;
  h_open(&h);
  h.s.opt.bind = "127.0.0.1";
  h.s.opt.port = 0;
  h.s.opt.threads = 2;
  struct http *http = NULL;
  int port = 0;
  char err[256] = "";
  ck_assert_msg(http_start(&h.s, &http, &port, err, sizeof err) == 0, "%s", err);
  /* The client's sockets first: the server's then get numbers of their own
   * in a row, as a server's connections from other processes do. */
  int fds[NCONN];
  for (int i = 0; i < NCONN; i++) ck_assert_int_ge(fds[i] = socket(AF_INET, SOCK_STREAM, 0), 0);
  for (int i = 0; i < NCONN; i++) ck_assert_int_eq(get_healthz(fds[i], port), 0);
  int threads = 0, most = 0;
  http_conn_spread(http, &threads, &most);
  ck_assert_int_eq(threads, 2);
  ck_assert_msg(most <= NCONN / 2 + 1, "one thread serves %d of %d connections", most, NCONN);
  for (int i = 0; i < NCONN; i++) close(fds[i]);
  http_stop(http);
  h_close(&h);
}
END_TEST

int main(void) {
  Suite *s = suite_create("server_http");
  TCase *tc = tcase_create("http");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, connections_spread_over_the_threads);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
