/* The kernels of kernels/cuda_ops.h as plain CPU loops over the test
 * double's device memory (mock_cuda.c): every pointer range-checked against
 * its allocation, every launch a fault-injection point. */
#include <errno.h>
#include <string.h>

#include "cuda_ops.h"
#include "mock_cuda.h"
#include "ops_math.h"

#define LAUNCH(stream)                            \
  do {                                            \
    if (mock_cuda_failing()) return -EIO;         \
    mock_cuda_on_stream((stream), "kernel stream"); \
  } while (0)
#define F sizeof(float)

int cuops_im2col(const float *in, float *col, int n, int c, int h, int w,
                 int k, int64_t sn, int64_t sc, cudaStream_t s) {
  LAUNCH(s);
  const int oh = h - k + 1, ow = w - k + 1;
  const int64_t pix = (int64_t)oh * ow, npix = n * pix;
  mock_cuda_dev_range(col, (size_t)(c * k * k * npix) * F, "im2col col");
  mock_cuda_dev_range(in, (size_t)((n - 1) * sn + (c - 1) * sc + h * w) * F, "im2col in");
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
  mock_cuda_dev_range(col, (size_t)(c * k * k * npix) * F, "col2im col");
  mock_cuda_dev_range(in, (size_t)((n - 1) * sn + (c - 1) * sc + h * w) * F, "col2im in");
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
  mock_cuda_dev_range(y, (size_t)(rows * cols) * F, "bias_act y");
  mock_cuda_dev_range(bias, (size_t)(per_row ? rows : cols) * F, "bias_act bias");
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
  mock_cuda_dev_range(y, (size_t)count * F, "relu_backward y");
  mock_cuda_dev_range(dy, (size_t)count * F, "relu_backward dy");
  for (int64_t i = 0; i < count; i++) dy[i] = ct_relu_grad(y[i], dy[i]);
  return 0;
}

int cuops_maxpool_forward(const float *in, float *out, int32_t *arg,
                          int64_t planes, int h, int w, int p, cudaStream_t s) {
  LAUNCH(s);
  const int ph = h / p, pw = w / p;
  mock_cuda_dev_range(in, (size_t)(planes * h * w) * F, "maxpool in");
  mock_cuda_dev_range(out, (size_t)(planes * ph * pw) * F, "maxpool out");
  mock_cuda_dev_range(arg, (size_t)(planes * ph * pw) * sizeof(int32_t), "maxpool arg");
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
  mock_cuda_dev_range(din, (size_t)(planes * h * w) * F, "maxpool_backward din");
  mock_cuda_dev_range(dout, (size_t)(planes * ph * pw) * F, "maxpool_backward dout");
  mock_cuda_dev_range(arg, (size_t)(planes * ph * pw) * sizeof(int32_t), "maxpool_backward arg");
  memset(din, 0, (size_t)(planes * h * w) * F);
  for (int64_t q = 0; q < planes; q++)
    for (int o = 0; o < ph * pw; o++)
      din[q * h * w + arg[q * ph * pw + o]] = dout[q * ph * pw + o];
  return 0;
}

int cuops_permute_cn(const float *in, float *out, int c, int n, int hw,
                     int to_nchw, cudaStream_t s) {
  LAUNCH(s);
  mock_cuda_dev_range(in, (size_t)c * n * hw * F, "permute in");
  mock_cuda_dev_range(out, (size_t)c * n * hw * F, "permute out");
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
  mock_cuda_dev_range(out, (size_t)n_out * F, "sum_strided out");
  mock_cuda_dev_range(in, (size_t)((n_out - 1) * out_stride + (n_red - 1) * red_stride + 1) * F,
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
  mock_cuda_dev_range(logits, (size_t)n * classes * F, "xent logits");
  mock_cuda_dev_range(labels, (size_t)n, "xent labels");
  mock_cuda_dev_range(row_loss, (size_t)n * F, "xent row_loss");
  mock_cuda_dev_range(row_correct, (size_t)n * sizeof(int32_t), "xent row_correct");
  if (dlogits) mock_cuda_dev_range(dlogits, (size_t)n * classes * F, "xent dlogits");
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
  mock_cuda_dev_range(row_loss, (size_t)n * F, "xent_sums row_loss");
  mock_cuda_dev_range(row_correct, (size_t)n * sizeof(int32_t), "xent_sums row_correct");
  mock_cuda_dev_range(out_loss, sizeof(double), "xent_sums out_loss");
  mock_cuda_dev_range(out_correct, sizeof(int32_t), "xent_sums out_correct");
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
  mock_cuda_dev_range(p, (size_t)count * F, "sgd p");
  mock_cuda_dev_range(v, (size_t)count * F, "sgd v");
  mock_cuda_dev_range(g, (size_t)count * F, "sgd g");
  for (int64_t i = 0; i < count; i++)
    p[i] = ct_sgd_update(p[i], &v[i], g[i], lr, momentum, weight_decay);
  return 0;
}

int cuops_adam(float *p, float *m, float *v, const float *g, int64_t count,
               float lr, float beta1, float beta2, float eps,
               float weight_decay, float bc1, float bc2, cudaStream_t s) {
  LAUNCH(s);
  mock_cuda_dev_range(p, (size_t)count * F, "adam p");
  mock_cuda_dev_range(m, (size_t)count * F, "adam m");
  mock_cuda_dev_range(v, (size_t)count * F, "adam v");
  mock_cuda_dev_range(g, (size_t)count * F, "adam g");
  for (int64_t i = 0; i < count; i++)
    p[i] = ct_adam_update(p[i], &m[i], &v[i], g[i], lr, beta1, beta2, eps,
                          weight_decay, bc1, bc2);
  return 0;
}

int cuops_fill(float *p, int64_t count, float value, cudaStream_t s) {
  LAUNCH(s);
  mock_cuda_dev_range(p, (size_t)count * F, "fill");
  for (int64_t i = 0; i < count; i++) p[i] = value;
  return 0;
}
