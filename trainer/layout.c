/* The model's parameter layout in one flat float buffer (llm.c style), shared
 * by every backend and by the checkpoint format. */
#include "backend.h"

#include <errno.h>
#include <string.h>

static void add_linear(struct model_layout *L, int in, int out) {
  struct layer_shape *s = &L->layer[L->n_layers++];
  memset(s, 0, sizeof(*s));
  s->kind = LAYER_LINEAR;
  s->in_c = in;
  s->in_h = s->in_w = 1;
  s->out_c = out;
  s->out_h = s->out_w = 1;
  s->pool_h = s->pool_w = 1;
  s->w_off = L->n_params;
  s->w_size = (int64_t)in * out;
  s->b_off = s->w_off + s->w_size;
  s->b_size = out;
  L->n_params = s->b_off + s->b_size;
}

/* conv KxK stride 1 no padding, then maxpool 2 (floor), as in the tutorial. */
static int add_conv(struct model_layout *L, int in_c, int in_h, int in_w, int out_c) {
  const int k = MODEL_CNN_K, p = MODEL_CNN_POOL;
  if (in_h < k || in_w < k) return -EINVAL;
  int oh = in_h - k + 1, ow = in_w - k + 1;
  if (oh / p < 1 || ow / p < 1) return -EINVAL;
  struct layer_shape *s = &L->layer[L->n_layers++];
  memset(s, 0, sizeof(*s));
  s->kind = LAYER_CONV;
  s->in_c = in_c;
  s->in_h = in_h;
  s->in_w = in_w;
  s->out_c = out_c;
  s->out_h = oh;
  s->out_w = ow;
  s->pool_h = oh / p;
  s->pool_w = ow / p;
  s->w_off = L->n_params;
  s->w_size = (int64_t)out_c * in_c * k * k;
  s->b_off = s->w_off + s->w_size;
  s->b_size = out_c;
  L->n_params = s->b_off + s->b_size;
  return 0;
}

int model_layout_init(const struct model_spec *spec, struct model_layout *out) {
  if (!spec || !out) return -EINVAL;
  if (spec->in_c < 1 || spec->in_h < 1 || spec->in_w < 1 || spec->n_classes < 2 || spec->l1 < 1 ||
      spec->l2 < 1)
    return -EINVAL;
  if ((int64_t)spec->in_c * spec->in_h * spec->in_w > (1 << 24)) return -EINVAL;
  struct model_layout L;
  memset(&L, 0, sizeof(L));
  L.in_dim = spec->in_c * spec->in_h * spec->in_w;
  L.n_classes = spec->n_classes;
  int flat;
  if (spec->kind == MODEL_CNN) {
    if (add_conv(&L, spec->in_c, spec->in_h, spec->in_w, MODEL_CNN_C1)) return -EINVAL;
    const struct layer_shape *c1 = &L.layer[0];
    if (add_conv(&L, MODEL_CNN_C1, c1->pool_h, c1->pool_w, MODEL_CNN_C2)) return -EINVAL;
    const struct layer_shape *c2 = &L.layer[1];
    flat = c2->out_c * c2->pool_h * c2->pool_w;
  } else if (spec->kind == MODEL_MLP) {
    flat = L.in_dim;
  } else {
    return -EINVAL;
  }
  add_linear(&L, flat, spec->l1);
  add_linear(&L, spec->l1, spec->l2);
  add_linear(&L, spec->l2, spec->n_classes);
  *out = L;
  return 0;
}

int optim_state_per_param(int optim_kind) { return optim_kind == OPTIM_ADAM ? 2 : 1; }
