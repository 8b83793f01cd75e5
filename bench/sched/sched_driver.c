/* sched_driver: drives ctune's scheduler (server/core/scheduler.h) from
 * line commands on stdin, one reply line per command on stdout, so
 * bench_moasha.py can simulate workers against the real decisions.
 *   first line: an experiment config (JSON, one line), checked by
 *     validate_experiment as a submission is  -> "ok" | "error PATH: MSG"
 *   add ID IDX             (IDX: creation index) -> "ok"
 *   result ID T V1 .. Vk   (k objectives)         -> "continue" | "stop REASON"
 *   end ID T               (the trial ended after a result at T) -> "ok"
 * Any error: "error WHAT" and exit 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "scheduler.h"
#include "validate.h"

static int driver_fail(const char *what) {
  printf("error %s\n", what);
  fflush(stdout);
  return 1;
}

int main(void) {
  static char line[1 << 20];
  struct experiment_spec spec;
  struct validate_error err;
  struct sched *s = NULL;
  int rc = 0;

  if (!fgets(line, sizeof line, stdin)) return driver_fail("no config");
  cJSON *cfg = cJSON_Parse(line);
  memset(&err, 0, sizeof err);
  if (!cfg || validate_experiment(cfg, &spec, &err)) {
    printf("error %s: %s\n", err.path, err.message);
    cJSON_Delete(cfg);
    return 1;
  }
  cJSON_Delete(cfg);
  if (sched_create(&spec.sched, spec.mode, spec.has_seed ? spec.seed : 1, &s)) {
    validate_spec_free(&spec);
    return driver_fail("sched_create");
  }
  puts("ok");
  fflush(stdout);
  int k = spec.nobjectives > 1 ? spec.nobjectives : 1;
  while (!rc && fgets(line, sizeof line, stdin)) {
    long long id, idx;
    double t, v[SPEC_MAX_OBJECTIVES];
    int off = 0;
    struct sched_outcome out = {0};
    if (sscanf(line, "add %lld %lld", &id, &idx) == 2) {
      rc = sched_add_trial(s, id, idx, NULL) ? driver_fail("add") : 0;
      if (!rc) puts("ok");
    } else if (sscanf(line, "result %lld %lf%n", &id, &t, &off) == 2) {
      for (int j = 0; j < k; j++) {
        int n = 0;
        if (sscanf(line + off, "%lf%n", &v[j], &n) != 1) return driver_fail("values");
        off += n;
      }
      if (sched_on_result(s, id, t, v, &out))
        rc = driver_fail("result");
      else if (out.action == SCHED_CONTINUE)
        puts("continue");
      else
        printf("stop %s\n", out.reason);
    } else if (sscanf(line, "end %lld %lf", &id, &t) == 2) {
      rc = sched_on_trial_end(s, id, 1, t, v, &out) ? driver_fail("end") : 0;
      if (!rc) puts("ok");
    } else {
      rc = driver_fail("unknown command");
    }
    sched_outcome_clear(&out);
    fflush(stdout);
  }
  sched_free(s);
  validate_spec_free(&spec);
  return rc;
}
