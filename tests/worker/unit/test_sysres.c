/* Resource detection against fake /proc files and cgroup trees in a temp
 * dir: v1 quota and memory limits (the smallest along the path), v2
 * cpu.max/memory.max, a sub-tree mount, CUDA_VISIBLE_DEVICES, and CPU
 * claims between two claimants. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sysres.h"

static char root[256];

static void put(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  /* mkdir -p of the parent */
  for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
    *s = '\0';
    mkdir(p, 0755);
    *s = '/';
  }
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void setup(void) {
  snprintf(root, sizeof root, "/tmp/ctune-sysres-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(root));
}

static void teardown(void) { nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static struct sysres_fs fake(char *a, char *b, char *c) {
  snprintf(a, 512, "%s/proc_cgroup", root);
  snprintf(b, 512, "%s/mountinfo", root);
  snprintf(c, 512, "%s/meminfo", root);
  struct sysres_fs fs = {a, b, c, root};
  return fs;
}

/* This machine's layout: v1 controllers, v2 unified beside them. */
static const char *MOUNTS_HYBRID =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

START_TEST(v1_quota_and_memory_smallest_along_the_path) {
  char a[512], b[512], c[512];
  struct sysres_fs fs = fake(a, b, c);
  put("proc_cgroup", "4:memory:/job/step\n3:cpuset:/\n1:cpu,cpuacct:/job/step\n0::/\n");
  put("mountinfo", MOUNTS_HYBRID);
  put("meminfo", "MemTotal:       24684084 kB\nMemFree: 1 kB\n");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  put("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us", "250000\n");
  put("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
  put("sys/fs/cgroup/cpu,cpuacct/job/step/cpu.cfs_quota_us", "150000\n");
  put("sys/fs/cgroup/cpu,cpuacct/job/step/cpu.cfs_period_us", "100000\n");
  put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  put("sys/fs/cgroup/memory/job/memory.limit_in_bytes", "314572800\n");
  put("sys/fs/cgroup/memory/job/step/memory.limit_in_bytes", "9223372036854771712\n");
  double cpus = 0;
  char where[1024];
  ck_assert_int_eq(sysres_cpu_quota(&fs, &cpus, where, sizeof where), 1);
  ck_assert_double_eq_tol(cpus, 1.5, 1e-9);
  ck_assert_int_eq(sysres_quota_cpus(cpus), 1);
  ck_assert_msg(strstr(where, "cgroup v1 ") && strstr(where, "/job/step/cpu.cfs_quota_us=150000"),
                "%s", where);
  unsigned long long bytes = 0, total = 0;
  ck_assert_int_eq(sysres_memory_limit(&fs, &bytes, where, sizeof where), 1);
  ck_assert_uint_eq(bytes, 314572800ULL); /* the parent's: the step's is unlimited */
  ck_assert_msg(strstr(where, "/memory/job/memory.limit_in_bytes"), "%s", where);
  ck_assert_int_eq(sysres_mem_total(&fs, &total), 0);
  ck_assert_uint_eq(total, 24684084ULL * 1024);
}
END_TEST

START_TEST(v2_cpu_max_and_memory_max) {
  char a[512], b[512], c[512];
  struct sysres_fs fs = fake(a, b, c);
  put("proc_cgroup", "0::/kubepods/pod1/c1\n");
  put("mountinfo", "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
  put("sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
  put("sys/fs/cgroup/kubepods/pod1/cpu.max", "400000 100000\n");
  put("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "250000 100000\n");
  put("sys/fs/cgroup/kubepods/pod1/memory.max", "max\n");
  put("sys/fs/cgroup/kubepods/pod1/c1/memory.max", "1073741824\n");
  double cpus = 0;
  char where[1024];
  ck_assert_int_eq(sysres_cpu_quota(&fs, &cpus, where, sizeof where), 1);
  ck_assert_double_eq_tol(cpus, 2.5, 1e-9);
  ck_assert_int_eq(sysres_quota_cpus(cpus), 2);
  ck_assert_msg(strstr(where, "cgroup v2 ") && strstr(where, "c1/cpu.max=\"250000 100000\""), "%s",
                where);
  unsigned long long bytes = 0;
  ck_assert_int_eq(sysres_memory_limit(&fs, &bytes, where, sizeof where), 1);
  ck_assert_uint_eq(bytes, 1073741824ULL);
}
END_TEST

START_TEST(no_limit_anywhere_and_subtree_mount) {
  char a[512], b[512], c[512];
  struct sysres_fs fs = fake(a, b, c);
  put("proc_cgroup", "0::/\n");
  put("mountinfo", "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  put("sys/fs/cgroup/cgroup.procs", "");
  double cpus = 0;
  unsigned long long bytes = 0;
  char where[1024];
  ck_assert_int_eq(sysres_cpu_quota(&fs, &cpus, where, sizeof where), 0);
  ck_assert_int_eq(sysres_memory_limit(&fs, &bytes, where, sizeof where), 0);
  /* A container that mounts only its own sub-tree: /proc says the full
   * path, the mount's root is that path's beginning. */
  put("proc_cgroup", "0::/system.slice/box.scope\n");
  put("mountinfo", "29 23 0:26 /system.slice/box.scope /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  put("sys/fs/cgroup/cpu.max", "50000 100000\n");
  ck_assert_int_eq(sysres_cpu_quota(&fs, &cpus, where, sizeof where), 1);
  ck_assert_double_eq_tol(cpus, 0.5, 1e-9);
  ck_assert_int_eq(sysres_quota_cpus(cpus), 1); /* at least 1 */
  /* Nothing readable at all: no quota, not an error. */
  struct sysres_fs none = {"/nonexistent/a", "/nonexistent/b", "/nonexistent/c", ""};
  ck_assert_int_eq(sysres_cpu_quota(&none, &cpus, where, sizeof where), 0);
  ck_assert_int_lt(sysres_mem_total(&none, &bytes), 0);
}
END_TEST

START_TEST(cuda_visible_devices) {
  int ids[16];
  char bad[64];
  ck_assert_int_eq(sysres_cuda_visible("2,3", ids, 16, bad, sizeof bad), 2);
  ck_assert_int_eq(ids[0], 2);
  ck_assert_int_eq(ids[1], 3);
  ck_assert_str_eq(bad, "");
  ck_assert_int_eq(sysres_cuda_visible("", ids, 16, bad, sizeof bad), 0);
  ck_assert_int_eq(sysres_cuda_visible("-1", ids, 16, bad, sizeof bad), 0);
  ck_assert_str_eq(bad, "");
  ck_assert_int_eq(sysres_cuda_visible("1,GPU-8f2e,0", ids, 16, bad, sizeof bad), 1);
  ck_assert_str_eq(bad, "GPU-8f2e");
  ck_assert_int_eq(sysres_cuda_visible("0,0", ids, 16, bad, sizeof bad), 1);
  ck_assert_int_eq(sysres_cuda_visible("0,1,2", ids, 2, bad, sizeof bad), 2);
}
END_TEST

START_TEST(claims_keep_two_workers_apart) {
  static struct sysres_claim a, b, c, d;
  int cand[] = {0, 1, 2, 3};
  ck_assert_int_eq(sysres_claim_cpus(root, "wa", cand, 4, 1, 0, &a), 0);
  ck_assert_int_eq(a.n, 1);
  ck_assert_int_eq(a.ids[0], 0);
  ck_assert_int_eq(a.nshared, 0);
  /* A second claimant (another open file: flock excludes it even in one
   * process) gets the next free ones. */
  ck_assert_int_eq(sysres_claim_cpus(root, "wb", cand, 4, 2, 0, &b), 0);
  ck_assert_int_eq(b.n, 2);
  ck_assert_int_eq(b.ids[0], 1);
  ck_assert_int_eq(b.ids[1], 2);
  ck_assert_int_eq(b.nshared, 0);
  /* Two wanted, one free: CPU 3 and a shared one, holder named. */
  ck_assert_int_eq(sysres_claim_cpus(root, "wc", cand, 4, 2, 0, &c), 0);
  ck_assert_int_eq(c.n, 2);
  ck_assert_int_eq(c.nshared, 1);
  ck_assert_int_eq(c.shared[0], 0);
  ck_assert_int_eq(c.ids[0], 0);
  ck_assert_int_eq(c.ids[1], 3);
  ck_assert_msg(strstr(c.holders, "worker wa, pid "), "%s", c.holders);
  /* An exact list takes what it names, held or not. */
  int list[] = {2, 3};
  ck_assert_int_eq(sysres_claim_cpus(root, "wd", list, 2, 0, 1, &d), 0);
  ck_assert_int_eq(d.n, 2);
  ck_assert_int_eq(d.nshared, 2);
  ck_assert_msg(strstr(d.holders, "worker wb") && strstr(d.holders, "worker wc"), "%s", d.holders);
  /* a gone: CPU 0 is still c's (a sharer counts), so a newcomer shares. */
  sysres_release(&a);
  ck_assert_int_eq(sysres_claim_cpus(root, "we", cand, 4, 1, 0, &a), 0);
  ck_assert_int_eq(a.nshared, 1);
  sysres_release(&a);
  /* Released (as by the kernel at exit): free again, stale files removed. */
  sysres_release(&c);
  sysres_release(&d);
  ck_assert_int_eq(sysres_claim_cpus(root, "we", cand, 4, 1, 0, &d), 0);
  ck_assert_int_eq(d.ids[0], 0);
  ck_assert_int_eq(d.nshared, 0);
  sysres_release(&b);
  sysres_release(&d);
  static struct sysres_claim f;
  ck_assert_int_eq(sysres_claim_cpus(root, "wf", cand, 4, 4, 0, &f), 0);
  ck_assert_int_eq(f.nshared, 0);
  char p[600];
  snprintf(p, sizeof p, "%s/cpu", root);
  DIR *dir = opendir(p);
  int files = 0;
  for (struct dirent *e; (e = readdir(dir));) files += e->d_name[0] != '.';
  closedir(dir);
  ck_assert_int_eq(files, 4); /* f's four; the dead claims' files are gone */
  sysres_release(&f);
}
END_TEST

START_TEST(run_dir_from_the_environment) {
  char dir[512], want[512];
  snprintf(want, sizeof want, "%s/run", root);
  setenv("CTUNE_RUN_DIR", want, 1);
  ck_assert_int_eq(sysres_run_dir(dir, sizeof dir), 0);
  ck_assert_str_eq(dir, want);
  struct stat st;
  ck_assert_int_eq(stat(want, &st), 0);
  ck_assert(S_ISDIR(st.st_mode));
  /* Under systemd's RuntimeDirectory= (the first of several). */
  unsetenv("CTUNE_RUN_DIR");
  char sd[1200];
  snprintf(want, sizeof want, "%s/sd", root);
  snprintf(sd, sizeof sd, "%s:%s/other", want, root);
  setenv("RUNTIME_DIRECTORY", sd, 1);
  ck_assert_int_eq(sysres_run_dir(dir, sizeof dir), 0);
  ck_assert_str_eq(dir, want);
  unsetenv("RUNTIME_DIRECTORY");
}
END_TEST

int main(void) {
  Suite *s = suite_create("sysres");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, v1_quota_and_memory_smallest_along_the_path);
  tcase_add_test(tc, v2_cpu_max_and_memory_max);
  tcase_add_test(tc, no_limit_anywhere_and_subtree_mount);
  tcase_add_test(tc, cuda_visible_devices);
  tcase_add_test(tc, claims_keep_two_workers_apart);
  tcase_add_test(tc, run_dir_from_the_environment);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
