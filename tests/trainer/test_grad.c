/* Finite-difference gradient checks of every CPU layer and of whole models.
 * The layers compute in float, so the checks use central differences with a
 * step of 1e-2 on inputs of order 1 and accept |analytic - numeric| <=
 * 2e-3 + 2e-2 * |numeric|: a wrong factor, sign, transpose or missing term
 * is far outside that, float rounding well inside. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "layers.h"
#include "net.h"
#include "optim.h"
#include "splitmix.h"
#include "test_shapes.h"

#define STEP 1e-2f
#define ATOL 2e-3
#define RTOL 2e-2

static struct splitmix R;

static void fill(float *x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)((2.0 * splitmix_uniform(&R) - 1.0) * scale);
}

static double dot(const float *a, const float *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}

static void expect_close(double analytic, double numeric, const char *what, int64_t i) {
  ck_assert_msg(fabs(analytic - numeric) <= ATOL + RTOL * fabs(numeric),
                "%s[%lld]: analytic %.6g vs numeric %.6g", what, (long long)i, analytic, numeric);
}

/* --- conv: L = <conv(in; w, b), r> --- */

static double conv_loss(const struct layer_shape *s, int B, const float *in, const float *w,
                        const float *b, const float *r, float *col, float *out) {
  layers_conv_forward(s, B, in, w, b, col, out);
  return dot(out, r, (int64_t)s->out_c * B * s->out_h * s->out_w);
}

static void check_conv(int in_c, int h, int w, int out_c, int B) {
  struct layer_shape s = ts_conv_shape(in_c, h, w, out_c);
  int64_t n_in = (int64_t)in_c * B * h * w;
  int64_t n_out = (int64_t)out_c * B * s.out_h * s.out_w;
  int64_t n_col = layers_conv_col_size(&s, B);
  float *in = malloc(sizeof(float) * n_in), *din = malloc(sizeof(float) * n_in);
  float *wt = malloc(sizeof(float) * s.w_size), *dw = malloc(sizeof(float) * s.w_size);
  float *b = malloc(sizeof(float) * out_c), *db = malloc(sizeof(float) * out_c);
  float *r = malloc(sizeof(float) * n_out), *out = malloc(sizeof(float) * n_out);
  float *col = malloc(sizeof(float) * n_col), *dcol = malloc(sizeof(float) * n_col);
  ck_assert(in && din && wt && dw && b && db && r && out && col && dcol);
  fill(in, n_in, 1);
  fill(wt, s.w_size, 0.5f);
  fill(b, out_c, 0.5f);
  fill(r, n_out, 1);
  layers_conv_backward(&s, B, in, r, wt, dw, db, col, dcol, din);
  for (int64_t i = 0; i < s.w_size; i += 7) {
    float keep = wt[i];
    wt[i] = keep + STEP;
    double lp = conv_loss(&s, B, in, wt, b, r, col, out);
    wt[i] = keep - STEP;
    double lm = conv_loss(&s, B, in, wt, b, r, col, out);
    wt[i] = keep;
    expect_close(dw[i], (lp - lm) / (2 * STEP), "conv dw", i);
  }
  for (int64_t i = 0; i < out_c; i++) {
    float keep = b[i];
    b[i] = keep + STEP;
    double lp = conv_loss(&s, B, in, wt, b, r, col, out);
    b[i] = keep - STEP;
    double lm = conv_loss(&s, B, in, wt, b, r, col, out);
    b[i] = keep;
    expect_close(db[i], (lp - lm) / (2 * STEP), "conv db", i);
  }
  for (int64_t i = 0; i < n_in; i += 5) {
    float keep = in[i];
    in[i] = keep + STEP;
    double lp = conv_loss(&s, B, in, wt, b, r, col, out);
    in[i] = keep - STEP;
    double lm = conv_loss(&s, B, in, wt, b, r, col, out);
    in[i] = keep;
    expect_close(din[i], (lp - lm) / (2 * STEP), "conv din", i);
  }
  free(in);
  free(din);
  free(wt);
  free(dw);
  free(b);
  free(db);
  free(r);
  free(out);
  free(col);
  free(dcol);
}

START_TEST(conv_one_channel) { check_conv(1, 9, 8, 3, 2); }
END_TEST

/* enough images that im2col runs in several chunks */
START_TEST(conv_multi_channel_chunked) { check_conv(3, 12, 12, 4, 9); }
END_TEST

/* A direct (naive) convolution agrees with im2col + sgemm. */
START_TEST(conv_matches_direct) {
  const int B = 5, C = 2, H = 10, W = 11, M = 3, k = MODEL_CNN_K;
  struct layer_shape s = ts_conv_shape(C, H, W, M);
  int64_t n_in = (int64_t)C * B * H * W, n_out = (int64_t)M * B * s.out_h * s.out_w;
  float *in = malloc(sizeof(float) * n_in), *out = malloc(sizeof(float) * n_out);
  float *wt = malloc(sizeof(float) * s.w_size), b[3];
  float *col = malloc(sizeof(float) * layers_conv_col_size(&s, B));
  ck_assert(in && out && wt && col);
  fill(in, n_in, 1);
  fill(wt, s.w_size, 1);
  fill(b, 3, 1);
  layers_conv_forward(&s, B, in, wt, b, col, out);
  for (int m = 0; m < M; m++)
    for (int bi = 0; bi < B; bi++)
      for (int y = 0; y < s.out_h; y++)
        for (int x = 0; x < s.out_w; x++) {
          double acc = b[m];
          for (int c = 0; c < C; c++)
            for (int i = 0; i < k; i++)
              for (int j = 0; j < k; j++)
                acc += (double)wt[((m * C + c) * k + i) * k + j] *
                       in[((int64_t)(c * B + bi) * H + y + i) * W + x + j];
          float got = out[((int64_t)(m * B + bi) * s.out_h + y) * s.out_w + x];
          ck_assert_msg(fabs(got - acc) < 1e-4 * (1 + fabs(acc)), "conv out %d,%d,%d,%d: %g vs %g",
                        m, bi, y, x, got, acc);
        }
  free(in);
  free(out);
  free(wt);
  free(col);
}
END_TEST

START_TEST(linear_grad) {
  const int B = 4, I = 13, O = 7;
  float in[4 * 13], din[4 * 13], w[7 * 13], dw[7 * 13], b[7], db[7];
  float r[4 * 7], out[4 * 7];
  fill(in, B * I, 1);
  fill(w, O * I, 0.5f);
  fill(b, O, 0.5f);
  fill(r, B * O, 1);
  layers_linear_backward(B, I, O, r, in, w, dw, db, din);
#define LIN_LOSS() (layers_linear_forward(B, I, O, in, w, b, out), dot(out, r, B * O))
#define FD(arr, n, grad, name)                                                                     \
  for (int i = 0; i < (n); i++) {                                                                  \
    float keep = arr[i];                                                                           \
    arr[i] = keep + STEP;                                                                          \
    double lp = LIN_LOSS();                                                                        \
    arr[i] = keep - STEP;                                                                          \
    double lm = LIN_LOSS();                                                                        \
    arr[i] = keep;                                                                                 \
    expect_close(grad[i], (lp - lm) / (2 * STEP), name, i);                                        \
  }
  FD(w, O * I, dw, "linear dw");
  FD(b, O, db, "linear db");
  FD(in, B * I, din, "linear din");
#undef FD
#undef LIN_LOSS
}
END_TEST

START_TEST(maxpool_and_bias_relu_grad) {
  /* L = <bias_relu(maxpool(x)), r>: the cnn's fused stage */
  const int C = 2, B = 3, H = 6, W = 7, S = (H / 2) * (W / 2);
  float x[2 * 3 * 6 * 7], dx[2 * 3 * 6 * 7], pooled[2 * 3 * 9], dp[2 * 3 * 9];
  float b[2], db[2], r[2 * 3 * 9];
  int32_t arg[2 * 3 * 9];
  fill(x, C * B * H * W, 1);
  fill(b, C, 0.3f);
  fill(r, C * B * S, 1);
#define STAGE_LOSS()                                                                               \
  (layers_maxpool_forward(C * B, H, W, x, pooled, arg),                                            \
   layers_bias_relu_cnhw(C, (int64_t)B * S, b, pooled), dot(pooled, r, C * B * S))
  (void)STAGE_LOSS();
  memcpy(dp, r, sizeof(r));
  layers_bias_relu_backward_cnhw(C, (int64_t)B * S, pooled, dp, db);
  layers_maxpool_backward(C * B, H, W, dp, arg, dx);
  for (int i = 0; i < C * B * H * W; i++) {
    float keep = x[i];
    x[i] = keep + 1e-3f;
    double lp = STAGE_LOSS();
    x[i] = keep - 1e-3f;
    double lm = STAGE_LOSS();
    x[i] = keep;
    expect_close(dx[i], (lp - lm) / 2e-3, "pool dx", i);
  }
  for (int i = 0; i < C; i++) {
    float keep = b[i];
    b[i] = keep + 1e-3f;
    double lp = STAGE_LOSS();
    b[i] = keep - 1e-3f;
    double lm = STAGE_LOSS();
    b[i] = keep;
    expect_close(db[i], (lp - lm) / 2e-3, "bias db", i);
  }
#undef STAGE_LOSS
}
END_TEST

START_TEST(relu_grad) {
  float x[64], y[64], dy[64], r[64];
  fill(x, 64, 1);
  fill(r, 64, 1);
  memcpy(y, x, sizeof(x));
  layers_relu_forward(y, 64);
  memcpy(dy, r, sizeof(r));
  layers_relu_backward(y, dy, 64);
  for (int i = 0; i < 64; i++) {
    ck_assert(y[i] == (x[i] > 0 ? x[i] : 0));
    ck_assert(dy[i] == (x[i] > 0 ? r[i] : 0));
  }
}
END_TEST

START_TEST(xent_grad_and_value) {
  const int B = 3, K = 5;
  float z[15], dz[15];
  uint8_t y[3] = {0, 4, 2};
  fill(z, B * K, 3);
  double ls = 0;
  int ok = 0;
  layers_xent(B, K, z, y, dz, &ls, &ok);
  /* reference in double */
  double ref = 0;
  for (int i = 0; i < B; i++) {
    double mx = -1e30, s = 0;
    for (int j = 0; j < K; j++) mx = fmax(mx, z[i * K + j]);
    for (int j = 0; j < K; j++) s += exp(z[i * K + j] - mx);
    ref += -(z[i * K + y[i]] - mx - log(s));
  }
  ck_assert_msg(fabs(ls - ref) < 1e-5 * B, "loss %g vs %g", ls, ref);
  for (int i = 0; i < B * K; i++) {
    float keep = z[i];
    double lp = 0, lm = 0;
    int c = 0;
    z[i] = keep + 1e-3f;
    layers_xent(B, K, z, y, NULL, &lp, &c);
    z[i] = keep - 1e-3f;
    layers_xent(B, K, z, y, NULL, &lm, &c);
    z[i] = keep;
    /* dz is of the batch-mean loss */
    expect_close(dz[i], (lp - lm) / 2e-3 / B, "xent dz", i);
  }
  /* stable for huge logits */
  float big[2] = {1000.0f, -1000.0f};
  uint8_t t = 0;
  ls = 0;
  layers_xent(1, 2, big, &t, NULL, &ls, &ok);
  ck_assert(isfinite(ls) && ls < 1e-6);
}
END_TEST

/* Whole model: loss(params) through net_forward/net_backward. */
static void check_model(const struct model_spec *spec, int B) {
  struct net *n = NULL;
  ck_assert_int_eq(net_create(spec, B, &n), 0);
  const struct model_layout *L = net_layout(n);
  const int64_t np = L->n_params, dim = L->in_dim;
  float *p = malloc(sizeof(float) * np), *g = malloc(sizeof(float) * np);
  float *x = malloc(sizeof(float) * dim * B);
  uint8_t y[16];
  ck_assert(p && g && x && B <= 16);
  optim_init_params(L, &R, p);
  fill(x, dim * B, 1);
  for (int i = 0; i < B; i++) y[i] = (uint8_t)(splitmix_below(&R, spec->n_classes));
  double loss = 0;
  int ok = 0;
  net_forward(n, p, x, B);
  net_backward(n, p, y, B, g, &loss, &ok);
  int checked = 0, mismatched = 0;
  for (int li = 0; li < L->n_layers; li++) {
    const struct layer_shape *s = &L->layer[li];
    /* a spread of weights and every bias of every layer */
    int64_t idx[40];
    int cnt = 0;
    for (int k = 0; k < 24; k++) idx[cnt++] = s->w_off + (int64_t)splitmix_below(&R, s->w_size);
    for (int64_t k = 0; k < s->b_size && cnt < 40; k++) idx[cnt++] = s->b_off + k;
    for (int k = 0; k < cnt; k++) {
      int64_t i = idx[k];
      float keep = p[i];
      /* A whole model in float has both rounding noise (which wants a big
       * step) and ReLU/max-pool kinks (which a big step crosses), so the
       * check passes when any of three steps agrees; a wrong gradient (a
       * factor, a sign, a missing term) agrees with none. */
      const float steps[3] = {1e-3f, 3e-3f, 1e-2f};
      double num[3];
      int agree = 0;
      for (int h = 0; h < 3; h++) {
        double lp = 0, lm = 0;
        int c = 0;
        p[i] = keep + steps[h];
        layers_xent(B, L->n_classes, net_forward(n, p, x, B), y, NULL, &lp, &c);
        p[i] = keep - steps[h];
        layers_xent(B, L->n_classes, net_forward(n, p, x, B), y, NULL, &lm, &c);
        p[i] = keep;
        num[h] = (lp - lm) / (2 * steps[h]) / B;
        agree |= fabs(g[i] - num[h]) <= ATOL + RTOL * fabs(num[h]);
      }
      if (!agree) {
        fprintf(stderr, "model grad[%lld]: analytic %.6g vs numeric %.6g %.6g %.6g\n", (long long)i,
                g[i], num[0], num[1], num[2]);
        mismatched++;
      }
      checked++;
    }
  }
  ck_assert_int_gt(checked, 50);
  /* A pre-activation within 1e-3 of a ReLU kink (or two pool inputs that
   * close) makes every step straddle it; with random data that happens to a
   * few parameters in a hundred. A real bug shows on many. */
  ck_assert_msg(mismatched * 50 <= checked, "%d of %d model gradients disagree", mismatched,
                checked);
  free(p);
  free(g);
  free(x);
  net_destroy(n);
}

START_TEST(model_mlp_grad) {
  struct model_spec s = {MODEL_MLP, 1, 6, 6, 10, 12, 9};
  check_model(&s, 4);
}
END_TEST

START_TEST(model_cnn_grad) {
  /* 3 channels exercises the NCHW -> CNHW transpose */
  struct model_spec s = {MODEL_CNN, 3, 16, 16, 10, 12, 9};
  check_model(&s, 3);
}
END_TEST

START_TEST(model_cnn_grad_fmnist_shape) {
  struct model_spec s = {MODEL_CNN, 1, 28, 28, 10, 20, 16};
  check_model(&s, 5);
}
END_TEST

START_TEST(layout_matches_pytorch_shapes) {
  struct model_spec s = {MODEL_CNN, 1, 28, 28, 10, 120, 84};
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(&s, &L), 0);
  ck_assert_int_eq(L.n_layers, 5);
  ck_assert_int_eq(L.layer[2].in_c, 16 * 4 * 4);
  /* 6*25+6 + 16*150+16 + 256*120+120 + 120*84+84 + 84*10+10 */
  ck_assert_int_eq(L.n_params, 156 + 2416 + 30840 + 10164 + 850);
  struct model_spec c = {MODEL_CNN, 3, 32, 32, 10, 120, 84};
  ck_assert_int_eq(model_layout_init(&c, &L), 0);
  ck_assert_int_eq(L.layer[2].in_c, 16 * 5 * 5);
  struct model_spec tiny = {MODEL_CNN, 1, 12, 12, 10, 8, 8};
  ck_assert_int_eq(model_layout_init(&tiny, &L), -EINVAL);
  struct model_spec m = {MODEL_MLP, 1, 28, 28, 10, 256, 128};
  ck_assert_int_eq(model_layout_init(&m, &L), 0);
  ck_assert_int_eq(L.n_params, 784 * 256 + 256 + 256 * 128 + 128 + 1290);
}
END_TEST

int main(void) {
  splitmix_seed(&R, 42);
  Suite *s = suite_create("grad");
  TCase *tc = tcase_create("grad");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, conv_one_channel);
  tcase_add_test(tc, conv_multi_channel_chunked);
  tcase_add_test(tc, conv_matches_direct);
  tcase_add_test(tc, linear_grad);
  tcase_add_test(tc, maxpool_and_bias_relu_grad);
  tcase_add_test(tc, relu_grad);
  tcase_add_test(tc, xent_grad_and_value);
  tcase_add_test(tc, model_mlp_grad);
  tcase_add_test(tc, model_cnn_grad);
  tcase_add_test(tc, model_cnn_grad_fmnist_shape);
  tcase_add_test(tc, layout_matches_pytorch_shapes);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
