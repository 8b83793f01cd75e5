/* Forward/backward pairs of the CPU layers. Pure functions over caller-owned
 * buffers; no allocation. Convolution activations are kept channel-major over
 * the batch ([C][B][H][W], "CNHW") so that one im2col + one sgemm covers the
 * whole batch; linear activations are [B][features]. */
#ifndef CTUNE_TRAINER_LAYERS_H
#define CTUNE_TRAINER_LAYERS_H

#include <stdint.h>

#include "backend.h"

/* Images per im2col chunk at batch B, and the floats of the im2col (and
 * dcol) scratch buffer that conv layer s needs at batch B. */
int layers_conv_chunk(const struct layer_shape *s, int B);
int64_t layers_conv_col_size(const struct layer_shape *s, int B);

/* Which kernels layers_conv_* and layers_linear_* run, process-wide: AUTO
 * (the default) takes the AVX2 kernels (conv_avx2.h, gemm_avx2.h) where the
 * CPU and the shape allow (the GEMMs up to batch 64, where they beat
 * sgemm) and the reference elsewhere; REFERENCE always
 * takes im2col + sgemm and sgemm, the paths the fast ones are tested
 * against. */
enum layers_kernels { LAYERS_KERNELS_AUTO = 0, LAYERS_KERNELS_REFERENCE = 1 };
void layers_set_kernels(int mode);

/* in: [in_c][B][in_h][in_w]; out: [out_c][B][out_h][out_w] = conv + bias
 * (no bias when b is NULL). col is scratch of layers_conv_col_size floats. */
void layers_conv_forward(const struct layer_shape *s, int B, const float *in, const float *w,
                         const float *b, float *col, float *out);

/* in: the forward input; dout: [out_c][B][out_h][out_w]. Writes dw, db
 * (overwritten, not accumulated; skipped when db is NULL) and, when din is not NULL, din
 * ([in_c][B][in_h][in_w]). col and dcol are scratch of
 * layers_conv_col_size floats each. */
void layers_conv_backward(const struct layer_shape *s, int B, const float *in, const float *dout,
                          const float *w, float *dw, float *db, float *col, float *dcol,
                          float *din);
/* The reference (im2col + sgemm) whatever the mode, same contracts. */
void layers_conv_forward_ref(const struct layer_shape *s, int B, const float *in, const float *w,
                             const float *b, float *col, float *out);
void layers_conv_backward_ref(const struct layer_shape *s, int B, const float *in,
                              const float *dout, const float *w, float *dw, float *db, float *col,
                              float *dcol, float *din);

/* Per-channel bias then ReLU, in place, over CNHW data of C channels with
 * per_c values each; and its backward from the output y: dy masked in place,
 * db = the per-channel sum of the masked gradient. The cnn applies these
 * after max pooling, where they cost a quarter: max(a) + b = max(a + b) and
 * relu(max(a)) = max(relu(a)), gradients included. */
void layers_bias_relu_cnhw(int C, int64_t per_c, const float *b, float *x);
void layers_bias_relu_backward_cnhw(int C, int64_t per_c, const float *y, float *dy, float *db);

/* layers_conv_forward (no bias) into act, then
 * layers_pool_bias_relu_forward into out and arg; in AUTO mode, where the
 * CPU and shape allow, the fused AVX2 kernel (conv_avx2_forward_pool) writes
 * the same out and arg without act. */
void layers_conv_pool_forward(const struct layer_shape *s, int B, const float *in, const float *w,
                              const float *b, float *col, float *act, float *out, int32_t *arg);

/* The backward of layers_conv_pool_forward from its pooled output y, the
 * gradient dy and the winners arg: layers_pool_bias_relu_backward into dact
 * (db), then layers_conv_backward (dw, and din when not NULL). In AUTO mode,
 * where the CPU and shape allow, conv_avx2_backward_pooled writes dw and db
 * from the pooled gradient's nonzero terms alone, and din (when not NULL)
 * by conv_avx2_backward_x_pooled from a copy of dy in dact, or else from
 * dact by conv_avx2_backward; without din dact is not written. din may be
 * dy's buffer: dy is read before din is written. */
void layers_conv_pool_backward(const struct layer_shape *s, int B, const float *in, const float *y,
                               const float *dy, const int32_t *arg, const float *w, float *dw,
                               float *db, float *col, float *dcol, float *dact, float *din);

/* In-place ReLU and its backward from the ReLU's output. */
void layers_relu_forward(float *x, int64_t n);
void layers_relu_backward(const float *y, float *dy, int64_t n);

/* Max pool 2x2 stride 2 (floor) over planes of h x w: in [planes][h][w],
 * out [planes][h/2][w/2]; arg records the winning index within each plane. */
void layers_maxpool_forward(int planes, int h, int w, const float *in, float *out, int32_t *arg);
/* din ([planes][h][w]) is overwritten: zero except at the winners. */
void layers_maxpool_backward(int planes, int h, int w, const float *dout, const int32_t *arg,
                             float *din);

/* Max pool then bias then ReLU over CNHW conv output in ([C][B][h][w]):
 * out ([C][B][h/2][w/2]) = relu(max of the window + b[c]), arg as for
 * layers_maxpool_forward. The same values as layers_maxpool_forward followed
 * by layers_bias_relu_cnhw, in one pass. */
void layers_pool_bias_relu_forward(int C, int B, int h, int w, const float *in, const float *b,
                                   float *out, int32_t *arg);
/* Its backward from the output y and its gradient dy: din ([C][B][h][w],
 * overwritten: the masked gradient at each window's winner, zero elsewhere)
 * and db (per-channel sum). din is bit for bit that of
 * layers_bias_relu_backward_cnhw then layers_maxpool_backward, and db the
 * same sum added in another order (four lanes), in one pass over the
 * pooled map, without writing dy or clearing din first. */
void layers_pool_bias_relu_backward(int C, int B, int h, int w, const float *y, const float *dy,
                                    const int32_t *arg, float *din, float *db);

/* in [B][n_in], w [n_out][n_in], b [n_out] -> out [B][n_out]. */
void layers_linear_forward(int B, int n_in, int n_out, const float *in, const float *w,
                           const float *b, float *out);
/* dw, db overwritten; din ([B][n_in]) written when not NULL. */
void layers_linear_backward(int B, int n_in, int n_out, const float *dout, const float *in,
                            const float *w, float *dw, float *db, float *din);
/* The reference (OpenBLAS sgemm) whatever the mode, same contracts. */
void layers_linear_forward_ref(int B, int n_in, int n_out, const float *in, const float *w,
                               const float *b, float *out);
void layers_linear_backward_ref(int B, int n_in, int n_out, const float *dout, const float *in,
                                const float *w, float *dw, float *db, float *din);

/* Softmax cross-entropy over logits [B][k] with labels y. Adds the summed
 * loss to *loss_sum and the count of argmax == y to *correct. When dlogits is
 * not NULL it receives the gradient of the batch-mean loss. Labels >= k are
 * the caller's bug and are treated as never correct with zero target. */
void layers_xent(int B, int k, const float *logits, const uint8_t *y, float *dlogits,
                 double *loss_sum, int *correct);

/* [C][B][S] <-> [B][C*S]: the flatten between the conv and linear parts. */
void layers_cnhw_to_flat(int C, int B, int S, const float *in, float *out);
void layers_flat_to_cnhw(int C, int B, int S, const float *in, float *out);

#endif
