/* See gpu_skip.h. */
#include "gpu_skip.h"

#include <stdio.h>
#include <string.h>

int gpu_skip_decide(int err, const char *err_name, const char *err_text, int no_device,
                    int insufficient_driver, int driver_present, int count, int need, int require,
                    char *msg, size_t len) {
  if (err == 0 && count >= need) {
    snprintf(msg, len, "GPU: %d CUDA device(s) visible", count);
    return GPU_RUN;
  }
  if (err == 0 && count >= 1) {
    snprintf(msg, len, "SKIP: this test needs %d CUDA devices, %d visible", need, count);
    return GPU_SKIP;
  }
  /* the only answers that mean "this machine has no GPU" */
  int none = (err == 0 && count == 0) || no_device || (insufficient_driver && !driver_present);
  if (none && !require) {
    snprintf(msg, len, "SKIP: no CUDA device (%s: %s)", err ? err_name : "cudaGetDeviceCount",
             err ? err_text : "0 devices");
    return GPU_SKIP;
  }
  if (none)
    snprintf(msg, len,
             "FAIL: a GPU is required here (CTUNE_REQUIRE_GPU=1 or nvidia-smi "
             "-L lists one) but the CUDA runtime says: %s: %s",
             err ? err_name : "cudaGetDeviceCount", err ? err_text : "0 devices");
  else
    snprintf(msg, len, "FAIL: cudaGetDeviceCount: %s: %s", err_name, err_text);
  return GPU_FAIL;
}
