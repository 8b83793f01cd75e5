/* cli: what the subcommands share — connecting to a server, watching an
 * experiment until it ends, printing the best trial, the Ctrl-C flag. */
#ifndef CTUNE_CLI_CLI_H
#define CTUNE_CLI_CLI_H

#include <signal.h>

#include "args.h"
#include "http.h"
#include "report.h"

/* Set by the signal handlers main installs; polled by every loop. */
extern volatile sig_atomic_t cli_signal;

/* Installs SIGINT/SIGTERM/SIGHUP handlers that set cli_signal (no restart,
 * so sleeps and waits return early). A second signal sets proc_hurry and,
 * with second_signal_exits, exits at once (130 for SIGINT). */
void cli_signals_install(int second_signal_exits);

/* A trial's id from its name (`ctune logs NAME`): the newest trial of that
 * name. 0, HTTP_ERR_NOT_FOUND (err says how to list trials) or a request
 * error. */
int cli_resolve_trial(struct http_client *c, const char *target, long long *id,
                      struct http_error *err);

/* Terminal width for output: --width, the terminal's, COLUMNS, else 120. */
int cli_width(const struct cli_args *a);

/* --server / CTUNE_SERVER / http://127.0.0.1:8470 and --token-file /
 * CTUNE_TOKEN. Prints the error and returns an exit code (non-zero) on
 * failure. */
int cli_connect(const struct cli_args *a, struct http_client *c);

/* Prints "ctune: <message>" on stderr and returns http_exit_code(rc). */
int cli_fail_http(int rc, const struct http_error *err);

/* Lists come in pages (docs/protocol.md#pages): GETs `path` (no query string) page after
 * page, following next_cursor, into one document whose `key` array holds
 * every item. 0 or a request error (then *out is NULL). */
int cli_get_all(struct http_client *c, const char *path, const char *key, cJSON **out,
                struct http_error *err);

/* GETs the experiment, its trials and the workers into *s. */
int cli_fetch_state(struct http_client *c, long long id, struct report_state *s,
                    struct http_error *err);

/* The same state, read as prev plus the trials changed since it
 * (report_state_merge: prev's unchanged trials move into *s, so free prev
 * before *s); the whole list when prev cannot be brought up to date that
 * way (report_state_mergeable) or too many changed. */
#define CLI_CHANGES_LIMIT 10000
int cli_fetch_changes(struct http_client *c, long long id, struct report_state *prev,
                      struct report_state *s, struct http_error *err);

struct watch_opts {
  int json;
  int tty;
  int width;
  int fixed_width; /* --width given: do not follow terminal resizes */
  double interval_s;
  /* Called every poll; non-zero ends the watch with that value. */
  int (*check)(void *ctx);
  void *check_ctx;
  /* Called once (with check_ctx) when the event stream says the experiment
   * ended, before the watch's last fetch of it; may be NULL. */
  void (*on_ended)(void *ctx);
  /* The experiment was submitted by this process: the first fetch tells
   * every trial that already started (a fast worker's first trials start
   * before the first fetch), as a later one tells those that started since.
   * 0: attaching to an experiment under way, whose past is not retold. */
  int from_start;
};

/* Whether an event-stream frame (event, its data) concerns experiment
 * exp_id, whose trials are trial_ids (sorted): its trials and itself, and
 * the results of those trials; every worker and reset frame. *urgent: the
 * frame says the experiment left RUNNING and PAUSED (or was deleted). */
int watch_frame_relevant(const char *event, const char *data, long long exp_id,
                         const long long *trial_ids, size_t ntrial_ids, int *urgent);
/* Where the value of a JSON object text's top-level member key starts, or
 * NULL (no such member, not an object, or cut short). */
const char *watch_json_member(const char *json, const char *key);

/* Shows the reporter until the experiment leaves RUNNING (0), cli_signal is
 * set (-EINTR), check() says stop (its value), or a request fails (its
 * code, err filled). *final gets the last state (free it) when non-NULL. */
int cli_watch(struct http_client *c, long long id, const struct watch_opts *o,
              struct report_state *final, struct http_error *err);

/* Prints the best trial (human or, with json, {"best_trial": ...}). metric,
 * mode, scope may be NULL (the experiment's). Returns http-style codes. */
int cli_print_best(struct http_client *c, long long id, const char *metric, const char *mode,
                   const char *scope, int json, struct http_error *err);

int cmd_submit(const struct cli_args *a);
int cmd_watch(const struct cli_args *a);
int cmd_status(const struct cli_args *a);
int cmd_trials(const struct cli_args *a);
int cmd_best(const struct cli_args *a);
int cmd_logs(const struct cli_args *a);
int cmd_trial(const struct cli_args *a);
int cmd_release_worker(const struct cli_args *a);
int cmd_cancel(const struct cli_args *a);
/* a user's control of a live experiment (cli/control.c) */
int cmd_pause(const struct cli_args *a);
int cmd_resume(const struct cli_args *a);
int cmd_extend(const struct cli_args *a);
int cmd_edit(const struct cli_args *a);
int cmd_stop(const struct cli_args *a);
int cmd_delete(const struct cli_args *a);
int cmd_export(const struct cli_args *a);
int cmd_run(const struct cli_args *a);

#endif
