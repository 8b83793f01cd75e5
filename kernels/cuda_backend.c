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
#include "cuda_internal.h"
#include "cuda_ops.h"
#include "gpu_mem.h"
#include "gpu_plan.h"
#include "log.h"

/* Evaluation chunk floor (rows). */
#define CUDA_EVAL_ROWS 256

static char last_error[512];

const char *backend_cuda_last_error(void) { return last_error; }

void cuda_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  log_error("cuda: %s", last_error);
}

/* "kernels/cuda_mem.c" -> "cuda_mem.c" for messages */
static const char *base(const char *file) {
  const char *slash = strrchr(file, '/');
  return slash ? slash + 1 : file;
}

/* Out of memory stays distinct so the trainer can exit 6; a missing device
 * or driver gives -ENODEV (exit 7). */
int cuda_fail(const char *call, cudaError_t e, const char *file, int line) {
  cuda_set_error("%s failed at %s:%d: %s: %s", call, base(file), line, cudaGetErrorName(e),
                 cudaGetErrorString(e));
  if (e == cudaErrorMemoryAllocation) return -ENOMEM;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return -ENODEV;
  return -EIO;
}

int cuda_blas_fail(const char *call, cublasStatus_t st, const char *file, int line) {
  cuda_set_error("%s failed at %s:%d: %s: %s", call, base(file), line, cublasGetStatusName(st),
                 cublasGetStatusString(st));
  return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

int cuda_nccl_fail(const char *call, ncclResult_t r, const char *file, int line) {
  cuda_set_error("%s failed at %s:%d: %s", call, base(file), line, ncclGetErrorString(r));
  return -EIO;
}

void cuda_ops_fail(const char *call, const char *file, int line) {
  cuda_set_error("%s failed at %s:%d", call, base(file), line);
}

int backend_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* not sticky, but leave no error behind */
    return 0;
  }
  return n;
}

/* ---- batches --------------------------------------------------------- */

static int check_batch(struct backend *b, const float *x, const uint8_t *y, int n,
                       const char *what) {
  if (!x || !y || n < 1 || n > b->max_batch) {
    cuda_set_error("%s: batch of %d rows is outside 1..%d (max_batch)", what, n, b->max_batch);
    return -EINVAL;
  }
  for (int i = 0; i < n; i++)
    if (y[i] >= b->L.n_classes) {
      cuda_set_error("%s: label %d at row %d is not below n_classes %d", what, y[i], i,
                     b->L.n_classes);
      return -EINVAL;
    }
  return 0;
}

static int check_rows(struct backend *b, const float *x, const uint8_t *y, int n, int max,
                      const char *what) {
  if (n > max) {
    cuda_set_error("%s: batch of %d rows is outside 1..%d", what, n, max);
    return -EINVAL;
  }
  int keep = b->max_batch;
  b->max_batch = max;
  int rc = check_batch(b, x, y, n, what);
  b->max_batch = keep;
  return rc;
}

/* Reads the device's running sums of `which` (0 training, 1 evaluation)
 * into the host, one wait per device, and zeroes them there. */
static int read_ctl(struct backend *b, double *loss, int64_t *correct, int which) {
  int rc = 0;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaMemcpyAsync(&b->h_ctl[i], d->ctl, sizeof(struct cuda_ctl), cudaMemcpyDeviceToHost,
                       d->compute));
    CU(cudaMemsetAsync(&d->ctl->acc_loss[which], 0, sizeof(double), d->compute));
    CU(cudaMemsetAsync(&d->ctl->acc_correct[which], 0, sizeof(int64_t), d->compute));
  }
  for (int i = 0; i < b->ndev; i++) {
    CU(cudaSetDevice(b->dev[i].id));
    CU(cudaStreamSynchronize(b->dev[i].compute));
    *loss += b->h_ctl[i].acc_loss[which];
    *correct += b->h_ctl[i].acc_correct[which];
  }
fail:
  return rc;
}

/* Stages x/y in pinned slot `slot` and starts each device's shard copy on its
 * copy stream; the compute stream waits for it. The slot's previous copies
 * (two batches ago) must be done before the host overwrites it. */
static int stage(struct backend *b, int slot, const float *x, const uint8_t *y, int n, int across) {
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
    /* across: a training batch, split over every member's devices (this
     * process's are global ranks rank*ndev ..); else this process's only */
    if (across)
      gpu_plan_shard(n, b->world * b->ndev, b->rank * b->ndev + i, &first, &count);
    else
      gpu_plan_shard(n, b->ndev, i, &first, &count);
    d->rows = count;
    CU(cudaSetDevice(d->id));
    if (count == 0) continue;
    CU(cudaStreamWaitEvent(d->copy, d->input_free[slot], 0));
    CU(cudaMemcpyAsync(d->x[slot], b->h_x[slot] + first * dim, (size_t)count * dim * sizeof(float),
                       cudaMemcpyHostToDevice, d->copy));
    CU(cudaMemcpyAsync(d->y[slot], b->h_y[slot] + first, (size_t)count, cudaMemcpyHostToDevice,
                       d->copy));
    CU(cudaEventRecord(d->copied[slot], d->copy));
    CU(cudaStreamWaitEvent(d->compute, d->copied[slot], 0));
  }
fail:
  return rc;
}

static int cuda_get_state(struct backend *b, float *params, float *opt_state, int64_t *step);

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
    /* the counters (cursors, Adam's step, loss sums) live in the evaluation
     * arena: keep them on the host across the re-plan */
    if (d->eval.ptr) {
      CU(cudaMemcpyAsync(&b->h_ctl[i], d->ctl, sizeof(struct cuda_ctl), cudaMemcpyDeviceToHost,
                         d->compute));
      CU(cudaStreamSynchronize(d->compute));
    }
    cuda_mem_arena_free(d, &d->bwd);
    cuda_mem_arena_free(d, &d->eval);
  }
  b->train_rows = 0;
  b->broken = -EIO; /* until every device has its buffers again */
  struct gpu_plan plan;
  int per_dev = (max_batch + b->ndev - 1) / b->ndev;
  rc = gpu_plan_init(&b->L, b->opt.kind, per_dev, &plan);
  if (rc) goto fail;
  b->plan = plan;
  b->max_batch = max_batch;
  b->eval_rows = per_dev * b->ndev;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = cuda_mem_arena_alloc(b, d, &d->eval, plan.eval_bytes, max_batch,
                              plan.eval_bytes + plan.train_bytes);
    if (rc) goto fail;
    rc = cuda_mem_carve_eval(b, d);
    if (rc) goto fail;
    BLAS(cublasSetWorkspace(d->blas, d->workspace, GPU_PLAN_BLAS_WORKSPACE));
    CU(cudaMemcpyAsync(d->ctl, &b->h_ctl[i], sizeof(struct cuda_ctl), cudaMemcpyHostToDevice,
                       d->compute));
    CU(cudaMemcpyAsync(d->params, b->kept_params, (size_t)plan.n_params * sizeof(float),
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

/* Where d's loss kernel adds a batch's sums: the running sums of `which`
 * (0 training, 1 evaluation) and, for a fast step of `cursor_add` rows in
 * all, that set's cursor. */
static struct cuops_loss_out loss_out_of(struct cuda_dev *d, int which, int64_t cursor_add) {
  struct cuops_loss_out o = {d->sum_loss,
                             d->sum_correct,
                             &d->ctl->acc_loss[which],
                             &d->ctl->acc_correct[which],
                             &d->ctl->nonfinite[which],
                             cursor_add ? &d->ctl->cursor[which] : NULL,
                             cursor_add};
  return o;
}

/* One optimiser step on d. Adam's step count and bias corrections live on
 * the device (struct cuda_ctl), so a captured step replays correctly. */
static int optim_step(struct backend *b, struct cuda_dev *d) {
  const struct optim_spec *o = &b->opt;
  const int64_t P = b->plan.n_params;
  int rc = 0;
  if (o->kind == OPTIM_ADAM)
    OPS(cuops_adam_dev(d->params, d->opt, d->opt + P, d->grads, P, o->lr, o->beta1, o->beta2,
                       o->eps, o->weight_decay, &d->ctl->step, d->ctl->bc, d->compute));
  else
    OPS(cuops_sgd(d->params, d->opt, d->grads, P, o->lr, o->momentum, o->weight_decay, d->compute));
fail:
  return rc;
}

static int cuda_train_step(struct backend *b, const float *x, const uint8_t *y, int n,
                           float *loss_out) {
  int rc = check_batch(b, x, y, n, "train_step");
  if (rc) return rc;
  /* loss_out NULL: the loss stays on the device (backend_cuda_take_loss) */
  /* after a failed re-plan only a smaller batch may try again */
  if (b->broken && !(b->kept_params && b->oom_pending && n < b->max_batch)) return b->broken;
  if (b->oom_pending && n < b->max_batch && b->train_rows < n) {
    rc = replan(b, n);
    if (rc) return rc;
  }
  rc = cuda_mem_ensure_train(b, n);
  if (rc) return rc;
  const int slot = b->slot;
  b->slot = (b->slot + 1) % GPU_PLAN_SLOTS;
  const struct model_layout *L = &b->L;
  const int last = L->n_layers - 1;
  /* Each device's loss gradient is scaled by ranks/n, so ncclAvg's division
   * by the ranks (every member's devices) leaves the gradient of the global
   * batch's mean loss, exactly as one GPU with the whole batch computes it,
   * even for uneven shards. */
  const int ranks = b->world * b->ndev;
  const float scale = (float)ranks / (float)n;
  rc = stage(b, slot, x, y, n, 1);
  if (rc) return rc;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    if (d->rows == 0) {
      b->h_loss[i] = 0.0;
      CU(cudaMemsetAsync(d->grads, 0, (size_t)b->plan.n_params * sizeof(float), d->compute));
      CU(cudaEventRecord(d->loss_ready, d->compute));
      continue;
    }
    rc = cuda_net_forward(b, d, slot, d->rows);
    if (rc) goto fail;
    OPS(cuops_xent_step(d->out[last], d->y[slot], d->dout[last], cuda_net_loss_bias(b, d), d->rows,
                        L->n_classes, scale, loss_out_of(d, 0, 0), d->compute));
    if (loss_out)
      CU(cudaMemcpyAsync(&b->h_loss[i], d->sum_loss, sizeof(double), cudaMemcpyDeviceToHost,
                         d->compute));
    CU(cudaEventRecord(d->loss_ready, d->compute));
    rc = cuda_net_backward(b, d, slot, d->rows);
    if (rc) goto fail;
    CU(cudaEventRecord(d->input_free[slot], d->compute));
  }
  if (ranks > 1) {
    NCCL(ncclGroupStart());
    for (int i = 0; i < b->ndev; i++) {
      ncclResult_t r = ncclAllReduce(b->dev[i].grads, b->dev[i].grads, (size_t)b->plan.n_params,
                                     ncclFloat, ncclAvg, b->dev[i].comm, b->dev[i].compute);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        rc = cuda_nccl_fail("ncclAllReduce", r, __FILE__, __LINE__);
        goto fail;
      }
    }
    NCCL(ncclGroupEnd());
  }
  b->step++;
  b->acc_rows += n;
  b->acc_steps++;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = optim_step(b, d);
    if (rc) goto fail;
  }
  /* Wait only for the forward pass's loss: the backward pass and the update
   * keep running while the caller prepares (and stages) the next batch. */
  if (!loss_out) return 0;
  double total = 0.0;
  int rows = 0;
  for (int i = 0; i < b->ndev; i++) {
    CU(cudaSetDevice(b->dev[i].id));
    CU(cudaEventSynchronize(b->dev[i].loss_ready));
    total += b->h_loss[i];
    rows += b->dev[i].rows;
  }
  /* with several members: the mean over this member's rows */
  *loss_out = rows ? (float)(total / rows) : 0.0f;
  return 0;
fail:
  return rc;
}

/* Chunks of eval_rows (at least 256 unless a cap forbade it); the sums
 * stay on the device and the host waits once, at the end. Staging a chunk
 * into a pinned slot waits for that slot's copy of two chunks ago. */
static int cuda_evaluate(struct backend *b, const float *x, const uint8_t *y, int n,
                         double *loss_sum, int *correct) {
  int rc = 0;
  if (b->broken) return b->broken;
  if (!x || !y || n < 0 || !loss_sum || !correct) return -EINVAL;
  const int last = b->L.n_layers - 1;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaMemsetAsync(&d->ctl->acc_loss[1], 0, sizeof(double), d->compute));
    CU(cudaMemsetAsync(&d->ctl->acc_correct[1], 0, sizeof(int64_t), d->compute));
  }
  for (int off = 0; off < n; off += b->eval_rows) {
    int m = n - off < b->eval_rows ? n - off : b->eval_rows;
    const float *cx = x + (int64_t)off * b->L.in_dim;
    rc = check_rows(b, cx, y + off, m, b->eval_rows, "evaluate");
    if (rc) return rc;
    const int slot = b->slot;
    b->slot = (b->slot + 1) % GPU_PLAN_SLOTS;
    rc = stage(b, slot, cx, y + off, m, 0);
    if (rc) return rc;
    for (int i = 0; i < b->ndev; i++) {
      struct cuda_dev *d = &b->dev[i];
      CU(cudaSetDevice(d->id));
      if (d->rows == 0) continue;
      rc = cuda_net_forward(b, d, slot, d->rows);
      if (rc) goto fail;
      OPS(cuops_xent_step(d->out[last], d->y[slot], NULL, NULL, d->rows, b->L.n_classes, 1.0f,
                          loss_out_of(d, 1, 0), d->compute));
      CU(cudaEventRecord(d->input_free[slot], d->compute));
    }
  }
  double loss = 0.0;
  int64_t right = 0;
  rc = read_ctl(b, &loss, &right, 1);
  if (rc) return rc;
  *loss_sum += loss;
  *correct += (int)right;
  return 0;
fail:
  return rc;
}

/* ---- state ----------------------------------------------------------- */

static int cuda_set_state(struct backend *b, const float *params, const float *opt_state,
                          int64_t step) {
  int rc = 0;
  if (b->broken) return b->broken;
  if (!params || step < 0) return -EINVAL;
  if (opt_state) {
    rc = cuda_mem_ensure_state(b, b->max_batch);
    if (rc) return rc;
  }
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaStreamSynchronize(d->compute));
    CU(cudaMemcpyAsync(d->params, params, (size_t)b->plan.n_params * sizeof(float),
                       cudaMemcpyHostToDevice, d->compute));
    if (b->state_ready) {
      size_t bytes = (size_t)b->plan.opt_floats * sizeof(float);
      if (opt_state)
        CU(cudaMemcpyAsync(d->opt, opt_state, bytes, cudaMemcpyHostToDevice, d->compute));
      else
        CU(cudaMemsetAsync(d->opt, 0, bytes, d->compute));
    }
    /* pageable: staged at the call */
    CU(cudaMemcpyAsync(&d->ctl->step, &step, sizeof(step), cudaMemcpyHostToDevice, d->compute));
    CU(cudaStreamSynchronize(d->compute));
  }
  b->step = step;
  return 0;
fail:
  return rc;
}

/* Every device holds the same weights after each step; device 0 speaks. */
static int cuda_get_state(struct backend *b, float *params, float *opt_state, int64_t *step) {
  int rc = 0;
  struct cuda_dev *d = &b->dev[0];
  if (b->broken) return b->broken;
  CU(cudaSetDevice(d->id));
  CU(cudaStreamSynchronize(d->compute));
  if (params)
    CU(cudaMemcpyAsync(params, d->params, (size_t)b->plan.n_params * sizeof(float),
                       cudaMemcpyDeviceToHost, d->compute));
  if (opt_state) {
    size_t bytes = (size_t)b->plan.opt_floats * sizeof(float);
    if (b->state_ready)
      CU(cudaMemcpyAsync(opt_state, d->opt, bytes, cudaMemcpyDeviceToHost, d->compute));
    else
      memset(opt_state, 0, bytes);
  }
  CU(cudaStreamSynchronize(d->compute));
  if (step) *step = b->step;
  return 0;
fail:
  return rc;
}

int backend_cuda_arena_peak_mb(struct backend *b, double *out) {
  if (!b || !out) return -EINVAL;
  int64_t peak = 0;
  for (int i = 0; i < b->ndev; i++)
    if (b->dev[i].mem.peak > peak) peak = b->dev[i].mem.peak;
  *out = (double)peak / (double)MIB;
  return 0;
}

static int cuda_peak_mem_mb(struct backend *b, double *out) {
  double mib = 0;
  int rc = backend_cuda_arena_peak_mb(b, &mib);
  if (rc) return rc;
  /* The driver's figure for this process (context, cuBLAS, NCCL and the
   * arenas) when NVML gives one: what a fraction of a GPU must hold. */
  for (int i = 0; i < b->ndev; i++) {
    double d = cuda_mem_driver_mib(b, b->dev[i].id);
    if (d > b->driver_mib) b->driver_mib = d;
  }
  *out = b->driver_mib > mib ? b->driver_mib : mib;
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
    for (int g = 0; g < d->n_graphs; g++)
      if (d->graph[g].exec) cudaGraphExecDestroy(d->graph[g].exec);
    for (int k = 0; k < 2; k++) cuda_mem_arena_free(d, &d->data[k]);
    if (d->compute) cudaStreamDestroy(d->compute);
    if (d->copy) cudaStreamDestroy(d->copy);
    cuda_mem_arena_free(d, &d->bwd);
    cuda_mem_arena_free(d, &d->state);
    cuda_mem_arena_free(d, &d->eval);
  }
  for (int s = 0; s < GPU_PLAN_SLOTS; s++) {
    if (b->h_x[s]) cudaFreeHost(b->h_x[s]);
    if (b->h_y[s]) cudaFreeHost(b->h_y[s]);
  }
  if (b->h_loss) cudaFreeHost(b->h_loss);
  if (b->h_correct) cudaFreeHost(b->h_correct);
  if (b->h_ctl) cudaFreeHost(b->h_ctl);
  free(b->kept_params);
  cuda_mem_nvml_close(b);
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
  rc = cuda_mem_arena_alloc(b, d, &d->eval, b->plan.eval_bytes, b->max_batch, need);
  if (rc) goto fail;
  rc = cuda_mem_carve_eval(b, d);
  if (rc) goto fail;
  CU(cudaMemsetAsync(d->ctl, 0, sizeof(struct cuda_ctl), d->compute));
  BLAS(cublasCreate(&d->blas));
  BLAS(cublasSetStream(d->blas, d->compute));
  BLAS(cublasSetWorkspace(d->blas, d->workspace, GPU_PLAN_BLAS_WORKSPACE));
  /* full fp32: no TF32 tensor-core shortcut, so CPU and GPU agree to 1e-4 */
  BLAS(cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH));
  CU(cudaMemsetAsync(d->params, 0, (size_t)b->plan.n_params * sizeof(float), d->compute));
fail:
  return rc;
}

int backend_cuda_nccl_id(void *out, size_t len) {
  ncclUniqueId id;
  if (!out || len != sizeof(id)) return -EINVAL;
  last_error[0] = '\0';
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return cuda_nccl_fail("ncclGetUniqueId", r, __FILE__, __LINE__);
  memcpy(out, &id, sizeof(id));
  return 0;
}

static int cuda_create(const struct model_spec *spec, const struct optim_spec *optim, int max_batch,
                       const struct backend_opts *opts, struct backend **out) {
  int rc = 0, count = 0;
  struct backend *b = NULL;
  last_error[0] = '\0';
  if (!spec || !optim || !out || max_batch < 1 ||
      (optim->kind != OPTIM_SGD && optim->kind != OPTIM_ADAM)) {
    cuda_set_error("create: bad arguments (max_batch %d)", max_batch);
    return -EINVAL;
  }
  *out = NULL;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    cuda_set_error("--device cuda: no usable CUDA device (%s%s%s)",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                   vis ? ", CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
    cudaGetLastError();
    return -ENODEV;
  }
  int want = opts && opts->gpus > 0 ? opts->gpus : count;
  if (want > count || want > CUDA_MAX_DEVICES) {
    cuda_set_error("--gpus %d but %d CUDA device(s) are visible (at most %d used)", want, count,
                   CUDA_MAX_DEVICES);
    return -ENODEV;
  }
  b = calloc(1, sizeof(*b));
  if (!b) return -ENOMEM;
  b->ndev = want;
  b->world = opts && opts->world_size > 1 ? opts->world_size : 1;
  b->rank = b->world > 1 ? opts->rank : 0;
  if (b->world > 1 && (b->rank < 0 || b->rank >= b->world || !opts->nccl_id)) {
    cuda_set_error("create: rank %d of %d members, or no NCCL id", b->rank, b->world);
    rc = -EINVAL;
    goto fail;
  }
  b->max_batch = max_batch;
  b->opt = *optim;
  b->limit_bytes = opts && opts->gpu_mem_limit_mb > 0 ? opts->gpu_mem_limit_mb * MIB : 0;
  rc = model_layout_init(spec, &b->L);
  if (rc) {
    cuda_set_error("create: the model does not fit the input geometry");
    goto fail;
  }
  b->first_linear = -1;
  b->last_conv = -1;
  for (int l = 0; l < b->L.n_layers; l++) {
    if (b->L.layer[l].kind == LAYER_CONV) b->last_conv = l;
    if (b->L.layer[l].kind == LAYER_LINEAR && b->first_linear < 0) b->first_linear = l;
  }
  /* Evaluation runs in chunks of at least CUDA_EVAL_ROWS rows (fewer
   * launches and waits per evaluation), unless a cap has no room for them:
   * then max_batch rows, as before. */
  int eval_rows = max_batch > CUDA_EVAL_ROWS ? max_batch : CUDA_EVAL_ROWS;
  int per_dev = (eval_rows + want - 1) / want;
  rc = gpu_plan_init(&b->L, optim->kind, per_dev, &b->plan);
  if (rc) goto fail;
  if (b->limit_bytes && eval_rows > max_batch &&
      b->plan.eval_bytes + b->plan.train_bytes > b->limit_bytes) {
    eval_rows = max_batch;
    per_dev = (eval_rows + want - 1) / want;
    rc = gpu_plan_init(&b->L, optim->kind, per_dev, &b->plan);
    if (rc) goto fail;
  }
  b->eval_rows = per_dev * want;
  const char *graphs = getenv("CTUNE_CUDA_GRAPHS");
  b->use_graphs = want == 1 && b->world == 1 && !(graphs && !strcmp(graphs, "0"));
  /* Refuse before touching a device when even evaluation cannot fit. The
   * training buffers come at the first step, so that an out-of-memory there
   * can be retried with a smaller batch (--oom-retry) on this backend. */
  const int64_t need = b->plan.eval_bytes + b->plan.train_bytes;
  if (b->limit_bytes && b->plan.eval_bytes > b->limit_bytes) {
    char msg[256];
    gpu_mem_oom_message(msg, sizeof(msg), max_batch, need, b->limit_bytes, 0);
    cuda_set_error("%s", msg);
    rc = -ENOMEM;
    goto fail;
  }
  for (int i = 0; i < want; i++) b->dev[i].id = i;
  for (int i = 0; i < want; i++) {
    rc = dev_init(b, &b->dev[i], need);
    if (rc) goto fail;
  }
  if (b->world > 1) {
    /* several member processes (one rendezvous): each device is global rank
     * rank*ndev + i of one communicator, joined in one group as NCCL asks
     * when a process holds several ranks */
    ncclUniqueId id;
    memcpy(&id, opts->nccl_id, sizeof(id));
    NCCL(ncclGroupStart());
    for (int i = 0; i < want; i++) {
      CU(cudaSetDevice(b->dev[i].id));
      ncclResult_t r = ncclCommInitRank(&b->dev[i].comm, b->world * want, id, b->rank * want + i);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        rc = cuda_nccl_fail("ncclCommInitRank", r, __FILE__, __LINE__);
        goto fail;
      }
    }
    NCCL(ncclGroupEnd());
  } else if (want > 1) {
    ncclComm_t comms[CUDA_MAX_DEVICES];
    int ids[CUDA_MAX_DEVICES];
    for (int i = 0; i < want; i++) ids[i] = b->dev[i].id;
    NCCL(ncclCommInitAll(comms, want, ids));
    for (int i = 0; i < want; i++) b->dev[i].comm = comms[i];
  }
  /* portable: pinned for every device's context, not only the current one */
  const unsigned pin = cudaHostAllocPortable;
  for (int s = 0; s < GPU_PLAN_SLOTS; s++) {
    CU(cudaHostAlloc((void **)&b->h_x[s], (size_t)b->eval_rows * b->L.in_dim * sizeof(float), pin));
    CU(cudaHostAlloc((void **)&b->h_y[s], (size_t)b->eval_rows, pin));
  }
  CU(cudaHostAlloc((void **)&b->h_loss, (size_t)want * sizeof(double), pin));
  CU(cudaHostAlloc((void **)&b->h_correct, (size_t)want * sizeof(int32_t), pin));
  CU(cudaHostAlloc((void **)&b->h_ctl, (size_t)want * sizeof(struct cuda_ctl), pin));
  for (int i = 0; i < want; i++) {
    CU(cudaSetDevice(b->dev[i].id));
    CU(cudaStreamSynchronize(b->dev[i].compute));
  }
  log_info("cuda: %d device(s), batch %d (%d per device), %.0f MiB per "
           "device planned%s",
           want, max_batch, per_dev, gpu_mem_mib(need), b->limit_bytes ? " (capped)" : "");
  *out = b;
  return 0;
fail:
  cuda_destroy(b);
  return rc;
}

/* ---- device-resident data and captured steps --------------------------
 * The data set lives on every device as uint8 (a quarter of float32); a
 * step gathers and normalises its rows there from the order the host sent
 * once per epoch, so a step needs no host data at all. With one device the
 * whole step (gather, forward, loss, backward, optimiser, cursor) is one CUDA
 * graph per (phase, rows), captured at its first use and replayed after:
 * one launch and no host wait per step. The loss sum and a non-finite flag
 * stay on the device until backend_cuda_take_loss. */

int backend_cuda_set_data(struct backend *b, int which, const uint8_t *pix, const uint8_t *labels,
                          int64_t n) {
  int rc = 0;
  if (!b || which < 0 || which > 1 || !pix || !labels || n < 1 || n > INT32_MAX) return -EINVAL;
  if (b->world > 1) { /* each member's shard of a step comes from the host */
    cuda_set_error("set_data: fast steps are for one process (%d members here)", b->world);
    return -EINVAL;
  }
  if (b->broken) return b->broken;
  for (int64_t i = 0; i < n; i++)
    if (labels[i] >= b->L.n_classes) {
      cuda_set_error("set_data: label %d at row %lld is not below n_classes %d", labels[i],
                     (long long)i, b->L.n_classes);
      return -EINVAL;
    }
  const int64_t dim = b->L.in_dim;
  const int64_t pix_b = (n * dim + 255) / 256 * 256, lab_b = (n + 255) / 256 * 256;
  const int64_t bytes = pix_b + lab_b + n * (int64_t)sizeof(int32_t);
  int32_t *ident = malloc((size_t)n * sizeof(int32_t));
  if (!ident) return -ENOMEM;
  for (int64_t i = 0; i < n; i++) ident[i] = (int32_t)i;
  b->set_n[which] = b->order_n[which] = 0;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaStreamSynchronize(d->compute));
    cuda_mem_arena_free(d, &d->data[which]);
    rc = cuda_mem_arena_alloc(b, d, &d->data[which], bytes, b->max_batch, bytes);
    if (rc) goto fail;
    d->dpix[which] = d->data[which].ptr;
    d->dlab[which] = d->dpix[which] + pix_b;
    d->dorder[which] = (int32_t *)(d->dlab[which] + lab_b);
    /* pageable sources: staged at the call, the caller may free them */
    CU(cudaMemcpyAsync(d->dpix[which], pix, (size_t)(n * dim), cudaMemcpyHostToDevice, d->compute));
    CU(cudaMemcpyAsync(d->dlab[which], labels, (size_t)n, cudaMemcpyHostToDevice, d->compute));
    CU(cudaMemcpyAsync(d->dorder[which], ident, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice,
                       d->compute));
    CU(cudaMemsetAsync(&d->ctl->cursor[which], 0, sizeof(int64_t), d->compute));
  }
  b->set_n[which] = b->order_n[which] = n;
  b->cursor[which] = 0;
fail:
  free(ident);
  return rc;
}

int backend_cuda_set_order(struct backend *b, int which, const int32_t *idx, int64_t n) {
  int rc = 0;
  if (!b || which < 0 || which > 1 || !idx || n < 0) return -EINVAL;
  if (!b->set_n[which] || n > b->set_n[which]) {
    cuda_set_error("set_order: %lld rows for a data set of %lld", (long long)n,
                   (long long)b->set_n[which]);
    return -EINVAL;
  }
  for (int64_t i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= b->set_n[which]) {
      cuda_set_error("set_order: index %d at %lld is outside the data set", idx[i], (long long)i);
      return -EINVAL;
    }
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaMemcpyAsync(d->dorder[which], idx, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice,
                       d->compute));
    CU(cudaMemsetAsync(&d->ctl->cursor[which], 0, sizeof(int64_t), d->compute));
  }
  b->order_n[which] = n;
  b->cursor[which] = 0;
fail:
  return rc;
}

/* What one device runs for `rows` rows of set `which` starting at the
 * cursor (+ first, its shard): everything on its compute stream, nothing
 * that reads the host. Training stops before the all-reduce. */
static int step_body(struct backend *b, struct cuda_dev *d, int phase, int first, int rows,
                     int global) {
  const struct model_layout *L = &b->L;
  const int last = L->n_layers - 1, which = phase;
  const float scale = (float)b->ndev / (float)global;
  int rc = 0;
  OPS(cuops_gather_u8(d->dpix[which], d->dlab[which], d->dorder[which], &d->ctl->cursor[which],
                      first, rows, L->in_dim, d->x[0], d->y[0], d->compute));
  rc = cuda_net_forward(b, d, 0, rows);
  if (rc) goto fail;
  /* the loss kernel also moves the cursor: nothing after the gather reads it */
  const int train = phase == CUDA_PHASE_TRAIN;
  OPS(cuops_xent_step(d->out[last], d->y[0], train ? d->dout[last] : NULL,
                      train ? cuda_net_loss_bias(b, d) : NULL, rows, L->n_classes, scale,
                      loss_out_of(d, which, global), d->compute));
  if (train) rc = cuda_net_backward(b, d, 0, rows);
fail:
  return rc;
}

/* The rest of a step after the all-reduce: the update. */
static int step_tail(struct backend *b, struct cuda_dev *d, int phase) {
  return phase == CUDA_PHASE_TRAIN ? optim_step(b, d) : 0;
}

/* The instantiated graph of (phase, rows) on device d, captured now if it
 * is missing or its buffers have moved since. */
static int graph_for(struct backend *b, struct cuda_dev *d, int phase, int rows,
                     cudaGraphExec_t *out) {
  int rc = 0, slot = -1;
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  for (int i = 0; i < d->n_graphs; i++)
    if (d->graph[i].phase == phase && d->graph[i].rows == rows) {
      if (d->graph[i].gen == b->mem_gen) {
        *out = d->graph[i].exec;
        return 0;
      }
      slot = i;
    }
  if (slot < 0) {
    /* a full cache drops its oldest entry: shapes rarely change */
    if (d->n_graphs == CUDA_MAX_GRAPHS) {
      if (d->graph[0].exec) CU(cudaGraphExecDestroy(d->graph[0].exec));
      memmove(&d->graph[0], &d->graph[1], (CUDA_MAX_GRAPHS - 1) * sizeof(d->graph[0]));
      d->n_graphs--;
    }
    slot = d->n_graphs++;
    d->graph[slot] = (struct cuda_graph){phase, rows, -1, NULL};
  } else if (d->graph[slot].exec) {
    cudaGraphExec_t old = d->graph[slot].exec;
    d->graph[slot].exec = NULL;
    CU(cudaGraphExecDestroy(old));
  }
  CU(cudaStreamBeginCapture(d->compute, cudaStreamCaptureModeThreadLocal));
  rc = step_body(b, d, phase, 0, rows, rows);
  if (!rc) rc = step_tail(b, d, phase);
  {
    /* capture always ends, also after a failed call inside it */
    cudaError_t e = cudaStreamEndCapture(d->compute, &g);
    if (!rc && e != cudaSuccess) {
      rc = cuda_fail("cudaStreamEndCapture", e, __FILE__, __LINE__);
      goto fail;
    }
    if (rc) goto fail;
  }
  CU(cudaGraphInstantiate(&exec, g, 0));
  d->graph[slot].exec = exec;
  d->graph[slot].gen = b->mem_gen;
  *out = exec;
fail:
  if (g) cudaGraphDestroy(g);
  if (rc && slot >= 0 && !d->graph[slot].exec) {
    /* no graph came of it: drop the entry, the next step captures again */
    memmove(&d->graph[slot], &d->graph[slot + 1],
            (size_t)(d->n_graphs - slot - 1) * sizeof(d->graph[0]));
    d->n_graphs--;
  }
  if (rc) cudaGetLastError();
  return rc;
}

/* One step of `rows` rows of set `which` on every device. */
static int run_step(struct backend *b, int phase, int n) {
  int rc = 0;
  /* The first step of a phase runs eagerly even with graphs: under lazy
   * module loading (CUDA 12.2+'s default) its kernels and cuBLAS's are then
   * loaded outside a capture, which older drivers cannot do inside one. */
  if (b->use_graphs && b->ran_eager[phase]) {
    struct cuda_dev *d = &b->dev[0];
    cudaGraphExec_t exec = NULL;
    CU(cudaSetDevice(d->id));
    rc = graph_for(b, d, phase, n, &exec);
    if (rc) goto fail;
    CU(cudaGraphLaunch(exec, d->compute));
    return 0;
  }
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    int first, count;
    gpu_plan_shard(n, b->ndev, i, &first, &count);
    CU(cudaSetDevice(d->id));
    if (count == 0) { /* no rows here: only the cursor moves */
      if (phase == CUDA_PHASE_TRAIN)
        CU(cudaMemsetAsync(d->grads, 0, (size_t)b->plan.n_params * sizeof(float), d->compute));
      OPS(cuops_tick(&d->ctl->cursor[phase], n, d->compute));
      continue;
    }
    rc = step_body(b, d, phase, first, count, n);
    if (rc) goto fail;
  }
  if (phase == CUDA_PHASE_TRAIN && b->ndev > 1) {
    NCCL(ncclGroupStart());
    for (int i = 0; i < b->ndev; i++) {
      ncclResult_t r = ncclAllReduce(b->dev[i].grads, b->dev[i].grads, (size_t)b->plan.n_params,
                                     ncclFloat, ncclAvg, b->dev[i].comm, b->dev[i].compute);
      if (r != ncclSuccess) {
        ncclGroupEnd();
        rc = cuda_nccl_fail("ncclAllReduce", r, __FILE__, __LINE__);
        goto fail;
      }
    }
    NCCL(ncclGroupEnd());
  }
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = step_tail(b, d, phase);
    if (rc) goto fail;
  }
  b->ran_eager[phase] = 1;
fail:
  return rc;
}

int backend_cuda_train_next(struct backend *b, int n) {
  if (!b || n < 1 || n > b->max_batch) return -EINVAL;
  if (b->broken && !(b->kept_params && b->oom_pending && n < b->max_batch)) return b->broken;
  if (b->cursor[0] + n > b->order_n[0]) {
    cuda_set_error("train_next: %d rows past the end of the order (%lld of "
                   "%lld used)",
                   n, (long long)b->cursor[0], (long long)b->order_n[0]);
    return -EINVAL;
  }
  int rc = 0;
  if (b->oom_pending && n < b->max_batch && b->train_rows < n) {
    rc = replan(b, n);
    if (rc) return rc;
  }
  rc = cuda_mem_ensure_train(b, n);
  if (rc) return rc;
  rc = run_step(b, CUDA_PHASE_TRAIN, n);
  if (rc) return rc;
  b->cursor[0] += n;
  b->step++;
  b->acc_rows += n;
  b->acc_steps++;
  return 0;
}

int backend_cuda_take_loss(struct backend *b, double *loss_sum, int64_t *rows, int *nonfinite) {
  if (!b || !loss_sum || !rows || !nonfinite) return -EINVAL;
  if (b->broken) return b->broken;
  double loss = 0.0;
  int64_t right = 0;
  int rc = read_ctl(b, &loss, &right, 0);
  if (rc) return rc;
  int bad = 0;
  for (int i = 0; i < b->ndev; i++) bad |= b->h_ctl[i].nonfinite[0] != 0;
  *loss_sum = loss;
  *rows = b->acc_rows;
  *nonfinite = bad;
  b->acc_rows = 0;
  b->acc_steps = 0;
  return 0;
}

int backend_cuda_evaluate_set(struct backend *b, int which, double *loss_sum, int64_t *correct) {
  int rc = 0;
  if (!b || which != 1 || !loss_sum || !correct) return -EINVAL;
  if (b->broken) return b->broken;
  if (!b->set_n[which]) {
    cuda_set_error("evaluate_set: no data set %d on the device", which);
    return -EINVAL;
  }
  const int64_t n = b->order_n[which];
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    CU(cudaMemsetAsync(&d->ctl->cursor[1], 0, sizeof(int64_t), d->compute));
    CU(cudaMemsetAsync(&d->ctl->acc_loss[1], 0, sizeof(double), d->compute));
    CU(cudaMemsetAsync(&d->ctl->acc_correct[1], 0, sizeof(int64_t), d->compute));
  }
  for (int64_t off = 0; off < n; off += b->eval_rows) {
    int m = (int)(n - off < b->eval_rows ? n - off : b->eval_rows);
    rc = run_step(b, CUDA_PHASE_EVAL, m);
    if (rc) return rc;
  }
  b->cursor[1] = 0;
  double loss = 0.0;
  int64_t right = 0;
  rc = read_ctl(b, &loss, &right, 1);
  if (rc) return rc;
  *loss_sum += loss;
  *correct += right;
  return 0;
fail:
  return rc;
}

int backend_cuda_counters(struct backend *b, int64_t *eval_rows, int *graphs) {
  if (!b) return -EINVAL;
  if (eval_rows) *eval_rows = b->eval_rows;
  if (graphs) *graphs = b->use_graphs;
  return 0;
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
