/* Isolation policy: which worker variables reach a trial, which trainables
 * and programs may run, and opening trial files without following links. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "isolate.h"
#include "trainable.h"

START_TEST(env_passes_only_the_base_and_pass_env) {
  struct isolate iso = {.trainables = ISOLATE_ALL};
  char err[200];
  ck_assert_int_eq(isolate_parse_pass_env(&iso, "LD_LIBRARY_PATH,CUDA_HOME", err, sizeof err), 0);
  ck_assert(isolate_env_passes(&iso, "PATH=/bin"));
  ck_assert(isolate_env_passes(&iso, "LC_NUMERIC=C"));
  ck_assert(isolate_env_passes(&iso, "LD_LIBRARY_PATH=/opt/cuda/lib"));
  ck_assert(isolate_env_passes(NULL, "HOME=/root"));
  ck_assert(!isolate_env_passes(&iso, "CTUNE_TOKEN=secret"));
  ck_assert(!isolate_env_passes(&iso, "CTUNE_TOKEN_FILE=/etc/ctune/tokens"));
  ck_assert(!isolate_env_passes(&iso, "AWS_SECRET_ACCESS_KEY=x"));
  ck_assert(!isolate_env_passes(&iso, "PATHX=/bin"));
  ck_assert(!isolate_env_passes(NULL, "LD_LIBRARY_PATH=/x"));
  ck_assert_int_eq(isolate_parse_pass_env(&iso, "A=1", err, sizeof err), -EINVAL);
  isolate_free(&iso);
}
END_TEST

START_TEST(trainables_kinds_and_allowed_programs) {
  struct isolate iso = {0};
  char err[300];
  char *res = NULL;
  ck_assert_int_eq(isolate_parse_trainables(&iso, "builtin", err, sizeof err), 0);
  ck_assert_int_eq(isolate_check(&iso, "builtin", NULL, NULL, NULL, &res, err, sizeof err), 0);
  ck_assert_int_eq(isolate_check(&iso, "command", NULL, NULL, NULL, &res, err, sizeof err), -EPERM);
  ck_assert_ptr_nonnull(strstr(err, "--trainables builtin"));
  ck_assert_int_eq(isolate_parse_trainables(&iso, "nope", err, sizeof err), -EINVAL);
  ck_assert_int_eq(isolate_parse_trainables(&iso, "builtin,command", err, sizeof err), 0);
  ck_assert_uint_eq(iso.trainables, ISOLATE_ALL);

  ck_assert_int_eq(isolate_parse_allow(&iso, "/bin/sh", err, sizeof err), 0);
  ck_assert_int_eq(isolate_parse_allow(&iso, "relative/x", err, sizeof err), -EINVAL);
  ck_assert_int_lt(isolate_parse_allow(&iso, "/nonexistent/prog", err, sizeof err), 0);
  char *ok_argv[] = {"sh", "-c", "true", NULL};
  char *env[] = {"PATH=/nonexistent:/bin", NULL};
  ck_assert_int_eq(isolate_check(&iso, "command", ok_argv, env, "/", &res, err, sizeof err), 0);
  ck_assert_str_eq(res, "/bin/sh"); /* what runs is what was checked */
  free(res);
  char *bad_argv[] = {"/bin/cat", NULL};
  ck_assert_int_eq(isolate_check(&iso, "command", bad_argv, env, "/", &res, err, sizeof err),
                   -EPERM);
  ck_assert_ptr_nonnull(strstr(err, "not allowed"));
  char *missing[] = {"no-such-program-here", NULL};
  ck_assert_int_eq(isolate_check(&iso, "command", missing, env, "/", &res, err, sizeof err),
                   -EPERM);
  isolate_free(&iso);
}
END_TEST

START_TEST(open_file_refuses_links_fifos_and_dirs) {
  char dir[] = "/tmp/ctune-isolate-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char reg[PATH_MAX], lnk[PATH_MAX], fifo[PATH_MAX], sub[PATH_MAX];
  snprintf(reg, sizeof reg, "%s/secret", dir);
  snprintf(lnk, sizeof lnk, "%s/checkpoint.bin", dir);
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  FILE *f = fopen(reg, "w");
  fputs("secret", f);
  fclose(f);
  ck_assert_int_eq(symlink(reg, lnk), 0);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  struct stat st;
  int fd = isolate_open_file(reg, O_RDONLY, 0, &st);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(st.st_size, 6);
  close(fd);
  ck_assert_int_eq(isolate_open_file(lnk, O_RDONLY, 0, &st), -ELOOP);
  ck_assert_int_eq(isolate_open_file(lnk, O_WRONLY | O_CREAT | O_APPEND, 0600, NULL), -ELOOP);
  ck_assert_int_eq(isolate_open_file(fifo, O_RDONLY, 0, &st), -EINVAL); /* never blocks */
  ck_assert_int_eq(isolate_open_file(fifo, O_WRONLY, 0, &st), -ENXIO);  /* no reader */
  ck_assert_int_eq(isolate_open_file(sub, O_RDONLY, 0, &st), -EINVAL);
  unlink(lnk);
  unlink(reg);
  unlink(fifo);
  rmdir(sub);
  rmdir(dir);
}
END_TEST

/* Rule: a path to hide from trials or show them is kept absolute: its real
 * path when it exists (a symlink resolved), else joined to the cwd (a
 * database's -wal may not exist yet; the supervisor resolves paths from the
 * trial's cwd). More than ISOLATE_MAX_VIEW: -E2BIG. */
START_TEST(view_paths_are_absolute) {
  char dir[] = "/tmp/ctune-isolate-view.XXXXXX", link[64], real[PATH_MAX], want[PATH_MAX + 16];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_ptr_nonnull(realpath(dir, real));
  snprintf(link, sizeof link, "%s/link", dir);
  ck_assert_int_eq(symlink(dir, link), 0);
  char *old = getcwd(NULL, 0);
  ck_assert_int_eq(chdir(dir), 0);
  struct isolate iso = {0};
  ck_assert_int_eq(isolate_add_view(&iso, 0, link), 0);
  ck_assert_int_eq(isolate_add_view(&iso, 0, "db-wal"), 0);
  ck_assert_int_eq(isolate_add_view(&iso, 1, "/not/there"), 0);
  ck_assert_str_eq(iso.hide[0], real);
  snprintf(want, sizeof want, "%s/db-wal", real);
  ck_assert_str_eq(iso.hide[1], want);
  ck_assert_str_eq(iso.show[0], "/not/there");
  ck_assert_int_eq(iso.nhide, 2);
  ck_assert_int_eq(iso.nshow, 1);
  while (iso.nhide < ISOLATE_MAX_VIEW) ck_assert_int_eq(isolate_add_view(&iso, 0, "x"), 0);
  ck_assert_int_eq(isolate_add_view(&iso, 0, "x"), -E2BIG);
  isolate_free(&iso);
  ck_assert_int_eq(iso.nhide, 0);
  ck_assert_int_eq(chdir(old), 0);
  free(old);
  unlink(link);
  rmdir(dir);
}
END_TEST

START_TEST(trainable_env_is_clean_and_run_as_home) {
  char *base[] = {"PATH=/usr/bin:/bin", "HOME=/root",   "USER=root", "CTUNE_TOKEN=secret",
                  "MY_KEY=k",           "LANG=C.UTF-8", NULL};
  struct isolate iso = {.trainables = ISOLATE_ALL, .run_as = 1, .uid = 65534, .gid = 65534};
  snprintf(iso.user, sizeof iso.user, "nobody");
  snprintf(iso.home, sizeof iso.home, "/nonexistent");
  struct trainable_ctx c = {"/bin/ctune-train", "/w/trials/3", 0, 1, "", 0, 0, base, &iso};
  cJSON *t = cJSON_Parse("{\"id\": 3, \"config\": {}, \"trainable\": {\"type\": \"command\","
                         " \"argv\": [\"true\"], \"env\": {\"MY_KEY\": \"from-config\"}}}");
  struct trainable_cmd cmd;
  char err[200];
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  int saw_home = 0, saw_key = 0, saw_lang = 0;
  for (char **e = cmd.env; *e; e++) {
    ck_assert_msg(strncmp(*e, "CTUNE_TOKEN=", 12) != 0, "token leaked: %s", *e);
    if (!strcmp(*e, "HOME=/nonexistent")) saw_home = 1;
    if (!strcmp(*e, "MY_KEY=from-config")) saw_key = 1; /* the config's, not the worker's */
    if (!strcmp(*e, "LANG=C.UTF-8")) saw_lang = 1;
    ck_assert_str_ne(*e, "USER=root");
  }
  ck_assert(saw_home && saw_key && saw_lang);
  trainable_cmd_free(&cmd);
  /* No PATH at all in the worker: a sane default. */
  char *none[] = {NULL};
  c.base_env = none;
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), 0);
  int saw_path = 0;
  for (char **e = cmd.env; *e; e++)
    if (!strcmp(*e, "PATH=" ISOLATE_DEFAULT_PATH)) saw_path = 1;
  ck_assert(saw_path);
  trainable_cmd_free(&cmd);
  /* A refused kind is a bad_config (-EINVAL) naming the flag. */
  iso.trainables = ISOLATE_BUILTIN;
  ck_assert_int_eq(trainable_build(t, &c, &cmd, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "--trainables"));
  cJSON_Delete(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("isolate");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, env_passes_only_the_base_and_pass_env);
  tcase_add_test(tc, trainables_kinds_and_allowed_programs);
  tcase_add_test(tc, open_file_refuses_links_fifos_and_dirs);
  tcase_add_test(tc, trainable_env_is_clean_and_run_as_home);
  tcase_add_test(tc, view_paths_are_absolute);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
