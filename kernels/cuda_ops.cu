// CUDA kernels of ctune-train's layers and optimisers (see cuda_ops.h). The
// per-element math comes from ops_math.h, shared with the CPU backend.
#include "cuda_ops.h"

#include <errno.h>
#include <math.h>

#include "ops_math.h"

extern "C" {
#include "log.h"
}

#define CUOPS_THREADS 256

// Launches go through these so tests/cuda/emu_cuda_ops.cpp can run the same
// kernels on the host; SYNC marks kernels that use __syncthreads.
#ifndef CUOPS_LAUNCH
#define CUOPS_LAUNCH(kernel, grid, stream, ...)                                                    \
  kernel<<<(grid), CUOPS_THREADS, 0, (stream)>>>(__VA_ARGS__)
#define CUOPS_LAUNCH_SYNC CUOPS_LAUNCH
#endif
// Grid-stride loops: a bounded grid covers any count.
#define CUOPS_MAX_BLOCKS 65535

static unsigned grid_for(int64_t count) {
  int64_t b = (count + CUOPS_THREADS - 1) / CUOPS_THREADS;
  return (unsigned)(b > CUOPS_MAX_BLOCKS ? CUOPS_MAX_BLOCKS : b);
}

// Every launch is followed by this: a bad configuration or a sticky error
// from an earlier kernel surfaces here, named.
static int launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    log_error("CUDA kernel %s failed: %s", what, cudaGetErrorString(e));
    return -EIO;
  }
  return 0;
}

#define FOR_EACH(i, count)                                                                         \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
       i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_im2col(const float *in, float *col, int n, int c, int h, int w, int k, int64_t sn,
                         int64_t sc) {
  const int oh = h - k + 1, ow = w - k + 1;
  const int64_t pix = (int64_t)oh * ow, npix = (int64_t)n * pix;
  const int64_t total = (int64_t)c * k * k * npix;
  FOR_EACH(i, total) {
    int64_t r = i / npix, cj = i - r * npix;
    int64_t b = cj / pix, q = cj - b * pix;
    int y = (int)(q / ow), x = (int)(q - (int64_t)y * ow);
    int ch = (int)(r / (k * k)), ij = (int)(r - (int64_t)ch * k * k);
    int ki = ij / k, kj = ij - ki * k;
    col[i] = in[b * sn + ch * sc + (int64_t)(y + ki) * w + (x + kj)];
  }
}

__global__ void k_col2im(const float *col, float *in, int n, int c, int h, int w, int k, int64_t sn,
                         int64_t sc) {
  const int oh = h - k + 1, ow = w - k + 1;
  const int64_t pix = (int64_t)oh * ow, npix = (int64_t)n * pix;
  const int64_t plane = (int64_t)h * w, total = (int64_t)n * c * plane;
  FOR_EACH(i, total) {
    int64_t b = i / ((int64_t)c * plane), rest = i - b * c * plane;
    int ch = (int)(rest / plane);
    int64_t off = rest - (int64_t)ch * plane;
    int yy = (int)(off / w), xx = (int)(off - (int64_t)yy * w);
    float acc = 0.0f;
    for (int ki = 0; ki < k; ki++) {
      int y = yy - ki;
      if (y < 0 || y >= oh) continue;
      for (int kj = 0; kj < k; kj++) {
        int x = xx - kj;
        if (x < 0 || x >= ow) continue;
        int64_t r = ((int64_t)ch * k + ki) * k + kj;
        acc += col[r * npix + b * pix + (int64_t)y * ow + x];
      }
    }
    in[b * sn + ch * sc + off] = acc;
  }
}

__global__ void k_bias_act(float *y, const float *bias, int64_t rows, int64_t cols, int per_row,
                           int relu) {
  FOR_EACH(i, rows * cols) {
    int64_t r = i / cols;
    float v = y[i] + bias[per_row ? r : i - r * cols];
    y[i] = relu ? ct_relu(v) : v;
  }
}

static_assert(CUOPS_RED_PARTS <= CUOPS_THREADS, "the last block adds one partial per thread");

// Per-output sums over many blocks, deterministic: block b of a reduction
// with `parts` blocks per output sums output b / parts's slice b % parts of
// j (a fixed stride and tree), writes it to partial[b], and the block that
// finishes its output last (an integer ticket: which block that is may vary,
// the order it adds the partials in does not) adds them up with the same
// tree, in slice order, and leaves the ticket at 0 again. With one part the block writes out[o]
// itself. Elem: elem(o, j), the j-th value of output o (it may write it back too).
template <class Elem>
__device__ void reduce_outputs(const Elem &elem, float *out, int64_t n_red, int parts,
                               unsigned *ticket, float *partial) {
  __shared__ float part[CUOPS_THREADS];
  __shared__ int last;
  const int o = (int)(blockIdx.x / parts), p = (int)(blockIdx.x - (unsigned)o * parts);
  const int64_t chunk = (n_red + parts - 1) / parts, lo = (int64_t)p * chunk;
  const int64_t hi = lo + chunk < n_red ? lo + chunk : n_red;
  float acc = 0.0f;
  for (int64_t j = lo + threadIdx.x; j < hi; j += CUOPS_THREADS) acc += elem(o, j);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = CUOPS_THREADS / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (parts == 1) {
    if (threadIdx.x == 0) out[o] = part[0];
    return;
  }
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = part[0];
    __threadfence(); // the partial is visible before the ticket counts it
    last = atomicAdd(&ticket[o], 1u) == (unsigned)parts - 1;
  }
  __syncthreads();
  if (!last) return;
  // the last block: the partials in slice order, one per thread, same tree
  const volatile float *mine = partial + (int64_t)o * parts;
  part[threadIdx.x] = (int)threadIdx.x < parts ? mine[threadIdx.x] : 0.0f;
  __syncthreads();
  for (int half = CUOPS_THREADS / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[o] = part[0];
    ticket[o] = 0;
  }
}

struct strided_elem {
  const float *in;
  int64_t out_stride, red_stride;
  __device__ float operator()(int o, int64_t j) const {
    return in[o * out_stride + j * red_stride];
  }
};

__global__ void k_sum_strided(const float *in, float *out, int64_t n_red, int64_t out_stride,
                              int64_t red_stride, int parts, unsigned *ticket, float *partial) {
  reduce_outputs(strided_elem{in, out_stride, red_stride}, out, n_red, parts, ticket, partial);
}

// The conv layers' bias, ReLU and pooling (cuops_conv_pool_forward): one
// thread per pooled output activates its window in place and keeps the max.
__global__ void k_conv_pool_forward(float *conv, const float *bias, float *out, int32_t *arg, int c,
                                    int n, int h, int w, int p, int nchw) {
  const int ph = h / p, pw = w / p;
  const int64_t per = (int64_t)ph * pw;
  FOR_EACH(o, (int64_t)c * n * per) {
    int64_t plane = o / per;
    int q = (int)(o - plane * per), py = q / pw, px = q - py * pw;
    int ch = (int)(plane / n);
    int64_t row = plane - (int64_t)ch * n;
    float *src = conv + plane * h * w;
    const float b = bias[ch];
    int best_off = py * p * w + px * p;
    float best = 0.0f;
    for (int dy = 0; dy < p; dy++)
      for (int dx = 0; dx < p; dx++) {
        int off = (py * p + dy) * w + px * p + dx;
        float v = ct_relu(src[off] + b);
        src[off] = v;
        if ((dy == 0 && dx == 0) || v > best) { // the first maximum wins
          best = v;
          best_off = off;
        }
      }
    out[nchw ? (row * c + ch) * per + q : o] = best;
    arg[o] = best_off;
  }
}

// Element j of channel ch of the pool's and ReLU's backward: the pooled
// gradient if this element won its window, through the ReLU; written to din.
struct pool_elem {
  const float *dout;
  const int32_t *arg;
  const float *y;
  float *din;
  int c, n, h, w, p, nchw;
  __device__ float operator()(int ch, int64_t j) const {
    const int64_t plane_sz = (int64_t)h * w, i = (int64_t)ch * n * plane_sz + j;
    const int ph = h / p, pw = w / p;
    int64_t row = j / plane_sz;
    int off = (int)(j - row * plane_sz), yy = off / w, xx = off - yy * w;
    int py = yy / p, px = xx / p;
    float v = 0.0f;
    if (py < ph && px < pw) {
      int64_t per = (int64_t)ph * pw, q = (int64_t)py * pw + px;
      int64_t o = ((int64_t)ch * n + row) * per + q;
      if (arg[o] == off) v = dout[nchw ? (row * c + ch) * per + q : o];
    }
    v = ct_relu_grad(y[i], v);
    din[i] = v;
    return v;
  }
};

__global__ void k_conv_pool_backward(pool_elem e, float *dbias, int parts, unsigned *ticket,
                                     float *partial) {
  reduce_outputs(e, dbias, (int64_t)e.n * e.h * e.w, parts, ticket, partial);
}

// Element j (the row) of column o of a linear layer's ReLU backward.
struct relu_col_elem {
  const float *y;
  float *dy;
  int cols;
  __device__ float operator()(int o, int64_t j) const {
    int64_t i = j * cols + o;
    float v = ct_relu_grad(y[i], dy[i]);
    dy[i] = v;
    return v;
  }
};

__global__ void k_relu_backward_sum(relu_col_elem e, float *dbias, int64_t rows, int parts,
                                    unsigned *ticket, float *partial) {
  reduce_outputs(e, dbias, rows, parts, ticket, partial);
}

// Cross-entropy and its sums in one block: each thread takes rows t, t+256,
// ... and adds their losses in double, then one tree; thread 0 updates the
// running sums and the counters.
static_assert(CUOPS_XENT_MAX_CLASSES <= CUOPS_THREADS, "one thread per class at least");

__global__ void k_xent_step(const float *logits, const uint8_t *labels, float *dlogits,
                            float *dbias, int n, int classes, float scale, cuops_loss_out out) {
  __shared__ double lsum[CUOPS_THREADS];
  __shared__ int csum[CUOPS_THREADS];
  __shared__ float colsum[CUOPS_THREADS];
  double l = 0.0;
  int right = 0;
  for (int r = threadIdx.x; r < n; r += CUOPS_THREADS) {
    const float *x = logits + (int64_t)r * classes;
    int label = labels[r], arg = 0;
    float m = x[0];
    for (int j = 1; j < classes; j++)
      if (x[j] > m) {
        m = x[j];
        arg = j;
      }
    float s = 0.0f;
    for (int j = 0; j < classes; j++) s += ct_exp_shifted(x[j], m);
    l += ct_xent_loss(x[label], m, s);
    right += arg == label;
    if (dlogits)
      for (int j = 0; j < classes; j++)
        dlogits[(int64_t)r * classes + j] = ct_xent_grad(x[j], m, s, j == label, scale);
  }
  lsum[threadIdx.x] = l;
  csum[threadIdx.x] = right;
  __syncthreads();
  for (int half = CUOPS_THREADS / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) {
      lsum[threadIdx.x] += lsum[threadIdx.x + half];
      csum[threadIdx.x] += csum[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (dbias) {
    // the bias gradient: groups of `classes` threads, thread j of group g
    // adds column j of rows g, g + groups, ...; then thread j adds the
    // groups' sums in order (dlogits came from this block: the barriers
    // above made them visible)
    const int groups = CUOPS_THREADS / classes, j = threadIdx.x % classes;
    const int g = threadIdx.x / classes;
    float acc = 0.0f;
    if (g < groups)
      for (int r = g; r < n; r += groups) acc += dlogits[(int64_t)r * classes + j];
    colsum[threadIdx.x] = acc;
    __syncthreads();
    if ((int)threadIdx.x < classes) {
      float sum = 0.0f;
      for (int q = 0; q < groups; q++) sum += colsum[q * classes + threadIdx.x];
      dbias[threadIdx.x] = sum;
    }
  }
  if (threadIdx.x == 0) {
    double sum = lsum[0];
    *out.sum_loss = sum;
    *out.sum_correct = csum[0];
    out.acc_loss[0] += sum;
    out.acc_correct[0] += csum[0];
    if (!isfinite(sum)) out.nonfinite[0] = 1;
    if (out.cursor) out.cursor[0] += out.cursor_add;
  }
}

__global__ void k_sgd(float *p, float *v, const float *g, int64_t count, float lr, float momentum,
                      float wd) {
  FOR_EACH(i, count) p[i] = ct_sgd_update(p[i], &v[i], g[i], lr, momentum, wd);
}

__global__ void k_adam(float *p, float *m, float *v, const float *g, int64_t count, float lr,
                       float b1, float b2, float eps, float wd, float bc1, float bc2) {
  FOR_EACH(i, count)
  p[i] = ct_adam_update(p[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, bc1, bc2);
}

__global__ void k_fill(float *p, int64_t count, float value) { FOR_EACH(i, count) p[i] = value; }

// The graph-friendly step's kernels (see cuda_ops.h).
__global__ void k_gather_u8(const uint8_t *pix, const uint8_t *lab, const int32_t *order,
                            const int64_t *cursor, int first, int n, int64_t dim, float *x,
                            uint8_t *y) {
  const int64_t base = *cursor + first;
  FOR_EACH(i, (int64_t)n * dim) {
    int64_t r = i / dim, j = i - r * dim;
    int64_t img = order[base + r];
    // the trainer's normalisation (trainer/data.c), bit for bit
    x[i] = ((float)pix[img * dim + j] / 255.0f - 0.5f) / 0.5f;
    if (j == 0) y[r] = lab[img];
  }
}

__global__ void k_tick(int64_t *ctr, int64_t add) {
  if (blockIdx.x == 0 && threadIdx.x == 0) ctr[0] += add;
}

__global__ void k_adam_bias(int64_t *step, float beta1, float beta2, float *bc) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    int64_t t = ++step[0];
    bc[0] = (float)(1.0 - pow((double)beta1, (double)t));
    bc[1] = (float)(1.0 - pow((double)beta2, (double)t));
  }
}

__global__ void k_adam_dev(float *p, float *m, float *v, const float *g, int64_t count, float lr,
                           float beta1, float beta2, float eps, float wd, const float *bc) {
  const float bc1 = bc[0], bc2 = bc[1];
  FOR_EACH(i, count) {
    p[i] = ct_adam_update(p[i], &m[i], &v[i], g[i], lr, beta1, beta2, eps, wd, bc1, bc2);
  }
}

extern "C" {

int cuops_im2col(const float *in, float *col, int n, int c, int h, int w, int k, int64_t sn,
                 int64_t sc, cudaStream_t s) {
  int64_t total = (int64_t)c * k * k * n * (h - k + 1) * (w - k + 1);
  if (total <= 0) return n == 0 ? 0 : -EINVAL;
  CUOPS_LAUNCH(k_im2col, grid_for(total), s, in, col, n, c, h, w, k, sn, sc);
  return launched("im2col");
}

int cuops_col2im(const float *col, float *in, int n, int c, int h, int w, int k, int64_t sn,
                 int64_t sc, cudaStream_t s) {
  int64_t total = (int64_t)n * c * h * w;
  if (total <= 0 || h < k || w < k) return n == 0 ? 0 : -EINVAL;
  CUOPS_LAUNCH(k_col2im, grid_for(total), s, col, in, n, c, h, w, k, sn, sc);
  return launched("col2im");
}

int cuops_bias_act(float *y, const float *bias, int64_t rows, int64_t cols, int per_row, int relu,
                   cudaStream_t s) {
  if (rows * cols <= 0) return 0;
  CUOPS_LAUNCH(k_bias_act, grid_for(rows * cols), s, y, bias, rows, cols, per_row, relu);
  return launched("bias_act");
}

int cuops_red_parts(int64_t n_red) {
  int64_t p = n_red / CUOPS_RED_MIN;
  return p < 1 ? 1 : p > CUOPS_RED_PARTS ? CUOPS_RED_PARTS : (int)p;
}

int cuops_sum_strided(const float *in, float *out, int n_out, int64_t n_red, int64_t out_stride,
                      int64_t red_stride, struct cuops_scratch red, cudaStream_t s) {
  if (n_out <= 0) return 0;
  const int parts = cuops_red_parts(n_red);
  if (parts > 1 && n_out > red.outputs) return -EINVAL;
  CUOPS_LAUNCH_SYNC(k_sum_strided, (unsigned)n_out * parts, s, in, out, n_red, out_stride,
                    red_stride, parts, red.ticket, red.partial);
  return launched("sum_strided");
}

int cuops_conv_pool_forward(float *conv, const float *bias, float *out, int32_t *argmax, int c,
                            int n, int h, int w, int p, int nchw, cudaStream_t s) {
  if (p < 1 || h < p || w < p) return -EINVAL;
  int64_t total = (int64_t)c * n * (h / p) * (w / p);
  if (total <= 0) return 0;
  CUOPS_LAUNCH(k_conv_pool_forward, grid_for(total), s, conv, bias, out, argmax, c, n, h, w, p,
               nchw);
  return launched("conv_pool_forward");
}

int cuops_conv_pool_backward(const float *dout, const int32_t *argmax, const float *y, float *din,
                             float *dbias, int c, int n, int h, int w, int p, int nchw,
                             struct cuops_scratch red, cudaStream_t s) {
  if (p < 1 || h < p || w < p) return -EINVAL;
  if (c <= 0 || n <= 0) return 0;
  const int parts = cuops_red_parts((int64_t)n * h * w);
  if (parts > 1 && c > red.outputs) return -EINVAL;
  pool_elem e = {dout, argmax, y, din, c, n, h, w, p, nchw};
  CUOPS_LAUNCH_SYNC(k_conv_pool_backward, (unsigned)c * parts, s, e, dbias, parts, red.ticket,
                    red.partial);
  return launched("conv_pool_backward");
}

int cuops_relu_backward_sum(const float *y, float *dy, float *dbias, int rows, int cols,
                            struct cuops_scratch red, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return 0;
  const int parts = cuops_red_parts(rows);
  if (parts > 1 && cols > red.outputs) return -EINVAL;
  relu_col_elem e = {y, dy, cols};
  CUOPS_LAUNCH_SYNC(k_relu_backward_sum, (unsigned)cols * parts, s, e, dbias, (int64_t)rows, parts,
                    red.ticket, red.partial);
  return launched("relu_backward_sum");
}

int cuops_xent_step(const float *logits, const uint8_t *labels, float *dlogits, float *dbias, int n,
                    int classes, float scale, struct cuops_loss_out out, cudaStream_t s) {
  if (classes < 1 || n < 0) return -EINVAL;
  if (dbias && (!dlogits || classes > CUOPS_XENT_MAX_CLASSES)) return -EINVAL;
  CUOPS_LAUNCH_SYNC(k_xent_step, 1, s, logits, labels, dlogits, dbias, n, classes, scale, out);
  return launched("xent_step");
}

int cuops_sgd(float *p, float *v, const float *g, int64_t count, float lr, float momentum,
              float weight_decay, cudaStream_t s) {
  if (count <= 0) return 0;
  CUOPS_LAUNCH(k_sgd, grid_for(count), s, p, v, g, count, lr, momentum, weight_decay);
  return launched("sgd");
}

int cuops_adam(float *p, float *m, float *v, const float *g, int64_t count, float lr, float beta1,
               float beta2, float eps, float weight_decay, float bc1, float bc2, cudaStream_t s) {
  if (count <= 0) return 0;
  CUOPS_LAUNCH(k_adam, grid_for(count), s, p, m, v, g, count, lr, beta1, beta2, eps, weight_decay,
               bc1, bc2);
  return launched("adam");
}

int cuops_gather_u8(const uint8_t *pix, const uint8_t *lab, const int32_t *order,
                    const int64_t *cursor, int first, int n, int64_t dim, float *x, uint8_t *y,
                    cudaStream_t s) {
  if (n <= 0 || dim <= 0) return 0;
  CUOPS_LAUNCH(k_gather_u8, grid_for((int64_t)n * dim), s, pix, lab, order, cursor, first, n, dim,
               x, y);
  return launched("gather_u8");
}

int cuops_tick(int64_t *ctr, int64_t add, cudaStream_t s) {
  CUOPS_LAUNCH(k_tick, 1, s, ctr, add);
  return launched("tick");
}

int cuops_adam_dev(float *p, float *m, float *v, const float *g, int64_t count, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int64_t *step,
                   float *bc, cudaStream_t s) {
  CUOPS_LAUNCH(k_adam_bias, 1, s, step, beta1, beta2, bc);
  int rc = launched("adam_bias");
  if (rc || count <= 0) return rc;
  CUOPS_LAUNCH(k_adam_dev, grid_for(count), s, p, m, v, g, count, lr, beta1, beta2, eps,
               weight_decay, bc);
  return launched("adam_dev");
}

int cuops_fill(float *p, int64_t count, float value, cudaStream_t s) {
  if (count <= 0) return 0;
  CUOPS_LAUNCH(k_fill, grid_for(count), s, p, count, value);
  return launched("fill");
}

} // extern "C"
