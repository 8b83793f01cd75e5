/* tpe_driver: drives server/core/tpe from line-JSON commands on stdin, one
 * JSON reply per line on stdout, so bench_search.py can run ctune's TPE next
 * to Optuna's. Commands:
 *   {"cmd": "create", "param_space": {...}, "search_alg": {...},
 *    "mode": "min"|"max" or "modes": ["min", ...], "seed": N}
 *                                                 -> {"ok": true} | {"error": ...}
 *   (search_alg gets today's defaults, as a new experiment's does)
 *   {"cmd": "observe", "id": N, "config": {...}, "value": X|null
 *    or "values": [X|null, ...] (one per mode), "state": "finished"|"running",
 *    "violation": V}                              -> {"ok": true}
 *   (violation, optional: the trial's total constraint violation, 0 when
 *   feasible: tpe_set_violation)
 *   {"cmd": "suggest", "index": N, "fixed": {...}} -> {"config": {...}, "us": T}
 * "us" is the time tpe_suggest took (CLOCK_MONOTONIC, microseconds). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cJSON.h>

#include "tpe.h"

static void reply(cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  if (s) {
    puts(s);
    free(s);
  } else {
    puts("{\"error\": \"out of memory\"}");
  }
  fflush(stdout);
  cJSON_Delete(o);
}

static void fail(const char *path, const char *msg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "error", msg);
  cJSON_AddStringToObject(o, "path", path ? path : "");
  reply(o);
}

static void ok(void) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddTrueToObject(o, "ok");
  reply(o);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(void) {
  struct tpe *t = NULL;
  int nobj = 1;
  size_t cap = 1 << 20;
  char *line = malloc(cap);

  if (!line) return 1;
  while (fgets(line, (int)cap, stdin)) {
    cJSON *c = cJSON_Parse(line);
    const char *cmd = cJSON_GetStringValue(cJSON_GetObjectItem(c, "cmd"));
    if (!c || !cmd) {
      fail("", "not a command object");
    } else if (strcmp(cmd, "create") == 0) {
      struct validate_error err = {{0}, {0}};
      const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(c, "mode"));
      cJSON *ms = cJSON_GetObjectItem(c, "modes");
      cJSON *seed = cJSON_GetObjectItem(c, "seed");
      enum spec_mode modes[SPEC_MAX_OBJECTIVES];
      tpe_free(t);
      t = NULL;
      nobj = cJSON_IsArray(ms) ? cJSON_GetArraySize(ms) : 1;
      if (nobj < 1 || nobj > SPEC_MAX_OBJECTIVES) nobj = 1;
      for (int j = 0; j < nobj; j++) {
        const char *m = cJSON_IsArray(ms) ? cJSON_GetStringValue(cJSON_GetArrayItem(ms, j)) : mode;
        modes[j] = m && strcmp(m, "max") == 0 ? SPEC_MODE_MAX : SPEC_MODE_MIN;
      }
      cJSON *sa = cJSON_GetObjectItem(c, "search_alg");
      /* As the server treats a new experiment: today's defaults written in
       * (an absent field would mean the original default to tpe_create). */
      int rc = cJSON_IsObject(sa) && !tpe_options_check(sa, "search_alg", NULL)
                   ? tpe_options_fill(sa, nobj)
                   : 0;
      if (!rc)
        rc = tpe_create_mo(cJSON_GetObjectItem(c, "param_space"), sa, modes, nobj,
                           cJSON_IsNumber(seed) ? (uint64_t)seed->valuedouble : 0, &t, &err);
      if (rc)
        fail(err.path, err.message);
      else
        ok();
    } else if (!t) {
      fail("", "create first");
    } else if (strcmp(cmd, "observe") == 0) {
      cJSON *v = cJSON_GetObjectItem(c, "value"), *vs = cJSON_GetObjectItem(c, "values");
      const char *st = cJSON_GetStringValue(cJSON_GetObjectItem(c, "state"));
      int64_t id = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "id"));
      cJSON *viol = cJSON_GetObjectItem(c, "violation");
      double vals[SPEC_MAX_OBJECTIVES];
      for (int j = 0; j < nobj; j++) {
        cJSON *x = cJSON_IsArray(vs) ? cJSON_GetArrayItem(vs, j) : v;
        vals[j] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
      }
      int rc = tpe_observe_mo(t, id, cJSON_GetObjectItem(c, "config"), vals,
                              st && strcmp(st, "running") == 0 ? TPE_RUNNING : TPE_FINISHED);
      if (!rc && cJSON_IsNumber(viol)) rc = tpe_set_violation(t, id, viol->valuedouble);
      if (rc)
        fail("", strerror(-rc));
      else
        ok();
    } else if (strcmp(cmd, "suggest") == 0) {
      cJSON *cfg = NULL;
      cJSON *fixed = cJSON_GetObjectItem(c, "fixed");
      double t0 = now_us();
      int rc = tpe_suggest(t, (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "index")),
                           cJSON_IsObject(fixed) ? fixed : NULL, &cfg);
      double us = now_us() - t0;
      if (rc) {
        fail("", strerror(-rc));
      } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "config", cfg);
        cJSON_AddNumberToObject(o, "us", us);
        reply(o);
      }
    } else {
      fail("cmd", "unknown command");
    }
    cJSON_Delete(c);
  }
  tpe_free(t);
  free(line);
  return 0;
}
