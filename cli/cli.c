/* cli: the pieces every subcommand shares — signals, width, connecting and
 * turning request failures into one line and an exit code. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "exitcode.h"

volatile sig_atomic_t cli_signal;

static void on_signal(int sig) { cli_signal = sig; }

void cli_signals_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0; /* no SA_RESTART: sleeps return at once */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

int cli_width(const struct cli_args *a) {
  if (a->width > 0) return a->width;
  struct winsize ws;
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
    return ws.ws_col;
  const char *cols = getenv("COLUMNS");
  if (cols) {
    int v = atoi(cols);
    if (v >= 20) return v;
  }
  return 120;
}

int cli_connect(const struct cli_args *a, struct http_client *c) {
  const char *server = a->server ? a->server : getenv("CTUNE_SERVER");
  if (!server || !*server) server = "http://127.0.0.1:8470";
  if (strncmp(server, "http://", 7) && strncmp(server, "https://", 8)) {
    fprintf(stderr, "ctune: CTUNE_SERVER '%s' must start with http:// or https://\n", server);
    return CLI_EXIT_USAGE;
  }
  char *token = NULL;
  if (a->token_file) {
    char err[512];
    if (http_read_token_file(a->token_file, &token, err, sizeof(err))) {
      fprintf(stderr, "ctune: %s\n", err);
      return CLI_EXIT_USAGE;
    }
  } else if (getenv("CTUNE_TOKEN") && *getenv("CTUNE_TOKEN")) {
    token = strdup(getenv("CTUNE_TOKEN"));
    if (!token) return CLI_EXIT_ERROR;
  } else {
    /* On the server's machine the token is found without being asked for:
     * --db DB reads DB.tokens (the file ctune-server creates beside its
     * database); a loopback server with ctune.db.tokens here (the server's
     * default --db) reads that. */
    char path[4096] = "", err[512];
    const char *host = strstr(server, "://") + 3;
    int loopback = !strncmp(host, "127.", 4) || !strncmp(host, "localhost", 9) ||
                   !strncmp(host, "[::1]", 5);
    if (a->db) snprintf(path, sizeof(path), "%s.tokens", a->db);
    else if (loopback && !access("ctune.db.tokens", R_OK))
      snprintf(path, sizeof(path), "ctune.db.tokens");
    if (path[0] && http_read_token_file(path, &token, err, sizeof(err))) {
      fprintf(stderr, "ctune: %s (the token file of the server's --db)\n", err);
      return CLI_EXIT_USAGE;
    }
  }
  int rc = http_client_init(c, server, token);
  free(token);
  if (!rc) c->ca_file = a->ca_file ? a->ca_file : getenv("CTUNE_CA_FILE"); /* https */
  if (rc) {
    fprintf(stderr, "ctune: cannot set up the HTTP client (%s)\n", strerror(-rc));
    return CLI_EXIT_ERROR;
  }
  return 0;
}

int cli_fail_http(int rc, const struct http_error *err) {
  if (err && err->message[0])
    fprintf(stderr, "ctune: %s\n", err->message);
  else
    fprintf(stderr, "ctune: request failed (%s)\n", strerror(-rc));
  return http_exit_code(rc);
}

int cli_fetch_state(struct http_client *c, long long id, struct report_state *s,
                    struct http_error *err) {
  char path[128];
  cJSON *exp = NULL, *trials = NULL, *workers = NULL;
  memset(s, 0, sizeof(*s));
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld", id);
  int rc = http_json(c, "GET", path, NULL, &exp, err);
  if (rc) {
    if (rc == HTTP_ERR_NOT_FOUND)
      snprintf(err->message, sizeof(err->message),
               "experiment %lld not found on %s; list experiments with `ctune status`", id, c->base);
    return rc;
  }
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/trials", id);
  rc = http_json(c, "GET", path, NULL, &trials, err);
  if (rc) {
    cJSON_Delete(exp);
    return rc;
  }
  /* Workers are context only: a failure here must not end a watch. */
  struct http_error werr;
  if (http_json(c, "GET", "/api/v1/workers", NULL, &workers, &werr)) workers = NULL;
  rc = report_state_load(s, exp, trials, workers);
  if (rc == -EINVAL)
    snprintf(err->message, sizeof(err->message),
             "the server at %s sent an experiment or trial list of an unexpected shape", c->base);
  return rc == -EINVAL ? HTTP_ERR_SERVER : rc;
}
