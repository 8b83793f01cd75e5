/* JSON-line result parser: pure, one line in, one flat object out. */
#include "result.h"

#include <errno.h>
#include <math.h>

int result_parse_line(const char *line, size_t len, const char *time_attr,
                      cJSON **out, double *t) {
  *out = NULL;
  /* Cheap reject before parsing: log lines rarely start with '{'. */
  size_t i = 0;
  while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
  if (i == len || line[i] != '{') return 0;
  cJSON *obj = cJSON_ParseWithLength(line, len);
  if (!obj) return 0;
  int rc = 0;
  const cJSON *tv = cJSON_GetObjectItemCaseSensitive(obj, time_attr);
  if (!cJSON_IsObject(obj) || !cJSON_IsNumber(tv) || !isfinite(tv->valuedouble))
    goto done;
  cJSON *flat = cJSON_CreateObject();
  if (!flat) { rc = -ENOMEM; goto done; }
  const cJSON *m;
  cJSON_ArrayForEach(m, obj) {
    if (!cJSON_IsNumber(m) || !m->string) continue;
    if (cJSON_GetObjectItemCaseSensitive(flat, m->string)) continue; /* first wins */
    if (!cJSON_AddNumberToObject(flat, m->string, m->valuedouble)) {
      cJSON_Delete(flat);
      rc = -ENOMEM;
      goto done;
    }
  }
  *t = tv->valuedouble;
  *out = flat;
  rc = 1;
done:
  cJSON_Delete(obj);
  return rc;
}
