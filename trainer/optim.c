/* SGD with momentum (PyTorch form) and Adam over one flat buffer; the
 * per-element math comes from kernels/ops_math.h. */
#include "optim.h"

#include <math.h>

#include "ops_math.h"

void optim_step(const struct optim_spec *o, float *restrict params, float *restrict state,
                const float *restrict grads, int64_t n, int64_t step) {
  if (o->kind == OPTIM_ADAM) {
    float *m = state, *v = state + n;
    const float bc1 = 1.0f - powf(o->beta1, (float)step);
    const float bc2 = 1.0f - powf(o->beta2, (float)step);
    for (int64_t i = 0; i < n; i++)
      params[i] = ct_adam_update(params[i], &m[i], &v[i], grads[i], o->lr, o->beta1, o->beta2,
                                 o->eps, o->weight_decay, bc1, bc2);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    params[i] = ct_sgd_update(params[i], &state[i], grads[i], o->lr, o->momentum, o->weight_decay);
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
