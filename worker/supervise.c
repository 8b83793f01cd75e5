/* The per-trial supervisor (see supervise.h). */
#include "supervise.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpuset.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define SUPERVISE_MAX_CHILDREN 4096
/* How long the tree kill keeps trying before giving up (a process stuck in
 * uninterruptible sleep cannot die sooner than its I/O completes). */
#define SUPERVISE_KILL_TIMEOUT_MS 10000
/* Wake-up period of the supervisor's wait: the parent check and the reaping
 * of orphans never depend on a signal arriving. */
#define SUPERVISE_TICK_MS 200

static long supervise_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int supervise_parse_ids(const char *text, pid_t *pids, int n, int cap) {
  const char *p = text;
  while (*p && n < cap) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) {
      p++;
      continue;
    }
    if (v > 0) pids[n++] = (pid_t)v;
    p = end;
  }
  return n;
}

/* Fallback: every /proc/<pid>/stat whose ppid is ours. */
static int supervise_scan_proc(pid_t self, pid_t *pids, int cap) {
  DIR *d = opendir("/proc");
  if (!d) return -errno;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0) continue;
    buf[k] = '\0';
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses. */
    char *rp = strrchr(buf, ')');
    char state;
    int ppid;
    if (!rp || sscanf(rp + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == (int)self) pids[n++] = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  return n;
}

int supervise_children(pid_t *pids, int cap) {
  pid_t self = getpid();
  char path[128];
  snprintf(path, sizeof path, "/proc/%d/task", (int)self);
  DIR *d = opendir(path);
  if (!d) return supervise_scan_proc(self, pids, cap);
  int n = 0, have = 0;
  struct dirent *e;
  /* Children hang off the thread that forked them: read every thread's list. */
  while ((e = readdir(d)) && n < cap) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char cp[300];
    snprintf(cp, sizeof cp, "/proc/%d/task/%s/children", (int)self, e->d_name);
    int fd = open(cp, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    have = 1;
    char buf[8192];
    size_t len = 0;
    ssize_t k;
    while (len < sizeof buf - 1 && (k = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
      len += (size_t)k;
    close(fd);
    buf[len] = '\0';
    n = supervise_parse_ids(buf, pids, n, cap);
  }
  closedir(d);
  return have ? n : supervise_scan_proc(self, pids, cap);
}

int supervise_kill_cgroup(const char *cg, int check_fs) {
  char path[4200];
  if (check_fs) {
    struct statfs sf;
    if (statfs(cg, &sf) != 0) return -errno;
    if (sf.f_type != CGROUP2_SUPER_MAGIC) return -ENOTSUP;
    /* Linux >= 5.14: one write kills every process of the group at once,
     * including ones forked while we would be reading cgroup.procs. */
    snprintf(path, sizeof path, "%s/cgroup.kill", cg);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t w = write(fd, "1", 1);
      close(fd);
      if (w == 1) return 1;
    }
  }
  snprintf(path, sizeof path, "%s/cgroup.procs", cg);
  FILE *f = fopen(path, "re");
  if (!f) return -errno;
  int n = 0, pid;
  pid_t self = getpid();
  while (fscanf(f, "%d", &pid) == 1)
    if (pid > 0 && pid != self && kill(pid, SIGKILL) == 0) n++;
  fclose(f);
  return n;
}

static void supervise_reap(pid_t watch, int *watch_status, int *watch_reaped) {
  int st;
  pid_t r;
  while ((r = waitpid(-1, &st, WNOHANG)) > 0)
    if (r == watch && watch > 0) {
      *watch_status = st;
      *watch_reaped = 1;
    }
}

/* 1 when this process has no child left, zombie or not (waitid tells it
 * without reaping one behind supervise_reap's back). */
static int supervise_no_child(void) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

/* Waits up to ms for a child to change state: at once when SIGCHLD is
 * blocked here (the supervisor's case) and one comes, else the whole ms. */
static void supervise_wait_child(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  sigset_t blocked, chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, NULL, &blocked) == 0 && sigismember(&blocked, SIGCHLD)) {
    siginfo_t si;
    sigtimedwait(&chld, &si, &ts);
  } else {
    nanosleep(&ts, NULL);
  }
}

int supervise_kill_tree(pid_t pgid, const char *cg, int timeout_ms, pid_t watch, int *watch_status,
                        int *watch_reaped) {
  pid_t *kids = NULL;
  long deadline = supervise_now_ms() + timeout_ms;
  int rc = -ETIMEDOUT;
  for (;;) {
    if (pgid > 0) kill(-pgid, SIGKILL);
    if (cg) supervise_kill_cgroup(cg, 1);
    supervise_reap(watch, watch_status, watch_reaped);
    /* A subreaper with no child has no descendant left: every orphan of
     * the tree would have become its child. The common end of a trial
     * (nothing left behind) stops here, without reading /proc. */
    if (supervise_no_child()) {
      rc = 0;
      break;
    }
    if (!kids) kids = malloc(SUPERVISE_MAX_CHILDREN * sizeof *kids);
    int n = kids ? supervise_children(kids, SUPERVISE_MAX_CHILDREN) : 0;
    for (int i = 0; i < n; i++) {
      /* The child's own group too: a child that called setsid() leads a
       * group of its descendants, which dies in the same instant. */
      kill(-kids[i], SIGKILL);
      kill(kids[i], SIGKILL);
    }
    supervise_reap(watch, watch_status, watch_reaped);
    if (supervise_no_child()) {
      rc = 0;
      break;
    }
    if (supervise_now_ms() >= deadline) break;
    supervise_wait_child(5);
  }
  free(kids);
  return rc;
}

static int supervise_err(char *err, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int supervise_err(char *err, size_t len, int rc, const char *fmt, ...) {
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static int supervise_write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t n = strlen(text);
  ssize_t w = write(fd, text, n);
  int rc = w == (ssize_t)n ? 0 : w < 0 ? -errno : -EIO;
  close(fd);
  return rc;
}

/* The new user namespace's only ids: the caller's own uid and gid, mapped to
 * themselves (what an unprivileged process may map), and no setgroups. */
static int supervise_map_self(uid_t uid, gid_t gid, char *err, size_t len) {
  char map[64];
  int rc = supervise_write_file("/proc/self/setgroups", "deny");
  if (rc < 0 && rc != -ENOENT) /* kernels before 3.19 have no such file */
    return supervise_err(err, len, rc, "cannot write /proc/self/setgroups: %s", strerror(-rc));
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
  if ((rc = supervise_write_file("/proc/self/uid_map", map)) < 0)
    return supervise_err(err, len, rc, "cannot write /proc/self/uid_map: %s", strerror(-rc));
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
  if ((rc = supervise_write_file("/proc/self/gid_map", map)) < 0)
    return supervise_err(err, len, rc, "cannot write /proc/self/gid_map: %s", strerror(-rc));
  return 0;
}

/* mkdir -p below the first from bytes of path (a dir that exists, a cover;
 * 0: from the root): the components that are missing (on a tmpfs just
 * mounted), 0711 whatever the umask (the caller's is 0 here; the worker's is
 * 077): made as root, they must let the --run-as user through to the dirs
 * shown in them. */
static int supervise_mkdirs(const char *path, size_t from) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -ENAMETOOLONG;
  for (char *p = buf + from + 1;; p++) {
    if (*p != '/' && *p) continue;
    char c = *p;
    *p = '\0';
    if (mkdir(buf, 0711) != 0 && errno != EEXIST) return -errno;
    if (!c) return 0;
    *p = c;
  }
}

/* The length of the longest of the n covered dirs that holds path below
 * it, else 0. */
static size_t supervise_covered_at(const struct supervise_view *v, const int *cover, int n,
                                   const char *path) {
  size_t best = 0;
  for (int k = 0; k < n; k++) {
    size_t len = strlen(v->hide[cover[k]]);
    if (len > best && !strncmp(path, v->hide[cover[k]], len) && path[len] == '/') best = len;
  }
  return best;
}

#define SUPERVISE_RO (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)

int supervise_private_view(const struct supervise_view *v, char *err, size_t len) {
  if (v->ns == SUPERVISE_NS_NONE) return 0;
  if (v->nhide < 1 || v->nhide > SUPERVISE_MAX_VIEW || v->nshow > SUPERVISE_MAX_VIEW)
    return supervise_err(err, len, -EINVAL, "bad list of paths to hide");
  uid_t uid = geteuid();
  gid_t gid = getegid();
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
  int rc = 0, shown[SUPERVISE_MAX_VIEW], cover[SUPERVISE_MAX_VIEW], ncover = 0;
  for (int i = 0; i < v->nshow; i++) shown[i] = -1;
  if (v->ns == SUPERVISE_NS_USER) {
    /* The process writes its own maps: its /proc/self files must be its
     * own, which they are not once a change of user made it non-dumpable. */
    prctl(PR_SET_DUMPABLE, 1);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
      return supervise_err(err, len, -errno, "cannot make a user namespace: %s", strerror(errno));
    if ((rc = supervise_map_self(uid, gid, err, len)) < 0) return rc;
  } else if (unshare(CLONE_NEWNS) != 0) {
    return supervise_err(err, len, -errno, "cannot make a mount namespace: %s", strerror(errno));
  }
  /* Nothing done here reaches the worker's namespace, nor the other way. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    return supervise_err(err, len, -errno, "cannot make / private: %s", strerror(errno));
  /* What is shown again is opened before it is covered (in this namespace:
   * a mount is bound only from its own namespace). */
  for (int i = 0; i < v->nshow; i++) shown[i] = open(v->show[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
  char empty[PATH_MAX] = "";
  int files[SUPERVISE_MAX_VIEW], nfiles = 0;
  for (int i = 0; i < v->nhide && rc == 0; i++) {
    struct stat st;
    if (stat(v->hide[i], &st) != 0) continue; /* not there, or covered already */
    if (S_ISDIR(st.st_mode)) {
      if (mount("ctune-hidden", v->hide[i], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "mode=0711,size=64k,nr_inodes=256") != 0) {
        rc = supervise_err(err, len, -errno, "cannot cover %s: %s", v->hide[i], strerror(errno));
        break;
      }
      cover[ncover++] = i;
      if (!empty[0]) {
        /* What a hidden file is covered with. */
        snprintf(empty, sizeof empty, "%s/.hidden", v->hide[i]);
        int fd = open(empty, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
        if (fd >= 0 && fchmod(fd, 0444) != 0) { /* whatever the umask */
          close(fd);
          fd = -1;
        }
        if (fd < 0) {
          rc = supervise_err(err, len, -errno, "cannot create %s: %s", empty, strerror(errno));
          break;
        }
        close(fd);
      }
    } else if (!empty[0]) {
      rc = supervise_err(err, len, -EINVAL, "%s: the first path to hide must be a directory",
                         v->hide[i]);
    } else {
      files[nfiles++] = i; /* covered once the covers are read-only */
    }
  }
  mode_t mask = umask(0); /* the dirs to show are made 0711 */
  for (int i = 0; i < v->nshow && rc == 0; i++) {
    if (shown[i] < 0) continue;
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", shown[i]);
    if ((rc = supervise_mkdirs(v->show[i], supervise_covered_at(v, cover, ncover, v->show[i]))) <
            0 ||
        (mount(src, v->show[i], NULL, MS_BIND, NULL) != 0 && (rc = -errno)))
      rc = supervise_err(err, len, rc, "cannot show %s: %s", v->show[i], strerror(-rc));
  }
  umask(mask);
  /* The covers read-only last: the dirs to show are made in them first. */
  for (int k = 0; k < ncover && rc == 0; k++)
    if (mount(NULL, v->hide[cover[k]], NULL, MS_REMOUNT | MS_BIND | SUPERVISE_RO, NULL) != 0)
      rc = supervise_err(err, len, -errno, "cannot make the cover of %s read-only: %s",
                         v->hide[cover[k]], strerror(errno));
  /* A bind takes the flags of the mount it comes from: each file's cover
   * is read-only (and nosuid, nodev, noexec) without a remount of its own. */
  for (int k = 0; k < nfiles && rc == 0; k++)
    if (mount(empty, v->hide[files[k]], NULL, MS_BIND, NULL) != 0)
      rc = supervise_err(err, len, -errno, "cannot cover %s: %s", v->hide[files[k]],
                         strerror(errno));
  for (int i = 0; i < v->nshow; i++)
    if (shown[i] >= 0) close(shown[i]);
  /* Back to the cwd by its path: the old one is the covered directory,
   * whose ".." leads past the cover. */
  if (rc == 0 && cwd[0] && chdir(cwd) != 0)
    rc = supervise_err(err, len, -errno,
                       "cannot return to its cwd %s in its view (a cwd under the worker's work "
                       "dir is hidden from trials): %s",
                       cwd, strerror(errno));
  return rc;
}

static void supervise_child_fail(const char *what, const char *detail) {
  /* One JSON line like the trainer's, so the worker's failure report and the
   * trial log both say exactly what went wrong. */
  fprintf(stderr,
          "{\"error\": {\"code\": \"exec_failed\", \"message\": \"ctune-worker: %s%s%s\"}}\n", what,
          detail ? ": " : "", detail ? detail : "");
  fflush(stderr);
  _exit(127);
}

/* Becomes the run-as user for good. */
static void supervise_drop_user(const struct supervise_opts *o, pid_t supervisor) {
  char id[64];
  snprintf(id, sizeof id, "uid %d gid %d", (int)o->uid, (int)o->gid);
  if (setgroups((size_t)o->ngroups, o->groups) != 0)
    supervise_child_fail("--run-as: setgroups failed (is the worker root?)", strerror(errno));
  if (setgid(o->gid) != 0) supervise_child_fail("--run-as: setgid failed", strerror(errno));
  if (setuid(o->uid) != 0) supervise_child_fail("--run-as: setuid failed", strerror(errno));
  if (getuid() != o->uid || geteuid() != o->uid || getgid() != o->gid || setuid(0) == 0)
    supervise_child_fail("--run-as: could not drop privileges to", id);
  /* A change of credentials clears the parent-death signal: set it again,
   * then close the race with a supervisor that died in between. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != supervisor) _exit(127);
}

static void supervise_child(const struct supervise_opts *o, char **argv, const sigset_t *oldmask) {
  pid_t supervisor = getppid();
  setpgid(0, 0);
  /* The trial dies with its supervisor, whatever kills that. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (o->report_fd >= 0) close(o->report_fd);
  if (o->cgroup) {
    char path[4200], pid[32];
    snprintf(path, sizeof path, "%s/cgroup.procs", o->cgroup);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (fd < 0 || write(fd, pid, (size_t)n) != n)
      supervise_child_fail("cannot join cgroup", o->cgroup);
    close(fd);
  }
  if (o->cpus && *o->cpus) {
    int ids[CPUSET_MAX];
    int n = cpuset_parse(o->cpus, ids, CPUSET_MAX);
    if (n <= 0) supervise_child_fail("bad cpu list", o->cpus);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int k = 0; k < n; k++) CPU_SET(ids[k], &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      supervise_child_fail("sched_setaffinity failed", strerror(errno));
  }
  if (o->rlimit_as_mb > 0) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = (rlim_t)o->rlimit_as_mb * 1024 * 1024;
    if (setrlimit(RLIMIT_AS, &rl) != 0)
      supervise_child_fail("setrlimit(RLIMIT_AS) failed", strerror(errno));
  }
  /* Last: joining the cgroup and setting limits may need the worker's user;
   * a mount namespace made as root comes before the drop, a user namespace
   * (made as the trial's user) after it. */
  char verr[600];
  if (o->view.ns == SUPERVISE_NS_MOUNT && supervise_private_view(&o->view, verr, sizeof verr) < 0)
    supervise_child_fail("cannot hide the worker's files from the trial", verr);
  if (o->run_as) supervise_drop_user(o, supervisor);
  if (o->view.ns == SUPERVISE_NS_USER) {
    if (supervise_private_view(&o->view, verr, sizeof verr) < 0)
      supervise_child_fail("cannot hide the worker's files from the trial", verr);
    /* A new user namespace is a change of credentials. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor) _exit(127);
  }
  /* The supervisor's blocked signals must not stay blocked in the trial. */
  sigprocmask(SIG_SETMASK, oldmask, NULL);
  execvp(argv[0], argv);
  char what[512];
  snprintf(what, sizeof what, "cannot run '%s'", argv[0]);
  supervise_child_fail(what, strerror(errno));
}

/* Test builds: what the file o->test_report says to do before the report
 * ("hold", "garbage", "die"; else nothing). */
static const char *supervise_test_report(const struct supervise_opts *o) {
  if (!o->test_report) return "";
  char word[16] = "";
  int fd = open(o->test_report, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  ssize_t k = read(fd, word, sizeof word - 1);
  close(fd);
  word[k > 0 ? k : 0] = '\0';
  if (!strncmp(word, "hold", 4)) return "hold";
  if (!strncmp(word, "garbage", 7)) return "garbage";
  if (!strncmp(word, "die", 3)) return "die";
  return "";
}

/* Test builds: holds the report while the file exists (at most 30 s). */
static void supervise_test_hold(const char *path) {
  for (int i = 0; i < 30000 / 5 && access(path, F_OK) == 0; i++) {
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

int supervise_run(const struct supervise_opts *o, char **argv) {
  /* Orphaned descendants (double forks, daemons, children of a dead shell)
   * become our children instead of init's: we can find and kill them. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t set, old;
  sigemptyset(&set);
  int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGPIPE};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaddset(&set, sigs[i]);
  sigprocmask(SIG_BLOCK, &set, &old);
  if (o->parent > 0) {
    /* Delivered (pending, blocked) when the worker dies; the check after it
     * closes the race with a worker that died before the flag was set. */
    prctl(PR_SET_PDEATHSIG, SIGUSR2);
    if (getppid() != o->parent) {
      sigprocmask(SIG_SETMASK, &old, NULL);
      return -ESRCH;
    }
  }
  const char *test = supervise_test_report(o);
  if (!strcmp(test, "die")) raise(SIGKILL);
  pid_t t = fork();
  if (t < 0) {
    int e = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    return -e;
  }
  if (t == 0) supervise_child(o, argv, &old);
  setpgid(t, t); /* also here: the group exists before its id is reported */
  if (!strcmp(test, "hold")) supervise_test_hold(o->test_report);
  if (o->report_fd >= 0) {
    char buf[32];
    int n = !strcmp(test, "garbage") ? snprintf(buf, sizeof buf, "garbage\n")
                                     : snprintf(buf, sizeof buf, "%d\n", (int)t);
    if (write(o->report_fd, buf, (size_t)n) != n) { /* the worker kills us: a failed start */
    }
    close(o->report_fd);
  }
  int status = 0, done = 0;
  for (;;) {
    struct timespec tick = {0, SUPERVISE_TICK_MS * 1000000L};
    siginfo_t si;
    int sig = sigtimedwait(&set, &si, &tick);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT || sig == SIGUSR1) {
      /* Meant for the trial (the worker signals its group directly; this is
       * for anyone who signals the supervisor instead). */
      kill(-t, sig);
      kill(-t, SIGCONT);
    } else if (sig == SIGCONT) {
      kill(-t, SIGCONT);
    }
    supervise_reap(t, &status, &done);
    if (done) break;
    if (o->parent > 0 && (sig == SIGUSR2 || getppid() != o->parent)) {
      /* The worker is gone: nobody will read the trial's results or stop it. */
      supervise_kill_tree(t, o->cgroup, SUPERVISE_KILL_TIMEOUT_MS, t, &status, &done);
      if (!done) status = SIGKILL; /* as a wait status: killed by SIGKILL */
      sigprocmask(SIG_SETMASK, &old, NULL);
      return status;
    }
  }
  /* The trial's first process ended: what it left behind goes with it. */
  supervise_kill_tree(t, o->cgroup, SUPERVISE_KILL_TIMEOUT_MS, 0, NULL, NULL);
  sigprocmask(SIG_SETMASK, &old, NULL);
  return status;
}

void supervise_exit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    fflush(NULL);
    raise(sig);
    /* A signal whose default is not to terminate: say so the shell's way. */
    _exit(128 + sig);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
