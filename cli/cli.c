/* cli: the pieces every subcommand shares — signals, width, connecting and
 * turning request failures into one line and an exit code. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "exitcode.h"
#include "proc.h"

volatile sig_atomic_t cli_signal;
static volatile sig_atomic_t signals_seen;
static int second_exits;

/* The first signal asks for a graceful stop (the loops poll cli_signal);
 * a second one means "now": `ctune run` stops waiting for its children
 * (proc_hurry: SIGKILL instead of the grace), other commands exit here. */
static void on_signal(int sig) {
  cli_signal = sig;
  if (++signals_seen < 2) return;
  proc_hurry = 1;
  if (second_exits) {
    static const char msg[] = "\nctune: second signal: stopped at once\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(sig == SIGINT ? CLI_EXIT_INTERRUPTED : 128 + sig);
  }
}

void cli_signals_install(int second_signal_exits) {
  second_exits = second_signal_exits;
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

/* --db DB with no server on it: a reading command starts a read-only
 * ctune-server of its own on DB (--read-only: it changes nothing in DB and
 * writes no login URL; a free loopback port, its log in a temporary file),
 * as ctune.open does, and stops it when ctune exits (atexit). */
static struct proc own_server;
static char own_log[PATH_MAX];

static void cli_own_server_stop(void) {
  proc_stop(&own_server, 10000);
  if (own_log[0]) unlink(own_log);
}

static int cli_reads_only(enum cli_cmd cmd) {
  return cmd == CMD_STATUS || cmd == CMD_TRIALS || cmd == CMD_TRIAL || cmd == CMD_BEST ||
         cmd == CMD_LOGS || cmd == CMD_EXPORT;
}

/* 1 when a process holds the flock a ctune-server takes on its database
 * file, 0 when none does, or a negative errno (no such file). */
static int cli_db_served(const char *db) {
  int fd = open(db, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int held = flock(fd, LOCK_SH | LOCK_NB) ? errno == EWOULDBLOCK : 0;
  close(fd); /* closing drops the shared lock, if taken */
  return held;
}

static int cli_own_server_start(const char *db, char *url, size_t cap) {
  char bin[PATH_MAX], msg[512], rest[200];
  if (proc_find("ctune-server", bin, sizeof(bin), msg, sizeof(msg))) {
    fprintf(stderr, "ctune: --db %s: %s\n", db, msg);
    return CLI_EXIT_ERROR;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(own_log, sizeof(own_log), "%s/ctune-db-server-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(own_log);
  if (fd < 0) {
    fprintf(stderr, "ctune: cannot create %s: %s\n", own_log, strerror(errno));
    own_log[0] = '\0';
    return CLI_EXIT_ERROR;
  }
  close(fd);
  if (atexit(cli_own_server_stop)) {
    unlink(own_log);
    own_log[0] = '\0';
    return CLI_EXIT_ERROR;
  }
  char *argv[] = {bin,         "--db",   (char *)db, "--read-only", "--bind",
                  "127.0.0.1", "--port", "0",        NULL};
  int rc = proc_spawn(&own_server, "ctune-server", argv, own_log);
  if (rc) {
    fprintf(stderr, "ctune: cannot start %s: %s\n", bin, strerror(-rc));
    return CLI_EXIT_ERROR;
  }
  rc = proc_wait_log_line(&own_server, own_log, 0, "listening on http://", 30000, &cli_signal, rest,
                          sizeof(rest));
  if (rc == -EINTR) return CLI_EXIT_INTERRUPTED;
  if (rc) {
    char last[512] = "";
    FILE *f = fopen(own_log, "re");
    while (f && fgets(msg, sizeof(msg), f))
      if (strstr(msg, " error ")) snprintf(last, sizeof(last), "%s", msg);
    if (f) fclose(f);
    fprintf(stderr, "ctune: --db %s: ctune-server %s%s%s", db,
            rc == -ECHILD ? "did not start" : "did not listen within 30 s", last[0] ? ": " : "\n",
            last);
    return CLI_EXIT_ERROR;
  }
  snprintf(url, cap, "http://%s", rest);
  return 0;
}

/* The server on DB as its <DB>.login-url says ("URL/?token=TOKEN", 0600,
 * written at each start): 0 with url and *token (malloc'd), else -ENOENT
 * (no such file, or not that form) or -ENOMEM. */
static int cli_login_url(const char *db, char *url, size_t cap, char **token) {
  char path[PATH_MAX + 16], real[PATH_MAX], line[1024];
  snprintf(path, sizeof(path), "%s.login-url", realpath(db, real) ? real : db);
  FILE *f = fopen(path, "re");
  if (!f) return -ENOENT;
  char *got = fgets(line, sizeof(line), f);
  fclose(f);
  char *q = got ? strstr(line, "/?token=") : NULL;
  if (!q || (strncmp(line, "http://", 7) && strncmp(line, "https://", 8)) ||
      (size_t)(q - line) >= cap)
    return -ENOENT;
  q[strcspn(q, "\r\n")] = '\0';
  if (!q[8]) return -ENOENT;
  snprintf(url, cap, "%.*s", (int)(q - line), line);
  *token = strdup(q + 8);
  return *token ? 0 : -ENOMEM;
}

int cli_connect(const struct cli_args *a, struct http_client *c) {
  const char *server = a->server ? a->server : getenv("CTUNE_SERVER");
  char own_url[256];
  char *token = NULL;
  if (a->db && !a->server && cli_reads_only(a->cmd)) {
    int served = cli_db_served(a->db);
    if (served < 0) {
      fprintf(stderr, "ctune: --db %s: %s\n", a->db, strerror(-served));
      return CLI_EXIT_USAGE;
    }
    if (!served) {
      int ex = cli_own_server_start(a->db, own_url, sizeof(own_url));
      if (ex) return ex;
      server = own_url;
    } else if (!server && !a->token_file) {
      /* A server holds DB (a `ctune run` going on): the address it wrote. */
      int rc = cli_login_url(a->db, own_url, sizeof(own_url), &token);
      if (rc == -ENOMEM) return CLI_EXIT_ERROR;
      if (!rc) server = own_url;
    }
  }
  if (!server || !*server) server = "http://127.0.0.1:8470";
  if (strncmp(server, "http://", 7) && strncmp(server, "https://", 8)) {
    fprintf(stderr, "ctune: CTUNE_SERVER '%s' must start with http:// or https://\n", server);
    free(token);
    return CLI_EXIT_USAGE;
  }
  if (token) { /* the login URL's, above */
  } else if (a->token_file) {
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
    int loopback =
        !strncmp(host, "127.", 4) || !strncmp(host, "localhost", 9) || !strncmp(host, "[::1]", 5);
    char real[PATH_MAX];
    if (a->db) { /* beside the database file itself, as the server names it */
      snprintf(path, sizeof(path), "%s.tokens", realpath(a->db, real) ? real : a->db);
    } else if (loopback) {
      snprintf(path, sizeof(path), "%s.tokens", realpath("ctune.db", real) ? real : "ctune.db");
      if (access(path, R_OK)) path[0] = '\0';
    }
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

/* Lists come in pages (docs/protocol.md#pages). GET path (no query yet) page after page
 * (limit 10000, following next_cursor) into one document whose `key` array
 * holds every item. */
int cli_get_all(struct http_client *c, const char *path, const char *key, cJSON **out,
                struct http_error *err) {
  char url[512];
  snprintf(url, sizeof(url), "%s?limit=10000", path);
  int rc = http_json(c, "GET", url, NULL, out, err);
  for (int pages = 0; !rc && pages < 100000; pages++) {
    const cJSON *next = cJSON_GetObjectItemCaseSensitive(*out, "next_cursor");
    cJSON *all = cJSON_GetObjectItemCaseSensitive(*out, key), *more = NULL;
    if (!cJSON_IsString(next) || !cJSON_IsArray(all) || strlen(next->valuestring) > 64) break;
    snprintf(url, sizeof(url), "%s?limit=10000&cursor=%s", path, next->valuestring);
    if ((rc = http_json(c, "GET", url, NULL, &more, err))) break;
    cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(more, key);
    cJSON *it;
    while (items && (it = cJSON_DetachItemViaPointer(items, items->child)) != NULL)
      cJSON_AddItemToArray(all, it);
    cJSON_Delete(items);
    cJSON *nc = cJSON_DetachItemFromObjectCaseSensitive(more, "next_cursor");
    cJSON_ReplaceItemInObjectCaseSensitive(*out, "next_cursor", nc ? nc : cJSON_CreateNull());
    cJSON_Delete(more);
  }
  if (rc) {
    cJSON_Delete(*out);
    *out = NULL;
  }
  return rc;
}

static int cli_fetch_experiment(struct http_client *c, long long id, cJSON **exp,
                                struct http_error *err) {
  char path[64];
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld", id);
  int rc = http_json(c, "GET", path, NULL, exp, err);
  if (rc == HTTP_ERR_NOT_FOUND)
    snprintf(err->message, sizeof(err->message),
             "experiment %lld not found on %s; list experiments with `ctune status`", id, c->base);
  return rc;
}

/* Workers are context only: a failure here must not end a watch (NULL). */
static cJSON *cli_fetch_workers(struct http_client *c) {
  struct http_error werr;
  cJSON *workers = NULL;
  if (cli_get_all(c, "/api/v1/workers", "workers", &workers, &werr)) workers = NULL;
  return workers;
}

static int cli_state_rc(struct http_client *c, int rc, struct http_error *err) {
  if (rc == -EINVAL)
    snprintf(err->message, sizeof(err->message),
             "the server at %s sent an experiment or trial list of an unexpected shape", c->base);
  return rc == -EINVAL ? HTTP_ERR_SERVER : rc;
}

int cli_fetch_state(struct http_client *c, long long id, struct report_state *s,
                    struct http_error *err) {
  char path[128];
  cJSON *exp = NULL, *trials = NULL;
  memset(s, 0, sizeof(*s));
  int rc = cli_fetch_experiment(c, id, &exp, err);
  if (rc) return rc;
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/trials", id);
  rc = cli_get_all(c, path, "trials", &trials, err);
  if (rc) {
    cJSON_Delete(exp);
    return rc;
  }
  return cli_state_rc(c, report_state_load(s, exp, trials, cli_fetch_workers(c)), err);
}

int cli_fetch_changes(struct http_client *c, long long id, struct report_state *prev,
                      struct report_state *s, struct http_error *err) {
  char path[160];
  cJSON *exp = NULL, *changed = NULL;
  memset(s, 0, sizeof(*s));
  if (!report_state_mergeable(prev)) return cli_fetch_state(c, id, s, err);
  int rc = cli_fetch_experiment(c, id, &exp, err);
  if (rc) return rc;
  /* In change order: a reply cut by the limit (more changed than that)
   * is not merged; the whole list is read instead. */
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/trials?since=%lld&limit=%d", id,
           prev->last_seq, CLI_CHANGES_LIMIT);
  rc = http_json(c, "GET", path, NULL, &changed, err);
  if (rc) {
    cJSON_Delete(exp);
    return rc;
  }
  const cJSON *total = cJSON_GetObjectItemCaseSensitive(changed, "total");
  if (!cJSON_IsNumber(total) || total->valuedouble > CLI_CHANGES_LIMIT) {
    cJSON_Delete(exp);
    cJSON_Delete(changed);
    return cli_fetch_state(c, id, s, err);
  }
  return cli_state_rc(c, report_state_merge(s, prev, exp, changed, cli_fetch_workers(c)), err);
}

/* Trial names are "<experiment name>_<index>": the experiments whose name
 * that starts with are asked for their trials, newest first. */
int cli_resolve_trial(struct http_client *c, const char *target, long long *id,
                      struct http_error *err) {
  cJSON *exps = NULL;
  int rc = cli_get_all(c, "/api/v1/experiments", "experiments", &exps, err);
  if (rc) return rc;
  const cJSON *list =
      cJSON_IsArray(exps) ? exps : cJSON_GetObjectItemCaseSensitive(exps, "experiments");
  int n = cJSON_GetArraySize(list), found = 0;
  long long others[4];
  *id = 0;
  for (int i = n - 1; i >= 0 && !rc; i--) {
    const cJSON *e = cJSON_GetArrayItem(list, i);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    size_t nl = cJSON_IsString(name) ? strlen(name->valuestring) : 0;
    if (!nl || strncmp(target, name->valuestring, nl) || target[nl] != '_') continue;
    char path[96];
    cJSON *trials = NULL;
    snprintf(path, sizeof(path), "/api/v1/experiments/%lld/trials",
             (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "id")));
    if ((rc = cli_get_all(c, path, "trials", &trials, err))) break;
    const cJSON *tl =
        cJSON_IsArray(trials) ? trials : cJSON_GetObjectItemCaseSensitive(trials, "trials");
    const cJSON *t;
    cJSON_ArrayForEach(t, tl) {
      const cJSON *tn = cJSON_GetObjectItemCaseSensitive(t, "name");
      if (!cJSON_IsString(tn) || strcmp(tn->valuestring, target)) continue;
      long long tid = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "id"));
      if (!found)
        *id = tid;
      else if (found <= 4)
        others[found - 1] = tid;
      found++;
    }
    cJSON_Delete(trials);
  }
  cJSON_Delete(exps);
  if (rc) return rc;
  if (!found) {
    err->status = 404;
    snprintf(err->code, sizeof(err->code), "not_found");
    snprintf(err->message, sizeof(err->message),
             "no trial named '%s' on %s; list trials (names and ids) with `ctune trials EXP`",
             target, c->base);
    return HTTP_ERR_NOT_FOUND;
  }
  if (found > 1) {
    /* A config submitted twice gives its trials the same names again: the
     * newest wins, and the others are named so the id can be given. */
    char list_ids[96] = "";
    size_t u = 0;
    for (int i = 0; i < found - 1 && i < 4 && u < sizeof(list_ids); i++)
      u += (size_t)snprintf(list_ids + u, sizeof(list_ids) - u, "%s%lld", i ? ", " : "", others[i]);
    fprintf(stderr, "ctune: %d trials are named '%s': using the newest, id %lld (older: %s%s)\n",
            found, target, *id, list_ids, found > 5 ? ", ..." : "");
  }
  return 0;
}
