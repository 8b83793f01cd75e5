/* Whole models, CUDA backend against the CPU backend through the same vtable
 * (trainer/backend.h): gradients of one step, weights and optimiser state
 * after several SGD/Adam steps, evaluation; plus the CUDA backend's memory
 * behaviour (evaluation allocates no training buffers, the cap, out-of-memory
 * and the smaller-batch retry) and state round trips. Skips without a GPU. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"
#include "gpu_skip.h"
#include "gpu_plan.h"

#define TOL 1e-4
/* Optimiser state after several steps (momentum sums the gradients): fp32
 * summation-order differences compound, measured up to ~2e-4 on the host. */
#define TOL_STATE 1e-3
#define MIB (1 << 20)

static uint64_t rng_state;

static float frand(float lo, float hi) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  double u = (double)(rng_state >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

static float *rand_vec(int64_t n, float lo, float hi) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  ck_assert_ptr_nonnull(p);
  for (int64_t i = 0; i < n; i++) p[i] = frand(lo, hi);
  return p;
}

static uint8_t *rand_labels(int n, int classes) {
  uint8_t *y = malloc((size_t)n);
  ck_assert_ptr_nonnull(y);
  for (int i = 0; i < n; i++) y[i] = (uint8_t)frand(0, (float)classes - 0.01f);
  return y;
}

/* max |a - b| / max |b| over n floats (a must be finite). */
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

/* The CNN's max pools pick the first of their 2x2 window's largest values,
 * and its ReLUs cut at zero. Both backends agree on those rules, but their
 * convolutions sum in different orders (OpenBLAS sgemm against cuBLAS or the
 * kernels), so a window whose two largest candidates lie within float
 * rounding of each other (or a pooled value within rounding of zero) may be
 * routed differently: the whole gradient of that window then lands on
 * another input patch, which changes the conv weight gradient by O(1e-2)
 * relative while the bias gradient stays equal. That is a property of the
 * draw, not a bug, so the gradient test redraws its inputs until no window
 * of any conv layer is closer to a tie than TIE_GAP of the layer's largest
 * activation (about 20x the fp32 rounding of a 25..150-term sum); any
 * real routing or indexing error still moves whole windows and fails.
 * Returns the count of such windows, printing them when verbose. */
#define TIE_GAP 2e-6
static int cnn_near_ties(const struct model_layout *L, const float *p, const float *x, int batch,
                         int verbose) {
  int ties = 0;
  double *in = NULL, *conv = NULL;
  int in_c = L->layer[0].in_c, in_h = L->layer[0].in_h, in_w = L->layer[0].in_w;
  in = malloc(sizeof(double) * (size_t)batch * in_c * in_h * in_w);
  ck_assert_ptr_nonnull(in);
  for (int64_t i = 0; i < (int64_t)batch * in_c * in_h * in_w; i++) in[i] = x[i];
  for (int l = 0; l < L->n_layers && L->layer[l].kind == LAYER_CONV; l++) {
    const struct layer_shape *s = &L->layer[l];
    const int k = s->in_h - s->out_h + 1, oh = s->out_h, ow = s->out_w;
    const float *w = p + s->w_off, *bias = p + s->b_off;
    conv = malloc(sizeof(double) * (size_t)batch * s->out_c * oh * ow);
    ck_assert_ptr_nonnull(conv);
    double scale = 1e-30;
    for (int b = 0; b < batch; b++)
      for (int o = 0; o < s->out_c; o++)
        for (int y = 0; y < oh; y++)
          for (int xx = 0; xx < ow; xx++) {
            double acc = 0;
            for (int c = 0; c < s->in_c; c++)
              for (int i = 0; i < k; i++)
                for (int j = 0; j < k; j++)
                  acc += (double)w[((o * s->in_c + c) * k + i) * k + j] *
                         in[(((int64_t)b * s->in_c + c) * s->in_h + y + i) * s->in_w + xx + j];
            conv[(((int64_t)b * s->out_c + o) * oh + y) * ow + xx] = acc;
            if (fabs(acc) > scale) scale = fabs(acc);
          }
    double *next = malloc(sizeof(double) * (size_t)batch * s->out_c * s->pool_h * s->pool_w);
    ck_assert_ptr_nonnull(next);
    for (int b = 0; b < batch; b++)
      for (int o = 0; o < s->out_c; o++)
        for (int py = 0; py < s->pool_h; py++)
          for (int px = 0; px < s->pool_w; px++) {
            const double *c0 = conv + ((int64_t)b * s->out_c + o) * oh * ow;
            double v[4] = {c0[2 * py * ow + 2 * px], c0[2 * py * ow + 2 * px + 1],
                           c0[(2 * py + 1) * ow + 2 * px], c0[(2 * py + 1) * ow + 2 * px + 1]};
            int top = 0;
            for (int i = 1; i < 4; i++)
              if (v[i] > v[top]) top = i;
            double gap = INFINITY;
            for (int i = 0; i < 4; i++)
              if (i != top && v[top] - v[i] < gap) gap = v[top] - v[i];
            double out = v[top] + bias[o];
            int tie = gap <= TIE_GAP * scale, zero = fabs(out) <= TIE_GAP * scale;
            if (tie || zero) {
              ties++;
              if (verbose)
                printf("near tie: layer %d image %d channel %d window (%d,%d) "
                       "top %d gap %.3g%s (scale %.3g)\n",
                       l, b, o, py, px, top, gap / scale, zero ? " relu at zero" : "", scale);
            }
            next[(((int64_t)b * s->out_c + o) * s->pool_h + py) * s->pool_w + px] =
                out > 0 ? out : 0;
          }
    free(in), free(conv);
    in = next;
  }
  free(in);
  return ties;
}

struct run {
  float *params, *opt;
  float loss[8];
  double eval_loss;
  int eval_correct;
};

/* steps training steps of batch rows each from x/y, then one evaluation of
 * the first batch; everything the backend ends with lands in *out. */
static void run_backend(const struct backend_ops *ops, const struct model_spec *ms,
                        const struct optim_spec *os, int batch, int steps, const float *p0,
                        const float *x, const uint8_t *y, int gpus, struct run *out) {
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(ms, &L), 0);
  struct backend_opts bo = {1, gpus, 0, 0, 0, NULL};
  struct backend *b = NULL;
  int rc = ops->create(ms, os, batch, &bo, &b);
  ck_assert_msg(rc == 0, "%s create: %d %s", ops->name, rc,
                ops == &backend_cuda_ops ? backend_cuda_last_error() : "");
  ck_assert_int_eq(ops->set_state(b, p0, NULL, 0), 0);
  for (int s = 0; s < steps; s++) {
    rc = ops->train_step(b, x + (int64_t)s * batch * L.in_dim, y + s * batch, batch, &out->loss[s]);
    ck_assert_msg(rc == 0, "%s train_step %d: %d", ops->name, s, rc);
  }
  int64_t nopt = (int64_t)optim_state_per_param(os->kind) * L.n_params;
  out->params = malloc((size_t)L.n_params * sizeof(float));
  out->opt = malloc((size_t)nopt * sizeof(float));
  int64_t step = -1;
  ck_assert_int_eq(ops->get_state(b, out->params, out->opt, &step), 0);
  ck_assert_int_eq(step, steps);
  out->eval_loss = 0;
  out->eval_correct = 0;
  ck_assert_int_eq(ops->evaluate(b, x, y, batch, &out->eval_loss, &out->eval_correct), 0);
  ops->destroy(b);
}

static void free_run(struct run *r) {
  free(r->params);
  free(r->opt);
}

static const struct model_spec mlp = {MODEL_MLP, 1, 8, 8, 10, 24, 16};
static const struct model_spec cnn_gray = {MODEL_CNN, 1, 28, 28, 10, 32, 20};
static const struct model_spec cnn_rgb = {MODEL_CNN, 3, 32, 32, 10, 24, 16};

/* One SGD step with lr 1 and nothing else leaves p0 - p1 = the gradient. */
static void check_gradients(const struct model_spec *ms, int batch) {
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(ms, &L), 0);
  const struct optim_spec os = {OPTIM_SGD, 1.0f, 0, 0, 0.9f, 0.999f, 1e-8f};
  float *p0 = rand_vec(L.n_params, -0.2f, 0.2f);
  float *x = rand_vec((int64_t)batch * L.in_dim, -1, 1);
  /* redraw while a pool window or ReLU is at a near-tie (cnn_near_ties) */
  int redraws = 0;
  while (ms->kind == MODEL_CNN && cnn_near_ties(&L, p0, x, batch, 0)) {
    ck_assert_msg(++redraws <= 200, "no draw without near-ties in 200");
    free(p0), free(x);
    p0 = rand_vec(L.n_params, -0.2f, 0.2f);
    x = rand_vec((int64_t)batch * L.in_dim, -1, 1);
  }
  if (redraws) printf("check_gradients: %d redraw(s) for near-ties\n", redraws);
  uint8_t *y = rand_labels(batch, L.n_classes);
  struct run cpu, gpu;
  run_backend(&backend_cpu_ops, ms, &os, batch, 1, p0, x, y, 1, &cpu);
  run_backend(&backend_cuda_ops, ms, &os, batch, 1, p0, x, y, 1, &gpu);
  ck_assert_msg(fabs(gpu.loss[0] - cpu.loss[0]) <= TOL * fabs(cpu.loss[0]),
                "loss cuda %.8g cpu %.8g", gpu.loss[0], cpu.loss[0]);
  float *gc = malloc((size_t)L.n_params * sizeof(float));
  float *gg = malloc((size_t)L.n_params * sizeof(float));
  for (int64_t i = 0; i < L.n_params; i++) {
    gc[i] = p0[i] - cpu.params[i];
    gg[i] = p0[i] - gpu.params[i];
  }
  for (int l = 0; l < L.n_layers; l++) {
    const struct layer_shape *s = &L.layer[l];
    double ew = rel_err(gg + s->w_off, gc + s->w_off, s->w_size);
    double eb = rel_err(gg + s->b_off, gc + s->b_off, s->b_size);
    ck_assert_msg(ew <= TOL && eb <= TOL, "layer %d gradient: weights rel err %.3g, bias %.3g", l,
                  ew, eb);
  }
  free(gc), free(gg), free(p0), free(x), free(y);
  free_run(&cpu), free_run(&gpu);
}

/* The tie detector itself: a constant image makes every conv1 output of a
 * channel equal, so every conv1 pool window is a tie; the regression seed
 * 1795330320 (CI) drew one window whose two candidates differ by 1.6e-8. */
START_TEST(near_tie_detector_flags_ties) {
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(&cnn_gray, &L), 0);
  uint64_t saved = rng_state;
  float *p0 = rand_vec(L.n_params, -0.2f, 0.2f);
  float *x = rand_vec(2 * (int64_t)L.in_dim, -1, 1);
  for (int64_t i = 0; i < L.in_dim; i++) x[i] = 0.5f; /* image 0 */
  const struct layer_shape *s = &L.layer[0];
  int ties = cnn_near_ties(&L, p0, x, 2, 0);
  ck_assert_msg(ties >= s->out_c * s->pool_h * s->pool_w,
                "%d near ties flagged in a constant image", ties);
  free(p0), free(x);
  /* the CI draw: the mlp test's draws, then the cnn test's */
  rng_state = 1795330320;
  struct model_layout M;
  ck_assert_int_eq(model_layout_init(&mlp, &M), 0);
  free(rand_vec(M.n_params, -0.2f, 0.2f));
  free(rand_vec(17 * (int64_t)M.in_dim, -1, 1));
  free(rand_labels(17, M.n_classes));
  p0 = rand_vec(L.n_params, -0.2f, 0.2f);
  x = rand_vec(9 * (int64_t)L.in_dim, -1, 1);
  ck_assert_int_gt(cnn_near_ties(&L, p0, x, 9, 1), 0);
  free(p0), free(x);
  rng_state = saved;
}
END_TEST

START_TEST(gradients_match_cpu_mlp) { check_gradients(&mlp, 17); }
END_TEST
START_TEST(gradients_match_cpu_cnn) { check_gradients(&cnn_gray, 9); }
END_TEST
START_TEST(gradients_match_cpu_cnn_rgb) { check_gradients(&cnn_rgb, 5); }
END_TEST

static void check_training(const struct model_spec *ms, const struct optim_spec *os) {
  const int batch = 12, steps = 4;
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(ms, &L), 0);
  float *p0 = rand_vec(L.n_params, -0.2f, 0.2f);
  float *x = rand_vec((int64_t)steps * batch * L.in_dim, -1, 1);
  uint8_t *y = rand_labels(steps * batch, L.n_classes);
  /* The pools and ReLUs of later steps see trained weights: take them from
   * the CPU backend after s steps and redraw batch s while it has a
   * near-tie (cnn_near_ties; seed 1162 had one at step 3). */
  for (int s = 0; ms->kind == MODEL_CNN && s < steps; s++) {
    float *xs = x + (int64_t)s * batch * L.in_dim;
    for (int redraws = 0;; redraws++) {
      struct run pre;
      run_backend(&backend_cpu_ops, ms, os, batch, s, p0, x, y, 1, &pre);
      int ties = cnn_near_ties(&L, s ? pre.params : p0, xs, batch, 0);
      free_run(&pre);
      if (!ties) break;
      ck_assert_msg(redraws < 200, "no batch %d without near-ties in 200", s);
      for (int64_t i = 0; i < (int64_t)batch * L.in_dim; i++) xs[i] = frand(-1, 1);
    }
  }
  struct run cpu, gpu;
  run_backend(&backend_cpu_ops, ms, os, batch, steps, p0, x, y, 1, &cpu);
  run_backend(&backend_cuda_ops, ms, os, batch, steps, p0, x, y, 1, &gpu);
  for (int s = 0; s < steps; s++)
    ck_assert_msg(fabs(gpu.loss[s] - cpu.loss[s]) <= TOL * fabs(cpu.loss[s]),
                  "step %d loss cuda %.8g cpu %.8g", s, gpu.loss[s], cpu.loss[s]);
  double ep = rel_err(gpu.params, cpu.params, L.n_params);
  double eo = rel_err(gpu.opt, cpu.opt, (int64_t)optim_state_per_param(os->kind) * L.n_params);
  ck_assert_msg(ep <= TOL, "params rel err %.3g", ep);
  ck_assert_msg(eo <= TOL_STATE, "optimiser state rel err %.3g", eo);
  ck_assert_msg(fabs(gpu.eval_loss - cpu.eval_loss) <= TOL * cpu.eval_loss,
                "eval loss cuda %.8g cpu %.8g", gpu.eval_loss, cpu.eval_loss);
  ck_assert_int_eq(gpu.eval_correct, cpu.eval_correct);
  free(p0), free(x), free(y);
  free_run(&cpu), free_run(&gpu);
}

START_TEST(sgd_training_matches_cpu) {
  const struct optim_spec os = {OPTIM_SGD, 0.05f, 0.9f, 1e-3f, 0.9f, 0.999f, 1e-8f};
  check_training(&mlp, &os);
  check_training(&cnn_gray, &os);
}
END_TEST

/* eps 1e-6, not 1e-8: Adam's first step moves a weight by lr * g / (|g| +
 * eps), so where a weight's gradient is itself near eps (a data gradient
 * cancelling the weight decay), fp32 summation-order noise of ~1e-9 becomes
 * a few % of lr. Seed 1024 hit one: g = -1.58e-8 on the CPU, -1.36e-8 on
 * CUDA, steps of 0.61 and 0.58 lr, params rel err 1.7e-4. eps 1e-6 bounds
 * that amplification by 1/(4 eps) at ~5e-4 lr while typical |g| (~1e-4)
 * still takes the normalised Adam path; the update rule itself is compared
 * op by op in test_cuda_ops. */
START_TEST(adam_training_matches_cpu) {
  const struct optim_spec os = {OPTIM_ADAM, 1e-3f, 0, 1e-4f, 0.9f, 0.999f, 1e-6f};
  check_training(&mlp, &os);
  check_training(&cnn_gray, &os);
}
END_TEST

/* peak_mem_mb is the larger of the arenas' peak and NVML's figure for this
 * process, which on a real GPU also holds the CUDA context, cuBLAS and NCCL
 * (hundreds of MiB): the plan promises the arenas to the byte and the
 * process's figure only as a floor. Returns the arenas' peak in MiB. */
static double check_peak(struct backend *b, int64_t plan_bytes) {
  double arena = -1, mb = -1;
  ck_assert_int_eq(backend_cuda_arena_peak_mb(b, &arena), 0);
  ck_assert_msg(fabs(arena * MIB - (double)plan_bytes) < 1.0, "arena peak %.3f MiB, plan %.3f MiB",
                arena, (double)plan_bytes / MIB);
  ck_assert_int_eq(backend_cuda_ops.peak_mem_mb(b, &mb), 0);
  ck_assert_msg(mb >= arena, "peak_mem_mb %.3f MiB below the arenas' %.3f MiB", mb, arena);
  /* on the double, a fake NVML stands in for the driver's larger figure */
  const char *fake = getenv("FAKE_NVML_USED_MB");
  if (fake && atof(fake) > arena)
    ck_assert_msg(mb == atof(fake), "peak_mem_mb %.3f MiB, fake NVML says %s", mb, fake);
  return arena;
}

/* Evaluation needs no gradients: peak memory after evaluating is exactly the
 * plan's evaluation part; the first training step adds the training part. */
START_TEST(evaluation_allocates_no_training_buffers) {
  const int batch = 64;
  const struct optim_spec os = {OPTIM_SGD, 0.01f, 0.9f, 0, 0.9f, 0.999f, 1e-8f};
  struct model_layout L;
  struct gpu_plan plan;
  ck_assert_int_eq(model_layout_init(&cnn_gray, &L), 0);
  /* the evaluation arena holds chunks of at least 256 rows */
  ck_assert_int_eq(gpu_plan_init(&L, os.kind, 256, &plan), 0);
  struct backend_opts bo = {1, 1, 0, 0, 0, NULL};
  struct backend *b = NULL;
  ck_assert_int_eq(backend_cuda_ops.create(&cnn_gray, &os, batch, &bo, &b), 0);
  float *p0 = rand_vec(L.n_params, -0.2f, 0.2f);
  float *x = rand_vec((int64_t)batch * L.in_dim, -1, 1);
  uint8_t *y = rand_labels(batch, 10);
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
  double loss = 0;
  int correct = 0;
  ck_assert_int_eq(backend_cuda_ops.evaluate(b, x, y, batch, &loss, &correct), 0);
  check_peak(b, plan.eval_bytes);
  float l;
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, batch, &l), 0);
  struct gpu_plan tp;
  ck_assert_int_eq(gpu_plan_init(&L, os.kind, batch, &tp), 0);
  check_peak(b, plan.eval_bytes + tp.train_bytes);
  backend_cuda_ops.destroy(b);
  free(p0), free(x), free(y);
}
END_TEST

/* The trainer creates the backend for its evaluation chunk (256) and trains
 * at a smaller batch: the backward buffers are sized for the training batch,
 * and grow when a larger one comes. */
START_TEST(backward_buffers_follow_the_training_batch) {
  const int chunk = 256, batch = 16;
  const struct optim_spec os = {OPTIM_SGD, 0.01f, 0.9f, 0, 0.9f, 0.999f, 1e-8f};
  struct model_layout L;
  struct gpu_plan ev, tr, tr2;
  ck_assert_int_eq(model_layout_init(&cnn_gray, &L), 0);
  ck_assert_int_eq(gpu_plan_init(&L, os.kind, chunk, &ev), 0);
  ck_assert_int_eq(gpu_plan_init(&L, os.kind, batch, &tr), 0);
  ck_assert_int_eq(gpu_plan_init(&L, os.kind, 2 * batch, &tr2), 0);
  struct backend_opts bo = {1, 1, 0, 0, 0, NULL};
  struct backend *b = NULL;
  ck_assert_int_eq(backend_cuda_ops.create(&cnn_gray, &os, chunk, &bo, &b), 0);
  float *p0 = rand_vec(L.n_params, -0.2f, 0.2f);
  float *x = rand_vec((int64_t)chunk * L.in_dim, -1, 1);
  uint8_t *y = rand_labels(chunk, 10);
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
  float l;
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, batch, &l), 0);
  check_peak(b, ev.eval_bytes + tr.train_bytes);
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, batch - 3, &l), 0);
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, 2 * batch, &l), 0);
  ck_assert(isfinite(l));
  check_peak(b, ev.eval_bytes + tr2.train_bytes);
  double loss = 0;
  int correct = 0;
  ck_assert_int_eq(backend_cuda_ops.evaluate(b, x, y, chunk, &loss, &correct), 0);
  ck_assert(isfinite(loss) && loss > 0);
  backend_cuda_ops.destroy(b);
  free(p0), free(x), free(y);
}
END_TEST

/* The cap: too small for evaluation -> create fails with the message; room
 * for evaluation but not training -> the first step fails with -ENOMEM, and
 * a step with half the batch (what --oom-retry does) re-plans and trains. */
START_TEST(memory_cap_oom_and_retry) {
  if (getenv("CTUNE_TEST_SMALL")) { /* emulated kernels: 1024 rows is slow */
    printf("memory_cap_oom_and_retry: skipped (CTUNE_TEST_SMALL)\n");
    return;
  }
  const struct optim_spec os = {OPTIM_SGD, 0.01f, 0.9f, 0, 0.9f, 0.999f, 1e-8f};
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(&cnn_gray, &L), 0);
  struct backend *b = NULL;
  struct backend_opts tiny = {1, 1, 1, 0, 0, NULL};
  ck_assert_int_eq(backend_cuda_ops.create(&cnn_gray, &os, 512, &tiny, &b), -ENOMEM);
  ck_assert_ptr_null(b);
  const char *msg = backend_cuda_last_error();
  ck_assert_msg(strstr(msg, "out of GPU memory at batch_size 512 (needs ~") == msg &&
                    strstr(msg, "limit 1 MiB): try a smaller batch_size"),
                "message: %s", msg);

  const int big = 1024;
  struct gpu_plan full, half;
  ck_assert_int_eq(gpu_plan_init(&L, os.kind, big, &full), 0);
  ck_assert_int_eq(gpu_plan_init(&L, os.kind, big / 2, &half), 0);
  int64_t cap_mb = (full.eval_bytes + MIB - 1) / MIB;
  ck_assert_msg(cap_mb * MIB < full.eval_bytes + full.train_bytes &&
                    half.eval_bytes + half.train_bytes <= cap_mb * MIB,
                "test premise: a cap of %lld MiB fits evaluation at %d and "
                "training at %d only",
                (long long)cap_mb, big, big / 2);
  struct backend_opts capped = {1, 1, cap_mb, 0, 0, NULL};
  ck_assert_int_eq(backend_cuda_ops.create(&cnn_gray, &os, big, &capped, &b), 0);
  float *p0 = rand_vec(L.n_params, -0.2f, 0.2f);
  float *x = rand_vec((int64_t)big * L.in_dim, -1, 1);
  uint8_t *y = rand_labels(big, 10);
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p0, NULL, 0), 0);
  float loss;
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, big, &loss), -ENOMEM);
  ck_assert(strstr(backend_cuda_last_error(), "out of GPU memory at batch_size 1024"));
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, big / 2, &loss), 0);
  ck_assert(isfinite(loss));
  /* the cap binds the arenas; the process's figure (context included) is
   * only at least theirs */
  double arena, mb;
  ck_assert_int_eq(backend_cuda_arena_peak_mb(b, &arena), 0);
  ck_assert_msg(arena <= (double)cap_mb, "arena peak %.1f MiB over the %lld MiB cap", arena,
                (long long)cap_mb);
  ck_assert_int_eq(backend_cuda_ops.peak_mem_mb(b, &mb), 0);
  ck_assert_msg(mb >= arena, "peak_mem_mb %.1f MiB below the arenas' %.1f MiB", mb, arena);
  /* the weights survived the re-plan: one step moved them only a little */
  float *p1 = malloc((size_t)L.n_params * sizeof(float));
  ck_assert_int_eq(backend_cuda_ops.get_state(b, p1, NULL, NULL), 0);
  ck_assert(rel_err(p1, p0, L.n_params) < 0.5);
  backend_cuda_ops.destroy(b);
  free(p0), free(p1), free(x), free(y);
}
END_TEST

START_TEST(state_round_trip_and_bad_labels) {
  const struct optim_spec os = {OPTIM_ADAM, 1e-3f, 0, 0, 0.9f, 0.999f, 1e-8f};
  struct model_layout L;
  ck_assert_int_eq(model_layout_init(&mlp, &L), 0);
  struct backend_opts bo = {1, 1, 0, 0, 0, NULL};
  struct backend *b = NULL;
  ck_assert_int_eq(backend_cuda_ops.create(&mlp, &os, 8, &bo, &b), 0);
  float *p = rand_vec(L.n_params, -1, 1), *o = rand_vec(2 * L.n_params, 0, 1);
  float *p2 = malloc((size_t)L.n_params * sizeof(float));
  float *o2 = malloc((size_t)2 * L.n_params * sizeof(float));
  int64_t step = 0;
  ck_assert_int_eq(backend_cuda_ops.set_state(b, p, o, 41), 0);
  ck_assert_int_eq(backend_cuda_ops.get_state(b, p2, o2, &step), 0);
  ck_assert_int_eq(step, 41);
  ck_assert_int_eq(memcmp(p, p2, (size_t)L.n_params * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(o, o2, (size_t)2 * L.n_params * sizeof(float)), 0);
  float *x = rand_vec(8 * (int64_t)L.in_dim, -1, 1);
  uint8_t y[8] = {0, 1, 2, 3, 4, 5, 6, 10};
  float loss;
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, 8, &loss), -EINVAL);
  ck_assert(strstr(backend_cuda_last_error(), "label 10 at row 7"));
  ck_assert_int_eq(backend_cuda_ops.train_step(b, x, y, 9, &loss), -EINVAL);
  ck_assert_int_eq(backend_cuda_ops.get_state(b, p2, o2, &step), 0);
  ck_assert_int_eq(step, 41); /* refused batches changed nothing */
  ck_assert_int_eq(memcmp(p, p2, (size_t)L.n_params * sizeof(float)), 0);
  backend_cuda_ops.destroy(b);
  free(p), free(o), free(p2), free(o2), free(x);
}
END_TEST

int main(void) {
  int gate = gpu_test_gate(1); /* gpu_skip.h: skips only without a device */
  if (gate != GPU_RUN) return gate;
  const char *seed = getenv("CTUNE_TEST_SEED");
  /* fixed by default so CI runs are repeatable; set it to explore others */
  rng_state = seed && *seed ? strtoull(seed, NULL, 10) : 20261122;
  printf("test_cuda_model: seed %llu (CTUNE_TEST_SEED repeats it)\n",
         (unsigned long long)rng_state);
  Suite *s = suite_create("cuda_model");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, near_tie_detector_flags_ties);
  tcase_add_test(tc, gradients_match_cpu_mlp);
  tcase_add_test(tc, gradients_match_cpu_cnn);
  tcase_add_test(tc, gradients_match_cpu_cnn_rgb);
  tcase_add_test(tc, sgd_training_matches_cpu);
  tcase_add_test(tc, adam_training_matches_cpu);
  tcase_add_test(tc, evaluation_allocates_no_training_buffers);
  tcase_add_test(tc, backward_buffers_follow_the_training_batch);
  tcase_add_test(tc, memory_cap_oom_and_retry);
  tcase_add_test(tc, state_round_trip_and_bad_labels);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* CUDA contexts do not fork */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
