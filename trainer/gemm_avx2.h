/* Small row-major GEMMs for AVX2 + FMA: the linear layers' three products
 * (forward, weight gradient, input gradient) at the cnn's and mlp's widths,
 * where an sgemm call's packing, beta pass and dispatch cost as much as its
 * kernel. The fast path of layers_linear_forward/backward; layers.c keeps
 * OpenBLAS as the reference they are tested against. Like conv_avx2.h,
 * compiled for any x86-64 and chosen at run time: every call answers
 * -ENOTSUP (nothing written) where conv_avx2_cpu_ok() says no. */
#ifndef CTUNE_TRAINER_GEMM_AVX2_H
#define CTUNE_TRAINER_GEMM_AVX2_H

/* C[M][N] = A[M][K] * B[N][K]^T (the forward: in x W^T). */
int gemm_avx2_nt(int M, int N, int K, const float *A, const float *B, float *C);
/* C[M][N] = A[M][K] * B[K][N] (the input gradient: dout x W). */
int gemm_avx2_nn(int M, int N, int K, const float *A, const float *B, float *C);
/* C[M][N] = A[K][M]^T * B[K][N] (the weight gradient: dout^T x in). */
int gemm_avx2_tn(int M, int N, int K, const float *A, const float *B, float *C);

#endif
