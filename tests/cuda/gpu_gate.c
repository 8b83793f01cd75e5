/* See gpu_skip.h: the part that asks the CUDA runtime and the machine. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_skip.h"

/* nvidia-smi -L prints "GPU 0: NVIDIA H100 ... (UUID: ...)" per device. */
static int smi_lists_gpu(void) {
  FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!p) return 0;
  char line[512];
  int found = 0;
  while (fgets(line, sizeof(line), p))
    if (!strncmp(line, "GPU ", 4)) found = 1;
  pclose(p);
  return found;
}

static int driver_present(void) {
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return 0;
  dlclose(h);
  return 1;
}

int gpu_test_gate(int need) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) count = 0;
  cudaGetLastError();
  const char *req = getenv("CTUNE_REQUIRE_GPU");
  int require = (req && !strcmp(req, "1")) || smi_lists_gpu();
  char msg[512];
  int v = gpu_skip_decide((int)e, cudaGetErrorName(e), cudaGetErrorString(e),
                          e == cudaErrorNoDevice, e == cudaErrorInsufficientDriver,
                          e == cudaErrorInsufficientDriver && driver_present(), count, need,
                          require, msg, sizeof(msg));
  printf("%s\n", msg);
  fflush(stdout);
  return v;
}
