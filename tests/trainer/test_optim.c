/* Optimisers against hand-computed PyTorch steps, and the RNG. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "backend.h"
#include "conv_avx2.h"
#include "ops_math.h"
#include "optim.h"
#include "splitmix.h"

#define CLOSE(a, b)                                                                                \
  ck_assert_msg(fabs((double)(a) - (double)(b)) < 1e-6, "%.9g vs %.9g", (double)(a), (double)(b))

START_TEST(sgd_momentum_pytorch_form) {
  /* torch.optim.SGD(lr=0.1, momentum=0.9): v1 = g1; p1 = p0 - lr*v1;
   * v2 = 0.9*v1 + g2; p2 = p1 - lr*v2 */
  struct optim_spec o = {OPTIM_SGD, 0.1f, 0.9f, 0.0f, 0, 0, 0};
  float p[1] = {1.0f}, v[1] = {0.0f}, g[1] = {0.5f};
  optim_step(&o, p, v, g, 1, 1);
  CLOSE(v[0], 0.5);
  CLOSE(p[0], 0.95);
  g[0] = -0.25f;
  optim_step(&o, p, v, g, 1, 2);
  CLOSE(v[0], 0.9 * 0.5 - 0.25);
  CLOSE(p[0], 0.95 - 0.1 * 0.2);
}
END_TEST

START_TEST(sgd_weight_decay) {
  /* g' = g + wd*p */
  struct optim_spec o = {OPTIM_SGD, 0.1f, 0.0f, 0.01f, 0, 0, 0};
  float p[1] = {2.0f}, v[1] = {0}, g[1] = {1.0f};
  optim_step(&o, p, v, g, 1, 1);
  CLOSE(p[0], 2.0 - 0.1 * (1.0 + 0.02));
}
END_TEST

START_TEST(adam_bias_corrected) {
  /* torch.optim.Adam(lr=0.01): step 1 moves by lr * sign(g) (m/sqrt(v) = 1) */
  struct optim_spec o = {OPTIM_ADAM, 0.01f, 0, 0.0f, 0.9f, 0.999f, 1e-8f};
  float p[2] = {1.0f, -1.0f}, st[4] = {0}, g[2] = {0.3f, -2.0f};
  optim_step(&o, p, st, g, 2, 1);
  ck_assert(fabs(p[0] - 0.99) < 1e-6 && fabs(p[1] + 0.99) < 1e-6);
  /* step 2 in double by the textbook formula */
  double m = 0.1 * 0.3, v = 0.001 * 0.09, gg = 0.1;
  m = 0.9 * m + 0.1 * gg;
  v = 0.999 * v + 0.001 * gg * gg;
  double mh = m / (1 - 0.81), vh = v / (1 - 0.999 * 0.999);
  double want = 0.99 - 0.01 * mh / (sqrt(vh) + 1e-8);
  g[0] = 0.1f;
  g[1] = 0.0f;
  optim_step(&o, p, st, g, 2, 2);
  ck_assert_msg(fabs(p[0] - want) < 1e-6, "%.9g vs %.9g", p[0], want);
}
END_TEST

/* The AVX2 copy of the loops (8 parameters a step) and the baseline one
 * (on a CPU without AVX2, or with it hidden) give the same bits, SGD and
 * Adam, over a length that leaves a tail. */
START_TEST(step_same_bits_with_and_without_avx2) {
  enum { N = 8 * 5 + 3 };
  const struct optim_spec specs[2] = {
      {.kind = OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f},
      {.kind = OPTIM_ADAM,
       .lr = 0.01f,
       .beta1 = 0.9f,
       .beta2 = 0.999f,
       .eps = 1e-8f,
       .weight_decay = 1e-3f}};
  struct splitmix r;
  splitmix_seed(&r, 3);
  for (int k = 0; k < 2; k++) {
    float p[2][N], st[2][2 * N], g[N];
    for (int i = 0; i < N; i++) {
      p[0][i] = p[1][i] = (float)(2.0 * splitmix_uniform(&r) - 1.0);
      g[i] = (float)(2.0 * splitmix_uniform(&r) - 1.0);
    }
    for (int i = 0; i < 2 * N; i++) st[0][i] = st[1][i] = (float)splitmix_uniform(&r);
    for (int hide = 0; hide < 2; hide++) {
      conv_avx2_hide_cpu(hide);
      for (int step = 1; step <= 3; step++) optim_step(&specs[k], p[hide], st[hide], g, N, step);
    }
    conv_avx2_hide_cpu(0);
    ck_assert_mem_eq(p[0], p[1], sizeof(p[0]));
    ck_assert_mem_eq(st[0], st[1], sizeof(st[0]));
  }
}
END_TEST

START_TEST(ops_math_pieces) {
  ck_assert(ct_relu(-1.0f) == 0.0f && ct_relu(2.0f) == 2.0f);
  ck_assert(ct_relu_grad(0.0f, 5.0f) == 0.0f && ct_relu_grad(1.0f, 5.0f) == 5.0f);
  float v = 0;
  CLOSE(ct_sgd_update(1.0f, &v, 1.0f, 0.5f, 0.0f, 0.0f), 0.5);
  /* softmax over {0, 0}: loss log 2, grads -0.5 / +0.5 */
  float s = ct_exp_shifted(0, 0) + ct_exp_shifted(0, 0);
  CLOSE(ct_xent_loss(0, 0, s), log(2.0));
  CLOSE(ct_xent_grad(0, 0, s, 1, 1.0f), -0.5);
  CLOSE(ct_xent_grad(0, 0, s, 0, 1.0f), 0.5);
}
END_TEST

START_TEST(init_bounds_pytorch_default) {
  struct model_spec ms = {MODEL_MLP, 1, 10, 10, 10, 50, 20};
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(&ms, &L), 0);
  float *p = malloc(sizeof(float) * L.n_params);
  ck_assert(p);
  struct splitmix r;
  splitmix_seed(&r, 7);
  optim_init_params(&L, &r, p);
  for (int li = 0; li < L.n_layers; li++) {
    const struct layer_shape *s = &L.layer[li];
    double bound = 1.0 / sqrt((double)s->in_c), mx = 0;
    for (int64_t i = 0; i < s->w_size; i++) mx = fmax(mx, fabs(p[s->w_off + i]));
    ck_assert(mx <= bound && mx > 0.8 * bound);
  }
  free(p);
}
END_TEST

START_TEST(rng_deterministic_and_shuffle_is_permutation) {
  struct splitmix a, b;
  splitmix_seed(&a, 1);
  splitmix_seed(&b, 1);
  for (int i = 0; i < 100; i++) ck_assert(splitmix_next(&a) == splitmix_next(&b));
  int32_t idx[1000];
  int seen[1000] = {0};
  for (int i = 0; i < 1000; i++) idx[i] = i;
  splitmix_shuffle(&a, idx, 1000);
  int moved = 0;
  for (int i = 0; i < 1000; i++) {
    seen[idx[i]]++;
    moved += idx[i] != i;
  }
  for (int i = 0; i < 1000; i++) ck_assert_int_eq(seen[i], 1);
  ck_assert_int_gt(moved, 900);
  for (int i = 0; i < 1000; i++) ck_assert(splitmix_below(&a, 7) < 7);
}
END_TEST

int main(void) {
  Suite *s = suite_create("optim");
  TCase *tc = tcase_create("optim");
  tcase_add_test(tc, sgd_momentum_pytorch_form);
  tcase_add_test(tc, sgd_weight_decay);
  tcase_add_test(tc, adam_bias_corrected);
  tcase_add_test(tc, step_same_bits_with_and_without_avx2);
  tcase_add_test(tc, ops_math_pieces);
  tcase_add_test(tc, init_bounds_pytorch_default);
  tcase_add_test(tc, rng_deterministic_and_shuffle_is_permutation);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
