/* The per-epoch JSON line: the contract's keys, optional keys only when set,
 * one line, and -ENOSPC rather than a cut line. */
#include <check.h>
#include <cJSON.h>
#include <errno.h>
#include <string.h>

#include "report.h"

START_TEST(keys_and_optional_keys) {
  struct epoch_report r = {.training_iteration = 3,
                           .loss = 0.5,
                           .accuracy = 0.75,
                           .train_loss = 0.6,
                           .time_this_iter_s = 1.5,
                           .time_total_s = 4.5,
                           .samples_per_s = 1000};
  char buf[1024];
  int n = report_format(&r, buf, sizeof(buf));
  ck_assert_int_gt(n, 0);
  ck_assert_int_eq((int)strlen(buf), n);
  ck_assert(buf[n - 1] == '\n' && strchr(buf, '\n') == buf + n - 1);
  cJSON *j = cJSON_Parse(buf);
  ck_assert_ptr_nonnull(j);
  const char *keys[] = {"training_iteration", "loss",         "accuracy",     "train_loss",
                        "time_this_iter_s",   "time_total_s", "samples_per_s"};
  for (int i = 0; i < 7; i++)
    ck_assert_msg(cJSON_IsNumber(cJSON_GetObjectItem(j, keys[i])), "%s", keys[i]);
  ck_assert_int_eq(cJSON_GetObjectItem(j, "training_iteration")->valueint, 3);
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "test_accuracy"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "gpu_mem_mb"));
  ck_assert_ptr_null(cJSON_GetObjectItem(j, "oom_retry"));
  cJSON_Delete(j);
  r.has_test = 1;
  r.test_accuracy = 0.875;
  r.has_gpu_mem = 1;
  r.gpu_mem_mb = 12.5;
  r.batch_size_reduced = 1;
  r.batch_size = 32;
  ck_assert_int_gt(report_format(&r, buf, sizeof(buf)), 0);
  j = cJSON_Parse(buf);
  ck_assert_ptr_nonnull(j);
  ck_assert(cJSON_GetObjectItem(j, "test_accuracy")->valuedouble == 0.875);
  ck_assert(cJSON_GetObjectItem(j, "gpu_mem_mb")->valuedouble == 12.5);
  ck_assert_int_eq(cJSON_GetObjectItem(j, "batch_size")->valueint, 32);
  ck_assert_int_eq(cJSON_GetObjectItem(j, "oom_retry")->valueint, 1);
  cJSON_Delete(j);
  ck_assert_int_eq(report_format(&r, buf, 40), -ENOSPC);
}
END_TEST

int main(void) {
  Suite *s = suite_create("report");
  TCase *tc = tcase_create("report");
  tcase_add_test(tc, keys_and_optional_keys);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
