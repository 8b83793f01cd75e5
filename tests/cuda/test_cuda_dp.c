/* Data parallel: two GPUs (NCCL all-reduce, ncclAvg) train the same model as
 * one GPU with the same global batch — same losses and weights after several
 * steps, also when the batch does not split evenly. Skips without 2 GPUs. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"
#include "gpu_skip.h"

/* The two runs add the same per-sample gradients in a different order; the
 * optimiser state (a running sum of gradients) drifts the most. */
#define TOL 1e-4
#define TOL_STATE 1e-3

static uint64_t rng_state;

static float frand(float lo, float hi) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  double u = (double)(rng_state >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

static double rel_err(const float *a, const float *b, int64_t n) {
  double err = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    double e = fabs((double)a[i] - b[i]);
    if (e > err) err = e;
    if (fabs(b[i]) > scale) scale = fabs(b[i]);
  }
  return err / scale;
}

/* Trains `steps` batches of `batch` on `gpus` devices; params, optimiser
 * state and losses out. */
static void train(const struct model_spec *ms, const struct optim_spec *os, int gpus, int batch,
                  int steps, const float *p0, const float *x, const uint8_t *y, float *params,
                  float *opt, float *losses, double *eval_loss, int *eval_correct) {
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(ms, &L), 0);
  struct backend_opts bo = {1, gpus, 0, 0, 0, NULL};
  struct backend *b = NULL;
  int rc = backend_cuda_ops.create(ms, os, batch, &bo, &b);
  ck_assert_msg(rc == 0, "create on %d GPUs: %s", gpus, backend_cuda_last_error());
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
  for (int s = 0; s < steps; s++)
    ck_assert_int_eq(backend_cuda_ops.train_step(b, x + (int64_t)s * batch * L.in_dim,
                                                 y + s * batch, batch, &losses[s]),
                     0);
  ck_assert_int_eq(backend_cuda_ops.get_state(b, params, opt, NULL), 0);
  *eval_loss = 0;
  *eval_correct = 0;
  ck_assert_int_eq(backend_cuda_ops.evaluate(b, x, y, batch * steps, eval_loss, eval_correct), 0);
  backend_cuda_ops.destroy(b);
}

static void check_equivalence(const struct model_spec *ms, const struct optim_spec *os, int batch) {
  const int steps = 5;
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(ms, &L), 0);
  const int64_t P = L.n_params, O = optim_state_per_param(os->kind) * P;
  float *p0 = malloc((size_t)P * sizeof(float));
  float *x = malloc((size_t)steps * batch * L.in_dim * sizeof(float));
  uint8_t *y = malloc((size_t)steps * batch);
  float *p1 = malloc((size_t)P * sizeof(float)), *p2 = malloc((size_t)P * sizeof(float));
  float *o1 = malloc((size_t)O * sizeof(float)), *o2 = malloc((size_t)O * sizeof(float));
  for (int64_t i = 0; i < P; i++) p0[i] = frand(-0.2f, 0.2f);
  for (int64_t i = 0; i < (int64_t)steps * batch * L.in_dim; i++) x[i] = frand(-1, 1);
  for (int i = 0; i < steps * batch; i++) y[i] = (uint8_t)frand(0, 9.99f);
  float l1[8], l2[8];
  double e1, e2;
  int c1, c2;
  train(ms, os, 1, batch, steps, p0, x, y, p1, o1, l1, &e1, &c1);
  train(ms, os, 2, batch, steps, p0, x, y, p2, o2, l2, &e2, &c2);
  for (int s = 0; s < steps; s++)
    ck_assert_msg(fabs(l2[s] - l1[s]) <= TOL * fabs(l1[s]), "step %d loss: 2 GPUs %.8g, 1 GPU %.8g",
                  s, l2[s], l1[s]);
  double ep = rel_err(p2, p1, P), eo = rel_err(o2, o1, O);
  ck_assert_msg(ep <= TOL, "weights after %d steps: rel err %.3g", steps, ep);
  ck_assert_msg(eo <= TOL_STATE, "optimiser state: rel err %.3g", eo);
  ck_assert_msg(fabs(e2 - e1) <= TOL * e1, "eval loss %.8g vs %.8g", e2, e1);
  ck_assert_int_eq(c1, c2);
  free(p0), free(x), free(y), free(p1), free(p2), free(o1), free(o2);
}

static const struct model_spec cnn = {MODEL_CNN, 1, 28, 28, 10, 32, 20};
static const struct model_spec mlp = {MODEL_MLP, 1, 28, 28, 10, 64, 32};

START_TEST(two_gpus_equal_one_sgd) {
  const struct optim_spec os = {OPTIM_SGD, 0.05f, 0.9f, 1e-4f, 0.9f, 0.999f, 1e-8f};
  check_equivalence(&cnn, &os, 64);
  check_equivalence(&cnn, &os, 37); /* 19 + 18 rows */
  check_equivalence(&mlp, &os, 1);  /* the second GPU gets no rows */
}
END_TEST

START_TEST(two_gpus_equal_one_adam) {
  const struct optim_spec os = {OPTIM_ADAM, 1e-3f, 0, 0, 0.9f, 0.999f, 1e-8f};
  check_equivalence(&cnn, &os, 33);
  check_equivalence(&mlp, &os, 64);
}
END_TEST

int main(void) {
  int gate = gpu_test_gate(2); /* gpu_skip.h: skips only without devices */
  if (gate != GPU_RUN) return gate;
  const char *seed = getenv("CTUNE_TEST_SEED");
  /* fixed by default so CI runs are repeatable; set it to explore others */
  rng_state = seed && *seed ? strtoull(seed, NULL, 10) : 20261122;
  printf("test_cuda_dp: seed %llu (CTUNE_TEST_SEED repeats it)\n", (unsigned long long)rng_state);
  Suite *s = suite_create("cuda_dp");
  TCase *tc = tcase_create("dp");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, two_gpus_equal_one_sgd);
  tcase_add_test(tc, two_gpus_equal_one_adam);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* CUDA contexts do not fork */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
