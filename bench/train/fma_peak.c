/* One core's fp32 peak, measured: 12 independent chains of 8-wide fused
 * multiply-adds (AVX2 + FMA; enough chains to cover a 4-cycle latency on two
 * FMA pipes), one thread, best of many short timed rounds. A VM's nominal clock
 * is not the clock it runs at, so bench_train.py runs this beside each
 * training run and reports the trainer's GFLOP/s as a fraction of it. On a
 * CPU without AVX2/FMA it measures 4-wide SSE multiply + add instead and says
 * so. Prints one JSON line: {"gflops": G, "isa": "...", "seconds": S}.
 *
 *   cc -O2 -o fma_peak bench/train/fma_peak.c && ./fma_peak [seconds]
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 12

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile float sink;

/* FLOP done: iters * CHAINS * 8 lanes * 2 */
__attribute__((target("avx2,fma"))) static void fma_chains(long iters) {
  __m256 a[CHAINS];
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
  for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], x, y);
    __asm__ volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(a[4]), "+x"(a[5]));
  }
  float s = 0.0f;
  for (int i = 0; i < CHAINS; i++) {
    float v[8];
    _mm256_storeu_ps(v, a[i]);
    s += v[0];
  }
  sink = s;
}

/* FLOP done: iters * CHAINS * 4 lanes * 2 */
static void sse_chains(long iters) {
  __m128 a[CHAINS];
  const __m128 x = _mm_set1_ps(0.999999f), y = _mm_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; i++) a[i] = _mm_set1_ps((float)i);
  for (long n = 0; n < iters; n++) {
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++) a[i] = _mm_add_ps(_mm_mul_ps(a[i], x), y);
    __asm__ volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]));
  }
  float s = 0.0f;
  for (int i = 0; i < CHAINS; i++) s += _mm_cvtss_f32(a[i]);
  sink = s;
}

int main(int argc, char **argv) {
  const double budget = argc > 1 ? atof(argv[1]) : 0.5;
  __builtin_cpu_init();
  const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const double flop_per_iter = CHAINS * (avx2 ? 8 : 4) * 2.0;
  /* rounds of ~1 ms at 100 GFLOP/s, best kept: on a loaded machine some
   * rounds still run whole within one time slice of the core */
  const long iters = 100000;
  double best = 0.0, spent = 0.0;
  int rounds = 0;
  while (rounds < 3 || spent < budget) {
    const double t0 = now();
    if (avx2)
      fma_chains(iters);
    else
      sse_chains(iters);
    const double dt = now() - t0;
    spent += dt;
    rounds++;
    const double g = flop_per_iter * (double)iters / dt / 1e9;
    if (g > best) best = g;
  }
  printf("{\"gflops\": %.2f, \"isa\": \"%s\", \"seconds\": %.3f}\n", best,
         avx2 ? "avx2-fma" : "sse", spent);
  return 0;
}
