/* Trial directory housekeeping (see workdir.h). */
#include "workdir.h"

#include <dirent.h>
#include <errno.h>
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

int workdir_sweep_trials(const char *work_dir, int keep, workdir_needed_fn needed, void *arg) {
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
    if (workdir_rm_rf(path) == 0) rc++;
  }
done:
  closedir(d);
  free(ents);
  return rc;
}
