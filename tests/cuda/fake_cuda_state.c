/* A CUDA runtime that is only a device state, for the plugin's probe
 * (kernels/cuda_plugin.c) inside libctune-cuda-fault.so: CTUNE_FAKE_CUDA
 * picks what the runtime answers, the real runtime's error codes and
 * sentences, so ctune-train's mapping of each state can be tested without a
 * GPU: "no_device", "insufficient_driver", "system_not_ready" (counting
 * devices fails); "devices_unavailable" (exclusive-process mode, another
 * process holds the device), "context_oom" (opening the context). The
 * backend itself is a stub that must never be reached past a failed probe;
 * with "ok" its create() reports that it ran. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

static const char *state(void) {
  const char *s = getenv("CTUNE_FAKE_CUDA");
  return s ? s : "ok";
}

static cudaError_t last = cudaSuccess;

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 0;
  if (!strcmp(state(), "no_device")) return last = cudaErrorNoDevice;
  if (!strcmp(state(), "insufficient_driver")) return last = cudaErrorInsufficientDriver;
  if (!strcmp(state(), "system_not_ready")) return last = cudaErrorSystemNotReady;
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) {
  return dev == 0 ? cudaSuccess : (last = cudaErrorInvalidDevice);
}

cudaError_t cudaFree(void *p) {
  if (p) return last = cudaErrorInvalidValue;
  if (!strcmp(state(), "devices_unavailable")) return last = cudaErrorDevicesUnavailable;
  if (!strcmp(state(), "context_oom")) return last = cudaErrorMemoryAllocation;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last;
  last = cudaSuccess;
  return e;
}

/* The real runtime's names and sentences (CUDA 13). */
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorNoDevice:
    return "cudaErrorNoDevice";
  case cudaErrorInsufficientDriver:
    return "cudaErrorInsufficientDriver";
  case cudaErrorSystemNotReady:
    return "cudaErrorSystemNotReady";
  case cudaErrorDevicesUnavailable:
    return "cudaErrorDevicesUnavailable";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  default:
    return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "no error";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected";
  case cudaErrorInsufficientDriver:
    return "CUDA driver version is insufficient for CUDA runtime version";
  case cudaErrorSystemNotReady:
    return "system not yet initialized";
  case cudaErrorDevicesUnavailable:
    return "CUDA-capable device(s) is/are busy or unavailable";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  default:
    return "unknown error";
  }
}

/* ---- the backend stub ------------------------------------------------- */

static char last_error[128];

const char *backend_cuda_last_error(void) { return last_error; }
int backend_cuda_device_count(void) { return 1; }

static int stub_create(const struct model_spec *m, const struct optim_spec *o, int max_batch,
                       const struct backend_opts *opts, struct backend **out) {
  (void)m, (void)o, (void)max_batch, (void)opts;
  *out = NULL;
  strcpy(last_error, "fake CUDA backend: create reached (the probe passed)");
  return -EIO;
}

const struct backend_ops backend_cuda_ops = {.name = "cuda", .create = stub_create};

/* The fast steps (plugin ABI 2): never reached, create always fails. */
int backend_cuda_set_data(struct backend *b, int which, const uint8_t *pix, const uint8_t *labels,
                          int64_t n) {
  (void)b, (void)which, (void)pix, (void)labels, (void)n;
  return -EIO;
}
int backend_cuda_set_order(struct backend *b, int which, const int32_t *idx, int64_t n) {
  (void)b, (void)which, (void)idx, (void)n;
  return -EIO;
}
int backend_cuda_train_next(struct backend *b, int n) {
  (void)b, (void)n;
  return -EIO;
}
int backend_cuda_take_loss(struct backend *b, double *loss_sum, int64_t *rows, int *nonfinite) {
  (void)b, (void)loss_sum, (void)rows, (void)nonfinite;
  return -EIO;
}
int backend_cuda_evaluate_set(struct backend *b, int which, double *loss_sum, int64_t *correct) {
  (void)b, (void)which, (void)loss_sum, (void)correct;
  return -EIO;
}
int backend_cuda_nccl_id(void *out, size_t len) {
  (void)out, (void)len;
  return -EIO;
}
