/* best: `ctune best` and the end of `ctune run` — the best trial by the
 * server's scopes, with its config, last result and test accuracy; with
 * several objectives the Pareto front. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonout.h"
#include "exitcode.h"

static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* Appends "&key=value" with value percent-encoded. */
static void add_query(char *buf, size_t len, const char *key, const char *val) {
  size_t u = strlen(buf);
  if (!val || u >= len) return;
  u += (size_t)snprintf(buf + u, len - u, "%c%s=", strchr(buf, '?') ? '&' : '?', key);
  for (const unsigned char *p = (const unsigned char *)val; *p && u + 4 < len; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        *p == '-' || *p == '_' || *p == '.')
      buf[u++] = (char)*p;
    else
      u += (size_t)snprintf(buf + u, len - u, "%%%02X", *p);
  }
  buf[u < len ? u : len - 1] = '\0';
}

/* The experiment's objectives when it has several ("metrics"), else NULL;
 * *exp is the experiment (free it). */
static const cJSON *several_objectives(struct http_client *c, long long id, cJSON **exp) {
  char path[96];
  struct http_error e;
  *exp = NULL;
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld", id);
  if (http_json(c, "GET", path, NULL, exp, &e)) return NULL;
  const cJSON *m = get(*exp, "metrics");
  return cJSON_IsArray(m) ? m : NULL;
}

/* Several objectives have no single best trial: the Pareto front as a
 * table (one column per objective), or with json the server's answer. */
static int print_pareto(struct http_client *c, long long id, const char *scope, int json,
                        struct http_error *err) {
  char path[512];
  cJSON *resp = NULL;
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/pareto", id);
  add_query(path, sizeof(path), "scope", scope);
  int rc = http_json(c, "GET", path, NULL, &resp, err);
  if (rc) return rc;
  const cJSON *metrics = get(resp, "metrics"), *modes = get(resp, "modes"), *t, *m;
  const cJSON *trials = get(resp, "trials");
  if (json) {
    char *text = jsonout_print(resp);
    if (!text)
      rc = -ENOMEM;
    else
      printf("%s\n", text);
    free(text);
  } else {
    int i = 0;
    printf("Pareto front of experiment %lld (scope %s): %d trial%s, by", id, scope ? scope : "last",
           cJSON_GetArraySize(trials), cJSON_GetArraySize(trials) == 1 ? "" : "s");
    cJSON_ArrayForEach(m, metrics) {
      const cJSON *md = cJSON_GetArrayItem(modes, i++);
      printf("%s %s (%s)", i > 1 ? "," : "", m->valuestring,
             cJSON_IsString(md) ? md->valuestring : "?");
    }
    printf("\n  %-8s", "trial");
    cJSON_ArrayForEach(m, metrics) printf(" %-14.14s", m->valuestring);
    printf(" config\n");
    cJSON_ArrayForEach(t, trials) {
      char params[2048], v[64];
      printf("  %-8lld", (long long)cJSON_GetNumberValue(get(t, "trial_id")));
      cJSON_ArrayForEach(m, metrics) {
        report_fmt_value(get(get(t, "values"), m->valuestring), v, sizeof(v));
        printf(" %-14s", v);
      }
      report_fmt_params(get(t, "config"), params, sizeof(params));
      printf(" %s\n", params);
    }
    /* The volume the front covers, and from where (docs/protocol.md#pareto-front). */
    const cJSON *ref = get(resp, "reference_point"), *src = get(resp, "reference_point_source");
    if (cJSON_IsArray(ref)) {
      char v[64];
      if (cJSON_IsNumber(get(resp, "hypervolume")))
        report_fmt_value(get(resp, "hypervolume"), v, sizeof(v));
      else
        snprintf(v, sizeof(v), "not computed");
      printf("hypervolume %s from the reference point (", v);
      i = 0;
      cJSON_ArrayForEach(m, ref) {
        report_fmt_value(m, v, sizeof(v));
        printf("%s%s", i++ ? ", " : "", v);
      }
      printf(")%s\n", cJSON_IsString(src) && !strcmp(src->valuestring, "config")
                          ? ", the config's"
                          : ", derived: the front's nadir plus 10% of its range");
    }
  }
  fflush(stdout);
  cJSON_Delete(resp);
  return rc;
}

int cli_print_best(struct http_client *c, long long id, const char *metric, const char *mode,
                   const char *scope, int json, struct http_error *err) {
  char path[512];
  cJSON *resp = NULL, *trial_doc = NULL;
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/best", id);
  add_query(path, sizeof(path), "metric", metric);
  add_query(path, sizeof(path), "mode", mode);
  add_query(path, sizeof(path), "scope", scope);
  int rc = http_json(c, "GET", path, NULL, &resp, err);
  if (rc == HTTP_ERR_REJECTED && !metric) {
    cJSON *exp = NULL;
    int several = several_objectives(c, id, &exp) != NULL;
    cJSON_Delete(exp);
    if (several) return print_pareto(c, id, scope, json, err);
  }
  if (rc) return rc;
  /* The answer is the trial itself or {"trial": {...}, "value": ...}. */
  const cJSON *trial = cJSON_IsObject(get(resp, "trial")) ? get(resp, "trial") : resp;
  if (!cJSON_IsObject(get(trial, "config"))) {
    double tid = cJSON_GetNumberValue(get(resp, "trial_id"));
    if (tid == tid) {
      snprintf(path, sizeof(path), "/api/v1/trials/%lld", (long long)tid);
      if ((rc = http_json(c, "GET", path, NULL, &trial_doc, err))) {
        cJSON_Delete(resp);
        return rc;
      }
      trial = trial_doc;
    }
  }
  const cJSON *value = get(resp, "value");
  const cJSON *used_metric = get(resp, "metric");
  const char *mname = cJSON_IsString(used_metric) ? used_metric->valuestring : metric;
  if (json) {
    cJSON *out = cJSON_CreateObject();
    cJSON *bt = out ? cJSON_AddObjectToObject(out, "best_trial") : NULL;
    if (bt) {
      cJSON_AddItemToObject(bt, "id", cJSON_Duplicate(get(trial, "id"), 1));
      cJSON_AddItemToObject(bt, "name", cJSON_Duplicate(get(trial, "name"), 1));
      cJSON_AddItemToObject(bt, "config", cJSON_Duplicate(get(trial, "config"), 1));
      cJSON_AddItemToObject(bt, "last_result", cJSON_Duplicate(get(trial, "last_result"), 1));
      if (cJSON_IsNumber(value)) cJSON_AddNumberToObject(bt, "value", value->valuedouble);
    }
    char *t = bt ? jsonout_print(out) : NULL;
    cJSON_Delete(out);
    if (!t)
      rc = -ENOMEM;
    else
      printf("%s\n", t);
    free(t);
  } else {
    char params[2048], res[2048], v[64] = "";
    const cJSON *name = get(trial, "name");
    report_fmt_params(get(trial, "config"), params, sizeof(params));
    report_fmt_params(get(trial, "last_result"), res, sizeof(res));
    if (cJSON_IsNumber(value)) report_fmt_value(value, v, sizeof(v));
    printf("Best trial: %s (id %lld)", cJSON_IsString(name) ? name->valuestring : "?",
           (long long)cJSON_GetNumberValue(get(trial, "id")));
    if (v[0]) printf(" with %s=%s (scope %s)", mname ? mname : "value", v, scope ? scope : "last");
    printf("\n  config:      %s\n  last result: %s\n", params, res);
    const cJSON *acc = get(get(trial, "last_result"), "accuracy");
    const cJSON *test = get(get(trial, "last_result"), "test_accuracy");
    if (cJSON_IsNumber(acc)) printf("  validation accuracy: %.4f\n", acc->valuedouble);
    if (cJSON_IsNumber(test)) printf("  test accuracy: %.4f\n", test->valuedouble);
  }
  fflush(stdout);
  cJSON_Delete(resp);
  cJSON_Delete(trial_doc);
  return rc;
}

/* --metric M without --mode: only the experiment's own metric has a mode to
 * borrow; for any other, min or max is a guess that returns the worst trial
 * half the time, so ask. 0 to go on, else the exit code (message printed). */
static int check_mode(struct http_client *c, const struct cli_args *a) {
  char path[96];
  cJSON *exp = NULL;
  struct http_error err;
  if (!a->metric || a->mode) return 0;
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld", a->id);
  int rc = http_json(c, "GET", path, NULL, &exp, &err);
  if (rc) {
    if (rc == HTTP_ERR_NOT_FOUND)
      snprintf(err.message, sizeof(err.message),
               "experiment %lld not found on %s; list experiments with `ctune status`", a->id,
               c->base);
    return cli_fail_http(rc, &err);
  }
  const cJSON *m = get(exp, "metric"), *mode = get(exp, "mode"), *o;
  int same = cJSON_IsString(m) && !strcmp(m->valuestring, a->metric);
  /* Several objectives: each one has its own mode. */
  cJSON_ArrayForEach(o, get(exp, "metrics")) same |=
      cJSON_IsString(o) && !strcmp(o->valuestring, a->metric);
  if (!same) {
    if (cJSON_IsString(m))
      fprintf(stderr,
              "ctune: best: --metric %s needs --mode min or --mode max: experiment %lld "
              "optimises %s (%s), and only its own metric takes the experiment's mode\n",
              a->metric, a->id, m->valuestring, cJSON_IsString(mode) ? mode->valuestring : "?");
    else
      fprintf(stderr,
              "ctune: best: --metric %s needs --mode min or --mode max (experiment %lld "
              "has no metric of its own)\n",
              a->metric, a->id);
  }
  cJSON_Delete(exp);
  return same ? 0 : CLI_EXIT_USAGE;
}

int cmd_best(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  if ((ex = check_mode(&c, a))) {
    http_client_free(&c);
    return ex;
  }
  int rc = cli_print_best(&c, a->id, a->metric, a->mode, a->scope, a->json, &err);
  if (rc == HTTP_ERR_NOT_FOUND) {
    /* 404 is an unknown experiment or one where no trial has the metric yet:
     * ask which, so the message says the right thing. */
    char path[96];
    cJSON *exp = NULL;
    struct http_error e2;
    snprintf(path, sizeof(path), "/api/v1/experiments/%lld", a->id);
    if (http_json(&c, "GET", path, NULL, &exp, &e2) == HTTP_ERR_NOT_FOUND)
      snprintf(err.message, sizeof(err.message),
               "experiment %lld not found on %s; list experiments with `ctune status`", a->id,
               c.base);
    cJSON_Delete(exp);
  }
  if (rc) ex = cli_fail_http(rc, &err);
  http_client_free(&c);
  return ex;
}
