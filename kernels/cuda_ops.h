/* CUDA kernels of ctune-train's layers and optimisers, as C-callable launchers.
 * Each enqueues on the given stream, checks the launch, and returns 0 or -EIO
 * (the CUDA error is logged). Sizes are element counts; n is the batch. */
#ifndef CTUNE_CUDA_OPS_H
#define CTUNE_CUDA_OPS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* col[(c*k + i)*k + j][b*oh*ow + y*ow + x] = in(b, c, y+i, x+j) where in(b,
 * c, y, x) = in[b*sn + c*sc + y*w + x]: NCHW input has sn = c*h*w, sc = h*w;
 * channel-major [c][n][h*w] has sn = h*w, sc = n*h*w. oh = h-k+1. */
int cuops_im2col(const float *in, float *col, int n, int c, int h, int w, int k, int64_t sn,
                 int64_t sc, cudaStream_t s);
/* The adjoint of cuops_im2col: in(b, c, y, x) = the sum of every col entry
 * that im2col read from it (a gather: no atomics, deterministic). */
int cuops_col2im(const float *col, float *in, int n, int c, int h, int w, int k, int64_t sn,
                 int64_t sc, cudaStream_t s);

/* y[r][j] += bias[per_row ? r : j] for a rows x cols matrix, then ReLU if
 * relu is nonzero. */
int cuops_bias_act(float *y, const float *bias, int64_t rows, int64_t cols, int per_row, int relu,
                   cudaStream_t s);
/* dy[i] = ct_relu_grad(y[i], dy[i]). */
int cuops_relu_backward(const float *y, float *dy, int64_t count, cudaStream_t s);

/* Max pooling, window and stride p, floor, over planes of h x w; argmax[o]
 * is the winner's offset inside its plane (the first maximum in row-major
 * window order wins, as in the CPU backend). */
int cuops_maxpool_forward(const float *in, float *out, int32_t *argmax, int64_t planes, int h,
                          int w, int p, cudaStream_t s);
/* din = the pooled gradient routed to each window's winner, 0 elsewhere
 * (overwrites every element of din). */
int cuops_maxpool_backward(const float *dout, const int32_t *argmax, float *din, int64_t planes,
                           int h, int w, int p, cudaStream_t s);

/* [c][n][hw] -> [n][c][hw] (to_nchw nonzero) or back. */
int cuops_permute_cn(const float *in, float *out, int c, int n, int hw, int to_nchw,
                     cudaStream_t s);

/* Scratch of the per-output reductions below: a reduction of n_red values
 * per output runs on cuops_red_parts(n_red) blocks per output (one block per
 * CUOPS_RED_MIN values, at most CUOPS_RED_PARTS); with more than one it needs
 * `outputs` >= its outputs, ticket[outputs] (zero when allocated; every
 * reduction leaves it zero) and partial[outputs * CUOPS_RED_PARTS]. */
#define CUOPS_RED_MIN 1024
#define CUOPS_RED_PARTS 128
struct cuops_scratch {
  unsigned *ticket;
  float *partial;
  int outputs;
};
int cuops_red_parts(int64_t n_red);

/* out[o] = sum_j in[o*out_stride + j*red_stride] for o < n_out, j < n_red
 * (bias gradients): a fixed-order reduction over cuops_red_parts(n_red)
 * blocks per output, the same bits at every run; -EINVAL when red has too
 * few outputs for it. */
int cuops_sum_strided(const float *in, float *out, int n_out, int64_t n_red, int64_t out_stride,
                      int64_t red_stride, struct cuops_scratch red, cudaStream_t s);

/* Softmax cross-entropy over n rows of `classes` logits: row_loss[i],
 * row_correct[i] (argmax == label, first max wins) and, when dlogits is not
 * NULL, dlogits = (softmax - onehot) * scale. */
int cuops_xent(const float *logits, const uint8_t *labels, float *row_loss, int32_t *row_correct,
               float *dlogits, int n, int classes, float scale, cudaStream_t s);
/* out_loss[0] = sum of row_loss (in double), out_correct[0] = sum of
 * row_correct; one block, fixed order. */
int cuops_xent_sums(const float *row_loss, const int32_t *row_correct, int n, double *out_loss,
                    int32_t *out_correct, cudaStream_t s);

/* One optimiser step over count parameters with ct_sgd_update /
 * ct_adam_update from ops_math.h. */
int cuops_sgd(float *p, float *v, const float *g, int64_t count, float lr, float momentum,
              float weight_decay, cudaStream_t s);
int cuops_adam(float *p, float *m, float *v, const float *g, int64_t count, float lr, float beta1,
               float beta2, float eps, float weight_decay, float bc1, float bc2, cudaStream_t s);

/* ---- the graph-friendly step: nothing below reads a host value that
 * changes from step to step, so one captured graph replays every step. */

/* Gathers n rows of a uint8 data set on the device: row i of the batch is
 * image order[*cursor + first + i] (pix: images of dim bytes, lab: labels),
 * normalised as the trainer's data sets are ((p/255 - 0.5)/0.5) into x, its
 * label into y. */
int cuops_gather_u8(const uint8_t *pix, const uint8_t *lab, const int32_t *order,
                    const int64_t *cursor, int first, int n, int64_t dim, float *x, uint8_t *y,
                    cudaStream_t s);
/* ctr[0] += add (one thread): the gather cursor, the optimiser step. */
int cuops_tick(int64_t *ctr, int64_t add, cudaStream_t s);
/* Adam with its step counter on the device: *step += 1, then the bias
 * corrections 1 - beta^step (computed in double, as the host does) and the
 * update of cuops_adam. */
int cuops_adam_dev(float *p, float *m, float *v, const float *g, int64_t count, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int64_t *step,
                   float *bc, cudaStream_t s);
/* The running sums a host reads only now and then: acc_loss[0] += *sum_loss,
 * acc_correct[0] += *sum_correct, and nonfinite[0] = 1 once a batch's loss
 * is NaN or infinite. One thread. */
int cuops_accumulate(const double *sum_loss, const int32_t *sum_correct, double *acc_loss,
                     int64_t *acc_correct, int32_t *nonfinite, cudaStream_t s);

/* Fills count floats with value (tests poison outputs with NaN). */
int cuops_fill(float *p, int64_t count, float value, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
