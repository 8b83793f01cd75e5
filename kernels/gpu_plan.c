/* Device memory plan of the CUDA backend (see gpu_plan.h). The backend carves
 * its arenas in exactly this order and these sizes. */
#include "gpu_plan.h"

#include <errno.h>
#include <string.h>

#include "gpu_mem.h"

#define F (int64_t)sizeof(float)

int gpu_plan_init(const struct model_layout *L, int optim_kind, int batch, struct gpu_plan *out) {
  if (!L || !out || batch < 1 || L->n_layers < 1 || L->n_layers > MODEL_MAX_LAYERS) return -EINVAL;
  struct gpu_plan p;
  memset(&p, 0, sizeof(p));
  p.batch = batch;
  p.n_layers = L->n_layers;
  p.n_params = L->n_params;
  p.opt_floats = (int64_t)optim_state_per_param(optim_kind) * L->n_params;
  p.x_floats = (int64_t)batch * L->in_dim;
  const int64_t n = batch;
  int64_t ev = 0, tr = 0;
  ev += gpu_mem_round(p.n_params * F);
  ev += GPU_PLAN_SLOTS * (gpu_mem_round(p.x_floats * F) + gpu_mem_round(n));
  int last_conv = -1;
  for (int l = 0; l < L->n_layers; l++)
    if (L->layer[l].kind == LAYER_CONV) last_conv = l;
  for (int l = 0; l < L->n_layers; l++) {
    const struct layer_shape *s = &L->layer[l];
    struct gpu_plan_layer *q = &p.layer[l];
    if (s->out_c > p.red_outputs) p.red_outputs = s->out_c;
    if (s->kind == LAYER_CONV) {
      int64_t k = MODEL_CNN_K, pix = (int64_t)s->out_h * s->out_w;
      q->col = (int64_t)s->in_c * k * k * n * pix;
      q->conv = (int64_t)s->out_c * n * pix;
      q->pool = (int64_t)s->out_c * n * s->pool_h * s->pool_w;
      /* pool + argmax (int32); the last conv layer pools straight into
       * flat (and its gradient comes from d flat) */
      const int pooled = l == last_conv ? 1 : 2;
      ev += gpu_mem_round(q->col * F) + gpu_mem_round(q->conv * F) +
            pooled * gpu_mem_round(q->pool * F);
      /* backward: d conv, d pool, and d col for every conv but the first
       * (the input needs no gradient) */
      tr += gpu_mem_round(q->conv * F) + (pooled - 1) * gpu_mem_round(q->pool * F);
      if (l > 0) tr += gpu_mem_round(q->col * F);
    } else if (s->kind == LAYER_LINEAR) {
      q->out = n * s->out_c;
      ev += gpu_mem_round(q->out * F);
      tr += gpu_mem_round(q->out * F);
    } else {
      return -EINVAL;
    }
  }
  if (last_conv >= 0) {
    const struct layer_shape *s = &L->layer[last_conv];
    p.flat = n * s->out_c * s->pool_h * s->pool_w;
    ev += gpu_mem_round(p.flat * F);
    tr += gpu_mem_round(p.flat * F);
  }
  /* the batch's loss sums (double + int) and the device counters */
  ev += gpu_mem_round(16);
  ev += GPU_PLAN_BLAS_WORKSPACE;
  tr += gpu_mem_round(p.red_outputs * (int64_t)sizeof(unsigned)) +
        gpu_mem_round(p.red_outputs * (int64_t)GPU_PLAN_RED_PARTS * F);
  p.state_bytes = gpu_mem_round(p.n_params * F) /* gradients */ + gpu_mem_round(p.opt_floats * F);
  p.eval_bytes = ev;
  p.backward_bytes = tr;
  p.train_bytes = p.state_bytes + p.backward_bytes;
  *out = p;
  return 0;
}

void gpu_plan_shard(int n, int g, int d, int *first, int *count) {
  int base = g > 0 ? n / g : 0, extra = g > 0 ? n % g : 0;
  *count = base + (d < extra ? 1 : 0);
  *first = d * base + (d < extra ? d : extra);
}
