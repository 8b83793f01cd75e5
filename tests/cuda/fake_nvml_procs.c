/* A fake NVML for the CUDA backend's gpu_mem_mb: lists the calling process
 * on bus 00000000:10:00.0 (the double's device 0) holding
 * FAKE_NVML_USED_MB MiB ("na": NVML_VALUE_NOT_AVAILABLE), and one other
 * process on the same device. Counts nvmlInit_v2 and nvmlShutdown calls. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct proc {
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};

static int dev0;

int fake_nvml_inits, fake_nvml_shutdowns;

int nvmlInit_v2(void) {
  fake_nvml_inits++;
  return 0;
}
int nvmlShutdown(void) {
  fake_nvml_shutdowns++;
  return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev) {
  if (strcmp(bus, "00000000:10:00.0")) return 6; /* NVML_ERROR_NOT_FOUND */
  *dev = &dev0;
  return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *count, struct proc *out) {
  const char *mb = getenv("FAKE_NVML_USED_MB");
  if (dev != &dev0 || *count < 2) return 7; /* INSUFFICIENT_SIZE */
  out[0] = (struct proc){(unsigned)getpid() + 1, 999ULL << 20, 0, 0};
  unsigned long long used = (unsigned long long)(mb ? atoll(mb) : 0) << 20;
  if (mb && !strcmp(mb, "na")) used = ~0ULL; /* NVML_VALUE_NOT_AVAILABLE */
  out[1] = (struct proc){(unsigned)getpid(), used, 0, 0};
  *count = 2;
  return 0;
}
