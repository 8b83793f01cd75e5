/* The GPU tests' skip rule (gpu_skip.h): skip only when the runtime says
 * there is no device; a broken GPU fails with the runtime's sentence; a
 * required GPU never skips. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_skip.h"

static char msg[512];

/* the codes are only compared for zero here */
#define NODEV 100, "cudaErrorNoDevice", "no CUDA-capable device is detected"
#define OLDDRV                                                                                     \
  35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version"

START_TEST(runs_with_enough_devices) {
  ck_assert_int_eq(gpu_skip_decide(0, "", "", 0, 0, 0, 2, 2, 0, msg, sizeof msg), GPU_RUN);
  ck_assert_int_eq(gpu_skip_decide(0, "", "", 0, 0, 0, 1, 2, 1, msg, sizeof msg),
                   GPU_SKIP); /* one GPU is a smaller machine, not a broken one */
  ck_assert(strstr(msg, "needs 2"));
}
END_TEST

START_TEST(skips_only_without_a_device) {
  ck_assert_int_eq(gpu_skip_decide(NODEV, 1, 0, 0, 0, 1, 0, msg, sizeof msg), GPU_SKIP);
  ck_assert(strstr(msg, "SKIP: no CUDA device (cudaErrorNoDevice"));
  ck_assert_int_eq(gpu_skip_decide(0, "", "", 0, 0, 0, 0, 1, 0, msg, sizeof msg), GPU_SKIP);
  /* no driver installed at all: the runtime says "insufficient driver" */
  ck_assert_int_eq(gpu_skip_decide(OLDDRV, 0, 1, 0, 0, 1, 0, msg, sizeof msg), GPU_SKIP);
}
END_TEST

START_TEST(broken_gpu_fails_with_the_runtime_sentence) {
  /* a driver that is there but too old for the runtime (CUDA 13 on R570) */
  ck_assert_int_eq(gpu_skip_decide(OLDDRV, 0, 1, 1, 0, 1, 0, msg, sizeof msg), GPU_FAIL);
  ck_assert(strstr(msg, "FAIL: cudaGetDeviceCount: cudaErrorInsufficientDriver: "
                        "CUDA driver version is insufficient"));
  ck_assert_int_eq(gpu_skip_decide(802, "cudaErrorSystemNotReady", "system not yet initialized", 0,
                                   0, 1, 0, 1, 0, msg, sizeof msg),
                   GPU_FAIL);
  ck_assert(strstr(msg, "cudaErrorSystemNotReady: system not yet initialized"));
  ck_assert_int_eq(gpu_skip_decide(46, "cudaErrorDevicesUnavailable",
                                   "CUDA-capable device(s) is/are busy or "
                                   "unavailable",
                                   0, 0, 1, 0, 1, 0, msg, sizeof msg),
                   GPU_FAIL);
}
END_TEST

START_TEST(required_gpu_never_skips) {
  ck_assert_int_eq(gpu_skip_decide(NODEV, 1, 0, 0, 0, 1, 1, msg, sizeof msg), GPU_FAIL);
  ck_assert(strstr(msg, "a GPU is required here"));
  ck_assert(strstr(msg, "no CUDA-capable device is detected"));
  ck_assert_int_eq(gpu_skip_decide(OLDDRV, 0, 1, 0, 0, 1, 1, msg, sizeof msg), GPU_FAIL);
  ck_assert_int_eq(gpu_skip_decide(0, "", "", 0, 0, 0, 0, 1, 1, msg, sizeof msg), GPU_FAIL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gpu_skip");
  TCase *tc = tcase_create("decide");
  tcase_add_test(tc, runs_with_enough_devices);
  tcase_add_test(tc, skips_only_without_a_device);
  tcase_add_test(tc, broken_gpu_fails_with_the_runtime_sentence);
  tcase_add_test(tc, required_gpu_never_skips);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
