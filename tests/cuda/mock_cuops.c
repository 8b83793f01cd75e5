/* The kernels of kernels/cuda_ops.h as plain CPU loops over the test
 * double's device memory (mock_cuda.c): every pointer range-checked against
 * its allocation when launched, every launch a fault-injection point, and the
 * work queued on its stream like a real launch. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "mock_cuda.h"
#include "ops_math.h"

#define F sizeof(float)

/* Checks the launch, then queues body(args) on the stream. */
#define LAUNCH(stream, body, args)                                                                 \
  do {                                                                                             \
    if (mock_cuda_failing()) return -EIO;                                                          \
    mock_cuda_on_stream((stream), "kernel stream");                                                \
    mock_cuda_enqueue((stream), body, mock_cuda_args(&(args), sizeof(args)));                      \
    return 0;                                                                                      \
  } while (0)

struct conv_args {
  const float *in;
  float *col; /* im2col: written; col2im: read */
  float *out; /* col2im: the image written */
  int n, c, h, w, k;
  int64_t sn, sc;
};

static void run_im2col(void *arg) {
  struct conv_args *a = arg;
  const int oh = a->h - a->k + 1, ow = a->w - a->k + 1, k = a->k;
  const int64_t pix = (int64_t)oh * ow, npix = a->n * pix;
  for (int ch = 0; ch < a->c; ch++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++)
        for (int b = 0; b < a->n; b++)
          for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
              a->col[((int64_t)(ch * k + i) * k + j) * npix + b * pix + y * ow + x] =
                  a->in[b * a->sn + ch * a->sc + (int64_t)(y + i) * a->w + x + j];
  free(a);
}

static void check_conv(const struct conv_args *a, const char *what) {
  const int oh = a->h - a->k + 1, ow = a->w - a->k + 1;
  const int64_t npix = (int64_t)a->n * oh * ow;
  mock_cuda_dev_range(a->col ? (const void *)a->col : (const void *)a->in,
                      (size_t)(a->c * a->k * a->k * npix) * F, what);
  const void *img = a->out ? (const void *)a->out : (const void *)a->in;
  mock_cuda_dev_range(img, (size_t)((a->n - 1) * a->sn + (a->c - 1) * a->sc + a->h * a->w) * F,
                      what);
}

int cuops_im2col(const float *in, float *col, int n, int c, int h, int w, int k, int64_t sn,
                 int64_t sc, cudaStream_t s) {
  struct conv_args a = {in, col, NULL, n, c, h, w, k, sn, sc};
  check_conv(&a, "im2col");
  LAUNCH(s, run_im2col, a);
}

static void run_col2im(void *arg) {
  struct conv_args *a = arg;
  const float *col = a->in;
  float *in = a->out;
  const int oh = a->h - a->k + 1, ow = a->w - a->k + 1, k = a->k;
  const int64_t pix = (int64_t)oh * ow, npix = a->n * pix;
  for (int b = 0; b < a->n; b++)
    for (int ch = 0; ch < a->c; ch++)
      for (int p = 0; p < a->h * a->w; p++) in[b * a->sn + ch * a->sc + p] = 0;
  for (int ch = 0; ch < a->c; ch++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++)
        for (int b = 0; b < a->n; b++)
          for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
              in[b * a->sn + ch * a->sc + (int64_t)(y + i) * a->w + x + j] +=
                  col[((int64_t)(ch * k + i) * k + j) * npix + b * pix + y * ow + x];
  free(a);
}

int cuops_col2im(const float *col, float *in, int n, int c, int h, int w, int k, int64_t sn,
                 int64_t sc, cudaStream_t s) {
  /* in: the col matrix read; out: the image written */
  struct conv_args a = {col, NULL, in, n, c, h, w, k, sn, sc};
  const int oh = h - k + 1, ow = w - k + 1;
  mock_cuda_dev_range(col, (size_t)(c * k * k * (int64_t)n * oh * ow) * F, "col2im col");
  mock_cuda_dev_range(in, (size_t)((n - 1) * sn + (c - 1) * sc + h * w) * F, "col2im in");
  LAUNCH(s, run_col2im, a);
}

struct bias_args {
  float *y;
  const float *bias;
  int64_t rows, cols;
  int per_row, relu;
};

static void run_bias_act(void *arg) {
  struct bias_args *a = arg;
  for (int64_t r = 0; r < a->rows; r++)
    for (int64_t c = 0; c < a->cols; c++) {
      float v = a->y[r * a->cols + c] + a->bias[a->per_row ? r : c];
      a->y[r * a->cols + c] = a->relu ? ct_relu(v) : v;
    }
  free(a);
}

int cuops_bias_act(float *y, const float *bias, int64_t rows, int64_t cols, int per_row, int relu,
                   cudaStream_t s) {
  struct bias_args a = {y, bias, rows, cols, per_row, relu};
  mock_cuda_dev_range(y, (size_t)(rows * cols) * F, "bias_act y");
  mock_cuda_dev_range(bias, (size_t)(per_row ? rows : cols) * F, "bias_act bias");
  LAUNCH(s, run_bias_act, a);
}

struct sum_args {
  const float *in;
  float *out;
  int n_out;
  int64_t n_red, out_stride, red_stride;
};

static void run_sum(void *arg) {
  struct sum_args *a = arg;
  for (int o = 0; o < a->n_out; o++) {
    double acc = 0;
    for (int64_t j = 0; j < a->n_red; j++) acc += a->in[o * a->out_stride + j * a->red_stride];
    a->out[o] = (float)acc;
  }
  free(a);
}

int cuops_red_parts(int64_t n_red) {
  int64_t p = n_red / CUOPS_RED_MIN;
  return p < 1 ? 1 : p > CUOPS_RED_PARTS ? CUOPS_RED_PARTS : (int)p;
}

/* The scratch a multi-block reduction of n_out outputs would use. */
static int check_scratch(struct cuops_scratch red, int n_out, int64_t n_red, const char *what) {
  if (cuops_red_parts(n_red) == 1) return 0;
  if (n_out > red.outputs) return -EINVAL;
  mock_cuda_dev_range(red.ticket, (size_t)n_out * sizeof(unsigned), what);
  mock_cuda_dev_range(red.partial, (size_t)n_out * CUOPS_RED_PARTS * F, what);
  return 0;
}

int cuops_sum_strided(const float *in, float *out, int n_out, int64_t n_red, int64_t out_stride,
                      int64_t red_stride, struct cuops_scratch red, cudaStream_t s) {
  struct sum_args a = {in, out, n_out, n_red, out_stride, red_stride};
  if (check_scratch(red, n_out, n_red, "sum_strided scratch")) return -EINVAL;
  mock_cuda_dev_range(out, (size_t)n_out * F, "sum_strided out");
  mock_cuda_dev_range(in, (size_t)((n_out - 1) * out_stride + (n_red - 1) * red_stride + 1) * F,
                      "sum_strided in");
  LAUNCH(s, run_sum, a);
}

struct optim_args {
  float *p, *m, *v;
  const float *g;
  int64_t count;
  float lr, momentum, beta1, beta2, eps, wd, bc1, bc2;
  int adam;
};

static void run_optim(void *arg) {
  struct optim_args *a = arg;
  for (int64_t i = 0; i < a->count; i++)
    a->p[i] = a->adam ? ct_adam_update(a->p[i], &a->m[i], &a->v[i], a->g[i], a->lr, a->beta1,
                                       a->beta2, a->eps, a->wd, a->bc1, a->bc2)
                      : ct_sgd_update(a->p[i], &a->v[i], a->g[i], a->lr, a->momentum, a->wd);
  free(a);
}

int cuops_sgd(float *p, float *v, const float *g, int64_t count, float lr, float momentum,
              float weight_decay, cudaStream_t s) {
  struct optim_args a = {p, NULL, v, g, count, lr, momentum, 0, 0, 0, weight_decay, 0, 0, 0};
  mock_cuda_dev_range(p, (size_t)count * F, "sgd p");
  mock_cuda_dev_range(v, (size_t)count * F, "sgd v");
  mock_cuda_dev_range(g, (size_t)count * F, "sgd g");
  LAUNCH(s, run_optim, a);
}

int cuops_adam(float *p, float *m, float *v, const float *g, int64_t count, float lr, float beta1,
               float beta2, float eps, float weight_decay, float bc1, float bc2, cudaStream_t s) {
  struct optim_args a = {p, m, v, g, count, lr, 0, beta1, beta2, eps, weight_decay, bc1, bc2, 1};
  mock_cuda_dev_range(p, (size_t)count * F, "adam p");
  mock_cuda_dev_range(m, (size_t)count * F, "adam m");
  mock_cuda_dev_range(v, (size_t)count * F, "adam v");
  mock_cuda_dev_range(g, (size_t)count * F, "adam g");
  LAUNCH(s, run_optim, a);
}

struct fill_args {
  float *p;
  int64_t count;
  float value;
};

static void run_fill(void *arg) {
  struct fill_args *a = arg;
  for (int64_t i = 0; i < a->count; i++) a->p[i] = a->value;
  free(a);
}

int cuops_fill(float *p, int64_t count, float value, cudaStream_t s) {
  struct fill_args a = {p, count, value};
  mock_cuda_dev_range(p, (size_t)count * F, "fill");
  LAUNCH(s, run_fill, a);
}

/* ---- the graph-friendly step ---------------------------------------- */

struct gather_args {
  const uint8_t *pix, *lab;
  const int32_t *order;
  const int64_t *cursor;
  int first, n;
  int64_t dim;
  float *x;
  uint8_t *y;
};

static void run_gather(void *arg) {
  struct gather_args *a = arg;
  const int64_t base = *a->cursor + a->first;
  for (int r = 0; r < a->n; r++) {
    int64_t img = a->order[base + r];
    for (int64_t j = 0; j < a->dim; j++)
      a->x[r * a->dim + j] = ((float)a->pix[img * a->dim + j] / 255.0f - 0.5f) / 0.5f;
    a->y[r] = a->lab[img];
  }
  free(a);
}

int cuops_gather_u8(const uint8_t *pix, const uint8_t *lab, const int32_t *order,
                    const int64_t *cursor, int first, int n, int64_t dim, float *x, uint8_t *y,
                    cudaStream_t s) {
  struct gather_args a = {pix, lab, order, cursor, first, n, dim, x, y};
  if (n <= 0 || dim <= 0) return 0;
  mock_cuda_dev_range(cursor, sizeof(int64_t), "gather_u8 cursor");
  mock_cuda_dev_range(order, sizeof(int32_t), "gather_u8 order");
  mock_cuda_dev_range(x, (size_t)n * dim * F, "gather_u8 x");
  mock_cuda_dev_range(y, (size_t)n, "gather_u8 y");
  LAUNCH(s, run_gather, a);
}

struct tick_args {
  int64_t *ctr;
  int64_t add;
};

static void run_tick(void *arg) {
  struct tick_args *a = arg;
  a->ctr[0] += a->add;
  free(a);
}

int cuops_tick(int64_t *ctr, int64_t add, cudaStream_t s) {
  struct tick_args a = {ctr, add};
  mock_cuda_dev_range(ctr, sizeof(int64_t), "tick");
  LAUNCH(s, run_tick, a);
}

struct adam_dev_args {
  float *p, *m, *v;
  const float *g;
  int64_t count;
  float lr, beta1, beta2, eps, wd;
  int64_t *step;
  float *bc;
};

static void run_adam_dev(void *arg) {
  struct adam_dev_args *a = arg;
  int64_t t = ++a->step[0];
  a->bc[0] = (float)(1.0 - pow(a->beta1, (double)t));
  a->bc[1] = (float)(1.0 - pow(a->beta2, (double)t));
  for (int64_t i = 0; i < a->count; i++)
    a->p[i] = ct_adam_update(a->p[i], &a->m[i], &a->v[i], a->g[i], a->lr, a->beta1, a->beta2,
                             a->eps, a->wd, a->bc[0], a->bc[1]);
  free(a);
}

int cuops_adam_dev(float *p, float *m, float *v, const float *g, int64_t count, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int64_t *step,
                   float *bc, cudaStream_t s) {
  struct adam_dev_args a = {p, m, v, g, count, lr, beta1, beta2, eps, weight_decay, step, bc};
  mock_cuda_dev_range(step, sizeof(int64_t), "adam_dev step");
  mock_cuda_dev_range(bc, 2 * F, "adam_dev bc");
  mock_cuda_dev_range(p, (size_t)count * F, "adam_dev p");
  mock_cuda_dev_range(m, (size_t)count * F, "adam_dev m");
  mock_cuda_dev_range(v, (size_t)count * F, "adam_dev v");
  mock_cuda_dev_range(g, (size_t)count * F, "adam_dev g");
  LAUNCH(s, run_adam_dev, a);
}

/* ---- the fused layer kernels ---------------------------------------- */

struct pool_args {
  const float *dout, *y;
  float *conv, *out, *din, *dbias;
  const float *bias;
  int32_t *arg;
  int c, n, h, w, p, nchw;
};

/* The index of pooled element (ch, row, q) in the layout `nchw` names. */
static int64_t pooled_at(const struct pool_args *a, int ch, int row, int q) {
  const int64_t per = (int64_t)(a->h / a->p) * (a->w / a->p);
  return a->nchw ? ((int64_t)row * a->c + ch) * per + q : ((int64_t)ch * a->n + row) * per + q;
}

static void run_conv_pool_forward(void *arg) {
  struct pool_args *a = arg;
  const int h = a->h, w = a->w, p = a->p, ph = h / p, pw = w / p;
  for (int ch = 0; ch < a->c; ch++)
    for (int r = 0; r < a->n; r++) {
      float *src = a->conv + ((int64_t)ch * a->n + r) * h * w;
      for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++) {
          int best = y * p * w + x * p;
          for (int i = 0; i < p; i++)
            for (int j = 0; j < p; j++) {
              int off = (y * p + i) * w + x * p + j;
              src[off] = ct_relu(src[off] + a->bias[ch]);
              if (src[off] > src[best]) best = off;
            }
          a->out[pooled_at(a, ch, r, y * pw + x)] = src[best];
          a->arg[((int64_t)ch * a->n + r) * ph * pw + y * pw + x] = best;
        }
    }
  free(a);
}

int cuops_conv_pool_forward(float *conv, const float *bias, float *out, int32_t *argmax, int c,
                            int n, int h, int w, int p, int nchw, cudaStream_t s) {
  struct pool_args a = {NULL, NULL, conv, out, NULL, NULL, bias, argmax, c, n, h, w, p, nchw};
  if (p < 1 || h < p || w < p) return -EINVAL;
  const int64_t pooled = (int64_t)c * n * (h / p) * (w / p);
  mock_cuda_dev_range(conv, (size_t)((int64_t)c * n * h * w) * F, "conv_pool_forward conv");
  mock_cuda_dev_range(bias, (size_t)c * F, "conv_pool_forward bias");
  mock_cuda_dev_range(out, (size_t)pooled * F, "conv_pool_forward out");
  mock_cuda_dev_range(argmax, (size_t)pooled * sizeof(int32_t), "conv_pool_forward argmax");
  LAUNCH(s, run_conv_pool_forward, a);
}

static void run_conv_pool_backward(void *arg) {
  struct pool_args *a = arg;
  const int h = a->h, w = a->w, ph = h / a->p, pw = w / a->p;
  const int64_t plane = (int64_t)h * w;
  memset(a->din, 0, (size_t)((int64_t)a->c * a->n * plane) * F);
  for (int ch = 0; ch < a->c; ch++) {
    for (int r = 0; r < a->n; r++) {
      int64_t pl = (int64_t)ch * a->n + r;
      for (int q = 0; q < ph * pw; q++)
        a->din[pl * plane + a->arg[pl * ph * pw + q]] = a->dout[pooled_at(a, ch, r, q)];
    }
    double acc = 0;
    for (int64_t i = (int64_t)ch * a->n * plane; i < (int64_t)(ch + 1) * a->n * plane; i++) {
      a->din[i] = ct_relu_grad(a->y[i], a->din[i]);
      acc += a->din[i];
    }
    a->dbias[ch] = (float)acc;
  }
  free(a);
}

int cuops_conv_pool_backward(const float *dout, const int32_t *argmax, const float *y, float *din,
                             float *dbias, int c, int n, int h, int w, int p, int nchw,
                             struct cuops_scratch red, cudaStream_t s) {
  struct pool_args a = {dout, y, NULL, NULL, din, dbias, NULL, (int32_t *)argmax,
                        c,    n, h,    w,    p,   nchw};
  if (p < 1 || h < p || w < p) return -EINVAL;
  if (check_scratch(red, c, (int64_t)n * h * w, "conv_pool_backward scratch")) return -EINVAL;
  const int64_t pooled = (int64_t)c * n * (h / p) * (w / p), full = (int64_t)c * n * h * w;
  mock_cuda_dev_range(dout, (size_t)pooled * F, "conv_pool_backward dout");
  mock_cuda_dev_range(argmax, (size_t)pooled * sizeof(int32_t), "conv_pool_backward argmax");
  mock_cuda_dev_range(y, (size_t)full * F, "conv_pool_backward y");
  mock_cuda_dev_range(din, (size_t)full * F, "conv_pool_backward din");
  mock_cuda_dev_range(dbias, (size_t)c * F, "conv_pool_backward dbias");
  LAUNCH(s, run_conv_pool_backward, a);
}

struct relu_sum_args {
  const float *y;
  float *dy, *dbias;
  int rows, cols;
};

static void run_relu_backward_sum(void *arg) {
  struct relu_sum_args *a = arg;
  for (int j = 0; j < a->cols; j++) {
    double acc = 0;
    for (int r = 0; r < a->rows; r++) {
      int64_t i = (int64_t)r * a->cols + j;
      a->dy[i] = ct_relu_grad(a->y[i], a->dy[i]);
      acc += a->dy[i];
    }
    a->dbias[j] = (float)acc;
  }
  free(a);
}

int cuops_relu_backward_sum(const float *y, float *dy, float *dbias, int rows, int cols,
                            struct cuops_scratch red, cudaStream_t s) {
  struct relu_sum_args a = {y, dy, dbias, rows, cols};
  if (check_scratch(red, cols, rows, "relu_backward_sum scratch")) return -EINVAL;
  mock_cuda_dev_range(y, (size_t)rows * cols * F, "relu_backward_sum y");
  mock_cuda_dev_range(dy, (size_t)rows * cols * F, "relu_backward_sum dy");
  mock_cuda_dev_range(dbias, (size_t)cols * F, "relu_backward_sum dbias");
  LAUNCH(s, run_relu_backward_sum, a);
}

struct xent_args {
  const float *logits;
  const uint8_t *labels;
  float *dlogits, *dbias;
  int n, classes;
  float scale;
  struct cuops_loss_out out;
};

static void run_xent_step(void *arg) {
  struct xent_args *a = arg;
  double l = 0;
  int32_t right = 0;
  for (int r = 0; r < a->n; r++) {
    const float *x = a->logits + (int64_t)r * a->classes;
    int best = 0, label = a->labels[r];
    float m = x[0];
    for (int j = 1; j < a->classes; j++)
      if (x[j] > m) m = x[j], best = j;
    float sum = 0;
    for (int j = 0; j < a->classes; j++) sum += ct_exp_shifted(x[j], m);
    l += ct_xent_loss(x[label], m, sum);
    right += best == label;
    if (a->dlogits)
      for (int j = 0; j < a->classes; j++)
        a->dlogits[(int64_t)r * a->classes + j] = ct_xent_grad(x[j], m, sum, j == label, a->scale);
  }
  for (int j = 0; a->dbias && j < a->classes; j++) {
    double acc = 0;
    for (int r = 0; r < a->n; r++) acc += a->dlogits[(int64_t)r * a->classes + j];
    a->dbias[j] = (float)acc;
  }
  struct cuops_loss_out *o = &a->out;
  *o->sum_loss = l;
  *o->sum_correct = right;
  o->acc_loss[0] += l;
  o->acc_correct[0] += right;
  if (!isfinite(l)) o->nonfinite[0] = 1;
  if (o->cursor) o->cursor[0] += o->cursor_add;
  free(a);
}

int cuops_xent_step(const float *logits, const uint8_t *labels, float *dlogits, float *dbias, int n,
                    int classes, float scale, struct cuops_loss_out out, cudaStream_t s) {
  struct xent_args a = {logits, labels, dlogits, dbias, n, classes, scale, out};
  if (classes < 1 || n < 0) return -EINVAL;
  if (dbias && (!dlogits || classes > CUOPS_XENT_MAX_CLASSES)) return -EINVAL;
  if (dbias) mock_cuda_dev_range(dbias, (size_t)classes * F, "xent_step dbias");
  mock_cuda_dev_range(logits, (size_t)n * classes * F, "xent_step logits");
  mock_cuda_dev_range(labels, (size_t)n, "xent_step labels");
  if (dlogits) mock_cuda_dev_range(dlogits, (size_t)n * classes * F, "xent_step dlogits");
  mock_cuda_dev_range(out.sum_loss, sizeof(double), "xent_step sum_loss");
  mock_cuda_dev_range(out.sum_correct, sizeof(int32_t), "xent_step sum_correct");
  mock_cuda_dev_range(out.acc_loss, sizeof(double), "xent_step acc_loss");
  mock_cuda_dev_range(out.acc_correct, sizeof(int64_t), "xent_step acc_correct");
  mock_cuda_dev_range(out.nonfinite, sizeof(int32_t), "xent_step nonfinite");
  if (out.cursor) mock_cuda_dev_range(out.cursor, sizeof(int64_t), "xent_step cursor");
  LAUNCH(s, run_xent_step, a);
}
