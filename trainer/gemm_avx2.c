/* Register-blocked AVX2/FMA GEMM micro-kernels (see gemm_avx2.h). The
 * operands are small (a few hundred floats a side) and stay in L1/L2, so
 * there is no packing: each tile reads its operands in place.
 *
 * nn and tn vectorise over C's columns: a tile is MI rows x NJ vectors of 8
 * columns (4 x 3: 12 accumulators), each step of the reduction broadcasts
 * MI scalars of A against NJ rows of B; a row's last partial vector is
 * masked. nt reduces along K, contiguous in both operands: a tile is MI rows
 * of A x NJ rows of B, 8-wide partial sums then one horizontal sum each; the
 * last partial vector of K is loaded masked (zeros). */
#include "gemm_avx2.h"

#include <errno.h>
#include <stdint.h>

#include "conv_avx2.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "avx2_util.h"

/* lanes 0..n-1 on (n in 1..8) */
AVX2_INLINE __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* --- nn / tn: C[i][j..] = sum_k A(i, k) * B[k][j..], A(i, k) = A[i * ai + k * ak]
 * MASKED: the tile is one vector, the row's last, of tail columns */
AVX2_INLINE void cols_tile(const int MI, const int NJ, const int MASKED, int K, const float *A,
                           int64_t ai, int64_t ak, const float *B, int N, float *C, __m256i mask) {
  __m256 acc[4][3];
#pragma GCC unroll 4
  for (int i = 0; i < MI; i++)
#pragma GCC unroll 3
    for (int j = 0; j < NJ; j++) acc[i][j] = _mm256_setzero_ps();
  for (int k = 0; k < K; k++, A += ak, B += N) {
    __m256 b[3];
#pragma GCC unroll 3
    for (int j = 0; j < NJ; j++)
      b[j] = MASKED ? _mm256_maskload_ps(B, mask) : _mm256_loadu_ps(B + 8 * j);
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++) {
      const __m256 a = _mm256_broadcast_ss(A + i * ai);
#pragma GCC unroll 3
      for (int j = 0; j < NJ; j++) acc[i][j] = _mm256_fmadd_ps(a, b[j], acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MI; i++)
#pragma GCC unroll 3
    for (int j = 0; j < NJ; j++) {
      if (MASKED)
        _mm256_maskstore_ps(C + (int64_t)i * N, mask, acc[i][j]);
      else
        _mm256_storeu_ps(C + (int64_t)i * N + 8 * j, acc[i][j]);
    }
}

#define COLS_FN(MI, NJ, MASKED)                                                                    \
  static AVX2 void cols_##MI##_##NJ##_##MASKED(int K, const float *A, int64_t ai, int64_t ak,      \
                                               const float *B, int N, float *C, __m256i mask) {    \
    cols_tile(MI, NJ, MASKED, K, A, ai, ak, B, N, C, mask);                                        \
  }
#define COLS_FNS(MI) COLS_FN(MI, 1, 0) COLS_FN(MI, 2, 0) COLS_FN(MI, 3, 0) COLS_FN(MI, 1, 1)
COLS_FNS(1)
COLS_FNS(2)
COLS_FNS(3)
COLS_FNS(4)

typedef void (*cols_fn)(int, const float *, int64_t, int64_t, const float *, int, float *, __m256i);
/* [MI][NJ], NJ 0 = the masked one-vector tile */
static const cols_fn cols_table[5][4] = {
    [1] = {cols_1_1_1, cols_1_1_0, cols_1_2_0, cols_1_3_0},
    [2] = {cols_2_1_1, cols_2_1_0, cols_2_2_0, cols_2_3_0},
    [3] = {cols_3_1_1, cols_3_1_0, cols_3_2_0, cols_3_3_0},
    [4] = {cols_4_1_1, cols_4_1_0, cols_4_2_0, cols_4_3_0},
};

static AVX2 void gemm_cols(int M, int N, int K, const float *A, int64_t ai, int64_t ak,
                           const float *B, float *C) {
  const int full = N / 8, tail = N % 8;
  const __m256i mask = lane_mask(tail ? tail : 8);
  for (int i0 = 0; i0 < M; i0 += 4) {
    const int mi = M - i0 < 4 ? M - i0 : 4;
    const float *a = A + i0 * ai;
    float *c = C + (int64_t)i0 * N;
    for (int j0 = 0; j0 < full; j0 += 3) {
      const int nj = full - j0 < 3 ? full - j0 : 3;
      cols_table[mi][nj](K, a, ai, ak, B + 8 * j0, N, c + 8 * j0, mask);
    }
    if (tail) cols_table[mi][0](K, a, ai, ak, B + 8 * full, N, c + 8 * full, mask);
  }
}

/* --- nt: C[i][j] = sum_k A[i][k] * B[j][k] --- */
AVX2_INLINE void dots_tile(const int MI, const int NJ, int K, const float *A, const float *B, int N,
                           float *C, __m256i mask) {
  __m256 acc[4][3];
#pragma GCC unroll 4
  for (int i = 0; i < MI; i++)
#pragma GCC unroll 3
    for (int j = 0; j < NJ; j++) acc[i][j] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 b[3];
#pragma GCC unroll 3
    for (int j = 0; j < NJ; j++) b[j] = _mm256_loadu_ps(B + (int64_t)j * K + k);
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++) {
      const __m256 a = _mm256_loadu_ps(A + (int64_t)i * K + k);
#pragma GCC unroll 3
      for (int j = 0; j < NJ; j++) acc[i][j] = _mm256_fmadd_ps(a, b[j], acc[i][j]);
    }
  }
  if (k < K) {
    __m256 b[3];
#pragma GCC unroll 3
    for (int j = 0; j < NJ; j++) b[j] = _mm256_maskload_ps(B + (int64_t)j * K + k, mask);
#pragma GCC unroll 4
    for (int i = 0; i < MI; i++) {
      const __m256 a = _mm256_maskload_ps(A + (int64_t)i * K + k, mask);
#pragma GCC unroll 3
      for (int j = 0; j < NJ; j++) acc[i][j] = _mm256_fmadd_ps(a, b[j], acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MI; i++)
#pragma GCC unroll 3
    for (int j = 0; j < NJ; j++) C[(int64_t)i * N + j] = avx2_hsum8(acc[i][j]);
}

#define DOTS_FN(MI, NJ)                                                                            \
  static AVX2 void dots_##MI##_##NJ(int K, const float *A, const float *B, int N, float *C,        \
                                    __m256i mask) {                                                \
    dots_tile(MI, NJ, K, A, B, N, C, mask);                                                        \
  }
#define DOTS_FNS(MI) DOTS_FN(MI, 1) DOTS_FN(MI, 2) DOTS_FN(MI, 3)
DOTS_FNS(1)
DOTS_FNS(2)
DOTS_FNS(3)
DOTS_FNS(4)

typedef void (*dots_fn)(int, const float *, const float *, int, float *, __m256i);
static const dots_fn dots_table[5][4] = {
    [1] = {NULL, dots_1_1, dots_1_2, dots_1_3},
    [2] = {NULL, dots_2_1, dots_2_2, dots_2_3},
    [3] = {NULL, dots_3_1, dots_3_2, dots_3_3},
    [4] = {NULL, dots_4_1, dots_4_2, dots_4_3},
};

static AVX2 void gemm_dots(int M, int N, int K, const float *A, const float *B, float *C) {
  const __m256i mask = lane_mask(K % 8 ? K % 8 : 8);
  for (int i0 = 0; i0 < M; i0 += 4) {
    const int mi = M - i0 < 4 ? M - i0 : 4;
    for (int j0 = 0; j0 < N; j0 += 3) {
      const int nj = N - j0 < 3 ? N - j0 : 3;
      dots_table[mi][nj](K, A + (int64_t)i0 * K, B + (int64_t)j0 * K, N, C + (int64_t)i0 * N + j0,
                         mask);
    }
  }
}

static int gemm_ok(int M, int N, int K) {
  return conv_avx2_cpu_ok() && M > 0 && N > 0 && K > 0 ? 0 : -ENOTSUP;
}

int gemm_avx2_nt(int M, int N, int K, const float *A, const float *B, float *C) {
  if (gemm_ok(M, N, K)) return -ENOTSUP;
  gemm_dots(M, N, K, A, B, C);
  return 0;
}

int gemm_avx2_nn(int M, int N, int K, const float *A, const float *B, float *C) {
  if (gemm_ok(M, N, K)) return -ENOTSUP;
  gemm_cols(M, N, K, A, K, 1, B, C);
  return 0;
}

int gemm_avx2_tn(int M, int N, int K, const float *A, const float *B, float *C) {
  if (gemm_ok(M, N, K)) return -ENOTSUP;
  gemm_cols(M, N, K, A, 1, M, B, C);
  return 0;
}

#else /* not x86-64 with GCC or clang */

int gemm_avx2_nt(int M, int N, int K, const float *A, const float *B, float *C) {
  (void)M, (void)N, (void)K, (void)A, (void)B, (void)C;
  return -ENOTSUP;
}

int gemm_avx2_nn(int M, int N, int K, const float *A, const float *B, float *C) {
  (void)M, (void)N, (void)K, (void)A, (void)B, (void)C;
  return -ENOTSUP;
}

int gemm_avx2_tn(int M, int N, int K, const float *A, const float *B, float *C) {
  (void)M, (void)N, (void)K, (void)A, (void)B, (void)C;
  return -ENOTSUP;
}

#endif
