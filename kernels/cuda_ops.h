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

/* The conv layers' bias, ReLU and max pooling (window and stride p, floor)
 * in one pass over conv, [c][n][h][w]: each window's elements become
 * ct_relu(conv + bias[channel]) in place (the backward pass reads them), out
 * gets each window's maximum and argmax its offset in the plane (the first
 * maximum in row-major window order wins, as in the CPU backend). out is
 * [c][n][ph*pw], or [n][c][ph*pw] when nchw is nonzero (the last conv
 * layer's output flattened for the first linear layer). Elements outside
 * every window (h or w not a multiple of p) are left as they are: only the
 * backward pass reads them, and routes them no gradient. */
int cuops_conv_pool_forward(float *conv, const float *bias, float *out, int32_t *argmax, int c,
                            int n, int h, int w, int p, int nchw, cudaStream_t s);
/* Its backward, over every element of din ([c][n][h][w]): din =
 * ct_relu_grad(y, the pooled gradient dout routed to its window's winner, 0
 * elsewhere), y being the forward's activated conv; and dbias[ch] = the sum
 * of channel ch's din, reduced as cuops_sum_strided. dout is laid out as the
 * forward's out (nchw). */
int cuops_conv_pool_backward(const float *dout, const int32_t *argmax, const float *y, float *din,
                             float *dbias, int c, int n, int h, int w, int p, int nchw,
                             struct cuops_scratch red, cudaStream_t s);
/* A linear layer's ReLU backward and bias gradient: dy[r][j] =
 * ct_relu_grad(y[r][j], dy[r][j]) in place over a rows x cols matrix, and
 * dbias[j] = the sum over r of the new dy[r][j], reduced as
 * cuops_sum_strided. */
int cuops_relu_backward_sum(const float *y, float *dy, float *dbias, int rows, int cols,
                            struct cuops_scratch red, cudaStream_t s);

/* Where cuops_xent_step puts a batch's sums. */
struct cuops_loss_out {
  double *sum_loss;     /* the batch's loss sum (double) */
  int32_t *sum_correct; /* its correct count */
  double *acc_loss;     /* += sum_loss: running sums a host reads now and then */
  int64_t *acc_correct; /* += sum_correct */
  int32_t *nonfinite;   /* set to 1 once a batch's loss is NaN or infinite */
  int64_t *cursor;      /* NULL, or += cursor_add (a fast step's gather cursor) */
  int64_t cursor_add;
};
/* Softmax cross-entropy over n rows of `classes` logits and its sums, one
 * block: each row's loss and correct flag (argmax == label, first max wins)
 * summed in a fixed order (the losses in double), dlogits = (softmax -
 * onehot) * scale when dlogits is not NULL, dbias[j] = the sum over rows of
 * dlogits[r][j] (the last layer's bias gradient) when dbias is not NULL
 * (then dlogits must not be, and classes <= CUOPS_XENT_MAX_CLASSES), then
 * the running sums and the cursor of `out`. */
#define CUOPS_XENT_MAX_CLASSES 256
int cuops_xent_step(const float *logits, const uint8_t *labels, float *dlogits, float *dbias, int n,
                    int classes, float scale, struct cuops_loss_out out, cudaStream_t s);

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
/* ctr[0] += add (one thread): the gather cursor of a device that has no
 * rows in a step (cuops_xent_step moves the others'). */
int cuops_tick(int64_t *ctr, int64_t add, cudaStream_t s);
/* Adam with its step counter on the device: *step += 1, then the bias
 * corrections 1 - beta^step (computed in double, as the host does) and the
 * update of cuops_adam. */
int cuops_adam_dev(float *p, float *m, float *v, const float *g, int64_t count, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int64_t *step,
                   float *bc, cudaStream_t s);
/* Fills count floats with value (tests poison outputs with NaN). */
int cuops_fill(float *p, int64_t count, float value, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
