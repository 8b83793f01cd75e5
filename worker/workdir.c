/* Trial directory housekeeping (see workdir.h). */
#include "workdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
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

/* ---- ended trials' dirs reused as spares ---- */

static const char *const workdir_spare_logs[2] = {"stdout.log", "stderr.log"};

/* The group a new spare's files get: the trials dir's when it is setgid. */
static gid_t workdir_spare_gid(int trials_fd) {
  struct stat st;
  if (fstat(trials_fd, &st) == 0 && (st.st_mode & S_ISGID)) return st.st_gid;
  return getegid();
}

/* 1 when fd has no extended attribute (ACLs are ones too) and none of the
 * inode flags its owner may set that outlive a truncation (chattr's
 * S, a, A, d, c, s, u, D, C, ...; a file system without flags has none),
 * else 0. */
static int workdir_plain(int fd) {
  char buf[1];
  if (flistxattr(fd, buf, 0) != 0) return 0;
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return errno == ENOTTY || errno == EOPNOTSUPP;
  return !(flags & (FS_SECRM_FL | FS_UNRM_FL | FS_COMPR_FL | FS_SYNC_FL | FS_IMMUTABLE_FL |
                    FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL | FS_JOURNAL_DATA_FL |
                    FS_NOTAIL_FL | FS_DIRSYNC_FL | FS_NOCOW_FL | FS_PROJINHERIT_FL));
}

/* Strips one log of a let-go dir (dfd) back to a fresh spare's: only a
 * regular file of ours with one link, no xattr or flag, open nowhere else (a
 * write lease is granted only then: not for writing nor reading), so that
 * nothing can still write into, or read, the next trial's log through it.
 * Truncated to 0, mode 0600. 0 or a negative errno. */
static int workdir_log_strip(int dfd, const char *name, gid_t gid) {
  struct stat st, fst;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return -errno;
  if (!S_ISREG(st.st_mode)) return -EINVAL; /* before open: no FIFO or device is opened */
  int fd = openat(dfd, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = 0;
  if (fstat(fd, &fst) != 0)
    rc = -errno;
  else if (!S_ISREG(fst.st_mode) || fst.st_ino != st.st_ino || fst.st_dev != st.st_dev ||
           fst.st_nlink != 1 || fst.st_uid != geteuid() || fst.st_gid != gid || !workdir_plain(fd))
    rc = -EPERM;
  else if (fcntl(fd, F_SETLEASE, F_WRLCK) != 0)
    rc = -errno; /* EAGAIN: open elsewhere; EINVAL: leases are off here */
  else {
    if (ftruncate(fd, 0) != 0 || fchmod(fd, 0600) != 0) rc = -errno;
    fcntl(fd, F_SETLEASE, F_UNLCK);
  }
  close(fd);
  return rc;
}

int workdir_spare_reuse(int trials_fd, const char *name, gid_t gid, unsigned seq) {
  int dfd = openat(trials_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return -errno;
  struct stat st;
  int rc = 0;
  if (fstat(dfd, &st) != 0)
    rc = -errno;
  else if (st.st_uid != geteuid() || st.st_gid != gid || !workdir_plain(dfd))
    rc = -EPERM;
  DIR *d = rc == 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    if (rc == 0) rc = -errno;
    close(dfd);
    return rc;
  }
  int seen = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    int which = !strcmp(e->d_name, workdir_spare_logs[0])   ? 1
                : !strcmp(e->d_name, workdir_spare_logs[1]) ? 2
                                                            : 0;
    rc = which ? workdir_log_strip(dfd, e->d_name, gid) : -ENOTEMPTY;
    seen |= which;
  }
  if (rc == 0 && seen != 3) rc = -ENOENT;
  if (rc == 0 && fchmod(dfd, 0700) != 0) rc = -errno;
  if (rc == 0) {
    char to[32];
    snprintf(to, sizeof to, ".spare.%u", seq);
    if (renameat2(trials_fd, name, trials_fd, to, RENAME_NOREPLACE) != 0) rc = -errno;
  }
  closedir(d);
  return rc;
}

int workdir_remove_gone(const char *work_dir, unsigned first, unsigned n, uint64_t *reused) {
  char dir[4200];
  if (snprintf(dir, sizeof dir, "%s/trials", work_dir) >= (int)sizeof dir) return -ENAMETOOLONG;
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -errno;
  if (n > 64) n = 64;
  gid_t gid = workdir_spare_gid(dirfd(d));
  unsigned i = 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, ".gone.", 6)) continue;
    /* Up to n become spares (the bound the caller keeps); the rest go. */
    if (i < n && workdir_spare_reuse(dirfd(d), e->d_name, gid, first + i) == 0) {
      *reused |= 1ull << i++;
      continue;
    }
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (workdir_rm_rf(path) == 0) removed++;
  }
  closedir(d);
  return removed;
}

/* ---- spare trial dirs ---- */

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
