/* Samples/s of the CUDA backend's three ways to train, side by side, per
 * batch size: graph (data on the device, one captured graph per step, loss
 * read every BACKEND_CUDA_LOSS_EVERY steps), eager (the same device steps
 * launched one by one: CTUNE_CUDA_GRAPHS=0) and host (train_step with float
 * batches from the host and the loss read every step, what gang members of
 * several processes still do). Synthetic uint8 images (the speed does not
 * depend on the pixels).
 *
 *   build/bin/bench_fast_steps [images] [batch ...]     (default 20000; 2 4 16 64 256 1024)
 *
 * Prints one markdown table. Exits 77 without a CUDA device, saying the CUDA
 * runtime's reason. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "backend.h"
#include "cuda_backend.h"

static const struct model_spec cnn = {MODEL_CNN, 1, 28, 28, 10, 120, 84};
static const struct optim_spec sgd = {OPTIM_SGD, 0.01f, 0.9f, 0, 0.9f, 0.999f, 1e-8f};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { MODE_GRAPH, MODE_EAGER, MODE_HOST };

/* Samples/s of the second epoch over n images at batch b; < 0 on error. */
static double rate(int mode, int b, int64_t n, const uint8_t *pix, const uint8_t *lab,
                   const float *xf, const float *p0) {
  struct backend_opts bo = {1, 1, 0, 0, 0, NULL};
  struct backend *be = NULL;
  double r = -1.0;
  int32_t *perm = malloc((size_t)n * sizeof(int32_t));
  float *x = malloc((size_t)b * 784 * sizeof(float));
  uint8_t *y = malloc((size_t)b);
  if (!perm || !x || !y) goto out;
  setenv("CTUNE_CUDA_GRAPHS", mode == MODE_EAGER ? "0" : "1", 1);
  if (backend_cuda_ops.create(&cnn, &sgd, b, &bo, &be) ||
      backend_cuda_ops.set_state(be, p0, NULL, 0))
    goto out;
  if (mode != MODE_HOST && backend_cuda_set_data(be, 0, pix, lab, n)) goto out;
  for (int epoch = 0; epoch < 2; epoch++) {
    for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)((i * 7919 + epoch) % n);
    double sum = 0;
    int64_t rows = 0;
    int bad = 0, k = 0;
    if (mode != MODE_HOST && backend_cuda_set_order(be, 0, perm, n)) goto out;
    double t0 = now();
    for (int64_t pos = 0; pos + b <= n; pos += b) {
      if (mode == MODE_HOST) {
        for (int i = 0; i < b; i++) {
          memcpy(x + (int64_t)i * 784, xf + (int64_t)perm[pos + i] * 784, 784 * sizeof(float));
          y[i] = lab[perm[pos + i]];
        }
        float l;
        if (backend_cuda_ops.train_step(be, x, y, b, &l)) goto out;
      } else {
        if (backend_cuda_train_next(be, b)) goto out;
        if (++k % BACKEND_CUDA_LOSS_EVERY == 0 && backend_cuda_take_loss(be, &sum, &rows, &bad))
          goto out;
      }
    }
    if (mode != MODE_HOST && backend_cuda_take_loss(be, &sum, &rows, &bad)) goto out;
    int64_t p;
    if (backend_cuda_ops.get_state(be, NULL, NULL, &p)) goto out; /* waits */
    r = (double)(n / b * b) / (now() - t0);
  }
out:
  if (r < 0) fprintf(stderr, "mode %d batch %d: %s\n", mode, b, backend_cuda_last_error());
  backend_cuda_ops.destroy(be);
  unsetenv("CTUNE_CUDA_GRAPHS");
  free(perm), free(x), free(y);
  return r;
}

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 20000;
  int batches[32] = {2, 4, 16, 64, 256, 1024}, nb = 6;
  if (argc > 2) {
    nb = 0;
    for (int i = 2; i < argc && nb < 32; i++) batches[nb++] = atoi(argv[i]);
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    /* the runtime's own sentence: first contact must say why, not just "no" */
    printf("SKIP: no CUDA device: %s: %s\n", cudaGetErrorName(e), cudaGetErrorString(e));
    return 77;
  }
  struct model_layout L;
  if (n < 1 || model_layout_init(&cnn, &L)) return 2;
  uint8_t *pix = malloc((size_t)n * 784), *lab = malloc((size_t)n);
  float *xf = malloc((size_t)n * 784 * sizeof(float));
  float *p0 = malloc((size_t)L.n_params * sizeof(float));
  if (!pix || !lab || !xf || !p0) return 1;
  uint64_t s = 1;
  for (int64_t i = 0; i < n * 784; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    pix[i] = (uint8_t)(s >> 56);
    xf[i] = ((float)pix[i] / 255.0f - 0.5f) / 0.5f;
  }
  for (int64_t i = 0; i < n; i++) lab[i] = (uint8_t)(i % 10);
  for (int64_t i = 0; i < L.n_params; i++)
    p0[i] = 0.05f * (float)((i * 2654435761u) % 2001 - 1000) / 1000.0f;
  printf(
      "| batch | graph samples/s | eager samples/s | host train_step samples/s | graph / host |\n");
  printf("|---|---|---|---|---|\n");
  for (int i = 0; i < nb; i++) {
    double g = rate(MODE_GRAPH, batches[i], n, pix, lab, xf, p0);
    double e = rate(MODE_EAGER, batches[i], n, pix, lab, xf, p0);
    double h = rate(MODE_HOST, batches[i], n, pix, lab, xf, p0);
    printf("| %d | %.0f | %.0f | %.0f | %.2f |\n", batches[i], g, e, h, h > 0 ? g / h : 0.0);
    fflush(stdout);
  }
  free(pix), free(lab), free(xf), free(p0);
  return 0;
}
