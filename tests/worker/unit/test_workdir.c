/* Trial directory housekeeping: ended trials' dirs go, except the newest
 * few and the ones the worker still needs; other entries are left alone. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "workdir.h"

static char root[64];

static void mk(const char *rel, long age_s) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  char f[300];
  snprintf(f, sizeof f, "%s/stdout.log", p);
  FILE *fp = fopen(f, "w");
  ck_assert_ptr_nonnull(fp);
  fputs("log\n", fp);
  fclose(fp);
  struct timeval tv[2];
  gettimeofday(&tv[0], NULL);
  tv[0].tv_sec -= age_s;
  tv[1] = tv[0];
  ck_assert_int_eq(utimes(p, tv), 0);
}

static int exists(const char *rel) {
  char p[256];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", root, rel);
  return stat(p, &st) == 0;
}

static int needed(void *arg, int id) {
  (void)arg;
  return id == 2 || id == 7; /* running, or messages still queued */
}

START_TEST(sweep_keeps_needed_and_newest) {
  snprintf(root, sizeof root, "/tmp/ctune-workdir-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  char work[80];
  snprintf(work, sizeof work, "%s", root);
  ck_assert_int_eq(workdir_sweep_trials(work, 0, NULL, NULL), 0); /* no trials dir yet */
  strcat(root, "/trials");
  ck_assert_int_eq(mkdir(root, 0755), 0);
  for (int id = 1; id <= 8; id++) {
    char n[16];
    snprintf(n, sizeof n, "%d", id);
    mk(n, 100 - id * 10); /* higher id = more recent */
  }
  mk("notes", 1000); /* not a trial id: never touched */
  mk("012", 1000);
  /* Keep the 2 newest unneeded (8 and 6); 2 and 7 are needed. */
  ck_assert_int_eq(workdir_sweep_trials(work, 2, needed, NULL), 4);
  ck_assert(!exists("1") && !exists("3") && !exists("4") && !exists("5"));
  ck_assert(exists("2") && exists("7") && exists("6") && exists("8"));
  ck_assert(exists("notes") && exists("012"));
  ck_assert_int_eq(workdir_sweep_trials(work, 0, needed, NULL), 2);
  ck_assert(exists("2") && exists("7") && !exists("6") && !exists("8"));
  ck_assert_int_eq(workdir_rm_rf(work), 0);
  ck_assert(access(work, F_OK) != 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("workdir");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, sweep_keeps_needed_and_newest);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
