/* jsonstrict: the scanner accepts exactly RFC 8259 JSON and names, with its
 * key path, the first string holding \u0000, the first duplicate key and
 * anything after the value — the three things cJSON lets through. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonstrict.h"

static int scan(const char *text, struct jsonstrict_error *e) {
  return jsonstrict_check(text, strlen(text), e);
}

static void expect_ok(const char *text) {
  struct jsonstrict_error e;
  int rc = scan(text, &e);
  ck_assert_msg(rc == 0, "refused %s: %s", text, e.message);
  ck_assert_int_eq(e.problem, JSONSTRICT_OK);
}

static void expect(const char *text, enum jsonstrict_problem problem, const char *path) {
  struct jsonstrict_error e;
  int rc = scan(text, &e);
  ck_assert_msg(rc == -EINVAL, "accepted %s", text);
  ck_assert_msg(e.problem == problem, "%s: problem %d, wanted %d (%s)", text, e.problem, problem,
                e.message);
  if (path) ck_assert_str_eq(e.path, path);
}

START_TEST(valid_json_passes) {
  expect_ok("{}");
  expect_ok("[]");
  expect_ok(" \t\r\n{\"a\": 1} \n");
  expect_ok("0");
  expect_ok("-0.5e+10");
  expect_ok("1E5");
  expect_ok("\"x\"");
  expect_ok("[true, false, null, 1.25, \"s\", {}, []]");
  expect_ok("{\"name\": \"a\\u0001b\", \"esc\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"}");
  expect_ok("{\"u\": \"\\ud83d\\ude00 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}");
  /* The same key in different objects is no duplicate. */
  expect_ok("{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}, \"c\": [{\"a\": 1}, {\"a\": 2}]}");
}
END_TEST

START_TEST(nul_in_a_value_names_its_path) {
  struct jsonstrict_error e;
  expect("{\"name\": \"a\\u0000b\"}", JSONSTRICT_NUL, "name");
  ck_assert_int_eq(scan("{\"x\": 1, \"name\": \"a\\u0000b\"}", &e), -EINVAL);
  ck_assert_ptr_nonnull(strstr(e.message, "name"));
  ck_assert_uint_eq(e.offset, strlen("{\"x\": 1, \"name\": \"a"));
  expect("{\"trainable\": {\"argv\": [\"sh\", \"-c\", \"x\\u0000y\"]}}", JSONSTRICT_NUL,
         "trainable.argv[2]");
  expect("{\"trainable\": {\"env\": {\"K\": \"\\u0000\"}}}", JSONSTRICT_NUL, "trainable.env.K");
  expect("[{\"a\": 1}, {\"b\": \"\\u0000\"}]", JSONSTRICT_NUL, "[1].b");
  expect("\"\\u0000\"", JSONSTRICT_NUL, "");
}
END_TEST

START_TEST(nul_in_a_key_is_refused) {
  expect("{\"a\\u0000b\": 1}", JSONSTRICT_NUL, "a\\u0000b");
  /* Two keys that cJSON would both read as "a". */
  expect("{\"a\": 1, \"a\\u0000\": 2}", JSONSTRICT_NUL, "a\\u0000");
}
END_TEST

START_TEST(duplicate_keys_are_refused) {
  expect("{\"loss\": 1, \"loss\": 2}", JSONSTRICT_DUPLICATE, "loss");
  expect("{\"config\": {\"lr\": 1, \"m\": 0, \"lr\": 2}}", JSONSTRICT_DUPLICATE, "config.lr");
  /* Compared after decoding: \u0061 is "a". */
  expect("{\"a\": 1, \"\\u0061\": 2}", JSONSTRICT_DUPLICATE, "a");
  expect("[{\"k\": 1}, {\"k\": 1, \"k\": 1}]", JSONSTRICT_DUPLICATE, "[1].k");
  expect("{\"\": 1, \"\": 2}", JSONSTRICT_DUPLICATE, "");
}
END_TEST

START_TEST(wide_object_is_linear) {
  /* 200k distinct keys, then one repeated: a quadratic check would take
   * minutes; the hash set takes milliseconds. */
  size_t n = 200000, cap = n * 16 + 64, at = 0;
  char *buf = malloc(cap);
  ck_assert_ptr_nonnull(buf);
  buf[at++] = '{';
  for (size_t i = 0; i < n; i++) at += (size_t)snprintf(buf + at, cap - at, "\"k%zu\":0,", i);
  at += (size_t)snprintf(buf + at, cap - at, "\"k7\":1}");
  struct jsonstrict_error e;
  ck_assert_int_eq(jsonstrict_check(buf, at, &e), -EINVAL);
  ck_assert_int_eq(e.problem, JSONSTRICT_DUPLICATE);
  ck_assert_str_eq(e.path, "k7");
  buf[at - 5] = 'x'; /* the last key is "kx" now: new */
  ck_assert_int_eq(jsonstrict_check(buf, at, &e), 0);
  free(buf);
}
END_TEST

START_TEST(trailing_data_is_refused) {
  expect("{\"a\": 1} x", JSONSTRICT_TRAILING, "");
  expect("{\"a\": 1}{\"b\": 2}", JSONSTRICT_TRAILING, "");
  expect("1 2", JSONSTRICT_TRAILING, "");
  expect("01", JSONSTRICT_TRAILING, ""); /* "0", then "1" */
  /* cJSON without require_null_terminated stops at the NUL byte. */
  struct jsonstrict_error e;
  ck_assert_int_eq(jsonstrict_check("{}\0junk", 7, &e), -EINVAL);
  ck_assert_int_eq(e.problem, JSONSTRICT_TRAILING);
}
END_TEST

START_TEST(syntax_errors_are_refused) {
  const char *bad[] = {"",
                       " ",
                       "{",
                       "[",
                       "{\"a\"}",
                       "{\"a\" 1}",
                       "{\"a\": }",
                       "{a: 1}",
                       "[1,]",
                       "{\"a\": 1,}",
                       "[1 2]",
                       "[01]",
                       "1.",
                       ".5",
                       "+1",
                       "-",
                       "1e",
                       "NaN",
                       "Infinity",
                       "tru",
                       "nul",
                       "\"abc",
                       "\"\\x\"",
                       "\"\\u12\"",
                       "\"\\ud800\"",
                       "\"\\udc00\"",
                       "\"\\ud800\\u0041\"",
                       "\"a\tb\"",
                       "\"\xc0\xaf\"",
                       "\"\xed\xa0\x80\"",
                       "\"\xf5\x80\x80\x80\"",
                       "\"\xe2\x82\"",
                       "['a']",
                       "{\"a\":1]",
                       "[}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect(bad[i], JSONSTRICT_SYNTAX, NULL);
  /* The path says where inside the document the text went wrong. */
  expect("{\"config\": {\"lr\": 01}}", JSONSTRICT_SYNTAX, "config.lr");
  /* A broken key names its object, not the member before it. */
  expect("{\"a\": 1, x}", JSONSTRICT_SYNTAX, "");
  expect("{\"a\": {\"b\": 1, 3}}", JSONSTRICT_SYNTAX, "a");
  expect("{eopt\"[ 0X}]}", JSONSTRICT_SYNTAX, ""); /* found by fuzz_jsonstrict */
}
END_TEST

START_TEST(depth_is_bounded) {
  size_t n = JSONSTRICT_MAX_DEPTH + 1;
  char *buf = malloc(2 * n);
  ck_assert_ptr_nonnull(buf);
  memset(buf, '[', n);
  memset(buf + n, ']', n);
  struct jsonstrict_error e;
  ck_assert_int_eq(jsonstrict_check(buf, 2 * n, &e), -EINVAL);
  ck_assert_int_eq(e.problem, JSONSTRICT_DEPTH);
  ck_assert_int_eq(jsonstrict_check(buf + 1, 2 * n - 2, &e), 0); /* exactly the limit */
  free(buf);
}
END_TEST

START_TEST(null_err_is_allowed_and_path_is_bounded) {
  ck_assert_int_eq(jsonstrict_check("{\"a\":1,\"a\":2}", 13, NULL), -EINVAL);
  ck_assert_int_eq(jsonstrict_check("{}", 2, NULL), 0);
  /* A 1000-character key path is cut to fit, never overflowing. */
  char buf[2100];
  size_t at = 0;
  buf[at++] = '{';
  buf[at++] = '"';
  memset(buf + at, 'k', 1000);
  at += 1000;
  at += (size_t)snprintf(buf + at, sizeof buf - at, "\":\"\\u0000\"}");
  struct jsonstrict_error e;
  ck_assert_int_eq(jsonstrict_check(buf, at, &e), -EINVAL);
  ck_assert_int_eq(e.problem, JSONSTRICT_NUL);
  ck_assert_uint_eq(strlen(e.path), sizeof e.path - 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("jsonstrict");
  TCase *tc = tcase_create("scan");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, valid_json_passes);
  tcase_add_test(tc, nul_in_a_value_names_its_path);
  tcase_add_test(tc, nul_in_a_key_is_refused);
  tcase_add_test(tc, duplicate_keys_are_refused);
  tcase_add_test(tc, wide_object_is_linear);
  tcase_add_test(tc, trailing_data_is_refused);
  tcase_add_test(tc, syntax_errors_are_refused);
  tcase_add_test(tc, depth_is_bounded);
  tcase_add_test(tc, null_err_is_allowed_and_path_is_bounded);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
