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
  ck_assert_int_eq(workdir_sweep_trials(work, 0, NULL, NULL, NULL), 0); /* no trials dir yet */
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
  ck_assert_int_eq(workdir_sweep_trials(work, 2, needed, NULL, NULL), 4);
  ck_assert(!exists("1") && !exists("3") && !exists("4") && !exists("5"));
  ck_assert(exists("2") && exists("7") && exists("6") && exists("8"));
  ck_assert(exists("notes") && exists("012"));
  /* Swept out of the way first (renamed at once), removed later. */
  unsigned gone = 0;
  ck_assert_int_eq(workdir_sweep_trials(work, 0, needed, NULL, &gone), 2);
  ck_assert_uint_eq(gone, 2);
  ck_assert(exists("2") && exists("7") && !exists("6") && !exists("8"));
  ck_assert(exists(".gone.0") && exists(".gone.1"));
  mk("6", 0); /* a new attempt of a swept trial gets a dir of its own */
  ck_assert_int_eq(workdir_remove_gone(work), 2);
  ck_assert(!exists(".gone.0") && !exists(".gone.1") && exists("6") && exists("notes"));
  ck_assert_int_eq(workdir_remove_gone(work), 0);
  ck_assert_int_eq(workdir_rm_rf(work), 0);
  ck_assert(access(work, F_OK) != 0);
}
END_TEST

static void put(const char *rel, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  FILE *fp = fopen(p, "w");
  ck_assert_ptr_nonnull(fp);
  fputs(text, fp);
  fclose(fp);
}

static int mode_of(const char *rel) {
  char p[256];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", root, rel);
  return lstat(p, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* Spares: made as fresh dirs with both logs, renamed into place, never over
 * an existing dir; at the next start only the intact ones are adopted. */
START_TEST(spares_made_taken_and_adopted) {
  snprintf(root, sizeof root, "/tmp/ctune-workdir-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  char work[80];
  snprintf(work, sizeof work, "%s", root);
  struct workdir_spares s;
  ck_assert_int_eq(workdir_spares_open(&s, work), 0); /* no trials dir yet */
  ck_assert_uint_eq(s.n, 0);
  char dir[160];
  snprintf(dir, sizeof dir, "%s/trials/1", work);
  ck_assert_int_eq(workdir_spare_take(&s, dir), -ENOENT); /* none: made at the lease */
  ck_assert_int_eq(workdir_spare_make(s.trials, 0), -ENOENT);
  strcat(root, "/trials");
  ck_assert_int_eq(mkdir(root, 0700), 0);
  mode_t um = umask(0222); /* the modes are the spare's own, not the umask's */
  for (unsigned i = 0; i < 3; i++) {
    ck_assert_int_eq(workdir_spare_make(s.trials, s.next), 0);
    ck_assert_int_eq(workdir_spares_add(&s, s.next++), 0);
  }
  umask(um);
  ck_assert_int_eq(mode_of(".spare.2"), 0700);
  ck_assert_int_eq(mode_of(".spare.2/stdout.log"), 0600);
  ck_assert_int_eq(mode_of(".spare.2/stderr.log"), 0600);
  ck_assert_int_eq(workdir_spare_make(s.trials, 2), -EEXIST); /* never over a spare */
  /* Taken: the newest spare becomes the trial's dir, logs and all. */
  ck_assert_int_eq(workdir_spare_take(&s, dir), 0);
  ck_assert_uint_eq(s.n, 2);
  ck_assert(!exists(".spare.2") && mode_of("1") == 0700 && mode_of("1/stdout.log") == 0600 &&
            mode_of("1/stderr.log") == 0600);
  /* An existing dir (an earlier attempt's, even an empty one) is kept and
   * the spare stays listed. */
  ck_assert_int_eq(mkdir(dir, 0700) == 0 || errno == EEXIST, 1);
  ck_assert_int_eq(workdir_spare_take(&s, dir), -EEXIST);
  char empty[160];
  snprintf(empty, sizeof empty, "%s/trials/2", work);
  ck_assert_int_eq(mkdir(empty, 0700), 0);
  ck_assert_int_eq(workdir_spare_take(&s, empty), -EEXIST);
  ck_assert_uint_eq(s.n, 2);
  ck_assert(exists(".spare.1") && exists(".spare.0"));
  /* A spare that vanished is forgotten. */
  char gone[160];
  snprintf(gone, sizeof gone, "%s/.spare.1", root);
  ck_assert_int_eq(workdir_rm_rf(gone), 0);
  snprintf(dir, sizeof dir, "%s/trials/3", work);
  ck_assert_int_eq(workdir_spare_take(&s, dir), -ENOENT);
  ck_assert_uint_eq(s.n, 1);
  workdir_spares_close(&s);
  /* The next start: intact spares are adopted, anything else named as a
   * spare is removed, numbering goes on past the highest. */
  for (unsigned i = 5; i <= 10; i++) ck_assert_int_eq(workdir_spare_make(root, i), 0);
  put(".spare.5/stdout.log", "an old line\n"); /* not empty */
  put(".spare.6/extra", "");                   /* something else inside */
  char p[300];
  snprintf(p, sizeof p, "%s/.spare.7", root);
  ck_assert_int_eq(chmod(p, 0755), 0); /* another mode */
  snprintf(p, sizeof p, "%s/.spare.8/stderr.log", root);
  char q[300];
  snprintf(q, sizeof q, "%s/linked", root);
  ck_assert_int_eq(link(p, q), 0); /* a log with a second link */
  snprintf(p, sizeof p, "%s/.spare.9/stdout.log", root);
  ck_assert_int_eq(unlink(p), 0);
  ck_assert_int_eq(symlink("/etc/passwd", p), 0); /* a symlink for a log */
  put(".spare.x", "");                            /* not a spare's name: left alone */
  ck_assert_int_eq(workdir_spares_open(&s, work), 0);
  ck_assert_uint_eq(s.n, 2); /* 0 and 10 */
  ck_assert_uint_eq(s.next, 11);
  ck_assert(exists(".spare.0") && exists(".spare.10") && exists(".spare.x"));
  for (int i = 5; i <= 9; i++) {
    char n[16];
    snprintf(n, sizeof n, ".spare.%d", i);
    ck_assert_msg(!exists(n), "%s adopted or left", n);
  }
  workdir_spares_close(&s);
  ck_assert_int_eq(workdir_rm_rf(work), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("workdir");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, sweep_keeps_needed_and_newest);
  tcase_add_test(tc, spares_made_taken_and_adopted);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
