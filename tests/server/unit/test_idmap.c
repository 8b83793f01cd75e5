/* Unit tests of idmap: empty map, put/get, growth past many doublings,
 * ids that collide in the low bits, negative and extreme ids. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "idmap.h"

START_TEST(empty) {
  struct idmap m = {0};
  size_t i = 7;
  ck_assert_int_eq(idmap_get(&m, 0, &i), -ENOENT);
  ck_assert_int_eq(idmap_get(&m, -1, &i), -ENOENT);
  ck_assert_uint_eq(i, 7);
  ck_assert_uint_eq(idmap_count(&m), 0);
  idmap_free(&m);
  idmap_free(&m); /* idempotent */
}
END_TEST

START_TEST(put_get) {
  struct idmap m = {0};
  size_t i;
  ck_assert_int_eq(idmap_put(&m, 42, 0), 0);
  ck_assert_int_eq(idmap_put(&m, -5, 1), 0);
  ck_assert_int_eq(idmap_put(&m, INT64_MAX, 2), 0);
  ck_assert_int_eq(idmap_put(&m, INT64_MIN, 3), 0);
  ck_assert_int_eq(idmap_get(&m, 42, &i), 0);
  ck_assert_uint_eq(i, 0);
  ck_assert_int_eq(idmap_get(&m, -5, &i), 0);
  ck_assert_uint_eq(i, 1);
  ck_assert_int_eq(idmap_get(&m, INT64_MAX, &i), 0);
  ck_assert_uint_eq(i, 2);
  ck_assert_int_eq(idmap_get(&m, INT64_MIN, &i), 0);
  ck_assert_uint_eq(i, 3);
  ck_assert_int_eq(idmap_get(&m, 43, &i), -ENOENT);
  ck_assert_uint_eq(idmap_count(&m), 4);
  idmap_free(&m);
  ck_assert_uint_eq(idmap_count(&m), 0);
}
END_TEST

/* The loops test each condition with a plain if and call check only on a
 * failure: every passing ck_assert records its line through a system call
 * or two, 500,000 of them here (nearly all of this test's time). */
START_TEST(grows) {
  struct idmap m = {0};
  const size_t n = 100000;
  size_t i;
  for (size_t k = 0; k < n; k++) {
    /* multiples of 1024: the same low bits before hashing */
    int rc = idmap_put(&m, (int64_t)k * 1024 - 7, n - 1 - k);
    if (rc != 0 || m.cap < 2 * m.n)
      ck_abort_msg("put %zu: rc %d, cap %zu for %zu entries", k, rc, m.cap, m.n);
  }
  ck_assert_uint_eq(idmap_count(&m), n);
  for (size_t k = 0; k < n; k++) {
    int rc = idmap_get(&m, (int64_t)k * 1024 - 7, &i);
    if (rc != 0 || i != n - 1 - k)
      ck_abort_msg("get %zu: rc %d, index %zu, want %zu", k, rc, i, n - 1 - k);
    rc = idmap_get(&m, (int64_t)k * 1024 - 6, &i);
    if (rc != -ENOENT) ck_abort_msg("get of absent id %zu: rc %d, want -ENOENT", k, rc);
  }
  idmap_free(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("idmap");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, empty);
  tcase_add_test(tc, put_get);
  tcase_add_test(tc, grows);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
