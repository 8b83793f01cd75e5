/* How much device memory one GPU needs for a model at a per-device batch:
 * every buffer the CUDA backend carves, counted in one place so the capped
 * allocator can refuse a batch before touching the device. Pure C. */
#ifndef CTUNE_GPU_PLAN_H
#define CTUNE_GPU_PLAN_H

#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuBLAS gets this much workspace from our allocator (cublasSetWorkspace), so
 * it never allocates behind the cap. */
#define GPU_PLAN_BLAS_WORKSPACE (4 << 20)
/* The input is double-buffered: batch k+1 is copied while batch k computes. */
#define GPU_PLAN_SLOTS 2
/* Blocks per output of a bias gradient's reduction at most (CUOPS_RED_PARTS,
 * kernels/cuda_ops.h): each output gets one partial sum per block. */
#define GPU_PLAN_RED_PARTS 128

/* Element counts per layer (index as in struct model_layout). Conv layers use
 * col, conv, pool; linear layers use out. Activations of the conv part are
 * kept channel-major ([c][n][h*w]) so each conv is one GEMM over the batch. */
struct gpu_plan_layer {
  int64_t col;  /* im2col matrix [in_c*k*k][n*out_h*out_w] */
  int64_t conv; /* conv output after bias and ReLU [out_c][n][out_h*out_w] */
  int64_t pool; /* pooled output [out_c][n][pool_h*pool_w] (the last conv
                 * layer's is flat), argmax the same count */
  int64_t out;  /* linear output [n][out_c] */
};

struct gpu_plan {
  int batch; /* rows per device */
  int n_layers;
  int64_t n_params, opt_floats;
  int64_t x_floats; /* one input slot: batch * in_dim */
  int64_t flat;     /* cnn: conv part flattened to [n][c*h*w]; mlp: 0 */
  struct gpu_plan_layer layer[MODEL_MAX_LAYERS];
  int red_outputs; /* the widest layer: its bias gradient's outputs */
  /* Bytes, each buffer rounded to GPU_MEM_ALIGN, in three arenas:
   * eval: parameters, inputs, forward activations, the loss sums,
   *   cuBLAS workspace (allocated by create);
   * state: gradients and optimiser state, independent of the batch;
   * backward: the backward pass's buffers for `batch` rows, and the bias
   *   reductions' scratch (a ticket and GPU_PLAN_RED_PARTS partial sums per
   *   output of the widest layer).
   * state and backward come with the first training step (state also with a
   * restored optimiser state), never for evaluation alone.
   * train_bytes = state_bytes + backward_bytes. */
  int64_t eval_bytes, state_bytes, backward_bytes, train_bytes;
};

/* Fills *out; -EINVAL for batch < 1 or a layout it does not know. */
int gpu_plan_init(const struct model_layout *L, int optim_kind, int batch, struct gpu_plan *out);

/* Rows per device when a global batch of n is split over g devices: the
 * first n % g devices get one more. Device d's rows start at *first. */
void gpu_plan_shard(int n, int g, int d, int *first, int *count);

#ifdef __cplusplus
}
#endif

#endif
