/* CPU layers: im2col + OpenBLAS sgemm convolution over the whole batch, max
 * pool, ReLU, linear layers on sgemm, softmax cross-entropy. */
#include "layers.h"

#include <cblas.h>
#include <string.h>

#include "ops_math.h"

int64_t layers_conv_col_size(const struct layer_shape *s, int B) {
  return (int64_t)s->in_c * MODEL_CNN_K * MODEL_CNN_K * B * s->out_h *
         s->out_w;
}

/* col[(c*k+ki)*k+kj][b*P + oy*OW + ox] = in[c][b][oy+ki][ox+kj]: each copy is
 * one contiguous output row, so the loop is memcpy-shaped. */
static void im2col(const struct layer_shape *s, int B, const float *in,
                   float *col) {
  const int k = MODEL_CNN_K, H = s->in_h, W = s->in_w;
  const int OH = s->out_h, OW = s->out_w;
  const int64_t N = (int64_t)B * OH * OW;
  for (int c = 0; c < s->in_c; c++)
    for (int ki = 0; ki < k; ki++)
      for (int kj = 0; kj < k; kj++) {
        float *row = col + ((int64_t)(c * k + ki) * k + kj) * N;
        for (int b = 0; b < B; b++) {
          const float *src = in + ((int64_t)c * B + b) * H * W + ki * W + kj;
          for (int oy = 0; oy < OH; oy++) {
            memcpy(row, src + oy * W, sizeof(float) * OW);
            row += OW;
          }
        }
      }
}

/* The adjoint of im2col: din (zeroed first) += scattered dcol. */
static void col2im(const struct layer_shape *s, int B, const float *dcol,
                   float *din) {
  const int k = MODEL_CNN_K, H = s->in_h, W = s->in_w;
  const int OH = s->out_h, OW = s->out_w;
  const int64_t N = (int64_t)B * OH * OW;
  memset(din, 0, sizeof(float) * (size_t)s->in_c * B * H * W);
  for (int c = 0; c < s->in_c; c++)
    for (int ki = 0; ki < k; ki++)
      for (int kj = 0; kj < k; kj++) {
        const float *row = dcol + ((int64_t)(c * k + ki) * k + kj) * N;
        for (int b = 0; b < B; b++) {
          float *dst = din + ((int64_t)c * B + b) * H * W + ki * W + kj;
          for (int oy = 0; oy < OH; oy++) {
            float *d = dst + oy * W;
            for (int ox = 0; ox < OW; ox++) d[ox] += row[ox];
            row += OW;
          }
        }
      }
}

void layers_conv_forward(const struct layer_shape *s, int B, const float *in,
                         const float *w, const float *b, float *col,
                         float *out) {
  const int K = s->in_c * MODEL_CNN_K * MODEL_CNN_K, M = s->out_c;
  const int N = B * s->out_h * s->out_w;
  im2col(s, B, in, col);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, w, K,
              col, N, 0.0f, out, N);
  for (int m = 0; m < M; m++) {
    float *o = out + (int64_t)m * N;
    const float bm = b[m];
    for (int n = 0; n < N; n++) o[n] += bm;
  }
}

void layers_conv_backward(const struct layer_shape *s, int B, const float *dout,
                          const float *col, const float *w, float *dw,
                          float *db, float *dcol, float *din) {
  const int K = s->in_c * MODEL_CNN_K * MODEL_CNN_K, M = s->out_c;
  const int N = B * s->out_h * s->out_w;
  for (int m = 0; m < M; m++) {
    const float *d = dout + (int64_t)m * N;
    float acc = 0.0f;
    for (int n = 0; n < N; n++) acc += d[n];
    db[m] = acc;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, K, N, 1.0f, dout, N,
              col, N, 0.0f, dw, K);
  if (din) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, M, 1.0f, w, K,
                dout, N, 0.0f, dcol, N);
    col2im(s, B, dcol, din);
  }
}

void layers_relu_forward(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = ct_relu(x[i]);
}

void layers_relu_backward(const float *y, float *dy, int64_t n) {
  for (int64_t i = 0; i < n; i++) dy[i] = ct_relu_grad(y[i], dy[i]);
}

void layers_maxpool_forward(int planes, int h, int w, const float *in,
                            float *out, int32_t *arg) {
  const int ph = h / 2, pw = w / 2;
  for (int p = 0; p < planes; p++) {
    const float *src = in + (int64_t)p * h * w;
    float *dst = out + (int64_t)p * ph * pw;
    int32_t *a = arg + (int64_t)p * ph * pw;
    for (int y = 0; y < ph; y++)
      for (int x = 0; x < pw; x++) {
        /* first maximum wins on ties, as in PyTorch */
        int best = (2 * y) * w + 2 * x;
        float bv = src[best];
        const int cand[3] = {best + 1, best + w, best + w + 1};
        for (int i = 0; i < 3; i++)
          if (src[cand[i]] > bv) {
            bv = src[cand[i]];
            best = cand[i];
          }
        dst[y * pw + x] = bv;
        a[y * pw + x] = best;
      }
  }
}

void layers_maxpool_backward(int planes, int h, int w, const float *dout,
                             const int32_t *arg, float *din) {
  const int64_t po = (int64_t)(h / 2) * (w / 2);
  memset(din, 0, sizeof(float) * (size_t)planes * h * w);
  for (int p = 0; p < planes; p++) {
    float *d = din + (int64_t)p * h * w;
    const float *g = dout + p * po;
    const int32_t *a = arg + p * po;
    for (int64_t i = 0; i < po; i++) d[a[i]] += g[i];
  }
}

void layers_linear_forward(int B, int n_in, int n_out, const float *in,
                           const float *w, const float *b, float *out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, n_out, n_in, 1.0f,
              in, n_in, w, n_in, 0.0f, out, n_out);
  for (int i = 0; i < B; i++) {
    float *o = out + (int64_t)i * n_out;
    for (int j = 0; j < n_out; j++) o[j] += b[j];
  }
}

void layers_linear_backward(int B, int n_in, int n_out, const float *dout,
                            const float *in, const float *w, float *dw,
                            float *db, float *din) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n_out, n_in, B, 1.0f,
              dout, n_out, in, n_in, 0.0f, dw, n_in);
  for (int j = 0; j < n_out; j++) db[j] = 0.0f;
  for (int i = 0; i < B; i++) {
    const float *d = dout + (int64_t)i * n_out;
    for (int j = 0; j < n_out; j++) db[j] += d[j];
  }
  if (din)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, n_in, n_out,
                1.0f, dout, n_out, w, n_in, 0.0f, din, n_in);
}

void layers_xent(int B, int k, const float *logits, const uint8_t *y,
                 float *dlogits, double *loss_sum, int *correct) {
  const float scale = 1.0f / (float)B;
  double ls = 0.0;
  int ok = 0;
  for (int i = 0; i < B; i++) {
    const float *x = logits + (int64_t)i * k;
    int arg = 0;
    float mx = x[0];
    for (int j = 1; j < k; j++)
      if (x[j] > mx) {
        mx = x[j];
        arg = j;
      }
    float sum = 0.0f;
    for (int j = 0; j < k; j++) sum += ct_exp_shifted(x[j], mx);
    const int t = y[i];
    if (t < k) {
      ls += ct_xent_loss(x[t], mx, sum);
      ok += arg == t;
    }
    if (dlogits) {
      float *d = dlogits + (int64_t)i * k;
      for (int j = 0; j < k; j++)
        d[j] = ct_xent_grad(x[j], mx, sum, j == t, scale);
    }
  }
  *loss_sum += ls;
  *correct += ok;
}

void layers_cnhw_to_flat(int C, int B, int S, const float *in, float *out) {
  for (int c = 0; c < C; c++)
    for (int b = 0; b < B; b++)
      memcpy(out + ((int64_t)b * C + c) * S, in + ((int64_t)c * B + b) * S,
             sizeof(float) * S);
}

void layers_flat_to_cnhw(int C, int B, int S, const float *in, float *out) {
  for (int c = 0; c < C; c++)
    for (int b = 0; b < B; b++)
      memcpy(out + ((int64_t)c * B + b) * S, in + ((int64_t)b * C + c) * S,
             sizeof(float) * S);
}
