/* A stand-in libnvidia-ml.so.1 for the GPU detection test: two devices of
 * 8 GiB. Only the five entry points ctune-worker's gpu.c looks up. */
#include <stddef.h>

struct fake_nvml_memory {
  unsigned long long total, free, used;
};

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetCount_v2(unsigned *count) {
  *count = 2;
  return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
  if (index >= 2) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = (void *)(size_t)(index + 1);
  return 0;
}

int nvmlDeviceGetMemoryInfo(void *device, struct fake_nvml_memory *m) {
  if (!device) return 2;
  m->total = 8ULL << 30;
  m->free = m->total;
  m->used = 0;
  return 0;
}
