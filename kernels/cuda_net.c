/* The model's forward and backward passes on one GPU: im2col + cuBLAS
 * convolutions, cuBLAS linear layers and the kernels of cuda_ops.cu, all on
 * the device's compute stream. */
#include <errno.h>

#include "cuda_internal.h"
#include "cuda_ops.h"

/* Column-major GEMM C = op(A) op(B), alpha 1, beta 0 (row-major callers swap
 * operands; each call site says which product it computes). */
static int gemm(struct cuda_dev *d, int ta, int tb, int m, int n, int k, const float *A, int lda,
                const float *B, int ldb, float *C, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  int rc = 0;
  BLAS(cublasSgemm(d->blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                   &one, A, lda, B, ldb, &zero, C, ldc));
fail:
  return rc;
}

/* Input of conv layer l: layer 0 reads the NCHW batch, later ones the
 * channel-major [c][n][h*w] pooled output of the layer before. */
static void conv_strides(const struct layer_shape *s, int l, int n, int64_t *sn, int64_t *sc) {
  int64_t hw = (int64_t)s->in_h * s->in_w;
  if (l == 0) {
    *sn = s->in_c * hw;
    *sc = hw;
  } else {
    *sn = hw;
    *sc = (int64_t)n * hw;
  }
}

int cuda_net_forward(struct backend *b, struct cuda_dev *d, int slot, int n) {
  const struct model_layout *L = &b->L;
  const float *in = d->x[slot];
  const int K = MODEL_CNN_K;
  int rc = 0;
  for (int l = 0; l < L->n_layers; l++) {
    const struct layer_shape *s = &L->layer[l];
    const float *W = d->params + s->w_off, *bias = d->params + s->b_off;
    if (s->kind == LAYER_CONV) {
      int64_t sn, sc;
      int ckk = s->in_c * K * K, np = n * s->out_h * s->out_w;
      conv_strides(s, l, n, &sn, &sc);
      OPS(cuops_im2col(in, d->col[l], n, s->in_c, s->in_h, s->in_w, K, sn, sc, d->compute));
      /* conv[OC][nP] = W[OC][CKK] col[CKK][nP] */
      rc = gemm(d, 0, 0, np, s->out_c, ckk, d->col[l], np, W, ckk, d->conv[l], np);
      if (rc) goto fail;
      /* bias, ReLU and pooling in one kernel; the last conv layer's pooled
       * output goes straight to the flat [n][c*h*w] input of the linear part */
      const int flat = l == b->last_conv;
      float *pooled = flat ? d->flat : d->pool[l];
      OPS(cuops_conv_pool_forward(d->conv[l], bias, pooled, d->arg[l], s->out_c, n, s->out_h,
                                  s->out_w, MODEL_CNN_POOL, flat, d->compute));
      in = pooled;
    } else {
      /* out[n][O] = in[n][I] W[O][I]^T */
      rc = gemm(d, 1, 0, s->out_c, n, s->in_c, W, s->in_c, in, s->in_c, d->out[l], s->out_c);
      if (rc) goto fail;
      OPS(cuops_bias_act(d->out[l], bias, n, s->out_c, 0, l != L->n_layers - 1, d->compute));
      in = d->out[l];
    }
  }
fail:
  return rc;
}

float *cuda_net_loss_bias(struct backend *b, struct cuda_dev *d) {
  const struct layer_shape *s = &b->L.layer[b->L.n_layers - 1];
  return s->out_c <= CUOPS_XENT_MAX_CLASSES ? d->grads + s->b_off : NULL;
}

/* Gradients of the mean loss into d->grads, from dout[last] = dloss/dlogits
 * (already written by the cross-entropy kernel, and the last layer's bias
 * gradient too where cuda_net_loss_bias says so). */
int cuda_net_backward(struct backend *b, struct cuda_dev *d, int slot, int n) {
  const struct model_layout *L = &b->L;
  const int K = MODEL_CNN_K, last = L->n_layers - 1;
  int rc = 0;
  for (int l = last; l >= b->first_linear; l--) {
    const struct layer_shape *s = &L->layer[l];
    const float *W = d->params + s->w_off;
    const float *in = l > b->first_linear ? d->out[l - 1]
                      : b->last_conv >= 0 ? d->flat
                                          : d->x[slot];
    float *dy = d->dout[l];
    /* dy through the ReLU, and the bias gradient, in one kernel */
    if (l != last)
      OPS(cuops_relu_backward_sum(d->out[l], dy, d->grads + s->b_off, n, s->out_c, d->red,
                                  d->compute));
    /* dW[O][I] = dy[n][O]^T in[n][I] */
    rc = gemm(d, 0, 1, s->in_c, s->out_c, n, in, s->in_c, dy, s->out_c, d->grads + s->w_off,
              s->in_c);
    if (rc) goto fail;
    if (l == last && !cuda_net_loss_bias(b, d))
      OPS(cuops_sum_strided(dy, d->grads + s->b_off, s->out_c, n, 1, s->out_c, d->red, d->compute));
    float *din = l > b->first_linear ? d->dout[l - 1] : b->last_conv >= 0 ? d->dflat : NULL;
    if (din) {
      /* din[n][I] = dy[n][O] W[O][I] */
      rc = gemm(d, 0, 0, s->in_c, n, s->out_c, W, s->in_c, dy, s->out_c, din, s->in_c);
      if (rc) goto fail;
    }
  }
  for (int l = b->last_conv; l >= 0; l--) {
    const struct layer_shape *s = &L->layer[l];
    const float *W = d->params + s->w_off;
    int ckk = s->in_c * K * K, np = n * s->out_h * s->out_w;
    const int flat = l == b->last_conv;
    /* pooling, ReLU and the bias gradient backward in one kernel */
    OPS(cuops_conv_pool_backward(flat ? d->dflat : d->dpool[l], d->arg[l], d->conv[l], d->dconv[l],
                                 d->grads + s->b_off, s->out_c, n, s->out_h, s->out_w,
                                 MODEL_CNN_POOL, flat, d->red, d->compute));
    /* dW[OC][CKK] = dconv[OC][nP] col[CKK][nP]^T */
    rc = gemm(d, 1, 0, ckk, s->out_c, np, d->col[l], np, d->dconv[l], np, d->grads + s->w_off, ckk);
    if (rc) goto fail;
    if (l > 0) {
      int64_t sn, sc;
      conv_strides(s, l, n, &sn, &sc);
      /* dcol[CKK][nP] = W[OC][CKK]^T dconv[OC][nP] */
      rc = gemm(d, 0, 1, np, ckk, s->out_c, d->dconv[l], np, W, ckk, d->dcol[l], np);
      if (rc) goto fail;
      OPS(cuops_col2im(d->dcol[l], d->dpool[l - 1], n, s->in_c, s->in_h, s->in_w, K, sn, sc,
                       d->compute));
    }
  }
fail:
  return rc;
}
