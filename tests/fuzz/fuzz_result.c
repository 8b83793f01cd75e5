/* Fuzz target: the worker's result-line parser (worker/result.c), one
 * stdout line of a trial in, a flat result object (or nothing) out. */
#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "result.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *out = NULL;
  double t = 0;
  int rc = result_parse_line((const char *)data, size, "training_iteration", &out, &t);
  if (rc == 1) {
    /* A result is a flat object of numbers (or null) holding the time value. */
    if (!cJSON_IsObject(out) ||
        !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(out, "training_iteration")))
      abort();
    const cJSON *m;
    cJSON_ArrayForEach(m, out) if (!cJSON_IsNumber(m) && !cJSON_IsNull(m)) abort();
  } else if (out) {
    abort(); /* nothing handed out unless it is a result */
  }
  cJSON_Delete(out);
  return 0;
}
