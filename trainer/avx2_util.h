/* What the AVX2/FMA kernels (conv_avx2.c, gemm_avx2.c) share: the
 * per-function target attributes, so that the files build for any x86-64
 * and the kernels are chosen at run time, and a horizontal sum. Include only
 * under __x86_64__ with GCC or clang. */
#ifndef CTUNE_TRAINER_AVX2_UTIL_H
#define CTUNE_TRAINER_AVX2_UTIL_H

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* the sum of v's 8 lanes */
AVX2_INLINE float avx2_hsum8(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

#endif
