/* control: `ctune pause|resume|extend|edit|stop|delete`: a user's control
 * of a live experiment through the server's REST API
 * (docs/protocol.md#experiment-control). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "exitcode.h"
#include "http.h"

static void control_print_json(const cJSON *o) {
  char *s = o ? cJSON_Print(o) : NULL;
  puts(s ? s : "{}");
  free(s);
}

/* One request against experiment a->id (or trial id): prints the answer
 * (--json) or `line`. */
static int control_call(const struct cli_args *a, const char *method, const char *path,
                        const char *body, const char *what, long long id, const char *line) {
  struct http_client c;
  struct http_error err;
  cJSON *resp = NULL;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  int rc = http_json(&c, method, path, body, &resp, &err);
  if (rc) {
    if (rc == HTTP_ERR_NOT_FOUND)
      snprintf(err.message, sizeof(err.message), "%s %lld not found on %s", what, id, c.base);
    ex = cli_fail_http(rc, &err);
    goto done;
  }
  if (a->json) {
    control_print_json(resp);
  } else {
    const cJSON *st = resp ? cJSON_GetObjectItemCaseSensitive(resp, "status") : NULL;
    printf("%s %lld %s", what, id, line);
    if (cJSON_IsString(st) && strcmp(line, "deleted")) printf(" (%s)", st->valuestring);
    putchar('\n');
  }
done:
  cJSON_Delete(resp);
  http_client_free(&c);
  return ex;
}

int cmd_pause(const struct cli_args *a) {
  char path[128];
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/pause", a->id);
  return control_call(a, "POST", path, "{}", "experiment", a->id,
                      "paused: no trial starts; running ones stop at their next result with "
                      "their checkpoints");
}

int cmd_resume(const struct cli_args *a) {
  char path[128];
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld/resume", a->id);
  return control_call(a, "POST", path, "{}", "experiment", a->id,
                      "resumed: paused trials continue from their checkpoints");
}

static int control_patch(const struct cli_args *a, cJSON *body, const char *line) {
  char path[128], *text = cJSON_PrintUnformatted(body);
  cJSON_Delete(body);
  if (!text) {
    fprintf(stderr, "ctune: out of memory\n");
    return CLI_EXIT_ERROR;
  }
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld", a->id);
  int ex = control_call(a, "PATCH", path, text, "experiment", a->id, line);
  free(text);
  return ex;
}

int cmd_extend(const struct cli_args *a) {
  cJSON *b = cJSON_CreateObject(), *sc = NULL;
  int ok = b != NULL;
  if (ok && a->num_samples)
    ok = cJSON_AddNumberToObject(b, "num_samples", (double)a->num_samples) != NULL;
  if (ok && a->max_t > 0)
    ok = (sc = cJSON_AddObjectToObject(b, "scheduler")) &&
         cJSON_AddNumberToObject(sc, "max_t", a->max_t);
  if (!ok) {
    cJSON_Delete(b);
    fprintf(stderr, "ctune: out of memory\n");
    return CLI_EXIT_ERROR;
  }
  return control_patch(a, b, "extended");
}

int cmd_edit(const struct cli_args *a) {
  cJSON *b = cJSON_CreateObject(), *tags = NULL;
  int ok = b != NULL;
  if (ok && a->max_concurrent >= 0)
    ok = cJSON_AddNumberToObject(b, "max_concurrent_trials", (double)a->max_concurrent) != NULL;
  if (ok && a->priority > 0) ok = cJSON_AddNumberToObject(b, "priority", a->priority) != NULL;
  if (ok && a->notes) ok = cJSON_AddStringToObject(b, "notes", a->notes) != NULL;
  if (ok && a->ntags) ok = (tags = cJSON_AddArrayToObject(b, "tags")) != NULL;
  for (int i = 0; ok && i < a->ntags; i++)
    ok = cJSON_AddItemToArray(tags, cJSON_CreateString(a->tags[i]));
  if (!ok) {
    cJSON_Delete(b);
    fprintf(stderr, "ctune: out of memory\n");
    return CLI_EXIT_ERROR;
  }
  return control_patch(a, b, "edited");
}

int cmd_stop(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  long long id = a->id;
  int ex = 0;
  if (!id) {
    /* A trial's name: its id first. */
    if ((ex = cli_connect(a, &c))) return ex;
    int rc = cli_resolve_trial(&c, a->target, &id, &err);
    http_client_free(&c);
    if (rc) return cli_fail_http(rc, &err);
  }
  char path[128];
  snprintf(path, sizeof(path), "/api/v1/trials/%lld/stop", id);
  return control_call(a, "POST", path, "{}", "trial", id, "stopped: results and checkpoint kept");
}

int cmd_delete(const struct cli_args *a) {
  char path[128];
  snprintf(path, sizeof(path), "/api/v1/experiments/%lld%s", a->id, a->force ? "?force=1" : "");
  return control_call(a, "DELETE", path, NULL, "experiment", a->id, "deleted");
}

int cmd_release_worker(const struct cli_args *a) {
  char path[128];
  snprintf(path, sizeof(path), "/api/v1/workers/%lld/release-quarantine", a->id);
  return control_call(a, "POST", path, "{}", "worker", a->id,
                      "released from quarantine: it gets leases again");
}
