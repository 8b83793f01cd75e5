/* hv_driver: ctune's hypervolume (server/core/hypervolume.c) on point sets
 * read from stdin, for bench_hypervolume.py: each set is a line "k n"
 * followed by n lines of k numbers (minimised) and one line of k (the
 * reference point); prints "hypervolume seconds" (the best of three runs)
 * for each, or "error RC". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hypervolume.h"

static double hv_driver_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
  int k;
  size_t n;
  while (scanf("%d %zu", &k, &n) == 2) {
    if (k < 1 || k > SPEC_MAX_OBJECTIVES) return 2;
    double *v = malloc((n ? n : 1) * (size_t)k * sizeof *v), ref[SPEC_MAX_OBJECTIVES];
    enum spec_mode modes[SPEC_MAX_OBJECTIVES] = {SPEC_MODE_MIN};
    if (!v) return 1;
    for (size_t i = 0; i < n * (size_t)k; i++)
      if (scanf("%lf", &v[i]) != 1) return 2;
    for (int j = 0; j < k; j++)
      if (scanf("%lf", &ref[j]) != 1) return 2;
    double hv = 0, best = 1e300;
    int rc = 0;
    for (int rep = 0; rep < 3 && !rc; rep++) {
      double t0 = hv_driver_now();
      rc = hypervolume_compute(v, n, k, modes, ref, &hv);
      double dt = hv_driver_now() - t0;
      if (dt < best) best = dt;
    }
    if (rc)
      printf("error %d\n", rc);
    else
      printf("%.17g %.9f\n", hv, best);
    fflush(stdout);
    free(v);
  }
  return 0;
}
