/* Trial directory housekeeping: ended trials' dirs go, except the newest
 * few and the ones the worker still needs; other entries are left alone. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/xattr.h>
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
  ck_assert_int_eq(workdir_remove_gone(work, 0, 0, NULL), 2);
  ck_assert(!exists(".gone.0") && !exists(".gone.1") && exists("6") && exists("notes"));
  ck_assert_int_eq(workdir_remove_gone(work, 0, 0, NULL), 0);
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

/* A let-go dir <root>/.gone.<k>, made as a spare is and then used: output
 * in stdout.log, the modes changed. */
static void gone_dir(unsigned k) {
  ck_assert_int_eq(workdir_spare_make(root, 1000 + k), 0);
  char from[300], to[300];
  snprintf(from, sizeof from, "%s/.spare.%u", root, 1000 + k);
  snprintf(to, sizeof to, "%s/.gone.%u", root, k);
  ck_assert_int_eq(rename(from, to), 0);
  char rel[32];
  snprintf(rel, sizeof rel, ".gone.%u/stdout.log", k);
  put(rel, "the trial's output\n");
  snprintf(to, sizeof to, "%s/.gone.%u/stderr.log", root, k);
  ck_assert_int_eq(chmod(to, 0644), 0);
  snprintf(to, sizeof to, "%s/.gone.%u", root, k);
  ck_assert_int_eq(chmod(to, 0755), 0);
}

static void at(char *buf, size_t len, const char *rel) { snprintf(buf, len, "%s/%s", root, rel); }

static long size_of(const char *rel) {
  char p[300];
  struct stat st;
  at(p, sizeof p, rel);
  return lstat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* Ended trials' dirs become spares only when nothing but their two logs
 * is left, each open nowhere and with no other link or xattr; the logs are
 * emptied and the modes reset. Anything else is deleted, and nothing
 * outside the dir is touched. */
START_TEST(gone_dirs_reused_only_when_clean) {
  snprintf(root, sizeof root, "/tmp/ctune-workdir-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  char work[80], p[300], q[300];
  snprintf(work, sizeof work, "%s", root);
  static const char victim[] = "not the worker's to empty\n";
  put("victim", victim); /* outside trials/ */
  int victim_mode = mode_of("victim");
  ck_assert_int_eq(chmod(work, 0700), 0);
  strcat(root, "/trials");
  ck_assert_int_eq(mkdir(root, 0700), 0);
  for (unsigned k = 0; k <= 11; k++) gone_dir(k);
  put(".gone.1/extra", ""); /* another entry */
  at(p, sizeof p, ".gone.2/stdout.log");
  ck_assert_int_eq(unlink(p), 0);
  ck_assert_int_eq(symlink("../../victim", p), 0); /* a symlink for a log */
  at(p, sizeof p, ".gone.3/stderr.log");
  snprintf(q, sizeof q, "%s/victim", work);
  ck_assert_int_eq(unlink(p), 0);
  ck_assert_int_eq(link(q, p), 0); /* a hard link for a log */
  at(p, sizeof p, ".gone.4/stderr.log");
  int xattrs = setxattr(p, "user.x", "1", 1, 0) == 0; /* user xattrs refused: no such case */
  at(p, sizeof p, ".gone.5");
  ck_assert_int_eq(setxattr(p, "user.x", "1", 1, 0) == 0, xattrs);
  at(p, sizeof p, ".gone.6/sub");
  ck_assert_int_eq(mkdir(p, 0700), 0); /* a subdir */
  at(p, sizeof p, ".gone.7/stdout.log");
  ck_assert_int_eq(unlink(p), 0); /* a log missing */
  at(p, sizeof p, ".gone.8/stdout.log");
  int held = open(p, O_RDONLY); /* a log still open elsewhere */
  ck_assert_int_ge(held, 0);
  at(p, sizeof p, ".gone.9/stderr.log");
  ck_assert_int_eq(unlink(p), 0);
  ck_assert_int_eq(mkfifo(p, 0600), 0); /* a FIFO: never opened */
  at(p, sizeof p, ".gone.10");
  snprintf(q, sizeof q, "%s/outside", work);
  ck_assert_int_eq(rename(p, q), 0);
  ck_assert_int_eq(symlink("../outside", p), 0); /* the dir itself a symlink, to a clean dir */
  at(p, sizeof p, ".gone.11/stdout.log");
  int fd = open(p, O_RDONLY), flags = 0; /* an inode flag (chattr +d), where the fs has them */
  ck_assert_int_ge(fd, 0);
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
    flags |= FS_NODUMP_FL;
    ck_assert_int_eq(ioctl(fd, FS_IOC_SETFLAGS, &flags), 0);
  } else {
    put(".gone.11/extra", ""); /* no flags here: dirty another way */
  }
  close(fd);
  uint64_t reused = 0;
  ck_assert_int_eq(workdir_remove_gone(work, 20, 64, &reused), 11);
  ck_assert_uint_eq(reused, 1); /* only .gone.0, as spare 20 */
  close(held);
  for (unsigned k = 0; k <= 11; k++) {
    char n[16];
    snprintf(n, sizeof n, ".gone.%u", k);
    ck_assert_msg(!exists(n), "%s left", n);
  }
  ck_assert_int_eq(mode_of(".spare.20"), 0700);
  ck_assert_int_eq(mode_of(".spare.20/stderr.log"), 0600);
  ck_assert_int_eq(size_of(".spare.20/stdout.log"), 0);
  ck_assert_int_eq(size_of("../victim"), (long)strlen(victim));
  ck_assert_int_eq(mode_of("../victim"), victim_mode);
  ck_assert(size_of("../outside/stdout.log") > 0 && mode_of("../outside") == 0755);
  ck_assert(access(work, F_OK) == 0);
  /* Adopted as intact at the next start, as a fresh spare would be. */
  struct workdir_spares s;
  ck_assert_int_eq(workdir_spares_open(&s, work), 0);
  ck_assert_uint_eq(s.n, 1);
  ck_assert_uint_eq(s.seq[0], 20);
  workdir_spares_close(&s);
  /* No more spares than asked for: the rest are deleted. */
  for (unsigned k = 0; k < 3; k++) gone_dir(k);
  reused = 0;
  ck_assert_int_eq(workdir_remove_gone(work, 30, 2, &reused), 1);
  ck_assert_uint_eq(reused, 3);
  ck_assert(exists(".spare.30") && exists(".spare.31") && !exists(".spare.32"));
  ck_assert(!exists(".gone.0") && !exists(".gone.1") && !exists(".gone.2"));
  ck_assert_int_eq(workdir_spares_open(&s, work), 0);
  ck_assert_uint_eq(s.n, 3);
  workdir_spares_close(&s);
  ck_assert_int_eq(workdir_rm_rf(work), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("workdir");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, sweep_keeps_needed_and_newest);
  tcase_add_test(tc, spares_made_taken_and_adopted);
  tcase_add_test(tc, gone_dirs_reused_only_when_clean);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
