/* The math the CUDA kernels share with the CPU backend (kernels/ops_math.h),
 * checked on the CPU against PyTorch, plus the pure parts of the CUDA
 * backend: the capped allocator's bookkeeping and the device memory plan.
 * Runs everywhere, with or without CUDA. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_mem.h"
#include "gpu_plan.h"
#include "ops_math.h"

#define NEAR(a, b, tol)                                                                            \
  ck_assert_msg(fabs((double)(a) - (double)(b)) <= (tol), "%s = %.9g, expected %.9g", #a,          \
                (double)(a), (double)(b))

static const float grads3[3][3] = {{0.5f, -0.25f, 1.0f}, {0.1f, 0.2f, -0.3f}, {-1.0f, 0.5f, 0.05f}};

START_TEST(relu_forward_backward) {
  ck_assert_float_eq(ct_relu(-1.5f), 0.0f);
  ck_assert_float_eq(ct_relu(0.0f), 0.0f);
  ck_assert_float_eq(ct_relu(2.25f), 2.25f);
  ck_assert_float_eq(ct_relu_grad(0.5f, 3.0f), 3.0f);
  ck_assert_float_eq(ct_relu_grad(0.0f, 3.0f), 0.0f);
  ck_assert_float_eq(ct_relu_grad(-0.5f, 3.0f), 0.0f);
}
END_TEST

/* Expected values: torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01)
 * on p = [1, -0.5, 0.25] with the three gradients above (torch 2.x, fp32). */
START_TEST(sgd_matches_pytorch) {
  float p[3] = {1.0f, -0.5f, 0.25f}, v[3] = {0};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < 3; i++) p[i] = ct_sgd_update(p[i], &v[i], grads3[t][i], 0.1f, 0.9f, 0.01f);
  NEAR(p[0], 0.940094769, 1e-6);
  NEAR(p[1], -0.517522395, 1e-6);
  NEAR(p[2], 0.029948581, 1e-6);
}
END_TEST

/* momentum 0 is plain SGD whatever the velocity buffer holds. */
START_TEST(sgd_without_momentum) {
  float p[3] = {1.0f, -0.5f, 0.25f}, v[3] = {7.0f, 7.0f, 7.0f};
  for (int t = 0; t < 3; t++)
    for (int i = 0; i < 3; i++) p[i] = ct_sgd_update(p[i], &v[i], grads3[t][i], 0.1f, 0.0f, 0.0f);
  NEAR(p[0], 1.03999996, 1e-6);
  NEAR(p[1], -0.545000017, 1e-6);
  NEAR(p[2], 0.175000012, 1e-6);
}
END_TEST

/* torch.optim.Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01). */
START_TEST(adam_matches_pytorch) {
  float p[3] = {1.0f, -0.5f, 0.25f}, m[3] = {0}, v[3] = {0};
  for (int t = 1; t <= 3; t++) {
    float bc1 = (float)(1.0 - pow(0.9, t)), bc2 = (float)(1.0 - pow(0.999, t));
    for (int i = 0; i < 3; i++)
      p[i] = ct_adam_update(p[i], &m[i], &v[i], grads3[t - 1][i], 0.01f, 0.9f, 0.999f, 1e-8f, 0.01f,
                            bc1, bc2);
  }
  NEAR(p[0], 0.984611452, 1e-6);
  NEAR(p[1], -0.494228333, 1e-6);
  NEAR(p[2], 0.232052356, 1e-6);
}
END_TEST

/* One softmax cross-entropy row through the shared pieces, as the CUDA
 * kernel and the CPU layer both assemble it. */
static void xent_row(const float *x, int k, int label, float scale, float *loss, float *grad) {
  float m = x[0];
  for (int j = 1; j < k; j++) m = x[j] > m ? x[j] : m;
  float s = 0.0f;
  for (int j = 0; j < k; j++) s += ct_exp_shifted(x[j], m);
  *loss = ct_xent_loss(x[label], m, s);
  for (int j = 0; j < k; j++) grad[j] = ct_xent_grad(x[j], m, s, j == label, scale);
}

/* F.cross_entropy on [[2,-1,0.5,3],[1000,999,-1000,998.5]], labels [1,0]:
 * the second row would overflow exp without the max shift. */
START_TEST(xent_matches_pytorch_and_is_stable) {
  const float x[2][4] = {{2.0f, -1.0f, 0.5f, 3.0f}, {1000.0f, 999.0f, -1000.0f, 998.5f}};
  const int y[2] = {1, 0};
  const double want_loss[2] = {4.38409185, 0.46436879};
  const double want_grad[8] = {0.125275627, -0.493762881, 0.0279527754,
                               0.340534478, -0.185734153, 0.115611941,
                               0,           0.0701221898};
  for (int r = 0; r < 2; r++) {
    float loss, g[4];
    xent_row(x[r], 4, y[r], 0.5f, &loss, g);
    ck_assert(isfinite(loss));
    NEAR(loss, want_loss[r], 1e-5);
    double sum = 0;
    for (int j = 0; j < 4; j++) {
      NEAR(g[j], want_grad[r * 4 + j], 1e-6);
      sum += g[j];
    }
    NEAR(sum, 0.0, 1e-6); /* softmax sums to one */
  }
}
END_TEST

START_TEST(mem_cap_and_peak) {
  struct gpu_mem m;
  gpu_mem_init(&m, 1000);
  ck_assert_int_eq(gpu_mem_reserve(&m, 600), 0);
  ck_assert_int_eq(gpu_mem_reserve(&m, 401), -ENOMEM);
  ck_assert_int_eq(m.used, 600); /* a refusal records nothing */
  ck_assert_int_eq(gpu_mem_reserve(&m, 400), 0);
  ck_assert_int_eq(m.peak, 1000);
  gpu_mem_release(&m, 600);
  ck_assert_int_eq(m.used, 400);
  ck_assert_int_eq(m.peak, 1000);
  ck_assert_int_eq(gpu_mem_reserve(&m, -1), -EINVAL);
  gpu_mem_init(&m, 0); /* no cap */
  ck_assert_int_eq(gpu_mem_reserve(&m, INT64_C(1) << 40), 0);
}
END_TEST

START_TEST(arena_alignment_and_exhaustion) {
  struct gpu_arena a;
  uintptr_t p1, p2, p3, p4;
  gpu_arena_init(&a, 0x100000, 1024);
  ck_assert_int_eq(gpu_arena_take(&a, 4, &p1), 0);
  ck_assert_int_eq(gpu_arena_take(&a, 257, &p2), 0);
  ck_assert_int_eq(gpu_arena_take(&a, 0, &p3), 0);
  ck_assert_uint_eq(p1, 0x100000);
  ck_assert_uint_eq(p2, 0x100000 + 256);
  ck_assert_uint_eq(p3, 0x100000 + 768);
  ck_assert_int_eq(gpu_arena_take(&a, 257, &p4), -ENOMEM);
  ck_assert_int_eq(gpu_arena_take(&a, 256, &p4), 0);
  ck_assert_int_eq(gpu_arena_take(&a, 1, &p4), -ENOMEM);
  ck_assert_int_eq(gpu_mem_round(0), 0);
  ck_assert_int_eq(gpu_mem_round(1), 256);
  ck_assert_int_eq(gpu_mem_round(512), 512);
}
END_TEST

START_TEST(oom_message_names_batch_need_and_limit) {
  char buf[256];
  gpu_mem_oom_message(buf, sizeof(buf), 512, (INT64_C(300) << 20) + 1, INT64_C(256) << 20, 0);
  ck_assert_str_eq(buf, "out of GPU memory at batch_size 512 (needs ~301 MiB, limit "
                        "256 MiB): try a smaller batch_size");
  gpu_mem_oom_message(buf, sizeof(buf), 64, INT64_C(5) << 20, 0, INT64_C(3) << 20);
  ck_assert_str_eq(buf, "out of GPU memory at batch_size 64 (needs ~5 MiB, 3 MiB "
                        "free on the device): try a smaller batch_size");
}
END_TEST

/* 4 -> 3 -> 2 -> 10 mlp at batch 2: every buffer below 256 bytes rounds up
 * to one 256-byte piece (see gpu_plan.c for the list). */
START_TEST(plan_mlp_by_hand) {
  struct model_spec ms = {MODEL_MLP, 1, 2, 2, 10, 3, 2};
  struct model_layout L;
  struct gpu_plan p;
  ck_assert_int_eq(model_layout_init(&ms, &L), 0);
  ck_assert_int_eq(L.n_params, 53);
  ck_assert_int_eq(gpu_plan_init(&L, OPTIM_SGD, 2, &p), 0);
  ck_assert_int_eq(p.eval_bytes, 256 /* params */ + 2 * (256 + 256) /* x, y slots */ +
                                     3 * 256 /* layer outputs */ +
                                     256 /* loss sums and counters */ + GPU_PLAN_BLAS_WORKSPACE);
  ck_assert_int_eq(p.red_outputs, 10);
  ck_assert_int_eq(p.backward_bytes, 3 * 256 /* d outputs */ + 256 /* 10 tickets */ +
                                         10 * GPU_PLAN_RED_PARTS * 4 /* partial sums */);
  ck_assert_int_eq(p.state_bytes, 256 /* grads */ + 256 /* velocity */);
  ck_assert_int_eq(p.train_bytes, p.state_bytes + p.backward_bytes);
  ck_assert_int_eq(p.flat, 0);
  struct gpu_plan pa;
  ck_assert_int_eq(gpu_plan_init(&L, OPTIM_ADAM, 2, &pa), 0);
  ck_assert_int_eq(pa.opt_floats, 2 * 53);
  ck_assert_int_eq(pa.train_bytes, p.train_bytes + 256); /* m and v: 424 B */
  ck_assert_int_eq(gpu_plan_init(&L, OPTIM_SGD, 0, &p), -EINVAL);
}
END_TEST

/* The Fashion-MNIST cnn (LeNet) at batch 64: the conv part's big buffers. */
START_TEST(plan_cnn_shapes) {
  struct model_spec ms = {MODEL_CNN, 1, 28, 28, 10, 120, 84};
  struct model_layout L;
  struct gpu_plan p, p2;
  ck_assert_int_eq(model_layout_init(&ms, &L), 0);
  ck_assert_int_eq(gpu_plan_init(&L, OPTIM_SGD, 64, &p), 0);
  ck_assert_int_eq(p.layer[0].col, 25 * 64 * 576);
  ck_assert_int_eq(p.layer[0].conv, 6 * 64 * 576);
  ck_assert_int_eq(p.layer[0].pool, 6 * 64 * 144);
  ck_assert_int_eq(p.layer[1].col, 150 * 64 * 64);
  ck_assert_int_eq(p.layer[1].conv, 16 * 64 * 64);
  ck_assert_int_eq(p.layer[1].pool, 16 * 64 * 16);
  ck_assert_int_eq(p.flat, 64 * 256);
  ck_assert_int_eq(p.layer[2].out, 64 * 120);
  ck_assert_int_eq(p.layer[4].out, 64 * 10);
  ck_assert_int_eq(p.x_floats, 64 * 784);
  /* memory grows with the batch; the training part is the smaller one */
  ck_assert_int_eq(gpu_plan_init(&L, OPTIM_SGD, 512, &p2), 0);
  ck_assert(p2.eval_bytes > 7 * (p.eval_bytes - GPU_PLAN_BLAS_WORKSPACE));
  ck_assert(p.train_bytes < p.eval_bytes);
}
END_TEST

START_TEST(shards_cover_the_batch) {
  int first, count;
  const int want_first[3] = {0, 4, 7}, want_count[3] = {4, 3, 3};
  for (int d = 0; d < 3; d++) {
    gpu_plan_shard(10, 3, d, &first, &count);
    ck_assert_int_eq(first, want_first[d]);
    ck_assert_int_eq(count, want_count[d]);
  }
  gpu_plan_shard(1, 2, 1, &first, &count);
  ck_assert_int_eq(count, 0);
  for (int n = 1; n < 40; n++)
    for (int g = 1; g <= 8; g++) {
      int next = 0;
      for (int d = 0; d < g; d++) {
        gpu_plan_shard(n, g, d, &first, &count);
        ck_assert_int_eq(first, next);
        ck_assert(count == n / g || count == n / g + 1);
        next += count;
      }
      ck_assert_int_eq(next, n);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("gpu_math");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, relu_forward_backward);
  tcase_add_test(tc, sgd_matches_pytorch);
  tcase_add_test(tc, sgd_without_momentum);
  tcase_add_test(tc, adam_matches_pytorch);
  tcase_add_test(tc, xent_matches_pytorch_and_is_stable);
  tcase_add_test(tc, mem_cap_and_peak);
  tcase_add_test(tc, arena_alignment_and_exhaustion);
  tcase_add_test(tc, oom_message_names_batch_need_and_limit);
  tcase_add_test(tc, plan_mlp_by_hand);
  tcase_add_test(tc, plan_cnn_shapes);
  tcase_add_test(tc, shards_cover_the_batch);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
