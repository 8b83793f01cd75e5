/* The worker's result-line parser applies the strict JSON rules the server
 * does: a line holding the time attribute with a duplicate key, a NUL in a
 * string or data after the object is a malformed result (logged), never a
 * result the server would then refuse or read differently. */
#include <check.h>
#include <string.h>

#include "result.h"

static int parse(const char *line) {
  cJSON *out = NULL;
  double t = 0;
  int rc = result_parse_line(line, strlen(line), "training_iteration", &out, &t);
  cJSON_Delete(out);
  return rc;
}

START_TEST(strict_result_lines) {
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"loss\": 0.5}"), 1);
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"loss\": 9, \"loss\": 0.1}"),
                   RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"training_iteration\": 2}"),
                   RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"tag\": \"a\\u0000b\"}"), RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"lo\\u0000ss\": 1}"), RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"loss\": 1} x"), RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"training_iteration\": 1}{\"training_iteration\": 2}"),
                   RESULT_MALFORMED);
  /* JSON without the time attribute stays plain output, strict or not. */
  ck_assert_int_eq(parse("{\"msg\": 1, \"msg\": 2}"), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("strict_callers");
  TCase *tc = tcase_create("result");
  tcase_add_test(tc, strict_result_lines);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
