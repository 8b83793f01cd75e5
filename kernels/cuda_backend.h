/* The CUDA backend's extras beyond struct backend_ops (trainer/backend.h):
 * the message behind its last error, so the trainer can print it. */
#ifndef CTUNE_CUDA_BACKEND_H
#define CTUNE_CUDA_BACKEND_H

#include <stddef.h>

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

/* A new NCCL unique id (ncclGetUniqueId) in out, len bytes
 * (NCCL_UNIQUE_ID_BYTES): rank 0 of a trial's member processes makes it and
 * the rendezvous hands it to the others (backend_opts.nccl_id). 0, or -EIO
 * with the sentence in backend_cuda_last_error(); -EINVAL for a wrong len. */
int backend_cuda_nccl_id(void *out, size_t len);

/* ---- fast steps: data on the device, captured steps, deferred loss ----
 * Sets: 0 = training, 1 = evaluation. A trainer that uses these uploads
 * each set once (uint8 pixels as stored, in_dim bytes per image, and labels),
 * sends the training order once per epoch, then calls train_next per step and
 * take_loss every BACKEND_CUDA_LOSS_EVERY steps and at the end of an epoch:
 * a divergence (non-finite loss) is seen at most that many steps late. */
#define BACKEND_CUDA_LOSS_EVERY 64

/* Uploads n images (pix: n * in_dim bytes, normalised on the device as
 * (p/255 - 0.5)/0.5) and labels to every device, replacing that set; its
 * order becomes 0..n-1. -EINVAL for a bad label, -ENOMEM over the cap. */
int backend_cuda_set_data(struct backend *b, int which, const uint8_t *pix, const uint8_t *labels,
                          int64_t n);
/* The rows, in order, that the next steps (set 0) or evaluations (set 1)
 * use; resets the set's cursor to the start. */
int backend_cuda_set_order(struct backend *b, int which, const int32_t *idx, int64_t n);
/* One training step on the next n rows of set 0's order. Does not wait for
 * the device: the loss is added to the device's running sum. */
int backend_cuda_train_next(struct backend *b, int n);
/* The summed training loss and rows since the last call, and whether any
 * step's loss was NaN or infinite; waits once per device and resets. */
int backend_cuda_take_loss(struct backend *b, double *loss_sum, int64_t *rows, int *nonfinite);
/* which must be 1. Evaluates every row of set 1's order in chunks of the evaluation rows
 * (at least 256 unless a cap forbids it); adds the summed loss and the
 * number correct. One wait per device per evaluation. */
int backend_cuda_evaluate_set(struct backend *b, int which, double *loss_sum, int64_t *correct);
/* The arenas' peak alone in MiB (the most of any device): what the memory
 * plan and --gpu-mem-limit-mb promise. peak_mem_mb reports the larger of this
 * and what NVML says the process holds (context, cuBLAS and NCCL included),
 * which on a real GPU is hundreds of MiB more. */
int backend_cuda_arena_peak_mb(struct backend *b, double *out);
/* For tests and logs: the evaluation chunk and whether steps are graphs. */
int backend_cuda_counters(struct backend *b, int64_t *eval_rows, int *graphs);

#ifdef __cplusplus
}
#endif

#endif
