/* CPU network: forward and backward through conv/pool stages and linear
 * layers, over buffers allocated once per max batch. */
#include "net.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

struct conv_bufs {
  float *col, *act, *pool; /* im2col scratch, conv output, pooled+bias+ReLU */
  int32_t *arg;
};

struct net {
  struct model_layout L;
  int max_batch;
  int n_conv;
  struct conv_bufs conv[2];
  const float *conv_in[2];  /* each conv layer's input in the last forward */
  float *xin;               /* input in CNHW */
  float *flat;              /* [B][flat] input of the first linear layer */
  float *lin[3];            /* linear outputs (ReLU'd except the last) */
  float *dlogits;           /* gradient buffers, ping-ponged */
  float *dA, *dB;           /* [B][max linear width] */
  float *dconv_a, *dconv_b; /* conv-shaped scratch (largest conv act) */
  float *dcol;              /* largest im2col */
  const float *lin_in0;     /* input of the first linear layer in the last forward */
  int64_t bytes;
};

static float *falloc(struct net *n, int64_t count, int *err) {
  if (count < 1) count = 1;
  float *p = malloc(sizeof(float) * (size_t)count);
  if (!p) *err = -ENOMEM;
  n->bytes += (int64_t)sizeof(float) * count;
  return p;
}

int net_create(const struct model_spec *spec, int max_batch, struct net **out) {
  if (!spec || !out || max_batch < 1) return -EINVAL;
  struct net *n = calloc(1, sizeof(*n));
  if (!n) return -ENOMEM;
  int err = model_layout_init(spec, &n->L);
  if (err) goto fail;
  n->max_batch = max_batch;
  const int64_t B = max_batch;
  int64_t max_act = 1, max_col = 1, max_lin = 1;
  for (int i = 0; i < n->L.n_layers; i++) {
    const struct layer_shape *s = &n->L.layer[i];
    if (s->kind == LAYER_CONV) {
      struct conv_bufs *c = &n->conv[n->n_conv++];
      int64_t col = layers_conv_col_size(s, max_batch);
      int64_t act = (int64_t)s->out_c * B * s->out_h * s->out_w;
      int64_t pool = (int64_t)s->out_c * B * s->pool_h * s->pool_w;
      int64_t in = (int64_t)s->in_c * B * s->in_h * s->in_w;
      c->col = falloc(n, col, &err);
      c->act = falloc(n, act, &err);
      c->pool = falloc(n, pool, &err);
      c->arg = malloc(sizeof(int32_t) * (size_t)pool);
      if (!c->arg) err = -ENOMEM;
      if (col > max_col) max_col = col;
      if (act > max_act) max_act = act;
      if (in > max_act) max_act = in;
    } else {
      if (s->in_c > max_lin) max_lin = s->in_c;
      if (s->out_c > max_lin) max_lin = s->out_c;
    }
  }
  const struct layer_shape *first_lin = &n->L.layer[n->n_conv];
  n->xin = falloc(n, B * n->L.in_dim, &err);
  n->flat = falloc(n, B * first_lin->in_c, &err);
  for (int j = 0; j < 3; j++) n->lin[j] = falloc(n, B * n->L.layer[n->n_conv + j].out_c, &err);
  n->dlogits = falloc(n, B * n->L.n_classes, &err);
  n->dA = falloc(n, B * max_lin, &err);
  n->dB = falloc(n, B * max_lin, &err);
  if (n->n_conv) {
    n->dconv_a = falloc(n, max_act, &err);
    n->dconv_b = falloc(n, max_act, &err);
    n->dcol = falloc(n, max_col, &err);
  }
  if (err) goto fail;
  *out = n;
  return 0;
fail:
  net_destroy(n);
  return err;
}

void net_destroy(struct net *n) {
  if (!n) return;
  for (int i = 0; i < 2; i++) {
    free(n->conv[i].col);
    free(n->conv[i].act);
    free(n->conv[i].pool);
    free(n->conv[i].arg);
  }
  free(n->xin);
  free(n->flat);
  for (int j = 0; j < 3; j++) free(n->lin[j]);
  free(n->dlogits);
  free(n->dA);
  free(n->dB);
  free(n->dconv_a);
  free(n->dconv_b);
  free(n->dcol);
  free(n);
}

const struct model_layout *net_layout(const struct net *n) { return &n->L; }
int64_t net_buffer_bytes(const struct net *n) { return n->bytes; }

const float *net_forward(struct net *n, const float *params, const float *x, int B) {
  const struct model_layout *L = &n->L;
  const float *cur = x;
  if (n->n_conv) {
    const struct layer_shape *s0 = &L->layer[0];
    /* NCHW -> CNHW; for one channel the two are the same */
    const float *in = x;
    if (s0->in_c > 1) {
      layers_flat_to_cnhw(s0->in_c, B, s0->in_h * s0->in_w, x, n->xin);
      in = n->xin;
    }
    for (int i = 0; i < n->n_conv; i++) {
      const struct layer_shape *s = &L->layer[i];
      struct conv_bufs *c = &n->conv[i];
      n->conv_in[i] = in;
      /* conv, pool, then bias + ReLU on the 4x smaller pooled map */
      layers_conv_pool_forward(s, B, in, params + s->w_off, params + s->b_off, c->col, c->act,
                               c->pool, c->arg);
      in = c->pool;
    }
    const struct layer_shape *sl = &L->layer[n->n_conv - 1];
    layers_cnhw_to_flat(sl->out_c, B, sl->pool_h * sl->pool_w, in, n->flat);
    cur = n->flat;
  }
  n->lin_in0 = cur;
  for (int j = 0; j < 3; j++) {
    const struct layer_shape *s = &L->layer[n->n_conv + j];
    layers_linear_forward(B, s->in_c, s->out_c, cur, params + s->w_off, params + s->b_off,
                          n->lin[j]);
    if (j < 2) layers_relu_forward(n->lin[j], (int64_t)B * s->out_c);
    cur = n->lin[j];
  }
  return n->lin[2];
}

void net_backward(struct net *n, const float *params, const uint8_t *y, int B, float *grads,
                  double *loss_sum, int *correct) {
  const struct model_layout *L = &n->L;
  layers_xent(B, L->n_classes, n->lin[2], y, n->dlogits, loss_sum, correct);
  float *dout = n->dlogits;
  float *bufs[2] = {n->dA, n->dB};
  for (int j = 2; j >= 0; j--) {
    const struct layer_shape *s = &L->layer[n->n_conv + j];
    const float *in = j > 0 ? n->lin[j - 1] : n->lin_in0;
    float *din = NULL;
    if (j > 0 || n->n_conv) din = bufs[j & 1];
    layers_linear_backward(B, s->in_c, s->out_c, dout, in, params + s->w_off, grads + s->w_off,
                           grads + s->b_off, din);
    if (j > 0) layers_relu_backward(n->lin[j - 1], din, (int64_t)B * s->in_c);
    dout = din;
  }
  if (!n->n_conv) return;
  /* dout is d(flat): back to CNHW, through pool, ReLU and conv */
  const struct layer_shape *sl = &L->layer[n->n_conv - 1];
  layers_flat_to_cnhw(sl->out_c, B, sl->pool_h * sl->pool_w, dout, n->dconv_a);
  for (int i = n->n_conv - 1; i >= 0; i--) {
    const struct layer_shape *s = &L->layer[i];
    struct conv_bufs *c = &n->conv[i];
    float *din = i > 0 ? n->dconv_a : NULL;
    layers_conv_pool_backward(s, B, n->conv_in[i], c->pool, n->dconv_a, c->arg, params + s->w_off,
                              grads + s->w_off, grads + s->b_off, c->col, n->dcol, n->dconv_b, din);
  }
}
