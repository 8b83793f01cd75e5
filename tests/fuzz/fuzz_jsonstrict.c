/* Fuzz target: the strict JSON scanner (common/jsonstrict.c), checked
 * against cJSON: what the scanner accepts cJSON must parse whole, and the
 * reported offset and path must stay inside their bounds. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jsonstrict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct jsonstrict_error e;
  int rc = jsonstrict_check((const char *)data, size, &e);
  if (rc == -EINVAL) {
    if (e.problem == JSONSTRICT_OK || e.offset > size) abort();
    if (strlen(e.path) >= sizeof e.path || strlen(e.message) >= sizeof e.message) abort();
    return 0;
  }
  if (rc) return 0; /* -ENOMEM */
  /* cJSON stops at nesting 1000 on its own count; stay clear of the edge. */
  size_t opens = 0;
  for (size_t i = 0; i < size; i++) opens += data[i] == '[' || data[i] == '{';
  if (opens > 900) return 0;
  const char *end = NULL;
  cJSON *v = cJSON_ParseWithLengthOpts((const char *)data, size, &end, 0);
  if (!v) abort(); /* the scanner accepted what cJSON refuses */
  cJSON_Delete(v);
  return 0;
}
