/* run: `ctune run CONFIG` — a private ctune-server and ctune-worker on this
 * machine, the experiment submitted (or resumed), the reporter until it ends,
 * the best trial, and the children stopped in order whatever happens. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "jsonout.h"
#include "config.h"
#include "exitcode.h"
#include "proc.h"
#include "validate.h"

/* Short, so a resumed run does not wait long for the dead worker's leases. */
#define RUN_LEASE_TIMEOUT_S "10"

struct run_ctx {
  struct proc server, worker;
  char server_log[PATH_MAX], worker_log[PATH_MAX];
  long worker_log_off; /* the worker log's size when this run started it */
};

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* The last few lines of a child's log, for the message when it died. */
static void print_log_tail(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char lines[5][512];
  int n = 0;
  while (fgets(lines[n % 5], sizeof(lines[0]), f)) n++;
  fclose(f);
  for (int i = n > 5 ? n - 5 : 0; i < n; i++) fprintf(stderr, "  | %s", lines[i % 5]);
}

/* Polled by the watch loop: a child that died ends the run. */
static int children_alive(void *arg) {
  struct run_ctx *r = arg;
  /* A worker told to stop (the experiment ended) is expected to exit. */
  struct proc *dead = proc_exited(&r->server)                        ? &r->server
                      : proc_exited(&r->worker) && !r->worker.termed ? &r->worker
                                                                     : NULL;
  if (!dead) return 0;
  fprintf(stderr, "ctune: %s exited unexpectedly (wait status %d); last lines of %s:\n", dead->name,
          dead->status, dead == &r->server ? r->server_log : r->worker_log);
  print_log_tail(dead == &r->server ? r->server_log : r->worker_log);
  return -ECHILD;
}

/* The experiment ended (its event stream says so): the worker drains while
 * the final table is fetched and printed, not after. */
static void stop_worker_early(void *arg) {
  struct run_ctx *r = arg;
  proc_term(&r->worker);
}

/* The largest worker id the server knows (a resumed database remembers the
 * workers of earlier runs); 0 when none or on error. */
static long long max_worker_id(struct http_client *c) {
  struct http_error err;
  cJSON *resp = NULL;
  long long max = 0;
  if (cli_get_all(c, "/api/v1/workers", "workers", &resp, &err)) return 0;
  const cJSON *list =
      cJSON_IsArray(resp) ? resp : cJSON_GetObjectItemCaseSensitive(resp, "workers");
  const cJSON *w;
  cJSON_ArrayForEach(w, list) {
    long long id = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(w, "id"));
    if (id > max) max = id;
  }
  cJSON_Delete(resp);
  return max;
}

/* Waits (up to 30 s) for the worker this run started to register: the one
 * with an id above `known`. Fills what it advertised. 0; -ETIMEDOUT (then
 * nothing is checked); -ECHILD (a child died, said); -EINTR. */
static int wait_own_worker(struct http_client *c, struct run_ctx *r, long long known, double *cpu,
                           double *gpu, double *mem) {
  int logged = 0;
  for (int i = 0; i < 300; i++) {
    struct http_error err;
    cJSON *resp = NULL;
    if (cli_signal) return -EINTR;
    int rc = children_alive(r);
    if (rc) return rc;
    if (!cli_get_all(c, "/api/v1/workers", "workers", &resp, &err)) {
      const cJSON *list =
          cJSON_IsArray(resp) ? resp : cJSON_GetObjectItemCaseSensitive(resp, "workers");
      const cJSON *w;
      cJSON_ArrayForEach(w, list) {
        if ((long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(w, "id")) <= known)
          continue;
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(w, "resources");
        *cpu = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "cpu"));
        *gpu = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "gpu"));
        *mem = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "memory_mb"));
        cJSON_Delete(resp);
        return 0;
      }
      cJSON_Delete(resp);
    }
    /* Its registration is awaited as its log line (the log is watched),
     * not found at the next look of a 100 ms poll; once that line is there
     * (the server may list the worker a moment later), looks 100 ms apart. */
    if (!logged) {
      int w = proc_wait_log_text(&r->worker, r->worker_log, r->worker_log_off, "registered with ",
                                 100, &cli_signal);
      logged = w == 0;
      if (w == -ECHILD || w == -EINTR) continue; /* said at the top of the loop */
    } else {
      struct timespec ts = {0, 100 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  return -ETIMEDOUT;
}

/* The server's rule (state.c fits): a resource a trial asks for fits when
 * the worker has some of it and at least as much. */
static int never_fits(double need, double have) {
  if (!(need > 0)) return 0;
  return !(have > 1e-9 && need <= have + 1e-9);
}

/* The worker `ctune run` manages is the only one its private server ever
 * sees: a trial that asks for more than it has would stay PENDING forever.
 * Says which resource, and how to change either side; 0 when they fit. */
static int check_fit(const struct cli_args *a, const struct spec_resources *need, double cpu,
                     double gpu, double mem) {
  char why[512] = "";
  if (never_fits(need->cpu, cpu)) {
    snprintf(why, sizeof(why),
             "every trial needs cpu %g (resources_per_trial.cpu) but the "
             "worker this run started has %g CPU%s (%s)",
             need->cpu, cpu, cpu == 1 ? "" : "s",
             a->cpus > 0 ? "--cpus" : "what this machine lets it use; --cpus N sets it");
  } else if (never_fits(need->gpu, gpu)) {
    snprintf(why, sizeof(why),
             "every trial needs gpu %g (resources_per_trial.gpu) but the "
             "worker this run started has %g GPU%s (%s)",
             need->gpu, gpu, gpu == 1 ? "" : "s",
             a->gpus >= 0 ? "--gpus"
             : gpu > 0    ? "the GPUs it found"
                          : "it found none");
  } else if (need->memory_mb > 0 && mem > 0 && (double)need->memory_mb > mem) {
    snprintf(why, sizeof(why),
             "every trial needs memory_mb %lld (resources_per_trial.memory_mb) "
             "but the worker this run started has %.0f MB (this machine's memory or its cgroup "
             "limit)",
             (long long)need->memory_mb, mem);
  }
  if (!why[0]) return 0;
  fprintf(stderr,
          "ctune: no trial of %s can ever run here: %s. Lower resources_per_trial in "
          "%s, or submit it to a server with bigger workers (`ctune submit`).\n",
          a->target, why, a->target);
  return -E2BIG;
}

/* The newest RUNNING experiment called name, or -ENOENT. */
static int find_unfinished(struct http_client *c, const char *name, long long *id,
                           struct http_error *err) {
  cJSON *resp = NULL;
  int rc = cli_get_all(c, "/api/v1/experiments", "experiments", &resp, err);
  if (rc) return rc;
  const cJSON *list =
      cJSON_IsArray(resp) ? resp : cJSON_GetObjectItemCaseSensitive(resp, "experiments");
  const cJSON *e;
  *id = 0;
  cJSON_ArrayForEach(e, list) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "status");
    long long eid = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "id"));
    if (cJSON_IsString(n) && !strcmp(n->valuestring, name) && cJSON_IsString(st) &&
        !strcmp(st->valuestring, "RUNNING") && eid > *id)
      *id = eid;
  }
  cJSON_Delete(resp);
  return *id ? 0 : -ENOENT;
}

/* A listening socket on 127.0.0.1, any free port, for the server to inherit
 * (ctune-server --listen-fd): its URL is known before the server is ready.
 * The fd (3 or above, not close-on-exec) or -1, then the server binds its own. */
static int run_listen_socket(int *port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd >= 0 && fd < 3) { /* a closed stdio slot: the child's dup2 would take it */
    int high = fcntl(fd, F_DUPFD, 3);
    close(fd);
    fd = high;
  }
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1024) ||
      getsockname(fd, (struct sockaddr *)&sa, &len)) {
    close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

/* Starts ctune-worker for the server at url, reading its token from tokens.
 * Trials never read the database (every worker's secret), the login URL (the
 * admin token) nor the server log: ctune-worker --hide. The files are named
 * after the database file itself, as the server names them. 0 or -errno. */
static int run_start_worker(struct run_ctx *r, const struct cli_args *a, char *worker_bin,
                            char *url, char *abs_work, char *tokens, char *db_file, char *login) {
  char *wargv[22], wal[PATH_MAX + 8], shm[PATH_MAX + 8], cpus[16], gpus[16];
  int wn = 0;
  /* Without --cpus the worker finds what it may use itself: its affinity
   * mask capped by its cgroup's CPU quota (a count from here would skip
   * the quota). */
  snprintf(cpus, sizeof(cpus), "%d", a->cpus);
  snprintf(gpus, sizeof(gpus), "%d", a->gpus);
  wargv[wn++] = worker_bin;
  wargv[wn++] = "--server";
  wargv[wn++] = url;
  wargv[wn++] = "--work-dir";
  wargv[wn++] = abs_work;
  wargv[wn++] = "--token-file";
  wargv[wn++] = tokens;
  snprintf(wal, sizeof(wal), "%s-wal", db_file);
  snprintf(shm, sizeof(shm), "%s-shm", db_file);
  char *hide[] = {db_file, wal, shm, login, r->server_log};
  for (size_t i = 0; i < sizeof(hide) / sizeof(hide[0]); i++) {
    wargv[wn++] = "--hide";
    wargv[wn++] = hide[i];
  }
  if (a->cpus > 0) {
    wargv[wn++] = "--cpus";
    wargv[wn++] = cpus;
  }
  if (a->gpus >= 0) {
    wargv[wn++] = "--gpus";
    wargv[wn++] = gpus;
  }
  wargv[wn] = NULL;
  r->worker_log_off = file_size(r->worker_log);
  int rc = proc_spawn(&r->worker, "ctune-worker", wargv, r->worker_log);
  if (rc) fprintf(stderr, "ctune: cannot start %s: %s\n", worker_bin, strerror(-rc));
  return rc;
}

int cmd_run(const struct cli_args *a) {
  struct run_ctx r;
  struct http_client c;
  struct http_error err;
  char msg[1024], stem[160], db[PATH_MAX], work[PATH_MAX], base[PATH_MAX];
  char abs_work[PATH_MAX], server_bin[PATH_MAX], worker_bin[PATH_MAX], url[256];
  cJSON *cfg = NULL, *resp = NULL;
  char *body = NULL, *token = NULL, tokens[PATH_MAX + 8];
  int ex = CLI_EXIT_ERROR, have_client = 0;
  long long id = 0;
  memset(&r, 0, sizeof(r));
  memset(&c, 0, sizeof(c));

  if (config_load(a->target, &cfg, msg, sizeof(msg))) {
    fprintf(stderr, "ctune: %s\n", msg);
    return CLI_EXIT_USAGE;
  }
  const char *name = config_name(cfg);
  config_file_stem(name, stem, sizeof(stem));
  if (a->db) {
    snprintf(db, sizeof(db), "%s", a->db);
  } else {
    if (mkdir("ctune-results", 0755) && errno != EEXIST) {
      fprintf(stderr, "ctune: cannot create ./ctune-results: %s\n", strerror(errno));
      goto out;
    }
    snprintf(db, sizeof(db), "ctune-results/%s.db", stem);
  }
  /* Logs and trial directories live next to the database. */
  snprintf(base, sizeof(base), "%s", db);
  size_t bl = strlen(base);
  if (bl > 3 && !strcmp(base + bl - 3, ".db")) base[bl - 3] = '\0';
  snprintf(r.server_log, sizeof(r.server_log), "%s.server.log", base);
  snprintf(r.worker_log, sizeof(r.worker_log), "%s.worker.log", base);
  snprintf(work, sizeof(work), "%s.work", base);
  if (a->resume && access(db, F_OK)) {
    fprintf(stderr, "ctune: nothing to resume: %s does not exist (run without --resume to start)\n",
            db);
    ex = CLI_EXIT_USAGE;
    goto out;
  }
  if (proc_find("ctune-server", server_bin, sizeof(server_bin), msg, sizeof(msg)) ||
      proc_find("ctune-worker", worker_bin, sizeof(worker_bin), msg, sizeof(msg))) {
    fprintf(stderr, "ctune: %s\n", msg);
    goto out;
  }
  if (mkdir(work, 0755) && errno != EEXIST) {
    fprintf(stderr, "ctune: cannot create %s: %s\n", work, strerror(errno));
    goto out;
  }
  /* Children get absolute paths: trials run in their own directories. */
  if (!realpath(work, abs_work)) {
    fprintf(stderr, "ctune: cannot resolve %s: %s\n", work, strerror(errno));
    goto out;
  }
  cli_signals_install(0);

  /* A database this run creates: the server inherits a socket made here, so
   * the worker starts as soon as the server has its tokens (the line that
   * says where), while it still creates the database, not after. A resumed
   * or reused database keeps the order (its load can take long): the server
   * first, the workers it already knows counted, then this run's worker. */
  struct stat sb;
  char lfd_arg[16];
  int lport = 0, lfd = -1;
  if (!a->resume && lstat(db, &sb) && errno == ENOENT) lfd = run_listen_socket(&lport);
  snprintf(lfd_arg, sizeof(lfd_arg), "%d", lfd);
  long off = file_size(r.server_log);
  char *sargv[] = {server_bin,
                   "--db",
                   db,
                   "--bind",
                   "127.0.0.1",
                   "--port",
                   "0",
                   "--lease-timeout",
                   RUN_LEASE_TIMEOUT_S,
                   "--heartbeat-interval",
                   "2",
                   lfd >= 0 ? "--listen-fd" : NULL,
                   lfd_arg,
                   NULL};
  int rc = proc_spawn(&r.server, "ctune-server", sargv, r.server_log);
  if (lfd >= 0) close(lfd);
  if (rc) {
    fprintf(stderr, "ctune: cannot start %s: %s\n", server_bin, strerror(-rc));
    goto out;
  }
  char real_db[PATH_MAX]; /* the server names its files after the database file itself */
  char login[PATH_MAX + 16];
  if (lfd >= 0) {
    rc = proc_wait_log_text(&r.server, r.server_log, off, " tokens in ", 60000, &cli_signal);
    if (rc == -EINTR) {
      ex = CLI_EXIT_INTERRUPTED;
      goto out;
    }
    if (!rc) { /* else said below, where the listening line is awaited */
      char *db_file = realpath(db, real_db) ? real_db : db;
      snprintf(tokens, sizeof(tokens), "%s.tokens", db_file);
      snprintf(login, sizeof(login), "%s.login-url", db_file);
      snprintf(url, sizeof(url), "http://127.0.0.1:%d", lport);
      if (run_start_worker(&r, a, worker_bin, url, abs_work, tokens, db_file, login)) goto out;
    }
  }
  char rest[200];
  rc = proc_wait_log_line(&r.server, r.server_log, off, "listening on http://", 60000, &cli_signal,
                          rest, sizeof(rest));
  if (rc) {
    if (rc == -EINTR) {
      ex = CLI_EXIT_INTERRUPTED;
      goto out;
    }
    fprintf(stderr, "ctune: ctune-server %s; last lines of %s:\n",
            rc == -ECHILD ? "exited before it was ready"
                          : "did not say it was listening within 60 s",
            r.server_log);
    print_log_tail(r.server_log);
    goto out;
  }
  snprintf(url, sizeof(url), "http://%s", rest);
  /* The server made (or reused) DB.tokens: this client is the admin, the
   * worker reads its line, and the dashboard URL logs a browser in. */
  snprintf(tokens, sizeof(tokens), "%s.tokens", realpath(db, real_db) ? real_db : db);
  if (http_read_token_file(tokens, &token, msg, sizeof(msg))) {
    fprintf(stderr, "ctune: %s\n", msg);
    goto out;
  }
  /* The login URL carries the admin token, a shell on every worker: it is
   * printed on a terminal only. --json, a pipe or a log get the dashboard's
   * address and the 0600 file the server wrote the login URL to. */
  snprintf(login, sizeof(login), "%s.login-url", realpath(db, real_db) ? real_db : db);
  if (a->json) {
    cJSON *line = cJSON_CreateObject();
    char dash[sizeof(url) + 1], *text = NULL;
    snprintf(dash, sizeof(dash), "%s/", url);
    if (!line || !cJSON_AddStringToObject(line, "dashboard", dash) ||
        !cJSON_AddStringToObject(line, "login_url_file", login) || !(text = jsonout_print(line))) {
      cJSON_Delete(line);
      fprintf(stderr, "ctune: out of memory\n");
      goto out;
    }
    printf("%s\n", text);
    free(text);
    cJSON_Delete(line);
  } else {
    if (isatty(STDOUT_FILENO))
      printf("Dashboard: %s/?token=%s\n", url, token);
    else
      printf("Dashboard: %s/ (log in with the URL in %s)\n", url, login);
    printf("Database:  %s (logs: %s, %s)\n", db, r.server_log, r.worker_log);
  }
  fflush(stdout);
  if (http_client_init(&c, url, token)) goto out;
  have_client = 1;

  /* Workers an earlier run left in the database are not this run's. */
  long long known_workers = 0;
  if (!r.worker.pid) {
    known_workers = max_worker_id(&c);
    if (run_start_worker(&r, a, worker_bin, url, abs_work, tokens,
                         realpath(db, real_db) ? real_db : db, login))
      goto out;
  }

  /* Before anything is submitted: can the worker ever run a trial? A config
   * the server would reject skips this; the submission says what is wrong. */
  struct experiment_spec spec;
  struct validate_error verr;
  if (!validate_experiment(cfg, &spec, &verr)) {
    double wcpu = 0, wgpu = 0, wmem = 0;
    rc = wait_own_worker(&c, &r, known_workers, &wcpu, &wgpu, &wmem);
    if (!rc) rc = check_fit(a, &spec.resources, wcpu, wgpu, wmem);
    validate_spec_free(&spec);
    if (rc == -EINTR) {
      ex = cli_signal == SIGINT ? CLI_EXIT_INTERRUPTED : 128 + (int)cli_signal;
      goto out;
    }
    if (rc == -E2BIG) {
      ex = CLI_EXIT_USAGE;
      goto out;
    }
    if (rc == -ECHILD) goto out;
  }

  if (a->resume) {
    rc = find_unfinished(&c, name, &id, &err);
    if (rc == -ENOENT) {
      fprintf(stderr,
              "ctune: nothing to resume: %s holds no unfinished experiment named '%s' "
              "(finished and cancelled ones stay queryable; run without --resume to start anew)\n",
              db, name);
      ex = CLI_EXIT_ERROR;
      goto out;
    }
    if (rc) {
      ex = cli_fail_http(rc, &err);
      goto out;
    }
    if (!a->json) printf("Resuming experiment %lld '%s'\n", id, name);
  } else {
    body = jsonout_print(cfg);
    if (!body) goto out;
    rc = http_json(&c, "POST", "/api/v1/experiments", body, &resp, &err);
    if (rc) {
      fprintf(stderr, "ctune: %s: %s\n", a->target, err.message);
      ex = rc == HTTP_ERR_REJECTED ? CLI_EXIT_USAGE : http_exit_code(rc);
      goto out;
    }
    id = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(resp, "id"));
    if (id <= 0) {
      fprintf(stderr, "ctune: the server accepted %s but sent no experiment id\n", a->target);
      goto out;
    }
    if (!a->json)
      printf("Experiment %lld '%s' submitted: %s/#/experiments/%lld\n", id, name, url, id);
  }
  fflush(stdout);

  struct watch_opts o = {.json = a->json,
                         .tty = isatty(STDOUT_FILENO),
                         .width = cli_width(a),
                         .fixed_width = a->width > 0,
                         .interval_s = a->interval_s,
                         .check = children_alive,
                         .check_ctx = &r,
                         .on_ended = stop_worker_early,
                         .from_start = !a->resume};
  if (a->json) o.interval_s = a->interval_s < 10.0 ? a->interval_s : 2.0;
  struct report_state final;
  memset(&final, 0, sizeof(final));
  rc = cli_watch(&c, id, &o, &final, &err);
  if (rc == -EINTR) {
    /* Ctrl-C, SIGTERM, SIGHUP: an interruption, as in Ray Tune, not a
     * decision about the experiment: the worker drains (its trials stop and
     * keep their checkpoints) and the experiment stays resumable. Cancelling
     * for good is `ctune cancel`. */
    fprintf(stderr,
            "ctune: %s; stopping the trials of experiment %lld, which stays "
            "unfinished: `ctune run %s --resume` continues it (%s again to stop at "
            "once)\n",
            cli_signal == SIGINT ? "interrupted" : "stopping on a signal", id, a->target,
            cli_signal == SIGINT ? "Ctrl-C" : "a second signal");
    ex = cli_signal == SIGINT ? CLI_EXIT_INTERRUPTED : 128 + (int)cli_signal;
  } else if (rc == -ECHILD) {
    ex = CLI_EXIT_ERROR;
  } else if (rc) {
    ex = cli_fail_http(rc, &err);
  } else {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(final.experiment, "status");
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(final.experiment, "end_reason");
    int cancelled = cJSON_IsString(st) && !strcmp(st->valuestring, "CANCELLED");
    /* Every trial ERROR: a failure, as Ray's tune.run raises, whatever the
     * experiment's own status says; its "best" would be an ERROR trial. */
    int all_error = report_exp_all_error(final.experiment);
    const char *shown = report_exp_status(final.experiment);
    if (!a->json)
      printf("\nExperiment %lld %s%s%s.\n", id, shown ? shown : "ended",
             cJSON_IsString(why) ? ": " : "", cJSON_IsString(why) ? why->valuestring : "");
    rc = all_error ? 0 : cli_print_best(&c, id, NULL, NULL, NULL, a->json, &err);
    if (all_error) {
      long long n = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(final.experiment, "counts"), "ERROR"));
      fprintf(stderr,
              "ctune: experiment %lld failed: all %lld of its trials ended in ERROR (see "
              "`ctune trials %lld`, `ctune trial ID` and `ctune logs ID`)\n",
              id, n, id);
      ex = CLI_EXIT_TRIALS_FAILED;
    } else if (cancelled) {
      /* fail_fast, or a `ctune cancel` from elsewhere: not a success. */
      fprintf(stderr, "ctune: experiment %lld was cancelled: %s\n", id,
              cJSON_IsString(why) ? why->valuestring : "no reason given");
      ex = CLI_EXIT_ERROR;
    } else if (rc) {
      fprintf(stderr, "ctune: no best trial: %s\n", err.message);
      ex = CLI_EXIT_ERROR;
    } else {
      ex = CLI_EXIT_OK;
    }
  }
  report_state_free(&final);
out:
  /* The worker first, so its trials stop and report while the server is up.
   * A second Ctrl-C (proc_hurry) cuts both graces short. */
  if (r.worker.pid) proc_stop(&r.worker, 30000);
  if (r.server.pid) proc_stop(&r.server, 10000);
  if (proc_hurry)
    fprintf(stderr,
            "ctune: stopped at once (second signal): trials, worker and server killed; "
            "stored results and checkpoints stay (`ctune run %s --resume`)\n",
            a->target);
  if (have_client) http_client_free(&c);
  cJSON_Delete(resp);
  cJSON_Delete(cfg);
  free(body);
  free(token);
  return ex;
}
