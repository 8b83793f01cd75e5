/* See blas_load.h. */
#include "blas_load.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, int, int,
                         int, float, const float *, int, const float *, int, float, float *, int);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *handle;
static sgemm_fn p_sgemm;
static void (*p_set_threads)(int);
static int (*p_shutdown)(void);
static int want_threads = 1;

/* Under mu. mode: RTLD_NOLOAD (only when already in the process) or 0. */
static int open_lib(int mode) {
  if (handle) return 0;
  void *h = dlopen(BLAS_LOAD_LIB, RTLD_NOW | RTLD_LOCAL | mode);
  if (!h) return -ENOENT;
  sgemm_fn s = (sgemm_fn)dlsym(h, "cblas_sgemm");
  if (!s) {
    fprintf(stderr, "ctune-train: %s has no cblas_sgemm\n", BLAS_LOAD_LIB);
    exit(127);
  }
  p_set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  p_shutdown = (int (*)(void))dlsym(h, "blas_thread_shutdown_");
  if (p_set_threads) p_set_threads(want_threads);
  if (want_threads == 1 && p_shutdown) p_shutdown();
  __atomic_store_n(&p_sgemm, s, __ATOMIC_RELEASE);
  handle = h;
  return 0;
}

void blas_load_sgemm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                     float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                     float *C, int ldc) {
  sgemm_fn s = __atomic_load_n(&p_sgemm, __ATOMIC_ACQUIRE);
  if (!s) {
    pthread_mutex_lock(&mu);
    if (open_lib(0) != 0) {
      fprintf(stderr, "ctune-train: cannot load the BLAS library: %s\n", dlerror());
      exit(127);
    }
    pthread_mutex_unlock(&mu);
    s = p_sgemm;
  }
  s(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void blas_load_threads(int threads) {
  pthread_mutex_lock(&mu);
  want_threads = threads;
  if (open_lib(RTLD_NOLOAD) == 0) {
    if (p_set_threads) p_set_threads(threads);
    if (threads == 1 && p_shutdown) p_shutdown();
  }
  pthread_mutex_unlock(&mu);
}

int blas_load_idle(void) {
  int rc = 0;
  pthread_mutex_lock(&mu);
  if (open_lib(RTLD_NOLOAD) == 0) {
    if (p_shutdown)
      p_shutdown();
    else
      rc = -ENOTSUP;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

int blas_load_loaded(void) {
  pthread_mutex_lock(&mu);
  const int r = open_lib(RTLD_NOLOAD) == 0;
  pthread_mutex_unlock(&mu);
  return r;
}
