/* Fuzz target: the experiment-config validator (server/core/validate.c), as
 * the server runs it on a POST body: cJSON parse, then validate_experiment. */
#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *cfg = cJSON_ParseWithLength((const char *)data, size);
  if (!cfg) return 0;
  struct experiment_spec spec;
  struct validate_error err;
  if (validate_experiment(cfg, &spec, &err) == 0) validate_spec_free(&spec);
  cJSON_Delete(cfg);
  return 0;
}
