/* config: experiment config files → cJSON, with line:column on bad JSON. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int config_parse(const char *text, const char *where, cJSON **out, char *err, size_t errlen) {
  const char *end = NULL;
  *out = NULL;
  cJSON *doc = cJSON_ParseWithOpts(text, &end, 1);
  if (!doc) {
    int line = 1, col = 1;
    const char *stop = end ? end : text + strlen(text);
    for (const char *p = text; p < stop && *p; p++) {
      if (*p == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    char near[24];
    size_t n = strcspn(stop, "\n");
    if (n > sizeof(near) - 1) n = sizeof(near) - 1;
    memcpy(near, stop, n);
    near[n] = '\0';
    if (*stop)
      snprintf(err, errlen, "%s:%d:%d: not valid JSON near '%s'", where, line, col, near);
    else
      snprintf(err, errlen, "%s:%d:%d: not valid JSON (unexpected end of file)", where, line, col);
    return -EINVAL;
  }
  if (!cJSON_IsObject(doc)) {
    snprintf(err, errlen, "%s: an experiment config must be a JSON object", where);
    cJSON_Delete(doc);
    return -EINVAL;
  }
  *out = doc;
  return 0;
}

int config_load(const char *path, cJSON **out, char *err, size_t errlen) {
  enum { MAX = 4 << 20 };
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "cannot open config %s: %s", path, strerror(e));
    return -e;
  }
  char *buf = malloc(MAX + 1);
  if (!buf) {
    fclose(f);
    snprintf(err, errlen, "out of memory reading %s", path);
    return -ENOMEM;
  }
  size_t n = fread(buf, 1, MAX + 1, f);
  int rerr = ferror(f);
  fclose(f);
  int rc;
  if (rerr) {
    snprintf(err, errlen, "cannot read config %s", path);
    rc = -EIO;
  } else if (n > MAX) {
    snprintf(err, errlen, "config %s is larger than 4 MiB", path);
    rc = -EINVAL;
  } else {
    buf[n] = '\0';
    if (strlen(buf) != n) {
      snprintf(err, errlen, "%s: not a text file (holds a NUL byte)", path);
      rc = -EINVAL;
    } else {
      rc = config_parse(buf, path, out, err, errlen);
    }
  }
  free(buf);
  return rc;
}

const char *config_name(const cJSON *cfg) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(cfg, "name");
  return cJSON_IsString(n) && n->valuestring[0] ? n->valuestring : "experiment";
}

void config_file_stem(const char *name, char *out, size_t outlen) {
  size_t i = 0;
  if (!outlen) return;
  for (; name[i] && i + 1 < outlen; i++) {
    char ch = name[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '.' || ch == '_' || ch == '-';
    out[i] = ok ? ch : '_';
  }
  out[i] = '\0';
  if (out[0] == '.') out[0] = '_'; /* no hidden files, no ".." */
}
