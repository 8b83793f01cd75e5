/* Without a usable device the CUDA backend refuses at once with -ENODEV (the
 * trainer's exit 7) and says why. The test hides every GPU from itself with
 * CUDA_VISIBLE_DEVICES="" before CUDA starts, so it runs on any machine. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"

static const struct model_spec cnn = {MODEL_CNN, 1, 28, 28, 10, 120, 84};
static const struct optim_spec sgd = {OPTIM_SGD, 0.01f, 0.9f, 0, 0.9f, 0.999f, 1e-8f};

START_TEST(no_device_is_enodev_with_a_message) {
  struct backend_opts bo = {1, 0, 0, 0, 0, NULL};
  struct backend *b = (struct backend *)&bo; /* must be reset to NULL */
  ck_assert_int_eq(backend_cuda_device_count(), 0);
  ck_assert_int_eq(backend_cuda_ops.create(&cnn, &sgd, 64, &bo, &b), -ENODEV);
  ck_assert_ptr_null(b);
  const char *msg = backend_cuda_last_error();
  ck_assert_msg(strstr(msg, "--device cuda: no usable CUDA device (") == msg, "message: %s", msg);
  ck_assert_msg(strstr(msg, "CUDA_VISIBLE_DEVICES="), "message: %s", msg);
  bo.gpus = 2;
  ck_assert_int_eq(backend_cuda_ops.create(&cnn, &sgd, 64, &bo, &b), -ENODEV);
}
END_TEST

START_TEST(bad_arguments_are_einval) {
  struct backend_opts bo = {1, 0, 0, 0, 0, NULL};
  struct backend *b = NULL;
  struct optim_spec bad = sgd;
  bad.kind = 7;
  ck_assert_int_eq(backend_cuda_ops.create(&cnn, &sgd, 0, &bo, &b), -EINVAL);
  ck_assert_int_eq(backend_cuda_ops.create(&cnn, &bad, 64, &bo, &b), -EINVAL);
  ck_assert(strstr(backend_cuda_last_error(), "bad arguments"));
  ck_assert_str_eq(backend_cuda_ops.name, "cuda");
}
END_TEST

int main(void) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  Suite *s = suite_create("cuda_nodevice");
  TCase *tc = tcase_create("nodevice");
  tcase_add_test(tc, no_device_is_enodev_with_a_message);
  tcase_add_test(tc, bad_arguments_are_einval);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
