/* The entry point of libctune-cuda.so (trainer/cuda_plugin.h): the backend,
 * its last error, and a device probe that opens each device's context before
 * the backend plans memory, so that device states map to what they mean
 * instead of "internal error" or a pointless --oom-retry. */
#include "cuda_plugin.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "log.h"

static char probe_error[512];

static const char *plugin_last_error(void) {
  return probe_error[0] ? probe_error : backend_cuda_last_error();
}

/* "cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or
 * unavailable": the runtime's own name and sentence. */
static int probe_fail(int rc, const char *what, cudaError_t e) {
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  snprintf(probe_error, sizeof(probe_error), "--device cuda: %s: %s: %s%s%s", what,
           cudaGetErrorName(e), cudaGetErrorString(e), vis ? " (CUDA_VISIBLE_DEVICES=" : "",
           vis ? vis : "");
  if (vis) {
    size_t n = strlen(probe_error);
    if (n + 1 < sizeof(probe_error)) {
      probe_error[n] = ')';
      probe_error[n + 1] = '\0';
    }
  }
  log_error("cuda: %s", probe_error);
  cudaGetLastError(); /* leave no error behind for the backend */
  return rc;
}

static int plugin_probe(int gpus) {
  int count = 0;
  probe_error[0] = '\0';
  log_set_program("ctune-train");
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorMemoryAllocation)
    return probe_fail(-ENOMEM, "cannot initialise the CUDA runtime", e);
  /* Every other failure to count devices means this process cannot use a
   * GPU (no device, no or wrong driver, system not ready): no_device, with
   * the runtime's sentence so that a broken GPU is not mistaken for none. */
  if (e != cudaSuccess) return probe_fail(-ENODEV, "no usable CUDA device", e);
  if (count < 1) return probe_fail(-ENODEV, "no usable CUDA device", cudaErrorNoDevice);
  int want = gpus > 0 ? gpus : count;
  if (want > count) {
    snprintf(probe_error, sizeof(probe_error),
             "--device cuda: --gpus %d but %d CUDA device(s) are visible", want, count);
    log_error("cuda: %s", probe_error);
    return -ENODEV;
  }
  for (int i = 0; i < want; i++) {
    char what[96];
    snprintf(what, sizeof(what), "cannot open a context on CUDA device %d", i);
    e = cudaSetDevice(i);
    /* cudaFree(NULL) is the runtime's idiom for "create the context now" */
    if (e == cudaSuccess) e = cudaFree(NULL);
    if (e == cudaErrorMemoryAllocation) return probe_fail(-ENOMEM, what, e);
    if (e != cudaSuccess) return probe_fail(-ENODEV, what, e);
  }
  return 0;
}

__attribute__((visibility("default"))) const struct cuda_plugin ctune_cuda_plugin = {
    .abi = CUDA_PLUGIN_ABI,
    .ops = &backend_cuda_ops,
    .last_error = plugin_last_error,
    .device_count = backend_cuda_device_count,
    .probe = plugin_probe,
    .loss_every = BACKEND_CUDA_LOSS_EVERY,
    .set_data = backend_cuda_set_data,
    .set_order = backend_cuda_set_order,
    .train_next = backend_cuda_train_next,
    .take_loss = backend_cuda_take_loss,
    .evaluate_set = backend_cuda_evaluate_set,
    .nccl_id = backend_cuda_nccl_id,
};
