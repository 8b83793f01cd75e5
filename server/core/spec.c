/* spec: see spec.h. */
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void spec_error_set(struct validate_error *err, const char *path, const char *fmt, ...) {
  va_list ap;
  if (!err) return;
  snprintf(err->path, sizeof err->path, "%s", path ? path : "");
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
}

void spec_path_join(char *dst, size_t size, const char *base, char sep, const char *key) {
  size_t n = 0;
  if (size == 0) return;
  for (; base && *base && n + 1 < size; base++) dst[n++] = *base;
  if (n > 0 && sep && n + 1 < size) dst[n++] = sep;
  for (; key && *key && n + 1 < size; key++) dst[n++] = *key;
  dst[n] = '\0';
}

/* Rejects any key of obj not in allowed (NULL-terminated). */
int spec_check_keys(const cJSON *obj, const char *path, const char *what,
                    const char *const *allowed, struct validate_error *err) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    int ok = 0;
    for (int i = 0; allowed[i] && !ok; i++) ok = strcmp(item->string, allowed[i]) == 0;
    if (!ok) {
      char p[256], list[512] = "";
      for (int i = 0; allowed[i]; i++) {
        if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, allowed[i], sizeof list - strlen(list) - 1);
      }
      spec_path_join(p, sizeof p, path, '.', item->string);
      spec_error_set(err, p, "unknown field (%s takes %s)", what, list);
      return -EINVAL;
    }
  }
  return 0;
}

int spec_name_ok(const char *s, int allow_slash) {
  size_t n = strlen(s);
  if (n < 1 || n > SPEC_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-' || (allow_slash && c == '/')))
      return 0;
  }
  return 1;
}

/* Copies an optional name-like string field; 1 when present, 0 absent. */
int spec_get_name(const cJSON *obj, const char *path, const char *key, int allow_slash, char *dst,
                  struct validate_error *err) {
  char p[256];
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return 0;
  spec_path_join(p, sizeof p, path, '.', key);
  if (!cJSON_IsString(v) || !spec_name_ok(v->valuestring, allow_slash)) {
    spec_error_set(err, p, "must be a string of 1-%d characters from A-Z a-z 0-9 _ . -%s",
                   SPEC_NAME_MAX, allow_slash ? " /" : "");
    return -EINVAL;
  }
  snprintf(dst, SPEC_NAME_MAX + 1, "%s", v->valuestring);
  return 1;
}

/* Optional integer field in [lo, hi]; 1 present, 0 absent. */
int spec_get_int(const cJSON *obj, const char *path, const char *key, double lo, double hi,
                 int64_t *dst, struct validate_error *err) {
  char p[256];
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return 0;
  spec_path_join(p, sizeof p, path, '.', key);
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
      v->valuedouble > hi) {
    spec_error_set(err, p, "must be an integer from %.0f to %.0f", lo, hi);
    return -EINVAL;
  }
  *dst = (int64_t)v->valuedouble;
  return 1;
}

/* Optional finite number; 1 present, 0 absent. Range checks by the caller. */
int spec_get_number(const cJSON *obj, const char *path, const char *key, double *dst,
                    struct validate_error *err) {
  char p[256];
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return 0;
  spec_path_join(p, sizeof p, path, '.', key);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
    spec_error_set(err, p, "must be a finite number");
    return -EINVAL;
  }
  *dst = v->valuedouble;
  return 1;
}

int spec_fail_at(struct validate_error *err, const char *path, const char *key, const char *msg) {
  char p[256];
  spec_path_join(p, sizeof p, path, '.', key);
  spec_error_set(err, p, "%s", msg);
  return -EINVAL;
}
