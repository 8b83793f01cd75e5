/* Per-element math shared by the CPU backend (trainer/) and the CUDA kernels
 * (the .cu files in kernels/), so both backends compute exactly the same function. */
#ifndef CTUNE_OPS_MATH_H
#define CTUNE_OPS_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define CT_HD __host__ __device__ inline
#else
#define CT_HD static inline
#endif

/* ReLU forward. */
CT_HD float ct_relu(float x) { return x > 0.0f ? x : 0.0f; }

/* ReLU backward from the layer's output (or input: the sign is the same):
 * passes the upstream gradient where the unit was active. */
CT_HD float ct_relu_grad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

/* One element of SGD with momentum in PyTorch's form (dampening 0, no
 * Nesterov): g' = g + wd*p; v = mu*v + g'; p -= lr*v. With v starting at 0
 * this equals PyTorch's "v = g' on the first step", and with mu = 0 it is
 * plain SGD (v = g'), so there is no branch and the loop vectorises.
 * Returns the new p. */
CT_HD float ct_sgd_update(float p, float *v, float g, float lr, float momentum,
                          float weight_decay) {
  g += weight_decay * p;
  *v = momentum * *v + g;
  return p - lr * *v;
}

/* One element of Adam (PyTorch's torch.optim.Adam, L2 weight decay added to
 * the gradient, bias-corrected). bc1 = 1 - beta1^t, bc2 = 1 - beta2^t for the
 * 1-based step t; the caller computes them once per step. Returns the new p. */
CT_HD float ct_adam_update(float p, float *m, float *v, float g, float lr, float beta1, float beta2,
                           float eps, float weight_decay, float bc1, float bc2) {
  g += weight_decay * p;
  *m = beta1 * *m + (1.0f - beta1) * g;
  *v = beta2 * *v + (1.0f - beta2) * g * g;
  float denom = sqrtf(*v) / sqrtf(bc2) + eps;
  return p - (lr / bc1) * (*m / denom);
}

/* Numerically stable softmax cross-entropy over one row of logits, in three
 * pieces: the row max m, the shifted exponential sum s = sum exp(x - m), then
 * per row the loss and per element the gradient. */
CT_HD float ct_exp_shifted(float x, float row_max) { return expf(x - row_max); }

/* -log softmax(x)[target] given the target's logit, the row max and the sum. */
CT_HD float ct_xent_loss(float x_target, float row_max, float exp_sum) {
  return -(x_target - row_max - logf(exp_sum));
}

/* d loss / d x for one logit: (softmax(x) - [is target]) * scale, where scale
 * is 1/batch for a mean-reduced loss. */
CT_HD float ct_xent_grad(float x, float row_max, float exp_sum, int is_target, float scale) {
  float p = expf(x - row_max) / exp_sum;
  return (p - (is_target ? 1.0f : 0.0f)) * scale;
}

#endif
