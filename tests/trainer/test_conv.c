/* The fast convolution kernels (trainer/conv_avx2.c) against the reference
 * (im2col + sgemm, layers_conv_*_ref), op by op, and the linear layers' AVX2
 * GEMMs (trainer/gemm_avx2.c) against sgemm: forward, weight gradient and
 * input gradient on the cnn's shapes and on odd ones (row widths that are
 * not a multiple of 8, odd channel counts, batch 1, 2 and odd), plus the
 * dispatch: which path layers_conv_* takes on which CPU and shape. And the
 * fused pool + bias + ReLU against the separate layers: values, winners and
 * the input gradient bit for bit (the same arithmetic in the same order),
 * the bias gradient within the rounding of a reordered sum.
 *
 * Tolerance: the two paths add the same products in different orders, so
 * each output element may differ by float rounding of its sum; the test
 * allows 1e-5 of the sum of the absolute values of that element's terms
 * (computed by the reference on |inputs|); measured: under 1e-6. A wrong
 * offset, tap, mask or missing term moves an element by a whole term. */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas_load.h"
#include "conv_avx2.h"
#include "gemm_avx2.h"
#include "layers.h"
#include "splitmix.h"
#include "test_shapes.h"

#define RTOL 1e-5

static struct splitmix R;

static float *fill(int64_t n) {
  float *x = malloc(sizeof(float) * (size_t)n);
  ck_assert_ptr_nonnull(x);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(2.0 * splitmix_uniform(&R) - 1.0);
  return x;
}

static float *zeros(int64_t n) {
  float *x = calloc((size_t)n, sizeof(float));
  ck_assert_ptr_nonnull(x);
  return x;
}

static float *absolute(const float *x, int64_t n) {
  float *a = zeros(n);
  for (int64_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
  return a;
}

/* fast vs ref element by element, mag the per-element sum of |terms| */
static void expect_close(const char *what, const struct layer_shape *s, int B, const float *fast,
                         const float *ref, const float *mag, int64_t n) {
  /* Check writes every assertion's location to a file: assert only what fails */
  for (int64_t i = 0; i < n; i++)
    if (!(fabsf(fast[i] - ref[i]) <= RTOL * mag[i] + 1e-30f))
      ck_assert_msg(0,
                    "%s (in_c %d, %dx%d, out_c %d, batch %d) [%lld]: fast %.8g, reference %.8g "
                    "(terms' |sum| %.4g)",
                    what, s->in_c, s->in_h, s->in_w, s->out_c, B, (long long)i, fast[i], ref[i],
                    mag[i]);
}

static void check_shape(int in_c, int h, int w, int out_c, int B) {
  const struct layer_shape s = ts_conv_shape(in_c, h, w, out_c);
  const int64_t n_in = (int64_t)in_c * B * h * w;
  const int64_t n_out = (int64_t)out_c * B * s.out_h * s.out_w;
  const int64_t n_w = s.w_size, n_col = layers_conv_col_size(&s, B);
  float *in = fill(n_in), *wt = fill(n_w), *dout = fill(n_out);
  float *col = zeros(n_col), *dcol = zeros(n_col);
  float *out_f = fill(n_out), *out_r = zeros(n_out), *out_m = zeros(n_out);
  float *dw_f = fill(n_w), *dw_r = zeros(n_w), *dw_m = zeros(n_w);
  float *din_f = fill(n_in), *din_r = zeros(n_in), *din_m = zeros(n_in);
  float *a_in = absolute(in, n_in), *a_w = absolute(wt, n_w), *a_dout = absolute(dout, n_out);

  ck_assert_int_eq(conv_avx2_forward(&s, B, in, wt, out_f), 0);
  layers_conv_forward_ref(&s, B, in, wt, NULL, col, out_r);
  layers_conv_forward_ref(&s, B, a_in, a_w, NULL, col, out_m);
  expect_close("forward", &s, B, out_f, out_r, out_m, n_out);

  ck_assert_int_eq(conv_avx2_backward(&s, B, in, dout, wt, dw_f, din_f), 0);
  layers_conv_backward_ref(&s, B, in, dout, wt, dw_r, NULL, col, dcol, din_r);
  layers_conv_backward_ref(&s, B, a_in, a_dout, a_w, dw_m, NULL, col, dcol, din_m);
  expect_close("weight gradient", &s, B, dw_f, dw_r, dw_m, n_w);
  expect_close("input gradient", &s, B, din_f, din_r, din_m, n_in);

  /* without din only dw is written */
  float *dw_2 = fill(n_w);
  ck_assert_int_eq(conv_avx2_backward(&s, B, in, dout, wt, dw_2, NULL), 0);
  ck_assert_mem_eq(dw_2, dw_f, sizeof(float) * (size_t)n_w);
  /* without dw only din is */
  float *din_2 = fill(n_in);
  ck_assert_int_eq(conv_avx2_backward(&s, B, in, dout, wt, NULL, din_2), 0);
  ck_assert_mem_eq(din_2, din_f, sizeof(float) * (size_t)n_in);

  float *bufs[] = {in,   wt,    dout,  col,   dcol, out_f, out_r,  out_m, dw_f, dw_r,
                   dw_m, din_f, din_r, din_m, a_in, a_w,   a_dout, dw_2,  din_2};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
}

static int have_avx2(void) {
  if (conv_avx2_cpu_ok()) return 1;
  fprintf(stderr, "test_conv: this CPU has no AVX2/FMA: only the fallback is checked\n");
  return 0;
}

/* The cnn on 28x28x1 (Fashion-MNIST, MNIST) and 32x32x3 (CIFAR-10). */
START_TEST(cnn_shapes) {
  if (!have_avx2()) return;
  const int batches[] = {1, 2, 3};
  for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
    check_shape(1, 28, 28, 6, batches[i]);
    check_shape(6, 12, 12, 16, batches[i]);
    check_shape(3, 32, 32, 6, batches[i]);
    check_shape(6, 14, 14, 16, batches[i]);
  }
}
END_TEST

/* Row widths 8 + 1..7 (the overlapping last vector), channel counts that
 * leave partial register tiles, a long row. */
START_TEST(odd_shapes) {
  if (!have_avx2()) return;
  check_shape(1, 12, 12, 1, 1);  /* out 8x8 */
  check_shape(3, 12, 12, 5, 2);  /* out 8x8, a channel pair and one left */
  check_shape(2, 13, 17, 5, 3);  /* out 9x13 */
  check_shape(5, 9, 13, 7, 2);   /* out 5x9 */
  check_shape(3, 6, 19, 3, 1);   /* out 2x15 */
  check_shape(4, 11, 27, 10, 3); /* out 7x23 */
  check_shape(1, 7, 60, 9, 2);   /* out 3x56 */
  check_shape(16, 8, 12, 2, 1);  /* the widest input the kernels take */
  check_shape(2, 5, 12, 3, 2);   /* one output row */
  check_shape(2, 12, 17, 3, 2);  /* out 8x13: 8 rows of two vectors, a channel pair */
  /* whole vectors of output channels (the transposed weight gradient):
   * one vector and rows left over from a 12-row tile, two vectors and rows
   * left over from a 6-row tile, a row width off the vector */
  check_shape(3, 13, 17, 8, 3);  /* 75 rows */
  check_shape(2, 9, 14, 16, 2);  /* 50 rows */
  check_shape(16, 6, 14, 16, 1); /* 400 rows, out 2x10 */
}
END_TEST

/* The weight gradient folds its sums per chunk of images: a batch over
 * several chunks with a partial last one. */
START_TEST(large_batch) {
  if (!have_avx2()) return;
  check_shape(6, 12, 12, 16, 2 * 8 + 3); /* conv2: chunks of 16 images */
  check_shape(4, 13, 13, 8, 2 * 32 + 5); /* chunks of 25 */
  check_shape(1, 28, 28, 6, 2 * 3 + 1);  /* conv1: chunks of 3 images */
}
END_TEST

/* layers_conv_* take the fast path in AUTO mode on a supported shape, the
 * reference in REFERENCE mode, on a shape the kernels do not cover, and on
 * a CPU without AVX2; results are bit-identical to the path taken. */
static int forward_is(const struct layer_shape *s, int B, int want_fast) {
  const int64_t n_in = (int64_t)s->in_c * B * s->in_h * s->in_w;
  const int64_t n_out = (int64_t)s->out_c * B * s->out_h * s->out_w;
  float *in = fill(n_in), *wt = fill(s->w_size), *bias = fill(s->out_c);
  float *col = zeros(layers_conv_col_size(s, B)), *dcol = zeros(layers_conv_col_size(s, B));
  float *dout = fill(n_out), *out = zeros(n_out), *want = zeros(n_out);
  float *dw = zeros(s->w_size), *dw_want = zeros(s->w_size), *db = zeros(s->out_c);
  float *db_want = zeros(s->out_c), *din = zeros(n_in), *din_want = zeros(n_in);
  layers_conv_forward(s, B, in, wt, bias, col, out);
  layers_conv_backward(s, B, in, dout, wt, dw, db, col, dcol, din);
  float *dw_scratch = zeros(s->w_size);
  /* db is the same per-channel sum on both paths */
  layers_conv_backward_ref(s, B, in, dout, wt, dw_scratch, db_want, col, dcol, NULL);
  if (want_fast) {
    ck_assert_int_eq(conv_avx2_forward(s, B, in, wt, want), 0);
    for (int m = 0; m < s->out_c; m++)
      for (int64_t i = 0; i < n_out / s->out_c; i++) want[m * (n_out / s->out_c) + i] += bias[m];
    ck_assert_int_eq(conv_avx2_backward(s, B, in, dout, wt, dw_want, din_want), 0);
  } else {
    layers_conv_forward_ref(s, B, in, wt, bias, col, want);
    layers_conv_backward_ref(s, B, in, dout, wt, dw_want, NULL, col, dcol, din_want);
  }
  const int same = !memcmp(out, want, sizeof(float) * (size_t)n_out) &&
                   !memcmp(dw, dw_want, sizeof(float) * (size_t)s->w_size) &&
                   !memcmp(db, db_want, sizeof(float) * (size_t)s->out_c) &&
                   !memcmp(din, din_want, sizeof(float) * (size_t)n_in);
  float *bufs[] = {in, wt,      bias, col,     dcol, dout,     out,       want,
                   dw, dw_want, db,   db_want, din,  din_want, dw_scratch};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
  return same;
}

START_TEST(dispatch) {
  const struct layer_shape cnn = ts_conv_shape(6, 12, 12, 16),
                           narrow = ts_conv_shape(2, 10, 11, 3); /* out w 7 */
  const int fast = conv_avx2_cpu_ok();
  ck_assert_int_eq(conv_avx2_supports(&cnn), fast ? 0 : -ENOTSUP);
  ck_assert_int_eq(conv_avx2_supports(&narrow), -ENOTSUP);
  /* past the limits of the position table, row offsets and stack buffers */
  const struct layer_shape deep = ts_conv_shape(17, 12, 12, 4), tall = ts_conv_shape(1, 600, 12, 2);
  const struct layer_shape big = ts_conv_shape(16, 33, 33, 1);
  ck_assert_int_eq(conv_avx2_supports(&deep), -ENOTSUP);
  ck_assert_int_eq(conv_avx2_supports(&tall), -ENOTSUP);
  ck_assert_int_eq(conv_avx2_supports(&big), -ENOTSUP);
  if (fast) {
    const struct layer_shape edge = ts_conv_shape(16, 12, 12, 4),
                             edge_big = ts_conv_shape(16, 32, 32, 1);
    ck_assert_int_eq(conv_avx2_supports(&edge), 0);
    ck_assert_int_eq(conv_avx2_supports(&edge_big), 0);
    const struct layer_shape edge_tall = ts_conv_shape(1, 516, 12, 2); /* 512 positions */
    ck_assert_int_eq(conv_avx2_supports(&edge_tall), 0);
  }
  float x = 0.0f;
  ck_assert_int_eq(conv_avx2_forward(&narrow, 1, &x, &x, &x), -ENOTSUP);
  ck_assert_int_eq(conv_avx2_backward(&narrow, 1, &x, &x, &x, &x, &x), -ENOTSUP);

  ck_assert(forward_is(&cnn, 3, fast));
  ck_assert(forward_is(&narrow, 3, 0));
  layers_set_kernels(LAYERS_KERNELS_REFERENCE);
  ck_assert(forward_is(&cnn, 3, 0));
  layers_set_kernels(LAYERS_KERNELS_AUTO);

  /* a CPU without AVX2: every shape on the reference */
  conv_avx2_hide_cpu(1);
  ck_assert_int_eq(conv_avx2_cpu_ok(), 0);
  ck_assert_int_eq(conv_avx2_supports(&cnn), -ENOTSUP);
  ck_assert_int_eq(conv_avx2_forward(&cnn, 1, &x, &x, &x), -ENOTSUP);
  ck_assert(forward_is(&cnn, 3, 0));
  conv_avx2_hide_cpu(0);
  ck_assert_int_eq(conv_avx2_cpu_ok(), fast);
}
END_TEST

/* values on a coarse grid (ties in the pool windows, exact zeros after
 * bias + ReLU) with signed zeros among them */
static float *fill_coarse(int64_t n) {
  float *x = fill(n);
  for (int64_t i = 0; i < n; i++) x[i] = i % 7 == 3 ? -0.0f : roundf(x[i] * 3.0f) / 3.0f;
  return x;
}

static void check_pool(int C, int B, int h, int w) {
  const int64_t n_in = (int64_t)C * B * h * w, n_out = (int64_t)C * B * (h / 2) * (w / 2);
  float *in = fill_coarse(n_in), *bias = fill_coarse(C), *dy = fill_coarse(n_out);
  float *out_f = fill(n_out), *out_r = fill(n_out), *din_f = fill(n_in), *din_r = fill(n_in);
  float *db_f = fill(C), *db_r = fill(C), *dy_r = zeros(n_out);
  int32_t *arg_f = calloc((size_t)n_out, sizeof(int32_t)), *arg_r = calloc((size_t)n_out, 4);
  ck_assert(arg_f && arg_r);

  layers_pool_bias_relu_forward(C, B, h, w, in, bias, out_f, arg_f);
  layers_maxpool_forward(C * B, h, w, in, out_r, arg_r);
  layers_bias_relu_cnhw(C, (int64_t)B * (h / 2) * (w / 2), bias, out_r);
  ck_assert_mem_eq(out_f, out_r, sizeof(float) * (size_t)n_out);
  ck_assert_mem_eq(arg_f, arg_r, sizeof(int32_t) * (size_t)n_out);

  memcpy(dy_r, dy, sizeof(float) * (size_t)n_out);
  layers_pool_bias_relu_backward(C, B, h, w, out_f, dy, arg_f, din_f, db_f);
  layers_bias_relu_backward_cnhw(C, (int64_t)B * (h / 2) * (w / 2), out_r, dy_r, db_r);
  layers_maxpool_backward(C * B, h, w, dy_r, arg_r, din_r);
  ck_assert_mem_eq(din_f, din_r, sizeof(float) * (size_t)n_in);
  /* db adds the same n terms in four lanes: within (n / 4 + 3) float
   * roundings of the sum of |terms| of the sequential sum */
  const int64_t per_c = n_out / C;
  for (int c = 0; c < C; c++) {
    double mag = 0.0;
    for (int64_t i = 0; i < per_c; i++) mag += fabsf(dy_r[c * per_c + i]);
    ck_assert_msg(fabsf(db_f[c] - db_r[c]) <= (per_c / 4 + 3) * FLT_EPSILON * mag,
                  "pool db (C %d, batch %d, %dx%d) [%d]: fused %.8g, separate %.8g", C, B, h, w, c,
                  db_f[c], db_r[c]);
  }

  float *bufs[] = {in, bias, dy, out_f, out_r, din_f, din_r, db_f, db_r, dy_r};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
  free(arg_f);
  free(arg_r);
}

START_TEST(pool_bias_relu_fused) {
  check_pool(6, 3, 24, 24); /* the cnn's conv1 output */
  check_pool(16, 2, 8, 8);  /* conv2 */
  check_pool(2, 1, 7, 9);   /* odd height and width: the last row and column */
  check_pool(3, 5, 10, 5);
  /* four-window vectors with leftover windows, odd sides among them */
  check_pool(2, 3, 9, 19);
  check_pool(4, 2, 28, 28); /* CIFAR-10's conv1 output: 14 windows a row */
}
END_TEST

/* The forward fused with pool + bias + ReLU against conv_avx2_forward then
 * layers_pool_bias_relu_forward, bit for bit (the same sums in the same
 * order, the same candidates in the same order): pooled values and winners,
 * with ties planted (inputs on a coarse grid) and channels past a 6-channel
 * tile; and layers_conv_pool_forward, which takes it or the two steps. */
static void check_conv_pool(int in_c, int h, int w, int out_c, int B) {
  const struct layer_shape s = ts_conv_shape(in_c, h, w, out_c);
  const int64_t n_in = (int64_t)in_c * B * h * w;
  const int64_t n_act = (int64_t)out_c * B * s.out_h * s.out_w;
  const int64_t n_out = (int64_t)out_c * B * s.pool_h * s.pool_w;
  float *in = fill_coarse(n_in), *wt = fill_coarse(s.w_size), *bias = fill_coarse(out_c);
  float *act = zeros(n_act), *col = zeros(layers_conv_col_size(&s, B));
  float *out_f = fill(n_out), *out_r = fill(n_out), *out_l = fill(n_out);
  int32_t *arg_f = calloc((size_t)n_out, sizeof(int32_t)), *arg_r = calloc((size_t)n_out, 4);
  int32_t *arg_l = calloc((size_t)n_out, sizeof(int32_t));
  ck_assert(arg_f && arg_r && arg_l);
  ck_assert_int_eq(conv_avx2_pool_supports(&s), 0);
  ck_assert_int_eq(conv_avx2_forward_pool(&s, B, in, wt, bias, out_f, arg_f), 0);
  ck_assert_int_eq(conv_avx2_forward(&s, B, in, wt, act), 0);
  layers_pool_bias_relu_forward(out_c, B, s.out_h, s.out_w, act, bias, out_r, arg_r);
  ck_assert_mem_eq(out_f, out_r, sizeof(float) * (size_t)n_out);
  ck_assert_mem_eq(arg_f, arg_r, sizeof(int32_t) * (size_t)n_out);
  /* the fused path leaves act alone */
  for (int64_t i = 0; i < n_act; i++) act[i] = 7.0f;
  layers_conv_pool_forward(&s, B, in, wt, bias, col, act, out_l, arg_l);
  ck_assert_mem_eq(out_l, out_r, sizeof(float) * (size_t)n_out);
  ck_assert_mem_eq(arg_l, arg_r, sizeof(int32_t) * (size_t)n_out);
  ck_assert(act[0] == 7.0f && act[n_act - 1] == 7.0f);
  /* in REFERENCE mode: im2col + sgemm, then the pool */
  layers_set_kernels(LAYERS_KERNELS_REFERENCE);
  layers_conv_pool_forward(&s, B, in, wt, bias, col, act, out_l, arg_l);
  layers_set_kernels(LAYERS_KERNELS_AUTO);
  layers_conv_forward_ref(&s, B, in, wt, NULL, col, act);
  layers_pool_bias_relu_forward(out_c, B, s.out_h, s.out_w, act, bias, out_r, arg_r);
  ck_assert_mem_eq(out_l, out_r, sizeof(float) * (size_t)n_out);
  ck_assert_mem_eq(arg_l, arg_r, sizeof(int32_t) * (size_t)n_out);
  float *bufs[] = {in, wt, bias, act, col, out_f, out_r, out_l};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
  free(arg_f);
  free(arg_r);
  free(arg_l);
}

START_TEST(conv_pool_fused) {
  if (!have_avx2()) return;
  check_conv_pool(1, 28, 28, 6, 3);  /* the cnn's conv1 */
  check_conv_pool(6, 12, 12, 16, 2); /* conv2: tiles of 6, 6 and 4 channels */
  check_conv_pool(3, 10, 20, 13, 2); /* out 6x16: two vectors a row, 1 channel left */
  /* what it does not take: rows off the vector, an odd number of rows */
  const struct layer_shape w10 = ts_conv_shape(6, 14, 14, 16), odd = ts_conv_shape(2, 9, 20, 7);
  ck_assert_int_eq(conv_avx2_pool_supports(&w10), -ENOTSUP);
  ck_assert_int_eq(conv_avx2_pool_supports(&odd), -ENOTSUP);
  float x = 0.0f;
  int32_t a = 0;
  ck_assert_int_eq(conv_avx2_forward_pool(&w10, 1, &x, &x, &x, &x, &a), -ENOTSUP);
}
END_TEST

/* The weight and bias gradients straight from the pooled gradient
 * (conv_avx2_backward_pooled: by windows for one or two input channels, by
 * a list of the nonzero windows from three) against the pool backward then
 * the reference convolution backward, within the convolutions' tolerance
 * (the same nonzero terms in another order); and layers_conv_pool_backward,
 * which takes it in AUTO mode, with din straight from the pooled gradient
 * (conv_avx2_backward_x_pooled, out_h <= 10) or from the pool backward and
 * the fast input gradient: either bit for bit the latter. */
static void check_pooled(int in_c, int h, int w, int out_c, int B) {
  const struct layer_shape s = ts_conv_shape(in_c, h, w, out_c);
  const int64_t n_in = (int64_t)in_c * B * h * w;
  const int64_t n_act = (int64_t)out_c * B * s.out_h * s.out_w;
  const int64_t n_y = (int64_t)out_c * B * s.pool_h * s.pool_w, n_w = s.w_size;
  const int64_t n_col = layers_conv_col_size(&s, B);
  float *in = fill(n_in), *wt = fill(n_w), *bias = fill(out_c), *dy = fill(n_y);
  float *col = zeros(n_col), *dcol = zeros(n_col), *act = zeros(n_act), *y = zeros(n_y);
  float *dact = zeros(n_act), *a_in = absolute(in, n_in), *din = zeros(n_in);
  float *dw_f = fill(n_w), *dw_r = zeros(n_w), *dw_m = zeros(n_w), *dw_l = fill(n_w);
  float *db_f = fill(out_c), *db_r = zeros(out_c), *db_m = zeros(out_c), *db_l = fill(out_c);
  int32_t *arg = calloc((size_t)n_y, sizeof(int32_t));
  ck_assert_ptr_nonnull(arg);
  layers_conv_pool_forward(&s, B, in, wt, bias, col, act, y, arg);

  layers_pool_bias_relu_backward(out_c, B, s.out_h, s.out_w, y, dy, arg, dact, db_r);
  layers_conv_backward_ref(&s, B, in, dact, wt, dw_r, NULL, col, dcol, NULL);
  float *a_dact = absolute(dact, n_act);
  layers_conv_backward_ref(&s, B, a_in, a_dact, wt, dw_m, db_m, col, dcol, NULL);
  ck_assert_int_eq(conv_avx2_pooled_supports(&s), 0);
  ck_assert_int_eq(conv_avx2_backward_pooled(&s, B, in, y, dy, arg, dw_f, db_f), 0);
  expect_close("pooled weight gradient", &s, B, dw_f, dw_r, dw_m, n_w);
  expect_close("pooled bias gradient", &s, B, db_f, db_r, db_m, out_c);

  /* without din: the pooled kernel, dact untouched */
  for (int64_t i = 0; i < n_act; i++) dact[i] = 7.0f;
  layers_conv_pool_backward(&s, B, in, y, dy, arg, wt, dw_l, db_l, col, dcol, dact, NULL);
  ck_assert_mem_eq(dw_l, dw_f, sizeof(float) * (size_t)n_w);
  ck_assert_mem_eq(db_l, db_f, sizeof(float) * (size_t)out_c);
  ck_assert(dact[0] == 7.0f && dact[n_act - 1] == 7.0f);
  /* with din: the same dw and db; din as from the pool backward's dact and
   * the fast input gradient without dw */
  float *db_2 = zeros(out_c), *din_2 = zeros(n_in), *din_r = zeros(n_in);
  layers_conv_pool_backward(&s, B, in, y, dy, arg, wt, dw_l, db_l, col, dcol, dact, din);
  ck_assert_mem_eq(dw_l, dw_f, sizeof(float) * (size_t)n_w);
  ck_assert_mem_eq(db_l, db_f, sizeof(float) * (size_t)out_c);
  layers_pool_bias_relu_backward(out_c, B, s.out_h, s.out_w, y, dy, arg, act, db_2);
  float *dw_3 = zeros(n_w);
  ck_assert_int_eq(conv_avx2_backward(&s, B, in, act, wt, NULL, din_2), 0);
  ck_assert_mem_eq(din, din_2, sizeof(float) * (size_t)n_in);
  layers_conv_backward_ref(&s, B, in, act, wt, dw_3, NULL, col, dcol, din_r);
  float *a_w = absolute(wt, n_w), *din_m = zeros(n_in);
  layers_conv_backward_ref(&s, B, a_in, a_dact, a_w, dw_3, NULL, col, dcol, din_m);
  expect_close("input gradient after the pool", &s, B, din, din_r, din_m, n_in);
  /* din in dy's buffer (the net's second layer): the same results */
  float *dyd = zeros(n_in > n_y ? n_in : n_y);
  memcpy(dyd, dy, sizeof(float) * (size_t)n_y);
  layers_conv_pool_backward(&s, B, in, y, dyd, arg, wt, dw_3, db_l, col, dcol, dact, dyd);
  ck_assert_mem_eq(dw_3, dw_f, sizeof(float) * (size_t)n_w);
  ck_assert_mem_eq(db_l, db_f, sizeof(float) * (size_t)out_c);
  ck_assert_mem_eq(dyd, din, sizeof(float) * (size_t)n_in);
  free(dyd);
  /* in REFERENCE mode: the pool backward, then the reference convolution's */
  layers_set_kernels(LAYERS_KERNELS_REFERENCE);
  layers_conv_pool_backward(&s, B, in, y, dy, arg, wt, dw_l, db_l, col, dcol, dact, NULL);
  layers_set_kernels(LAYERS_KERNELS_AUTO);
  ck_assert_mem_eq(dw_l, dw_r, sizeof(float) * (size_t)n_w);
  ck_assert_mem_eq(db_l, db_2, sizeof(float) * (size_t)out_c);

  float *bufs[] = {in,   wt,   bias,  dy,     col,  dcol,  act,  y,    dact,
                   a_in, din,  dw_f,  dw_r,   dw_m, dw_l,  db_f, db_r, db_m,
                   db_l, db_2, din_2, a_dact, dw_3, din_r, a_w,  din_m};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
  free(arg);
}

START_TEST(conv_pool_backward_pooled) {
  if (!have_avx2()) return;
  check_pooled(1, 28, 28, 6, 3); /* the cnn's conv1 */
  check_pooled(1, 28, 28, 6, 1); /* its one plane read to the end of the input */
  check_pooled(3, 32, 32, 6, 2); /* CIFAR-10's: 196 windows a plane, 8 at a time and 4 */
  check_pooled(2, 9, 14, 5, 2);  /* out 5x10: the pool drops a row; 10 windows a plane */
  /* the list of nonzero windows: the cnn's conv2, its one image read to the
   * end of the input, CIFAR-10's conv2 (25 windows a plane), and a batch
   * over two lists of 7 images (576 windows a plane), the last partial */
  check_pooled(6, 12, 12, 16, 3);
  check_pooled(6, 12, 12, 16, 1);
  check_pooled(6, 14, 14, 16, 2);
  check_pooled(3, 52, 52, 3, 8);
  /* what it does not take: rows narrower than a vector */
  const struct layer_shape narrow = ts_conv_shape(1, 9, 9, 3);
  ck_assert_int_eq(conv_avx2_pooled_supports(&narrow), -ENOTSUP);
  float x = 0.0f;
  int32_t a = 0;
  ck_assert_int_eq(conv_avx2_backward_pooled(&narrow, 1, &x, &x, &x, &a, &x, &x), -ENOTSUP);
}
END_TEST

/* The linear layers' AVX2 GEMMs (trainer/gemm_avx2.c) against the sgemm
 * reference, with the same tolerance as the convolutions: forward, weight,
 * bias and input gradients; widths off the 8-wide vector and the 4 x 3
 * tiles, batch 1 upwards. */
static void check_linear(int B, int n_in, int n_out) {
  const struct layer_shape s = {.kind = LAYER_LINEAR, .in_c = n_in, .out_c = n_out};
  const int64_t n_x = (int64_t)B * n_in, n_y = (int64_t)B * n_out, n_w = (int64_t)n_in * n_out;
  float *in = fill(n_x), *wt = fill(n_w), *bias = fill(n_out), *dout = fill(n_y);
  float *a_in = absolute(in, n_x), *a_w = absolute(wt, n_w), *a_b = absolute(bias, n_out);
  float *a_dout = absolute(dout, n_y);
  float *out_f = fill(n_y), *out_r = zeros(n_y), *out_m = zeros(n_y);
  float *dw_f = fill(n_w), *dw_r = zeros(n_w), *dw_m = zeros(n_w);
  float *db_f = fill(n_out), *db_r = zeros(n_out), *db_m = zeros(n_out);
  float *din_f = fill(n_x), *din_r = zeros(n_x), *din_m = zeros(n_x);

  layers_linear_forward(B, n_in, n_out, in, wt, bias, out_f);
  layers_linear_forward_ref(B, n_in, n_out, in, wt, bias, out_r);
  layers_linear_forward_ref(B, n_in, n_out, a_in, a_w, a_b, out_m);
  expect_close("linear forward", &s, B, out_f, out_r, out_m, n_y);

  layers_linear_backward(B, n_in, n_out, dout, in, wt, dw_f, db_f, din_f);
  layers_linear_backward_ref(B, n_in, n_out, dout, in, wt, dw_r, db_r, din_r);
  layers_linear_backward_ref(B, n_in, n_out, a_dout, a_in, a_w, dw_m, db_m, din_m);
  expect_close("linear weight gradient", &s, B, dw_f, dw_r, dw_m, n_w);
  expect_close("linear bias gradient", &s, B, db_f, db_r, db_m, n_out);
  expect_close("linear input gradient", &s, B, din_f, din_r, din_m, n_x);

  float *bufs[] = {in,    wt,   bias, dout, a_in, a_w,  a_b,  a_dout, out_f, out_r,
                   out_m, dw_f, dw_r, dw_m, db_f, db_r, db_m, din_f,  din_r, din_m};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
}

START_TEST(linear) {
  if (!have_avx2()) return;
  const int batches[] = {1, 2, 5, 64};
  for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) {
    check_linear(batches[i], 256, 120); /* the cnn's fc layers */
    check_linear(batches[i], 120, 84);
    check_linear(batches[i], 84, 10);
  }
  check_linear(3, 784, 256); /* the mlp's first */
  check_linear(3, 1, 1);
  check_linear(7, 9, 17);
  check_linear(6, 23, 5);
  check_linear(9, 8, 24);
}
END_TEST

/* AUTO takes the AVX2 GEMMs where the CPU has them up to batch 64,
 * sgemm above it; REFERENCE and a CPU without AVX2 take sgemm: results
 * bit-identical to the path taken. */
static int linear_is(int B, int n_in, int n_out, int want_fast) {
  const int64_t n_x = (int64_t)B * n_in, n_y = (int64_t)B * n_out, n_w = (int64_t)n_in * n_out;
  float *in = fill(n_x), *wt = fill(n_w), *bias = fill(n_out), *dout = fill(n_y);
  float *out = zeros(n_y), *want = zeros(n_y), *dw = zeros(n_w), *dw_want = zeros(n_w);
  float *db = zeros(n_out), *db_want = zeros(n_out), *din = zeros(n_x), *din_want = zeros(n_x);
  layers_linear_forward(B, n_in, n_out, in, wt, bias, out);
  layers_linear_backward(B, n_in, n_out, dout, in, wt, dw, db, din);
  if (want_fast) {
    ck_assert_int_eq(gemm_avx2_nt(B, n_out, n_in, in, wt, want), 0);
    for (int i = 0; i < B; i++)
      for (int j = 0; j < n_out; j++) want[i * n_out + j] += bias[j];
    ck_assert_int_eq(gemm_avx2_tn(n_out, n_in, B, dout, in, dw_want), 0);
    ck_assert_int_eq(gemm_avx2_nn(B, n_in, n_out, dout, wt, din_want), 0);
    float *dw_scratch = zeros(n_w), *din_scratch = zeros(n_x);
    layers_linear_backward_ref(B, n_in, n_out, dout, in, wt, dw_scratch, db_want, din_scratch);
    free(dw_scratch);
    free(din_scratch);
  } else {
    layers_linear_forward_ref(B, n_in, n_out, in, wt, bias, want);
    layers_linear_backward_ref(B, n_in, n_out, dout, in, wt, dw_want, db_want, din_want);
  }
  const int same = !memcmp(out, want, sizeof(float) * (size_t)n_y) &&
                   !memcmp(dw, dw_want, sizeof(float) * (size_t)n_w) &&
                   !memcmp(db, db_want, sizeof(float) * (size_t)n_out) &&
                   !memcmp(din, din_want, sizeof(float) * (size_t)n_x);
  float *bufs[] = {in, wt, bias, dout, out, want, dw, dw_want, db, db_want, din, din_want};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
  return same;
}

/* OpenBLAS is loaded by the first sgemm, not before: a cnn trained and
 * evaluated at batch 64 on the AVX2 kernels never loads it (a fifth of a
 * short trial's CPU time); a reference layer does. First in the suite
 * (CK_FORK=no: one process), before any reference ran. */
START_TEST(blas_loaded_only_by_sgemm) {
  ck_assert(!blas_load_loaded());
  if (conv_avx2_cpu_ok()) {
    const struct model_spec spec = {MODEL_CNN, 1, 28, 28, 10, 120, 84};
    const struct optim_spec os = {OPTIM_SGD, 0.01f, 0.9f, 0.0f, 0.9f, 0.999f, 1e-8f};
    const struct backend_opts bo = {1, 0, 0, 0, 0, NULL};
    enum { N = 200 };
    struct backend *b = NULL;
    ck_assert_int_eq(backend_cpu_ops.create(&spec, &os, 64, &bo, &b), 0);
    float *x = fill((int64_t)N * 28 * 28);
    uint8_t y[N];
    for (int i = 0; i < N; i++) y[i] = (uint8_t)(i % 10);
    float loss = 0.0f;
    ck_assert_int_eq(backend_cpu_ops.train_step(b, x, y, 64, &loss), 0);
    double loss_sum = 0.0;
    int correct = 0;
    ck_assert_int_eq(backend_cpu_ops.evaluate(b, x, y, N, &loss_sum, &correct), 0);
    ck_assert(loss_sum > 0.0);
    ck_assert(!blas_load_loaded());
    backend_cpu_ops.destroy(b);
    free(x);
  }
  float a[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, 1, 0, 1, 0}, bias[2] = {0.5f, 0}, out[4];
  layers_linear_forward_ref(2, 3, 2, a, w, bias, out);
  ck_assert(blas_load_loaded());
  ck_assert_float_eq(out[0], 4.5f); /* 1 + 3 + 0.5 */
  ck_assert_float_eq(out[1], 2.0f);
  ck_assert_float_eq(out[2], 10.5f);
}
END_TEST

START_TEST(linear_dispatch) {
  const int fast = conv_avx2_cpu_ok();
  ck_assert(linear_is(5, 84, 10, fast));
  ck_assert(linear_is(64, 84, 10, fast));
  ck_assert(linear_is(65, 84, 10, 0)); /* sgemm above batch 64 */
  layers_set_kernels(LAYERS_KERNELS_REFERENCE);
  ck_assert(linear_is(5, 84, 10, 0));
  layers_set_kernels(LAYERS_KERNELS_AUTO);
  conv_avx2_hide_cpu(1);
  float x = 0.0f;
  ck_assert_int_eq(gemm_avx2_nt(1, 1, 1, &x, &x, &x), -ENOTSUP);
  ck_assert_int_eq(gemm_avx2_nn(1, 1, 1, &x, &x, &x), -ENOTSUP);
  ck_assert_int_eq(gemm_avx2_tn(1, 1, 1, &x, &x, &x), -ENOTSUP);
  ck_assert(linear_is(5, 84, 10, 0));
  conv_avx2_hide_cpu(0);
}
END_TEST

int main(void) {
  splitmix_seed(&R, 7);
  Suite *s = suite_create("conv");
  TCase *tc = tcase_create("conv");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, blas_loaded_only_by_sgemm);
  tcase_add_test(tc, cnn_shapes);
  tcase_add_test(tc, odd_shapes);
  tcase_add_test(tc, large_batch);
  tcase_add_test(tc, dispatch);
  tcase_add_test(tc, pool_bias_relu_fused);
  tcase_add_test(tc, conv_pool_fused);
  tcase_add_test(tc, conv_pool_backward_pooled);
  tcase_add_test(tc, linear);
  tcase_add_test(tc, linear_dispatch);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
