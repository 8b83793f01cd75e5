/* The CUDA backend of ctune-train (struct backend_ops): one process drives N
 * GPUs data-parallel (NCCL all-reduce of gradients), every device buffer comes
 * from a capped arena, batches are staged in pinned memory and copied on a
 * second stream while the previous batch's backward pass still runs. */
#include "cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_ops.h"
#include "gpu_mem.h"
#include "gpu_plan.h"
#include "log.h"

#define CUDA_MAX_DEVICES 16
#define MIB ((int64_t)1 << 20)

static char last_error[512];

const char *backend_cuda_last_error(void) { return last_error; }

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  log_error("cuda: %s", last_error);
}

/* Maps a failed CUDA call to our codes: out of memory stays distinct so the
 * trainer can exit 6, a missing device or driver gives -ENODEV (exit 7). */
static int cuda_fail(const char *call, cudaError_t e, int line) {
  set_error("%s failed at cuda_backend.c:%d: %s", call, line,
            cudaGetErrorString(e));
  if (e == cudaErrorMemoryAllocation) return -ENOMEM;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    return -ENODEV;
  return -EIO;
}

static int blas_fail(const char *call, cublasStatus_t st, int line) {
  set_error("%s failed at cuda_backend.c:%d: %s", call, line,
            cublasGetStatusString(st));
  return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

static int nccl_fail(const char *call, ncclResult_t r, int line) {
  set_error("%s failed at cuda_backend.c:%d: %s", call, line,
            ncclGetErrorString(r));
  return -EIO;
}

/* Each needs `int rc` and a `fail:` label in the calling function. */
#define CU(call)                                                  \
  do {                                                            \
    cudaError_t e_ = (call);                                      \
    if (e_ != cudaSuccess) {                                      \
      rc = cuda_fail(#call, e_, __LINE__);                        \
      goto fail;                                                  \
    }                                                             \
  } while (0)
#define BLAS(call)                                                \
  do {                                                            \
    cublasStatus_t s_ = (call);                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                            \
      rc = blas_fail(#call, s_, __LINE__);                        \
      goto fail;                                                  \
    }                                                             \
  } while (0)
#define NCCL(call)                                                \
  do {                                                            \
    ncclResult_t r_ = (call);                                     \
    if (r_ != ncclSuccess) {                                      \
      rc = nccl_fail(#call, r_, __LINE__);                        \
      goto fail;                                                  \
    }                                                             \
  } while (0)
/* Our own launchers log their CUDA error; name the step for the person. */
#define OPS(call)                                                 \
  do {                                                            \
    int o_ = (call);                                              \
    if (o_) {                                                     \
      set_error("%s failed at cuda_backend.c:%d", #call, __LINE__); \
      rc = o_;                                                    \
      goto fail;                                                  \
    }                                                             \
  } while (0)

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
  float *row_loss;
  int32_t *row_correct;
  double *sum_loss;
  int32_t *sum_correct;
  void *workspace;
  /* state arena (first training step or optimiser-state restore) */
  float *grads, *opt;
  /* backward arena (first training step, sized for its batch) */
  float *dconv[MODEL_MAX_LAYERS], *dpool[MODEL_MAX_LAYERS], *dcol[MODEL_MAX_LAYERS];
  float *dout[MODEL_MAX_LAYERS];
  float *dflat;
};

struct backend {
  struct model_layout L;
  struct optim_spec opt;
  struct gpu_plan plan;  /* eval arena: max_batch rows */
  struct gpu_plan bplan; /* backward arena: train_rows rows */
  int max_batch, ndev, first_linear, last_conv;
  int state_ready; /* gradients and optimiser state allocated */
  int train_rows;  /* global batch the backward arena holds; 0: none */
  int slot;
  int oom_pending; /* training buffers did not fit: a smaller batch re-plans */
  int broken;      /* a failed re-plan left no buffers: every call fails so */
  float *kept_params; /* the weights on the host while a re-plan is unfinished */
  int64_t step;
  int64_t limit_bytes;
  struct cuda_dev dev[CUDA_MAX_DEVICES];
  float *h_x[GPU_PLAN_SLOTS]; /* pinned staging of the global batch */
  uint8_t *h_y[GPU_PLAN_SLOTS];
  double *h_loss;     /* pinned, one per device */
  int32_t *h_correct; /* pinned, one per device */
};

int backend_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* not sticky, but leave no error behind */
    return 0;
  }
  return n;
}

/* ---- memory ---------------------------------------------------------- */

static void oom_message(struct backend *b, struct cuda_dev *d, int batch,
                        int64_t need) {
  size_t free_b = 0, total_b = 0;
  char msg[256];
  if (!b->limit_bytes) {
    cudaSetDevice(d->id);
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
  }
  gpu_mem_oom_message(msg, sizeof(msg), batch, need, b->limit_bytes,
                      (int64_t)free_b);
  set_error("%s", msg);
}

/* One arena from the capped allocator: the cap first, then the device. On
 * out-of-memory the message names `batch` and the `need` of the whole plan. */
static int arena_alloc(struct backend *b, struct cuda_dev *d,
                       struct dev_block *blk, int64_t size, int batch,
                       int64_t need) {
  int rc = gpu_mem_reserve(&d->mem, size);
  if (rc) {
    oom_message(b, d, batch, need);
    return rc;
  }
  cudaError_t e = cudaMalloc(&blk->ptr, (size_t)size);
  if (e != cudaSuccess) {
    gpu_mem_release(&d->mem, size);
    blk->ptr = NULL;
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) {
      oom_message(b, d, batch, need);
      return -ENOMEM;
    }
    return cuda_fail("cudaMalloc", e, __LINE__);
  }
  blk->size = size;
  return 0;
}

/* The device must be current and its streams idle. */
static void arena_free(struct cuda_dev *d, struct dev_block *blk) {
  if (!blk->ptr) return;
  cudaFree(blk->ptr);
  gpu_mem_release(&d->mem, blk->size);
  blk->ptr = NULL;
  blk->size = 0;
}

/* Carving follows gpu_plan.c's order; running out means the plan is wrong. */
#define TAKE(arena, ptr, bytes)                                        \
  do {                                                                 \
    uintptr_t p_;                                                      \
    if (gpu_arena_take((arena), (bytes), &p_)) {                       \
      set_error("internal: device memory plan too small for " #ptr);   \
      return -EIO;                                                     \
    }                                                                  \
    (ptr) = (void *)p_;                                                \
  } while (0)

static int carve_eval(struct backend *b, struct cuda_dev *d) {
  const struct gpu_plan *p = &b->plan;
  const int64_t F = sizeof(float), n = p->batch;
  struct gpu_arena a;
  gpu_arena_init(&a, (uintptr_t)d->eval.ptr, d->eval.size);
  TAKE(&a, d->params, p->n_params * F);
  for (int s = 0; s < GPU_PLAN_SLOTS; s++) {
    TAKE(&a, d->x[s], p->x_floats * F);
    TAKE(&a, d->y[s], n);
  }
  for (int l = 0; l < p->n_layers; l++) {
    const struct gpu_plan_layer *q = &p->layer[l];
    if (b->L.layer[l].kind == LAYER_CONV) {
      TAKE(&a, d->col[l], q->col * F);
      TAKE(&a, d->conv[l], q->conv * F);
      TAKE(&a, d->pool[l], q->pool * F);
      TAKE(&a, d->arg[l], q->pool * F);
    } else {
      TAKE(&a, d->out[l], q->out * F);
    }
  }
  if (p->flat) TAKE(&a, d->flat, p->flat * F);
  TAKE(&a, d->row_loss, n * F);
  TAKE(&a, d->row_correct, n * (int64_t)sizeof(int32_t));
  TAKE(&a, d->sum_loss, 16); /* a double, then the int32 count after it */
  d->sum_correct = (int32_t *)(d->sum_loss + 1);
  TAKE(&a, d->workspace, GPU_PLAN_BLAS_WORKSPACE);
  return 0;
}

static int carve_state(struct backend *b, struct cuda_dev *d) {
  const int64_t F = sizeof(float);
  struct gpu_arena a;
  gpu_arena_init(&a, (uintptr_t)d->state.ptr, d->state.size);
  TAKE(&a, d->grads, b->plan.n_params * F);
  TAKE(&a, d->opt, b->plan.opt_floats * F);
  return 0;
}

static int carve_backward(struct backend *b, struct cuda_dev *d) {
  const struct gpu_plan *p = &b->bplan;
  const int64_t F = sizeof(float);
  struct gpu_arena a;
  gpu_arena_init(&a, (uintptr_t)d->bwd.ptr, d->bwd.size);
  for (int l = 0; l < p->n_layers; l++) {
    const struct gpu_plan_layer *q = &p->layer[l];
    if (b->L.layer[l].kind == LAYER_CONV) {
      TAKE(&a, d->dconv[l], q->conv * F);
      TAKE(&a, d->dpool[l], q->pool * F);
      if (l > 0) TAKE(&a, d->dcol[l], q->col * F);
    } else {
      TAKE(&a, d->dout[l], q->out * F);
    }
  }
  if (p->flat) TAKE(&a, d->dflat, p->flat * F);
  return 0;
}

/* Everything a training step at global batch n needs per device. */
static int64_t train_need(struct backend *b, int n, struct gpu_plan *bp) {
  int per_dev = (n + b->ndev - 1) / b->ndev;
  if (gpu_plan_init(&b->L, b->opt.kind, per_dev, bp)) return -1;
  return b->plan.eval_bytes + bp->state_bytes + bp->backward_bytes;
}

/* Gradients and optimiser state: batch-independent, allocated once, at the
 * first training step or when an optimiser state is restored. */
static int ensure_state(struct backend *b, int n) {
  int rc = 0;
  struct gpu_plan bp;
  if (b->state_ready) return 0;
  int64_t need = train_need(b, n, &bp);
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = arena_alloc(b, d, &d->state, b->plan.state_bytes, n, need);
    if (rc) goto fail;
    rc = carve_state(b, d);
    if (rc) goto fail;
    CU(cudaMemsetAsync(d->opt, 0, (size_t)b->plan.opt_floats * sizeof(float),
                       d->compute));
  }
  b->state_ready = 1;
  return 0;
fail:
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    if (!d->state.ptr) continue;
    cudaSetDevice(d->id);
    cudaStreamSynchronize(d->compute);
    arena_free(d, &d->state);
  }
  return rc;
}

/* The backward pass's buffers for a global batch of n rows: allocated at the
 * first training step, grown if a larger batch comes. Evaluation alone never
 * allocates them. */
static int ensure_backward(struct backend *b, int n) {
  int rc = 0;
  struct gpu_plan bp;
  if (b->train_rows >= n) return 0;
  int64_t need = train_need(b, n, &bp);
  if (need < 0) return -EINVAL;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaStreamSynchronize(d->compute));
    arena_free(d, &d->bwd);
  }
  b->train_rows = 0;
  b->bplan = bp;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = arena_alloc(b, d, &d->bwd, bp.backward_bytes, n, need);
    if (rc) goto fail;
    rc = carve_backward(b, d);
    if (rc) goto fail;
  }
  b->train_rows = n;
  return 0;
fail:
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    if (!d->bwd.ptr) continue;
    cudaSetDevice(d->id);
    arena_free(d, &d->bwd);
  }
  return rc;
}

static int ensure_train(struct backend *b, int n) {
  int rc = ensure_state(b, n);
  if (!rc) rc = ensure_backward(b, n);
  if (rc == -ENOMEM) b->oom_pending = 1;
  return rc;
}

/* ---- layers ---------------------------------------------------------- */

/* Column-major GEMM C = op(A) op(B), alpha 1, beta 0 (row-major callers swap
 * operands; each call site says which product it computes). */
static int gemm(struct cuda_dev *d, int ta, int tb, int m, int n, int k,
                const float *A, int lda, const float *B, int ldb, float *C,
                int ldc) {
  const float one = 1.0f, zero = 0.0f;
  int rc = 0;
  BLAS(cublasSgemm(d->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                   tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, A, lda, B,
                   ldb, &zero, C, ldc));
fail:
  return rc;
}

/* Input of conv layer l: layer 0 reads the NCHW batch, later ones the
 * channel-major [c][n][h*w] pooled output of the layer before. */
static void conv_strides(const struct layer_shape *s, int l, int n,
                         int64_t *sn, int64_t *sc) {
  int64_t hw = (int64_t)s->in_h * s->in_w;
  if (l == 0) {
    *sn = s->in_c * hw;
    *sc = hw;
  } else {
    *sn = hw;
    *sc = (int64_t)n * hw;
  }
}

static int forward(struct backend *b, struct cuda_dev *d, int slot, int n) {
  const struct model_layout *L = &b->L;
  const float *in = d->x[slot];
  const int K = MODEL_CNN_K;
  int rc = 0;
  for (int l = 0; l < L->n_layers; l++) {
    const struct layer_shape *s = &L->layer[l];
    const float *W = d->params + s->w_off, *bias = d->params + s->b_off;
    if (s->kind == LAYER_CONV) {
      int64_t sn, sc;
      int ckk = s->in_c * K * K, np = n * s->out_h * s->out_w;
      conv_strides(s, l, n, &sn, &sc);
      OPS(cuops_im2col(in, d->col[l], n, s->in_c, s->in_h, s->in_w, K, sn, sc,
                       d->compute));
      /* conv[OC][nP] = W[OC][CKK] col[CKK][nP] */
      rc = gemm(d, 0, 0, np, s->out_c, ckk, d->col[l], np, W, ckk, d->conv[l],
                np);
      if (rc) goto fail;
      OPS(cuops_bias_act(d->conv[l], bias, s->out_c, np, 1, 1, d->compute));
      OPS(cuops_maxpool_forward(d->conv[l], d->pool[l], d->arg[l],
                                (int64_t)s->out_c * n, s->out_h, s->out_w,
                                MODEL_CNN_POOL, d->compute));
      in = d->pool[l];
      if (l == b->last_conv) {
        OPS(cuops_permute_cn(in, d->flat, s->out_c, n, s->pool_h * s->pool_w,
                             1, d->compute));
        in = d->flat;
      }
    } else {
      /* out[n][O] = in[n][I] W[O][I]^T */
      rc = gemm(d, 1, 0, s->out_c, n, s->in_c, W, s->in_c, in, s->in_c,
                d->out[l], s->out_c);
      if (rc) goto fail;
      OPS(cuops_bias_act(d->out[l], bias, n, s->out_c, 0,
                         l != L->n_layers - 1, d->compute));
      in = d->out[l];
    }
  }
fail:
  return rc;
}

/* Gradients of the mean loss into d->grads, from dout[last] = dloss/dlogits
 * (already written by the cross-entropy kernel). */
static int backward(struct backend *b, struct cuda_dev *d, int slot, int n) {
  const struct model_layout *L = &b->L;
  const int K = MODEL_CNN_K, last = L->n_layers - 1;
  int rc = 0;
  for (int l = last; l >= b->first_linear; l--) {
    const struct layer_shape *s = &L->layer[l];
    const float *W = d->params + s->w_off;
    const float *in = l > b->first_linear ? d->out[l - 1]
                      : b->last_conv >= 0 ? d->flat
                                          : d->x[slot];
    float *dy = d->dout[l];
    if (l != last)
      OPS(cuops_relu_backward(d->out[l], dy, (int64_t)n * s->out_c,
                              d->compute));
    /* dW[O][I] = dy[n][O]^T in[n][I] */
    rc = gemm(d, 0, 1, s->in_c, s->out_c, n, in, s->in_c, dy, s->out_c,
              d->grads + s->w_off, s->in_c);
    if (rc) goto fail;
    OPS(cuops_sum_strided(dy, d->grads + s->b_off, s->out_c, n, 1, s->out_c,
                          d->compute));
    float *din = l > b->first_linear ? d->dout[l - 1]
                 : b->last_conv >= 0 ? d->dflat
                                     : NULL;
    if (din) {
      /* din[n][I] = dy[n][O] W[O][I] */
      rc = gemm(d, 0, 0, s->in_c, n, s->out_c, W, s->in_c, dy, s->out_c, din,
                s->in_c);
      if (rc) goto fail;
    }
  }
  if (b->last_conv >= 0) {
    const struct layer_shape *s = &L->layer[b->last_conv];
    OPS(cuops_permute_cn(d->dflat, d->dpool[b->last_conv], s->out_c, n,
                         s->pool_h * s->pool_w, 0, d->compute));
  }
  for (int l = b->last_conv; l >= 0; l--) {
    const struct layer_shape *s = &L->layer[l];
    const float *W = d->params + s->w_off;
    int ckk = s->in_c * K * K, np = n * s->out_h * s->out_w;
    OPS(cuops_maxpool_backward(d->dpool[l], d->arg[l], d->dconv[l],
                               (int64_t)s->out_c * n, s->out_h, s->out_w,
                               MODEL_CNN_POOL, d->compute));
    OPS(cuops_relu_backward(d->conv[l], d->dconv[l], (int64_t)s->out_c * np,
                            d->compute));
    /* dW[OC][CKK] = dconv[OC][nP] col[CKK][nP]^T */
    rc = gemm(d, 1, 0, ckk, s->out_c, np, d->col[l], np, d->dconv[l], np,
              d->grads + s->w_off, ckk);
    if (rc) goto fail;
    OPS(cuops_sum_strided(d->dconv[l], d->grads + s->b_off, s->out_c, np, np,
                          1, d->compute));
    if (l > 0) {
      int64_t sn, sc;
      conv_strides(s, l, n, &sn, &sc);
      /* dcol[CKK][nP] = W[OC][CKK]^T dconv[OC][nP] */
      rc = gemm(d, 0, 1, np, ckk, s->out_c, d->dconv[l], np, W, ckk,
                d->dcol[l], np);
      if (rc) goto fail;
      OPS(cuops_col2im(d->dcol[l], d->dpool[l - 1], n, s->in_c, s->in_h,
                       s->in_w, K, sn, sc, d->compute));
    }
  }
fail:
  return rc;
}

/* ---- batches --------------------------------------------------------- */

static int check_batch(struct backend *b, const float *x, const uint8_t *y,
                       int n, const char *what) {
  if (!x || !y || n < 1 || n > b->max_batch) {
    set_error("%s: batch of %d rows is outside 1..%d (max_batch)", what, n,
              b->max_batch);
    return -EINVAL;
  }
  for (int i = 0; i < n; i++)
    if (y[i] >= b->L.n_classes) {
      set_error("%s: label %d at row %d is not below n_classes %d", what,
                y[i], i, b->L.n_classes);
      return -EINVAL;
    }
  return 0;
}

/* Stages x/y in pinned slot `slot` and starts each device's shard copy on its
 * copy stream; the compute stream waits for it. The slot's previous copies
 * (two batches ago) must be done before the host overwrites it. */
static int stage(struct backend *b, int slot, const float *x, const uint8_t *y,
                 int n) {
  const int64_t dim = b->L.in_dim;
  int rc = 0;
  for (int i = 0; i < b->ndev; i++) {
    CU(cudaSetDevice(b->dev[i].id));
    CU(cudaEventSynchronize(b->dev[i].copied[slot]));
  }
  memcpy(b->h_x[slot], x, (size_t)n * dim * sizeof(float));
  memcpy(b->h_y[slot], y, (size_t)n);
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    int first, count;
    gpu_plan_shard(n, b->ndev, i, &first, &count);
    d->rows = count;
    CU(cudaSetDevice(d->id));
    if (count == 0) continue;
    CU(cudaStreamWaitEvent(d->copy, d->input_free[slot], 0));
    CU(cudaMemcpyAsync(d->x[slot], b->h_x[slot] + first * dim,
                       (size_t)count * dim * sizeof(float),
                       cudaMemcpyHostToDevice, d->copy));
    CU(cudaMemcpyAsync(d->y[slot], b->h_y[slot] + first, (size_t)count,
                       cudaMemcpyHostToDevice, d->copy));
    CU(cudaEventRecord(d->copied[slot], d->copy));
    CU(cudaStreamWaitEvent(d->compute, d->copied[slot], 0));
  }
fail:
  return rc;
}

static int cuda_get_state(struct backend *b, float *params, float *opt_state,
                          int64_t *step);

/* After a training step ran out of memory, the trainer's --oom-retry calls
 * train_step with half the batch: the evaluation arena is planned again for
 * that batch too (evaluation then runs in chunks of it), keeping the weights;
 * gradients and optimiser state do not depend on the batch and stay. If the
 * re-plan itself fails, the weights wait on the host for the next, smaller
 * attempt. */
static int replan(struct backend *b, int max_batch) {
  int rc = 0;
  if (!b->kept_params) {
    float *keep = malloc((size_t)b->plan.n_params * sizeof(float));
    if (!keep) return -ENOMEM;
    rc = cuda_get_state(b, keep, NULL, NULL);
    if (rc) {
      free(keep);
      return rc;
    }
    b->kept_params = keep;
  }
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaStreamSynchronize(d->compute));
    CU(cudaStreamSynchronize(d->copy));
    arena_free(d, &d->bwd);
    arena_free(d, &d->eval);
  }
  b->train_rows = 0;
  b->broken = -EIO; /* until every device has its buffers again */
  struct gpu_plan plan;
  int per_dev = (max_batch + b->ndev - 1) / b->ndev;
  rc = gpu_plan_init(&b->L, b->opt.kind, per_dev, &plan);
  if (rc) goto fail;
  b->plan = plan;
  b->max_batch = max_batch;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = arena_alloc(b, d, &d->eval, plan.eval_bytes, max_batch,
                     plan.eval_bytes + plan.train_bytes);
    if (rc) goto fail;
    rc = carve_eval(b, d);
    if (rc) goto fail;
    BLAS(cublasSetWorkspace(d->blas, d->workspace, GPU_PLAN_BLAS_WORKSPACE));
    CU(cudaMemcpyAsync(d->params, b->kept_params,
                       (size_t)plan.n_params * sizeof(float),
                       cudaMemcpyHostToDevice, d->compute));
    CU(cudaStreamSynchronize(d->compute));
  }
  b->broken = 0;
  b->oom_pending = 0;
  free(b->kept_params);
  b->kept_params = NULL;
  log_warn("cuda: device memory re-planned for batch %d", max_batch);
  return 0;
fail:
  if (b->broken) b->broken = rc ? rc : -EIO;
  if (rc == -ENOMEM) b->oom_pending = 1;
  return rc;
}

static int cuda_train_step(struct backend *b, const float *x, const uint8_t *y,
                           int n, float *loss_out) {
  int rc = check_batch(b, x, y, n, "train_step");
  if (rc) return rc;
  if (!loss_out) return -EINVAL;
  /* after a failed re-plan only a smaller batch may try again */
  if (b->broken && !(b->kept_params && b->oom_pending && n < b->max_batch))
    return b->broken;
  if (b->oom_pending && n < b->max_batch && b->train_rows < n) {
    rc = replan(b, n);
    if (rc) return rc;
  }
  rc = ensure_train(b, n);
  if (rc) return rc;
  const int slot = b->slot;
  b->slot = (b->slot + 1) % GPU_PLAN_SLOTS;
  const struct model_layout *L = &b->L;
  const int last = L->n_layers - 1;
  /* Each device's loss gradient is scaled by ndev/n, so ncclAvg's division
   * by ndev leaves the gradient of the global batch's mean loss, exactly as
   * one GPU with the whole batch computes it, even for uneven shards. */
  const float scale = (float)b->ndev / (float)n;
  rc = stage(b, slot, x, y, n);
  if (rc) return rc;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    if (d->rows == 0) {
      b->h_loss[i] = 0.0;
      CU(cudaMemsetAsync(d->grads, 0,
                         (size_t)b->plan.n_params * sizeof(float), d->compute));
      CU(cudaEventRecord(d->loss_ready, d->compute));
      continue;
    }
    rc = forward(b, d, slot, d->rows);
    if (rc) goto fail;
    OPS(cuops_xent(d->out[last], d->y[slot], d->row_loss, d->row_correct,
                   d->dout[last], d->rows, L->n_classes, scale, d->compute));
    OPS(cuops_xent_sums(d->row_loss, d->row_correct, d->rows, d->sum_loss,
                        d->sum_correct, d->compute));
    CU(cudaMemcpyAsync(&b->h_loss[i], d->sum_loss, sizeof(double),
                       cudaMemcpyDeviceToHost, d->compute));
    CU(cudaEventRecord(d->loss_ready, d->compute));
    rc = backward(b, d, slot, d->rows);
    if (rc) goto fail;
    CU(cudaEventRecord(d->input_free[slot], d->compute));
  }
  if (b->ndev > 1) {
    NCCL(ncclGroupStart());
    for (int i = 0; i < b->ndev; i++) {
      ncclResult_t r = ncclAllReduce(b->dev[i].grads, b->dev[i].grads,
                                     (size_t)b->plan.n_params, ncclFloat,
                                     ncclAvg, b->dev[i].comm,
                                     b->dev[i].compute);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        rc = nccl_fail("ncclAllReduce", r, __LINE__);
        goto fail;
      }
    }
    NCCL(ncclGroupEnd());
  }
  b->step++;
  const struct optim_spec *o = &b->opt;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    if (o->kind == OPTIM_ADAM) {
      const int64_t P = b->plan.n_params;
      float bc1 = (float)(1.0 - pow(o->beta1, (double)b->step));
      float bc2 = (float)(1.0 - pow(o->beta2, (double)b->step));
      OPS(cuops_adam(d->params, d->opt, d->opt + P, d->grads, P, o->lr,
                     o->beta1, o->beta2, o->eps, o->weight_decay, bc1, bc2,
                     d->compute));
    } else {
      OPS(cuops_sgd(d->params, d->opt, d->grads, b->plan.n_params, o->lr,
                    o->momentum, o->weight_decay, d->compute));
    }
  }
  /* Wait only for the forward pass's loss: the backward pass and the update
   * keep running while the caller prepares (and stages) the next batch. */
  double total = 0.0;
  for (int i = 0; i < b->ndev; i++) {
    CU(cudaSetDevice(b->dev[i].id));
    CU(cudaEventSynchronize(b->dev[i].loss_ready));
    total += b->h_loss[i];
  }
  *loss_out = (float)(total / n);
  return 0;
fail:
  return rc;
}

static int cuda_evaluate(struct backend *b, const float *x, const uint8_t *y,
                         int n, double *loss_sum, int *correct) {
  int rc = 0;
  if (b->broken) return b->broken;
  if (!x || !y || n < 0 || !loss_sum || !correct) return -EINVAL;
  const int last = b->L.n_layers - 1;
  double loss = 0.0;
  long right = 0;
  for (int off = 0; off < n; off += b->max_batch) {
    int m = n - off < b->max_batch ? n - off : b->max_batch;
    const float *cx = x + (int64_t)off * b->L.in_dim;
    rc = check_batch(b, cx, y + off, m, "evaluate");
    if (rc) return rc;
    const int slot = b->slot;
    b->slot = (b->slot + 1) % GPU_PLAN_SLOTS;
    rc = stage(b, slot, cx, y + off, m);
    if (rc) return rc;
    for (int i = 0; i < b->ndev; i++) {
      struct cuda_dev *d = &b->dev[i];
      CU(cudaSetDevice(d->id));
      if (d->rows == 0) continue;
      rc = forward(b, d, slot, d->rows);
      if (rc) goto fail;
      OPS(cuops_xent(d->out[last], d->y[slot], d->row_loss, d->row_correct,
                     NULL, d->rows, b->L.n_classes, 1.0f, d->compute));
      OPS(cuops_xent_sums(d->row_loss, d->row_correct, d->rows, d->sum_loss,
                          d->sum_correct, d->compute));
      CU(cudaEventRecord(d->input_free[slot], d->compute));
      CU(cudaMemcpyAsync(&b->h_loss[i], d->sum_loss, sizeof(double),
                         cudaMemcpyDeviceToHost, d->compute));
      CU(cudaMemcpyAsync(&b->h_correct[i], d->sum_correct, sizeof(int32_t),
                         cudaMemcpyDeviceToHost, d->compute));
    }
    for (int i = 0; i < b->ndev; i++) {
      struct cuda_dev *d = &b->dev[i];
      if (d->rows == 0) continue;
      CU(cudaSetDevice(d->id));
      CU(cudaStreamSynchronize(d->compute));
      loss += b->h_loss[i];
      right += b->h_correct[i];
    }
  }
  *loss_sum += loss;
  *correct += (int)right;
  return 0;
fail:
  return rc;
}

/* ---- state ----------------------------------------------------------- */

static int cuda_set_state(struct backend *b, const float *params,
                          const float *opt_state, int64_t step) {
  int rc = 0;
  if (b->broken) return b->broken;
  if (!params || step < 0) return -EINVAL;
  if (opt_state) {
    rc = ensure_state(b, b->max_batch);
    if (rc) return rc;
  }
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaStreamSynchronize(d->compute));
    CU(cudaMemcpyAsync(d->params, params,
                       (size_t)b->plan.n_params * sizeof(float),
                       cudaMemcpyHostToDevice, d->compute));
    if (b->state_ready) {
      size_t bytes = (size_t)b->plan.opt_floats * sizeof(float);
      if (opt_state)
        CU(cudaMemcpyAsync(d->opt, opt_state, bytes, cudaMemcpyHostToDevice,
                           d->compute));
      else
        CU(cudaMemsetAsync(d->opt, 0, bytes, d->compute));
    }
    CU(cudaStreamSynchronize(d->compute));
  }
  b->step = step;
  return 0;
fail:
  return rc;
}

/* Every device holds the same weights after each step; device 0 speaks. */
static int cuda_get_state(struct backend *b, float *params, float *opt_state,
                          int64_t *step) {
  int rc = 0;
  struct cuda_dev *d = &b->dev[0];
  if (b->broken) return b->broken;
  CU(cudaSetDevice(d->id));
  CU(cudaStreamSynchronize(d->compute));
  if (params)
    CU(cudaMemcpyAsync(params, d->params,
                       (size_t)b->plan.n_params * sizeof(float),
                       cudaMemcpyDeviceToHost, d->compute));
  if (opt_state) {
    size_t bytes = (size_t)b->plan.opt_floats * sizeof(float);
    if (b->state_ready)
      CU(cudaMemcpyAsync(opt_state, d->opt, bytes, cudaMemcpyDeviceToHost,
                         d->compute));
    else
      memset(opt_state, 0, bytes);
  }
  CU(cudaStreamSynchronize(d->compute));
  if (step) *step = b->step;
  return 0;
fail:
  return rc;
}

static int cuda_peak_mem_mb(struct backend *b, double *out) {
  if (!b || !out) return -EINVAL;
  int64_t peak = 0;
  for (int i = 0; i < b->ndev; i++)
    if (b->dev[i].mem.peak > peak) peak = b->dev[i].mem.peak;
  *out = (double)peak / (double)MIB;
  return 0;
}

/* ---- life cycle ------------------------------------------------------ */

static void cuda_destroy(struct backend *b) {
  if (!b) return;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    /* a device that cannot be made current is lost, its memory with it */
    if (cudaSetDevice(d->id) != cudaSuccess) continue;
    if (d->compute) cudaStreamSynchronize(d->compute);
    if (d->copy) cudaStreamSynchronize(d->copy);
    if (d->comm) ncclCommDestroy(d->comm);
    if (d->blas) cublasDestroy(d->blas);
    for (int s = 0; s < GPU_PLAN_SLOTS; s++) {
      if (d->copied[s]) cudaEventDestroy(d->copied[s]);
      if (d->input_free[s]) cudaEventDestroy(d->input_free[s]);
    }
    if (d->loss_ready) cudaEventDestroy(d->loss_ready);
    if (d->compute) cudaStreamDestroy(d->compute);
    if (d->copy) cudaStreamDestroy(d->copy);
    arena_free(d, &d->bwd);
    arena_free(d, &d->state);
    arena_free(d, &d->eval);
  }
  for (int s = 0; s < GPU_PLAN_SLOTS; s++) {
    if (b->h_x[s]) cudaFreeHost(b->h_x[s]);
    if (b->h_y[s]) cudaFreeHost(b->h_y[s]);
  }
  if (b->h_loss) cudaFreeHost(b->h_loss);
  if (b->h_correct) cudaFreeHost(b->h_correct);
  free(b->kept_params);
  cudaGetLastError();
  free(b);
}

static int dev_init(struct backend *b, struct cuda_dev *d, int64_t need) {
  int rc = 0;
  CU(cudaSetDevice(d->id));
  gpu_mem_init(&d->mem, b->limit_bytes);
  CU(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking));
  /* The host waits on these: block instead of spinning, since a trial
   * usually has one CPU and the trainer's data work needs it. */
  const unsigned host_wait = cudaEventDisableTiming | cudaEventBlockingSync;
  for (int s = 0; s < GPU_PLAN_SLOTS; s++) {
    CU(cudaEventCreateWithFlags(&d->copied[s], host_wait));
    CU(cudaEventCreateWithFlags(&d->input_free[s], cudaEventDisableTiming));
  }
  CU(cudaEventCreateWithFlags(&d->loss_ready, host_wait));
  rc = arena_alloc(b, d, &d->eval, b->plan.eval_bytes, b->max_batch, need);
  if (rc) goto fail;
  rc = carve_eval(b, d);
  if (rc) goto fail;
  BLAS(cublasCreate(&d->blas));
  BLAS(cublasSetStream(d->blas, d->compute));
  BLAS(cublasSetWorkspace(d->blas, d->workspace, GPU_PLAN_BLAS_WORKSPACE));
  /* full fp32: no TF32 tensor-core shortcut, so CPU and GPU agree to 1e-4 */
  BLAS(cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH));
  CU(cudaMemsetAsync(d->params, 0, (size_t)b->plan.n_params * sizeof(float),
                     d->compute));
fail:
  return rc;
}

static int cuda_create(const struct model_spec *spec,
                       const struct optim_spec *optim, int max_batch,
                       const struct backend_opts *opts, struct backend **out) {
  int rc = 0, count = 0;
  struct backend *b = NULL;
  last_error[0] = '\0';
  if (!spec || !optim || !out || max_batch < 1 ||
      (optim->kind != OPTIM_SGD && optim->kind != OPTIM_ADAM)) {
    set_error("create: bad arguments (max_batch %d)", max_batch);
    return -EINVAL;
  }
  *out = NULL;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    set_error("--device cuda: no usable CUDA device (%s%s%s)",
              e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
              vis ? ", CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
    cudaGetLastError();
    return -ENODEV;
  }
  int want = opts && opts->gpus > 0 ? opts->gpus : count;
  if (want > count || want > CUDA_MAX_DEVICES) {
    set_error("--gpus %d but %d CUDA device(s) are visible (at most %d used)",
              want, count, CUDA_MAX_DEVICES);
    return -ENODEV;
  }
  b = calloc(1, sizeof(*b));
  if (!b) return -ENOMEM;
  b->ndev = want;
  b->max_batch = max_batch;
  b->opt = *optim;
  b->limit_bytes = opts && opts->gpu_mem_limit_mb > 0
                       ? opts->gpu_mem_limit_mb * MIB
                       : 0;
  rc = model_layout_init(spec, &b->L);
  if (rc) {
    set_error("create: the model does not fit the input geometry");
    goto fail;
  }
  b->first_linear = -1;
  b->last_conv = -1;
  for (int l = 0; l < b->L.n_layers; l++) {
    if (b->L.layer[l].kind == LAYER_CONV) b->last_conv = l;
    if (b->L.layer[l].kind == LAYER_LINEAR && b->first_linear < 0)
      b->first_linear = l;
  }
  int per_dev = (max_batch + want - 1) / want;
  rc = gpu_plan_init(&b->L, optim->kind, per_dev, &b->plan);
  if (rc) goto fail;
  /* Refuse before touching a device when even evaluation cannot fit. The
   * training buffers come at the first step, so that an out-of-memory there
   * can be retried with a smaller batch (--oom-retry) on this backend. */
  const int64_t need = b->plan.eval_bytes + b->plan.train_bytes;
  if (b->limit_bytes && b->plan.eval_bytes > b->limit_bytes) {
    char msg[256];
    gpu_mem_oom_message(msg, sizeof(msg), max_batch, need, b->limit_bytes, 0);
    set_error("%s", msg);
    rc = -ENOMEM;
    goto fail;
  }
  for (int i = 0; i < want; i++) b->dev[i].id = i;
  for (int i = 0; i < want; i++) {
    rc = dev_init(b, &b->dev[i], need);
    if (rc) goto fail;
  }
  if (want > 1) {
    ncclComm_t comms[CUDA_MAX_DEVICES];
    int ids[CUDA_MAX_DEVICES];
    for (int i = 0; i < want; i++) ids[i] = b->dev[i].id;
    NCCL(ncclCommInitAll(comms, want, ids));
    for (int i = 0; i < want; i++) b->dev[i].comm = comms[i];
  }
  /* portable: pinned for every device's context, not only the current one */
  const unsigned pin = cudaHostAllocPortable;
  for (int s = 0; s < GPU_PLAN_SLOTS; s++) {
    CU(cudaHostAlloc((void **)&b->h_x[s],
                     (size_t)max_batch * b->L.in_dim * sizeof(float), pin));
    CU(cudaHostAlloc((void **)&b->h_y[s], (size_t)max_batch, pin));
  }
  CU(cudaHostAlloc((void **)&b->h_loss, (size_t)want * sizeof(double), pin));
  CU(cudaHostAlloc((void **)&b->h_correct, (size_t)want * sizeof(int32_t), pin));
  for (int i = 0; i < want; i++) {
    CU(cudaSetDevice(b->dev[i].id));
    CU(cudaStreamSynchronize(b->dev[i].compute));
  }
  log_info("cuda: %d device(s), batch %d (%d per device), %.0f MiB per "
           "device planned%s",
           want, max_batch, per_dev, gpu_mem_mib(need),
           b->limit_bytes ? " (capped)" : "");
  *out = b;
  return 0;
fail:
  cuda_destroy(b);
  return rc;
}

const struct backend_ops backend_cuda_ops = {
    .name = "cuda",
    .create = cuda_create,
    .set_state = cuda_set_state,
    .get_state = cuda_get_state,
    .train_step = cuda_train_step,
    .evaluate = cuda_evaluate,
    .peak_mem_mb = cuda_peak_mem_mb,
    .destroy = cuda_destroy,
};
