/* CPU layers: convolution by the direct AVX2 kernels (conv_avx2.c) or, as
 * the reference and on other CPUs, im2col + OpenBLAS sgemm over the whole
 * batch; max pool, ReLU, linear layers by the AVX2 GEMM kernels
 * (gemm_avx2.c) or, as the reference, sgemm; softmax cross-entropy. */
#include "layers.h"

#include <string.h>

#include "blas_load.h"
#include "conv_avx2.h"
#include "gemm_avx2.h"
#include "ops_math.h"

static int kernels_mode = LAYERS_KERNELS_AUTO;

void layers_set_kernels(int mode) { kernels_mode = mode; }

/* Images per im2col chunk: the chunk's column matrix stays within about
 * 256 KiB so it is still in L2 when sgemm (and, backward, col2im) reads it.
 * Measured on the cnn: whole-batch im2col at batch 64 ran ~15% slower. */
#define CONV_CHUNK_FLOATS (64 * 1024)

int layers_conv_chunk(const struct layer_shape *s, int B) {
  const int64_t per = (int64_t)s->in_c * MODEL_CNN_K * MODEL_CNN_K * s->out_h * s->out_w;
  int64_t c = CONV_CHUNK_FLOATS / per;
  if (c < 1) c = 1;
  if (c > B) c = B;
  return (int)c;
}

int64_t layers_conv_col_size(const struct layer_shape *s, int B) {
  return (int64_t)s->in_c * MODEL_CNN_K * MODEL_CNN_K * s->out_h * s->out_w *
         layers_conv_chunk(s, B);
}

/* Rows are short (24 or 8 floats for the cnn on 28x28): a plain loop beats
 * a memcpy call, so keep GCC from turning the loop back into one. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_MEMCPY_IDIOM __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define NO_MEMCPY_IDIOM
#endif

static inline void copy_row(float *restrict dst, const float *restrict src, int n) {
  for (int i = 0; i < n; i++) dst[i] = src[i];
}

/* For images b0..b0+nb of the batch:
 * col[(c*k+ki)*k+kj][(b-b0)*P + oy*OW + ox] = in[c][b][oy+ki][ox+kj]. The
 * body is instantiated for the cnn's row widths on 28x28 (24, 8) and 32x32
 * (28, 10) inputs so the compiler emits fixed vector moves per row; any other
 * width takes the generic loop. */
#define IM2COL_BODY(OWX)                                                                           \
  for (int c = 0; c < s->in_c; c++)                                                                \
    for (int ki = 0; ki < k; ki++)                                                                 \
      for (int kj = 0; kj < k; kj++) {                                                             \
        float *row = col + ((int64_t)(c * k + ki) * k + kj) * N;                                   \
        for (int b = b0; b < b0 + nb; b++) {                                                       \
          const float *src = in + ((int64_t)c * B + b) * H * W + ki * W + kj;                      \
          for (int oy = 0; oy < OH; oy++) {                                                        \
            copy_row(row, src + oy * W, OWX);                                                      \
            row += OWX;                                                                            \
          }                                                                                        \
        }                                                                                          \
      }

NO_MEMCPY_IDIOM static void im2col(const struct layer_shape *s, int B, int b0, int nb,
                                   const float *in, float *col) {
  const int k = MODEL_CNN_K, H = s->in_h, W = s->in_w;
  const int OH = s->out_h, OW = s->out_w;
  const int64_t N = (int64_t)nb * OH * OW;
  switch (OW) {
  case 24:
    IM2COL_BODY(24);
    break;
  case 8:
    IM2COL_BODY(8);
    break;
  case 28:
    IM2COL_BODY(28);
    break;
  case 10:
    IM2COL_BODY(10);
    break;
  default:
    IM2COL_BODY(OW);
    break;
  }
}
#undef IM2COL_BODY

/* The adjoint of im2col for images b0..b0+nb: din += scattered dcol. */
static void col2im(const struct layer_shape *s, int B, int b0, int nb, const float *dcol,
                   float *din) {
  const int k = MODEL_CNN_K, H = s->in_h, W = s->in_w;
  const int OH = s->out_h, OW = s->out_w;
  const int64_t N = (int64_t)nb * OH * OW;
  for (int c = 0; c < s->in_c; c++)
    for (int ki = 0; ki < k; ki++)
      for (int kj = 0; kj < k; kj++) {
        const float *row = dcol + ((int64_t)(c * k + ki) * k + kj) * N;
        for (int b = b0; b < b0 + nb; b++) {
          float *dst = din + ((int64_t)c * B + b) * H * W + ki * W + kj;
          for (int oy = 0; oy < OH; oy++) {
            float *d = dst + oy * W;
            for (int ox = 0; ox < OW; ox++) d[ox] += row[ox];
            row += OW;
          }
        }
      }
}

static void add_bias_cnhw(int M, int64_t N, const float *b, float *out) {
  for (int m = 0; m < M; m++) {
    float *o = out + (int64_t)m * N;
    const float bm = b[m];
    for (int64_t n = 0; n < N; n++) o[n] += bm;
  }
}

static void sum_cnhw(int M, int64_t N, const float *d, float *db) {
  for (int m = 0; m < M; m++) {
    const float *dm = d + (int64_t)m * N;
    float acc = 0.0f;
    for (int64_t n = 0; n < N; n++) acc += dm[n];
    db[m] = acc;
  }
}

void layers_conv_forward(const struct layer_shape *s, int B, const float *in, const float *w,
                         const float *b, float *col, float *out) {
  if (kernels_mode == LAYERS_KERNELS_AUTO && conv_avx2_forward(s, B, in, w, out) == 0) {
    if (b) add_bias_cnhw(s->out_c, (int64_t)B * s->out_h * s->out_w, b, out);
    return;
  }
  layers_conv_forward_ref(s, B, in, w, b, col, out);
}

void layers_conv_pool_forward(const struct layer_shape *s, int B, const float *in, const float *w,
                              const float *b, float *col, float *act, float *out, int32_t *arg) {
  if (kernels_mode == LAYERS_KERNELS_AUTO && conv_avx2_forward_pool(s, B, in, w, b, out, arg) == 0)
    return;
  layers_conv_forward(s, B, in, w, NULL, col, act);
  layers_pool_bias_relu_forward(s->out_c, B, s->out_h, s->out_w, act, b, out, arg);
}

void layers_conv_forward_ref(const struct layer_shape *s, int B, const float *in, const float *w,
                             const float *b, float *col, float *out) {
  const int K = s->in_c * MODEL_CNN_K * MODEL_CNN_K, M = s->out_c;
  const int P = s->out_h * s->out_w, N = B * P;
  const int chunk = layers_conv_chunk(s, B);
  for (int b0 = 0; b0 < B; b0 += chunk) {
    const int nb = B - b0 < chunk ? B - b0 : chunk;
    im2col(s, B, b0, nb, in, col);
    blas_load_sgemm(CblasNoTrans, CblasNoTrans, M, nb * P, K, 1.0f, w, K, col, nb * P, 0.0f,
                    out + (int64_t)b0 * P, N);
  }
  if (b) add_bias_cnhw(M, N, b, out);
}

void layers_bias_relu_cnhw(int C, int64_t per_c, const float *b, float *x) {
  for (int c = 0; c < C; c++) {
    float *p = x + c * per_c;
    const float bc = b[c];
    for (int64_t i = 0; i < per_c; i++) p[i] = ct_relu(p[i] + bc);
  }
}

void layers_bias_relu_backward_cnhw(int C, int64_t per_c, const float *y, float *dy, float *db) {
  for (int c = 0; c < C; c++) {
    const float *yc = y + c * per_c;
    float *d = dy + c * per_c;
    float acc = 0.0f;
    for (int64_t i = 0; i < per_c; i++) {
      d[i] = ct_relu_grad(yc[i], d[i]);
      acc += d[i];
    }
    db[c] = acc;
  }
}

void layers_conv_backward(const struct layer_shape *s, int B, const float *in, const float *dout,
                          const float *w, float *dw, float *db, float *col, float *dcol,
                          float *din) {
  if (kernels_mode == LAYERS_KERNELS_AUTO && conv_avx2_backward(s, B, in, dout, w, dw, din) == 0) {
    if (db) sum_cnhw(s->out_c, (int64_t)B * s->out_h * s->out_w, dout, db);
    return;
  }
  layers_conv_backward_ref(s, B, in, dout, w, dw, db, col, dcol, din);
}

void layers_conv_pool_backward(const struct layer_shape *s, int B, const float *in, const float *y,
                               const float *dy, const int32_t *arg, const float *w, float *dw,
                               float *db, float *col, float *dcol, float *dact, float *din) {
  /* dw and db from the pooled gradient's nonzero terms; din, when wanted,
   * straight from the pooled gradient too, read from a copy in dact (4x
   * the size) since din may be dy; or else from the dense gradient the pool
   * backward spreads, written last */
  if (kernels_mode == LAYERS_KERNELS_AUTO && conv_avx2_pooled_supports(s) == 0) {
    const int64_t n_y = (int64_t)s->out_c * B * s->pool_h * s->pool_w;
    const int x_pooled = din && conv_avx2_x_pooled_supports(s) == 0;
    if (x_pooled)
      memcpy(dact, dy, sizeof(float) * (size_t)n_y);
    else if (din)
      layers_pool_bias_relu_backward(s->out_c, B, s->out_h, s->out_w, y, dy, arg, dact, db);
    conv_avx2_backward_pooled(s, B, in, y, dy, arg, dw, db);
    if (x_pooled)
      conv_avx2_backward_x_pooled(s, B, y, dact, arg, w, din);
    else if (din)
      conv_avx2_backward(s, B, in, dact, w, NULL, din);
    return;
  }
  layers_pool_bias_relu_backward(s->out_c, B, s->out_h, s->out_w, y, dy, arg, dact, db);
  layers_conv_backward(s, B, in, dact, w, dw, NULL, col, dcol, din);
}

void layers_conv_backward_ref(const struct layer_shape *s, int B, const float *in,
                              const float *dout, const float *w, float *dw, float *db, float *col,
                              float *dcol, float *din) {
  const int K = s->in_c * MODEL_CNN_K * MODEL_CNN_K, M = s->out_c;
  const int P = s->out_h * s->out_w, N = B * P;
  const int chunk = layers_conv_chunk(s, B);
  if (db) sum_cnhw(M, N, dout, db);
  if (din) memset(din, 0, sizeof(float) * (size_t)s->in_c * B * s->in_h * s->in_w);
  for (int b0 = 0; b0 < B; b0 += chunk) {
    const int nb = B - b0 < chunk ? B - b0 : chunk;
    const float *dchunk = dout + (int64_t)b0 * P;
    im2col(s, B, b0, nb, in, col);
    blas_load_sgemm(CblasNoTrans, CblasTrans, M, K, nb * P, 1.0f, dchunk, N, col, nb * P,
                    b0 ? 1.0f : 0.0f, dw, K);
    if (din) {
      blas_load_sgemm(CblasTrans, CblasNoTrans, K, nb * P, M, 1.0f, w, K, dchunk, N, 0.0f, dcol,
                      nb * P);
      col2im(s, B, b0, nb, dcol, din);
    }
  }
}

void layers_relu_forward(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = ct_relu(x[i]);
}

void layers_relu_backward(const float *y, float *dy, int64_t n) {
  for (int64_t i = 0; i < n; i++) dy[i] = ct_relu_grad(y[i], dy[i]);
}

/* The window's winner among (2y, 2x), (2y, 2x+1), (2y+1, 2x), (2y+1, 2x+1):
 * the first maximum wins on ties, as in PyTorch. */
static inline int pool_argmax(const float *src, int w, int y, int x, float *bv_out) {
  int best = (2 * y) * w + 2 * x;
  float bv = src[best];
  const int cand[3] = {best + 1, best + w, best + w + 1};
  for (int i = 0; i < 3; i++)
    if (src[cand[i]] > bv) {
      bv = src[cand[i]];
      best = cand[i];
    }
  *bv_out = bv;
  return best;
}

void layers_maxpool_forward(int planes, int h, int w, const float *in, float *out, int32_t *arg) {
  const int ph = h / 2, pw = w / 2;
  for (int p = 0; p < planes; p++) {
    const float *src = in + (int64_t)p * h * w;
    float *dst = out + (int64_t)p * ph * pw;
    int32_t *a = arg + (int64_t)p * ph * pw;
    for (int y = 0; y < ph; y++)
      for (int x = 0; x < pw; x++) {
        float bv;
        a[y * pw + x] = pool_argmax(src, w, y, x, &bv);
        dst[y * pw + x] = bv;
      }
  }
}

void layers_maxpool_backward(int planes, int h, int w, const float *dout, const int32_t *arg,
                             float *din) {
  const int64_t po = (int64_t)(h / 2) * (w / 2);
  memset(din, 0, sizeof(float) * (size_t)planes * h * w);
  for (int p = 0; p < planes; p++) {
    float *d = din + (int64_t)p * h * w;
    const float *g = dout + p * po;
    const int32_t *a = arg + p * po;
    for (int64_t i = 0; i < po; i++) d[a[i]] += g[i];
  }
}

/* The fused pool stages run four windows at a time in SSE2 (every x86-64
 * has it): the even and odd columns of the window's two rows are
 * deinterleaved, then the candidates are taken in the scalar code's order
 * with the same strict >, so values and winners are the scalar code's bit
 * for bit. Rows narrower than four windows, and the windows left over, take
 * the scalar code. */
#if defined(__SSE2__)
#define POOL_SSE2 1
#include <emmintrin.h>

static inline __m128 pool_sel(__m128 m, __m128 a, __m128 b) {
  return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b));
}

/* Four windows of row y from x: their maxima and winners. */
static inline __m128 pool4_max(const float *src, int w, int y, int x, __m128i *arg) {
  const float *r0 = src + 2 * y * w + 2 * x, *r1 = r0 + w;
  const __m128 a0 = _mm_loadu_ps(r0), a1 = _mm_loadu_ps(r0 + 4);
  const __m128 c0 = _mm_loadu_ps(r1), c1 = _mm_loadu_ps(r1 + 4);
  const __m128 cand[3] = {_mm_shuffle_ps(a0, a1, 0xdd), _mm_shuffle_ps(c0, c1, 0x88),
                          _mm_shuffle_ps(c0, c1, 0xdd)};
  const __m128i base = _mm_add_epi32(_mm_set1_epi32(2 * y * w + 2 * x), _mm_setr_epi32(0, 2, 4, 6));
  const int off[3] = {1, w, w + 1};
  __m128 bv = _mm_shuffle_ps(a0, a1, 0x88);
  __m128 bi = _mm_castsi128_ps(base);
  for (int i = 0; i < 3; i++) {
    const __m128 m = _mm_cmpgt_ps(cand[i], bv);
    bv = pool_sel(m, cand[i], bv);
    bi = pool_sel(m, _mm_castsi128_ps(_mm_add_epi32(base, _mm_set1_epi32(off[i]))), bi);
  }
  *arg = _mm_castps_si128(bi);
  return bv;
}
#else
#define POOL_SSE2 0
#endif

void layers_pool_bias_relu_forward(int C, int B, int h, int w, const float *in, const float *b,
                                   float *out, int32_t *arg) {
  const int ph = h / 2, pw = w / 2;
  for (int c = 0; c < C; c++) {
    const float bc = b[c];
    for (int64_t p = (int64_t)c * B; p < (int64_t)(c + 1) * B; p++) {
      const float *src = in + p * h * w;
      float *dst = out + p * ph * pw;
      int32_t *a = arg + p * ph * pw;
      for (int y = 0; y < ph; y++) {
        int x = 0;
#if POOL_SSE2
        /* max(v, 0) is ct_relu: +0 for -0 and for NaN, as x > 0 ? x : 0 */
        const __m128 vb = _mm_set1_ps(bc), zero = _mm_setzero_ps();
        for (; x + 4 <= pw; x += 4) {
          __m128i wi;
          const __m128 bv = pool4_max(src, w, y, x, &wi);
          _mm_storeu_ps(dst + y * pw + x, _mm_max_ps(_mm_add_ps(bv, vb), zero));
          _mm_storeu_si128((__m128i *)(a + y * pw + x), wi);
        }
#endif
        for (; x < pw; x++) {
          float bv;
          a[y * pw + x] = pool_argmax(src, w, y, x, &bv);
          dst[y * pw + x] = ct_relu(bv + bc);
        }
      }
    }
  }
}

/* The backward writes every element of the plane once: at each window's
 * four places 0 + g at the winner and 0 elsewhere (the values memset then
 * += would leave, -0 included), then zero the row and column no window
 * covers when h or w is odd. */
void layers_pool_bias_relu_backward(int C, int B, int h, int w, const float *y, const float *dy,
                                    const int32_t *arg, float *din, float *db) {
  const int ph = h / 2, pw = w / 2;
  const int64_t po = (int64_t)ph * pw, plane = (int64_t)h * w;
  for (int c = 0; c < C; c++) {
    float acc = 0.0f;
#if POOL_SSE2
    __m128 acc4 = _mm_setzero_ps();
#endif
    for (int64_t p = (int64_t)c * B; p < (int64_t)(c + 1) * B; p++) {
      const float *yp = y + p * po, *dp = dy + p * po;
      const int32_t *a = arg + p * po;
      float *d = din + p * plane;
      for (int oy = 0; oy < ph; oy++) {
        float *d0 = d + 2 * oy * w, *d1 = d0 + w;
        int x = 0;
#if POOL_SSE2
        const __m128 zero = _mm_setzero_ps();
        for (; x + 4 <= pw; x += 4) {
          const int64_t i = (int64_t)oy * pw + x;
          const __m128 g =
              _mm_and_ps(_mm_cmpgt_ps(_mm_loadu_ps(yp + i), zero), _mm_loadu_ps(dp + i));
          acc4 = _mm_add_ps(acc4, g);
          const __m128i ai = _mm_loadu_si128((const __m128i *)(a + i));
          const __m128i base =
              _mm_add_epi32(_mm_set1_epi32(2 * oy * w + 2 * x), _mm_setr_epi32(0, 2, 4, 6));
          __m128 v[4];
          const int off[4] = {0, 1, w, w + 1};
          for (int k = 0; k < 4; k++) {
            const __m128i at = _mm_add_epi32(base, _mm_set1_epi32(off[k]));
            v[k] = _mm_add_ps(_mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(ai, at)), g), zero);
          }
          _mm_storeu_ps(d0 + 2 * x, _mm_unpacklo_ps(v[0], v[1]));
          _mm_storeu_ps(d0 + 2 * x + 4, _mm_unpackhi_ps(v[0], v[1]));
          _mm_storeu_ps(d1 + 2 * x, _mm_unpacklo_ps(v[2], v[3]));
          _mm_storeu_ps(d1 + 2 * x + 4, _mm_unpackhi_ps(v[2], v[3]));
        }
#endif
        for (; x < pw; x++) {
          const int64_t i = (int64_t)oy * pw + x;
          const float g = ct_relu_grad(yp[i], dp[i]);
          acc += g;
          const int32_t at = 2 * oy * w + 2 * x;
          d0[2 * x] = a[i] == at ? 0.0f + g : 0.0f;
          d0[2 * x + 1] = a[i] == at + 1 ? 0.0f + g : 0.0f;
          d1[2 * x] = a[i] == at + w ? 0.0f + g : 0.0f;
          d1[2 * x + 1] = a[i] == at + w + 1 ? 0.0f + g : 0.0f;
        }
        if (w % 2) d0[w - 1] = d1[w - 1] = 0.0f;
      }
      if (h % 2) memset(d + (int64_t)(h - 1) * w, 0, sizeof(float) * (size_t)w);
    }
#if POOL_SSE2
    float lanes[4];
    _mm_storeu_ps(lanes, acc4);
    acc += (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
    db[c] = acc;
  }
}

static void add_bias_rows(int B, int n, const float *b, float *out) {
  for (int i = 0; i < B; i++) {
    float *o = out + (int64_t)i * n;
    for (int j = 0; j < n; j++) o[j] += b[j];
  }
}

static void sum_rows(int B, int n, const float *d, float *db) {
  for (int j = 0; j < n; j++) db[j] = 0.0f;
  for (int i = 0; i < B; i++) {
    const float *r = d + (int64_t)i * n;
    for (int j = 0; j < n; j++) db[j] += r[j];
  }
}

/* The AVX2 GEMMs up to this batch, sgemm above. Measured on the cnn's and
 * mlp's widths (one thread, best of 300): at batch 2 the GEMMs run 3-4x
 * faster than sgemm, at 64 1.0-1.7x (but 0.9x on the mlp's 784 x 256
 * weight gradient), at 256 sgemm is 5-10% ahead (2x on that gradient,
 * which it blocks for the cache); the whole mlp trained 13% slower at
 * batch 128 on the GEMMs, 16% faster at 64. */
#define LINEAR_AVX2_MAX_BATCH 64

static int linear_fast(int B) {
  return kernels_mode == LAYERS_KERNELS_AUTO && B <= LINEAR_AVX2_MAX_BATCH;
}

void layers_linear_forward(int B, int n_in, int n_out, const float *in, const float *w,
                           const float *b, float *out) {
  if (!linear_fast(B) || gemm_avx2_nt(B, n_out, n_in, in, w, out)) {
    layers_linear_forward_ref(B, n_in, n_out, in, w, b, out);
    return;
  }
  add_bias_rows(B, n_out, b, out);
}

void layers_linear_forward_ref(int B, int n_in, int n_out, const float *in, const float *w,
                               const float *b, float *out) {
  blas_load_sgemm(CblasNoTrans, CblasTrans, B, n_out, n_in, 1.0f, in, n_in, w, n_in, 0.0f, out,
                  n_out);
  add_bias_rows(B, n_out, b, out);
}

void layers_linear_backward(int B, int n_in, int n_out, const float *dout, const float *in,
                            const float *w, float *dw, float *db, float *din) {
  if (!linear_fast(B) || gemm_avx2_tn(n_out, n_in, B, dout, in, dw) ||
      (din && gemm_avx2_nn(B, n_in, n_out, dout, w, din))) {
    layers_linear_backward_ref(B, n_in, n_out, dout, in, w, dw, db, din);
    return;
  }
  sum_rows(B, n_out, dout, db);
}

void layers_linear_backward_ref(int B, int n_in, int n_out, const float *dout, const float *in,
                                const float *w, float *dw, float *db, float *din) {
  blas_load_sgemm(CblasTrans, CblasNoTrans, n_out, n_in, B, 1.0f, dout, n_out, in, n_in, 0.0f, dw,
                  n_in);
  sum_rows(B, n_out, dout, db);
  if (din)
    blas_load_sgemm(CblasNoTrans, CblasNoTrans, B, n_in, n_out, 1.0f, dout, n_out, w, n_in, 0.0f,
                    din, n_in);
}

void layers_xent(int B, int k, const float *logits, const uint8_t *y, float *dlogits,
                 double *loss_sum, int *correct) {
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
      for (int j = 0; j < k; j++) d[j] = ct_xent_grad(x[j], mx, sum, j == t, scale);
    }
  }
  *loss_sum += ls;
  *correct += ok;
}

void layers_cnhw_to_flat(int C, int B, int S, const float *in, float *out) {
  for (int c = 0; c < C; c++)
    for (int b = 0; b < B; b++)
      memcpy(out + ((int64_t)b * C + c) * S, in + ((int64_t)c * B + b) * S, sizeof(float) * S);
}

void layers_flat_to_cnhw(int C, int B, int S, const float *in, float *out) {
  for (int c = 0; c < C; c++)
    for (int b = 0; b < B; b++)
      memcpy(out + ((int64_t)c * B + b) * S, in + ((int64_t)b * C + c) * S, sizeof(float) * S);
}
