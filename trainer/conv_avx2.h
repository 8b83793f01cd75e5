/* Direct convolution kernels for AVX2 + FMA: the cnn's 5x5 convolutions
 * (forward, weight gradient, input gradient) computed straight from the CNHW
 * activations, with no im2col buffer and no sgemm call. They are the fast
 * path of layers_conv_forward/backward; layers.c keeps the im2col + sgemm
 * path as the reference they are tested against op by op. Built for any
 * x86-64 (the AVX2 code is compiled per function and chosen at run time);
 * elsewhere, or on a CPU without AVX2 and FMA, every call answers -ENOTSUP. */
#ifndef CTUNE_TRAINER_CONV_AVX2_H
#define CTUNE_TRAINER_CONV_AVX2_H

#include <stdint.h>

#include "backend.h"

/* 1 when this CPU runs the kernels (AVX2 and FMA), else 0. */
int conv_avx2_cpu_ok(void);
/* hide = 1 makes conv_avx2_cpu_ok answer 0 from now on, as on a CPU without
 * AVX2 (for the test of the fallback); hide = 0 asks the CPU again. */
void conv_avx2_hide_cpu(int hide);

/* 0 when the kernels cover shape s on this CPU, else -ENOTSUP: they need
 * out_w >= 8 (a row is whole 8-float vectors, the last one overlapping),
 * out_w <= 64, out_h * (out_w + 7) / 8 <= 512, in_c <= 16 and one image's
 * input and output (in_c * in_h * in_w, out_c * out_h * out_w) within
 * 16,384 floats each (the stack buffers of the input gradient). */
int conv_avx2_supports(const struct layer_shape *s);

/* The same contracts as layers_conv_forward (without bias) and
 * layers_conv_backward (without db), minus the scratch buffers; -ENOTSUP
 * (nothing written) when conv_avx2_supports says no. */
int conv_avx2_forward(const struct layer_shape *s, int B, const float *in, const float *w,
                      float *out);
/* The forward fused with layers_pool_bias_relu_forward: out and arg as
 * that function writes them from conv_avx2_forward's output, bit for bit,
 * without the conv output. 0 from conv_avx2_pool_supports when the kernel
 * covers s: conv_avx2_supports, out_w a multiple of 8, out_h even and the
 * 2x2 pool's shape; else -ENOTSUP (nothing written). */
int conv_avx2_pool_supports(const struct layer_shape *s);
int conv_avx2_forward_pool(const struct layer_shape *s, int B, const float *in, const float *w,
                           const float *bias, float *out, int32_t *arg);
/* The weight and bias gradients of a conv layer followed by the 2x2 pool,
 * bias and ReLU, straight from the pooled output y, its gradient dy and the
 * winners arg (as layers_conv_pool_forward wrote them): the dw and db of
 * layers_pool_bias_relu_backward then conv_avx2_backward, from the nonzero
 * terms only (a quarter of them, fewer after the ReLU), added in another
 * order. 0 from
 * conv_avx2_pooled_supports when it covers s: conv_avx2_supports and the
 * floor 2x2 pool's shape; else -ENOTSUP (nothing written). */
int conv_avx2_pooled_supports(const struct layer_shape *s);
int conv_avx2_backward_pooled(const struct layer_shape *s, int B, const float *in, const float *y,
                              const float *dy, const int32_t *arg, float *dw, float *db);
/* The input gradient of such a layer straight from y, dy and arg: the din
 * of layers_pool_bias_relu_backward then conv_avx2_backward, bit for bit,
 * without the dense gradient. din must not overlap dy. 0 from
 * conv_avx2_x_pooled_supports when it covers s: conv_avx2_pooled_supports,
 * out_h <= 10 and one image's padded rows within the stack buffers; else
 * -ENOTSUP (nothing written). */
int conv_avx2_x_pooled_supports(const struct layer_shape *s);
int conv_avx2_backward_x_pooled(const struct layer_shape *s, int B, const float *y, const float *dy,
                                const int32_t *arg, const float *w, float *din);
/* dw may be NULL (din alone), din may be NULL (dw alone). */
int conv_avx2_backward(const struct layer_shape *s, int B, const float *in, const float *dout,
                       const float *w, float *dw, float *din);

#endif
