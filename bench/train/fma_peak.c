/* One core's fp32 peak, measured: 10 independent chains of 8-wide fused
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

/* Ten chains in named variables: an array with a compiler barrier would be
 * stored to memory every iteration and measure the stores instead. */
#define CHAINS 10
#define STEP10(op)                                                                                 \
  a0 = op(a0), a1 = op(a1), a2 = op(a2), a3 = op(a3), a4 = op(a4), a5 = op(a5), a6 = op(a6),       \
  a7 = op(a7), a8 = op(a8), a9 = op(a9)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile float sink;

/* FLOP done: iters * CHAINS * 8 lanes * 2 */
__attribute__((target("avx2,fma"))) static void fma_chains(long iters) {
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
         a8 = a0, a9 = a0;
#define FMA(a) _mm256_fmadd_ps(a, x, y)
  for (long n = 0; n < iters; n++) STEP10(FMA);
#undef FMA
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  sink = _mm256_cvtss_f32(_mm256_add_ps(s, _mm256_add_ps(a8, a9)));
}

/* FLOP done: iters * CHAINS * 4 lanes * 2 */
static void sse_chains(long iters) {
  const __m128 x = _mm_set1_ps(0.999999f), y = _mm_set1_ps(1e-7f);
  __m128 a0 = _mm_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
         a8 = a0, a9 = a0;
#define MULADD(a) _mm_add_ps(_mm_mul_ps(a, x), y)
  for (long n = 0; n < iters; n++) STEP10(MULADD);
#undef MULADD
  __m128 s = _mm_add_ps(_mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)),
                        _mm_add_ps(_mm_add_ps(a4, a5), _mm_add_ps(a6, a7)));
  sink = _mm_cvtss_f32(_mm_add_ps(s, _mm_add_ps(a8, a9)));
}

int main(int argc, char **argv) {
  const double budget = argc > 1 ? atof(argv[1]) : 0.5;
  __builtin_cpu_init();
  const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const double flop_per_iter = CHAINS * (avx2 ? 8 : 4) * 2.0;
  /* rounds of ~0.3 ms at 100 GFLOP/s, best kept: on a loaded machine
   * most rounds still run whole within one time slice of the core */
  const long iters = 200000;
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
