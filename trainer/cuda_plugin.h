/* The CUDA backend as a plugin: ctune-train loads libctune-cuda.so with
 * dlopen() only when a run asks for --device cuda|auto, so a CUDA build of
 * ctune-train starts and trains on the CPU on a machine without any CUDA
 * library (ldd shows none). The shared object exports one symbol,
 * CUDA_PLUGIN_SYMBOL, a struct cuda_plugin; the loader checks its ABI number
 * before using anything else in it. */
#ifndef CTUNE_TRAINER_CUDA_PLUGIN_H
#define CTUNE_TRAINER_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: the fast steps (set_data .. evaluate_set) joined the table.
 * 3: nccl_id, for trials of several member processes. */
#define CUDA_PLUGIN_ABI 3
#define CUDA_PLUGIN_SYMBOL "ctune_cuda_plugin"
/* The file ctune-train looks for in <exe dir>/../lib and <exe dir>. */
#ifndef CUDA_PLUGIN_FILE
#define CUDA_PLUGIN_FILE "libctune-cuda.so"
#endif

struct cuda_plugin {
  int abi; /* CUDA_PLUGIN_ABI */
  const struct backend_ops *ops;
  /* The last failure (probe or backend) as one sentence; "" if none. */
  const char *(*last_error)(void);
  /* Devices visible to this process; 0 when none or no driver. */
  int (*device_count)(void);
  /* Opens a context on each of the first gpus (0 = all) visible devices
   * before the backend plans any memory, so device states come back as what
   * they are: 0; -ENODEV when the runtime has no device or cannot use one
   * (no driver, driver too old, device unavailable or busy in exclusive-
   * process mode, system not ready: the runtime's sentence in last_error);
   * -ENOMEM when the context itself does not fit (a smaller batch would not
   * help, so --oom-retry must not retry it). */
  int (*probe)(int gpus);
  /* Fast steps (kernels/cuda_backend.h has the contract): the data set on
   * the device as uint8, the order once per epoch, one replay per step with
   * the loss kept on the device, read every loss_every steps. */
  int loss_every; /* BACKEND_CUDA_LOSS_EVERY */
  int (*set_data)(struct backend *, int which, const uint8_t *pix, const uint8_t *labels,
                  int64_t n);
  int (*set_order)(struct backend *, int which, const int32_t *idx, int64_t n);
  int (*train_next)(struct backend *, int n);
  int (*take_loss)(struct backend *, double *loss_sum, int64_t *rows, int *nonfinite);
  int (*evaluate_set)(struct backend *, int which, double *loss_sum, int64_t *correct);
  /* A new NCCL unique id (len: NCCL_UNIQUE_ID_BYTES, 128) for the member
   * processes of one trial: rank 0 makes it, the rendezvous shares it. */
  int (*nccl_id)(void *out, size_t len);
};

/* Loader (trainer/cuda_load.c). The file name defaults to CUDA_PLUGIN_FILE;
 * test builds of ctune-train point it at a double. */
void cuda_plugin_set_file(const char *name);
/* Loads the plugin once per process. 0 and *out, or -ENODEV with dlerror's
 * (or the ABI check's) sentence in err. */
int cuda_plugin_load(const struct cuda_plugin **out, char *err, size_t errlen);
/* 1 when this build produced the plugin (configure time), else 0. */
int cuda_plugin_built(void);

#ifdef __cplusplus
}
#endif

#endif
