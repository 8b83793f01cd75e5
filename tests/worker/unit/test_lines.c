/* Result lines, line splitting and output tails. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "linebuf.h"
#include "result.h"
#include "tail.h"

static int parse(const char *line, cJSON **out, double *t) {
  return result_parse_line(line, strlen(line), "training_iteration", out, t);
}

START_TEST(result_lines) {
  cJSON *o;
  double t = 0;
  ck_assert_int_eq(parse("{\"training_iteration\": 3, \"loss\": 0.5, \"tag\": \"x\","
                         " \"nested\": {\"a\": 1}, \"ok\": true}", &o, &t), 1);
  ck_assert(t == 3);
  ck_assert(cJSON_GetObjectItem(o, "loss")->valuedouble == 0.5);
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "tag"));     /* only numbers go to the server */
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "nested"));
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "ok"));
  cJSON_Delete(o);
  ck_assert_int_eq(parse("  {\"training_iteration\": 1}", &o, &t), 1);
  cJSON_Delete(o);
  ck_assert_int_eq(parse("epoch 3 done", &o, &t), 0);
  ck_assert_ptr_null(o);
  ck_assert_int_eq(parse("{\"loss\": 0.5}", &o, &t), 0);               /* no time attribute */
  ck_assert_int_eq(parse("{\"training_iteration\": \"3\"}", &o, &t), 0); /* not a number */
  ck_assert_int_eq(parse("{\"training_iteration\": 3", &o, &t), 0);      /* broken JSON */
  ck_assert_int_eq(parse("[1, 2]", &o, &t), 0);
  ck_assert_int_eq(parse("", &o, &t), 0);
}
END_TEST

struct lines {
  char got[8][64];
  int n;
};

static void on_line(void *arg, const char *line, size_t len) {
  struct lines *l = arg;
  ck_assert_int_lt(l->n, 8);
  memcpy(l->got[l->n], line, len);
  l->got[l->n][len] = '\0';
  l->n++;
}

START_TEST(linebuf_splits_across_chunks) {
  struct linebuf lb;
  struct lines l = {.n = 0};
  linebuf_init(&lb, 10);
  ck_assert_int_eq(linebuf_feed(&lb, "ab", 2, on_line, &l), 0);
  ck_assert_int_eq(l.n, 0);
  ck_assert_int_eq(linebuf_feed(&lb, "c\r\nde\n\nfg", 9, on_line, &l), 0);
  ck_assert_int_eq(l.n, 3);
  ck_assert_str_eq(l.got[0], "abc");
  ck_assert_str_eq(l.got[1], "de");
  ck_assert_str_eq(l.got[2], "");
  ck_assert_int_eq(linebuf_feed(&lb, "0123456789ABC\n", 14, on_line, &l), 0);
  ck_assert_str_eq(l.got[3], "fg01234567");  /* cut at max */
  ck_assert_str_eq(l.got[4], "89ABC");
  linebuf_feed(&lb, "tail", 4, on_line, &l);
  linebuf_flush(&lb, on_line, &l);
  ck_assert_str_eq(l.got[5], "tail");
  linebuf_free(&lb);
}
END_TEST

START_TEST(tail_keeps_latest_bytes_and_lines) {
  struct tail t;
  ck_assert_int_eq(tail_init(&t, 16), 0);
  tail_append(&t, "line1\nline2\n", 12);
  size_t len;
  char *s = tail_copy(&t, &len);
  ck_assert_str_eq(s, "line1\nline2\n");
  free(s);
  tail_append(&t, "line3\nline4\n", 12);  /* wraps */
  s = tail_copy(&t, &len);
  ck_assert_int_eq(len, 16);
  ck_assert_str_eq(s, "ne2\nline3\nline4\n");
  free(s);
  s = tail_last_lines(&t, 2);
  ck_assert_str_eq(s, "line3\nline4");
  free(s);
  tail_append(&t, "0123456789abcdefXYZ", 19);  /* larger than the ring */
  s = tail_copy(&t, &len);
  ck_assert_str_eq(s, "3456789abcdefXYZ");
  free(s);
  ck_assert(t.total == 43);
  tail_free(&t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lines");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, result_lines);
  tcase_add_test(tc, linebuf_splits_across_chunks);
  tcase_add_test(tc, tail_keeps_latest_bytes_and_lines);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
