/* The trial supervisor with real processes: its tree kill reaches a shell's
 * background child and a setsid'd double fork; it kills the whole tree when
 * its parent (the worker) dies by SIGKILL; it reports the trial's process
 * group and exits with the trial's own status; a trial's private view hides
 * the work dir and the token file but shows its own dir and the cache.
 * (Child processes: registered with the e2e label.) */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "supervise.h"

static char dir[64];

/* A shell that starts a background sleep (bg) and a setsid'd double fork
 * (dbl), writes their pids into dir, then sleeps itself. */
static char script[1024];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/ctune-supervise.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(script, sizeof script,
           "sleep 300 & echo $! > %s/bg.tmp; mv %s/bg.tmp %s/bg; "
           "setsid sh -c 'sleep 300 & echo $! > %s/dbl.tmp; mv %s/dbl.tmp %s/dbl' ; "
           "sleep 300",
           dir, dir, dir, dir, dir, dir);
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) { /* best effort */
  }
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int read_pid(const char *name, int timeout_ms) {
  char p[128];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    FILE *f = fopen(p, "r");
    if (f) {
      int pid = 0;
      int ok = fscanf(f, "%d", &pid) == 1;
      fclose(f);
      if (ok && pid > 0) return pid;
    }
    nap_ms(10);
  }
  ck_abort_msg("%s never appeared", p);
  return 0;
}

/* Gone: no such process (this test reaps what is reparented to it). */
static int gone_within(int pid, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    nap_ms(10);
  }
  return 0;
}

START_TEST(kill_tree_reaches_background_and_setsid_double_fork) {
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  pid_t t = fork();
  ck_assert_int_ge(t, 0);
  if (t == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", script, (char *)NULL);
    _exit(127);
  }
  setpgid(t, t);
  int bg = read_pid("bg", 5000), dbl = read_pid("dbl", 5000);
  ck_assert_int_eq(kill(bg, 0), 0);
  ck_assert_int_eq(kill(dbl, 0), 0);
  int status = 0, reaped = 0;
  ck_assert_int_eq(supervise_kill_tree(t, NULL, 5000, t, &status, &reaped), 0);
  ck_assert(reaped);
  ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ck_assert_msg(kill(bg, 0) != 0 && errno == ESRCH, "background child %d survived", bg);
  ck_assert_msg(kill(dbl, 0) != 0 && errno == ESRCH, "setsid'd double fork %d survived", dbl);
  pid_t kids[8];
  ck_assert_int_eq(supervise_children(kids, 8), 0);
}
END_TEST

/* The worker (here a plain child W of the test) dies by SIGKILL: the
 * supervisor notices and kills the trial and everything it started. */
START_TEST(worker_kill9_kills_whole_tree) {
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int rep[2];
  ck_assert_int_eq(pipe(rep), 0);
  pid_t w = fork();
  ck_assert_int_ge(w, 0);
  if (w == 0) {
    pid_t s = fork();
    if (s == 0) {
      setsid();
      close(rep[0]);
      struct supervise_opts o = {.parent = getppid(), .report_fd = rep[1]};
      char *argv[] = {"sh", "-c", script, NULL};
      int st = supervise_run(&o, argv);
      if (st < 0) _exit(126);
      supervise_exit(st);
    }
    for (;;) pause();
  }
  close(rep[1]);
  char buf[32] = "";
  ck_assert_int_gt(read(rep[0], buf, sizeof buf - 1), 0);
  close(rep[0]);
  int trial = atoi(buf);
  ck_assert_int_gt(trial, 1);
  ck_assert_int_eq(getpgid(trial), trial); /* a process group of its own */
  int bg = read_pid("bg", 5000), dbl = read_pid("dbl", 5000);
  ck_assert_int_eq(kill(w, SIGKILL), 0);
  ck_assert_int_eq(waitpid(w, NULL, 0), w);
  ck_assert_msg(gone_within(trial, 5000), "trial %d survived its worker", trial);
  ck_assert_msg(gone_within(bg, 5000), "background child %d survived its worker", bg);
  ck_assert_msg(gone_within(dbl, 5000), "setsid'd double fork %d survived its worker", dbl);
}
END_TEST

/* Without cgroup.kill (v1 machines, plain dirs in tests): every pid listed
 * in cgroup.procs gets SIGKILL, the caller's own excepted. */
START_TEST(cgroup_procs_are_killed) {
  pid_t c = fork();
  ck_assert_int_ge(c, 0);
  if (c == 0) {
    pause();
    _exit(0);
  }
  char p[128];
  snprintf(p, sizeof p, "%s/cgroup.procs", dir);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%d\n%d\n", (int)getpid(), (int)c);
  fclose(f);
  ck_assert_int_eq(supervise_kill_cgroup(dir, 0), 1);
  int st;
  ck_assert_int_eq(waitpid(c, &st, 0), c);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  /* On a real system only a cgroup2 directory is acted on. */
  ck_assert_int_eq(supervise_kill_cgroup(dir, 1), -ENOTSUP);
}
END_TEST

static int run_supervised(const char *cmd, int *trial_pid, int stop_after_ms) {
  int rep[2];
  ck_assert_int_eq(pipe(rep), 0);
  pid_t s = fork();
  ck_assert_int_ge(s, 0);
  if (s == 0) {
    setsid();
    close(rep[0]);
    struct supervise_opts o = {.parent = getppid(), .report_fd = rep[1]};
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    if (!strncmp(cmd, "/nonexistent", 12)) argv[0] = (char *)cmd, argv[1] = NULL;
    int st = supervise_run(&o, argv);
    if (st < 0) _exit(126);
    supervise_exit(st);
  }
  close(rep[1]);
  char buf[32] = "";
  ssize_t n = read(rep[0], buf, sizeof buf - 1);
  close(rep[0]);
  ck_assert_int_gt(n, 0);
  *trial_pid = atoi(buf);
  ck_assert_int_ne(*trial_pid, s);
  if (stop_after_ms >= 0) {
    nap_ms(stop_after_ms);
    /* What the worker does: SIGTERM to the trial's group, not to us. */
    ck_assert_int_eq(kill(-*trial_pid, SIGTERM), 0);
  }
  int st;
  ck_assert_int_eq(waitpid(s, &st, 0), s);
  return st;
}

static void put(const char *rel, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static void mk(const char *rel) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  ck_assert_int_eq(mkdir(p, 0700), 0);
  ck_assert_int_eq(chmod(p, 0711), 0); /* as the worker makes them for --run-as */
}

static int drop_to_nobody(void) {
  return setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0 ? -1 : 0;
}

/* In a child (whose namespaces go with it), as a trial: the view of ns,
 * then each check; exits with the number of the first that failed (0: all
 * held, 1: the view could not be made). */
static int view_child(int ns) {
  char work[128], token[128], own[160], cache[160], p[256], buf[64];
  snprintf(work, sizeof work, "%s/work", dir);
  snprintf(token, sizeof token, "%s/token", dir);
  snprintf(own, sizeof own, "%s/trials/1", work);
  snprintf(cache, sizeof cache, "%s/cache", work);
  umask(077); /* the worker's */
  if (chdir(own) != 0) return 1;
  struct supervise_view v = {
      .ns = ns, .hide = {work, token}, .nhide = 2, .show = {own, cache}, .nshow = 2};
  char err[600];
  /* As the supervisor does for --run-as nobody (when root): a user
   * namespace after the drop, a mount namespace before it. */
  int root = geteuid() == 0;
  if (root && ns == SUPERVISE_NS_USER && drop_to_nobody() != 0) return 1;
  if (supervise_private_view(&v, err, sizeof err) < 0) {
    fprintf(stderr, "view: %s\n", err);
    return 1;
  }
  if (root && ns == SUPERVISE_NS_MOUNT && drop_to_nobody() != 0) return 1;
  /* The token's cover read-only (not writable even by root) and inert. */
  struct statvfs sv;
  unsigned long inert = ST_RDONLY | ST_NOSUID | ST_NODEV | ST_NOEXEC;
  if (statvfs(token, &sv) != 0 || (sv.f_flag & inert) != inert) return 12;
  snprintf(p, sizeof p, "%s/identity", work);
  if (access(p, F_OK) == 0 || errno != ENOENT) return 2; /* the identity: gone */
  int fd = open(token, O_RDONLY);
  if (fd < 0 || read(fd, buf, sizeof buf) != 0) return 3; /* the token: empty */
  close(fd);
  if (access("../2/secret", F_OK) == 0) return 4; /* a sibling through the cwd */
  snprintf(p, sizeof p, "%s/trials/2/secret", work);
  if (access(p, F_OK) == 0) return 5; /* a sibling by path */
  snprintf(p, sizeof p, "%s/trials", work);
  DIR *d = opendir(p); /* trials/ lists its own dir alone (or nothing, 0711) */
  int others = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "1");
  if (d) closedir(d);
  if ((!d && errno != EACCES) || others) return 6;
  snprintf(p, sizeof p, "%s/junk", work);
  if (open(p, O_WRONLY | O_CREAT, 0600) >= 0 || errno != EROFS) return 7; /* cover read-only */
  fd = open("ckpt", O_RDONLY); /* its own dir, through the cwd */
  if (fd < 0 || read(fd, buf, sizeof buf) != 4 || memcmp(buf, "mine", 4)) return 8;
  close(fd);
  if ((fd = open("new", O_WRONLY | O_CREAT, 0600)) < 0) return 9; /* and writable */
  close(fd);
  snprintf(p, sizeof p, "%s/ckpt", own); /* and by its path (CTUNE_CHECKPOINT_DIR) */
  if ((fd = open(p, O_RDONLY)) < 0) return 11;
  close(fd);
  snprintf(p, sizeof p, "%s/entry", cache);
  if ((fd = open(p, O_WRONLY | O_CREAT, 0600)) < 0) return 10; /* the cache, writable */
  close(fd);
  return 0;
}

static void check_view(int ns) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(view_child(ns));
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ns %d: check %d failed", ns,
                WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  /* The worker's side: everything still there, the trial's writes too. */
  char p[256];
  static const char *const there[] = {"work/identity", "token", "work/trials/2/secret",
                                      "work/trials/1/new", "work/cache/entry"};
  for (size_t i = 0; i < sizeof there / sizeof *there; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, there[i]);
    ck_assert_msg(access(p, F_OK) == 0, "%s is gone", there[i]);
  }
}

/* Rule: a trial's private view (supervise_private_view) hides the work dir
 * (identity, other trials' dirs, also through its cwd) and the token file
 * (read empty), read-only, and shows its own dir and the cache, writable,
 * without changing anything the worker sees. Both ways it is made: a user
 * namespace (any user), and a mount namespace as root (checked as the
 * --run-as user it is for: the dirs made in the cover let it through). */
START_TEST(private_view_hides_the_worker) {
  mk("work");
  put("work/identity", "{\"id\":1,\"secret\":\"s\"}");
  mk("work/trials");
  mk("work/trials/1");
  put("work/trials/1/ckpt", "mine");
  mk("work/trials/2");
  put("work/trials/2/secret", "theirs");
  mk("work/cache");
  put("token", "worker=tok");
  if (geteuid() == 0) { /* the run-as user's, as the worker makes them */
    static const char *const own[] = {"work/trials/1", "work/trials/1/ckpt", "work/cache"};
    char p[256];
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
      snprintf(p, sizeof p, "%s/%s", dir, own[i]);
      ck_assert_int_eq(chown(p, 65534, 65534), 0);
    }
    ck_assert_int_eq(chmod(dir, 0711), 0); /* mkdtemp's 0700: let nobody through */
  }
  if (access("/proc/self/ns/user", F_OK) == 0) check_view(SUPERVISE_NS_USER);
  if (geteuid() == 0) check_view(SUPERVISE_NS_MOUNT);
}
END_TEST

START_TEST(exit_status_is_the_trials) {
  int t, st;
  st = run_supervised("exit 7", &t, -1);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 7);
  st = run_supervised("exit 0", &t, -1);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  st = run_supervised("kill -SEGV $$", &t, -1);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "status %#x", st);
  st = run_supervised("/nonexistent/program", &t, -1);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 127);
  /* SIGTERM to the group: a trial that saves and exits 0 reports 0. */
  st = run_supervised("trap 'exit 0' TERM; while :; do sleep 0.05; done", &t, 300);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
  /* A trial that does not handle SIGTERM dies by it: reported as such. */
  st = run_supervised("exec sleep 30", &t, 200);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status %#x", st);
}
END_TEST

int main(void) {
  Suite *s = suite_create("supervise");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, kill_tree_reaches_background_and_setsid_double_fork);
  tcase_add_test(tc, worker_kill9_kills_whole_tree);
  tcase_add_test(tc, exit_status_is_the_trials);
  tcase_add_test(tc, cgroup_procs_are_killed);
  tcase_add_test(tc, private_view_hides_the_worker);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
