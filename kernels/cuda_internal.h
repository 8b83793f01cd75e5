/* What the CUDA backend's files share: the per-device and backend state,
 * the error helpers and the checking macros, and the memory (cuda_mem.c) and
 * network (cuda_net.c) functions cuda_backend.c drives. Internal. */
#ifndef CTUNE_CUDA_INTERNAL_H
#define CTUNE_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_ops.h"
#include "gpu_mem.h"
#include "gpu_plan.h"

#define CUDA_MAX_DEVICES 16
#define MIB ((int64_t)1 << 20)

/* The message behind backend_cuda_last_error(), also logged. */
void cuda_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Record a failed call and map it to our codes: -ENOMEM stays distinct (exit
 * 6), a missing device or driver is -ENODEV (exit 7), the rest -EIO. */
int cuda_fail(const char *call, cudaError_t e, const char *file, int line);
int cuda_blas_fail(const char *call, cublasStatus_t st, const char *file, int line);
int cuda_nccl_fail(const char *call, ncclResult_t r, const char *file, int line);
void cuda_ops_fail(const char *call, const char *file, int line);

/* Each needs `int rc` and a `fail:` label in the calling function. */
#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      rc = cuda_fail(#call, e_, __FILE__, __LINE__);                                               \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)
#define BLAS(call)                                                                                 \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      rc = cuda_blas_fail(#call, s_, __FILE__, __LINE__);                                          \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)
#define NCCL(call)                                                                                 \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      rc = cuda_nccl_fail(#call, r_, __FILE__, __LINE__);                                          \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)
/* Our own launchers log their CUDA error; name the step for the person. */
#define OPS(call)                                                                                  \
  do {                                                                                             \
    int o_ = (call);                                                                               \
    if (o_) {                                                                                      \
      cuda_ops_fail(#call, __FILE__, __LINE__);                                                    \
      rc = o_;                                                                                     \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

/* Per-device counters the host reads only now and then ([0]: training,
 * [1]: evaluation). Everything a captured step needs that changes from step
 * to step lives here, on the device. */
struct cuda_ctl {
  int64_t cursor[2]; /* next position in the set's order */
  int64_t step;      /* Adam's step count */
  float bc[2];       /* Adam's bias corrections of this step */
  double acc_loss[2];
  int64_t acc_correct[2];
  int32_t nonfinite[2];
};

/* One instantiated graph: a whole training step or evaluation chunk. */
enum { CUDA_PHASE_TRAIN = 0, CUDA_PHASE_EVAL = 1 };
#define CUDA_MAX_GRAPHS 8
struct cuda_graph {
  int phase, rows;
  int64_t gen; /* the memory generation its pointers belong to */
  cudaGraphExec_t exec;
};

struct dev_block {
  void *ptr;
  int64_t size;
};

struct cuda_dev {
  int id;
  cudaStream_t compute, copy;
  cublasHandle_t blas;
  ncclComm_t comm; /* NULL with one device */
  struct gpu_mem mem;
  /* the three cudaMalloc'd arenas (see gpu_plan.h) */
  struct dev_block eval, state, bwd;
  cudaEvent_t copied[GPU_PLAN_SLOTS];     /* input slot filled */
  cudaEvent_t input_free[GPU_PLAN_SLOTS]; /* compute done reading the slot */
  cudaEvent_t loss_ready;
  int rows; /* rows of the batch in flight on this device */
  /* eval arena */
  float *params;
  float *x[GPU_PLAN_SLOTS];
  uint8_t *y[GPU_PLAN_SLOTS];
  float *col[MODEL_MAX_LAYERS], *conv[MODEL_MAX_LAYERS], *pool[MODEL_MAX_LAYERS];
  int32_t *arg[MODEL_MAX_LAYERS];
  float *out[MODEL_MAX_LAYERS];
  float *flat;
  double *sum_loss;
  int32_t *sum_correct;
  void *workspace;
  /* uint8 data sets ([0] training, [1] evaluation): pixels, labels, order */
  struct dev_block data[2];
  uint8_t *dpix[2], *dlab[2];
  int32_t *dorder[2];
  struct cuda_ctl *ctl; /* inside the evaluation arena's sums slot */
  struct cuda_graph graph[CUDA_MAX_GRAPHS];
  int n_graphs;
  /* state arena (first training step or optimiser-state restore) */
  float *grads, *opt;
  /* backward arena (first training step, sized for its batch) */
  float *dconv[MODEL_MAX_LAYERS], *dpool[MODEL_MAX_LAYERS], *dcol[MODEL_MAX_LAYERS];
  float *dout[MODEL_MAX_LAYERS];
  float *dflat;
  struct cuops_scratch red; /* the bias gradients' reductions */
};

/* NVML, dlopen'ed and initialised at the first peak_mem_mb that finds it,
 * kept until the backend is destroyed (cuda_mem_nvml_close). */
struct cuda_nvml {
  void *lib; /* NULL: not open (yet) */
  int (*shutdown)(void);
  int (*by_bus)(const char *bus, void **dev);
  int (*procs)(void *dev, unsigned *count, void *list);
};

struct backend {
  struct model_layout L;
  struct optim_spec opt;
  struct gpu_plan plan;  /* eval arena: max_batch rows */
  struct gpu_plan bplan; /* backward arena: train_rows rows */
  int max_batch, ndev, first_linear, last_conv;
  int world, rank; /* member processes of the trial and this one's index */
  int state_ready; /* gradients and optimiser state allocated */
  int train_rows;  /* global batch the backward arena holds; 0: none */
  int slot;
  int oom_pending;    /* training buffers did not fit: a smaller batch re-plans */
  int broken;         /* a failed re-plan left no buffers: every call fails so */
  float *kept_params; /* the weights on the host while a re-plan is unfinished */
  int64_t step;
  int64_t limit_bytes;
  int eval_rows;    /* evaluation chunk: max(max_batch, 256) unless capped */
  int64_t mem_gen;  /* bumped whenever a buffer moves: graphs are rebuilt */
  int use_graphs;   /* one device and CTUNE_CUDA_GRAPHS is not 0 */
  int ran_eager[2]; /* a phase's kernels ran once outside a capture (loaded) */
  int64_t set_n[2], order_n[2], cursor[2]; /* host mirrors */
  int64_t acc_rows;                        /* training rows since the last backend_cuda_take_loss */
  int64_t acc_steps;
  double driver_mib; /* largest per-process figure NVML gave, MiB */
  struct cuda_nvml nvml;
  struct cuda_ctl *h_ctl; /* pinned, one per device */
  struct cuda_dev dev[CUDA_MAX_DEVICES];
  float *h_x[GPU_PLAN_SLOTS]; /* pinned staging of the global batch */
  uint8_t *h_y[GPU_PLAN_SLOTS];
  double *h_loss;     /* pinned, one per device */
  int32_t *h_correct; /* pinned, one per device */
};

/* cuda_mem.c: the capped arenas (see gpu_plan.h for what each holds). */
int cuda_mem_arena_alloc(struct backend *b, struct cuda_dev *d, struct dev_block *blk, int64_t size,
                         int batch, int64_t need);
void cuda_mem_arena_free(struct cuda_dev *d, struct dev_block *blk);
int cuda_mem_carve_eval(struct backend *b, struct cuda_dev *d);
int cuda_mem_ensure_state(struct backend *b, int n);
int cuda_mem_ensure_train(struct backend *b, int n);

/* cuda_graph.c-like helpers live in cuda_backend.c; cuda_mem.c frees every
 * graph of a device whose buffers move. */
void cuda_graphs_drop(struct backend *b);

/* MiB this process holds on CUDA device dev as the driver (NVML) counts
 * it, context included; -1 when NVML is missing, does not list us (under
 * MPS the server process holds the memory) or has no figure for us. Opens
 * b->nvml on first use. */
double cuda_mem_driver_mib(struct backend *b, int dev);
/* Shuts NVML down and unloads it if b opened it. */
void cuda_mem_nvml_close(struct backend *b);

/* cuda_net.c: the model's passes on one device's compute stream. */
int cuda_net_forward(struct backend *b, struct cuda_dev *d, int slot, int n);
int cuda_net_backward(struct backend *b, struct cuda_dev *d, int slot, int n);
/* Where the loss kernel writes the last layer's bias gradient (d's
 * gradients), or NULL when the backward pass must (too many classes). */
float *cuda_net_loss_bias(struct backend *b, struct cuda_dev *d);

#endif
