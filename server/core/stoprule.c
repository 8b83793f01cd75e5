/* stoprule: Ray's `stop` dict over one result. */
#include "stoprule.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int fail(struct validate_error *err, const char *key, const char *msg) {
  snprintf(err->path, sizeof err->path, "stop%s%.200s", key ? "." : "", key ? key : "");
  snprintf(err->message, sizeof err->message, "%s", msg);
  return -EINVAL;
}

int stoprule_validate(const cJSON *stop, struct validate_error *err) {
  int n = 0;
  if (!cJSON_IsObject(stop))
    return fail(err, NULL,
                "must be an object of result keys and thresholds, e.g. "
                "{\"training_iteration\": 20, \"accuracy\": 0.95}");
  for (const cJSON *c = stop->child; c; c = c->next) {
    size_t len = c->string ? strlen(c->string) : 0;
    if (len < 1 || len > SPEC_NAME_MAX)
      return fail(err, NULL, "a key must be a result key of 1 to 128 bytes");
    if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble))
      return fail(err, c->string, "must be a finite number (the threshold)");
    if (++n > STOPRULE_MAX_KEYS) return fail(err, NULL, "at most 32 keys");
  }
  if (!n) return fail(err, NULL, "must name at least one result key (or be left out)");
  return 0;
}

int stoprule_reached(const cJSON *stop, int has_metric, const char *metric, enum spec_mode mode,
                     const cJSON *result, char *reason, size_t reasonlen) {
  if (!cJSON_IsObject(stop) || !cJSON_IsObject(result)) return 0;
  for (const cJSON *c = stop->child; c; c = c->next) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(result, c->string);
    double x;
    if (cJSON_IsNumber(v))
      x = v->valuedouble;
    else if (cJSON_IsBool(v))
      x = cJSON_IsTrue(v) ? 1 : 0;
    else
      continue;
    if (isnan(x)) continue;
    int is_min = has_metric && mode == SPEC_MODE_MIN && !strcmp(c->string, metric);
    int hit = is_min ? x <= c->valuedouble : x >= c->valuedouble;
    if (!hit) continue;
    if (reason && reasonlen)
      snprintf(reason, reasonlen, "stop rule: %.128s %.6g %s %.6g", c->string, x,
               is_min ? "<=" : ">=", c->valuedouble);
    return 1;
  }
  return 0;
}
