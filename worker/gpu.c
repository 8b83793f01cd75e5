/* GPU detection through dlopen'ed NVML (preferred) or libcuda. */
#include "gpu.h"

#include <dlfcn.h>
#include <stddef.h>

#include "log.h"

struct gpu_nvml_memory {
  unsigned long long total, free, used;
};

static int gpu_nvml(int *ids, long *mem_mb, int cap) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
  int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
  int (*get)(unsigned, void **) =
      (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  int (*mem)(void *, struct gpu_nvml_memory *) =
      (int (*)(void *, struct gpu_nvml_memory *))dlsym(h, "nvmlDeviceGetMemoryInfo");
  int (*shut)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
  int n = -1;
  unsigned c = 0;
  if (init && count && get && mem && init() == 0) {
    if (count(&c) == 0) {
      n = 0;
      for (unsigned i = 0; i < c && n < cap; i++) {
        void *dev = NULL;
        struct gpu_nvml_memory m = {0, 0, 0};
        if (get(i, &dev) != 0 || mem(dev, &m) != 0) continue;
        ids[n] = (int)i;
        mem_mb[n] = (long)(m.total >> 20);
        n++;
      }
    }
    if (shut) shut();
  }
  dlclose(h);
  return n;
}

static int gpu_cuda(int *ids, long *mem_mb, int cap) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
  int (*get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
  int (*total)(size_t *, int) = (int (*)(size_t *, int))dlsym(h, "cuDeviceTotalMem_v2");
  int n = -1, c = 0;
  if (init && count && get && total && init(0) == 0 && count(&c) == 0) {
    n = 0;
    for (int i = 0; i < c && n < cap; i++) {
      int dev;
      size_t bytes = 0;
      if (get(&dev, i) != 0 || total(&bytes, dev) != 0) continue;
      ids[n] = i;
      mem_mb[n] = (long)(bytes >> 20);
      n++;
    }
  }
  dlclose(h);
  return n;
}

int gpu_detect(int *ids, long *mem_mb, int cap) {
  int n = gpu_nvml(ids, mem_mb, cap);
  if (n < 0) n = gpu_cuda(ids, mem_mb, cap);
  if (n < 0) {
    log_info("no NVIDIA driver found (libnvidia-ml.so.1, libcuda.so.1): 0 GPUs; "
             "use --gpus to declare devices");
    return 0;
  }
  return n;
}
