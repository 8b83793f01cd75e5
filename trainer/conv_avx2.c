/* Direct AVX2/FMA convolution kernels (see conv_avx2.h). Each kernel keeps
 * a register tile of accumulators and reads its operands straight from the
 * activations. A "position" is 8 consecutive outputs of one row; a row of
 * out_w outputs is covered by vectors at x = 0, 8, ... and, when out_w is not
 * a multiple of 8, one more at out_w - 8 whose first 8 - out_w % 8 lanes
 * repeat outputs already covered: the forward pass writes them twice with
 * the same value, the backward passes zero those lanes of the gradient so
 * nothing is counted twice. Every load then stays inside its row.
 *
 * The input gradient works on one image at a time copied into contiguous
 * buffers on the stack ([C][H][W]): in the CNHW activations the planes of
 * one image lie B planes apart, a multiple of 4 KiB at the usual batch
 * sizes, so the 16 gradient channels its tile reads would all map to the
 * same L1 sets (measured: a quarter slower). */
#include "conv_avx2.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define CONV_AVX2_BUILT 1
#include "avx2_util.h"
#else
#define CONV_AVX2_BUILT 0
#endif

#define KS MODEL_CNN_K
#define MAX_POS 512
#define MAX_IN_C 16
#define MAX_ROWS (MAX_IN_C * KS * KS)
/* floats of each stack buffer (64 KiB): one image's input or gradient */
#define PACK 16384
/* Weight-gradient tiles run over at least this many positions (whole images)
 * before their sums are folded into dw, so the fold's cost stays small while
 * the chunk's activations stay near L1 (conv1: 3 images, 23 KiB a tile;
 * measured 5 % faster than one image a chunk, and no faster at 7). */
#define DW_MIN_POS 256

static int cpu_hidden;

void conv_avx2_hide_cpu(int hide) { cpu_hidden = hide; }

int conv_avx2_supports(const struct layer_shape *s) {
  if (!conv_avx2_cpu_ok()) return -ENOTSUP;
  if (s->kind != LAYER_CONV || s->out_w < 8 || s->out_w > 64 || s->in_c < 1 || s->in_c > MAX_IN_C ||
      s->out_c < 1 || s->out_h < 1)
    return -ENOTSUP;
  if ((int64_t)s->out_h * ((s->out_w + 7) / 8) > MAX_POS) return -ENOTSUP;
  if ((int64_t)s->in_c * s->in_h * s->in_w > PACK || (int64_t)s->out_c * s->out_h * s->out_w > PACK)
    return -ENOTSUP;
  return 0;
}

#if CONV_AVX2_BUILT

int conv_avx2_cpu_ok(void) {
  static int ok = -1;
  if (cpu_hidden) return 0;
  if (ok < 0) {
    __builtin_cpu_init();
    ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return ok;
}

/* One image's positions: offsets of the vector's first element in the input
 * plane ([in_h][in_w]) and in the output plane, and its lane mask. */
struct pos {
  int32_t in_off, out_off, masked;
};

struct geo {
  int B, C, M, K, H, W, OH, OW, npos;
  int64_t hw, ohw;       /* plane sizes */
  int64_t in_cs, out_cs; /* channel strides in CNHW: B * plane */
  int64_t in_img;        /* one packed input image: C * hw */
  int masked;            /* out_w % 8 != 0: some positions repeat lanes */
  float mask[2][8];      /* [pos.masked]: all ones on the lanes a position owns */
  struct pos pos[MAX_POS];
  /* row r = (c, ki, kj): offset c * in_cs + ki * W + kj in CNHW (roff) and
   * c * hw + ki * W + kj in a packed image (roff_pk) */
  int64_t roff[MAX_ROWS], roff_pk[MAX_ROWS];
};

static void geo_init(struct geo *g, const struct layer_shape *s, int B) {
  g->B = B;
  g->C = s->in_c;
  g->M = s->out_c;
  g->K = s->in_c * KS * KS;
  g->H = s->in_h;
  g->W = s->in_w;
  g->OH = s->out_h;
  g->OW = s->out_w;
  g->hw = (int64_t)g->H * g->W;
  g->ohw = (int64_t)g->OH * g->OW;
  g->in_cs = (int64_t)B * g->hw;
  g->out_cs = (int64_t)B * g->ohw;
  g->in_img = g->C * g->hw;
  int n = 0;
  for (int oy = 0; oy < g->OH; oy++) {
    for (int x = 0; x + 8 <= g->OW; x += 8)
      g->pos[n++] = (struct pos){oy * g->W + x, oy * g->OW + x, 0};
    if (g->OW % 8) g->pos[n++] = (struct pos){oy * g->W + g->OW - 8, oy * g->OW + g->OW - 8, 1};
  }
  g->npos = n;
  g->masked = g->OW % 8 != 0;
  const int rep = 8 - g->OW % 8; /* lanes a masked position repeats */
  for (int i = 0; i < 8; i++) {
    uint32_t on = 0xffffffffu;
    g->mask[0][i] = 0.0f;
    g->mask[1][i] = 0.0f;
    memcpy(&g->mask[0][i], &on, sizeof on);
    if (i >= rep) memcpy(&g->mask[1][i], &on, sizeof on);
  }
  for (int c = 0; c < g->C; c++)
    for (int ki = 0; ki < KS; ki++)
      for (int kj = 0; kj < KS; kj++) {
        g->roff[(c * KS + ki) * KS + kj] = c * g->in_cs + ki * g->W + kj;
        g->roff_pk[(c * KS + ki) * KS + kj] = c * g->hw + ki * g->W + kj;
      }
}

/* Image b of CNHW x (n channels of plane floats, channel stride cs) into
 * dst as [n][plane], and back. */
static void pack(const float *x, int n, int64_t plane, int64_t cs, int b, float *dst) {
  for (int c = 0; c < n; c++, dst += plane)
    memcpy(dst, x + c * cs + b * plane, sizeof(float) * (size_t)plane);
}

static void unpack(const float *src, int n, int64_t plane, int64_t cs, int b, float *x) {
  for (int c = 0; c < n; c++, src += plane)
    memcpy(x + c * cs + b * plane, src, sizeof(float) * (size_t)plane);
}

/* A position's gradient vector with the lanes it repeats zeroed; MASKED is
 * a compile-time 0 when no position of the layer repeats any. */
AVX2_INLINE __m256 owned(const int MASKED, const struct geo *g, const struct pos *ps, __m256 v) {
  return MASKED ? _mm256_and_ps(_mm256_loadu_ps(g->mask[ps->masked]), v) : v;
}

/* --- forward: out[m][pos] = sum_r w[m][r] * in[pos + roff[r]] ---
 * A tile is MB output channels x PT positions of one image. */
AVX2_INLINE void fwd_acc(const int MB, const int PT, const struct geo *g, const float *inb,
                         const float *w, const struct pos *ps, __m256 acc[6][3]) {
#pragma GCC unroll 6
  for (int m = 0; m < MB; m++)
#pragma GCC unroll 3
    for (int p = 0; p < PT; p++) acc[m][p] = _mm256_setzero_ps();
  const float *ip[3];
#pragma GCC unroll 3
  for (int p = 0; p < PT; p++) ip[p] = inb + ps[p].in_off;
  const int K = g->K;
  for (int r = 0; r < K; r++) {
    const int64_t o = g->roff[r];
    __m256 x[3];
#pragma GCC unroll 3
    for (int p = 0; p < PT; p++) x[p] = _mm256_loadu_ps(ip[p] + o);
#pragma GCC unroll 6
    for (int m = 0; m < MB; m++) {
      const __m256 wv = _mm256_broadcast_ss(w + (int64_t)m * K + r);
#pragma GCC unroll 3
      for (int p = 0; p < PT; p++) acc[m][p] = _mm256_fmadd_ps(wv, x[p], acc[m][p]);
    }
  }
}

AVX2_INLINE void fwd_tile(const int MB, const int PT, const struct geo *g, const float *inb,
                          const float *w, const struct pos *ps, float *outb) {
  __m256 acc[6][3];
  fwd_acc(MB, PT, g, inb, w, ps, acc);
#pragma GCC unroll 6
  for (int m = 0; m < MB; m++)
#pragma GCC unroll 3
    for (int p = 0; p < PT; p++) _mm256_storeu_ps(outb + m * g->out_cs + ps[p].out_off, acc[m][p]);
}
/* (inb is one packed image; outb points into the CNHW output) */

#define FWD_FN(MB, PT)                                                                             \
  static AVX2 void fwd_##MB##_##PT(const struct geo *g, const float *inb, const float *w,          \
                                   const struct pos *ps, float *outb) {                            \
    fwd_tile(MB, PT, g, inb, w, ps, outb);                                                         \
  }
#define FWD_FNS(MB) FWD_FN(MB, 1) FWD_FN(MB, 2) FWD_FN(MB, 3)
FWD_FNS(1)
FWD_FNS(2)
FWD_FNS(3)
FWD_FNS(4)
FWD_FNS(6)

typedef void (*fwd_fn)(const struct geo *, const float *, const float *, const struct pos *,
                       float *);
static const fwd_fn fwd_table[7][4] = {
    [1] = {NULL, fwd_1_1, fwd_1_2, fwd_1_3}, [2] = {NULL, fwd_2_1, fwd_2_2, fwd_2_3},
    [3] = {NULL, fwd_3_1, fwd_3_2, fwd_3_3}, [4] = {NULL, fwd_4_1, fwd_4_2, fwd_4_3},
    [6] = {NULL, fwd_6_1, fwd_6_2, fwd_6_3},
};

static AVX2 void forward(const struct geo *g, const float *in, const float *w, float *out) {
  /* 6 channels x 2 positions (the cnn's conv1) or 4 x 3 (conv2): 12
   * accumulators, with registers left for the operands */
  const int MB = g->M % 6 == 0 ? 6 : 4, PT = MB == 6 ? 2 : 3;
  for (int b = 0; b < g->B; b++) {
    const float *inb = in + b * g->hw;
    for (int m0 = 0; m0 < g->M; m0 += MB) {
      const int mb = g->M - m0 < MB ? g->M - m0 : MB;
      float *outb = out + m0 * g->out_cs + b * g->ohw;
      for (int p0 = 0; p0 < g->npos; p0 += PT) {
        const int pt = g->npos - p0 < PT ? g->npos - p0 : PT;
        fwd_table[mb][pt](g, inb, w + (int64_t)m0 * g->K, g->pos + p0, outb);
      }
    }
  }
}

/* --- forward fused with the 2x2 max pool, bias and ReLU: a tile is MB
 * channels x the two rows (oy, oy + 1) of one 8-wide column, the same sums
 * in the same order as the forward tile; its epilogue takes each window's
 * maximum and winner (the four candidates in layers_maxpool_forward's
 * order, strict >, the first maximum wins) and writes relu(max + bias) and
 * the winner's index in the plane, as layers_pool_bias_relu_forward does,
 * so nothing of the conv output is stored. Rows of whole vectors (out_w a
 * multiple of 8) and an even number of rows only. */
/* The fused tile's sums, with the weights transposed for it: wt holds
 * w[m][r] at r * MB + m, so the MB weights of a step are one pointer's
 * constant offsets; the rows r = (c, ki, kj) run in the same order as
 * fwd_acc's (the same sums, bit for bit), kj unrolled, so no row offset is
 * loaded: the two output rows read input rows ki and ki + 1 of each
 * channel plane. */
AVX2_INLINE void fwdpool_acc(const int MB, const struct geo *g, const float *inb, const float *wt,
                             int i0, __m256 acc[6][2]) {
#pragma GCC unroll 6
  for (int m = 0; m < MB; m++) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
  const int W = g->W;
  for (int c = 0; c < g->C; c++) {
    const float *rp = inb + c * g->in_cs + i0;
#pragma GCC unroll 5
    for (int ki = 0; ki < KS; ki++, rp += W, wt += KS * MB) {
#pragma GCC unroll 5
      for (int kj = 0; kj < KS; kj++) {
        const __m256 x0 = _mm256_loadu_ps(rp + kj), x1 = _mm256_loadu_ps(rp + W + kj);
#pragma GCC unroll 6
        for (int m = 0; m < MB; m++) {
          const __m256 wv = _mm256_broadcast_ss(wt + kj * MB + m);
          acc[m][0] = _mm256_fmadd_ps(wv, x0, acc[m][0]);
          acc[m][1] = _mm256_fmadd_ps(wv, x1, acc[m][1]);
        }
      }
    }
  }
}

/* The epilogue for two channels at once: the rows' even and odd columns of
 * channel a in lanes 0-1 and 4-5, of channel b in 2-3 and 6-7 (what
 * shufps gives), the candidates compared in that layout and the lanes put
 * back in order for the stores. */
AVX2_INLINE void pool_pair(__m256 a0, __m256 a1, __m256 b0, __m256 b1, __m256i base, int ow,
                           __m256 bias, float *out_a, float *out_b, int32_t *arg_a,
                           int32_t *arg_b) {
  const __m256 cand[3] = {_mm256_shuffle_ps(a0, b0, 0xdd), _mm256_shuffle_ps(a1, b1, 0x88),
                          _mm256_shuffle_ps(a1, b1, 0xdd)};
  const __m256i idx[3] = {_mm256_add_epi32(base, _mm256_set1_epi32(1)),
                          _mm256_add_epi32(base, _mm256_set1_epi32(ow)),
                          _mm256_add_epi32(base, _mm256_set1_epi32(ow + 1))};
  __m256 bv = _mm256_shuffle_ps(a0, b0, 0x88);
  __m256 bi = _mm256_castsi256_ps(base);
#pragma GCC unroll 3
  for (int i = 0; i < 3; i++) {
    const __m256 gt = _mm256_cmp_ps(cand[i], bv, _CMP_GT_OQ);
    bv = _mm256_blendv_ps(bv, cand[i], gt);
    bi = _mm256_blendv_ps(bi, _mm256_castsi256_ps(idx[i]), gt);
  }
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  const __m256 v =
      _mm256_permutevar8x32_ps(_mm256_max_ps(_mm256_add_ps(bv, bias), _mm256_setzero_ps()), order);
  const __m256i w = _mm256_permutevar8x32_epi32(_mm256_castps_si256(bi), order);
  _mm_storeu_ps(out_a, _mm256_castps256_ps128(v));
  _mm_storeu_ps(out_b, _mm256_extractf128_ps(v, 1));
  _mm_storeu_si128((__m128i *)arg_a, _mm256_castsi256_si128(w));
  _mm_storeu_si128((__m128i *)arg_b, _mm256_extracti128_si256(w, 1));
}

/* The epilogue for one channel (the last of an odd tile). */
AVX2_INLINE void pool_one(__m256 r0, __m256 r1, __m128i base, int ow, float bias, float *out,
                          int32_t *arg) {
  const __m256i deint = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  /* evens of each row in the low half, odds in the high half */
  r0 = _mm256_permutevar8x32_ps(r0, deint);
  r1 = _mm256_permutevar8x32_ps(r1, deint);
  const __m128 cand[3] = {_mm256_extractf128_ps(r0, 1), _mm256_castps256_ps128(r1),
                          _mm256_extractf128_ps(r1, 1)};
  const __m128i idx[3] = {_mm_add_epi32(base, _mm_set1_epi32(1)),
                          _mm_add_epi32(base, _mm_set1_epi32(ow)),
                          _mm_add_epi32(base, _mm_set1_epi32(ow + 1))};
  __m128 bv = _mm256_castps256_ps128(r0);
  __m128 bi = _mm_castsi128_ps(base);
#pragma GCC unroll 3
  for (int i = 0; i < 3; i++) {
    const __m128 gt = _mm_cmpgt_ps(cand[i], bv);
    bv = _mm_blendv_ps(bv, cand[i], gt);
    bi = _mm_blendv_ps(bi, _mm_castsi128_ps(idx[i]), gt);
  }
  _mm_storeu_ps(out, _mm_max_ps(_mm_add_ps(bv, _mm_set1_ps(bias)), _mm_setzero_ps()));
  _mm_storeu_si128((__m128i *)arg, _mm_castps_si128(bi));
}

/* --- forward fused with the 2x2 max pool, bias and ReLU: a tile is MB
 * channels x the two rows (oy, oy + 1) of one 8-wide column, the same sums
 * in the same order as the forward tile; its epilogue takes each window's
 * maximum and winner (the four candidates in layers_maxpool_forward's
 * order, strict >, the first maximum wins) and writes relu(max + bias) and
 * the winner's index in the plane, as layers_pool_bias_relu_forward does,
 * so nothing of the conv output is stored. Rows of whole vectors (out_w a
 * multiple of 8) and an even number of rows only. cs: the pooled output's
 * channel stride. */
AVX2_INLINE void fwdpool_tile(const int MB, const struct geo *g, const float *inb, const float *wt,
                              const float *bias, int oy, int x, int64_t cs, float *outp,
                              int32_t *argp) {
  const int ow = g->OW;
  __m256 acc[6][2];
  fwdpool_acc(MB, g, inb, wt, oy * g->W + x, acc);
  const int i0 = oy * ow + x;
  const __m256i base2 =
      _mm256_add_epi32(_mm256_set1_epi32(i0), _mm256_setr_epi32(0, 2, 0, 2, 4, 6, 4, 6));
#pragma GCC unroll 3
  for (int m = 0; m + 1 < MB; m += 2) {
    const __m256 bias2 = _mm256_setr_ps(bias[m], bias[m], bias[m + 1], bias[m + 1], bias[m],
                                        bias[m], bias[m + 1], bias[m + 1]);
    pool_pair(acc[m][0], acc[m][1], acc[m + 1][0], acc[m + 1][1], base2, ow, bias2, outp + m * cs,
              outp + (m + 1) * cs, argp + m * cs, argp + (m + 1) * cs);
  }
  if (MB % 2)
    pool_one(acc[MB - 1][0], acc[MB - 1][1],
             _mm_add_epi32(_mm_set1_epi32(i0), _mm_setr_epi32(0, 2, 4, 6)), ow, bias[MB - 1],
             outp + (MB - 1) * cs, argp + (MB - 1) * cs);
}

#define FWDPOOL_FN(MB)                                                                             \
  static AVX2 void fwdpool_##MB(const struct geo *g, const float *inb, const float *wt,            \
                                const float *bias, int oy, int x, int64_t cs, float *outp,         \
                                int32_t *argp) {                                                   \
    fwdpool_tile(MB, g, inb, wt, bias, oy, x, cs, outp, argp);                                     \
  }
FWDPOOL_FN(1)
FWDPOOL_FN(2)
FWDPOOL_FN(3)
FWDPOOL_FN(4)
FWDPOOL_FN(5)
FWDPOOL_FN(6)

typedef void (*fwdpool_fn)(const struct geo *, const float *, const float *, const float *, int,
                           int, int64_t, float *, int32_t *);
static const fwdpool_fn fwdpool_table[7] = {NULL,      fwdpool_1, fwdpool_2, fwdpool_3,
                                            fwdpool_4, fwdpool_5, fwdpool_6};

static AVX2 void forward_pool(const struct geo *g, const float *in, const float *w,
                              const float *bias, float *out, int32_t *arg) {
  _Alignas(32) float wt[MAX_ROWS * 6];
  const int pw = g->OW / 2;
  const int64_t po = g->ohw / 4; /* one pooled plane */
  for (int m0 = 0; m0 < g->M; m0 += 6) {
    const int mb = g->M - m0 < 6 ? g->M - m0 : 6;
    for (int r = 0; r < g->K; r++)
      for (int m = 0; m < mb; m++) wt[r * mb + m] = w[(int64_t)(m0 + m) * g->K + r];
    for (int b = 0; b < g->B; b++) {
      const float *inb = in + b * g->hw;
      const int64_t plane = ((int64_t)m0 * g->B + b) * po;
      for (int oy = 0; oy < g->OH; oy += 2)
        for (int x = 0; x < g->OW; x += 8) {
          const int64_t o = plane + (oy / 2) * pw + x / 2;
          fwdpool_table[mb](g, inb, wt, bias + m0, oy, x, g->B * po, out + o, arg + o);
        }
    }
  }
}

/* --- weight gradient: dw[m][r] = sum_pos dout[m][pos] * in[pos + roff[r]] ---
 * A tile is MB channels x the 5 rows (c, ki, kj = 0..4), over the nb packed
 * images of a chunk; its sums are added to dw. */
AVX2_INLINE void dw_tile(const int MB, const int MASKED, const struct geo *g, int nb,
                         const float *in, const float *dout, int r0, float *dw) {
  __m256 acc[2][KS];
#pragma GCC unroll 2
  for (int m = 0; m < MB; m++)
#pragma GCC unroll 5
    for (int j = 0; j < KS; j++) acc[m][j] = _mm256_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const float *ib = in + b * g->hw + g->roff[r0];
    const float *db = dout + b * g->ohw;
    for (int p = 0; p < g->npos; p++) {
      const struct pos *ps = &g->pos[p];
      __m256 d[2];
#pragma GCC unroll 2
      for (int m = 0; m < MB; m++)
        d[m] = owned(MASKED, g, ps, _mm256_loadu_ps(db + m * g->out_cs + ps->out_off));
#pragma GCC unroll 5
      for (int j = 0; j < KS; j++) {
        const __m256 x = _mm256_loadu_ps(ib + ps->in_off + j);
#pragma GCC unroll 2
        for (int m = 0; m < MB; m++) acc[m][j] = _mm256_fmadd_ps(d[m], x, acc[m][j]);
      }
    }
  }
#pragma GCC unroll 2
  for (int m = 0; m < MB; m++)
#pragma GCC unroll 5
    for (int j = 0; j < KS; j++) dw[(int64_t)m * g->K + r0 + j] += avx2_hsum8(acc[m][j]);
}

#define DW_FN(MB, MASKED)                                                                          \
  static AVX2 void dw_##MB##_##MASKED(const struct geo *g, int nb, const float *in,                \
                                      const float *dout, int r0, float *dw) {                      \
    dw_tile(MB, MASKED, g, nb, in, dout, r0, dw);                                                  \
  }
DW_FN(1, 0)
DW_FN(1, 1)
DW_FN(2, 0)
DW_FN(2, 1)

typedef void (*dw_fn)(const struct geo *, int, const float *, const float *, int, float *);
static const dw_fn dw_table[3][2] = {{NULL, NULL}, {dw_1_0, dw_1_1}, {dw_2_0, dw_2_1}};

static AVX2 void backward_w(const struct geo *g, const float *in, const float *dout, float *dw) {
  memset(dw, 0, sizeof(float) * (size_t)g->M * g->K);
  int nb = DW_MIN_POS / g->npos;
  if (nb < 1) nb = 1;
  for (int b0 = 0; b0 < g->B; b0 += nb) {
    const int n = g->B - b0 < nb ? g->B - b0 : nb;
    for (int m0 = 0; m0 < g->M; m0 += 2)
      for (int r0 = 0; r0 < g->K; r0 += KS)
        dw_table[g->M - m0 >= 2 ? 2 : 1][g->masked](g, n, in + b0 * g->hw,
                                                    dout + m0 * g->out_cs + b0 * g->ohw, r0,
                                                    dw + (int64_t)m0 * g->K);
  }
}

/* --- weight gradient with the output channels in the vector (M = 8 or 16):
 * dwt[r][m] = sum_pos in[pos + roff[r]] * doutT[pos][m], where doutT is a
 * chunk of images' gradient transposed to [image][y][x][m]. Every position
 * is one scalar input broadcast against MV aligned gradient vectors: no
 * load splits a cache line, no lane is masked and no horizontal sum is
 * needed, where the tile above loads 5 unaligned input vectors per 10
 * FMAs. A tile is RT rows x MV vectors (12 accumulators). */
#define DWT_MAX_M 16

AVX2_INLINE void dwt_tile(const int MV, const int RT, const struct geo *g, int nb, const float *in,
                          const float *dt, int r0, float *dwt) {
  __m256 acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < RT; i++)
#pragma GCC unroll 2
    for (int v = 0; v < MV; v++) acc[i][v] = _mm256_setzero_ps();
  const float *ip[12];
#pragma GCC unroll 12
  for (int i = 0; i < RT; i++) ip[i] = in + g->roff[r0 + i];
  for (int b = 0; b < nb; b++) {
    for (int oy = 0; oy < g->OH; oy++) {
      const int64_t row = b * g->hw + oy * g->W;
      for (int ox = 0; ox < g->OW; ox++, dt += MV * 8) {
        __m256 d[2];
#pragma GCC unroll 2
        for (int v = 0; v < MV; v++) d[v] = _mm256_load_ps(dt + v * 8);
#pragma GCC unroll 12
        for (int i = 0; i < RT; i++) {
          const __m256 x = _mm256_broadcast_ss(ip[i] + row + ox);
#pragma GCC unroll 2
          for (int v = 0; v < MV; v++) acc[i][v] = _mm256_fmadd_ps(x, d[v], acc[i][v]);
        }
      }
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < RT; i++)
#pragma GCC unroll 2
    for (int v = 0; v < MV; v++) {
      float *dst = dwt + (int64_t)(r0 + i) * MV * 8 + v * 8;
      _mm256_store_ps(dst, _mm256_add_ps(_mm256_load_ps(dst), acc[i][v]));
    }
}

#define DWT_FN(MV, RT)                                                                             \
  static AVX2 void dwt_##MV##_##RT(const struct geo *g, int nb, const float *in, const float *dt,  \
                                   int r0, float *dwt) {                                           \
    dwt_tile(MV, RT, g, nb, in, dt, r0, dwt);                                                      \
  }
DWT_FN(1, 1)
DWT_FN(1, 2)
DWT_FN(1, 3)
DWT_FN(1, 4)
DWT_FN(1, 5)
DWT_FN(1, 6)
DWT_FN(1, 7)
DWT_FN(1, 8)
DWT_FN(1, 9)
DWT_FN(1, 10)
DWT_FN(1, 11)
DWT_FN(1, 12)
DWT_FN(2, 1)
DWT_FN(2, 2)
DWT_FN(2, 3)
DWT_FN(2, 4)
DWT_FN(2, 5)
DWT_FN(2, 6)

typedef void (*dwt_fn)(const struct geo *, int, const float *, const float *, int, float *);
static const dwt_fn dwt_table[3][13] = {
    [1] = {NULL, dwt_1_1, dwt_1_2, dwt_1_3, dwt_1_4, dwt_1_5, dwt_1_6, dwt_1_7, dwt_1_8, dwt_1_9,
           dwt_1_10, dwt_1_11, dwt_1_12},
    [2] = {NULL, dwt_2_1, dwt_2_2, dwt_2_3, dwt_2_4, dwt_2_5, dwt_2_6},
};

/* 1 when backward_w_t takes the layer: whole vectors of output channels */
static int dwt_fits(const struct geo *g) { return g->M % 8 == 0 && g->M <= DWT_MAX_M; }

/* dst[q][i] = src[i][q] for 8 rows i of src (row stride ss) and q < n;
 * dst's rows are ds floats apart, 32-byte aligned. 8 x 8 blocks in
 * registers, then the n % 8 last columns one by one. */
static AVX2 void transpose_8(const float *src, int64_t ss, int64_t n, float *dst, int ds) {
  int64_t q = 0;
  for (; q + 8 <= n; q += 8) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ss + q);
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* r[0..3]: columns 0, 1, 2, 3 (low half) and 4, 5, 6, 7 (high half)
     * of rows 0-3; r[4..7]: the same of rows 4-7 */
    for (int i = 0; i < 4; i++) {
      _mm256_store_ps(dst + (q + i) * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
      _mm256_store_ps(dst + (q + i + 4) * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
  }
  for (; q < n; q++)
    for (int i = 0; i < 8; i++) dst[q * ds + i] = src[i * ss + q];
}

static AVX2 void backward_w_t(const struct geo *g, const float *in, const float *dout, float *dw) {
  _Alignas(32) float dt[PACK];
  _Alignas(32) float dwt[MAX_ROWS * DWT_MAX_M];
  const int M = g->M, MV = M / 8, RT = 12 / MV;
  memset(dwt, 0, sizeof(float) * (size_t)g->K * M);
  /* images per chunk: the transposed gradient fills at most dt */
  int nb = (int)(PACK / (g->ohw * M));
  for (int b0 = 0; b0 < g->B; b0 += nb) {
    const int n = g->B - b0 < nb ? g->B - b0 : nb;
    for (int b = 0; b < n; b++)
      for (int m = 0; m < M; m += 8)
        transpose_8(dout + m * g->out_cs + (int64_t)(b0 + b) * g->ohw, g->out_cs, g->ohw,
                    dt + (int64_t)b * g->ohw * M + m, M);
    for (int r0 = 0; r0 < g->K; r0 += RT) {
      const int rt = g->K - r0 < RT ? g->K - r0 : RT;
      dwt_table[MV][rt](g, n, in + b0 * g->hw, dt, r0, dwt);
    }
  }
  for (int m = 0; m < M; m++)
    for (int r = 0; r < g->K; r++) dw[(int64_t)m * g->K + r] = dwt[(int64_t)r * M + m];
}

/* --- the weight gradient straight from the pooled gradient, for a layer
 * whose input gradient is not needed (the first): after the 2x2 max pool
 * the conv output's gradient is zero except at each window's winner, so
 *   dw[m][c][ki][kj] = sum over windows of g * in[c][winner + (ki, kj)],
 *   g = relu'(y) * dy (y, dy: the pooled output and its gradient),
 * the dense sum's nonzero terms, a quarter of them, in another order; db[m]
 * is the sum of g. A window adds its 5 input rows, each loaded as 8 floats
 * whose last 3 lanes are ignored, into 5 accumulators, two sets taken in
 * turn so the multiply-adds of consecutive windows overlap. Rows that would
 * read past the end of the input are loaded masked. */
AVX2_INLINE void dwp_window(const int MASKED, const float *src, int W, __m256 gv, __m256i m5,
                            __m256 acc[KS]) {
#pragma GCC unroll 5
  for (int ki = 0; ki < KS; ki++)
    acc[ki] = _mm256_fmadd_ps(
        gv, MASKED ? _mm256_maskload_ps(src + ki * W, m5) : _mm256_loadu_ps(src + ki * W), acc[ki]);
}

/* The two accumulator sets of a window loop from and back to sums[2 * KS]. */
AVX2_INLINE void dwp_sums_get(const __m256 *sums, __m256 acc[2][KS]) {
#pragma GCC unroll 5
  for (int ki = 0; ki < KS; ki++) {
    acc[0][ki] = sums[ki];
    acc[1][ki] = sums[KS + ki];
  }
}

AVX2_INLINE void dwp_sums_put(__m256 acc[2][KS], __m256 *sums) {
#pragma GCC unroll 5
  for (int ki = 0; ki < KS; ki++) {
    sums[ki] = acc[0][ki];
    sums[KS + ki] = acc[1][ki];
  }
}

/* One pooled plane's windows into sums[2][KS] (and, when DB, g's sum into
 * *dbv); MASKED: every load masked, for the plane at the end of the input. */
AVX2_INLINE void dwp_plane(const int MASKED, const int DB, const float *ib, int W,
                           const int32_t *off, const float *yp, const float *dp, const int32_t *ap,
                           int64_t po, __m256 *sums, __m256 *dbv) {
  const __m256i m5 = _mm256_setr_epi32(-1, -1, -1, -1, -1, 0, 0, 0);
  const __m256 zero = _mm256_setzero_ps();
  __m256 acc[2][KS];
  dwp_sums_get(sums, acc);
  int64_t i = 0;
  for (; i + 8 <= po; i += 8) {
    const __m256 gv = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(yp + i), zero, _CMP_GT_OQ),
                                    _mm256_loadu_ps(dp + i));
    if (DB) *dbv = _mm256_add_ps(*dbv, gv);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      dwp_window(MASKED, ib + off[ap[i + j]], W, _mm256_permutevar8x32_ps(gv, _mm256_set1_epi32(j)),
                 m5, acc[j & 1]);
  }
  for (; i < po; i++) {
    /* the sum of g in lane 0 of *dbv */
    const __m256 gv = _mm256_and_ps(_mm256_cmp_ps(_mm256_set1_ps(yp[i]), zero, _CMP_GT_OQ),
                                    _mm256_set1_ps(dp[i]));
    if (DB) *dbv = _mm256_add_ps(*dbv, _mm256_blend_ps(zero, gv, 1));
    dwp_window(MASKED, ib + off[ap[i]], W, gv, m5, acc[0]);
  }
  dwp_sums_put(acc, sums);
}

#define DWP_FN(MASKED, DB)                                                                         \
  static AVX2 void dwp_##MASKED##_##DB(const float *ib, int W, const int32_t *off,                 \
                                       const float *yp, const float *dp, const int32_t *ap,        \
                                       int64_t po, __m256 *sums, __m256 *dbv) {                    \
    dwp_plane(MASKED, DB, ib, W, off, yp, dp, ap, po, sums, dbv);                                  \
  }
DWP_FN(0, 0)
DWP_FN(0, 1)
DWP_FN(1, 0)
DWP_FN(1, 1)

typedef void (*dwp_fn)(const float *, int, const int32_t *, const float *, const float *,
                       const int32_t *, int64_t, __m256 *, __m256 *);
static const dwp_fn dwp_table[2][2] = {{dwp_0_0, dwp_0_1}, {dwp_1_0, dwp_1_1}};

static AVX2 void backward_w_pooled(const struct geo *g, const float *in, const float *y,
                                   const float *dy, const int32_t *arg, int ph, int pw, float *dw,
                                   float *db) {
  int32_t off[PACK]; /* conv output index -> offset of its window in the input plane */
  for (int oy = 0; oy < g->OH; oy++)
    for (int ox = 0; ox < g->OW; ox++) off[oy * g->OW + ox] = oy * g->W + ox;
  const int64_t po = (int64_t)ph * pw;
  const float *end = in + g->C * g->in_cs;
  for (int m = 0; m < g->M; m++) {
    __m256 dbv = _mm256_setzero_ps();
    for (int c = 0; c < g->C; c++) {
      __m256 sums[2 * KS];
      for (int k = 0; k < 2 * KS; k++) sums[k] = _mm256_setzero_ps();
      for (int b = 0; b < g->B; b++) {
        const float *ib = in + c * g->in_cs + b * g->hw;
        const int64_t p = ((int64_t)m * g->B + b) * po;
        /* the plane's last window reads at most to its last row + 8 */
        const int masked = ib + g->hw + 8 > end;
        dwp_table[masked][c == 0](ib, g->W, off, y + p, dy + p, arg + p, po, sums, &dbv);
      }
      for (int ki = 0; ki < KS; ki++) {
        float lanes[8];
        _mm256_storeu_ps(lanes, _mm256_add_ps(sums[ki], sums[KS + ki]));
        memcpy(dw + (int64_t)m * g->K + (c * KS + ki) * KS, lanes, sizeof(float) * KS);
      }
    }
    db[m] = avx2_hsum8(dbv);
  }
}

/* --- the same sums over a list of the windows whose g is nonzero: after
 * the ReLU about half of the pooled outputs are zero, and their windows add
 * nothing. For each output channel m the windows of a chunk of images are
 * listed once (g and the window's offset in the image, branch-free), then
 * every input channel runs through the list: per window one broadcast and
 * the 5 row loads and multiply-adds of dwp_window, no lane permute. */
#define DWS_LIST 4096 /* list entries: a pooled plane is at most PACK / 4 */
/* The list pays for itself from this many input channels: measured (one
 * thread, batch 16, best of 40), at 1 channel 58 % slower than
 * backward_w_pooled, at 2 27 % slower, at 3 5 % faster, at 6 (the cnn's
 * conv2) 32 % faster than backward_w_pooled and 28 % than the dense
 * backward_w_t */
#define DWS_MIN_C 3

AVX2_INLINE void dws_run(const int MASKED, const float *inc, int W, const float *gl,
                         const int32_t *ol, int n, __m256 *sums) {
  const __m256i m5 = _mm256_setr_epi32(-1, -1, -1, -1, -1, 0, 0, 0);
  __m256 acc[2][KS];
  dwp_sums_get(sums, acc);
  int i = 0;
  for (; i + 2 <= n; i += 2) {
    dwp_window(MASKED, inc + ol[i], W, _mm256_broadcast_ss(gl + i), m5, acc[0]);
    dwp_window(MASKED, inc + ol[i + 1], W, _mm256_broadcast_ss(gl + i + 1), m5, acc[1]);
  }
  if (i < n) dwp_window(MASKED, inc + ol[i], W, _mm256_broadcast_ss(gl + i), m5, acc[0]);
  dwp_sums_put(acc, sums);
}

#define DWS_FN(MASKED)                                                                             \
  static AVX2 void dws_##MASKED(const float *inc, int W, const float *gl, const int32_t *ol,       \
                                int n, __m256 *sums) {                                             \
    dws_run(MASKED, inc, W, gl, ol, n, sums);                                                      \
  }
DWS_FN(0)
DWS_FN(1)

/* Images b0..b0+nb of channel m: their windows' nonzero g into gl and the
 * windows' offsets (b * hw + the window's in its plane) into ol; the sum of
 * every g added to *dbv. Returns the count; *last: the first entry of image
 * B - 1, or the count when the chunk does not hold it. */
static AVX2 int dws_list(const struct geo *g, int m, int b0, int nb, const int32_t *off,
                         const float *y, const float *dy, const int32_t *arg, int64_t po, float *gl,
                         int32_t *ol, __m256 *dbv, int *last) {
  const __m256 zero = _mm256_setzero_ps();
  int n = 0;
  *last = -1;
  for (int b = b0; b < b0 + nb; b++) {
    if (b == g->B - 1) *last = n;
    const int64_t p = ((int64_t)m * g->B + b) * po;
    const float *yp = y + p, *dp = dy + p;
    const int32_t *ap = arg + p;
    const int32_t base = (int32_t)(b - b0) * (int32_t)g->hw;
    int64_t i = 0;
    for (; i + 8 <= po; i += 8) {
      const __m256 gv = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(yp + i), zero, _CMP_GT_OQ),
                                      _mm256_loadu_ps(dp + i));
      *dbv = _mm256_add_ps(*dbv, gv);
      float lanes[8];
      _mm256_storeu_ps(lanes, gv);
      for (int j = 0; j < 8; j++) {
        gl[n] = lanes[j];
        ol[n] = base + off[ap[i + j]];
        n += lanes[j] != 0.0f;
      }
    }
    for (; i < po; i++) {
      const float gs = yp[i] > 0.0f ? dp[i] : 0.0f;
      *dbv = _mm256_add_ps(*dbv, _mm256_setr_ps(gs, 0, 0, 0, 0, 0, 0, 0));
      gl[n] = gs;
      ol[n] = base + off[ap[i]];
      n += gs != 0.0f;
    }
  }
  if (*last < 0) *last = n;
  return n;
}

static AVX2 void backward_w_sparse(const struct geo *g, const float *in, const float *y,
                                   const float *dy, const int32_t *arg, int ph, int pw, float *dw,
                                   float *db) {
  int32_t off[PACK]; /* conv output index -> offset of its window in the input plane */
  float gl[DWS_LIST + 1];
  int32_t ol[DWS_LIST + 1];
  for (int oy = 0; oy < g->OH; oy++)
    for (int ox = 0; ox < g->OW; ox++) off[oy * g->OW + ox] = oy * g->W + ox;
  const int64_t po = (int64_t)ph * pw;
  const int nb = (int)(DWS_LIST / po);
  for (int m = 0; m < g->M; m++) {
    __m256 sums[MAX_IN_C][2 * KS];
    for (int c = 0; c < g->C; c++)
      for (int k = 0; k < 2 * KS; k++) sums[c][k] = _mm256_setzero_ps();
    __m256 dbv = _mm256_setzero_ps();
    for (int b0 = 0; b0 < g->B; b0 += nb) {
      const int n_img = g->B - b0 < nb ? g->B - b0 : nb;
      int last;
      const int n = dws_list(g, m, b0, n_img, off, y, dy, arg, po, gl, ol, &dbv, &last);
      for (int c = 0; c < g->C; c++) {
        const float *inc = in + c * g->in_cs + (int64_t)b0 * g->hw;
        /* the last image's last channel: its last windows' rows read past
         * the end of the input, so they are loaded masked */
        const int cut = c == g->C - 1 ? last : n;
        dws_0(inc, g->W, gl, ol, cut, sums[c]);
        if (cut < n) dws_1(inc, g->W, gl + cut, ol + cut, n - cut, sums[c]);
      }
    }
    for (int c = 0; c < g->C; c++)
      for (int ki = 0; ki < KS; ki++) {
        float lanes[8];
        _mm256_storeu_ps(lanes, _mm256_add_ps(sums[c][ki], sums[c][KS + ki]));
        memcpy(dw + (int64_t)m * g->K + (c * KS + ki) * KS, lanes, sizeof(float) * KS);
      }
    db[m] = avx2_hsum8(dbv);
  }
}

/* --- input gradient: din[pos + roff[r]] += sum_m w[m][r] * dout[m][pos] ---
 * A tile is the 5 rows (c, ki = 0..4, kj) x PT positions of one image: the
 * rows of one tile write different input rows, so its read-modify-writes
 * never partly overlap each other (a partial overlap stalls store
 * forwarding). */
AVX2_INLINE void dx_tile(const int PT, const int MASKED, const struct geo *g, const float *doutb,
                         const float *w, const struct pos *ps, int c, int kj, float *dinb) {
  __m256 acc[KS][2];
#pragma GCC unroll 5
  for (int j = 0; j < KS; j++)
#pragma GCC unroll 2
    for (int p = 0; p < PT; p++) acc[j][p] = _mm256_setzero_ps();
  const int rbase = c * KS * KS + kj;
  const float *dp[2];
#pragma GCC unroll 2
  for (int p = 0; p < PT; p++) dp[p] = doutb + ps[p].out_off;
  const float *wm = w + rbase;
  for (int m = 0; m < g->M; m++, wm += g->K) {
    __m256 d[2];
#pragma GCC unroll 2
    for (int p = 0; p < PT; p++)
      d[p] = owned(MASKED, g, &ps[p], _mm256_loadu_ps(dp[p] + m * g->ohw));
#pragma GCC unroll 5
    for (int j = 0; j < KS; j++) {
      const __m256 wv = _mm256_broadcast_ss(wm + j * KS);
#pragma GCC unroll 2
      for (int p = 0; p < PT; p++) acc[j][p] = _mm256_fmadd_ps(wv, d[p], acc[j][p]);
    }
  }
  const int64_t o = g->roff_pk[rbase];
#pragma GCC unroll 2
  for (int p = 0; p < PT; p++)
#pragma GCC unroll 5
    for (int j = 0; j < KS; j++) {
      float *dst = dinb + ps[p].in_off + o + j * g->W;
      _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), acc[j][p]));
    }
}

#define DX_FN(PT, MASKED)                                                                          \
  static AVX2 void dx_##PT##_##MASKED(const struct geo *g, const float *doutb, const float *w,     \
                                      const struct pos *ps, int c, int kj, float *dinb) {          \
    dx_tile(PT, MASKED, g, doutb, w, ps, c, kj, dinb);                                             \
  }
DX_FN(1, 0)
DX_FN(1, 1)
DX_FN(2, 0)
DX_FN(2, 1)

typedef void (*dx_fn)(const struct geo *, const float *, const float *, const struct pos *, int,
                      int, float *);
static const dx_fn dx_table[3][2] = {{NULL, NULL}, {dx_1_0, dx_1_1}, {dx_2_0, dx_2_1}};

/* --- input gradient by rows, for layers of at most DXR_MAX_OH output rows:
 * a tile is one input channel c, one column offset kj and one 8-wide column
 * x of the gradient, with all OH + 4 input rows y as accumulators:
 *   din[c][y][x + kj] += sum_m sum_ki w[m][c][ki][kj] * dout[m][y - ki][x]
 * Each weight is broadcast once for OH multiply-adds, each taking its
 * gradient row straight from memory, and a tile's sums are added to din once
 * after M * 5 * OH of them (the tile above: 5 broadcasts and 2 loads per 10,
 * and 10 read-modify-writes per 160). The image's gradient is packed with
 * rows padded to whole vectors (ows floats, zero beyond out_w), its input
 * gradient with rows of ows + 4 (ws) floats, so no lane is masked: the
 * zero lanes add zeros to columns past in_w, which are never copied out. */
#define DXR_MAX_OH 10

AVX2_INLINE void dxr_tile(const int OH, const struct geo *g, const float *dpk, int ows,
                          const float *w, int c, int kj, int x, float *dinb, int ws) {
  __m256 acc[DXR_MAX_OH + KS - 1];
#pragma GCC unroll 14
  for (int y = 0; y < OH + KS - 1; y++) acc[y] = _mm256_setzero_ps();
  const float *wm = w + c * KS * KS + kj, *d = dpk + x;
  for (int m = 0; m < g->M; m++, wm += g->K, d += OH * ows) {
#pragma GCC unroll 5
    for (int ki = 0; ki < KS; ki++) {
      const __m256 wv = _mm256_broadcast_ss(wm + ki * KS);
#pragma GCC unroll 10
      for (int oy = 0; oy < OH; oy++)
        acc[oy + ki] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(d + oy * ows), acc[oy + ki]);
    }
  }
  float *dst = dinb + (int64_t)c * (OH + KS - 1) * ws + x + kj;
#pragma GCC unroll 14
  for (int y = 0; y < OH + KS - 1; y++, dst += ws)
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), acc[y]));
}

#define DXR_FN(OH)                                                                                 \
  static AVX2 void dxr_##OH(const struct geo *g, const float *dpk, int ows, const float *w, int c, \
                            int kj, int x, float *dinb, int ws) {                                  \
    dxr_tile(OH, g, dpk, ows, w, c, kj, x, dinb, ws);                                              \
  }
DXR_FN(1)
DXR_FN(2)
DXR_FN(3)
DXR_FN(4)
DXR_FN(5)
DXR_FN(6)
DXR_FN(7)
DXR_FN(8)
DXR_FN(9)
DXR_FN(10)

typedef void (*dxr_fn)(const struct geo *, const float *, int, const float *, int, int, int,
                       float *, int);
static const dxr_fn dxr_table[DXR_MAX_OH + 1] = {NULL,  dxr_1, dxr_2, dxr_3, dxr_4, dxr_5,
                                                 dxr_6, dxr_7, dxr_8, dxr_9, dxr_10};

/* --- the same sums for two input channels c, c + 1 at once, for layers of
 * 8 output rows (the cnn's conv2 on 28x28): each gradient vector loaded
 * feeds both channels' multiply-adds (the tile above loads one per
 * multiply-add, and is load-bound). Two channels' 12 input rows do not fit
 * the registers, so a tile takes 6 rows of each: the rows y0..y0+n0-1 and
 * y1..y1+n1-1. The 12 rows are split where each accumulator's chain of
 * dependent multiply-adds stays shorter than the tile's throughput allows
 * (a tile whose rows all take 5 multiply-adds per channel m of the
 * gradient would wait on the 4-cycle latency): the middle rows 3..8 (4 or
 * 5 each) and the outer 0..2 and 9..11 (1 to 3 each). */
#define DXP_OH 8

AVX2_INLINE void dxp_tile(const int Y0, const int N0, const int Y1, const int N1,
                          const struct geo *g, const float *dpk, int ows, const float *w, int c,
                          int kj, int x, float *dinb, int ws) {
  __m256 acc[2][6];
#pragma GCC unroll 6
  for (int r = 0; r < N0 + N1; r++) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
  const float *wm = w + c * KS * KS + kj, *d = dpk + x;
  for (int m = 0; m < g->M; m++, wm += g->K, d += DXP_OH * ows) {
#pragma GCC unroll 5
    for (int ki = 0; ki < KS; ki++) {
      const __m256 w0 = _mm256_broadcast_ss(wm + ki * KS);
      const __m256 w1 = _mm256_broadcast_ss(wm + KS * KS + ki * KS);
      /* a pointer the compiler cannot follow: it would otherwise keep the
       * rows loaded for one ki in registers for the next and spill the
       * accumulators */
      const float *dk = d;
      __asm__ volatile("" : "+r"(dk));
#pragma GCC unroll 8
      for (int oy = 0; oy < DXP_OH; oy++) {
        const int y = oy + ki;
        const int r = y >= Y0 && y < Y0 + N0 ? y - Y0 : y >= Y1 && y < Y1 + N1 ? N0 + y - Y1 : -1;
        if (r < 0) continue;
        __m256 dv = _mm256_loadu_ps(dk + oy * ows);
        __asm__("" : "+x"(dv)); /* one load for both multiply-adds */
        acc[0][r] = _mm256_fmadd_ps(w0, dv, acc[0][r]);
        acc[1][r] = _mm256_fmadd_ps(w1, dv, acc[1][r]);
      }
    }
  }
  const int64_t plane = (int64_t)(DXP_OH + KS - 1) * ws;
#pragma GCC unroll 6
  for (int r = 0; r < N0 + N1; r++) {
    const int y = r < N0 ? Y0 + r : Y1 + r - N0;
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
      float *dst = dinb + (c + i) * plane + (int64_t)y * ws + x + kj;
      _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), acc[i][r]));
    }
  }
}

static AVX2 __attribute__((noinline)) void dxp_mid(const struct geo *g, const float *dpk, int ows,
                                                   const float *w, int c, int kj, int x,
                                                   float *dinb, int ws) {
  dxp_tile(3, 6, 9, 0, g, dpk, ows, w, c, kj, x, dinb, ws);
}

/* dxp_mid for rows of one vector (ows 8: the cnn's conv2), its steps in
 * assembly with every accumulator in a register: the compiler's version
 * spills two of the 12 (12 accumulators, two weights and the gradient
 * vector leave one register free) and reloads them each channel m, on the
 * chains of dependent multiply-adds. XW: step ki's two weights; XR: the
 * gradient row oy times both, into input row 3 + r. */
#define XW(KI)                                                                                     \
  "vbroadcastss " #KI "*20(%[wm]), %[w0]\n\t"                                                      \
  "vbroadcastss 100+" #KI "*20(%[wm]), %[w1]\n\t"
#define XR(OY, R)                                                                                  \
  "vmovups " #OY "*32(%[d]), %[dv]\n\t"                                                            \
  "vfmadd231ps %[dv], %[w0], %[a" #R "]\n\t"                                                       \
  "vfmadd231ps %[dv], %[w1], %[b" #R "]\n\t"

static AVX2 __attribute__((noinline)) void dxp_mid8(const struct geo *g, const float *dpk,
                                                    const float *w, int c, int kj, int x,
                                                    float *dinb, int ws) {
  _Static_assert(KS == 5 && DXP_OH == 8, "the steps below are written for 5x5 and 8 rows");
  /* separate variables, not arrays: the memory clobber would keep an
   * array in memory */
  __m256 a0, a1, a2, a3, a4, a5, b0, b1, b2, b3, b4, b5, t0, t1, t2;
  a0 = a1 = a2 = a3 = a4 = a5 = b0 = b1 = b2 = b3 = b4 = b5 = _mm256_setzero_ps();
  const float *wm = w + c * KS * KS + kj, *d = dpk + x;
  for (int m = 0; m < g->M; m++, wm += g->K, d += DXP_OH * 8)
    __asm__(XW(0) XR(3, 0) XR(4, 1) XR(5, 2) XR(6, 3) XR(7, 4) XW(1) XR(2, 0) XR(3, 1) XR(4, 2)
                XR(5, 3) XR(6, 4) XR(7, 5) XW(2) XR(1, 0) XR(2, 1) XR(3, 2) XR(4, 3) XR(5, 4)
                    XR(6, 5) XW(3) XR(0, 0) XR(1, 1) XR(2, 2) XR(3, 3) XR(4, 4) XR(5, 5) XW(4)
                        XR(0, 1) XR(1, 2) XR(2, 3) XR(3, 4) XR(4, 5)
            : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4),
              [a5] "+x"(a5), [b0] "+x"(b0), [b1] "+x"(b1), [b2] "+x"(b2), [b3] "+x"(b3),
              [b4] "+x"(b4), [b5] "+x"(b5), [w0] "=&x"(t0), [w1] "=&x"(t1), [dv] "=&x"(t2)
            : [wm] "r"(wm), [d] "r"(d)
            : "memory");
  const __m256 a[6] = {a0, a1, a2, a3, a4, a5}, b[6] = {b0, b1, b2, b3, b4, b5};
  const int64_t plane = (int64_t)(DXP_OH + KS - 1) * ws;
  for (int r = 0; r < 6; r++) {
    float *dst = dinb + c * plane + (int64_t)(3 + r) * ws + x + kj;
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), a[r]));
    _mm256_storeu_ps(dst + plane, _mm256_add_ps(_mm256_loadu_ps(dst + plane), b[r]));
  }
}
#undef XW
#undef XR

static AVX2 __attribute__((noinline)) void dxp_outer(const struct geo *g, const float *dpk, int ows,
                                                     const float *w, int c, int kj, int x,
                                                     float *dinb, int ws) {
  dxp_tile(0, 3, 9, 3, g, dpk, ows, w, c, kj, x, dinb, ws);
}

/* row widths of the padded buffers, or 0 when backward_x_rows does not take
 * the layer */
static int dxr_ows(const struct geo *g) {
  const int ows = (g->OW + 7) / 8 * 8;
  if (g->OH > DXR_MAX_OH || (int64_t)g->M * g->OH * ows > PACK ||
      (int64_t)g->C * g->H * (ows + KS - 1) > PACK)
    return 0;
  return ows;
}

/* The pooled gradient's planes of image b as backward_x_rows packs the
 * conv output's gradient (pool->y, dy, arg as layers_pool_bias_relu_backward
 * reads them): 0 + relu'(y) * dy at each window's winner, +0 elsewhere, the
 * values that function writes, so the sums that follow are the same bit for
 * bit; without the dense gradient written and read back. */
struct pooled {
  const float *y, *dy;
  const int32_t *arg;
  int64_t po; /* one pooled plane */
};

static void pack_pooled(const struct geo *g, const struct pooled *pl, int b, int ows, float *dpk) {
  memset(dpk, 0, sizeof(float) * (size_t)g->M * g->OH * ows);
  for (int m = 0; m < g->M; m++) {
    const int64_t p = ((int64_t)m * g->B + b) * pl->po;
    const float *yp = pl->y + p, *dp = pl->dy + p;
    const int32_t *ap = pl->arg + p;
    float *d = dpk + (int64_t)m * g->OH * ows;
    for (int64_t i = 0; i < pl->po; i++) {
      const int32_t a = ap[i];
      d[ows == g->OW ? a : a / g->OW * ows + a % g->OW] = 0.0f + (yp[i] > 0.0f ? dp[i] : 0.0f);
    }
  }
}

/* dout: the conv output's gradient, or NULL with pl: the pooled one */
static AVX2 void backward_x_rows(const struct geo *g, const float *dout, const struct pooled *pl,
                                 const float *w, float *din, int ows) {
  _Alignas(32) float dpk[PACK];
  _Alignas(32) float dinb[PACK];
  const int ws = ows + KS - 1;
  const size_t tail = sizeof(float) * (size_t)(ows - g->OW);
  for (int b = 0; b < g->B; b++) {
    /* whole planes when the rows need no padding (the cnn's conv2) */
    if (!dout)
      pack_pooled(g, pl, b, ows, dpk);
    else if (ows == g->OW)
      pack(dout, g->M, g->ohw, g->out_cs, b, dpk);
    else
      for (int m = 0; m < g->M; m++) {
        const float *src = dout + m * g->out_cs + b * g->ohw;
        float *d = dpk + (int64_t)m * g->OH * ows;
        for (int oy = 0; oy < g->OH; oy++, d += ows, src += g->OW) {
          memcpy(d, src, sizeof(float) * (size_t)g->OW);
          memset(d + g->OW, 0, tail);
        }
      }
    memset(dinb, 0, sizeof(float) * (size_t)g->C * g->H * ws);
    int c = 0;
    if (g->OH == DXP_OH)
      for (; c + 2 <= g->C; c += 2)
        for (int kj = 0; kj < KS; kj++)
          for (int x = 0; x < ows; x += 8) {
            if (ows == 8)
              dxp_mid8(g, dpk, w, c, kj, x, dinb, ws);
            else
              dxp_mid(g, dpk, ows, w, c, kj, x, dinb, ws);
            dxp_outer(g, dpk, ows, w, c, kj, x, dinb, ws);
          }
    for (; c < g->C; c++)
      for (int kj = 0; kj < KS; kj++)
        for (int x = 0; x < ows; x += 8) dxr_table[g->OH](g, dpk, ows, w, c, kj, x, dinb, ws);
    if (ws == g->W)
      unpack(dinb, g->C, g->hw, g->in_cs, b, din);
    else
      for (int c = 0; c < g->C; c++)
        for (int y = 0; y < g->H; y++)
          memcpy(din + c * g->in_cs + b * g->hw + y * g->W, dinb + ((int64_t)c * g->H + y) * ws,
                 sizeof(float) * (size_t)g->W);
  }
}

static AVX2 void backward_x(const struct geo *g, const float *dout, const float *w, float *din) {
  const int ows = dxr_ows(g);
  if (ows) {
    backward_x_rows(g, dout, NULL, w, din, ows);
    return;
  }
  float dpk[PACK], dinb[PACK];
  for (int b = 0; b < g->B; b++) {
    pack(dout, g->M, g->ohw, g->out_cs, b, dpk);
    memset(dinb, 0, sizeof(float) * (size_t)g->in_img);
    for (int p0 = 0; p0 < g->npos; p0 += 2)
      for (int c = 0; c < g->C; c++)
        for (int kj = 0; kj < KS; kj++)
          dx_table[g->npos - p0 >= 2 ? 2 : 1][g->masked](g, dpk, w, g->pos + p0, c, kj, dinb);
    unpack(dinb, g->C, g->hw, g->in_cs, b, din);
  }
}

int conv_avx2_forward(const struct layer_shape *s, int B, const float *in, const float *w,
                      float *out) {
  if (conv_avx2_supports(s)) return -ENOTSUP;
  struct geo g;
  geo_init(&g, s, B);
  forward(&g, in, w, out);
  return 0;
}

int conv_avx2_pool_supports(const struct layer_shape *s) {
  if (conv_avx2_supports(s)) return -ENOTSUP;
  if (s->out_w % 8 || s->out_h % 2 || s->pool_h != s->out_h / 2 || s->pool_w != s->out_w / 2)
    return -ENOTSUP;
  return 0;
}

int conv_avx2_forward_pool(const struct layer_shape *s, int B, const float *in, const float *w,
                           const float *bias, float *out, int32_t *arg) {
  if (conv_avx2_pool_supports(s)) return -ENOTSUP;
  struct geo g;
  geo_init(&g, s, B);
  forward_pool(&g, in, w, bias, out, arg);
  return 0;
}

int conv_avx2_backward(const struct layer_shape *s, int B, const float *in, const float *dout,
                       const float *w, float *dw, float *din) {
  if (conv_avx2_supports(s)) return -ENOTSUP;
  struct geo g;
  geo_init(&g, s, B);
  if (!dw)
    ;
  else if (dwt_fits(&g))
    backward_w_t(&g, in, dout, dw);
  else
    backward_w(&g, in, dout, dw);
  if (din) backward_x(&g, dout, w, din);
  return 0;
}

int conv_avx2_x_pooled_supports(const struct layer_shape *s) {
  if (conv_avx2_pooled_supports(s)) return -ENOTSUP;
  struct geo g;
  geo_init(&g, s, 1);
  return dxr_ows(&g) ? 0 : -ENOTSUP;
}

int conv_avx2_backward_x_pooled(const struct layer_shape *s, int B, const float *y, const float *dy,
                                const int32_t *arg, const float *w, float *din) {
  if (conv_avx2_x_pooled_supports(s)) return -ENOTSUP;
  struct geo g;
  geo_init(&g, s, B);
  const struct pooled pl = {y, dy, arg, (int64_t)s->pool_h * s->pool_w};
  backward_x_rows(&g, NULL, &pl, w, din, dxr_ows(&g));
  return 0;
}

int conv_avx2_pooled_supports(const struct layer_shape *s) {
  if (conv_avx2_supports(s)) return -ENOTSUP;
  if (s->pool_h != s->out_h / 2 || s->pool_w != s->out_w / 2 || s->pool_h < 1 || s->pool_w < 1)
    return -ENOTSUP;
  return 0;
}

int conv_avx2_backward_pooled(const struct layer_shape *s, int B, const float *in, const float *y,
                              const float *dy, const int32_t *arg, float *dw, float *db) {
  if (conv_avx2_pooled_supports(s)) return -ENOTSUP;
  struct geo g;
  geo_init(&g, s, B);
  if (g.C < DWS_MIN_C)
    backward_w_pooled(&g, in, y, dy, arg, s->pool_h, s->pool_w, dw, db);
  else
    backward_w_sparse(&g, in, y, dy, arg, s->pool_h, s->pool_w, dw, db);
  return 0;
}

#else /* not x86-64 with GCC or clang */

int conv_avx2_cpu_ok(void) { return 0; }

int conv_avx2_pool_supports(const struct layer_shape *s) {
  (void)s;
  return -ENOTSUP;
}

int conv_avx2_forward_pool(const struct layer_shape *s, int B, const float *in, const float *w,
                           const float *bias, float *out, int32_t *arg) {
  (void)s, (void)B, (void)in, (void)w, (void)bias, (void)out, (void)arg;
  return -ENOTSUP;
}

int conv_avx2_pooled_supports(const struct layer_shape *s) {
  (void)s;
  return -ENOTSUP;
}

int conv_avx2_x_pooled_supports(const struct layer_shape *s) {
  (void)s;
  return -ENOTSUP;
}

int conv_avx2_backward_x_pooled(const struct layer_shape *s, int B, const float *y, const float *dy,
                                const int32_t *arg, const float *w, float *din) {
  (void)s, (void)B, (void)y, (void)dy, (void)arg, (void)w, (void)din;
  return -ENOTSUP;
}

int conv_avx2_backward_pooled(const struct layer_shape *s, int B, const float *in, const float *y,
                              const float *dy, const int32_t *arg, float *dw, float *db) {
  (void)s, (void)B, (void)in, (void)y, (void)dy, (void)arg, (void)dw, (void)db;
  return -ENOTSUP;
}

int conv_avx2_forward(const struct layer_shape *s, int B, const float *in, const float *w,
                      float *out) {
  (void)s, (void)B, (void)in, (void)w, (void)out;
  return -ENOTSUP;
}

int conv_avx2_backward(const struct layer_shape *s, int B, const float *in, const float *dout,
                       const float *w, float *dw, float *din) {
  (void)s, (void)B, (void)in, (void)dout, (void)w, (void)dw, (void)din;
  return -ENOTSUP;
}

#endif
