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

START_TEST(bias_act_and_relu_backward) {
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
  float *hy = rand_host(n, -1, 1), *hg = rand_host(n, -1, 1);
  float *dy = dev_from(hy, n), *dg = dev_from(hg, n);
  ck_assert_int_eq(cuops_relu_backward(dy, dg, n, 0), 0);
  float *got = to_host(dg, n);
  double *want = dvec(n);
  for (int64_t i = 0; i < n; i++) want[i] = ct_relu_grad(hy[i], hg[i]);
  assert_close("relu_backward", got, want, n);
  free(hy), free(hg), free(got), free(want);
  cudaFree(dy), cudaFree(dg);
}
END_TEST

START_TEST(maxpool_forward_backward) {
  /* odd sizes: the last row and column fall outside every window */
  const int planes = 11, h = 9, w = 7, p = 2, ph = h / p, pw = w / p;
  const int64_t in_n = (int64_t)planes * h * w, out_n = (int64_t)planes * ph * pw;
  float *hin = rand_host(in_n, -1, 1), *hdo = rand_host(out_n, -1, 1);
  float *din = dev_from(hin, in_n), *dout = dev_poisoned(out_n);
  int32_t *darg = dev_alloc((size_t)out_n * sizeof(int32_t));
  ck_assert_int_eq(cudaMemset(darg, 0xff, (size_t)out_n * sizeof(int32_t)), cudaSuccess);
  ck_assert_int_eq(cuops_maxpool_forward(din, dout, darg, planes, h, w, p, 0), 0);
  float *got = to_host(dout, out_n);
  int32_t *arg = malloc((size_t)out_n * sizeof(int32_t));
  ck_assert_int_eq(cudaMemcpy(arg, darg, (size_t)out_n * sizeof(int32_t), cudaMemcpyDeviceToHost),
                   cudaSuccess);
  double *want = dvec(out_n), *wgrad = dvec(in_n);
  for (int q = 0; q < planes; q++)
    for (int y = 0; y < ph; y++)
      for (int x = 0; x < pw; x++) {
        int best = y * p * w + x * p;
        for (int i = 0; i < p; i++)
          for (int j = 0; j < p; j++) {
            int off = (y * p + i) * w + x * p + j;
            if (hin[q * h * w + off] > hin[q * h * w + best]) best = off;
          }
        int64_t o = (int64_t)q * ph * pw + y * pw + x;
        want[o] = hin[q * h * w + best];
        ck_assert_int_eq(arg[o], best);
        wgrad[q * h * w + best] = hdo[o];
      }
  assert_close("maxpool_forward", got, want, out_n);
  float *ddo = dev_from(hdo, out_n), *ddin = dev_poisoned(in_n);
  ck_assert_int_eq(cuops_maxpool_backward(ddo, darg, ddin, planes, h, w, p, 0), 0);
  float *gback = to_host(ddin, in_n);
  assert_close("maxpool_backward", gback, wgrad, in_n);
  free(hin), free(hdo), free(got), free(arg), free(want), free(wgrad), free(gback);
  cudaFree(din), cudaFree(dout), cudaFree(darg), cudaFree(ddo), cudaFree(ddin);
}
END_TEST

START_TEST(permute_both_ways) {
  const int c = 5, n = 7, hw = 9;
  const int64_t total = (int64_t)c * n * hw;
  float *h = rand_host(total, -1, 1);
  for (int to_nchw = 0; to_nchw < 2; to_nchw++) {
    float *din = dev_from(h, total), *dout = dev_poisoned(total);
    ck_assert_int_eq(cuops_permute_cn(din, dout, c, n, hw, to_nchw, 0), 0);
    float *got = to_host(dout, total);
    double *want = dvec(total);
    for (int ch = 0; ch < c; ch++)
      for (int b = 0; b < n; b++)
        for (int q = 0; q < hw; q++) {
          int64_t cn = ((int64_t)ch * n + b) * hw + q, nc = ((int64_t)b * c + ch) * hw + q;
          if (to_nchw)
            want[nc] = h[cn];
          else
            want[cn] = h[nc];
        }
    assert_close("permute_cn", got, want, total);
    free(got), free(want);
    cudaFree(din), cudaFree(dout);
  }
  free(h);
}
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

START_TEST(xent_loss_grad_and_sums) {
  const int n = 300, k = 10;
  const float scale = 1.0f / n;
  float *hx = rand_host((int64_t)n * k, -8, 8);
  uint8_t *hy = malloc(n);
  for (int i = 0; i < n; i++) hy[i] = (uint8_t)frand(0, 9.99f);
  float *dx = dev_from(hx, (int64_t)n * k), *dloss = dev_poisoned(n);
  float *dgrad = dev_poisoned((int64_t)n * k);
  uint8_t *dy = dev_alloc(n);
  int32_t *dcorrect = dev_alloc(n * sizeof(int32_t)), *dsumc = dev_alloc(sizeof(int32_t));
  double *dsuml = dev_alloc(sizeof(double));
  ck_assert_int_eq(cudaMemcpy(dy, hy, n, cudaMemcpyHostToDevice), cudaSuccess);
  ck_assert_int_eq(cuops_xent(dx, dy, dloss, dcorrect, dgrad, n, k, scale, 0), 0);
  ck_assert_int_eq(cuops_xent_sums(dloss, dcorrect, n, dsuml, dsumc, 0), 0);
  float *loss = to_host(dloss, n), *grad = to_host(dgrad, (int64_t)n * k);
  double suml;
  int32_t sumc;
  ck_assert_int_eq(cudaMemcpy(&suml, dsuml, sizeof(double), cudaMemcpyDeviceToHost), cudaSuccess);
  ck_assert_int_eq(cudaMemcpy(&sumc, dsumc, sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  double *wl = dvec(n), *wg = dvec((int64_t)n * k), wsum = 0;
  int wc = 0;
  for (int r = 0; r < n; r++) {
    const float *x = hx + r * k;
    double m = x[0], s = 0;
    int arg = 0;
    for (int j = 1; j < k; j++)
      if (x[j] > m) m = x[j], arg = j;
    for (int j = 0; j < k; j++) s += exp(x[j] - m);
    wl[r] = -(x[hy[r]] - m - log(s));
    wsum += wl[r];
    wc += arg == hy[r];
    for (int j = 0; j < k; j++) wg[r * k + j] = (exp(x[j] - m) / s - (j == hy[r])) * scale;
  }
  assert_close("xent loss", loss, wl, n);
  assert_close("xent grad", grad, wg, (int64_t)n * k);
  ck_assert_msg(fabs(suml - wsum) <= TOL * fabs(wsum), "loss sum %g vs %g", suml, wsum);
  ck_assert_int_eq(sumc, wc);
  free(hx), free(hy), free(loss), free(grad), free(wl), free(wg);
  cudaFree(dx), cudaFree(dloss), cudaFree(dgrad), cudaFree(dy), cudaFree(dcorrect);
  cudaFree(dsumc), cudaFree(dsuml);
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
  tcase_add_test(tc, bias_act_and_relu_backward);
  tcase_add_test(tc, maxpool_forward_backward);
  tcase_add_test(tc, permute_both_ways);
  tcase_add_test(tc, sum_strided_rows_and_columns);
  tcase_add_test(tc, sum_strided_many_blocks);
  tcase_add_test(tc, xent_loss_grad_and_sums);
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
