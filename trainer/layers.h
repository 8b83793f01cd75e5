/* Forward/backward pairs of the CPU layers. Pure functions over caller-owned
 * buffers; no allocation. Convolution activations are kept channel-major over
 * the batch ([C][B][H][W], "CNHW") so that one im2col + one sgemm covers the
 * whole batch; linear activations are [B][features]. */
#ifndef CTUNE_TRAINER_LAYERS_H
#define CTUNE_TRAINER_LAYERS_H

#include <stdint.h>

#include "backend.h"

/* Floats needed for the im2col buffer of conv layer s at batch B. */
int64_t layers_conv_col_size(const struct layer_shape *s, int B);

/* in: [in_c][B][in_h][in_w]; out: [out_c][B][out_h][out_w] = conv + bias.
 * col receives the im2col matrix ([in_c*k*k][B*out_h*out_w]), which
 * layers_conv_backward reuses. */
void layers_conv_forward(const struct layer_shape *s, int B, const float *in,
                         const float *w, const float *b, float *col,
                         float *out);

/* dout: [out_c][B][out_h][out_w]; col from the forward pass. Writes dw, db
 * (overwritten, not accumulated) and, when din is not NULL, din
 * ([in_c][B][in_h][in_w]) using dcol (same size as col) as scratch. */
void layers_conv_backward(const struct layer_shape *s, int B, const float *dout,
                          const float *col, const float *w, float *dw,
                          float *db, float *dcol, float *din);

/* In-place ReLU and its backward from the ReLU's output. */
void layers_relu_forward(float *x, int64_t n);
void layers_relu_backward(const float *y, float *dy, int64_t n);

/* Max pool 2x2 stride 2 (floor) over planes of h x w: in [planes][h][w],
 * out [planes][h/2][w/2]; arg records the winning index within each plane. */
void layers_maxpool_forward(int planes, int h, int w, const float *in,
                            float *out, int32_t *arg);
/* din ([planes][h][w]) is overwritten: zero except at the winners. */
void layers_maxpool_backward(int planes, int h, int w, const float *dout,
                             const int32_t *arg, float *din);

/* in [B][n_in], w [n_out][n_in], b [n_out] -> out [B][n_out]. */
void layers_linear_forward(int B, int n_in, int n_out, const float *in,
                           const float *w, const float *b, float *out);
/* dw, db overwritten; din ([B][n_in]) written when not NULL. */
void layers_linear_backward(int B, int n_in, int n_out, const float *dout,
                            const float *in, const float *w, float *dw,
                            float *db, float *din);

/* Softmax cross-entropy over logits [B][k] with labels y. Adds the summed
 * loss to *loss_sum and the count of argmax == y to *correct. When dlogits is
 * not NULL it receives the gradient of the batch-mean loss. Labels >= k are
 * the caller's bug and are treated as never correct with zero target. */
void layers_xent(int B, int k, const float *logits, const uint8_t *y,
                 float *dlogits, double *loss_sum, int *correct);

/* [C][B][S] <-> [B][C*S]: the flatten between the conv and linear parts. */
void layers_cnhw_to_flat(int C, int B, int S, const float *in, float *out);
void layers_flat_to_cnhw(int C, int B, int S, const float *in, float *out);

#endif
