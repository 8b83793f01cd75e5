/* OpenBLAS, loaded when the first sgemm needs it. Loading it costs each
 * ctune-train process ~4.5 ms of CPU (36 MB mapped, ~12,000 relocations,
 * its thread pool and buffers: measured on the 2-vCPU EPYC), a fifth of the
 * fixed cost of a short trial, and the AVX2 kernels leave it unused on the
 * cnn at batch <= 64 and the mlp at <= 64. The reference paths (and every
 * path on a CPU without AVX2/FMA, or above batch 64 on the linear layers)
 * call blas_load_sgemm, which loads it on first use. */
#ifndef CTUNE_TRAINER_BLAS_LOAD_H
#define CTUNE_TRAINER_BLAS_LOAD_H

#include <cblas.h>

/* The library dlopen()ed; a process that already has it (a test linking
 * it) uses that copy. */
#define BLAS_LOAD_LIB "libopenblas.so.0"

/* cblas_sgemm in row-major order. Loads the library on the first call
 * (thread-safe); a library that cannot be loaded ends the process with
 * exit status 127 and the loader's words on stderr, as a missing library
 * of the executable's own would. */
void blas_load_sgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                     float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                     float *C, int ldc);

/* OpenBLAS's thread count: applied now when the library is in the process,
 * else when it loads. At 1 the pool it starts on loading is shut down at
 * once (its idle workers spin ~2^28 cycles before they sleep). */
void blas_load_threads(int threads);

/* Shuts OpenBLAS's pool down when the library is in the process (a later
 * call that wants threads starts them again): 0, or -ENOTSUP when the
 * library has no such function. Nothing to do (0) when it is not loaded. */
int blas_load_idle(void);

/* 1 when the library is in the process (tests). */
int blas_load_loaded(void);

#endif
