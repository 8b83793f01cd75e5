/* cgroup v2 limits against a fake hierarchy in a temp dir: what gets
 * written where, and the clear refusal when cgroup v2 is missing. */
#include <check.h>
#include <ftw.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup.h"

static char root[256];

static void put(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void get(const char *rel, char *buf, size_t len) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  FILE *f = fopen(p, "r");
  ck_assert_msg(f != NULL, "%s missing", p);
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void rm_rf(const char *path) {
  ck_assert_int_eq(nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

START_TEST(cpu_max_values) {
  char b[64];
  ck_assert_int_eq(cgroup_cpu_max(0.5, b, sizeof b), 0);
  ck_assert_str_eq(b, "50000 100000");
  ck_assert_int_eq(cgroup_cpu_max(1.5, b, sizeof b), 0);
  ck_assert_str_eq(b, "150000 100000");
  ck_assert_int_eq(cgroup_cpu_max(0, b, sizeof b), 0);
  ck_assert_str_eq(b, "max 100000");
  ck_assert_int_eq(cgroup_cpu_max(-1, b, sizeof b), -EINVAL);
  ck_assert_int_eq(cgroup_cpu_max(1, b, 4), -ENOSPC);
}
END_TEST

START_TEST(delegated_tree_gets_trial_groups) {
  snprintf(root, sizeof root, "/tmp/ctune-cgroup-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  put("cgroup.controllers", "cpuset cpu io memory pids\n");
  char p[512];
  snprintf(p, sizeof p, "%s/svc", root);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  put("svc/cgroup.controllers", "cpu memory pids\n");
  struct cgroup_ctx c;
  char why[256] = "", buf[256], path[4300];
  ck_assert_int_eq(cgroup_setup(&c, root, "/svc", why, sizeof why), 0);
  ck_assert(c.enabled);
  get("svc/cgroup.subtree_control", buf, sizeof buf);
  ck_assert_str_eq(buf, "+cpu +memory");
  get("svc/worker/cgroup.procs", buf, sizeof buf);
  ck_assert_int_eq(atoi(buf), (int)getpid()); /* the worker left the delegated group */

  ck_assert_int_eq(cgroup_trial_create(&c, 7, 0.5, 300, path, sizeof path), 0);
  snprintf(p, sizeof p, "%s/svc/trial-7", root);
  ck_assert_str_eq(path, p);
  get("svc/trial-7/cpu.max", buf, sizeof buf);
  ck_assert_str_eq(buf, "50000 100000");
  get("svc/trial-7/memory.max", buf, sizeof buf);
  ck_assert_str_eq(buf, "314572800");
  ck_assert_int_eq(cgroup_trial_create(&c, 8, 2, 0, path, sizeof path), 0);
  get("svc/trial-8/memory.max", buf, sizeof buf);
  ck_assert_str_eq(buf, "max");
  cgroup_trial_remove(path);
  struct stat st;
  ck_assert_int_ne(stat(path, &st), 0);
  rm_rf(root);
}
END_TEST

/* A worker killed with trials running leaves their groups behind; the next
 * worker on the same work dir removes exactly the ones recorded there. */
START_TEST(stale_trial_groups_are_swept) {
  snprintf(root, sizeof root, "/tmp/ctune-cgroup-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  put("cgroup.controllers", "cpu memory\n");
  char p[512], path[4300];
  snprintf(p, sizeof p, "%s/svc", root);
  ck_assert_int_eq(mkdir(p, 0755), 0);
  put("svc/cgroup.controllers", "cpu memory\n");
  struct cgroup_ctx c;
  char why[256] = "";
  ck_assert_int_eq(cgroup_setup(&c, root, "/svc", why, sizeof why), 0);
  ck_assert(!c.real_fs);
  snprintf(c.marks, sizeof c.marks, "%s/work-cgroups", root);
  ck_assert_int_eq(cgroup_trial_create(&c, 5, 1, 0, path, sizeof path), 0);
  ck_assert_int_eq(cgroup_trial_create(&c, 6, 1, 0, path, sizeof path), 0);
  ck_assert_int_eq(cgroup_trial_create(&c, 7, 1, 0, path, sizeof path), 0);
  char buf[4300];
  get("work-cgroups/trial-5", buf, sizeof buf);
  snprintf(p, sizeof p, "%s/svc/trial-5", root);
  ck_assert_str_eq(buf, p);
  cgroup_trial_remove(path); /* trial 7 ended normally: its record goes too */
  snprintf(p, sizeof p, "%s/work-cgroups/trial-7", root);
  ck_assert_int_ne(access(p, F_OK), 0);
  snprintf(p, sizeof p, "%s/svc/trial-9", root); /* another worker's */
  ck_assert_int_eq(mkdir(p, 0755), 0);

  struct cgroup_ctx next; /* the restarted worker */
  ck_assert_int_eq(cgroup_setup(&next, root, "/svc", why, sizeof why), 0);
  snprintf(next.marks, sizeof next.marks, "%s/work-cgroups", root);
  ck_assert_int_eq(cgroup_sweep(&next), 2);
  snprintf(p, sizeof p, "%s/svc/trial-5", root);
  ck_assert_int_ne(access(p, F_OK), 0);
  snprintf(p, sizeof p, "%s/svc/trial-6", root);
  ck_assert_int_ne(access(p, F_OK), 0);
  snprintf(p, sizeof p, "%s/svc/trial-9", root);
  ck_assert_int_eq(access(p, F_OK), 0);
  snprintf(p, sizeof p, "%s/work-cgroups/trial-5", root);
  ck_assert_int_ne(access(p, F_OK), 0);
  ck_assert_int_eq(cgroup_sweep(&next), 0);
  rm_rf(root);
}
END_TEST

START_TEST(missing_or_undelegated_cgroup_says_why) {
  snprintf(root, sizeof root, "/tmp/ctune-cgroup-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
  struct cgroup_ctx c;
  char why[256] = "", path[4300];
  ck_assert_int_eq(cgroup_setup(&c, root, "/svc", why, sizeof why), -ENOENT);
  ck_assert_msg(strstr(why, "no cgroup v2 hierarchy"), "%s", why);
  ck_assert(!c.enabled);
  ck_assert_int_eq(cgroup_trial_create(&c, 1, 1, 0, path, sizeof path), -ENOTSUP);
  put("cgroup.controllers", "cpu memory\n");
  char p[512];
  snprintf(p, sizeof p, "%s/svc", root);
  mkdir(p, 0755);
  put("svc/cgroup.controllers", "pids\n"); /* nothing useful delegated */
  ck_assert_int_eq(cgroup_setup(&c, root, "/svc", why, sizeof why), -ENOTSUP);
  ck_assert_msg(strstr(why, "not delegated"), "%s", why);
  rm_rf(root);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cgroup");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, cpu_max_values);
  tcase_add_test(tc, delegated_tree_gets_trial_groups);
  tcase_add_test(tc, missing_or_undelegated_cgroup_says_why);
  tcase_add_test(tc, stale_trial_groups_are_swept);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
