/* The CPU backend through backend_ops, the interface the loop (and the CUDA
 * backend) share: state round trip, training lowers the loss, evaluation in
 * chunks equals one pass, argument checks, and --threads capping OpenBLAS
 * (at one thread, with OpenBLAS's idle worker threads shut down, and
 * backend_cpu_blas_idle doing that alone). */
#include <cblas.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "optim.h"
#include "splitmix.h"

static const struct model_spec spec = {MODEL_CNN, 1, 16, 16, 4, 10, 8};

static void make_data(float *x, uint8_t *y, int n, struct splitmix *r) {
  for (int i = 0; i < n; i++) {
    y[i] = (uint8_t)(i % 4);
    for (int k = 0; k < 256; k++)
      x[i * 256 + k] = (float)(splitmix_uniform(r) - 0.5) + (k / 16 == 4 * y[i] ? 1.5f : 0.0f);
  }
}

START_TEST(state_roundtrip_and_training) {
  struct optim_spec os = {OPTIM_SGD, 0.05f, 0.9f, 0.0f, 0.9f, 0.999f, 1e-8f};
  struct backend_opts bo = {1, 1, 0, 0, 0, NULL};
  struct backend *b = NULL;
  ck_assert_int_eq(backend_cpu_ops.create(&spec, &os, 8, &bo, &b), 0);
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(&spec, &L), 0);
  float *p = malloc(sizeof(float) * L.n_params), *q = malloc(sizeof(float) * L.n_params);
  float *st = calloc((size_t)L.n_params, sizeof(float));
  struct splitmix r;
  splitmix_seed(&r, 3);
  optim_init_params(&L, &r, p);
  ck_assert_int_eq(backend_cpu_ops.set_state(b, p, NULL, 0), 0);
  int64_t step = -1;
  ck_assert_int_eq(backend_cpu_ops.get_state(b, q, st, &step), 0);
  ck_assert(memcmp(p, q, sizeof(float) * L.n_params) == 0 && step == 0);

  float x[64 * 256];
  uint8_t y[64];
  make_data(x, y, 64, &r);
  double l0 = 0, l1 = 0;
  int c0 = 0, c1 = 0;
  ck_assert_int_eq(backend_cpu_ops.evaluate(b, x, y, 64, &l0, &c0), 0);
  float loss;
  for (int e = 0; e < 15; e++)
    for (int i = 0; i < 64; i += 8)
      ck_assert_int_eq(backend_cpu_ops.train_step(b, x + i * 256, y + i, 8, &loss), 0);
  ck_assert_int_eq(backend_cpu_ops.evaluate(b, x, y, 64, &l1, &c1), 0);
  ck_assert_msg(l1 < 0.5 * l0 && c1 > c0, "loss %g -> %g, correct %d -> %d", l0, l1, c0, c1);
  ck_assert_int_eq(backend_cpu_ops.get_state(b, NULL, NULL, &step), 0);
  ck_assert_int_eq(step, 15 * 8);

  /* evaluating 64 in one call equals 8 calls of 8 */
  double ls = 0;
  int cs = 0;
  for (int i = 0; i < 64; i += 8)
    ck_assert_int_eq(backend_cpu_ops.evaluate(b, x + i * 256, y + i, 8, &ls, &cs), 0);
  ck_assert_int_eq(cs, c1);
  ck_assert(fabs(ls - l1) < 1e-4 * fabs(l1));

  /* a batch above max_batch is refused */
  ck_assert_int_eq(backend_cpu_ops.train_step(b, x, y, 9, &loss), -EINVAL);
  double mb = 0;
  ck_assert_int_eq(backend_cpu_ops.peak_mem_mb(b, &mb), 0);
  ck_assert(mb > 0);
  backend_cpu_ops.destroy(b);
  free(p);
  free(q);
  free(st);
}
END_TEST

/* the threads of this process: /proc/self/task's entries */
static int count_threads(void) {
  DIR *d = opendir("/proc/self/task");
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* a product large enough for OpenBLAS to split across threads, checked */
static void sgemm_works(void) {
  enum { N = 256 };
  float *x = calloc(N * N, sizeof(float)), *y = calloc(N * N, sizeof(float));
  ck_assert(x && y);
  for (int i = 0; i < N * N; i++) x[i] = (float)(i % 7) - 3.0f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, x, N, x, N, 0.0f, y, N);
  double want = 0.0;
  for (int k = 0; k < N; k++) want += (double)x[k] * x[(int64_t)k * N + 1];
  ck_assert_float_eq_tol(y[1], (float)want, 1e-3f);
  free(x);
  free(y);
}

/* OpenBLAS started a worker per further core when it loaded (none on one
 * core): backend_cpu_blas_idle leaves none to spin beside the trainer,
 * and sgemm at two threads afterwards still computes (it starts them
 * again). First in the suite, before any backend shut them down. */
START_TEST(blas_pool_idle) {
  ck_assert_int_eq(backend_cpu_blas_idle(), 0);
  ck_assert_int_eq(count_threads(), 1);
  openblas_set_num_threads(2);
  sgemm_works();
  openblas_set_num_threads(1);
}
END_TEST

START_TEST(threads_cap_openblas) {
  struct optim_spec os = {OPTIM_ADAM, 0.001f, 0, 0, 0.9f, 0.999f, 1e-8f};
  struct backend *b = NULL;
  struct backend_opts two = {2, 1, 0, 0, 0, NULL}, one = {1, 1, 0, 0, 0, NULL};
  ck_assert_int_eq(backend_cpu_ops.create(&spec, &os, 4, &two, &b), 0);
  ck_assert_int_eq(openblas_get_num_threads(), 2);
  sgemm_works();
  backend_cpu_ops.destroy(b);
  ck_assert_int_eq(backend_cpu_ops.create(&spec, &os, 4, &one, &b), 0);
  ck_assert_int_eq(openblas_get_num_threads(), 1);
  /* at one thread the backend shuts the pool down itself */
  ck_assert_int_eq(count_threads(), 1);
  backend_cpu_ops.destroy(b);
}
END_TEST

START_TEST(bad_spec_refused) {
  struct optim_spec os = {OPTIM_SGD, 0.01f, 0, 0, 0, 0, 0};
  struct backend_opts bo = {1, 1, 0, 0, 0, NULL};
  struct backend *b = NULL;
  struct model_spec tiny = {MODEL_CNN, 1, 8, 8, 10, 4, 4};
  ck_assert_int_eq(backend_cpu_ops.create(&tiny, &os, 4, &bo, &b), -EINVAL);
  ck_assert_int_eq(backend_cpu_ops.create(&spec, &os, 0, &bo, &b), -EINVAL);
  ck_assert_ptr_null(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("backend");
  TCase *tc = tcase_create("backend");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, blas_pool_idle);
  tcase_add_test(tc, state_roundtrip_and_training);
  tcase_add_test(tc, threads_cap_openblas);
  tcase_add_test(tc, bad_spec_refused);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
