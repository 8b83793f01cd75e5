/* remote: the subcommands that talk to a running ctune-server — submit,
 * watch, status, trials, best, logs, cancel, export. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "jsonout.h"
#include "config.h"
#include "exitcode.h"
#include "export.h"
#include "searcher.h"
#include "space.h"
#include "validate.h"
#include "tbexport.h"
#include "text.h"

static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(o, k);
}

static void print_json(const cJSON *v, int pretty) {
  char *t = pretty ? jsonout_print_pretty(v) : jsonout_print(v);
  if (t) printf("%s\n", t);
  free(t);
}

/* A 404 on an experiment path means the id is unknown: say so and how to
 * find the right one. */
static int fail_exp(int rc, struct http_error *err, struct http_client *c, long long id) {
  if (rc == HTTP_ERR_NOT_FOUND && strcmp(err->code, "no_result"))
    snprintf(err->message, sizeof(err->message),
             "experiment %lld not found on %s; list experiments with `ctune status`", id, c->base);
  return cli_fail_http(rc, err);
}

/* `ctune sample`: what POST /api/v1/experiments?dry_run=true answers, made
 * here by the server's own validation and sampling code (ctune_server_core),
 * so no server is needed. Errors read as the server's would. */
static int sample_local(const cJSON *cfg, cJSON **out, struct http_error *err) {
  struct experiment_spec spec;
  struct validate_error verr = {{0}, {0}};
  cJSON *configs = NULL;
  struct searcher *sr = NULL;
  int64_t later = 0;
  memset(err, 0, sizeof(*err));
  int rc = validate_experiment(cfg, &spec, &verr);
  if (!rc) {
    if (!spec.has_seed) {
      /* As the server does: a random seed, exact as a JSON number. */
      uint64_t seed = 0;
      if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = (uint64_t)time(NULL) * 1000003u;
      spec.seed = seed & ((1ULL << 53) - 1);
    }
    /* What the server's searcher knows in advance (random, grid, tpe's
     * startup); the rest is decided later from results. */
    rc = searcher_create(&spec, &sr, &verr);
    if (!rc) rc = searcher_known(sr, &configs, &later);
  }
  if (rc == -EINVAL) {
    char server_msg[700];
    snprintf(server_msg, sizeof(server_msg), "%s: %s", verr.path, verr.message);
    err->status = 400;
    snprintf(err->code, sizeof(err->code), "invalid_config");
    snprintf(err->message, sizeof(err->message), "rejected: %s (400 invalid_config)", server_msg);
    validate_spec_free(&spec);
    searcher_free(sr);
    return HTTP_ERR_REJECTED;
  }
  cJSON *o = rc ? NULL : cJSON_CreateObject();
  if (!o || !cJSON_AddBoolToObject(o, "dry_run", 1) ||
      !cJSON_AddNumberToObject(o, "num_trials", (double)spec.num_trials) ||
      !cJSON_AddNumberToObject(o, "seed", (double)spec.seed) ||
      !cJSON_AddStringToObject(o, "search_alg", searcher_type_name(sr)) ||
      !cJSON_AddNumberToObject(o, "decided_later", (double)later)) {
    cJSON_Delete(o);
    cJSON_Delete(configs);
    validate_spec_free(&spec);
    searcher_free(sr);
    snprintf(err->message, sizeof(err->message), "cannot sample: %s", strerror(rc ? -rc : ENOMEM));
    return rc ? rc : -ENOMEM;
  }
  cJSON_AddItemToObject(o, "trials", configs);
  validate_spec_free(&spec);
  searcher_free(sr);
  *out = o;
  return 0;
}

int cmd_submit(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  char msg[1024];
  cJSON *cfg = NULL, *resp = NULL;
  char *body = NULL;
  int ex, local = !strcmp(a->command, "sample");
  int rc;
  memset(&c, 0, sizeof(c));
  if (config_load(a->target, &cfg, msg, sizeof(msg))) {
    fprintf(stderr, "ctune: %s\n", msg);
    return CLI_EXIT_USAGE;
  }
  if (local) {
    rc = sample_local(cfg, &resp, &err);
    ex = 0;
    goto answered;
  }
  if ((ex = cli_connect(a, &c))) {
    cJSON_Delete(cfg);
    return ex;
  }
  body = jsonout_print(cfg);
  if (!body) {
    ex = CLI_EXIT_ERROR;
    goto done;
  }
  rc =
      http_json(&c, "POST", a->dry_run ? "/api/v1/experiments?dry_run=true" : "/api/v1/experiments",
                body, &resp, &err);
answered:
  if (rc) {
    if (rc == HTTP_ERR_REJECTED) {
      fprintf(stderr, "ctune: %s: %s\n", a->target, err.message);
      ex = CLI_EXIT_ERROR;
    } else {
      ex = cli_fail_http(rc, &err);
    }
    goto done;
  }
  ex = CLI_EXIT_OK;
  if (a->json) {
    print_json(resp, 0);
  } else if (a->dry_run) {
    const cJSON *trials = get(resp, "trials");
    if (!cJSON_IsArray(trials)) trials = get(resp, "configs");
    const cJSON *planned = get(resp, "num_trials"), *later = get(resp, "decided_later");
    const cJSON *alg = get(resp, "search_alg");
    if (cJSON_IsArray(trials)) {
      int n = cJSON_IsNumber(planned) ? (int)planned->valuedouble : cJSON_GetArraySize(trials);
      int nl = cJSON_IsNumber(later) ? (int)later->valuedouble : 0;
      printf("dry run: %s is valid and would create %d trial%s (nothing stored)", a->target, n,
             n == 1 ? "" : "s");
      /* An adaptive searcher decides the rest from results: say how many. */
      if (nl > 0)
        printf("; %d known in advance, %d decided later by %s from the results so far",
               cJSON_GetArraySize(trials), nl,
               cJSON_IsString(alg) ? alg->valuestring : "the searcher");
      printf(":\n");
      const cJSON *t;
      int i = 0;
      cJSON_ArrayForEach(t, trials) {
        char params[2048];
        const cJSON *conf = cJSON_IsObject(get(t, "config")) ? get(t, "config") : t;
        report_fmt_params(conf, params, sizeof(params));
        printf("  %5d  %s\n", i++, params);
      }
    } else {
      printf("dry run: %s is valid (nothing stored):\n", a->target);
      print_json(resp, 1);
    }
  } else {
    const cJSON *id = get(resp, "id");
    if (!cJSON_IsNumber(id)) {
      fprintf(stderr, "ctune: the server accepted %s but sent no experiment id\n", a->target);
      ex = CLI_EXIT_ERROR;
      goto done;
    }
    printf("submitted experiment %lld '%s'\n", (long long)id->valuedouble, config_name(cfg));
    printf("watch it:  ctune watch %lld --server %s\n", (long long)id->valuedouble, c.base);
    printf("dashboard: %s/#/experiments/%lld\n", c.base, (long long)id->valuedouble);
  }
done:
  cJSON_Delete(resp);
  cJSON_Delete(cfg);
  free(body);
  if (!local) http_client_free(&c);
  return ex;
}

int cmd_watch(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  cli_signals_install(1);
  struct watch_opts o = {.json = a->json,
                         .tty = isatty(STDOUT_FILENO),
                         .width = cli_width(a),
                         .fixed_width = a->width > 0,
                         .interval_s = a->interval_s};
  int rc = cli_watch(&c, a->id, &o, NULL, &err);
  if (rc == -EINTR) {
    fprintf(stderr,
            "ctune: stopped watching; experiment %lld goes on (ctune cancel %lld stops it)\n",
            a->id, a->id);
    ex = CLI_EXIT_INTERRUPTED;
  } else if (rc) {
    ex = fail_exp(rc, &err, &c, a->id);
  }
  http_client_free(&c);
  return ex;
}

int cmd_status(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  cJSON *resp = NULL;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  int rc = cli_get_all(&c, "/api/v1/experiments", "experiments", &resp, &err);
  if (rc) {
    ex = cli_fail_http(rc, &err);
    goto done;
  }
  if (a->json) {
    print_json(resp, 0);
    goto done;
  }
  const cJSON *list = cJSON_IsArray(resp) ? resp : get(resp, "experiments");
  if (!cJSON_GetArraySize(list)) {
    printf("no experiments on %s (submit one with `ctune submit CONFIG`)\n", c.base);
    goto done;
  }
  printf("%-5s %-24s %-10s %7s %7s %7s %10s %5s  %s\n", "id", "name", "status", "trials", "running",
         "pending", "terminated", "error", "best");
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    const cJSON *counts = get(e, "counts"), *best = get(e, "best");
    char bestbuf[128] = "-";
    const cJSON *metric = get(e, "metric");
    if (cJSON_IsObject(best) && cJSON_IsNumber(get(best, "value"))) {
      char v[64];
      report_fmt_value(get(best, "value"), v, sizeof(v));
      snprintf(bestbuf, sizeof(bestbuf), "%s=%s (trial %lld)",
               cJSON_IsString(metric) ? metric->valuestring : "value", v,
               (long long)cJSON_GetNumberValue(get(best, "trial_id")));
    }
    const cJSON *name = get(e, "name");
    const char *status = report_exp_status(e);
    /* An all-ERROR experiment names no best trial: its best is an ERROR one. */
    if (report_exp_all_error(e)) snprintf(bestbuf, sizeof(bestbuf), "- (every trial ERROR)");
    printf("%-5lld %-24.24s %-10s %7lld %7lld %7lld %10lld %5lld  %s\n",
           (long long)cJSON_GetNumberValue(get(e, "id")),
           cJSON_IsString(name) ? name->valuestring : "?", status ? status : "?",
           (long long)cJSON_GetNumberValue(get(e, "num_trials")),
           (long long)cJSON_GetNumberValue(get(counts, "RUNNING")),
           (long long)cJSON_GetNumberValue(get(counts, "PENDING")),
           (long long)cJSON_GetNumberValue(get(counts, "TERMINATED")),
           (long long)cJSON_GetNumberValue(get(counts, "ERROR")), bestbuf);
    /* Why it ended early (fail_fast, a cancel), under its line. */
    const cJSON *why = get(e, "end_reason");
    if (cJSON_IsString(why)) printf("      ended: %s\n", why->valuestring);
    char pre[256];
    if (report_fmt_preemptions(e, pre, sizeof(pre))) printf("      %s\n", pre);
  }
done:
  cJSON_Delete(resp);
  http_client_free(&c);
  return ex;
}

int cmd_trials(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  struct report_state s;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  int rc = cli_fetch_state(&c, a->id, &s, &err);
  if (rc) {
    ex = fail_exp(rc, &err, &c, a->id);
    goto done;
  }
  if (a->json) {
    const cJSON *arr = cJSON_IsArray(s.trials_doc) ? s.trials_doc : get(s.trials_doc, "trials");
    print_json(arr, 0);
  } else {
    char *text;
    if (report_render_table(&s, cli_width(a), 0, &text)) {
      ex = CLI_EXIT_ERROR;
    } else {
      fputs(*text ? text : "no trials\n", stdout);
      free(text);
    }
  }
  report_state_free(&s);
done:
  http_client_free(&c);
  return ex;
}

int cmd_logs(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  cJSON *resp = NULL;
  char path[128];
  long long id = a->id;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  int rc = id ? 0 : cli_resolve_trial(&c, a->target, &id, &err);
  if (rc) {
    ex = cli_fail_http(rc, &err);
    goto done;
  }
  snprintf(path, sizeof(path), "/api/v1/trials/%lld/logs", id);
  rc = http_json(&c, "GET", path, NULL, &resp, &err);
  if (rc) {
    if (rc == HTTP_ERR_NOT_FOUND)
      snprintf(
          err.message, sizeof(err.message),
          "trial %lld not found on %s, or it has no log yet; list trials with `ctune trials EXP`",
          id, c.base);
    ex = cli_fail_http(rc, &err);
    goto done;
  }
  const cJSON *log = get(resp, "log");
  if (cJSON_IsString(log)) text_strip_controls(log->valuestring);
  if (cJSON_IsString(log) && log->valuestring[0]) {
    fputs(log->valuestring, stdout);
    if (log->valuestring[strlen(log->valuestring) - 1] != '\n') putchar('\n');
  } else {
    fprintf(stderr, "ctune: trial %lld has no log yet\n", id);
  }
done:
  cJSON_Delete(resp);
  http_client_free(&c);
  return ex;
}

int cmd_cancel(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  cJSON *resp = NULL;
  char path[128];
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/cancel", a->id);
  int rc = http_json(&c, "POST", path, "{}", &resp, &err);
  if (rc) {
    ex = fail_exp(rc, &err, &c, a->id);
    goto done;
  }
  if (a->json)
    resp ? print_json(resp, 0) : (void)puts("{}");
  else
    printf("experiment %lld cancelled: no new trials start, running ones are being stopped\n",
           a->id);
done:
  cJSON_Delete(resp);
  http_client_free(&c);
  return ex;
}

/* Every result of an experiment, following last_seq until nothing new. */
static int fetch_results(struct http_client *c, long long id, cJSON **out, struct http_error *err) {
  cJSON *all = cJSON_CreateObject();
  cJSON *arr = all ? cJSON_AddArrayToObject(all, "results") : NULL;
  long long since = 0;
  if (!arr) {
    cJSON_Delete(all);
    return -ENOMEM;
  }
  for (;;) {
    char path[160];
    cJSON *page = NULL;
    snprintf(path, sizeof(path), "/api/v1/experiments/%lld/results?since=%lld&limit=10000", id,
             since);
    int rc = http_json(c, "GET", path, NULL, &page, err);
    if (rc) {
      cJSON_Delete(all);
      return rc;
    }
    cJSON *list = cJSON_DetachItemFromObjectCaseSensitive(page, "results");
    long long next = (long long)cJSON_GetNumberValue(get(page, "last_seq"));
    int n = cJSON_GetArraySize(list);
    cJSON *r;
    while (list && (r = cJSON_DetachItemFromArray(list, 0))) cJSON_AddItemToArray(arr, r);
    cJSON_Delete(list);
    cJSON_Delete(page);
    if (n == 0 || next <= since) break;
    since = next;
  }
  *out = all;
  return 0;
}

/* The export's text to --output (or stdout); JSON ends with a newline. */
static int write_export(const struct cli_args *a, const char *text) {
  int ex = 0;
  FILE *f = a->output ? fopen(a->output, "w") : stdout;
  if (!f) {
    fprintf(stderr, "ctune: cannot write %s: %s\n", a->output, strerror(errno));
    return CLI_EXIT_ERROR;
  }
  fputs(text, f);
  if (!strcmp(a->format, "json")) fputc('\n', f);
  if (a->output && fclose(f)) {
    fprintf(stderr, "ctune: cannot write %s: %s\n", a->output, strerror(errno));
    ex = CLI_EXIT_ERROR;
  }
  return ex;
}

/* export --pareto: the front under --scope as GET .../pareto answers it
 * (json), or one row per trial on it (csv, export_pareto_csv). */
static int export_pareto(struct http_client *c, const struct cli_args *a) {
  struct http_error err;
  char path[160];
  cJSON *resp = NULL;
  char *text = NULL;
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/pareto?scope=%s", a->id,
           a->scope ? a->scope : "last");
  int rc = http_json(c, "GET", path, NULL, &resp, &err);
  if (rc) return fail_exp(rc, &err, c, a->id);
  rc = !strcmp(a->format, "json") ? ((text = jsonout_print_pretty(resp)) ? 0 : -ENOMEM)
                                  : export_pareto_csv(resp, &text);
  cJSON_Delete(resp);
  int ex = 0;
  if (rc) {
    fprintf(stderr, "ctune: cannot format the export (%s)\n", strerror(-rc));
    ex = CLI_EXIT_ERROR;
  } else {
    ex = write_export(a, text);
  }
  free(text);
  return ex;
}

int cmd_export(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  struct report_state s;
  cJSON *results = NULL;
  char *text = NULL;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  if (a->pareto) {
    ex = export_pareto(&c, a);
    http_client_free(&c);
    return ex;
  }
  int rc = cli_fetch_state(&c, a->id, &s, &err);
  if (rc) {
    ex = fail_exp(rc, &err, &c, a->id);
    goto done;
  }
  if (strcmp(a->format, "csv")) {
    rc = fetch_results(&c, a->id, &results, &err);
    if (rc) {
      ex = fail_exp(rc, &err, &c, a->id);
      goto free_state;
    }
    if (!strcmp(a->format, "tensorboard")) { /* a folder: cli/tbexport.c */
      ex = tbexport_cmd(a->output, s.experiment, s.trials_doc, results);
      goto free_state;
    }
    rc = export_json(s.experiment, s.trials_doc, results, &text);
  } else {
    rc = export_csv(s.trials_doc, &text);
  }
  if (rc) {
    fprintf(stderr, "ctune: cannot format the export (%s)\n", strerror(-rc));
    ex = CLI_EXIT_ERROR;
    goto free_state;
  }
  ex = write_export(a, text);
free_state:
  report_state_free(&s);
done:
  free(text);
  cJSON_Delete(results);
  http_client_free(&c);
  return ex;
}
