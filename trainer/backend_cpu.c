/* The CPU backend: the net's forward/backward on OpenBLAS plus the optimiser
 * step, behind backend_ops. Single-threaded except inside OpenBLAS, which is
 * capped at opts->threads. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas_load.h"
#include "layers.h"
#include "net.h"
#include "optim.h"

#if defined(__x86_64__) || defined(__i386__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

/* Momentum buffers of rarely-updated weights decay into subnormal floats,
 * which x86 handles in microcode: measured, the mlp at batch 4 fell from
 * ~6,000 to ~1,250 samples/s within one epoch. Flush them to zero, as GPUs
 * do; training is unaffected at these magnitudes. Per thread, so it is set
 * by the thread that creates the backend and runs it. */
static void flush_subnormals(void) {
#if defined(__x86_64__) || defined(__i386__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

/* OpenBLAS (the pthreads build) starts its worker threads when the library
 * loads, and an idle worker spins on sched_yield for about 2^28 cycles
 * before it sleeps: measured, 70-100 ms of a second core's CPU per
 * ctune-train process, 13 % of the CPU time of a 19,200-image epoch. It is
 * loaded only when a reference path needs it (blas_load.h), which shuts
 * the pool down as it loads at one thread. */
int backend_cpu_blas_idle(void) { return blas_load_idle(); }

/* Evaluation's rows per pass: the AVX2 GEMMs' limit (layers.c), so that a
 * trial at batch <= 64 evaluates without OpenBLAS too and never loads it. */
#define EVAL_ROWS 64

struct backend {
  struct net *net;
  int net_rows; /* rows the net's buffers hold (>= max_batch) */
  struct optim_spec optim;
  int64_t n_params, n_state;
  float *params, *grads, *state;
  int64_t step;
  int max_batch;
};

static void cpu_destroy(struct backend *b) {
  if (!b) return;
  net_destroy(b->net);
  free(b->params);
  free(b->grads);
  free(b->state);
  free(b);
}

static int cpu_create(const struct model_spec *spec, const struct optim_spec *optim, int max_batch,
                      const struct backend_opts *opts, struct backend **out) {
  if (!spec || !optim || !out || max_batch < 1) return -EINVAL;
  int threads = opts && opts->threads > 0 ? opts->threads : 1;
  blas_load_threads(threads);
  flush_subnormals();
  struct backend *b = calloc(1, sizeof(*b));
  if (!b) return -ENOMEM;
  /* the net holds at least EVAL_ROWS rows so that evaluation after a tiny
   * training batch does not run as thousands of small calls */
  int err = net_create(spec, max_batch < EVAL_ROWS ? EVAL_ROWS : max_batch, &b->net);
  if (err) goto fail;
  b->optim = *optim;
  b->max_batch = max_batch;
  b->net_rows = max_batch < EVAL_ROWS ? EVAL_ROWS : max_batch;
  b->n_params = net_layout(b->net)->n_params;
  b->n_state = b->n_params * optim_state_per_param(optim->kind);
  b->params = calloc((size_t)b->n_params, sizeof(float));
  b->grads = calloc((size_t)b->n_params, sizeof(float));
  b->state = calloc((size_t)b->n_state, sizeof(float));
  if (!b->params || !b->grads || !b->state) {
    err = -ENOMEM;
    goto fail;
  }
  *out = b;
  return 0;
fail:
  cpu_destroy(b);
  return err;
}

static int cpu_set_state(struct backend *b, const float *params, const float *opt_state,
                         int64_t step) {
  if (!b || !params || step < 0) return -EINVAL;
  memcpy(b->params, params, sizeof(float) * (size_t)b->n_params);
  if (opt_state)
    memcpy(b->state, opt_state, sizeof(float) * (size_t)b->n_state);
  else
    memset(b->state, 0, sizeof(float) * (size_t)b->n_state);
  b->step = step;
  return 0;
}

static int cpu_get_state(struct backend *b, float *params, float *opt_state, int64_t *step) {
  if (!b) return -EINVAL;
  if (params) memcpy(params, b->params, sizeof(float) * (size_t)b->n_params);
  if (opt_state) memcpy(opt_state, b->state, sizeof(float) * (size_t)b->n_state);
  if (step) *step = b->step;
  return 0;
}

static int cpu_train_step(struct backend *b, const float *x, const uint8_t *y, int n,
                          float *loss_out) {
  if (!b || !x || !y || n < 1 || n > b->max_batch) return -EINVAL;
  double loss_sum = 0.0;
  int correct = 0;
  net_forward(b->net, b->params, x, n);
  net_backward(b->net, b->params, y, n, b->grads, &loss_sum, &correct);
  b->step++;
  optim_step(&b->optim, b->params, b->state, b->grads, b->n_params, b->step);
  if (loss_out) *loss_out = (float)(loss_sum / n);
  return 0;
}

static int cpu_evaluate(struct backend *b, const float *x, const uint8_t *y, int n,
                        double *loss_sum, int *correct) {
  if (!b || !x || !y || n < 1 || !loss_sum || !correct) return -EINVAL;
  const struct model_layout *L = net_layout(b->net);
  /* evaluate in chunks the net holds, so callers may pass a whole split */
  for (int off = 0; off < n; off += b->net_rows) {
    int m = n - off < b->net_rows ? n - off : b->net_rows;
    const float *logits = net_forward(b->net, b->params, x + (int64_t)off * L->in_dim, m);
    layers_xent(m, L->n_classes, logits, y + off, NULL, loss_sum, correct);
  }
  return 0;
}

static int cpu_peak_mem_mb(struct backend *b, double *out) {
  if (!b || !out) return -EINVAL;
  int64_t bytes =
      net_buffer_bytes(b->net) + (int64_t)sizeof(float) * (2 * b->n_params + b->n_state);
  *out = (double)bytes / (1024.0 * 1024.0);
  return 0;
}

const struct backend_ops backend_cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .set_state = cpu_set_state,
    .get_state = cpu_get_state,
    .train_step = cpu_train_step,
    .evaluate = cpu_evaluate,
    .peak_mem_mb = cpu_peak_mem_mb,
    .destroy = cpu_destroy,
};
