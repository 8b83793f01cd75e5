/* The CUDA backend's extras beyond struct backend_ops (trainer/backend.h):
 * the message behind its last error, so the trainer can print it. */
#ifndef CTUNE_CUDA_BACKEND_H
#define CTUNE_CUDA_BACKEND_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend itself (also declared by backend.h under CTUNE_HAVE_CUDA). */
extern const struct backend_ops backend_cuda_ops;

/* The most recent failure of backend_cuda_ops as one sentence for a person,
 * e.g. "out of GPU memory at batch_size 512 (needs ~300 MiB, limit 256 MiB):
 * try a smaller batch_size" or "no usable CUDA device: ...". "" if none.
 * Not thread-safe: one trainer process drives one backend. */
const char *backend_cuda_last_error(void);

/* Number of CUDA devices this process can use (CUDA_VISIBLE_DEVICES
 * applied); 0 when there is no device or no driver. */
int backend_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
