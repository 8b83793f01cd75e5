/* jsonout: every double prints as text that strtod reads back to the same
 * bits, with the fewest of 15/16/17 digits; integers print as integers;
 * the layout is cJSON's own. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonout.h"

/* The loops below check up to a million things. Check's own ck_assert
 * records its file and line in a temporary file on every call, even when it
 * passes, which cost far more than the printing under test (24 s under
 * AddressSanitizer for 500,000 values); EXPECT costs a branch and calls
 * Check only to report a failure. */
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                        \
  } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t next64(void) { /* splitmix64: reproducible, no libc rand */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* What jsonout_number promises, the slow way: the first of %.15g, %.16g,
 * %.17g that strtod reads back to v. */
static void reference(double v, char *out, size_t cap) {
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(out, cap, "%.*g", prec, v);
    if (prec == 17 || strtod(out, NULL) == v) break;
  }
}

/* Prints v, checks it reads back bit for bit and, for a non-integer, that
 * it is the reference's text to the byte (its own integer arithmetic in
 * 2^-12 <= |v| < 2^53, printf elsewhere). */
static void check_roundtrip(double v) {
  char buf[JSONOUT_NUMBER_MAX], alt[64];
  int n = jsonout_number(v, buf, sizeof buf);
  EXPECT(n > 0 && n < JSONOUT_NUMBER_MAX, "%.17g: length %d", v, n);
  EXPECT((int)strlen(buf) == n, "%.17g printed as %s: returned %d", v, buf, n);
  char *end = NULL;
  double back = strtod(buf, &end);
  EXPECT(*end == 0, "%s: trailing text", buf);
  EXPECT(same_bits(back, v), "%.17g printed as %s reads back %.17g", v, buf, back);
  if (v != floor(v)) { /* not an integer: the shortest round-tripping precision */
    reference(v, alt, sizeof alt);
    EXPECT(strcmp(buf, alt) == 0, "%.17g printed as %s, not %s", v, buf, alt);
  }
}

START_TEST(random_bit_patterns) {
  int n = 0;
  for (int i = 0; i < 200000; i++) {
    uint64_t bits = next64();
    double v;
    memcpy(&v, &bits, sizeof v);
    if (!isfinite(v)) continue;
    check_roundtrip(v);
    n++;
  }
  ck_assert_int_gt(n, 190000);
}
END_TEST

START_TEST(random_unit_values) {
  /* Losses and accuracies: where cJSON's 15 digits lost the last bit. */
  int lossy = 0;
  for (int i = 0; i < 120000; i++) {
    double v = (double)(next64() >> 11) / 9007199254740992.0; /* [0, 1) */
    check_roundtrip(v);
    char c15[64];
    snprintf(c15, sizeof c15, "%1.15g", v);
    if (strtod(c15, NULL) != v) lossy++;
  }
  ck_assert_int_gt(lossy, 600); /* the test does exercise the lossy cases */
}
END_TEST

/* Where the integer arithmetic works (2^-12 <= |v| < 2^53) and where it
 * hands over to printf: times in Unix seconds, short decimals, dyadic
 * values (the exact ties of rounding), powers of ten and two and their
 * neighbours, every binary exponent of the range. */
START_TEST(fast_path_as_printf) {
  for (int i = 0; i < 10000; i++) {
    double t = 1.7e9 + (double)(next64() % 400000000) + (double)(next64() % 1000000000) / 1e9;
    check_roundtrip(t);
    check_roundtrip((double)(next64() % 100000000) / pow(10, (double)(1 + next64() % 9)));
    check_roundtrip(-(double)(next64() >> (11 + next64() % 40)) / ldexp(1, (int)(next64() % 60)));
    double m = (double)((next64() >> 11) | (1ULL << 52));
    check_roundtrip(ldexp(m, -53 - (int)(next64() % 66)) * (i & 1 ? -1 : 1));
  }
  for (int e = -14; e <= 17; e++) {
    double p10 = pow(10, e), p2 = ldexp(1, e * 3 + 5);
    for (int d = -3; d <= 3; d++) {
      double a = p10, b = p2;
      for (int j = 0; j < (d < 0 ? -d : d); j++) {
        a = nextafter(a, d < 0 ? 0 : INFINITY);
        b = nextafter(b, d < 0 ? 0 : INFINITY);
      }
      check_roundtrip(a);
      check_roundtrip(-b);
      check_roundtrip(a * 0.5 + 0.25);
    }
  }
}
END_TEST

START_TEST(known_values) {
  char buf[JSONOUT_NUMBER_MAX];
  struct {
    double v;
    const char *want;
  } cases[] = {
      {0.08244031539977931, "0.08244031539977931"},
      {0.1, "0.1"},
      {1.5, "1.5"},
      {-2.25, "-2.25"},
      {0, "0"},
      {-0.0, "-0"},
      {3, "3"},
      {-7, "-7"},
      {8342818273689171.0, "8342818273689171"},
      {1e17, "100000000000000000"},
      {9007199254740993.0, "9007199254740992"}, /* the double nearest 2^53+1 */
      {-9223372036854775808.0, "-9223372036854775808"},
      {9223372036854775808.0, "9.223372036854776e+18"}, /* 2^63: no int64 */
      {1e300, "1e+300"},
      {5e-324, "4.94065645841247e-324"},
      {DBL_MAX, "1.7976931348623157e+308"},
      {NAN, "null"},
      {INFINITY, "null"},
      {-INFINITY, "null"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    jsonout_number(cases[i].v, buf, sizeof buf);
    ck_assert_str_eq(buf, cases[i].want);
  }
}
END_TEST

START_TEST(integers_print_as_integers) {
  char buf[JSONOUT_NUMBER_MAX], want[32];
  for (int i = 0; i < 100000; i++) {
    int64_t x = (int64_t)(next64() >> (next64() % 64)); /* every magnitude */
    if (i & 1) x = -x;
    double v = (double)x;
    if (v >= 9223372036854775808.0) continue;
    jsonout_number(v, buf, sizeof buf);
    snprintf(want, sizeof want, "%lld", (long long)(int64_t)v);
    EXPECT(strcmp(buf, want) == 0, "%.17g printed as %s, not %s", v, buf, want);
    EXPECT(strtod(buf, NULL) == v, "%s reads back %.17g, not %.17g", buf, strtod(buf, NULL), v);
  }
}
END_TEST

START_TEST(same_layout_as_cjson) {
  const char *docs[] = {
      "{\"a\":1,\"b\":[true,false,null,\"x\\\"y\\\\z\\n\\t\\u0001\"],\"c\":{},\"d\":[],"
      "\"e\":{\"f\":{\"g\":-3}},\"h\":\"caf\xc3\xa9\",\"i\":0.5}",
      "[1,2,[3,[4]],{\"k\":\"v\"}]",
      "\"only a string\"",
      "null",
  };
  for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
    cJSON *j = cJSON_Parse(docs[i]);
    ck_assert_ptr_nonnull(j);
    char *a = cJSON_PrintUnformatted(j), *b = jsonout_print(j);
    char *c = cJSON_Print(j), *d = jsonout_print_pretty(j);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(c, d);
    free(a), free(b), free(c), free(d);
    cJSON_Delete(j);
  }
}
END_TEST

START_TEST(tree_roundtrip_and_raw) {
  const char *in = "{\"training_iteration\":25,\"loss\":0.08244031539977931,"
                   "\"big\":8342818273689171,\"seq\":100000000000000000}";
  cJSON *j = cJSON_Parse(in);
  ck_assert_ptr_nonnull(j);
  char *out = jsonout_print(j);
  ck_assert_str_eq(out, in);
  char *cj = cJSON_PrintUnformatted(j); /* what the server used to store */
  ck_assert_str_ne(cj, in);
  free(cj);
  free(out);
  /* NaN set by code prints null, so the text stays JSON. */
  cJSON_AddNumberToObject(j, "nan", NAN);
  ck_assert_ptr_nonnull(jsonout_add_int64(j, "exact", INT64_MAX));
  ck_assert_ptr_nonnull(cJSON_AddItemToObject(j, "u", jsonout_uint64(UINT64_MAX)) ? j : NULL);
  out = jsonout_print(j);
  ck_assert_ptr_nonnull(strstr(out, "\"nan\":null,\"exact\":9223372036854775807,"
                                    "\"u\":18446744073709551615}"));
  cJSON *back = cJSON_Parse(out);
  ck_assert_ptr_nonnull(back);
  cJSON_Delete(back);
  free(out);
  cJSON_Delete(j);
  ck_assert_ptr_null(jsonout_print(NULL));
}
END_TEST

int main(void) {
  Suite *s = suite_create("jsonout");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, random_bit_patterns);
  tcase_add_test(tc, random_unit_values);
  tcase_add_test(tc, known_values);
  tcase_add_test(tc, fast_path_as_printf);
  tcase_add_test(tc, integers_print_as_integers);
  tcase_add_test(tc, same_layout_as_cjson);
  tcase_add_test(tc, tree_roundtrip_and_raw);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
