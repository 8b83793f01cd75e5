/* Result lines, line splitting and output tails. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
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
                         " \"nested\": {\"a\": 1}, \"ok\": true}",
                         &o, &t),
                   1);
  ck_assert(t == 3);
  ck_assert(cJSON_GetObjectItem(o, "loss")->valuedouble == 0.5);
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "tag")); /* only numbers go to the server */
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "nested"));
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "ok"));
  cJSON_Delete(o);
  ck_assert_int_eq(parse("  {\"training_iteration\": 1}", &o, &t), 1);
  cJSON_Delete(o);
  ck_assert_int_eq(parse("epoch 3 done", &o, &t), 0);
  ck_assert_ptr_null(o);
  ck_assert_int_eq(parse("{\"loss\": 0.5}", &o, &t), 0); /* no time attribute */
  /* Looks like a result but is none: the caller warns, naming the trial. */
  ck_assert_int_eq(parse("{\"training_iteration\": \"3\"}", &o, &t), RESULT_MALFORMED);
  ck_assert_ptr_null(o);
  ck_assert_int_eq(parse("{\"training_iteration\": 3", &o, &t), RESULT_MALFORMED);
  ck_assert_ptr_null(o);
  ck_assert_int_eq(parse("[1, 2]", &o, &t), 0);
  ck_assert_int_eq(parse("", &o, &t), 0);
}
END_TEST

/* What Python's json.dumps, NumPy and printf write for non-finite floats. */
START_TEST(result_nonfinite_tokens_are_null) {
  static const char *lines[] = {
      "{\"training_iteration\": 2, \"loss\": NaN, \"acc\": 0.25}",
      "{\"training_iteration\": 2, \"loss\": -NaN, \"acc\": 0.25}",
      "{\"training_iteration\": 2, \"loss\": Infinity, \"acc\": 0.25}",
      "{\"training_iteration\": 2, \"loss\": -Infinity, \"acc\": 0.25}",
      "{\"training_iteration\": 2, \"loss\":nan,\"acc\": 0.25}",
      "{\"training_iteration\": 2, \"loss\": -inf , \"acc\": 0.25}",
      "{\"training_iteration\": 2, \"loss\": null, \"acc\": 0.25}",
      "{\"training_iteration\": 2, \"acc\": 0.25, \"loss\": NaN}",
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    cJSON *o = NULL;
    double t = 0;
    ck_assert_msg(parse(lines[i], &o, &t) == 1, "not a result: %s", lines[i]);
    ck_assert(t == 2);
    ck_assert_msg(cJSON_IsNull(cJSON_GetObjectItem(o, "loss")), "loss not null: %s", lines[i]);
    ck_assert(cJSON_GetObjectItem(o, "acc")->valuedouble == 0.25);
    char *text = cJSON_PrintUnformatted(o);
    ck_assert_str_eq(text, strstr(lines[i], "\"acc\": 0.25, \"loss\"")
                               ? "{\"training_iteration\":2,\"acc\":0.25,\"loss\":null}"
                               : "{\"training_iteration\":2,\"loss\":null,\"acc\":0.25}");
    free(text);
    cJSON_Delete(o);
  }
  cJSON *o;
  double t;
  /* Inside a string it is text, not a number: the string is dropped. */
  ck_assert_int_eq(
      parse("{\"training_iteration\": 1, \"note\": \"loss: NaN, \\\" Infinity\"}", &o, &t), 1);
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "note"));
  cJSON_Delete(o);
  /* The time attribute itself non-finite: no result, and a warning. */
  ck_assert_int_eq(parse("{\"training_iteration\": NaN, \"loss\": 1}", &o, &t), RESULT_MALFORMED);
  /* Not a bare token: NaNx, Nan, infinity are still broken JSON. */
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"loss\": NaNx}", &o, &t), RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"loss\": infinity}", &o, &t),
                   RESULT_MALFORMED);
  /* Arrays of them parse too (the array itself is not forwarded). */
  ck_assert_int_eq(parse("{\"training_iteration\": 1, \"h\": [NaN, -Infinity, 1]}", &o, &t), 1);
  cJSON_Delete(o);
}
END_TEST

START_TEST(result_trailing_garbage_is_malformed) {
  cJSON *o;
  double t;
  ck_assert_int_eq(parse("{\"training_iteration\": 1} trailing", &o, &t), RESULT_MALFORMED);
  ck_assert_ptr_null(o);
  ck_assert_int_eq(parse("{\"training_iteration\": 1}{\"training_iteration\": 2}", &o, &t),
                   RESULT_MALFORMED);
  ck_assert_int_eq(parse("{'training_iteration': 1}", &o, &t), RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"training_iteration\": 1}  \t", &o, &t), 1); /* blanks are fine */
  cJSON_Delete(o);
  ck_assert_int_eq(parse("{not json at all", &o, &t), RESULT_MALFORMED);
  ck_assert_int_eq(parse("{\"epoch\": 1}", &o, &t), 0); /* other JSON: plain log, no warning */
}
END_TEST

/* The parsed doubles are exactly what strtod makes of the printed text (the
 * printer that forwards them decides the rest). */
START_TEST(result_numbers_exact) {
  static const char *vals[] = {"0.1",
                               "0.30000000000000004",
                               "2.2250738585072014e-308",
                               "8342818273689171",
                               "1.7976931348623157e308",
                               "-0.0",
                               "0.1234567890123456789",
                               "123456789.98765432"};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    char line[200];
    snprintf(line, sizeof line, "{\"training_iteration\": 1, \"v\": %s}", vals[i]);
    cJSON *o;
    double t;
    ck_assert_int_eq(parse(line, &o, &t), 1);
    double want = strtod(vals[i], NULL), got = cJSON_GetObjectItem(o, "v")->valuedouble;
    ck_assert_msg(memcmp(&want, &got, sizeof want) == 0, "%s came out as %.17g", vals[i], got);
    cJSON_Delete(o);
  }
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
  ck_assert_str_eq(l.got[3], "fg01234567"); /* cut at max */
  ck_assert_str_eq(l.got[4], "89ABC");
  linebuf_feed(&lb, "tail", 4, on_line, &l);
  linebuf_flush(&lb, on_line, &l);
  ck_assert_str_eq(l.got[5], "tail");
  linebuf_free(&lb);
}
END_TEST

static int parse_ck(const char *line, int allow, cJSON **out, double *t, struct result_ckpt *ck) {
  return result_parse_line_ckpt(line, strlen(line), "training_iteration", allow, out, t, ck);
}

/* The checkpoint a line names (docs/protocol.md#checkpoints-in-band): read,
 * and never part of the result the worker sends. */
START_TEST(result_checkpoint_key_is_read_and_stripped) {
  cJSON *o;
  double t = 0;
  struct result_ckpt ck;
  for (int allow = 0; allow <= 1; allow++) {
    ck_assert_int_eq(parse_ck("{\"training_iteration\": 4, \"loss\": 0.5, "
                              "\"_checkpoint\": {\"ino\": 9007199254740991, \"size\": 10240}}",
                              allow, &o, &t, &ck),
                     1);
    ck_assert(t == 4);
    ck_assert_int_eq(ck.state, RESULT_CKPT_OK);
    ck_assert(ck.ino == 9007199254740991ULL);
    ck_assert_int_eq(ck.size, 10240);
    ck_assert_int_eq(ck.has_iter, 0);
    ck_assert_int_eq(cJSON_GetArraySize(o), 2); /* training_iteration, loss */
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "_checkpoint"));
    cJSON_Delete(o);
  }
  /* Numbered by the worker: the key alone is no metric. */
  ck_assert_int_eq(
      parse_ck("{\"loss\": 1, \"_checkpoint\": {\"ino\": 7, \"size\": 3}}", 1, &o, &t, &ck), 1);
  ck_assert(isnan(t));
  ck_assert_int_eq(cJSON_GetArraySize(o), 1);
  cJSON_Delete(o);
  /* A number given under the reserved name is dropped too (and BAD). */
  ck_assert_int_eq(parse_ck("{\"training_iteration\": 1, \"_checkpoint\": 5}", 0, &o, &t, &ck), 1);
  ck_assert_int_eq(ck.state, RESULT_CKPT_BAD);
  ck_assert_ptr_null(cJSON_GetObjectItem(o, "_checkpoint"));
  cJSON_Delete(o);
  /* save_checkpoint's own line: no result, a checkpoint of an iteration. */
  ck_assert_int_eq(parse_ck("{\"_checkpoint\": {\"ino\": 7, \"size\": 3, "
                            "\"training_iteration\": 6}}",
                            1, &o, &t, &ck),
                   0);
  ck_assert_ptr_null(o);
  ck_assert_int_eq(ck.state, RESULT_CKPT_OK);
  ck_assert_int_eq(ck.has_iter, 1);
  ck_assert(ck.iter == 6);
  ck_assert_int_eq(parse_ck("{\"_checkpoint\": {\"ino\": 7, \"size\": 3, "
                            "\"training_iteration\": null}}",
                            0, &o, &t, &ck),
                   0);
  ck_assert_int_eq(ck.state, RESULT_CKPT_OK);
  ck_assert_int_eq(ck.has_iter, 0);
  /* Not {"ino": N, "size": S} of whole numbers: BAD, the caller warns. */
  const char *bad[] = {
      "{\"_checkpoint\": {\"ino\": 7}}",
      "{\"_checkpoint\": {\"ino\": -1, \"size\": 3}}",
      "{\"_checkpoint\": {\"ino\": 7.5, \"size\": 3}}",
      "{\"_checkpoint\": {\"ino\": \"7\", \"size\": 3}}",
      "{\"_checkpoint\": {\"ino\": 7, \"size\": 3, \"training_iteration\": \"x\"}}",
      "{\"_checkpoint\": [7, 3]}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_int_eq(parse_ck(bad[i], 1, &o, &t, &ck), 0);
    ck_assert_msg(ck.state == RESULT_CKPT_BAD, "%s", bad[i]);
  }
  /* A malformed line names nothing; a line without the key neither. */
  ck_assert_int_eq(parse_ck("{\"training_iteration\": \"x\", \"_checkpoint\": {\"ino\": 7, "
                            "\"size\": 3}}",
                            0, &o, &t, &ck),
                   RESULT_MALFORMED);
  ck_assert_int_eq(ck.state, RESULT_CKPT_NONE);
  ck_assert_int_eq(parse_ck("{\"training_iteration\": 2}", 0, &o, &t, &ck), 1);
  ck_assert_int_eq(ck.state, RESULT_CKPT_NONE);
  cJSON_Delete(o);
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
  tail_append(&t, "line3\nline4\n", 12); /* wraps */
  s = tail_copy(&t, &len);
  ck_assert_int_eq(len, 16);
  ck_assert_str_eq(s, "ne2\nline3\nline4\n");
  free(s);
  s = tail_last_lines(&t, 2);
  ck_assert_str_eq(s, "line3\nline4");
  free(s);
  tail_append(&t, "0123456789abcdefXYZ", 19); /* larger than the ring */
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
  tcase_add_test(tc, result_nonfinite_tokens_are_null);
  tcase_add_test(tc, result_trailing_garbage_is_malformed);
  tcase_add_test(tc, result_numbers_exact);
  tcase_add_test(tc, result_checkpoint_key_is_read_and_stripped);
  tcase_add_test(tc, linebuf_splits_across_chunks);
  tcase_add_test(tc, tail_keeps_latest_bytes_and_lines);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
