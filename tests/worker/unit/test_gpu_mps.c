/* ctune-worker --mps: where the MPS pipes go (gpu_mps.c). The daemon's
 * sockets live in CUDA_MPS_PIPE_DIRECTORY and a socket path has 108 bytes at
 * most, so a deep work dir puts the pipes under /tmp/ctune-mps-<hash>, a
 * directory that must be ours. The daemon is a fake
 * nvidia-cuda-mps-control on PATH that creates its control socket file. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"

static char tmp[64];

/* tmp/<deep>: a work dir whose <work>/mps/pipe/control would not fit
 * sun_path (108 bytes). */
static void deep_dir(const char *tag, char *out, size_t len) {
  snprintf(out, len, "%s/%s-%s", tmp, tag,
           "a-work-dir-nested-deep-enough-that-its-mps-pipes-would-not-fit-a-unix-socket-path");
  ck_assert_int_eq(mkdir(out, 0755), 0);
  ck_assert_int_gt(strlen(out) + strlen("/mps/pipe/control"), 107);
}

static void setup(void) {
  snprintf(tmp, sizeof tmp, "/tmp/ctune-test-mps-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
  char bin[96], fake[160];
  snprintf(bin, sizeof bin, "%s/bin", tmp);
  ck_assert_int_eq(mkdir(bin, 0755), 0);
  snprintf(fake, sizeof fake, "%s/nvidia-cuda-mps-control", bin);
  FILE *f = fopen(fake, "w");
  ck_assert_ptr_nonnull(f);
  fputs("#!/bin/sh\n"
        "[ \"$1\" = -d ] && : > \"$CUDA_MPS_PIPE_DIRECTORY/control\"\n"
        "test -e \"$CUDA_MPS_PIPE_DIRECTORY/control\"\n",
        f);
  fclose(f);
  ck_assert_int_eq(chmod(fake, 0755), 0);
  setenv("PATH", bin, 1);
}

static void teardown(void) {
  char cmd[600];
  const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (pipe && !strncmp(pipe, "/tmp/ctune-mps-", 15)) {
    snprintf(cmd, sizeof cmd, "/bin/rm -rf '%s'", pipe);
    ck_assert_int_eq(system(cmd), 0);
  }
  snprintf(cmd, sizeof cmd, "/bin/rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(short_work_dir_keeps_the_pipes) {
  char out[256];
  ck_assert_int_eq(gpu_mps_pipe_path("/var/lib/ctune", 1000, out, sizeof out), 0);
  ck_assert_str_eq(out, "/var/lib/ctune/mps/pipe");
}
END_TEST

START_TEST(deep_work_dir_pipes_under_tmp) {
  char deep[400], a[256], b[256], c[256], d[256];
  deep_dir("p", deep, sizeof deep);
  ck_assert_int_eq(gpu_mps_pipe_path(deep, 1000, a, sizeof a), 0);
  ck_assert_int_eq(gpu_mps_pipe_path(deep, 1000, b, sizeof b), 0);
  ck_assert_int_eq(gpu_mps_pipe_path(deep, 1001, c, sizeof c), 0);
  deep[strlen(deep) - 1] = 'X';
  ck_assert_int_eq(gpu_mps_pipe_path(deep, 1000, d, sizeof d), 0);
  ck_assert_msg(!strncmp(a, "/tmp/ctune-mps-", 15) && strlen(a) == 31, "pipe dir %s", a);
  ck_assert_str_eq(a, b); /* the same worker finds its daemon again */
  ck_assert_str_ne(a, c); /* another user gets another */
  ck_assert_str_ne(a, d); /* and another work dir */
  ck_assert_int_eq(gpu_mps_pipe_path(deep, 1000, a, 20), -ENAMETOOLONG);
}
END_TEST

START_TEST(start_with_a_deep_work_dir) {
  char deep[400], err[512] = "", log[500];
  deep_dir("s", deep, sizeof deep);
  ck_assert_msg(gpu_mps_start(deep, err, sizeof err) == 0, "%s", err);
  const char *pipe = gpu_mps_pipe_dir();
  ck_assert_ptr_nonnull(pipe);
  ck_assert_str_eq(getenv("CUDA_MPS_PIPE_DIRECTORY"), pipe);
  ck_assert_msg(strlen(pipe) + strlen("/control") < 108, "pipe dir %s", pipe);
  char control[400];
  snprintf(control, sizeof control, "%s/control", pipe); /* the fake daemon made it */
  ck_assert_int_eq(access(control, F_OK), 0);
  struct stat st;
  ck_assert_int_eq(lstat(pipe, &st), 0);
  ck_assert(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0755);
  snprintf(log, sizeof log, "%s/mps/log", deep); /* logs are files: they stay */
  ck_assert_str_eq(gpu_mps_log_dir(), log);
  /* started again on the same work dir: joins the same daemon */
  ck_assert_msg(gpu_mps_start(deep, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(gpu_mps_pipe_dir(), getenv("CUDA_MPS_PIPE_DIRECTORY"));
}
END_TEST

START_TEST(a_squatted_pipe_dir_is_refused) {
  char deep[400], pipe[256], err[512] = "";
  deep_dir("q", deep, sizeof deep);
  ck_assert_int_eq(gpu_mps_pipe_path(deep, (unsigned)geteuid(), pipe, sizeof pipe), 0);
  ck_assert_int_eq(symlink(tmp, pipe), 0); /* someone else's link in /tmp */
  int rc = gpu_mps_start(deep, err, sizeof err);
  ck_assert_int_eq(unlink(pipe), 0);
  ck_assert_int_eq(rc, -EEXIST);
  ck_assert_msg(strstr(err, pipe) && strstr(err, "not a directory owned by uid"), "%s", err);
  ck_assert_ptr_null(gpu_mps_pipe_dir());
}
END_TEST

int main(void) {
  Suite *s = suite_create("gpu_mps");
  TCase *tc = tcase_create("pipes");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, short_work_dir_keeps_the_pipes);
  tcase_add_test(tc, deep_work_dir_pipes_under_tmp);
  tcase_add_test(tc, start_with_a_deep_work_dir);
  tcase_add_test(tc, a_squatted_pipe_dir_is_refused);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
