/* The backend interface the training loop drives (CPU here, CUDA in kernels/),
 * and the model's one-flat-buffer parameter layout that every backend shares,
 * so checkpoints and tests are interchangeable between backends. */
#ifndef CTUNE_TRAINER_BACKEND_H
#define CTUNE_TRAINER_BACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum model_kind { MODEL_MLP = 0, MODEL_CNN = 1 };
enum optim_kind { OPTIM_SGD = 0, OPTIM_ADAM = 1 };

/* Input geometry and the two hidden widths. For the cnn, l1/l2 are the fc
 * widths after the two conv/pool stages; for the mlp, the hidden widths. */
struct model_spec {
  int kind; /* enum model_kind */
  int in_c, in_h, in_w, n_classes, l1, l2;
};

struct optim_spec {
  int kind; /* enum optim_kind */
  float lr, momentum, weight_decay, beta1, beta2, eps;
};

/* The cnn's fixed parts (PyTorch CIFAR tutorial's Net). */
#define MODEL_CNN_K 5    /* conv kernel size, stride 1, no padding */
#define MODEL_CNN_C1 6   /* conv1 output channels */
#define MODEL_CNN_C2 16  /* conv2 output channels */
#define MODEL_CNN_POOL 2 /* max pool size and stride */

enum layer_kind { LAYER_CONV = 0, LAYER_LINEAR = 1 };

/* One layer with parameters. Weights are PyTorch-shaped: conv [out_c][in_c]
 * [k][k], linear [out][in]; biases [out]. Offsets are in floats into the one
 * parameter buffer. A conv layer here is conv -> ReLU -> maxpool; a linear
 * layer is followed by ReLU except the last one. For conv layers in_c/in_h/
 * in_w is the input, out_c/out_h/out_w the conv output before pooling and
 * pool_h/pool_w after it. For linear layers in_c is the input width and out_c
 * the output width (h/w are 1). */
struct layer_shape {
  int kind; /* enum layer_kind */
  int in_c, in_h, in_w;
  int out_c, out_h, out_w;
  int pool_h, pool_w;
  int64_t w_off, w_size, b_off, b_size;
};

#define MODEL_MAX_LAYERS 8

struct model_layout {
  int n_layers;
  struct layer_shape layer[MODEL_MAX_LAYERS];
  int64_t n_params; /* floats in the parameter buffer */
  int in_dim;       /* in_c * in_h * in_w */
  int n_classes;
};

/* Fills *out for spec; -EINVAL (naming nothing: the config layer validates
 * and names keys) when the geometry does not fit, e.g. an image too small
 * for two 5x5 conv + pool stages. */
int model_layout_init(const struct model_spec *spec, struct model_layout *out);

/* Floats of optimiser state per parameter: 1 for SGD (velocity), 2 for Adam
 * (m then v, each n_params long). */
int optim_state_per_param(int optim_kind);

struct backend_opts {
  int threads;              /* caps every thread pool, BLAS included */
  int gpus;                 /* CUDA: devices to use (data parallel) */
  int64_t gpu_mem_limit_mb; /* CUDA: 0 = no cap */
  /* CUDA across processes (0 or 1: this process alone): the member
   * processes of one trial, this one's rank, and the NCCL id rank 0 made
   * (cuda_plugin's nccl_id) that every member got through the rendezvous */
  int world_size, rank;
  const void *nccl_id;
};

struct backend; /* opaque; each backend defines its own */

/* All functions return 0 or a negative errno (-ENOMEM for out of memory,
 * -ENODEV when there is no usable device, -EINVAL for bad arguments).
 * Parameters and optimiser state cross this interface in the layout above:
 * params n_params floats, opt_state optim_state_per_param * n_params floats.
 * x is n images of in_dim floats, already normalised; y is n labels. */
struct backend_ops {
  const char *name;
  int (*create)(const struct model_spec *, const struct optim_spec *, int max_batch,
                const struct backend_opts *, struct backend **out);
  int (*set_state)(struct backend *, const float *params, const float *opt_state, int64_t step);
  int (*get_state)(struct backend *, float *params, float *opt_state, int64_t *step);
  /* forward, backward, one optimiser step; *loss_out is the batch's mean
   * cross-entropy before the step. */
  int (*train_step)(struct backend *, const float *x, const uint8_t *y, int n, float *loss_out);
  /* forward only; adds the summed loss and the number correct. */
  int (*evaluate)(struct backend *, const float *x, const uint8_t *y, int n, double *loss_sum,
                  int *correct);
  int (*peak_mem_mb)(struct backend *, double *out);
  void (*destroy)(struct backend *);
};

extern const struct backend_ops backend_cpu_ops;
/* Shuts down the worker threads that OpenBLAS starts when it loads, which
 * spin on sched_yield for ~0.1 s of another core's CPU before they sleep;
 * a later call that wants threads starts them again. ctune-train calls it
 * at one thread before it loads data, the CPU backend when created at one
 * thread. 0, or -ENOTSUP when the BLAS
 * library has no such pool. */
int backend_cpu_blas_idle(void);
/* backend_cuda_ops lives in the CUDA plugin (kernels/cuda_backend.h,
 * loaded through trainer/cuda_plugin.h). */

#ifdef __cplusplus
}
#endif

#endif
