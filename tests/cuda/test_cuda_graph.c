/* Fast steps on the CUDA test double (mock_cuda.c) or the kernel emulator
 * (emu_cuda_ops.cpp): the data set uploaded once as uint8 and gathered on the
 * device, one captured graph per (phase, rows) replayed per step, the loss
 * kept on the device until backend_cuda_take_loss, evaluation in chunks of
 * at least 256 rows with one wait. The double counts what the host asks of
 * the "GPU", so launches and waits per step are checked here without one. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"
#include "mock_cuda.h"

#define N_TRAIN 96
#define N_EVAL 600
#define BATCH 8
#define EPOCHS 3

static const struct model_spec cnn = {MODEL_CNN, 1, 28, 28, 10, 24, 16};
static const struct model_spec mlp = {MODEL_MLP, 1, 28, 28, 10, 32, 16};
static const struct optim_spec sgd = {OPTIM_SGD, 0.05f, 0.9f, 1e-4f, 0.9f, 0.999f, 1e-8f};
static const struct optim_spec adam = {OPTIM_ADAM, 0.002f, 0, 1e-4f, 0.9f, 0.999f, 1e-8f};

static uint64_t rng = 20261122;
static uint32_t next_u32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

struct data {
  int64_t n;
  int dim;
  uint8_t *pix, *lab;
  float *xf; /* normalised as the trainer does */
};

static void make_data(struct data *d, int64_t n, int dim) {
  d->n = n;
  d->dim = dim;
  d->pix = malloc((size_t)(n * dim));
  d->lab = malloc((size_t)n);
  d->xf = malloc((size_t)(n * dim) * sizeof(float));
  ck_assert(d->pix && d->lab && d->xf);
  for (int64_t i = 0; i < n * dim; i++) {
    d->pix[i] = (uint8_t)(next_u32() & 0xff);
    d->xf[i] = ((float)d->pix[i] / 255.0f - 0.5f) / 0.5f;
  }
  for (int64_t i = 0; i < n; i++) d->lab[i] = (uint8_t)(next_u32() % 10);
}

static void free_data(struct data *d) { free(d->pix), free(d->lab), free(d->xf); }

static float *init_params(const struct model_spec *spec, int64_t *np) {
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(spec, &L), 0);
  float *p = malloc((size_t)L.n_params * sizeof(float));
  ck_assert(p);
  for (int64_t i = 0; i < L.n_params; i++)
    p[i] = ((float)(next_u32() % 20001) / 10000.0f - 1.0f) * 0.1f;
  *np = L.n_params;
  return p;
}

/* The epoch's order: a fixed shuffle per epoch. */
static void order_for(int epoch, int32_t *perm, int64_t n) {
  for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
  uint64_t s = 77 + (uint64_t)epoch;
  for (int64_t i = n - 1; i > 0; i--) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    int64_t j = (int64_t)((s >> 33) % (uint64_t)(i + 1));
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

static struct backend *make(const struct model_spec *spec, const struct optim_spec *os, int gpus,
                            int graphs, const float *p0) {
  struct backend_opts bo = {1, gpus, 0, 0, 0, NULL};
  struct backend *b = NULL;
  setenv("CTUNE_CUDA_GRAPHS", graphs ? "1" : "0", 1);
  ck_assert_int_eq(backend_cuda_ops.create(spec, os, BATCH, &bo, &b), 0);
  unsetenv("CTUNE_CUDA_GRAPHS");
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
  int g = -1;
  ck_assert_int_eq(backend_cuda_counters(b, NULL, &g), 0);
  ck_assert_int_eq(g, graphs && gpus == 1);
  return b;
}

/* EPOCHS epochs on the device path; per-epoch mean losses into out. */
static void train_device(struct backend *b, const struct data *d, double *out) {
  int32_t perm[N_TRAIN];
  ck_assert_int_eq(backend_cuda_set_data(b, 0, d->pix, d->lab, d->n), 0);
  for (int e = 0; e < EPOCHS; e++) {
    order_for(e, perm, d->n);
    ck_assert_int_eq(backend_cuda_set_order(b, 0, perm, d->n), 0);
    for (int64_t pos = 0; pos < d->n; pos += BATCH) {
      int m = (int)(d->n - pos < BATCH ? d->n - pos : BATCH);
      ck_assert_int_eq(backend_cuda_train_next(b, m), 0);
    }
    double sum = 0;
    int64_t rows = 0;
    int bad = 1;
    ck_assert_int_eq(backend_cuda_take_loss(b, &sum, &rows, &bad), 0);
    ck_assert_int_eq(rows, d->n);
    ck_assert_int_eq(bad, 0);
    out[e] = sum / (double)rows;
  }
}

/* The same epochs through any backend's train_step on host floats. */
static void train_host(const struct backend_ops *ops, struct backend *b, const struct data *d,
                       double *out) {
  int32_t perm[N_TRAIN];
  float *x = malloc((size_t)BATCH * d->dim * sizeof(float));
  uint8_t y[BATCH];
  ck_assert(x);
  for (int e = 0; e < EPOCHS; e++) {
    order_for(e, perm, d->n);
    double sum = 0;
    for (int64_t pos = 0; pos < d->n; pos += BATCH) {
      int m = (int)(d->n - pos < BATCH ? d->n - pos : BATCH);
      for (int i = 0; i < m; i++) {
        memcpy(x + (int64_t)i * d->dim, d->xf + (int64_t)perm[pos + i] * d->dim,
               (size_t)d->dim * sizeof(float));
        y[i] = d->lab[perm[pos + i]];
      }
      float l = 0;
      ck_assert_int_eq(ops->train_step(b, x, y, m, &l), 0);
      sum += (double)l * m;
    }
    out[e] = sum / (double)d->n;
  }
  free(x);
}

static void params_of(const struct backend_ops *ops, struct backend *b, float *p) {
  int64_t step;
  ck_assert_int_eq(ops->get_state(b, p, NULL, &step), 0);
}

/* Steady state: one graph launch and no host wait per training step; the
 * loss is read with one wait per take_loss. */
START_TEST(one_launch_no_wait_per_step) {
  struct data d;
  int64_t np;
  make_data(&d, N_TRAIN, 784);
  float *p0 = init_params(&cnn, &np);
  struct backend *b = make(&cnn, &sgd, 1, 1, p0);
  int32_t perm[N_TRAIN];
  order_for(0, perm, d.n);
  ck_assert_int_eq(backend_cuda_set_data(b, 0, d.pix, d.lab, d.n), 0);
  ck_assert_int_eq(backend_cuda_set_order(b, 0, perm, d.n), 0);
  /* the first step runs eagerly: under lazy module loading its kernels are
   * loaded there, not inside the first capture */
  struct mock_cuda_counts w0, w1, c0, c1, c2;
  mock_cuda_get_counts(&w0);
  ck_assert_int_eq(backend_cuda_train_next(b, BATCH), 0);
  mock_cuda_get_counts(&w1);
  ck_assert_int_eq(w1.graph_launches - w0.graph_launches, 0);
  ck_assert_int_gt(w1.submits - w0.submits, 1);
  ck_assert_int_eq(backend_cuda_train_next(b, BATCH), 0); /* captures */
  mock_cuda_get_counts(&c0);
  ck_assert_int_eq(c0.graph_launches - w1.graph_launches, 1);
  const int steps = N_TRAIN / BATCH - 2;
  for (int s = 0; s < steps; s++) ck_assert_int_eq(backend_cuda_train_next(b, BATCH), 0);
  mock_cuda_get_counts(&c1);
  printf("%d steps: %ld graph launches, %ld submits, %ld host waits, %ld nodes a step\n", steps,
         c1.graph_launches - c0.graph_launches, c1.submits - c0.submits, c1.syncs - c0.syncs,
         (c1.graph_nodes - c0.graph_nodes) / steps);
  /* the cnn's step with SGD: gather 1; forward 12 (a conv layer: im2col,
   * GEMM, bias + ReLU + pooling; a linear one: GEMM, bias + ReLU); the loss,
   * its sums and the last layer's bias gradient 1; backward 14 (a hidden
   * linear layer: ReLU backward with its bias gradient, two GEMMs; the last:
   * two GEMMs; a conv layer: pooling + ReLU backward with its bias
   * gradient, the weight GEMM, and but for the first the input GEMM and
   * col2im); the update 1 */
  ck_assert_int_eq((c1.graph_nodes - c0.graph_nodes) / steps, 29);
  ck_assert_int_eq(c1.graph_launches - c0.graph_launches, steps);
  ck_assert_int_eq(c1.submits - c0.submits, steps);
  ck_assert_int_eq(c1.syncs - c0.syncs, 0);
  double sum;
  int64_t rows;
  int bad;
  ck_assert_int_eq(backend_cuda_take_loss(b, &sum, &rows, &bad), 0);
  mock_cuda_get_counts(&c2);
  ck_assert_int_eq(c2.syncs - c1.syncs, 1);
  ck_assert_int_eq(rows, N_TRAIN);
  ck_assert(isfinite(sum) && sum > 0 && !bad);
  /* past the end of the order */
  ck_assert_int_eq(backend_cuda_train_next(b, BATCH), -EINVAL);
  backend_cuda_ops.destroy(b);
  ck_assert_int_eq(mock_cuda_live(), 0);
  free(p0);
  free_data(&d);
}
END_TEST

/* Graph replay, eager device steps and host-fed steps train the same model:
 * the same losses over EPOCHS epochs (SGD and Adam, a last short batch that
 * is its own graph), and the CPU backend within fp32 summation drift. */
static void same_losses(const struct model_spec *spec, const struct optim_spec *os) {
  struct data d;
  int64_t np;
  make_data(&d, N_TRAIN - 3, spec->in_c * spec->in_h * spec->in_w);
  float *p0 = init_params(spec, &np);
  double lg[EPOCHS], le[EPOCHS], lh[EPOCHS], lc[EPOCHS];
  struct backend *g = make(spec, os, 1, 1, p0);
  struct backend *e = make(spec, os, 1, 0, p0);
  struct backend *h = make(spec, os, 1, 1, p0);
  train_device(g, &d, lg);
  train_device(e, &d, le);
  train_host(&backend_cuda_ops, h, &d, lh);
  struct backend_opts bo = {1, 0, 0, 0, 0, NULL};
  struct backend *cpu = NULL;
  ck_assert_int_eq(backend_cpu_ops.create(spec, os, BATCH, &bo, &cpu), 0);
  ck_assert_int_eq(backend_cpu_ops.set_state(cpu, p0, NULL, 0), 0);
  train_host(&backend_cpu_ops, cpu, &d, lc);
  for (int i = 0; i < EPOCHS; i++) {
    printf("epoch %d: graph %.9f eager %.9f host %.9f cpu %.9f\n", i + 1, lg[i], le[i], lh[i],
           lc[i]);
    ck_assert_msg(lg[i] == le[i], "graph and eager differ at epoch %d", i + 1);
    ck_assert(fabs(lg[i] - lh[i]) <= 1e-6 * fabs(lh[i]));
    ck_assert(fabs(lg[i] - lc[i]) <= 1e-4 * fabs(lc[i]));
  }
  ck_assert(lg[EPOCHS - 1] < lg[0]); /* it learns */
  float *pg = malloc((size_t)np * sizeof(float)), *pe = malloc((size_t)np * sizeof(float));
  ck_assert(pg && pe);
  params_of(&backend_cuda_ops, g, pg);
  params_of(&backend_cuda_ops, e, pe);
  ck_assert(memcmp(pg, pe, (size_t)np * sizeof(float)) == 0);
  backend_cuda_ops.destroy(g);
  backend_cuda_ops.destroy(e);
  backend_cuda_ops.destroy(h);
  backend_cpu_ops.destroy(cpu);
  free(pg), free(pe), free(p0);
  free_data(&d);
}

START_TEST(graph_equals_eager_sgd) { same_losses(&cnn, &sgd); }
END_TEST
START_TEST(graph_equals_eager_adam) { same_losses(&mlp, &adam); }
END_TEST

/* Two devices (eager, all-reduce) give the one-device graph's losses. */
START_TEST(two_devices_match_the_graph) {
  struct data d;
  int64_t np;
  make_data(&d, N_TRAIN, 784);
  float *p0 = init_params(&mlp, &np);
  double l1[EPOCHS], l2[EPOCHS];
  struct backend *one = make(&mlp, &sgd, 1, 1, p0);
  struct backend *two = make(&mlp, &sgd, 2, 1, p0);
  train_device(one, &d, l1);
  train_device(two, &d, l2);
  for (int i = 0; i < EPOCHS; i++) ck_assert(fabs(l1[i] - l2[i]) <= 1e-5 * fabs(l1[i]));
  backend_cuda_ops.destroy(one);
  backend_cuda_ops.destroy(two);
  free(p0);
  free_data(&d);
}
END_TEST

/* A step with fewer rows than devices leaves one without rows: its cursor
 * still moves, so the next steps read the same rows as on one device. */
START_TEST(a_device_without_rows_keeps_its_cursor) {
  struct data d;
  int64_t np;
  make_data(&d, N_TRAIN, 784);
  float *p0 = init_params(&mlp, &np);
  double sum[2];
  for (int gpus = 1; gpus <= 2; gpus++) {
    struct backend *b = make(&mlp, &sgd, gpus, 1, p0);
    int32_t perm[N_TRAIN];
    order_for(0, perm, N_TRAIN);
    ck_assert_int_eq(backend_cuda_set_data(b, 0, d.pix, d.lab, N_TRAIN), 0);
    ck_assert_int_eq(backend_cuda_set_order(b, 0, perm, N_TRAIN), 0);
    const int rows[] = {BATCH, 1, BATCH, BATCH};
    for (int s = 0; s < 4; s++) ck_assert_int_eq(backend_cuda_train_next(b, rows[s]), 0);
    int64_t n;
    int bad;
    ck_assert_int_eq(backend_cuda_take_loss(b, &sum[gpus - 1], &n, &bad), 0);
    ck_assert_int_eq(n, 3 * BATCH + 1);
    backend_cuda_ops.destroy(b);
  }
  ck_assert_msg(fabs(sum[0] - sum[1]) <= 1e-5 * fabs(sum[0]), "one device %.9f, two %.9f", sum[0],
                sum[1]);
  free(p0);
  free_data(&d);
}
END_TEST

/* A data set uploaded again moves its device buffer, so the graphs that
 * read the old one must be captured anew: after a second set_data the
 * graph path still trains exactly as the eager one on the new rows. (On the
 * double a replayed stale graph reads freed memory: ASan, or the old rows.) */
START_TEST(new_data_set_new_graphs) {
  struct data d1, d2;
  int64_t np;
  make_data(&d1, N_TRAIN, 784);
  make_data(&d2, N_TRAIN, 784);
  float *p0 = init_params(&mlp, &np);
  double sum[2] = {0, 0};
  for (int graphs = 0; graphs <= 1; graphs++) {
    struct backend *b = make(&mlp, &sgd, 1, graphs, p0);
    int32_t perm[N_TRAIN];
    order_for(0, perm, N_TRAIN);
    const struct data *sets[2] = {&d1, &d2};
    for (int k = 0; k < 2; k++) {
      ck_assert_int_eq(backend_cuda_set_data(b, 0, sets[k]->pix, sets[k]->lab, N_TRAIN), 0);
      ck_assert_int_eq(backend_cuda_set_order(b, 0, perm, N_TRAIN), 0);
      for (int s = 0; s < 2; s++) ck_assert_int_eq(backend_cuda_train_next(b, BATCH), 0);
    }
    int64_t rows;
    int bad;
    ck_assert_int_eq(backend_cuda_take_loss(b, &sum[graphs], &rows, &bad), 0);
    ck_assert_int_eq(rows, 4 * BATCH);
    backend_cuda_ops.destroy(b);
  }
  ck_assert_msg(sum[1] == sum[0], "graph %.9f, eager %.9f", sum[1], sum[0]);
  free(p0);
  free_data(&d1), free_data(&d2);
}
END_TEST

/* Evaluation of a device set: chunks of 256 rows (the last one shorter),
 * one graph launch each, one host wait in all; the same sums as evaluate on
 * host floats. On 20x20 images: the chunking does not depend on the image
 * size, and the convolutions cost a third of 28x28's (the forward pass at
 * 28x28 is same_losses' on the same kernels). */
static const struct model_spec cnn20 = {MODEL_CNN, 1, 20, 20, 10, 24, 16};

START_TEST(evaluation_chunks_one_wait) {
  struct data d;
  int64_t np;
  make_data(&d, N_EVAL, 20 * 20);
  float *p0 = init_params(&cnn20, &np);
  struct backend *b = make(&cnn20, &sgd, 1, 1, p0);
  int64_t rows = 0;
  ck_assert_int_eq(backend_cuda_counters(b, &rows, NULL), 0);
  ck_assert_int_ge(rows, 256);
  ck_assert_int_eq(backend_cuda_set_data(b, 1, d.pix, d.lab, d.n), 0);
  double loss = 0, hl = 0;
  int64_t right = 0;
  int hr = 0;
  struct mock_cuda_counts w0, c0, c1;
  mock_cuda_get_counts(&w0);
  /* the first chunk runs eagerly (kernels loaded outside a capture), the
   * rest are captured */
  ck_assert_int_eq(backend_cuda_evaluate_set(b, 1, &loss, &right), 0);
  mock_cuda_get_counts(&c0);
  ck_assert_int_eq(c0.graph_launches - w0.graph_launches, (N_EVAL + rows - 1) / rows - 1);
  loss = 0, right = 0;
  ck_assert_int_eq(backend_cuda_evaluate_set(b, 1, &loss, &right), 0);
  mock_cuda_get_counts(&c1);
  const long chunks = (N_EVAL + rows - 1) / rows;
  ck_assert_int_eq(c1.graph_launches - c0.graph_launches, chunks);
  ck_assert_int_eq(c1.syncs - c0.syncs, 1);
  ck_assert_int_eq(backend_cuda_ops.evaluate(b, d.xf, d.lab, (int)d.n, &hl, &hr), 0);
  ck_assert(fabs(loss - hl) <= 1e-9 * fabs(hl));
  ck_assert_int_eq(right, hr);
  /* training set 0 is not evaluated this way */
  ck_assert_int_eq(backend_cuda_evaluate_set(b, 0, &loss, &right), -EINVAL);
  backend_cuda_ops.destroy(b);
  free(p0);
  free_data(&d);
}
END_TEST

/* A diverging run is reported at the next take_loss: the non-finite flag
 * stays set on the device however many steps later it is read. */
START_TEST(divergence_is_reported) {
  struct data d;
  int64_t np;
  make_data(&d, N_TRAIN, 784);
  float *p0 = init_params(&mlp, &np);
  p0[np - 1] = NAN; /* the last bias: every logit row sees it */
  struct backend *b = make(&mlp, &sgd, 1, 1, p0);
  int32_t perm[N_TRAIN];
  order_for(0, perm, d.n);
  ck_assert_int_eq(backend_cuda_set_data(b, 0, d.pix, d.lab, d.n), 0);
  ck_assert_int_eq(backend_cuda_set_order(b, 0, perm, d.n), 0);
  for (int s = 0; s < 4; s++) ck_assert_int_eq(backend_cuda_train_next(b, BATCH), 0);
  double sum;
  int64_t rows;
  int bad = 0;
  ck_assert_int_eq(backend_cuda_take_loss(b, &sum, &rows, &bad), 0);
  ck_assert_int_eq(bad, 1);
  ck_assert_int_eq(rows, 4 * BATCH);
  /* bad arguments */
  int32_t oob = (int32_t)d.n;
  ck_assert_int_eq(backend_cuda_set_order(b, 0, &oob, 1), -EINVAL);
  d.lab[5] = 10;
  ck_assert_int_eq(backend_cuda_set_data(b, 0, d.pix, d.lab, d.n), -EINVAL);
  backend_cuda_ops.destroy(b);
  free(p0);
  free_data(&d);
}
END_TEST

#ifdef FAKE_NVML_PATH
/* gpu_mem_mb is what the driver says this process holds (context and all)
 * when NVML lists it, never less than the arenas; without NVML, the arenas. */
START_TEST(gpu_mem_from_the_driver) {
  int64_t np;
  float *p0 = init_params(&mlp, &np);
  struct backend *b = make(&mlp, &sgd, 1, 1, p0);
  double arenas = 0, mb = 0;
  setenv("CTUNE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
  ck_assert_int_eq(backend_cuda_ops.peak_mem_mb(b, &arenas), 0);
  ck_assert(arenas > 1 && arenas < 100);
  setenv("CTUNE_NVML_LIB", FAKE_NVML_PATH, 1);
  setenv("FAKE_NVML_USED_MB", "700", 1);
  ck_assert_int_eq(backend_cuda_ops.peak_mem_mb(b, &mb), 0);
  ck_assert_msg(mb == 700.0, "gpu_mem_mb %.1f, the driver says 700", mb);
  setenv("FAKE_NVML_USED_MB", "1", 1); /* a peak stays a peak */
  ck_assert_int_eq(backend_cuda_ops.peak_mem_mb(b, &mb), 0);
  ck_assert(mb == 700.0);
  backend_cuda_ops.destroy(b);
  b = make(&mlp, &sgd, 1, 1, p0);
  ck_assert_int_eq(backend_cuda_ops.peak_mem_mb(b, &mb), 0);
  ck_assert(mb == arenas); /* the driver's 1 MiB is below the arenas */
  unsetenv("CTUNE_NVML_LIB");
  unsetenv("FAKE_NVML_USED_MB");
  backend_cuda_ops.destroy(b);
  free(p0);
}
END_TEST

/* NVML is opened and initialised once per backend, not at every report, and
 * shut down at destroy; its "not available" figure (ULLONG_MAX) is no
 * figure: gpu_mem_mb stays the arenas', never 1.7e13 MiB. */
START_TEST(nvml_once_per_backend_and_not_available) {
  /* held open here so that the counters outlive the backend's dlclose */
  void *fake = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(fake);
  int *inits = dlsym(fake, "fake_nvml_inits"), *shuts = dlsym(fake, "fake_nvml_shutdowns");
  ck_assert(inits && shuts);
  int64_t np;
  float *p0 = init_params(&mlp, &np);
  setenv("CTUNE_NVML_LIB", FAKE_NVML_PATH, 1);
  setenv("FAKE_NVML_USED_MB", "na", 1);
  struct backend *b = make(&mlp, &sgd, 1, 1, p0);
  double arenas = -1, mb = -1;
  const int i0 = *inits, s0 = *shuts;
  ck_assert_int_eq(backend_cuda_arena_peak_mb(b, &arenas), 0);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(backend_cuda_ops.peak_mem_mb(b, &mb), 0);
    ck_assert_msg(mb == arenas, "gpu_mem_mb %g with NVML's \"not available\", arenas %g", mb,
                  arenas);
  }
  ck_assert_int_eq(*inits - i0, 1);
  ck_assert_int_eq(*shuts - s0, 0);
  backend_cuda_ops.destroy(b);
  ck_assert_int_eq(*shuts - s0, 1);
  unsetenv("CTUNE_NVML_LIB");
  unsetenv("FAKE_NVML_USED_MB");
  dlclose(fake);
  free(p0);
}
END_TEST
#endif

static long session_calls;

/* The failure sessions' model: which calls the fast path makes does not
 * depend on the image size, and at 8x8 each of the 500-odd sessions does a
 * twelfth of the arithmetic of 28x28 (most of this test's time under ASan). */
static const struct model_spec mlp_small = {MODEL_MLP, 1, 8, 8, 10, 32, 16};

/* One session of the fast path; the first failure's code, 0 if none. */
static int session(const struct data *d, const float *p0, int gpus) {
  struct backend_opts bo = {1, gpus, 0, 0, 0, NULL};
  struct backend *b = NULL;
  int32_t perm[N_TRAIN];
  double sum = 0;
  int64_t rows = 0;
  int bad = 0;
  order_for(0, perm, N_TRAIN);
  int rc = backend_cuda_ops.create(&mlp_small, &adam, BATCH, &bo, &b);
  if (rc) return rc;
  if (!rc) rc = backend_cuda_ops.set_state(b, p0, NULL, 0);
  if (!rc) rc = backend_cuda_set_data(b, 0, d->pix, d->lab, N_TRAIN);
  if (!rc) rc = backend_cuda_set_data(b, 1, d->pix, d->lab, d->n);
  if (!rc) rc = backend_cuda_set_order(b, 0, perm, N_TRAIN);
  for (int s = 0; s < 3 && !rc; s++) rc = backend_cuda_train_next(b, BATCH);
  if (!rc) rc = backend_cuda_take_loss(b, &sum, &rows, &bad);
  if (!rc) rc = backend_cuda_evaluate_set(b, 1, &sum, &rows);
  if (!rc) rc = backend_cuda_train_next(b, BATCH);
  if (!rc) rc = backend_cuda_evaluate_set(b, 1, &sum, &rows);
  session_calls = mock_cuda_calls(); /* destroy frees what it can: no errors */
  backend_cuda_ops.destroy(b);
  return rc;
}

/* A capture that fails leaves no entry without a graph behind: the cache
 * (8 shapes) later evicts its oldest entries, and the failed shape can
 * still be captured again. */
START_TEST(failed_capture_leaves_no_empty_entry) {
  struct data d;
  int64_t np;
  make_data(&d, N_TRAIN, 8 * 8);
  float *p0 = init_params(&mlp_small, &np);
  struct backend_opts bo = {1, 1, 0, 0, 0, NULL};
  struct backend *b = NULL;
  int32_t perm[N_TRAIN];
  order_for(0, perm, N_TRAIN);
  ck_assert_int_eq(backend_cuda_ops.create(&mlp_small, &sgd, 16, &bo, &b), 0);
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
  ck_assert_int_eq(backend_cuda_set_data(b, 0, d.pix, d.lab, N_TRAIN), 0);
  ck_assert_int_eq(backend_cuda_set_order(b, 0, perm, N_TRAIN), 0);
  ck_assert_int_eq(backend_cuda_train_next(b, 8), 0); /* training buffers exist now */
  mock_cuda_fail_at(1);                               /* cudaStreamBeginCapture of the 1-row step */
  ck_assert_int_lt(backend_cuda_train_next(b, 1), 0);
  mock_cuda_fail_at(0);
  /* shapes 2..7 fill the cache; 9 and 10 evict its two oldest entries */
  const int rows[] = {2, 3, 4, 5, 6, 7, 9, 10, 1};
  for (int i = 0; i < 9; i++)
    ck_assert_msg(backend_cuda_train_next(b, rows[i]) == 0, "step of %d rows: %s", rows[i],
                  backend_cuda_last_error());
  double sum;
  int64_t n;
  int bad;
  ck_assert_int_eq(backend_cuda_take_loss(b, &sum, &n, &bad), 0);
  ck_assert_int_eq(n, 8 + 2 + 3 + 4 + 5 + 6 + 7 + 9 + 10 + 1);
  backend_cuda_ops.destroy(b);
  ck_assert_int_eq(mock_cuda_live(), 0);
  free(p0);
  free_data(&d);
}
END_TEST

/* Every call of the fast path that can fail is made to fail once (capture,
 * instantiation, graph launch, each kernel and copy): the failure comes back
 * as an error and destroy leaves nothing behind. */
START_TEST(every_failure_is_reported) {
  struct data d;
  int64_t np;
  make_data(&d, 300, 8 * 8);
  float *p0 = init_params(&mlp_small, &np);
  for (int gpus = 1; gpus <= 2; gpus++) {
    long c0 = mock_cuda_calls();
    ck_assert_int_eq(session(&d, p0, gpus), 0);
    long total = session_calls - c0;
    ck_assert_int_eq(mock_cuda_live(), 0);
    for (long k = 1; k <= total; k++) {
      mock_cuda_fail_at(k);
      int rc = session(&d, p0, gpus);
      mock_cuda_fail_at(0);
      ck_assert_msg(rc < 0, "failure at call %ld of %ld (gpus %d) was lost", k, total, gpus);
      ck_assert_msg(mock_cuda_live() == 0, "leak after failure at call %ld", k);
    }
    printf("gpus %d: %ld failure points\n", gpus, total);
  }
  free(p0);
  free_data(&d);
}
END_TEST

int main(void) {
  mock_cuda_set_devices(2);
  Suite *s = suite_create("graph");
  TCase *tc = tcase_create("graph");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, one_launch_no_wait_per_step);
  tcase_add_test(tc, graph_equals_eager_sgd);
  tcase_add_test(tc, graph_equals_eager_adam);
  tcase_add_test(tc, two_devices_match_the_graph);
  tcase_add_test(tc, new_data_set_new_graphs);
  tcase_add_test(tc, evaluation_chunks_one_wait);
  tcase_add_test(tc, divergence_is_reported);
  tcase_add_test(tc, failed_capture_leaves_no_empty_entry);
#ifdef FAKE_NVML_PATH
  tcase_add_test(tc, gpu_mem_from_the_driver);
  tcase_add_test(tc, nvml_once_per_backend_and_not_available);
#endif
  /* orchestration only: the kernel loops are enough (and quick) */
  if (!getenv("CTUNE_TEST_SMALL")) {
    tcase_add_test(tc, a_device_without_rows_keeps_its_cursor);
    tcase_add_test(tc, every_failure_is_reported);
  }
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
