/* Unit tests of attribution (docs/scheduling.md#failures-told-apart): the
 * kind of an error, the rules as a table, the retry elsewhere and the
 * error signature. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "attribution.h"

#define TB "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"

START_TEST(kinds) {
  static const struct {
    const char *error;
    enum attr_kind kind;
  } rows[] = {
      {NULL, ATTR_KIND_OTHER},
      {"failed", ATTR_KIND_OTHER},
      {"trial_exit: your program exited with status 1", ATTR_KIND_OTHER},
      {"out_of_memory: out of memory: the trial is limited to memory_mb 64 (RLIMIT_AS); give it "
       "more\nMemoryError",
       ATTR_KIND_RESOURCE},
      {"signal: killed by signal 24 (CPU time limit exceeded)", ATTR_KIND_RESOURCE},
      /* ctune-train's exit 6 with no limit given: the GPU's memory. */
      {"out_of_memory", ATTR_KIND_DEVICE},
      {"out_of_memory: cuda: out of memory allocating 2 GiB", ATTR_KIND_DEVICE},
      {"no_device: no usable CUDA device", ATTR_KIND_DEVICE},
      {"trial_exit: your program exited with status 1\n" TB
       "RuntimeError: CUDA error: an illegal memory access was encountered",
       ATTR_KIND_DEVICE},
      {"trial_exit: your program exited with status 1\n" TB
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
       ATTR_KIND_DEVICE},
      {"trial_exit: your program exited with status 1\n" TB "NameError: name 'x' is not defined",
       ATTR_KIND_TRACEBACK},
      {"signal: killed by signal 9 (Killed)", ATTR_KIND_OTHER},
  };
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
    ck_assert_msg(attribution_kind(rows[i].error) == rows[i].kind, "row %zu: %s -> %d", i,
                  rows[i].error ? rows[i].error : "(null)", (int)attribution_kind(rows[i].error));
}
END_TEST

START_TEST(rules) {
  /* kind, had_result, quarantined, ok_elsewhere, same_elsewhere -> attribution */
  static const struct {
    struct attribution_in in;
    enum attribution want;
  } rows[] = {
      {{ATTR_KIND_OTHER, 0, 0, 0, 0}, ATTR_UNKNOWN},
      {{ATTR_KIND_OTHER, 1, 0, 0, 1}, ATTR_CONFIG},
      {{ATTR_KIND_DEVICE, 0, 0, 0, 1}, ATTR_CONFIG}, /* too big for two GPUs */
      {{ATTR_KIND_DEVICE, 0, 0, 0, 0}, ATTR_UNKNOWN},
      {{ATTR_KIND_DEVICE, 0, 1, 0, 0}, ATTR_MACHINE},
      {{ATTR_KIND_OTHER, 0, 0, 1, 1}, ATTR_MACHINE}, /* ran elsewhere beats config */
      {{ATTR_KIND_TRACEBACK, 0, 1, 0, 0}, ATTR_MACHINE},
      {{ATTR_KIND_RESOURCE, 0, 0, 0, 0}, ATTR_RESOURCE},
      {{ATTR_KIND_RESOURCE, 1, 0, 0, 1}, ATTR_RESOURCE}, /* the limit, on every machine */
      {{ATTR_KIND_RESOURCE, 0, 0, 1, 0}, ATTR_MACHINE},
      {{ATTR_KIND_TRACEBACK, 0, 0, 0, 0}, ATTR_USER_CODE},
      {{ATTR_KIND_TRACEBACK, 0, 0, 0, 1}, ATTR_USER_CODE},
      {{ATTR_KIND_TRACEBACK, 1, 0, 0, 0}, ATTR_UNKNOWN}, /* after a result: not at start */
      {{ATTR_KIND_TRACEBACK, 1, 0, 0, 1}, ATTR_CONFIG},
  };
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
    ck_assert_msg(attribution_decide(&rows[i].in) == rows[i].want, "row %zu: got %s", i,
                  attribution_name(attribution_decide(&rows[i].in)));
}
END_TEST

START_TEST(retry_elsewhere) {
  ck_assert_int_eq(attribution_retry_elsewhere(ATTR_UNKNOWN, 0, 1), 1);
  ck_assert_int_eq(attribution_retry_elsewhere(ATTR_UNKNOWN, 1, 1), 0); /* once */
  ck_assert_int_eq(attribution_retry_elsewhere(ATTR_UNKNOWN, 0, 0), 0); /* nowhere else */
  ck_assert_int_eq(attribution_retry_elsewhere(ATTR_USER_CODE, 0, 1), 0);
  ck_assert_int_eq(attribution_retry_elsewhere(ATTR_RESOURCE, 0, 1), 0);
  ck_assert_int_eq(attribution_retry_elsewhere(ATTR_CONFIG, 0, 1), 0);
}
END_TEST

START_TEST(names) {
  for (int a = ATTR_NONE; a <= ATTR_RESOURCE; a++)
    ck_assert_int_eq(attribution_parse(attribution_name((enum attribution)a)), a);
  ck_assert_int_eq(attribution_parse("bogus"), -1);
  ck_assert_int_eq(attribution_parse(NULL), -1);
  ck_assert_str_eq(attribution_name((enum attribution)99), "");
}
END_TEST

START_TEST(signature) {
  static const struct {
    const char *error;
    size_t cap;
    const char *want;
  } rows[] = {
      {NULL, 64, ""},
      {"failed", 64, "failed"},
      {"trial_exit: your program exited with status 17", 64,
       "trial_exit: your program exited with status N"},
      {"trial_exit: your program exited with status 1\n" TB
       "RuntimeError: CUDA error at 0x7ffd12ab: device 3\n\n",
       64, "trial_exit: RuntimeError: CUDA error at 0xN: device N"},
      {"signal: killed by signal 9 (Killed)", 12, "signal: kil"},
      {"internal: d\xc3\xa9j\xc3\xa0", 16, "internal: d\xc3\xa9j"}, /* never half a character */
      {"internal: d\xc3\xa9j\xc3\xa0", 13, "internal: d"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    char buf[128];
    attribution_signature(rows[i].error, buf, rows[i].cap);
    ck_assert_msg(!strcmp(buf, rows[i].want), "row %zu: '%s'", i, buf);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("attribution");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, kinds);
  tcase_add_test(tc, rules);
  tcase_add_test(tc, retry_elsewhere);
  tcase_add_test(tc, names);
  tcase_add_test(tc, signature);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
