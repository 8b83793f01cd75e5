/* Op-by-op: every CUDA kernel of kernels/cuda_ops.cu against a plain CPU loop
 * on random inputs (a fixed seed, printed; CTUNE_TEST_SEED picks another), with
 * outputs poisoned by NaN first so an element the kernel skipped shows.
 * Normwise relative error must stay within 1e-4 (fp32). Skips without a GPU. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "gpu_skip.h"
#include "cuda_ops.h"
#include "ops_math.h"

#define TOL 1e-4

static uint64_t rng_state;

static float frand(float lo, float hi) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  double u = (double)(rng_state >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

static float *rand_host(int64_t n, float lo, float hi) {
  float *p = malloc((size_t)n * sizeof(float));
  ck_assert_ptr_nonnull(p);
  for (int64_t i = 0; i < n; i++) p[i] = frand(lo, hi);
  return p;
}

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  ck_assert_int_eq(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
  return p;
}

static float *dev_from(const float *h, int64_t n) {
  float *d = dev_alloc((size_t)n * sizeof(float));
  ck_assert_int_eq(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice),
                   cudaSuccess);
  return d;
}

/* A device output of n floats, filled with NaN. */
static float *dev_poisoned(int64_t n) {
  float *d = dev_alloc((size_t)n * sizeof(float));
  ck_assert_int_eq(cuops_fill(d, n, NAN, 0), 0);
  return d;
}

static float *to_host(const float *d, int64_t n) {
  float *h = malloc((size_t)n * sizeof(float));
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost),
                   cudaSuccess);
  return h;
}

/* max |got - want| / max |want|; any non-finite value in got fails. */
static void assert_close(const char *what, const float *got, const double *want, int64_t n) {
  double err = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    ck_assert_msg(isfinite(got[i]), "%s[%lld] = %g: not written or not finite", what, (long long)i,
                  got[i]);
    double e = fabs(got[i] - want[i]);
    if (e > err) err = e;
    if (fabs(want[i]) > scale) scale = fabs(want[i]);
  }
  ck_assert_msg(err / scale <= TOL, "%s: relative error %.3g > %g", what, err / scale, TOL);
}

static double *dvec(int64_t n) {
  double *p = calloc((size_t)n, sizeof(double));
  ck_assert_ptr_nonnull(p);
  return p;
}

/* in(b, c, y, x) as cuops_im2col reads it. */
static float at(const float *in, int64_t sn, int64_t sc, int w, int b, int c, int y, int x) {
  return in[b * sn + c * sc + (int64_t)y * w + x];
}

static void check_im2col(int nchw) {
  const int n = 3, c = 2, h = 7, w = 6, k = 3, oh = h - k + 1, ow = w - k + 1;
  const int64_t sn = nchw ? c * h * w : h * w, sc = nchw ? h * w : n * h * w;
  const int64_t in_n = (int64_t)n * c * h * w, col_n = (int64_t)c * k * k * n * oh * ow;
  float *hin = rand_host(in_n, -1, 1);
  float *din = dev_from(hin, in_n), *dcol = dev_poisoned(col_n);
  ck_assert_int_eq(cuops_im2col(din, dcol, n, c, h, w, k, sn, sc, 0), 0);
  float *got = to_host(dcol, col_n);
  double *want = dvec(col_n);
  for (int ch = 0; ch < c; ch++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++)
        for (int b = 0; b < n; b++)
          for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
              want[((int64_t)(ch * k + i) * k + j) * n * oh * ow + (int64_t)b * oh * ow + y * ow +
                   x] = at(hin, sn, sc, w, b, ch, y + i, x + j);
  assert_close(nchw ? "im2col nchw" : "im2col cnhw", got, want, col_n);
  /* col2im is im2col's adjoint: scatter-add every col entry back. */
  float *hcol = rand_host(col_n, -1, 1);
  float *dcol2 = dev_from(hcol, col_n), *dback = dev_poisoned(in_n);
  ck_assert_int_eq(cuops_col2im(dcol2, dback, n, c, h, w, k, sn, sc, 0), 0);
  float *back = to_host(dback, in_n);
  double *wback = dvec(in_n);
  for (int ch = 0; ch < c; ch++)
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++)
        for (int b = 0; b < n; b++)
          for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
              wback[b * sn + ch * sc + (int64_t)(y + i) * w + x + j] +=
                  hcol[((int64_t)(ch * k + i) * k + j) * n * oh * ow + (int64_t)b * oh * ow +
                       y * ow + x];
  assert_close(nchw ? "col2im nchw" : "col2im cnhw", back, wback, in_n);
  free(hin), free(got), free(want), free(hcol), free(back), free(wback);
  cudaFree(din), cudaFree(dcol), cudaFree(dcol2), cudaFree(dback);
}

START_TEST(im2col_col2im_nchw) { check_im2col(1); }
END_TEST
START_TEST(im2col_col2im_cnhw) { check_im2col(0); }
END_TEST

/* Reduction scratch for up to `outputs` outputs, tickets zeroed. */
static struct cuops_scratch scratch_for(int outputs) {
  struct cuops_scratch red = {dev_alloc((size_t)outputs * sizeof(unsigned)),
                              dev_alloc((size_t)outputs * CUOPS_RED_PARTS * sizeof(float)),
                              outputs};
  ck_assert_int_eq(cudaMemset(red.ticket, 0, (size_t)outputs * sizeof(unsigned)), cudaSuccess);
  return red;
}

static void free_scratch(struct cuops_scratch red) { cudaFree(red.ticket), cudaFree(red.partial); }

START_TEST(bias_act_and_relu_backward_sum) {
  const int64_t rows = 37, cols = 53, n = rows * cols;
  for (int per_row = 0; per_row < 2; per_row++)
    for (int relu = 0; relu < 2; relu++) {
      float *hy = rand_host(n, -1, 1), *hb = rand_host(per_row ? rows : cols, -1, 1);
      float *dy = dev_from(hy, n), *db = dev_from(hb, per_row ? rows : cols);
      ck_assert_int_eq(cuops_bias_act(dy, db, rows, cols, per_row, relu, 0), 0);
      float *got = to_host(dy, n);
      double *want = dvec(n);
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
          float v = hy[r * cols + c] + hb[per_row ? r : c];
          want[r * cols + c] = relu ? ct_relu(v) : v;
        }
      assert_close("bias_act", got, want, n);
      free(hy), free(hb), free(got), free(want);
      cudaFree(dy), cudaFree(db);
    }
  /* the ReLU backward in place and the column sums (a linear layer's bias
   * gradient); 2100 rows: two blocks a column */
  const int nrows[2] = {37, 2100};
  struct cuops_scratch red = scratch_for(cols);
  for (int k = 0; k < 2; k++) {
    const int64_t m = nrows[k] * cols;
    float *hy = rand_host(m, -1, 1), *hg = rand_host(m, -1, 1);
    float *dy = dev_from(hy, m), *dg = dev_from(hg, m), *dbias = dev_poisoned(cols);
    ck_assert_int_eq(cuops_relu_backward_sum(dy, dg, dbias, nrows[k], (int)cols, red, 0), 0);
    float *got = to_host(dg, m), *gbias = to_host(dbias, cols);
    double *want = dvec(m), *wbias = dvec(cols);
    for (int64_t i = 0; i < m; i++) {
      want[i] = ct_relu_grad(hy[i], hg[i]);
      wbias[i % cols] += want[i];
    }
    assert_close("relu_backward_sum dy", got, want, m);
    assert_close("relu_backward_sum bias", gbias, wbias, cols);
    free(hy), free(hg), free(got), free(gbias), free(want), free(wbias);
    cudaFree(dy), cudaFree(dg), cudaFree(dbias);
  }
  free_scratch(red);
}
END_TEST

/* A conv layer's bias + ReLU + pooling and its backward with the bias
 * gradient, channel-major ([c][n][ph*pw]) and flattened ([n][c][ph*pw])
 * pooled layouts. Odd sizes: the last row and column fall outside every
 * window (left alone forward, no gradient backward); 40 rows of 8x8: two
 * blocks a channel in the bias reduction. */
static void check_conv_pool(int c, int n, int h, int w, int nchw) {
  const int p = 2, ph = h / p, pw = w / p;
  const int64_t plane = (int64_t)h * w, full = (int64_t)c * n * plane;
  const int64_t per = (int64_t)ph * pw, pooled = (int64_t)c * n * per;
  float *hin = rand_host(full, -1, 1), *hb = rand_host(c, -0.3f, 0.3f);
  float *hdo = rand_host(pooled, -1, 1);
  float *dconv = dev_from(hin, full), *db = dev_from(hb, c), *dout = dev_poisoned(pooled);
  int32_t *darg = dev_alloc((size_t)pooled * sizeof(int32_t));
  ck_assert_int_eq(cuops_conv_pool_forward(dconv, db, dout, darg, c, n, h, w, p, nchw, 0), 0);
  float *act = to_host(dconv, full), *got = to_host(dout, pooled);
  int32_t *arg = malloc((size_t)pooled * sizeof(int32_t));
  ck_assert_ptr_nonnull(arg);
  ck_assert_int_eq(cudaMemcpy(arg, darg, (size_t)pooled * sizeof(int32_t), cudaMemcpyDeviceToHost),
                   cudaSuccess);
  double *wact = dvec(full), *want = dvec(pooled), *wgrad = dvec(full), *wbias = dvec(c);
  for (int64_t i = 0; i < full; i++) wact[i] = hin[i]; /* outside the windows: unchanged */
  for (int ch = 0; ch < c; ch++)
    for (int r = 0; r < n; r++) {
      const int64_t pl = (int64_t)ch * n + r;
      for (int y = 0; y < ph; y++)
        for (int x = 0; x < pw; x++) {
          int best = -1;
          for (int i = 0; i < p; i++)
            for (int j = 0; j < p; j++) {
              int off = (y * p + i) * w + x * p + j;
              wact[pl * plane + off] = ct_relu(hin[pl * plane + off] + hb[ch]);
              if (best < 0 || wact[pl * plane + off] > wact[pl * plane + best]) best = off;
            }
          int64_t q = (int64_t)y * pw + x;
          int64_t at = nchw ? ((int64_t)r * c + ch) * per + q : pl * per + q;
          want[at] = wact[pl * plane + best];
          ck_assert_int_eq(arg[pl * per + q], best);
          wgrad[pl * plane + best] = hdo[at];
        }
    }
  for (int64_t i = 0; i < full; i++) {
    wgrad[i] = ct_relu_grad((float)wact[i], (float)wgrad[i]);
    wbias[i / (n * plane)] += wgrad[i];
  }
  assert_close("conv_pool_forward conv", act, wact, full);
  assert_close("conv_pool_forward out", got, want, pooled);
  struct cuops_scratch red = scratch_for(c);
  float *ddo = dev_from(hdo, pooled), *ddin = dev_poisoned(full), *dbias = dev_poisoned(c);
  ck_assert_int_eq(
      cuops_conv_pool_backward(ddo, darg, dconv, ddin, dbias, c, n, h, w, p, nchw, red, 0), 0);
  float *gback = to_host(ddin, full), *gbias = to_host(dbias, c);
  assert_close("conv_pool_backward din", gback, wgrad, full);
  assert_close("conv_pool_backward bias", gbias, wbias, c);
  free(hin), free(hb), free(hdo), free(act), free(got), free(arg), free(wact), free(want);
  free(wgrad), free(wbias), free(gback), free(gbias);
  cudaFree(dconv), cudaFree(db), cudaFree(dout), cudaFree(darg), cudaFree(ddo), cudaFree(ddin);
  cudaFree(dbias);
  free_scratch(red);
}

START_TEST(conv_pool_forward_backward) {
  for (int nchw = 0; nchw < 2; nchw++) {
    check_conv_pool(3, 4, 9, 7, nchw);
    check_conv_pool(2, 40, 8, 8, nchw);
  }
}
END_TEST

START_TEST(sum_strided_rows_and_columns) {
  const int rows = 13;
  const int64_t cols = 5003; /* more than one pass of the block, four blocks a row */
  float *h = rand_host(rows * cols, -1, 1);
  float *d = dev_from(h, rows * cols);
  struct cuops_scratch red = scratch_for(97);
  ck_assert_int_eq(cuops_red_parts(cols), 4);
  for (int by_row = 0; by_row < 2; by_row++) {
    /* by_row: out[r] = sum_c h[r][c] (conv bias); else out[c] = sum_r h[r][c]
     * (linear bias), over a column subset so the strides differ. */
    int n_out = by_row ? rows : 97;
    float *dout = dev_poisoned(n_out);
    if (by_row)
      ck_assert_int_eq(cuops_sum_strided(d, dout, rows, cols, cols, 1, red, 0), 0);
    else
      ck_assert_int_eq(cuops_sum_strided(d, dout, n_out, rows, 1, cols, red, 0), 0);
    float *got = to_host(dout, n_out);
    double *want = dvec(n_out);
    for (int o = 0; o < n_out; o++) {
      if (by_row)
        for (int64_t c = 0; c < cols; c++) want[o] += h[o * cols + c];
      else
        for (int r = 0; r < rows; r++) want[o] += h[r * cols + o];
    }
    assert_close("sum_strided", got, want, n_out);
    free(got), free(want);
    cudaFree(dout);
  }
  free(h);
  cudaFree(d);
  free_scratch(red);
}
END_TEST

/* A long reduction (batch 1024's conv1 bias: 589,824 values a channel) runs
 * on CUOPS_RED_PARTS blocks per output, uneven slices included; run twice,
 * it gives the same bits (the tickets were left at zero), and too small a
 * scratch is refused. */
START_TEST(sum_strided_many_blocks) {
  const int rows = 3;
  const int64_t cols = 40 * CUOPS_RED_MIN * 4 + 77;
  ck_assert_int_eq(cuops_red_parts(cols), CUOPS_RED_PARTS);
  float *h = rand_host(rows * cols, -1, 1);
  float *d = dev_from(h, rows * cols), *dout = dev_poisoned(rows);
  struct cuops_scratch red = scratch_for(rows);
  ck_assert_int_eq(cuops_sum_strided(d, dout, rows, cols, cols, 1, red, 0), 0);
  float *got = to_host(dout, rows);
  double want[3] = {0, 0, 0};
  for (int o = 0; o < rows; o++)
    for (int64_t c = 0; c < cols; c++) want[o] += h[o * cols + c];
  assert_close("sum_strided many blocks", got, want, rows);
  ck_assert_int_eq(cuops_fill(dout, rows, NAN, 0), 0);
  ck_assert_int_eq(cuops_sum_strided(d, dout, rows, cols, cols, 1, red, 0), 0);
  float *again = to_host(dout, rows);
  ck_assert(memcmp(got, again, rows * sizeof(float)) == 0);
  struct cuops_scratch small = red;
  small.outputs = rows - 1;
  ck_assert_int_eq(cuops_sum_strided(d, dout, rows, cols, cols, 1, small, 0), -EINVAL);
  free(h), free(got), free(again);
  cudaFree(d), cudaFree(dout);
  free_scratch(red);
}
END_TEST

/* The loss kernel: per-row losses, the gradient, the sums, the running sums
 * and the cursor in one launch; a non-finite loss sets the flag. */
START_TEST(xent_step_loss_grad_and_sums) {
  const int n = 300, k = 10;
  const float scale = 1.0f / n;
  float *hx = rand_host((int64_t)n * k, -8, 8);
  uint8_t *hy = malloc(n);
  for (int i = 0; i < n; i++) hy[i] = (uint8_t)frand(0, 9.99f);
  float *dx = dev_from(hx, (int64_t)n * k), *dgrad = dev_poisoned((int64_t)n * k);
  float *dbias = dev_poisoned(k);
  uint8_t *dy = dev_alloc(n);
  /* sum_loss, acc_loss (doubles), cursor, acc_correct (int64), sum_correct,
   * nonfinite (int32) */
  struct sums {
    double sum_loss, acc_loss;
    int64_t cursor, acc_correct;
    int32_t sum_correct, nonfinite;
  } h0 = {-1, 1.5, 100, 7, -1, 0}, got;
  struct sums *ds = dev_alloc(sizeof(struct sums));
  ck_assert_int_eq(cudaMemcpy(ds, &h0, sizeof(h0), cudaMemcpyHostToDevice), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(dy, hy, n, cudaMemcpyHostToDevice), cudaSuccess);
  struct cuops_loss_out out = {&ds->sum_loss,
                               &ds->sum_correct,
                               &ds->acc_loss,
                               &ds->acc_correct,
                               &ds->nonfinite,
                               &ds->cursor,
                               n};
  ck_assert_int_eq(cuops_xent_step(dx, dy, dgrad, dbias, n, k, scale, out, 0), 0);
  float *grad = to_host(dgrad, (int64_t)n * k), *gbias = to_host(dbias, k);
  ck_assert_int_eq(cudaMemcpy(&got, ds, sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
  double *wg = dvec((int64_t)n * k), *wbias = dvec(k), wsum = 0;
  int wc = 0;
  for (int r = 0; r < n; r++) {
    const float *x = hx + r * k;
    double m = x[0], s = 0;
    int arg = 0;
    for (int j = 1; j < k; j++)
      if (x[j] > m) m = x[j], arg = j;
    for (int j = 0; j < k; j++) s += exp(x[j] - m);
    wsum += -(x[hy[r]] - m - log(s));
    wc += arg == hy[r];
    for (int j = 0; j < k; j++) {
      wg[r * k + j] = (exp(x[j] - m) / s - (j == hy[r])) * scale;
      wbias[j] += wg[r * k + j];
    }
  }
  assert_close("xent grad", grad, wg, (int64_t)n * k);
  /* the bias gradient sums to 0 over classes: compare against the gradient's scale */
  double bias_err = 0;
  for (int j = 0; j < k; j++) bias_err = fmax(bias_err, fabs(gbias[j] - wbias[j]));
  ck_assert_msg(bias_err <= 1e-5, "xent bias gradient off by %g", bias_err);
  ck_assert_msg(fabs(got.sum_loss - wsum) <= TOL * fabs(wsum), "loss sum %g vs %g", got.sum_loss,
                wsum);
  ck_assert(got.acc_loss == 1.5 + got.sum_loss);
  ck_assert_int_eq(got.sum_correct, wc);
  ck_assert_int_eq(got.acc_correct, 7 + wc);
  ck_assert_int_eq(got.cursor, 100 + n);
  ck_assert_int_eq(got.nonfinite, 0);
  /* a NaN logit, no gradient, no cursor: the flag is set, the cursor stays */
  hx[5] = NAN;
  cudaFree(dx);
  dx = dev_from(hx, (int64_t)n * k);
  out.cursor = NULL;
  ck_assert_int_eq(cuops_xent_step(dx, dy, NULL, dbias, n, k, 1.0f, out, 0), -EINVAL);
  ck_assert_int_eq(cuops_xent_step(dx, dy, NULL, NULL, n, k, 1.0f, out, 0), 0);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(&got, ds, sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
  ck_assert_int_eq(got.nonfinite, 1);
  ck_assert_int_eq(got.cursor, 100 + n);
  free(hx), free(hy), free(grad), free(gbias), free(wg), free(wbias);
  cudaFree(dx), cudaFree(dgrad), cudaFree(dbias), cudaFree(dy), cudaFree(ds);
}
END_TEST

START_TEST(sgd_and_adam_updates) {
  const int64_t n = 100003;
  float *hp = rand_host(n, -1, 1), *hg = rand_host(n, -1, 1), *hv = rand_host(n, -1, 1);
  float *hm = rand_host(n, -0.1f, 0.1f), *hv2 = rand_host(n, 0, 0.1f);
  float *dp = dev_from(hp, n), *dg = dev_from(hg, n), *dv = dev_from(hv, n);
  ck_assert_int_eq(cuops_sgd(dp, dv, dg, n, 0.05f, 0.9f, 1e-4f, 0), 0);
  float *gp = to_host(dp, n), *gv = to_host(dv, n);
  double *wp = dvec(n), *wv = dvec(n);
  for (int64_t i = 0; i < n; i++) {
    float v = hv[i];
    wp[i] = ct_sgd_update(hp[i], &v, hg[i], 0.05f, 0.9f, 1e-4f);
    wv[i] = v;
  }
  assert_close("sgd p", gp, wp, n);
  assert_close("sgd v", gv, wv, n);
  float *dm = dev_from(hm, n), *dv2 = dev_from(hv2, n);
  cudaFree(dp);
  dp = dev_from(hp, n);
  const float bc1 = (float)(1 - pow(0.9, 7)), bc2 = (float)(1 - pow(0.999, 7));
  ck_assert_int_eq(cuops_adam(dp, dm, dv2, dg, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, bc1, bc2, 0),
                   0);
  float *ap = to_host(dp, n), *am = to_host(dm, n), *av = to_host(dv2, n);
  double *wm = dvec(n), *wv2 = dvec(n);
  for (int64_t i = 0; i < n; i++) {
    float m = hm[i], v = hv2[i];
    wp[i] = ct_adam_update(hp[i], &m, &v, hg[i], 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, bc1, bc2);
    wm[i] = m;
    wv2[i] = v;
  }
  assert_close("adam p", ap, wp, n);
  assert_close("adam m", am, wm, n);
  assert_close("adam v", av, wv2, n);
  free(hp), free(hg), free(hv), free(hm), free(hv2), free(gp), free(gv);
  free(wp), free(wv), free(ap), free(am), free(av), free(wm), free(wv2);
  cudaFree(dp), cudaFree(dg), cudaFree(dv), cudaFree(dm), cudaFree(dv2);
}
END_TEST

int main(void) {
  int gate = gpu_test_gate(1); /* gpu_skip.h: skips only without a device */
  if (gate != GPU_RUN) return gate;
  const char *seed = getenv("CTUNE_TEST_SEED");
  /* fixed by default so CI runs are repeatable; set it to explore others */
  rng_state = seed && *seed ? strtoull(seed, NULL, 10) : 20261122;
  printf("test_cuda_ops: seed %llu (CTUNE_TEST_SEED repeats it)\n", (unsigned long long)rng_state);
  Suite *s = suite_create("cuda_ops");
  TCase *tc = tcase_create("ops");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, im2col_col2im_nchw);
  tcase_add_test(tc, im2col_col2im_cnhw);
  tcase_add_test(tc, bias_act_and_relu_backward_sum);
  tcase_add_test(tc, conv_pool_forward_backward);
  tcase_add_test(tc, sum_strided_rows_and_columns);
  tcase_add_test(tc, sum_strided_many_blocks);
  tcase_add_test(tc, xent_step_loss_grad_and_sums);
  tcase_add_test(tc, sgd_and_adam_updates);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  /* no fork: a CUDA context does not survive fork() */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
