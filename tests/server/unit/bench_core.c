/* bench_core: times the pure core on the sizes the design set (validation, 10,000
 * sampled trials, ASHA over 10,000 trials, best over 10,000 x 10). Not a
 * test; build with --target bench_core and run it on a quiet machine. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "asha.h"
#include "best.h"
#include "rng.h"
#include "space.h"
#include "validate.h"

static const char *design_config =
    "{\"name\": \"fmnist-asha\", \"metric\": \"loss\", \"mode\": \"min\", \"num_samples\": 10000,"
    " \"seed\": 42, \"param_space\": {\"l1\": {\"type\": \"pow2\", \"lower\": 4, \"upper\": 256},"
    " \"l2\": {\"type\": \"pow2\", \"lower\": 4, \"upper\": 256},"
    " \"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1e-1},"
    " \"batch_size\": {\"type\": \"choice\", \"values\": [2, 4, 8, 16]}, \"momentum\": 0.9},"
    " \"scheduler\": {\"type\": \"asha\", \"max_t\": 10, \"grace_period\": 1,"
    " \"reduction_factor\": 2, \"brackets\": 1},"
    " \"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": \"fashion-mnist\"}}";

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int run(void) {
  cJSON *c = cJSON_Parse(design_config), *configs = NULL;
  struct experiment_spec s;
  struct asha *a = NULL;
  struct rng g;
  double t0, t1, *vals = NULL;
  struct best_series *series = NULL;
  const int reps = 10000, T = 10000, R = 10;
  int n = 0, rc = 1;

  if (!c || validate_experiment(c, &s, NULL)) goto out_json;
  t0 = now();
  for (int i = 0; i < reps; i++) {
    struct experiment_spec tmp;
    if (validate_experiment(c, &tmp, NULL)) goto out;
    validate_spec_free(&tmp);
  }
  t1 = now();
  printf("validate_experiment (DESIGN.md example): %.2f us per call\n", (t1 - t0) / reps * 1e6);

  t0 = now();
  if (space_generate(s.param_space, T, 42, &configs, NULL)) goto out;
  t1 = now();
  printf("space_generate, %d trials: %.2f ms\n", T, (t1 - t0) * 1e3);

  if (asha_create(&s.sched, s.mode, 42, &a)) goto out;
  for (int i = 0; i < T; i++)
    if (asha_add_trial(a, i, asha_bracket_for(a, i))) goto out;
  rng_seed(&g, 1);
  t0 = now();
  for (int t = 1; t <= R; t++)
    for (int i = 0; i < T; i++) {
      struct asha_outcome o;
      if (!asha_has_trial(a, i)) continue;
      if (asha_on_result(a, i, t, rng_uniform(&g), &o)) goto out;
      n++;
      if (o.decision == ASHA_STOP && asha_on_trial_end(a, i, 1, t, 0.5, &o)) goto out;
    }
  t1 = now();
  printf("asha_on_result, %d trials, random losses: %d results in %.2f ms (%.0f ns each)\n", T, n,
         (t1 - t0) * 1e3, (t1 - t0) / n * 1e9);

  vals = malloc(sizeof *vals * (size_t)T * R);
  series = malloc(sizeof *series * (size_t)T);
  if (!vals || !series) goto out;
  for (int i = 0; i < T * R; i++) vals[i] = rng_uniform(&g);
  for (int i = 0; i < T; i++) series[i] = (struct best_series){i, vals + (size_t)i * R, (size_t)R};
  for (int sc = BEST_SCOPE_LAST; sc <= BEST_SCOPE_ALL; sc++) {
    size_t at;
    double v;
    t0 = now();
    for (int r = 0; r < 100; r++)
      if (best_pick(series, (size_t)T, (enum best_scope)sc, SPEC_MODE_MIN, &at, &v)) goto out;
    t1 = now();
    printf("best_pick, %d trials x %d results, scope %s: %.3f ms\n", T, R,
           best_scope_name((enum best_scope)sc), (t1 - t0) / 100 * 1e3);
  }
  rc = 0;
out:
  validate_spec_free(&s);
out_json:
  free(vals);
  free(series);
  asha_free(a);
  cJSON_Delete(configs);
  cJSON_Delete(c);
  return rc;
}

int main(void) {
  if (run()) {
    fprintf(stderr, "bench_core: a call failed\n");
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
