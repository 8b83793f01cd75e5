/* cgroup v2 per-trial limits (see cgroup.h). */
#include "cgroup.h"
#include "failure.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "supervise.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

/* Where the trial groups this worker created are recorded (the ctx's marks
 * dir, remembered from the last cgroup_trial_create so that removal, which
 * gets only the path, can drop the record too). */
static char cgroup_marks_dir[4096];
static int cgroup_real_fs = 1;

#define CGROUP_PERIOD_US 100000

static int cgroup_write(const char *dir, const char *file, const char *value) {
  char path[4200];
  if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) return -ENAMETOOLONG;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  size_t n = strlen(value);
  int rc = write(fd, value, n) == (ssize_t)n ? 0 : -errno;
  if (close(fd) != 0 && rc == 0) rc = -errno;
  return rc;
}

static int cgroup_read(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return -errno;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  return 0;
}

static int cgroup_has_word(const char *list, const char *word) {
  size_t wl = strlen(word);
  for (const char *p = list; (p = strstr(p, word)); p += wl)
    if ((p == list || p[-1] == ' ') && (p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n')) return 1;
  return 0;
}

int cgroup_setup(struct cgroup_ctx *c, const char *root, const char *self, char *why,
                 size_t whylen) {
  char buf[4096], selfbuf[4096], path[4300];
  memset(c, 0, sizeof *c);
  snprintf(path, sizeof path, "%s/cgroup.controllers", root);
  if (cgroup_read(path, buf, sizeof buf) < 0) {
    snprintf(why, whylen, "no cgroup v2 hierarchy at %s", root);
    return -ENOENT;
  }
  if (!cgroup_has_word(buf, "cpu") || !cgroup_has_word(buf, "memory")) {
    snprintf(why, whylen, "cgroup v2 at %s lacks the cpu or memory controller", root);
    return -ENOTSUP;
  }
  if (!self) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    selfbuf[0] = '\0';
    if (f) {
      char line[4096];
      while (fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
          line[strcspn(line, "\n")] = '\0';
          snprintf(selfbuf, sizeof selfbuf, "%s", line + 3);
        }
      fclose(f);
    }
    self = selfbuf;
  }
  if (!self[0]) {
    snprintf(why, whylen, "this process is in no cgroup v2 group");
    return -ENOENT;
  }
  if (snprintf(c->base, sizeof c->base, "%s%s", root, strcmp(self, "/") ? self : "") >=
      (int)sizeof c->base)
    return -ENAMETOOLONG;
  snprintf(path, sizeof path, "%s/cgroup.controllers", c->base);
  if (cgroup_read(path, buf, sizeof buf) < 0 || !cgroup_has_word(buf, "cpu") ||
      !cgroup_has_word(buf, "memory")) {
    snprintf(why, whylen, "cpu and memory controllers are not delegated to %s", c->base);
    return -ENOTSUP;
  }
  /* Leave the delegated group itself empty so it may enable controllers. */
  snprintf(path, sizeof path, "%s/worker", c->base);
  if (mkdir(path, 0755) != 0 && errno != EEXIST) goto denied;
  char pid[32];
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  if (cgroup_write(path, "cgroup.procs", pid) < 0) goto denied;
  if (cgroup_write(c->base, "cgroup.subtree_control", "+cpu +memory") < 0) goto denied;
  struct statfs sf;
  c->real_fs = statfs(c->base, &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;
  c->enabled = 1;
  return 0;
denied:
  snprintf(why, whylen, "cannot create or configure cgroups under %s: %s", c->base,
           strerror(errno));
  return -EACCES;
}

int cgroup_cpu_max(double cpus, char *buf, size_t len) {
  int w;
  if (!isfinite(cpus) || cpus < 0) return -EINVAL;
  if (cpus == 0)
    w = snprintf(buf, len, "max %d", CGROUP_PERIOD_US);
  else
    w = snprintf(buf, len, "%ld %d", (long)ceil(cpus * CGROUP_PERIOD_US), CGROUP_PERIOD_US);
  return (w < 0 || (size_t)w >= len) ? -ENOSPC : 0;
}

int cgroup_trial_create(const struct cgroup_ctx *c, int trial_id, double cpus, long memory_mb,
                        char *path, size_t len) {
  char cpu[64], mem[64];
  int rc;
  if (!c->enabled) return -ENOTSUP;
  if ((rc = cgroup_cpu_max(cpus, cpu, sizeof cpu)) < 0) return rc;
  if (memory_mb > 0)
    snprintf(mem, sizeof mem, "%lld", (long long)memory_mb << 20);
  else
    snprintf(mem, sizeof mem, "max");
  if (snprintf(path, len, "%s/trial-%d", c->base, trial_id) >= (int)len) return -ENAMETOOLONG;
  if (mkdir(path, 0755) != 0 && errno != EEXIST) return -errno;
  snprintf(cgroup_marks_dir, sizeof cgroup_marks_dir, "%s", c->marks);
  cgroup_real_fs = c->real_fs;
  if (c->marks[0]) {
    /* Recorded before anything joins it: a worker killed from here on
     * finds it again at its next start. */
    const char *base = strrchr(path, '/') + 1;
    rc = (mkdir(c->marks, 0755) != 0 && errno != EEXIST) ? -errno
                                                         : cgroup_write(c->marks, base, path);
    if (rc < 0) {
      cgroup_trial_remove(path);
      return rc;
    }
  }
  if ((rc = cgroup_write(path, "cpu.max", cpu)) < 0 ||
      (rc = cgroup_write(path, "memory.max", mem)) < 0) {
    cgroup_trial_remove(path);
    return rc;
  }
  return 0;
}

static void cgroup_unmark(const char *path) {
  char f[8300];
  const char *base = strrchr(path, '/');
  if (!cgroup_marks_dir[0] || !base) return;
  snprintf(f, sizeof f, "%s/%s", cgroup_marks_dir, base + 1);
  unlink(f);
}

int cgroup_sweep(struct cgroup_ctx *c) {
  if (!c->marks[0]) return 0;
  snprintf(cgroup_marks_dir, sizeof cgroup_marks_dir, "%s", c->marks);
  DIR *d = opendir(c->marks);
  if (!d) return errno == ENOENT ? 0 : -errno;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, "trial-", 6) != 0) continue;
    char mark[8300], path[4200];
    snprintf(mark, sizeof mark, "%s/%s", c->marks, e->d_name);
    if (cgroup_read(mark, path, sizeof path) < 0) continue;
    path[strcspn(path, "\n")] = '\0';
    struct stat st;
    struct statfs sf;
    if (path[0] == '/' && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      cgroup_real_fs = statfs(path, &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;
      cgroup_trial_remove(path); /* kills what still runs in it first */
      n++;
    }
    unlink(mark);
  }
  closedir(d);
  return n;
}

void cgroup_trial_remove(const char *path) {
  /* On cgroupfs the interface files vanish with the directory; on a plain
   * directory (tests) they must go first. */
  char f[4200];
  static const char *files[] = {"cpu.max", "memory.max", "cgroup.procs"};
  /* A group is removable only once empty: kill what is left in it (a trial
   * of a worker that was killed) and give the kernel a moment to reap. */
  for (int i = 0; i < 200 && rmdir(path) != 0 && errno == EBUSY; i++) {
    supervise_kill_cgroup(path, cgroup_real_fs);
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  struct stat st;
  if (stat(path, &st) == 0) {
    if (!cgroup_real_fs) supervise_kill_cgroup(path, 0);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
      snprintf(f, sizeof f, "%s/%s", path, files[i]);
      unlink(f);
    }
    rmdir(path);
  }
  cgroup_unmark(path);
}

int cgroup_trial_oom_kills(const char *path) {
  char f[4200], buf[512];
  snprintf(f, sizeof f, "%s/memory.events", path);
  FILE *fp = fopen(f, "re");
  if (!fp) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  fclose(fp);
  buf[n] = 0;
  return failure_oom_kills(buf);
}
