/* Unit tests (Check) for ctune-server's HTTP glue in-process: the state
 * harness's server (tests/server/state/harness.h) served by http_start on a
 * loopback port. */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "log.h"
#include "http.h"

#define NCONN 32

/* One GET /healthz on fd, a socket of this process (connected here unless
 * port < 0), its reply read: the connection is open and listed when this
 * returns. 0 or -1. */
static int get_healthz(int fd, int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {5, 0}; /* bounded: a test never hangs */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (port >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a)) return -1;
  const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) return -1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  if (n <= 0) return -1;
  buf[n] = 0;
  return strstr(buf, " 200 ") ? 0 : -1;
}

/* The harness's server behind http_start on a loopback port, 2 threads. */
static struct http *start_http(struct harness *h, int *port) {
  h_open(h);
  h->s.opt.bind = "127.0.0.1";
  h->s.opt.port = 0;
  h->s.opt.threads = 2;
  struct http *http = NULL;
  char err[256] = "";
  ck_assert_msg(http_start(&h->s, &http, port, err, sizeof err) == 0, "%s", err);
  return http;
}

/* Rule: the server's connections are spread evenly over its HTTP threads
 * (accepted by one thread, handed to libmicrohttpd, which gives each to a
 * thread by its socket number), not to whichever thread wins the race for
 * the listening socket. */
START_TEST(connections_spread_over_the_threads) {
  struct harness h;
  int port = 0;
  struct http *http = start_http(&h, &port);
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

/* Reads the test's captured stderr until a line holds `want` (bounded):
 * into buf, 1 when found. */
static int wait_log(int fd, char *buf, size_t cap, size_t *len, const char *want) {
  while (!strstr(buf, want)) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 5000) <= 0 || *len + 1 >= cap) return 0;
    ssize_t n = read(fd, buf + *len, cap - 1 - *len);
    if (n <= 0) return 0;
    *len += (size_t)n;
    buf[*len] = 0;
  }
  return 1;
}

/* Rule: the acceptor outlives a shortage of descriptors: a connection
 * waits in the backlog and is served once descriptors are free again, and
 * the shortage is logged once, not at every retry. */
START_TEST(accepting_survives_running_out_of_descriptors) {
  struct harness h;
  int port = 0;
  struct http *http = start_http(&h, &port);
  log_set_level(LOG_INFO); /* the harness keeps tests quiet: the lines are the test */
  int pfd[2], saved = dup(2);
  ck_assert_int_eq(pipe(pfd), 0);
  ck_assert_int_eq(dup2(pfd[1], 2), 2);
  int first = socket(AF_INET, SOCK_STREAM, 0), second = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(first, 0);
  ck_assert_int_ge(second, 0);
  /* No descriptor free below the limit (an accept already waiting may hold
   * one: then the first connection is accepted and the next accept fails). */
  int lowest = open("/dev/null", O_RDONLY);
  close(lowest);
  struct rlimit rl, low;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  low = rl;
  low.rlim_cur = (rlim_t)lowest;
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int queued = connect(first, (struct sockaddr *)&a, sizeof a);
  char log[8192] = "";
  size_t len = 0;
  int short_seen = wait_log(pfd[0], log, sizeof log, &len, "cannot accept a connection");
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
  /* a connection accepted after the shortage (the first, or this one) */
  queued |= connect(second, (struct sockaddr *)&a, sizeof a);
  int again_seen = wait_log(pfd[0], log, sizeof log, &len, "accepting again");
  dup2(saved, 2);
  close(saved);
  close(pfd[1]);
  close(pfd[0]);
  log_set_level(LOG_ERROR);
  ck_assert_int_eq(queued, 0);
  ck_assert_msg(short_seen, "no shortage logged: %s", log);
  ck_assert_msg(again_seen, "not accepting again: %s", log);
  const char *line = strstr(log, "cannot accept a connection");
  ck_assert_ptr_null(strstr(line + 1, "cannot accept a connection")); /* logged once */
  ck_assert_int_eq(get_healthz(first, -1), 0);                        /* both served */
  ck_assert_int_eq(get_healthz(second, -1), 0);
  close(first);
  close(second);
  http_stop(http);
  h_close(&h);
}
END_TEST

int main(void) {
  Suite *s = suite_create("server_http");
  TCase *tc = tcase_create("http");
  tcase_set_timeout(tc, 30);
  /* first: no earlier test's connections still closing, whose
   * descriptors would come free in the middle of it */
  tcase_add_test(tc, accepting_survives_running_out_of_descriptors);
  tcase_add_test(tc, connections_spread_over_the_threads);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
