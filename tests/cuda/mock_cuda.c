/* Test double of the CUDA runtime, cuBLAS, NCCL and the kernels of
 * kernels/cuda_ops.h on host memory (see mock_cuda.h). Work runs at once, in
 * call order, which is one legal schedule of the real streams. */
#include "mock_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "ops_math.h"

struct CUstream_st { int dev; };
struct CUevent_st { int dev; };
struct cublasContext { int dev; cudaStream_t stream; };
struct ncclComm { int rank, nranks, dev; };

#define MAX_ALLOCS 4096
struct block {
  char *p;
  size_t size;
  int dev; /* -1: pinned host memory */
};
static struct block blocks[MAX_ALLOCS];
static int n_blocks;
static int n_devices = -1, cur_dev;
static long calls, fail_at, live_objects;
static cudaError_t last_err = cudaSuccess;

void mock_cuda_set_devices(int n) { n_devices = n; }
void mock_cuda_fail_at(long k) { fail_at = k > 0 ? calls + k : 0; }
long mock_cuda_calls(void) { return calls; }
long mock_cuda_live(void) { return n_blocks + live_objects; }

static int devices(void) {
  if (n_devices < 0) {
    const char *e = getenv("CTUNE_MOCK_GPUS");
    n_devices = e ? atoi(e) : 2;
  }
  return n_devices;
}

/* Counts the call; nonzero when this one must fail (fault injection). */
static int failing(void) {
  calls++;
  return fail_at && calls == fail_at;
}

static void die(const char *fmt, const char *what, long a, long b) {
  fprintf(stderr, "mock_cuda: ");
  fprintf(stderr, fmt, what, a, b);
  fprintf(stderr, "\n");
  abort();
}

static struct block *find(const void *p) {
  for (int i = 0; i < n_blocks; i++)
    if ((const char *)p >= blocks[i].p &&
        (const char *)p < blocks[i].p + blocks[i].size)
      return &blocks[i];
  return NULL;
}

/* [p, p+bytes) must be inside one live device allocation on the current
 * device: what a kernel or cuBLAS may touch. */
static void dev_range(const void *p, size_t bytes, const char *what) {
  if (bytes == 0) return;
  struct block *b = find(p);
  if (!b || b->dev < 0)
    die("%s: pointer is not device memory (%ld, %ld)", what, 0, 0);
  if ((const char *)p + bytes > b->p + b->size)
    die("%s: %ld bytes past the end of a %ld-byte allocation", what,
        (long)((const char *)p + bytes - (b->p + b->size)), (long)b->size);
  if (b->dev != cur_dev)
    die("%s: memory of device %ld used while device %ld is current", what,
        b->dev, cur_dev);
}

/* Host side of a copy: pinned blocks are range-checked, pageable memory is
 * the caller's. */
static void host_range(const void *p, size_t bytes, const char *what) {
  struct block *b = find(p);
  if (b && b->dev >= 0) die("%s: device pointer used as host memory", what, 0, 0);
  if (b && (const char *)p + bytes > b->p + b->size)
    die("%s: %ld bytes past the end of pinned block of %ld", what,
        (long)((const char *)p + bytes - (b->p + b->size)), (long)b->size);
}

static void on_current(int dev, const char *what) {
  if (dev != cur_dev)
    die("%s: object of device %ld used while device %ld is current", what, dev,
        cur_dev);
}

/* ---- CUDA runtime ---------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
  if (failing()) return cudaErrorUnknown;
  *count = devices();
  return *count ? cudaSuccess : cudaErrorNoDevice;
}

/* Not a failure point: selecting a valid device fails only when the device
 * is lost, which this double does not model. */
cudaError_t cudaSetDevice(int dev) {
  if (dev < 0 || dev >= devices()) return cudaErrorInvalidDevice;
  cur_dev = dev;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_err;
  last_err = cudaSuccess;
  return e;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory (mock)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (mock)";
    default: return "unknown error (mock)";
  }
}

static cudaError_t alloc(void **p, size_t size, int dev) {
  if (failing()) return cudaErrorMemoryAllocation;
  if (n_blocks == MAX_ALLOCS) die("%s: too many allocations", "alloc", 0, 0);
  size_t rounded = (size + 255) / 256 * 256;
  char *m = aligned_alloc(256, rounded ? rounded : 256);
  if (!m) return cudaErrorMemoryAllocation;
  memset(m, 0xff, rounded ? rounded : 256); /* NaN: unwritten values show */
  blocks[n_blocks++] = (struct block){m, size, dev};
  *p = m;
  return cudaSuccess;
}

static cudaError_t release(void *p, int want_dev) {
  if (!p) return cudaSuccess;
  for (int i = 0; i < n_blocks; i++)
    if (blocks[i].p == p) {
      if ((blocks[i].dev < 0) != (want_dev < 0))
        die("%s: freed with the wrong function", "free", 0, 0);
      free(p);
      blocks[i] = blocks[--n_blocks];
      return cudaSuccess;
    }
  die("%s: not an allocation", "free", 0, 0);
  return cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void **p, size_t size) { return alloc(p, size, cur_dev); }
cudaError_t cudaHostAlloc(void **p, size_t size, unsigned flags) {
  (void)flags;
  return alloc(p, size, -1);
}
cudaError_t cudaFree(void *p) { return release(p, 0); }
cudaError_t cudaFreeHost(void *p) { return release(p, -1); }

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
  if (failing()) return cudaErrorUnknown;
  *free_b = (size_t)1 << 30;
  *total = (size_t)2 << 30;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                            enum cudaMemcpyKind kind, cudaStream_t s) {
  if (failing()) return cudaErrorUnknown;
  if (s) on_current(s->dev, "cudaMemcpyAsync stream");
  if (kind == cudaMemcpyHostToDevice) {
    dev_range(dst, n, "cudaMemcpyAsync H2D dst");
    host_range(src, n, "cudaMemcpyAsync H2D src");
  } else if (kind == cudaMemcpyDeviceToHost) {
    dev_range(src, n, "cudaMemcpyAsync D2H src");
    host_range(dst, n, "cudaMemcpyAsync D2H dst");
  } else {
    die("%s: unexpected copy kind %ld", "cudaMemcpyAsync", (long)kind, 0);
  }
  memcpy(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                       enum cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, n, kind, NULL);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  if (failing()) return cudaErrorUnknown;
  if (s) on_current(s->dev, "cudaMemsetAsync stream");
  dev_range(p, n, "cudaMemsetAsync");
  memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  if (failing()) return cudaErrorUnknown;
  *s = malloc(sizeof(**s));
  if (!*s) return cudaErrorMemoryAllocation;
  (*s)->dev = cur_dev;
  live_objects++;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  on_current(s->dev, "cudaStreamDestroy");
  free(s);
  live_objects--;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (failing()) return cudaErrorUnknown;
  (void)s;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) {
  (void)f;
  (void)e;
  if (failing()) return cudaErrorUnknown;
  on_current(s->dev, "cudaStreamWaitEvent stream");
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  if (failing()) return cudaErrorUnknown;
  *e = malloc(sizeof(**e));
  if (!*e) return cudaErrorMemoryAllocation;
  (*e)->dev = cur_dev;
  live_objects++;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (failing()) return cudaErrorUnknown;
  on_current(s->dev, "cudaEventRecord stream");
  if (e->dev != s->dev) die("%s: event of device %ld, stream of %ld", "cudaEventRecord", e->dev, s->dev);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  (void)e;
  if (failing()) return cudaErrorUnknown;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free(e);
  live_objects--;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  if (failing()) return cudaErrorUnknown;
  return cudaSuccess;
}

/* ---- cuBLAS ---------------------------------------------------------- */

cublasStatus_t cublasCreate(cublasHandle_t *h) {
  if (failing()) return CUBLAS_STATUS_ALLOC_FAILED;
  *h = calloc(1, sizeof(**h));
  if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
  (*h)->dev = cur_dev;
  live_objects++;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
  on_current(h->dev, "cublasDestroy");
  free(h);
  live_objects--;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (failing()) return CUBLAS_STATUS_INTERNAL_ERROR;
  on_current(h->dev, "cublasSetStream");
  if (s->dev != h->dev) die("%s: stream of device %ld, handle of %ld", "cublasSetStream", s->dev, h->dev);
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t size) {
  if (failing()) return CUBLAS_STATUS_INTERNAL_ERROR;
  on_current(h->dev, "cublasSetWorkspace");
  dev_range(ws, size, "cublasSetWorkspace");
  if ((uintptr_t)ws % 256) die("%s: workspace not 256-aligned", "cublasSetWorkspace", 0, 0);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  (void)mode;
  if (failing()) return CUBLAS_STATUS_INTERNAL_ERROR;
  on_current(h->dev, "cublasSetMathMode");
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? "success" : "failure (mock)";
}

/* Column-major C = alpha op(A) op(B) + beta C with cuBLAS's argument rules;
 * beta 0 never reads C (it may hold NaN). */
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta,
                           cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
  if (failing()) return CUBLAS_STATUS_EXECUTION_FAILED;
  on_current(h->dev, "cublasSgemm handle");
  if (!h->stream || h->stream->dev != cur_dev) die("%s: no stream of device %ld", "cublasSgemm", cur_dev, 0);
  int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) ||
      ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  dev_range(A, ((size_t)lda * (ac - 1) + ar) * sizeof(float), "cublasSgemm A");
  dev_range(B, ((size_t)ldb * (bc - 1) + br) * sizeof(float), "cublasSgemm B");
  dev_range(C, ((size_t)ldc * (n - 1) + m) * sizeof(float), "cublasSgemm C");
  /* pack op(A) as [m][k] and op(B)^T as [n][k] so each dot product is
   * contiguous (fast enough under ASan) */
  float *ap = malloc((size_t)m * k * sizeof(float) + 1);
  float *bp = malloc((size_t)n * k * sizeof(float) + 1);
  if (!ap || !bp) die("%s: out of host memory", "cublasSgemm", 0, 0);
  for (int i = 0; i < m; i++)
    for (int p = 0; p < k; p++)
      ap[(size_t)i * k + p] = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
  for (int j = 0; j < n; j++)
    for (int p = 0; p < k; p++)
      bp[(size_t)j * k + p] = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      const float *a = ap + (size_t)i * k, *b = bp + (size_t)j * k;
      double acc = 0;
      for (int p = 0; p < k; p++) acc += (double)a[p] * b[p];
      float *c = &C[i + (size_t)j * ldc];
      *c = (float)(*alpha * acc + (*beta != 0.0f ? *beta * *c : 0.0f));
    }
  free(ap);
  free(bp);
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- NCCL ------------------------------------------------------------ */

#define MAX_QUEUED 64
struct queued {
  const float *send;
  float *recv;
  size_t count;
  ncclRedOp_t op;
  ncclComm_t comm;
};
static struct queued queue[MAX_QUEUED];
static int n_queued, group_depth;
static ncclResult_t group_error; /* an op of the open group failed */

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devlist) {
  if (failing()) return ncclUnhandledCudaError;
  for (int i = 0; i < n; i++) {
    comms[i] = malloc(sizeof(*comms[i]));
    if (!comms[i]) return ncclSystemError; /* test double: leaks are fine here */
    *comms[i] = (struct ncclComm){i, n, devlist[i]};
    live_objects++;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  free(c);
  live_objects--;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : "NCCL failure (mock)";
}

ncclResult_t ncclGroupStart(void) {
  if (failing()) return ncclInternalError;
  group_depth++;
  return ncclSuccess;
}

/* Runs the queued all-reduce once every rank has joined. */
ncclResult_t ncclGroupEnd(void) {
  /* not a failure point: the group's errors surface here instead */
  if (group_depth < 1) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  if (group_error != ncclSuccess) { /* as NCCL: the group is dropped */
    ncclResult_t e = group_error;
    group_error = ncclSuccess;
    n_queued = 0;
    return e;
  }
  if (n_queued == 0) return ncclSuccess;
  int nranks = queue[0].comm->nranks;
  if (n_queued != nranks) die("%s: %ld ranks joined of %ld", "ncclGroupEnd", n_queued, nranks);
  size_t count = queue[0].count;
  for (size_t i = 0; i < count; i++) {
    double acc = 0;
    for (int r = 0; r < nranks; r++) acc += queue[r].send[i];
    if (queue[0].op == ncclAvg) acc /= nranks;
    for (int r = 0; r < nranks; r++) queue[r].recv[i] = (float)acc;
  }
  n_queued = 0;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
  if (failing()) {
    if (group_depth) group_error = ncclInternalError;
    return ncclInternalError;
  }
  if (type != ncclFloat || (op != ncclAvg && op != ncclSum))
    return ncclInvalidArgument;
  if (!group_depth && c->nranks > 1)
    die("%s: %ld ranks from one thread outside a group would deadlock", "ncclAllReduce", c->nranks, 0);
  if (s->dev != c->dev) die("%s: stream of device %ld, communicator of %ld", "ncclAllReduce", s->dev, c->dev);
  int saved = cur_dev;
  cur_dev = c->dev; /* NCCL does not need the device current; check ranges on its own */
  dev_range(send, count * sizeof(float), "ncclAllReduce send");
  dev_range(recv, count * sizeof(float), "ncclAllReduce recv");
  cur_dev = saved;
  if (!group_depth) { /* one rank: the average of one buffer is itself */
    memmove(recv, send, count * sizeof(float));
    return ncclSuccess;
  }
  if (n_queued == MAX_QUEUED) return ncclInternalError;
  queue[n_queued++] = (struct queued){send, recv, count, op, c};
  return ncclSuccess;
}

/* ---- kernels (kernels/cuda_ops.h) on the host ------------------------ */

#define LAUNCH(stream)                                  \
  do {                                                  \
    if (failing()) return -EIO;                         \
    if (stream) on_current((stream)->dev, "kernel stream"); \
  } while (0)
#define F sizeof(float)

int cuops_im2col(const float *in, float *col, int n, int c, int h, int w,
                 int k, int64_t sn, int64_t sc, cudaStream_t s) {
  LAUNCH(s);
  const int oh = h - k + 1, ow = w - k + 1;
  const int64_t pix = (int64_t)oh * ow, npix = n * pix;
  dev_range(col, (size_t)(c * k * k * npix) * F, "im2col col");
  dev_range(in, (size_t)((n - 1) * sn + (c - 1) * sc + h * w) * F, "im2col in");
  for (int ch = 0; ch < c; ch++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++)
        for (int b = 0; b < n; b++)
          for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
              col[((int64_t)(ch * k + i) * k + j) * npix + b * pix + y * ow + x] =
                  in[b * sn + ch * sc + (int64_t)(y + i) * w + x + j];
  return 0;
}

int cuops_col2im(const float *col, float *in, int n, int c, int h, int w,
                 int k, int64_t sn, int64_t sc, cudaStream_t s) {
  LAUNCH(s);
  const int oh = h - k + 1, ow = w - k + 1;
  const int64_t pix = (int64_t)oh * ow, npix = n * pix;
  dev_range(col, (size_t)(c * k * k * npix) * F, "col2im col");
  dev_range(in, (size_t)((n - 1) * sn + (c - 1) * sc + h * w) * F, "col2im in");
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++)
      for (int p = 0; p < h * w; p++) in[b * sn + ch * sc + p] = 0;
  for (int ch = 0; ch < c; ch++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++)
        for (int b = 0; b < n; b++)
          for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
              in[b * sn + ch * sc + (int64_t)(y + i) * w + x + j] +=
                  col[((int64_t)(ch * k + i) * k + j) * npix + b * pix + y * ow + x];
  return 0;
}

int cuops_bias_act(float *y, const float *bias, int64_t rows, int64_t cols,
                   int per_row, int relu, cudaStream_t s) {
  LAUNCH(s);
  dev_range(y, (size_t)(rows * cols) * F, "bias_act y");
  dev_range(bias, (size_t)(per_row ? rows : cols) * F, "bias_act bias");
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      float v = y[r * cols + c] + bias[per_row ? r : c];
      y[r * cols + c] = relu ? ct_relu(v) : v;
    }
  return 0;
}

int cuops_relu_backward(const float *y, float *dy, int64_t count,
                        cudaStream_t s) {
  LAUNCH(s);
  dev_range(y, (size_t)count * F, "relu_backward y");
  dev_range(dy, (size_t)count * F, "relu_backward dy");
  for (int64_t i = 0; i < count; i++) dy[i] = ct_relu_grad(y[i], dy[i]);
  return 0;
}

int cuops_maxpool_forward(const float *in, float *out, int32_t *arg,
                          int64_t planes, int h, int w, int p, cudaStream_t s) {
  LAUNCH(s);
  const int ph = h / p, pw = w / p;
  dev_range(in, (size_t)(planes * h * w) * F, "maxpool in");
  dev_range(out, (size_t)(planes * ph * pw) * F, "maxpool out");
  dev_range(arg, (size_t)(planes * ph * pw) * sizeof(int32_t), "maxpool arg");
  for (int64_t q = 0; q < planes; q++)
    for (int y = 0; y < ph; y++)
      for (int x = 0; x < pw; x++) {
        const float *src = in + q * h * w;
        int best = y * p * w + x * p;
        for (int i = 0; i < p; i++)
          for (int j = 0; j < p; j++) {
            int off = (y * p + i) * w + x * p + j;
            if (src[off] > src[best]) best = off;
          }
        out[q * ph * pw + y * pw + x] = src[best];
        arg[q * ph * pw + y * pw + x] = best;
      }
  return 0;
}

int cuops_maxpool_backward(const float *dout, const int32_t *arg, float *din,
                           int64_t planes, int h, int w, int p,
                           cudaStream_t s) {
  LAUNCH(s);
  const int ph = h / p, pw = w / p;
  dev_range(din, (size_t)(planes * h * w) * F, "maxpool_backward din");
  dev_range(dout, (size_t)(planes * ph * pw) * F, "maxpool_backward dout");
  dev_range(arg, (size_t)(planes * ph * pw) * sizeof(int32_t), "maxpool_backward arg");
  memset(din, 0, (size_t)(planes * h * w) * F);
  for (int64_t q = 0; q < planes; q++)
    for (int o = 0; o < ph * pw; o++)
      din[q * h * w + arg[q * ph * pw + o]] = dout[q * ph * pw + o];
  return 0;
}

int cuops_permute_cn(const float *in, float *out, int c, int n, int hw,
                     int to_nchw, cudaStream_t s) {
  LAUNCH(s);
  dev_range(in, (size_t)c * n * hw * F, "permute in");
  dev_range(out, (size_t)c * n * hw * F, "permute out");
  for (int ch = 0; ch < c; ch++)
    for (int b = 0; b < n; b++)
      for (int q = 0; q < hw; q++) {
        int64_t cn = ((int64_t)ch * n + b) * hw + q, nc = ((int64_t)b * c + ch) * hw + q;
        if (to_nchw) out[nc] = in[cn];
        else out[cn] = in[nc];
      }
  return 0;
}

int cuops_sum_strided(const float *in, float *out, int n_out, int64_t n_red,
                      int64_t out_stride, int64_t red_stride, cudaStream_t s) {
  LAUNCH(s);
  dev_range(out, (size_t)n_out * F, "sum_strided out");
  dev_range(in, (size_t)((n_out - 1) * out_stride + (n_red - 1) * red_stride + 1) * F,
            "sum_strided in");
  for (int o = 0; o < n_out; o++) {
    double acc = 0;
    for (int64_t j = 0; j < n_red; j++) acc += in[o * out_stride + j * red_stride];
    out[o] = (float)acc;
  }
  return 0;
}

int cuops_xent(const float *logits, const uint8_t *labels, float *row_loss,
               int32_t *row_correct, float *dlogits, int n, int classes,
               float scale, cudaStream_t s) {
  LAUNCH(s);
  dev_range(logits, (size_t)n * classes * F, "xent logits");
  dev_range(labels, (size_t)n, "xent labels");
  dev_range(row_loss, (size_t)n * F, "xent row_loss");
  dev_range(row_correct, (size_t)n * sizeof(int32_t), "xent row_correct");
  if (dlogits) dev_range(dlogits, (size_t)n * classes * F, "xent dlogits");
  for (int r = 0; r < n; r++) {
    const float *x = logits + (int64_t)r * classes;
    int arg = 0;
    float m = x[0];
    for (int j = 1; j < classes; j++)
      if (x[j] > m) m = x[j], arg = j;
    float sum = 0;
    for (int j = 0; j < classes; j++) sum += ct_exp_shifted(x[j], m);
    row_loss[r] = ct_xent_loss(x[labels[r]], m, sum);
    row_correct[r] = arg == labels[r];
    if (dlogits)
      for (int j = 0; j < classes; j++)
        dlogits[(int64_t)r * classes + j] = ct_xent_grad(x[j], m, sum, j == labels[r], scale);
  }
  return 0;
}

int cuops_xent_sums(const float *row_loss, const int32_t *row_correct, int n,
                    double *out_loss, int32_t *out_correct, cudaStream_t s) {
  LAUNCH(s);
  dev_range(row_loss, (size_t)n * F, "xent_sums row_loss");
  dev_range(row_correct, (size_t)n * sizeof(int32_t), "xent_sums row_correct");
  dev_range(out_loss, sizeof(double), "xent_sums out_loss");
  dev_range(out_correct, sizeof(int32_t), "xent_sums out_correct");
  double l = 0;
  int32_t c = 0;
  for (int i = 0; i < n; i++) l += row_loss[i], c += row_correct[i];
  *out_loss = l;
  *out_correct = c;
  return 0;
}

int cuops_sgd(float *p, float *v, const float *g, int64_t count, float lr,
              float momentum, float weight_decay, cudaStream_t s) {
  LAUNCH(s);
  dev_range(p, (size_t)count * F, "sgd p");
  dev_range(v, (size_t)count * F, "sgd v");
  dev_range(g, (size_t)count * F, "sgd g");
  for (int64_t i = 0; i < count; i++)
    p[i] = ct_sgd_update(p[i], &v[i], g[i], lr, momentum, weight_decay);
  return 0;
}

int cuops_adam(float *p, float *m, float *v, const float *g, int64_t count,
               float lr, float beta1, float beta2, float eps,
               float weight_decay, float bc1, float bc2, cudaStream_t s) {
  LAUNCH(s);
  dev_range(p, (size_t)count * F, "adam p");
  dev_range(m, (size_t)count * F, "adam m");
  dev_range(v, (size_t)count * F, "adam v");
  dev_range(g, (size_t)count * F, "adam g");
  for (int64_t i = 0; i < count; i++)
    p[i] = ct_adam_update(p[i], &m[i], &v[i], g[i], lr, beta1, beta2, eps,
                          weight_decay, bc1, bc2);
  return 0;
}

int cuops_fill(float *p, int64_t count, float value, cudaStream_t s) {
  LAUNCH(s);
  dev_range(p, (size_t)count * F, "fill");
  for (int64_t i = 0; i < count; i++) p[i] = value;
  return 0;
}
