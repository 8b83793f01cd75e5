/* Fault injection on the CUDA test double (mock_cuda.c): for every k, the
 * k-th CUDA/cuBLAS/NCCL call or kernel launch of a short session fails. Each
 * time the backend must return an error (not crash, not carry on), and after
 * destroy no device memory, pinned block, stream, event, handle or
 * communicator may be left. Runs without a GPU, under ASan too. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"
#include "log.h"
#include "mock_cuda.h"

static const struct model_spec mlp = {MODEL_MLP, 1, 6, 6, 10, 8, 6};
static const struct model_spec cnn = {MODEL_CNN, 1, 16, 16, 10, 8, 6};

/* create, set_state, two steps, evaluate, get_state, destroy; the first
 * error, or 0. *destroy_from: the call count when destroy began. */
static int session(const struct model_spec *ms, int optim, int gpus, long *destroy_from) {
  const struct optim_spec os = {optim, 0.01f, 0.9f, 1e-4f, 0.9f, 0.999f, 1e-8f};
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(ms, &L), 0);
  const int batch = 5;
  float *p = calloc((size_t)L.n_params, sizeof(float));
  float *opt = calloc((size_t)2 * L.n_params, sizeof(float));
  float *x = calloc((size_t)batch * L.in_dim, sizeof(float));
  uint8_t y[5] = {1, 2, 3, 4, 5};
  ck_assert(p && opt && x);
  for (int i = 0; i < batch * L.in_dim; i++) x[i] = (float)(i % 7) / 7.0f;
  for (int64_t i = 0; i < L.n_params; i++) p[i] = (float)(i % 5) * 0.01f;
  struct backend_opts bo = {1, gpus, 0, 0, 0, NULL};
  struct backend *b = NULL;
  float loss;
  double lsum = 0, mb = 0;
  int correct = 0, rc = backend_cuda_ops.create(ms, &os, batch, &bo, &b);
  if (rc) {
    ck_assert_ptr_null(b);
    *destroy_from = mock_cuda_calls();
    goto out;
  }
  if ((rc = backend_cuda_ops.set_state(b, p, NULL, 0))) goto done;
  if ((rc = backend_cuda_ops.train_step(b, x, y, batch, &loss))) goto done;
  if ((rc = backend_cuda_ops.train_step(b, x, y, batch - 2, &loss))) goto done;
  if ((rc = backend_cuda_ops.evaluate(b, x, y, batch, &lsum, &correct))) goto done;
  if ((rc = backend_cuda_ops.get_state(b, p, opt, NULL))) goto done;
  rc = backend_cuda_ops.peak_mem_mb(b, &mb);
done:
  *destroy_from = mock_cuda_calls();
  backend_cuda_ops.destroy(b);
out:
  free(p), free(opt), free(x);
  return rc;
}

static void inject_everywhere(const struct model_spec *ms, int optim, int gpus) {
  long destroy_from;
  mock_cuda_fail_at(0);
  long before = mock_cuda_calls();
  ck_assert_int_eq(session(ms, optim, gpus, &destroy_from), 0);
  long total = mock_cuda_calls() - before;
  ck_assert_int_eq(mock_cuda_live(), 0);
  ck_assert(total > 50);
  int in_destroy = 0;
  for (long k = 1; k <= total; k++) {
    long target = mock_cuda_calls() + k; /* the absolute index that fails */
    mock_cuda_fail_at(k);
    int rc = session(ms, optim, gpus, &destroy_from);
    mock_cuda_fail_at(0);
    ck_assert_msg(mock_cuda_live() == 0, "call %ld of %ld failed: %ld objects left after destroy",
                  k, total, mock_cuda_live());
    /* destroy ignores errors (it frees what it can); everywhere else an
     * injected failure must come back as an error */
    if (target > destroy_from)
      in_destroy++;
    else
      ck_assert_msg(rc < 0, "call %ld of %ld failed but the session got %d", k, total, rc);
  }
  printf("%d GPU(s): all %ld injected failures reported (%d of them inside "
         "destroy, ignored there), nothing leaked\n",
         gpus, total - in_destroy, in_destroy);
}

START_TEST(faults_mlp_sgd_one_gpu) { inject_everywhere(&mlp, OPTIM_SGD, 1); }
END_TEST
START_TEST(faults_cnn_adam_two_gpus) { inject_everywhere(&cnn, OPTIM_ADAM, 2); }
END_TEST

/* The --oom-retry path under failures: a first step that runs out of memory,
 * then a half-size step whose re-plan meets a failure at its k-th call. When
 * that is again out of memory, a quarter-size step must train from the very
 * same weights (its loss equals a fresh backend's on them). */
static float step_loss(struct backend *b, const float *x, const uint8_t *y, int n) {
  float loss = -1;
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, n, &loss), 0);
  return loss;
}

START_TEST(oom_retry_survives_failures) {
  const struct optim_spec os = {OPTIM_SGD, 0.05f, 0.9f, 0, 0.9f, 0.999f, 1e-8f};
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(&cnn, &L), 0);
  float *p0 = calloc((size_t)L.n_params, sizeof(float));
  float *x = calloc((size_t)8 * L.in_dim, sizeof(float));
  uint8_t y[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ck_assert(p0 && x);
  for (int64_t i = 0; i < L.n_params; i++) p0[i] = (float)((i * 37) % 11 - 5) * 0.02f;
  for (int64_t i = 0; i < 8 * L.in_dim; i++) x[i] = (float)((i * 13) % 7) / 7.0f;
  struct backend_opts bo = {1, 2, 0, 0, 0, NULL};
  struct backend *b = NULL;
  ck_assert_int_eq(backend_cuda_ops.create(&cnn, &os, 2, &bo, &b), 0);
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
  const float want = step_loss(b, x, y, 2);
  backend_cuda_ops.destroy(b);
  int retried = 0;
  for (long k = 1;; k++) {
    b = NULL;
    ck_assert_int_eq(backend_cuda_ops.create(&cnn, &os, 8, &bo, &b), 0);
    ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
    float loss;
    mock_cuda_fail_at(1); /* the state arena's cudaMalloc */
    ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, 8, &loss), -ENOMEM);
    ck_assert(strstr(backend_cuda_last_error(), "out of GPU memory at batch_size 8"));
    mock_cuda_fail_at(k);
    int rc = backend_cuda_ops.train_step(b, x, y, 4, &loss);
    mock_cuda_fail_at(0);
    if (rc == -ENOMEM) {
      retried++;
      float got = step_loss(b, x, y, 2);
      ck_assert_msg(got == want, "k %ld: loss %.9g after the retry, %.9g fresh", k, got, want);
    }
    backend_cuda_ops.destroy(b);
    ck_assert_int_eq(mock_cuda_live(), 0);
    if (rc == 0) break; /* k is past the step's last call */
  }
  ck_assert_msg(retried >= 3, "only %d out-of-memory retries exercised", retried);
  free(p0), free(x);
}
END_TEST

/* With no device at all the mock says so and the backend answers -ENODEV. */
START_TEST(no_device) {
  mock_cuda_set_devices(0);
  long from;
  ck_assert_int_eq(session(&mlp, OPTIM_SGD, 0, &from), -ENODEV);
  mock_cuda_set_devices(2);
  ck_assert_int_eq(session(&mlp, OPTIM_SGD, 3, &from), -ENODEV);
  ck_assert_int_eq(mock_cuda_live(), 0);
}
END_TEST

int main(void) {
  mock_cuda_set_devices(2);
  /* hundreds of injected failures, each logged by the backend: keep quiet */
  log_set_level((enum log_level)(LOG_ERROR + 1));
  Suite *s = suite_create("cuda_faults");
  TCase *tc = tcase_create("faults");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, faults_mlp_sgd_one_gpu);
  tcase_add_test(tc, faults_cnn_adam_two_gpus);
  tcase_add_test(tc, oom_retry_survives_failures);
  tcase_add_test(tc, no_device);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
