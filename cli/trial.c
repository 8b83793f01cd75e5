/* trial: `ctune trial TRIAL` — one trial's status, the scheduler's last
 * decision about it and its history of decisions (stops, pauses, promotions,
 * PBT exploits with donor and config change: docs/protocol.md#decisions-and-trial-events). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "exitcode.h"
#include "jsonout.h"

int cmd_trial(const struct cli_args *a) {
  struct http_client c;
  struct http_error err;
  cJSON *trial = NULL, *exp = NULL, *trials = NULL;
  char path[128];
  long long id = a->id;
  int ex = cli_connect(a, &c);
  if (ex) return ex;
  int rc = id ? 0 : cli_resolve_trial(&c, a->target, &id, &err);
  if (rc) {
    ex = cli_fail_http(rc, &err);
    goto done;
  }
  snprintf(path, sizeof(path), "/api/v1/trials/%lld", id);
  rc = http_json(&c, "GET", path, NULL, &trial, &err);
  if (rc) {
    if (rc == HTTP_ERR_NOT_FOUND)
      snprintf(err.message, sizeof(err.message),
               "trial %lld not found on %s; list trials with `ctune trials EXP`", id, c.base);
    ex = cli_fail_http(rc, &err);
    goto done;
  }
  if (a->json) {
    char *t = jsonout_print(trial);
    if (!t) {
      ex = CLI_EXIT_ERROR;
      goto done;
    }
    printf("%s\n", t);
    free(t);
    goto done;
  }
  /* The experiment's name and its trials' names (the donors of exploits)
   * are context: the trial still prints without them. */
  long long eid =
      (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(trial, "experiment_id"));
  struct http_error ctx_err;
  if (eid > 0) {
    snprintf(path, sizeof(path), "/api/v1/experiments/%lld", eid);
    if (http_json(&c, "GET", path, NULL, &exp, &ctx_err)) exp = NULL;
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(trial, "events");
    if (cJSON_GetArraySize(evs) > 0) {
      snprintf(path, sizeof(path), "/api/v1/experiments/%lld/trials", eid);
      if (cli_get_all(&c, path, "trials", &trials, &ctx_err)) trials = NULL;
    }
  }
  char *text;
  if (report_trial_detail(trial, exp, trials, &text)) {
    fprintf(stderr, "ctune: the server at %s sent a trial of an unexpected shape\n", c.base);
    ex = CLI_EXIT_ERROR;
    goto done;
  }
  fputs(text, stdout);
  free(text);
done:
  cJSON_Delete(trial);
  cJSON_Delete(exp);
  cJSON_Delete(trials);
  http_client_free(&c);
  return ex;
}
