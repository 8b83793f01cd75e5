/* The CUDA backend's device memory: three arenas per GPU from the capped
 * allocator (gpu_mem.h), carved in gpu_plan.c's order, the out-of-memory
 * message, and the training arenas that come with the first step. */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda_internal.h"

static void oom_message(struct backend *b, struct cuda_dev *d, int batch, int64_t need) {
  size_t free_b = 0, total_b = 0;
  char msg[256];
  if (!b->limit_bytes) {
    cudaSetDevice(d->id);
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
  }
  gpu_mem_oom_message(msg, sizeof(msg), batch, need, b->limit_bytes, (int64_t)free_b);
  cuda_set_error("%s", msg);
}

/* One arena from the capped allocator: the cap first, then the device. On
 * out-of-memory the message names `batch` and the `need` of the whole plan. */
int cuda_mem_arena_alloc(struct backend *b, struct cuda_dev *d, struct dev_block *blk, int64_t size,
                         int batch, int64_t need) {
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
    return cuda_fail("cudaMalloc", e, __FILE__, __LINE__);
  }
  blk->size = size;
  b->mem_gen++; /* buffers moved: captured graphs must be rebuilt */
  return 0;
}

/* The device must be current and its streams idle. */
void cuda_mem_arena_free(struct cuda_dev *d, struct dev_block *blk) {
  if (!blk->ptr) return;
  cudaFree(blk->ptr);
  gpu_mem_release(&d->mem, blk->size);
  blk->ptr = NULL;
  blk->size = 0;
}

/* Carving follows gpu_plan.c's order; running out means the plan is wrong. */
#define TAKE(arena, ptr, bytes)                                                                    \
  do {                                                                                             \
    uintptr_t p_;                                                                                  \
    if (gpu_arena_take((arena), (bytes), &p_)) {                                                   \
      cuda_set_error("internal: device memory plan too small for " #ptr);                          \
      return -EIO;                                                                                 \
    }                                                                                              \
    (ptr) = (void *)p_;                                                                            \
  } while (0)

int cuda_mem_carve_eval(struct backend *b, struct cuda_dev *d) {
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
      d->pool[l] = NULL; /* the last conv layer pools into flat */
      if (l != b->last_conv) TAKE(&a, d->pool[l], q->pool * F);
      TAKE(&a, d->arg[l], q->pool * F);
    } else {
      TAKE(&a, d->out[l], q->out * F);
    }
  }
  if (p->flat) TAKE(&a, d->flat, p->flat * F);
  /* a double, the int32 count after it, then the step's counters: the plan
   * gives this slot 16 bytes rounded up to GPU_MEM_ALIGN, room for both */
  _Static_assert(16 + sizeof(struct cuda_ctl) <= GPU_MEM_ALIGN,
                 "struct cuda_ctl must fit the sums slot's alignment");
  TAKE(&a, d->sum_loss, 16 + (int64_t)sizeof(struct cuda_ctl));
  d->sum_correct = (int32_t *)(d->sum_loss + 1);
  d->ctl = (struct cuda_ctl *)((char *)d->sum_loss + 16);
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
      d->dpool[l] = NULL; /* the last conv layer's comes from dflat */
      if (l != b->last_conv) TAKE(&a, d->dpool[l], q->pool * F);
      if (l > 0) TAKE(&a, d->dcol[l], q->col * F);
    } else {
      TAKE(&a, d->dout[l], q->out * F);
    }
  }
  if (p->flat) TAKE(&a, d->dflat, p->flat * F);
  _Static_assert(GPU_PLAN_RED_PARTS == CUOPS_RED_PARTS, "the plan sizes the kernels' scratch");
  TAKE(&a, d->red.ticket, p->red_outputs * (int64_t)sizeof(unsigned));
  TAKE(&a, d->red.partial, p->red_outputs * (int64_t)GPU_PLAN_RED_PARTS * F);
  d->red.outputs = p->red_outputs;
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
int cuda_mem_ensure_state(struct backend *b, int n) {
  int rc = 0;
  struct gpu_plan bp;
  if (b->state_ready) return 0;
  int64_t need = train_need(b, n, &bp);
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = cuda_mem_arena_alloc(b, d, &d->state, b->plan.state_bytes, n, need);
    if (rc) goto fail;
    rc = carve_state(b, d);
    if (rc) goto fail;
    CU(cudaMemsetAsync(d->opt, 0, (size_t)b->plan.opt_floats * sizeof(float), d->compute));
  }
  b->state_ready = 1;
  return 0;
fail:
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    if (!d->state.ptr) continue;
    cudaSetDevice(d->id);
    cudaStreamSynchronize(d->compute);
    cuda_mem_arena_free(d, &d->state);
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
    cuda_mem_arena_free(d, &d->bwd);
  }
  b->train_rows = 0;
  b->bplan = bp;
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    CU(cudaSetDevice(d->id));
    rc = cuda_mem_arena_alloc(b, d, &d->bwd, bp.backward_bytes, n, need);
    if (rc) goto fail;
    rc = carve_backward(b, d);
    if (rc) goto fail;
    /* the reductions' tickets start at zero, and each leaves them so */
    CU(cudaMemsetAsync(d->red.ticket, 0, (size_t)bp.red_outputs * sizeof(unsigned), d->compute));
  }
  b->train_rows = n;
  return 0;
fail:
  for (int i = 0; i < b->ndev; i++) {
    struct cuda_dev *d = &b->dev[i];
    if (!d->bwd.ptr) continue;
    cudaSetDevice(d->id);
    cuda_mem_arena_free(d, &d->bwd);
  }
  return rc;
}

int cuda_mem_ensure_train(struct backend *b, int n) {
  int rc = cuda_mem_ensure_state(b, n);
  if (!rc) rc = ensure_backward(b, n);
  if (rc == -ENOMEM) b->oom_pending = 1;
  return rc;
}

/* ---- what the driver says we hold ------------------------------------
 * NVML (dlopen'ed: no link dependency) lists each process's device memory:
 * the CUDA context, cuBLAS's and NCCL's own allocations and our arenas
 * together. CTUNE_NVML_LIB names another library (tests: a fake). It is
 * opened and initialised once per backend, not at every report: a dlopen,
 * nvmlInit and nvmlShutdown cost tens of milliseconds. */
struct nvml_proc_v3 {
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance, compute_instance;
};

/* nvmlProcessInfo_t.usedGpuMemory when the driver has no figure (under
 * some virtualisation and Windows' WDDM): NVML_VALUE_NOT_AVAILABLE. */
#define NVML_NOT_AVAILABLE (~0ULL)

static int nvml_open(struct cuda_nvml *n) {
  if (n->lib) return 0;
  const char *path = getenv("CTUNE_NVML_LIB");
  void *h = dlopen(path && *path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -ENOENT; /* tried again at the next report: a missing file is cheap */
  int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
  n->shutdown = (int (*)(void))dlsym(h, "nvmlShutdown");
  n->by_bus = (int (*)(const char *, void **))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
  n->procs =
      (int (*)(void *, unsigned *, void *))dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!init || !n->shutdown || !n->by_bus || !n->procs || init() != 0) {
    dlclose(h);
    *n = (struct cuda_nvml){0};
    return -ENOENT;
  }
  n->lib = h;
  return 0;
}

void cuda_mem_nvml_close(struct backend *b) {
  struct cuda_nvml *n = &b->nvml;
  if (!n->lib) return;
  n->shutdown();
  dlclose(n->lib);
  *n = (struct cuda_nvml){0};
}

double cuda_mem_driver_mib(struct backend *b, int dev) {
  char bus[32];
  if (nvml_open(&b->nvml)) return -1.0;
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess) {
    cudaGetLastError();
    return -1.0;
  }
  void *nd = NULL;
  struct nvml_proc_v3 list[64];
  unsigned n = 64;
  double mib = -1.0;
  if (b->nvml.by_bus(bus, &nd) == 0 && b->nvml.procs(nd, &n, list) == 0) {
    const unsigned me = (unsigned)getpid();
    for (unsigned i = 0; i < n && i < 64; i++)
      if (list[i].pid == me && list[i].used != NVML_NOT_AVAILABLE)
        mib = (double)list[i].used / (double)MIB;
  }
  return mib;
}
