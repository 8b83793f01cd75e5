/* Resource detection: cgroup limits (v1 and v2), MemTotal, an inherited
 * CUDA_VISIBLE_DEVICES, and per-CPU claims in a shared run dir. */
#include "sysres.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *fs_path(const struct sysres_fs *fs, int which) {
  if (which == 0) return fs && fs->proc_cgroup ? fs->proc_cgroup : "/proc/self/cgroup";
  if (which == 1) return fs && fs->mountinfo ? fs->mountinfo : "/proc/self/mountinfo";
  return fs && fs->meminfo ? fs->meminfo : "/proc/meminfo";
}

/* mountinfo escapes blanks and backslashes as \ooo. */
static void unescape(char *s) {
  char *o = s;
  for (char *p = s; *p; p++) {
    if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
        p[3] <= '7') {
      *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
      p += 3;
    } else {
      *o++ = *p;
    }
  }
  *o = '\0';
}

/* Is tok one of the comma-separated words of list? */
static int has_word(const char *list, const char *tok) {
  size_t n = strlen(tok);
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, tok, n)) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

/* The process's path in the hierarchy of controller ctl (v1), or in the
 * unified one (ctl NULL): the third field of /proc/self/cgroup. */
static int self_path(const struct sysres_fs *fs, const char *ctl, char *out, size_t len) {
  FILE *f = fopen(fs_path(fs, 0), "re");
  if (!f) return -errno;
  char line[4096];
  int rc = -ENOENT;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c1 = *c2 = '\0';
    int match = ctl ? has_word(c1 + 1, ctl) : (!strcmp(line, "0") && c1[1] == '\0');
    if (!match) continue;
    if ((size_t)snprintf(out, len, "%s", c2 + 1) >= len)
      rc = -ENAMETOOLONG;
    else
      rc = 0;
    break;
  }
  fclose(f);
  return rc;
}

/* The mount of that hierarchy: its mount point and the cgroup path its
 * root is (not "/" when a container mounts a sub-tree). */
static int find_mount(const struct sysres_fs *fs, const char *ctl, char *mnt, size_t mlen,
                      char *root, size_t rlen) {
  FILE *f = fopen(fs_path(fs, 1), "re");
  if (!f) return -errno;
  char line[8192];
  int rc = -ENOENT;
  while (rc < 0 && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *sep = strstr(line, " - ");
    if (!sep) continue;
    *sep = '\0';
    char fstype[64] = "", source[512] = "", opts[1024] = "";
    if (sscanf(sep + 3, "%63s %511s %1023s", fstype, source, opts) < 3) continue;
    if (ctl ? (strcmp(fstype, "cgroup") || !has_word(opts, ctl)) : strcmp(fstype, "cgroup2"))
      continue;
    char *field[5];
    char *save = NULL, *p = line;
    int nf = 0;
    for (char *t; nf < 5 && (t = strtok_r(p, " ", &save)); p = NULL) field[nf++] = t;
    if (nf < 5) continue;
    unescape(field[3]);
    unescape(field[4]);
    if ((size_t)snprintf(mnt, mlen, "%s%s", fs && fs->prefix ? fs->prefix : "", field[4]) >= mlen ||
        (size_t)snprintf(root, rlen, "%s", field[3]) >= rlen)
      rc = -ENAMETOOLONG;
    else
      rc = 0;
  }
  fclose(f);
  return rc;
}

/* The directory of this process's cgroup in that hierarchy, and its mount
 * point (where walking up stops). */
static int cgroup_dir(const struct sysres_fs *fs, const char *ctl, char *dir, size_t dlen,
                      char *mnt, size_t mlen) {
  char path[4096], root[4096];
  int rc = self_path(fs, ctl, path, sizeof path);
  if (rc < 0) return rc;
  if ((rc = find_mount(fs, ctl, mnt, mlen, root, sizeof root)) < 0) return rc;
  const char *rel = path;
  size_t rl = strlen(root);
  /* A mount of a sub-tree shows paths below its root; in a cgroup
   * namespace the path is already relative to it. */
  if (strcmp(root, "/") && !strncmp(path, root, rl) && (path[rl] == '/' || !path[rl]))
    rel = path + rl;
  if (!strcmp(rel, "/")) rel = "";
  if ((size_t)snprintf(dir, dlen, "%s%s", mnt, rel) >= dlen) return -ENAMETOOLONG;
  struct stat st;
  if (stat(dir, &st) != 0 && (size_t)snprintf(dir, dlen, "%s", mnt) >= dlen) return -ENAMETOOLONG;
  return 0;
}

static int read_text(const char *dir, const char *file, char *buf, size_t len) {
  char p[8192];
  snprintf(p, sizeof p, "%s/%s", dir, file);
  FILE *f = fopen(p, "re");
  if (!f) return -errno;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

/* One step up, not above the mount point. 0 when there is none. */
static int parent(char *dir, const char *mnt) {
  size_t ml = strlen(mnt);
  if (strlen(dir) <= ml) return 0;
  char *slash = strrchr(dir, '/');
  if (!slash || (size_t)(slash - dir) < ml) return 0;
  *slash = '\0';
  return 1;
}

/* The v1 "unlimited" value is LONG_MAX rounded down to a page. */
#define SYSRES_V1_UNLIMITED (1ULL << 62)

int sysres_cpu_quota(const struct sysres_fs *fs, double *cpus, char *where, size_t len) {
  int found = 0;
  char dir[4096], mnt[4096], buf[128];
  if (cgroup_dir(fs, "cpu", dir, sizeof dir, mnt, sizeof mnt) == 0) {
    do {
      long long q, p;
      if (read_text(dir, "cpu.cfs_quota_us", buf, sizeof buf) < 0 || sscanf(buf, "%lld", &q) != 1 ||
          q <= 0)
        continue;
      if (read_text(dir, "cpu.cfs_period_us", buf, sizeof buf) < 0 ||
          sscanf(buf, "%lld", &p) != 1 || p <= 0)
        continue;
      double c = (double)q / (double)p;
      if (!found || c < *cpus) {
        *cpus = c;
        snprintf(where, len, "cgroup v1 %s/cpu.cfs_quota_us=%lld cpu.cfs_period_us=%lld", dir, q,
                 p);
        found = 1;
      }
    } while (parent(dir, mnt));
  }
  if (cgroup_dir(fs, NULL, dir, sizeof dir, mnt, sizeof mnt) == 0) {
    do {
      char q[64];
      long long p;
      if (read_text(dir, "cpu.max", buf, sizeof buf) < 0 || sscanf(buf, "%63s %lld", q, &p) != 2 ||
          !strcmp(q, "max") || p <= 0)
        continue;
      double c = strtod(q, NULL) / (double)p;
      if (c > 0 && (!found || c < *cpus)) {
        *cpus = c;
        snprintf(where, len, "cgroup v2 %s/cpu.max=\"%s\"", dir, buf);
        found = 1;
      }
    } while (parent(dir, mnt));
  }
  return found;
}

int sysres_memory_limit(const struct sysres_fs *fs, unsigned long long *bytes, char *where,
                        size_t len) {
  int found = 0;
  char dir[4096], mnt[4096], buf[128];
  if (cgroup_dir(fs, "memory", dir, sizeof dir, mnt, sizeof mnt) == 0) {
    do {
      unsigned long long b;
      if (read_text(dir, "memory.limit_in_bytes", buf, sizeof buf) < 0 ||
          sscanf(buf, "%llu", &b) != 1 || b >= SYSRES_V1_UNLIMITED)
        continue;
      if (!found || b < *bytes) {
        *bytes = b;
        snprintf(where, len, "cgroup v1 %s/memory.limit_in_bytes=%llu", dir, b);
        found = 1;
      }
    } while (parent(dir, mnt));
  }
  if (cgroup_dir(fs, NULL, dir, sizeof dir, mnt, sizeof mnt) == 0) {
    do {
      unsigned long long b;
      if (read_text(dir, "memory.max", buf, sizeof buf) < 0 || !strcmp(buf, "max") ||
          sscanf(buf, "%llu", &b) != 1)
        continue;
      if (!found || b < *bytes) {
        *bytes = b;
        snprintf(where, len, "cgroup v2 %s/memory.max=%llu", dir, b);
        found = 1;
      }
    } while (parent(dir, mnt));
  }
  return found;
}

int sysres_mem_total(const struct sysres_fs *fs, unsigned long long *bytes) {
  FILE *f = fopen(fs_path(fs, 2), "re");
  if (!f) return -errno;
  char line[256];
  int rc = -ENOENT;
  while (fgets(line, sizeof line, f)) {
    unsigned long long kb;
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
      *bytes = kb * 1024;
      rc = 0;
      break;
    }
  }
  fclose(f);
  return rc;
}

int sysres_quota_cpus(double cpus) {
  /* 1e-9: 1.9999999 from 199999/100000-style arithmetic is not 1. */
  int n = (int)(cpus + 1e-9);
  return n < 1 ? 1 : n;
}

int sysres_cuda_visible(const char *value, int *ids, int cap, char *bad, size_t badlen) {
  int n = 0;
  if (bad && badlen) bad[0] = '\0';
  const char *p = value;
  while (p && *p && n < cap) {
    while (*p == ' ') p++;
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char tok[128];
    if (len >= sizeof tok) len = sizeof tok - 1;
    memcpy(tok, p, len);
    tok[len] = '\0';
    while (len > 0 && tok[len - 1] == ' ') tok[--len] = '\0';
    char *end;
    errno = 0;
    long v = strtol(tok, &end, 10);
    if (!len || *end || errno || v < 0 || v > 4095) {
      /* -1 is the usual "no GPU"; anything else is worth a word. */
      if (bad && badlen && strcmp(tok, "-1")) snprintf(bad, badlen, "%s", tok);
      break;
    }
    int dup = 0;
    for (int i = 0; i < n; i++) dup |= ids[i] == (int)v;
    if (dup) break; /* CUDA refuses a repeated device the same way */
    ids[n++] = (int)v;
    p = e ? e + 1 : NULL;
  }
  return n;
}

static int mkdir_own(const char *path, mode_t mode) {
  if (mkdir(path, mode) != 0 && errno != EEXIST) return -errno;
  struct stat st;
  if (lstat(path, &st) != 0) return -errno;
  /* A dir someone else made (or a link) must not steer our lock files. */
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) return -EPERM;
  return 0;
}

int sysres_run_dir(char *buf, size_t len) {
  const char *env = getenv("CTUNE_RUN_DIR");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  /* systemd's RuntimeDirectory= (a unit's own /run dir, writable under
   * ProtectSystem=strict; "a:b" when it names several: the first). */
  const char *sd = getenv("RUNTIME_DIRECTORY");
  int n;
  if (env && *env)
    n = snprintf(buf, len, "%s", env);
  else if (sd && *sd)
    n = snprintf(buf, len, "%.*s", (int)strcspn(sd, ":"), sd);
  else if (geteuid() == 0)
    n = snprintf(buf, len, "/run/ctune");
  else if (xdg && *xdg)
    n = snprintf(buf, len, "%s/ctune", xdg);
  else
    n = snprintf(buf, len, "/tmp/ctune-%d", (int)geteuid());
  if (n < 0 || (size_t)n >= len) return -ENAMETOOLONG;
  return mkdir_own(buf, geteuid() == 0 ? 0755 : 0700);
}

/* Claims: <run dir>/cpu/<id>.<pid>-<seq>, one file per worker and CPU it
 * uses (whether it got the CPU alone or shares it), flock'd LOCK_EX for the
 * worker's life. A CPU is in use while any of its files is locked; a file
 * nobody holds is a dead worker's and is removed. <run dir>/cpu/.claims,
 * locked while a worker looks and claims, makes two workers starting at
 * the same moment see each other. */
static int claim_seq;

static void add_holder(struct sysres_claim *c, const char *who) {
  int pid = 0;
  char name[100] = "", one[192];
  if (sscanf(who, "%d %99s", &pid, name) < 1) return;
  if (name[0])
    snprintf(one, sizeof one, "worker %s, pid %d", name, pid);
  else
    snprintf(one, sizeof one, "pid %d", pid);
  if (strstr(c->holders, one)) return;
  size_t used = strlen(c->holders);
  snprintf(c->holders + used, sizeof c->holders - used, "%s%s", used ? "; " : "", one);
}

/* Counts, per candidate, the live claims of others; removes dead ones.
 * who[i] receives the holders' "pid name" lines of cand[i]. */
static int scan_claims(const char *cpudir, const int *cand, int ncand, int *users,
                       char (*who)[256]) {
  DIR *d = opendir(cpudir);
  if (!d) return -errno;
  struct dirent *e;
  while ((e = readdir(d))) {
    int id, pid, seq, end = 0;
    if (sscanf(e->d_name, "%d.%d-%d%n", &id, &pid, &seq, &end) != 3 || e->d_name[end]) continue;
    int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
      unlinkat(dirfd(d), e->d_name, 0); /* its worker is gone */
      close(fd);
      continue;
    }
    char text[128] = "";
    ssize_t r = pread(fd, text, sizeof text - 1, 0);
    text[r > 0 ? r : 0] = '\0';
    text[strcspn(text, "\n")] = '\0';
    close(fd);
    for (int i = 0; i < ncand; i++)
      if (cand[i] == id) {
        users[i]++;
        size_t used = strlen(who[i]);
        snprintf(who[i] + used, 256 - used, "%s\n", text);
      }
  }
  closedir(d);
  return 0;
}

static int claim_one(struct sysres_claim *c, const char *cpudir, const char *name, int id) {
  char p[4300];
  snprintf(p, sizeof p, "%s/%d.%d-%d", cpudir, id, (int)getpid(), ++claim_seq);
  int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -errno;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  char me[160];
  int n = snprintf(me, sizeof me, "%d %s\n", (int)getpid(), name && *name ? name : "-");
  if (pwrite(fd, me, (size_t)n, 0) != n) { /* the name is a courtesy for messages */
  }
  c->fds[c->nfds++] = fd;
  return 0;
}

int sysres_claim_cpus(const char *dir, const char *name, const int *cand, int ncand, int want,
                      int exact, struct sysres_claim *out) {
  memset(out, 0, sizeof *out);
  if (ncand < 0 || ncand > SYSRES_MAX_CLAIM || want < 0) return -EINVAL;
  char cpudir[4160], lockp[4200];
  if ((size_t)snprintf(cpudir, sizeof cpudir, "%s/cpu", dir) >= sizeof cpudir) return -ENAMETOOLONG;
  int rc = mkdir_own(cpudir, geteuid() == 0 ? 0755 : 0700);
  if (rc < 0) return rc;
  snprintf(lockp, sizeof lockp, "%s/.claims", cpudir);
  int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (lk < 0) return -errno;
  while (flock(lk, LOCK_EX) != 0)
    if (errno != EINTR) {
      rc = -errno;
      close(lk);
      return rc;
    }
  static int users[SYSRES_MAX_CLAIM];
  static char who[SYSRES_MAX_CLAIM][256];
  static char pick[SYSRES_MAX_CLAIM];
  memset(users, 0, sizeof users);
  memset(who, 0, sizeof who);
  memset(pick, 0, sizeof pick);
  if ((rc = scan_claims(cpudir, cand, ncand, users, who)) < 0) goto done;
  if (exact) {
    memset(pick, 1, (size_t)ncand);
  } else {
    /* Free ones first in cand's order, then the least shared. */
    int got = 0;
    for (int level = 0; got < want && got < ncand; level++)
      for (int i = 0; i < ncand && got < want; i++)
        if (!pick[i] && users[i] == level) {
          pick[i] = 1;
          got++;
        }
  }
  for (int i = 0; i < ncand; i++) {
    if (!pick[i]) continue;
    if ((rc = claim_one(out, cpudir, name, cand[i])) < 0) goto done;
    out->ids[out->n++] = cand[i];
    if (users[i] > 0) {
      out->shared[out->nshared++] = cand[i];
      for (char *line = who[i], *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = '\0';
        add_holder(out, line);
      }
    }
  }
  /* Ascending, as the kernel lists CPUs (and alloc hands them out). */
  for (int i = 1; i < out->n; i++)
    for (int j = i; j > 0 && out->ids[j - 1] > out->ids[j]; j--) {
      int t = out->ids[j];
      out->ids[j] = out->ids[j - 1];
      out->ids[j - 1] = t;
    }
  rc = 0;
done:
  if (rc < 0) sysres_release(out);
  close(lk); /* drops the flock */
  return rc;
}

void sysres_release(struct sysres_claim *c) {
  for (int i = 0; i < c->nfds; i++) close(c->fds[i]);
  c->nfds = 0;
}
