/* Outbox: FIFO order, bound, persistence across a restart, backoff. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outbox.h"

static char dir[256];

static void mk(void) {
  snprintf(dir, sizeof dir, "/tmp/ctune-outbox-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static int count_files(void) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void rm(void) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[512];
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}

START_TEST(fifo_bound_and_end_reserve) {
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, NULL, 2), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 1, "/r1", "{\"a\":1}"), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 1, "/r1", "{\"a\":2}"), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 1, "/r1", "{\"a\":3}"), -ENOSPC);
  ck_assert(!outbox_has_room(&ob));
  /* A trial's end is still accepted when results are at the bound. */
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_END, 1, "/c1", "{}"), 0);
  ck_assert_str_eq(outbox_head(&ob)->body, "{\"a\":1}");
  outbox_ack(&ob);
  ck_assert(outbox_has_room(&ob));
  ck_assert_str_eq(outbox_head(&ob)->body, "{\"a\":2}");
  outbox_ack(&ob);
  ck_assert_str_eq(outbox_head(&ob)->path, "/c1");
  outbox_ack(&ob);
  ck_assert_ptr_null(outbox_head(&ob));
  outbox_ack(&ob);  /* harmless on empty */
  outbox_close(&ob);
}
END_TEST

START_TEST(persists_across_restart_exactly_once) {
  mk();
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, dir, 100), 0);
  char body[64];
  for (int i = 1; i <= 5; i++) {
    snprintf(body, sizeof body, "{\"training_iteration\":%d}", i);
    ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 3, "/api/v1/trials/3/results", body), 0);
  }
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_END, 3, "/api/v1/trials/3/complete", "{}"), 0);
  outbox_ack(&ob);  /* iteration 1 delivered */
  outbox_ack(&ob);  /* iteration 2 delivered */
  ck_assert_int_eq(count_files(), 4);
  outbox_close(&ob);  /* the worker dies here */

  /* A half-written message from the crash must not come back. */
  char junk[512];
  snprintf(junk, sizeof junk, "%s/0000000000000099.json.tmp", dir);
  FILE *f = fopen(junk, "w");
  fputs("{\"trial_", f);
  fclose(f);

  ck_assert_int_eq(outbox_open(&ob, dir, 100), 0);
  ck_assert_int_eq((int)ob.n, 4);
  ck_assert_int_eq((int)ob.n_results, 3);
  for (int i = 3; i <= 5; i++) {
    snprintf(body, sizeof body, "{\"training_iteration\":%d}", i);
    ck_assert_str_eq(outbox_head(&ob)->body, body);
    ck_assert_int_eq(outbox_head(&ob)->trial_id, 3);
    ck_assert_int_eq(outbox_head(&ob)->kind, OUTBOX_RESULT);
    outbox_ack(&ob);
  }
  ck_assert_int_eq(outbox_head(&ob)->kind, OUTBOX_END);
  /* New messages continue after the old sequence numbers. */
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 4, "/x", "{\"n\":1}"), 0);
  ck_assert_str_eq(outbox_head(&ob)->path, "/api/v1/trials/3/complete");
  outbox_ack(&ob);
  ck_assert_str_eq(outbox_head(&ob)->path, "/x");
  outbox_ack(&ob);
  ck_assert_int_eq(count_files(), 0);
  outbox_close(&ob);
  rm();
}
END_TEST

START_TEST(backoff_doubles_and_caps) {
  ck_assert_int_eq(outbox_backoff_ms(0), 0);
  ck_assert_int_eq(outbox_backoff_ms(1), 100);
  ck_assert_int_eq(outbox_backoff_ms(2), 200);
  ck_assert_int_eq(outbox_backoff_ms(5), 1600);
  ck_assert_int_eq(outbox_backoff_ms(8), 10000);
  ck_assert_int_eq(outbox_backoff_ms(1000), 10000);
  struct outbox ob;
  outbox_open(&ob, NULL, 10);
  outbox_push(&ob, OUTBOX_RESULT, 1, "/a", "{}");
  ck_assert(outbox_ready(&ob, 1000));
  outbox_failed(&ob, 1000);
  outbox_failed(&ob, 1000);
  ck_assert(!outbox_ready(&ob, 1199));
  ck_assert(outbox_ready(&ob, 1200));
  outbox_ack(&ob);  /* delivery resets the backoff */
  ck_assert_int_eq(ob.attempts, 0);
  ck_assert(!outbox_ready(&ob, 0));  /* empty */
  outbox_close(&ob);
}
END_TEST

START_TEST(unwritable_dir_refuses) {
  struct outbox ob;
  ck_assert_int_lt(outbox_open(&ob, "/proc/self/nonexistent/outbox", 10), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("outbox");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, fifo_bound_and_end_reserve);
  tcase_add_test(tc, persists_across_restart_exactly_once);
  tcase_add_test(tc, backoff_doubles_and_caps);
  tcase_add_test(tc, unwritable_dir_refuses);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
