/* SGD with momentum (PyTorch form) and Adam over one flat buffer; the
 * per-element math comes from kernels/ops_math.h. */
#include "optim.h"

#include <math.h>

#include "conv_avx2.h"
#include "ops_math.h"

/* The loops, inlined into a baseline (SSE2) and an AVX2 copy: the compiler
 * vectorises each for its ISA, 4 or 8 parameters a step. The per-element
 * math is the same IEEE operations in both (no FMA contraction: the AVX2
 * copy is built without FMA), so the results are bit for bit the same. */
static inline __attribute__((always_inline)) void
step_loop(const struct optim_spec *o, float *restrict params, float *restrict state,
          const float *restrict grads, int64_t n, float bc1, float bc2) {
  if (o->kind == OPTIM_ADAM) {
    float *restrict m = state, *restrict v = state + n;
    for (int64_t i = 0; i < n; i++)
      params[i] = ct_adam_update(params[i], &m[i], &v[i], grads[i], o->lr, o->beta1, o->beta2,
                                 o->eps, o->weight_decay, bc1, bc2);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    params[i] = ct_sgd_update(params[i], &state[i], grads[i], o->lr, o->momentum, o->weight_decay);
}

#if defined(__x86_64__) && defined(__GNUC__)
static __attribute__((target("avx2"))) void step_avx2(const struct optim_spec *o,
                                                      float *restrict params, float *restrict state,
                                                      const float *restrict grads, int64_t n,
                                                      float bc1, float bc2) {
  step_loop(o, params, state, grads, n, bc1, bc2);
}
#define STEP_AVX2_OK() conv_avx2_cpu_ok()
#else
#define STEP_AVX2_OK() 0
#define step_avx2 step_loop
#endif

void optim_step(const struct optim_spec *o, float *restrict params, float *restrict state,
                const float *restrict grads, int64_t n, int64_t step) {
  float bc1 = 1.0f, bc2 = 1.0f;
  if (o->kind == OPTIM_ADAM) {
    bc1 = 1.0f - powf(o->beta1, (float)step);
    bc2 = 1.0f - powf(o->beta2, (float)step);
  }
  if (STEP_AVX2_OK())
    step_avx2(o, params, state, grads, n, bc1, bc2);
  else
    step_loop(o, params, state, grads, n, bc1, bc2);
}

void optim_init_params(const struct model_layout *L, struct splitmix *r, float *params) {
  for (int i = 0; i < L->n_layers; i++) {
    const struct layer_shape *s = &L->layer[i];
    const int64_t fan_in = s->w_size / s->out_c;
    const double bound = 1.0 / sqrt((double)fan_in);
    for (int64_t k = 0; k < s->w_size; k++)
      params[s->w_off + k] = (float)((2.0 * splitmix_uniform(r) - 1.0) * bound);
    for (int64_t k = 0; k < s->b_size; k++)
      params[s->b_off + k] = (float)((2.0 * splitmix_uniform(r) - 1.0) * bound);
  }
}
