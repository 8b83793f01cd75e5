/* Trial directory housekeeping (see workdir.h). */
#include "workdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct workdir_entry {
  int id;
  long long mtime_ns;
};

static int workdir_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  /* Keep going past a file that will not go: remove as much as possible. */
  if (flag == FTW_DP)
    rmdir(path);
  else
    unlink(path);
  return 0;
}

int workdir_rm_rf(const char *path) {
  if (nftw(path, workdir_rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0) return -errno;
  struct stat st;
  return lstat(path, &st) == 0 ? -ENOTEMPTY : 0;
}

static int workdir_newer_first(const void *a, const void *b) {
  const struct workdir_entry *x = a, *y = b;
  if (x->mtime_ns != y->mtime_ns) return x->mtime_ns > y->mtime_ns ? -1 : 1;
  return y->id - x->id;
}

/* A directory name that is a trial id: digits only, no leading zero. */
static int workdir_trial_id(const char *name) {
  if (name[0] < '1' || name[0] > '9' || strlen(name) > 9) return 0;
  for (const char *p = name; *p; p++)
    if (*p < '0' || *p > '9') return 0;
  return atoi(name);
}

int workdir_sweep_trials(const char *work_dir, int keep, workdir_needed_fn needed, void *arg,
                         unsigned *gone) {
  char dir[4200];
  if (snprintf(dir, sizeof dir, "%s/trials", work_dir) >= (int)sizeof dir) return -ENAMETOOLONG;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -errno;
  struct workdir_entry *ents = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int id = workdir_trial_id(e->d_name);
    if (!id || (needed && needed(arg, id))) continue;
    char path[4500];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      struct workdir_entry *ne = realloc(ents, nc * sizeof *ne);
      if (!ne) {
        rc = -ENOMEM;
        goto done;
      }
      ents = ne;
      cap = nc;
    }
    ents[n].id = id;
    ents[n].mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    n++;
  }
  if (n > 1) qsort(ents, n, sizeof *ents, workdir_newer_first);
  for (size_t i = keep > 0 ? (size_t)keep : 0; i < n; i++) {
    char path[4500];
    snprintf(path, sizeof path, "%s/%d", dir, ents[i].id);
    if (gone) {
      /* Out of the way at once (a lease of the same id makes a new dir),
       * removed later by workdir_remove_gone. */
      char to[4500];
      snprintf(to, sizeof to, "%s/.gone.%u", dir, (*gone)++);
      if (renameat2(AT_FDCWD, path, AT_FDCWD, to, RENAME_NOREPLACE) == 0) {
        rc++;
        continue;
      }
    }
    if (workdir_rm_rf(path) == 0) rc++;
  }
done:
  closedir(d);
  free(ents);
  return rc;
}

int workdir_remove_gone(const char *work_dir) {
  char dir[4200];
  if (snprintf(dir, sizeof dir, "%s/trials", work_dir) >= (int)sizeof dir) return -ENAMETOOLONG;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -errno;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, ".gone.", 6)) continue;
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (workdir_rm_rf(path) == 0) n++;
  }
  closedir(d);
  return n;
}

/* ---- spare trial dirs ---- */

static const char *const workdir_spare_logs[2] = {"stdout.log", "stderr.log"};

/* The number of a ".spare.<n>" name; -1 for any other name. */
static long workdir_spare_seq(const char *name) {
  static const char pre[] = ".spare.";
  if (strncmp(name, pre, sizeof pre - 1)) return -1;
  const char *p = name + sizeof pre - 1;
  if (!*p || strlen(p) > 9) return -1;
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9') return -1;
  return atol(p);
}

/* Exactly as workdir_spare_make left it: 1, else 0. */
static int workdir_spare_intact(int trials_fd, const char *name) {
  int fd = openat(trials_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  int ok = fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 07777) == 0700;
  DIR *d = ok ? fdopendir(fd) : NULL;
  if (!d) {
    close(fd);
    return 0;
  }
  int seen = 0;
  struct dirent *e;
  while (ok && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    int which = !strcmp(e->d_name, workdir_spare_logs[0])   ? 1
                : !strcmp(e->d_name, workdir_spare_logs[1]) ? 2
                                                            : 0;
    ok = which && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISREG(st.st_mode) && st.st_size == 0 && st.st_nlink == 1 && st.st_uid == geteuid() &&
         (st.st_mode & 07777) == 0600;
    seen |= which;
  }
  closedir(d);
  return ok && seen == 3;
}

int workdir_spares_open(struct workdir_spares *s, const char *work_dir) {
  memset(s, 0, sizeof *s);
  if (asprintf(&s->trials, "%s/trials", work_dir) < 0) {
    s->trials = NULL;
    return -ENOMEM;
  }
  int fd = open(s->trials, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -errno;
  DIR *d = fdopendir(fd);
  if (!d) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long seq = workdir_spare_seq(e->d_name);
    if (seq < 0) continue;
    if ((unsigned long)seq >= s->next) s->next = (unsigned)seq + 1;
    if (workdir_spare_intact(dirfd(d), e->d_name)) {
      if ((rc = workdir_spares_add(s, (unsigned)seq)) < 0) break;
      continue;
    }
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", s->trials, e->d_name);
    workdir_rm_rf(path);
  }
  closedir(d);
  return rc;
}

void workdir_spares_close(struct workdir_spares *s) {
  free(s->trials);
  free(s->seq);
  memset(s, 0, sizeof *s);
}

int workdir_spare_make(const char *trials, unsigned seq) {
  char dir[4500];
  if (snprintf(dir, sizeof dir, "%s/.spare.%u", trials, seq) >= (int)sizeof dir)
    return -ENAMETOOLONG;
  if (mkdir(dir, 0700) != 0) return -errno;
  int rc = 0;
  for (int i = 0; i < 2 && rc == 0; i++) {
    char f[4600];
    snprintf(f, sizeof f, "%s/%s", dir, workdir_spare_logs[i]);
    int fd = open(f, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) rc = -errno; /* 0600 whatever the umask */
    if (fd >= 0) close(fd);
  }
  if (rc == 0 && chmod(dir, 0700) != 0) rc = -errno;
  if (rc < 0) workdir_rm_rf(dir);
  return rc;
}

int workdir_spares_add(struct workdir_spares *s, unsigned seq) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 16;
    unsigned *ns = realloc(s->seq, nc * sizeof *ns);
    if (!ns) return -ENOMEM;
    s->seq = ns;
    s->cap = nc;
  }
  s->seq[s->n++] = seq;
  return 0;
}

int workdir_spare_take(struct workdir_spares *s, const char *dir) {
  if (!s->n || s->off) return -ENOENT;
  char src[4500];
  snprintf(src, sizeof src, "%s/.spare.%u", s->trials, s->seq[s->n - 1]);
  /* Never over an existing dir (an earlier attempt's, kept as it is). */
  if (renameat2(AT_FDCWD, src, AT_FDCWD, dir, RENAME_NOREPLACE) == 0) {
    s->n--;
    return 0;
  }
  int rc = -errno;
  struct stat st;
  if (rc == -EINVAL || rc == -ENOSYS)
    s->off = 1; /* this file system cannot: dirs are made at the lease */
  else if (lstat(src, &st) != 0)
    s->n--; /* the spare itself is gone */
  return rc;
}
