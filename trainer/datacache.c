/* The decoded-data cache (see datacache.h). File layout, native byte order
 * (a cache never leaves its host; byte_order catches one that did):
 *   struct dc_header | identity text (ident_len bytes) | zeros up to
 *   data_off (a multiple of 4096) | n*c*h*w pixels | n labels
 * head_sum covers the header (with head_sum 0) and the identity; data_sum
 * the pixels, then the labels. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "datacache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define DC_MAGIC "CTDCACHE"
#define DC_VERSION 1u
#define DC_BYTE_ORDER 0x01020304u
#define DC_ALIGN 4096u
#define DC_MAX_SOURCES 8
/* Room for DC_MAX_SOURCES real paths and their numbers. */
#define DC_IDENT_MAX (DC_MAX_SOURCES * (DATA_PATH_MAX + 96) + 256)

struct dc_header {
  char magic[8];
  uint32_t version;
  uint32_t byte_order;
  uint32_t kind, test;
  uint32_t c, h, w, n_classes;
  uint64_t n;
  uint64_t ident_len;
  uint64_t data_off;
  uint64_t file_size;
  uint64_t data_sum;
  uint64_t head_sum;
};
_Static_assert(sizeof(struct dc_header) == 88, "no padding in the header");

int datacache_test_build_delay_ms;

static const char *cache_dir;

void datacache_set_dir(const char *dir) { cache_dir = dir; }
const char *datacache_dir(void) { return cache_dir; }

int datacache_take_flag(int *argc, char **argv, char *err, size_t errlen) {
  static const char flag[] = "--data-cache";
  const size_t fl = sizeof(flag) - 1;
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (strncmp(a, flag, fl) == 0 && a[fl] == '=') {
      v = a + fl + 1;
    } else if (strcmp(a, flag) == 0) {
      if (i + 1 >= *argc) {
        snprintf(err, errlen, "flag --data-cache: missing value");
        return -EINVAL;
      }
      v = argv[++i];
    } else {
      argv[out++] = argv[i];
      continue;
    }
    if (!*v) {
      snprintf(err, errlen, "flag --data-cache: empty path");
      return -EINVAL;
    }
    cache_dir = v;
  }
  argv[out] = NULL;
  *argc = out;
  return 0;
}

const char *datacache_usage(void) {
  return "--data-cache DIR: keep each data set decoded in DIR (created 0700) "
         "and map it\n"
         "  read-only, shared by every trial on the host that uses DIR; "
         "built once, rebuilt\n"
         "  when the source files change or the cache file is bad. E.g.\n"
         "  ctune-train --data-cache /tmp/ctune-cache --epochs 1\n";
}

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t datacache_sum(uint64_t seed, const uint8_t *p, size_t len) {
  const uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full;
  uint64_t a = seed + p1 + p2, b = seed + p2, c = seed, d = seed - p1;
  size_t i = 0;
  /* four independent lanes keep the multiplier busy: several GB/s, so
   * checking a 47 MB file on every open costs milliseconds */
  for (; i + 32 <= len; i += 32) {
    uint64_t w[4];
    memcpy(w, p + i, sizeof(w));
    a = rotl(a + w[0] * p2, 31) * p1;
    b = rotl(b + w[1] * p2, 31) * p1;
    c = rotl(c + w[2] * p2, 31) * p1;
    d = rotl(d + w[3] * p2, 31) * p1;
  }
  uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + (uint64_t)len;
  for (; i < len; i++) h = (h ^ p[i]) * 0x100000001B3ull;
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p1;
  h ^= h >> 32;
  return h;
}

/* The data checksum: the pixels', then the labels' seeded with it. */
static uint64_t data_sum(const uint8_t *pix, size_t pix_len, const uint8_t *y, size_t n) {
  return datacache_sum(datacache_sum(0, pix, pix_len), y, n);
}

/* The identity of a split's source files: one line per file with its real
 * path, size, mtime and inode, so replacing or touching one makes the cache
 * stale. name_hash hashes the real paths only: the file's name stays the
 * same when the sources change, and the rebuild replaces the stale file. */
static int make_ident(int kind, const char *dir, int test, char **ident, size_t *ident_len,
                      uint64_t *name_hash, char *err, size_t errlen) {
  char paths[DC_MAX_SOURCES][DATA_PATH_MAX];
  const int n = data_source_paths(kind, dir, test, paths, DC_MAX_SOURCES);
  char *buf = malloc(DC_IDENT_MAX);
  if (!buf) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  size_t len = (size_t)snprintf(buf, DC_IDENT_MAX, "ctune data cache: %s %s\n",
                                data_kind_name(kind), test ? "test" : "train");
  uint64_t nh = datacache_sum(0, (const uint8_t *)buf, len);
  for (int i = 0; i < n; i++) {
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(paths[i], real) || stat(real, &st) != 0) {
      int e = errno;
      snprintf(err, errlen, "%s: %s", paths[i], strerror(e));
      free(buf);
      return e == ENOENT ? -ENOENT : -EIO;
    }
    nh = datacache_sum(nh, (const uint8_t *)real, strlen(real) + 1);
    int w = snprintf(buf + len, DC_IDENT_MAX - len, "%s %lld %lld.%09ld %llu\n", real,
                     (long long)st.st_size, (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec,
                     (unsigned long long)st.st_ino);
    if (w < 0 || (size_t)w >= DC_IDENT_MAX - len) {
      snprintf(err, errlen, "%s: path too long for the data cache", real);
      free(buf);
      return -ENAMETOOLONG;
    }
    len += (size_t)w;
  }
  *ident = buf;
  *ident_len = len;
  *name_hash = nh;
  return 0;
}

int datacache_path(const char *cdir, int kind, const char *dir, int test, char *path, size_t cap,
                   char *err, size_t errlen) {
  char *ident = NULL;
  size_t ilen = 0;
  uint64_t nh = 0;
  if (!dir) dir = data_default_dir(kind);
  int rc = make_ident(kind, dir, test, &ident, &ilen, &nh, err, errlen);
  if (rc) return rc;
  free(ident);
  if ((size_t)snprintf(path, cap, "%s/%s-%s-%016llx.cache", cdir, data_kind_name(kind),
                       test ? "test" : "train", (unsigned long long)nh) >= cap) {
    snprintf(err, errlen, "%s: path too long", cdir);
    return -ENAMETOOLONG;
  }
  return 0;
}

/* mkdir -p, new directories 0700; then refuse a directory that someone
 * else could write: a cache file there could be swapped for other data. */
static int prepare_dir(const char *dir, char *why, size_t whylen) {
  char p[PATH_MAX];
  if (!*dir) {
    snprintf(why, whylen, "empty path");
    return -EINVAL;
  }
  if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p)) {
    snprintf(why, whylen, "path too long");
    return -ENAMETOOLONG;
  }
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    const char keep = *s;
    *s = 0;
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      snprintf(why, whylen, "cannot create %s: %s", p, strerror(errno));
      return -errno;
    }
    *s = keep;
    if (!keep) break;
  }
  struct stat st;
  if (stat(dir, &st) != 0) {
    snprintf(why, whylen, "%s", strerror(errno));
    return -errno;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, whylen, "not a directory");
    return -ENOTDIR;
  }
  if (st.st_uid != geteuid() || (st.st_mode & 022)) {
    snprintf(why, whylen,
             "owned by another user or writable by group or others (mode "
             "%04o): not trusted",
             (unsigned)(st.st_mode & 07777));
    return -EPERM;
  }
  return 0;
}

/* Maps and checks path. 0: out holds the whole split; -ENOENT: no file;
 * -ESTALE: the sources changed; others: a bad file (why says what). */
static int dc_open(const char *path, int kind, int test, const char *ident, size_t ident_len,
                   struct dataset *out, char *why, size_t whylen) {
  struct dc_header h;
  char *fid = NULL;
  void *map = MAP_FAILED;
  size_t map_len = 0;
  int rc = -EINVAL;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    snprintf(why, whylen, "%s", strerror(errno));
    return errno == ENOENT ? -ENOENT : -EIO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, whylen, "not a regular file");
    goto out;
  }
  if ((uint64_t)st.st_size < sizeof(h) || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
    snprintf(why, whylen, "too short for its header (%lld bytes)", (long long)st.st_size);
    goto out;
  }
  if (memcmp(h.magic, DC_MAGIC, 8) != 0) {
    snprintf(why, whylen, "not a ctune data cache file (bad magic)");
    goto out;
  }
  if (h.version != DC_VERSION || h.byte_order != DC_BYTE_ORDER) {
    snprintf(why, whylen,
             "format version %u (byte order 0x%08x), this ctune-train "
             "writes version %u",
             (unsigned)h.version, (unsigned)h.byte_order, DC_VERSION);
    goto out;
  }
  if (h.ident_len == 0 || h.ident_len > DC_IDENT_MAX ||
      sizeof(h) + h.ident_len > (uint64_t)st.st_size) {
    snprintf(why, whylen, "source identity of %llu bytes out of range",
             (unsigned long long)h.ident_len);
    goto out;
  }
  fid = malloc(sizeof(h) + h.ident_len);
  if (!fid) {
    snprintf(why, whylen, "out of memory");
    rc = -ENOMEM;
    goto out;
  }
  if (pread(fd, fid + sizeof(h), h.ident_len, sizeof(h)) != (ssize_t)h.ident_len) {
    snprintf(why, whylen, "cannot read its source identity");
    goto out;
  }
  {
    struct dc_header z = h;
    z.head_sum = 0;
    memcpy(fid, &z, sizeof(z));
    if (datacache_sum(0, (const uint8_t *)fid, sizeof(h) + h.ident_len) != h.head_sum) {
      snprintf(why, whylen, "header checksum mismatch (corrupt)");
      goto out;
    }
  }
  if (h.kind != (uint32_t)kind || h.test != (uint32_t) !!test) {
    snprintf(why, whylen, "holds another data set or split");
    goto out;
  }
  if (h.ident_len != ident_len || memcmp(fid + sizeof(h), ident, ident_len) != 0) {
    snprintf(why, whylen,
             "stale: the source files changed since it was built (path, "
             "size, mtime or inode)");
    rc = -ESTALE;
    goto out;
  }
  const uint64_t dim = (uint64_t)h.c * h.h * h.w;
  if (h.c < 1 || h.c > 4 || h.h < 1 || h.h > 4096 || h.w < 1 || h.w > 4096 || h.n < 1 ||
      h.n > INT32_MAX || h.n_classes < 1 || h.n_classes > 256 || h.data_off % DC_ALIGN != 0 ||
      h.data_off < sizeof(h) + h.ident_len || h.file_size != h.data_off + h.n * dim + h.n ||
      h.file_size != (uint64_t)st.st_size || h.file_size > SIZE_MAX) {
    snprintf(why, whylen,
             "inconsistent sizes (%llu images of %ux%ux%u, %llu bytes, the "
             "file has %lld: truncated?)",
             (unsigned long long)h.n, (unsigned)h.c, (unsigned)h.h, (unsigned)h.w,
             (unsigned long long)h.file_size, (long long)st.st_size);
    goto out;
  }
  map_len = (size_t)h.file_size;
  map = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    snprintf(why, whylen, "cannot map it: %s", strerror(errno));
    rc = -errno;
    goto out;
  }
  const uint8_t *pix = (const uint8_t *)map + h.data_off;
  const uint8_t *y = pix + h.n * dim;
  if (data_sum(pix, (size_t)(h.n * dim), y, (size_t)h.n) != h.data_sum) {
    snprintf(why, whylen, "data checksum mismatch (corrupt)");
    goto out;
  }
  for (uint64_t i = 0; i < h.n; i++)
    if (y[i] >= h.n_classes) {
      snprintf(why, whylen, "label %llu is %u, expected < %u", (unsigned long long)i,
               (unsigned)y[i], (unsigned)h.n_classes);
      goto out;
    }
  memset(out, 0, sizeof(*out));
  out->n = (int64_t)h.n;
  out->c = (int)h.c;
  out->h = (int)h.h;
  out->w = (int)h.w;
  out->n_classes = (int)h.n_classes;
  out->pix = (uint8_t *)pix;
  out->y = (uint8_t *)y;
  out->map = map;
  out->map_len = map_len;
  map = MAP_FAILED;
  rc = 0;
out:
  if (map != MAP_FAILED) munmap(map, map_len);
  free(fid);
  close(fd);
  return rc;
}

static int write_all(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len) {
    ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Temp files of builders that died (kill -9) before their rename: only
 * called with the lock held, so no live builder owns one. */
static void remove_leftovers(const char *cdir, const char *base) {
  DIR *d = opendir(cdir);
  if (!d) return;
  char prefix[PATH_MAX + 8];
  snprintf(prefix, sizeof(prefix), "%s.tmp.", base);
  const size_t pl = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, prefix, pl) == 0) unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
}

/* Writes d to path atomically: path.tmp.PID, fsync, rename, fsync(dir). */
static int dc_write(const char *cdir, const char *path, int kind, int test, const char *ident,
                    size_t ident_len, const struct dataset *d, char *why, size_t whylen) {
  const uint64_t dim = (uint64_t)d->c * d->h * d->w;
  const uint64_t pix_len = (uint64_t)d->n * dim;
  struct dc_header h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, DC_MAGIC, 8);
  h.version = DC_VERSION;
  h.byte_order = DC_BYTE_ORDER;
  h.kind = (uint32_t)kind;
  h.test = (uint32_t) !!test;
  h.c = (uint32_t)d->c;
  h.h = (uint32_t)d->h;
  h.w = (uint32_t)d->w;
  h.n_classes = (uint32_t)d->n_classes;
  h.n = (uint64_t)d->n;
  h.ident_len = ident_len;
  h.data_off = (sizeof(h) + ident_len + DC_ALIGN - 1) / DC_ALIGN * DC_ALIGN;
  h.file_size = h.data_off + pix_len + h.n;
  h.data_sum = data_sum(d->pix, (size_t)pix_len, d->y, (size_t)h.n);
  uint8_t *head = calloc(1, (size_t)h.data_off);
  int rc = 0, fd = -1;
  char tmp[PATH_MAX + 32];
  tmp[0] = 0;
  if (!head) {
    snprintf(why, whylen, "out of memory");
    rc = -ENOMEM;
    goto out;
  }
  memcpy(head, &h, sizeof(h));
  memcpy(head + sizeof(h), ident, ident_len);
  h.head_sum = datacache_sum(0, head, sizeof(h) + ident_len);
  memcpy(head, &h, sizeof(h));
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  remove_leftovers(cdir, base);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    rc = -errno;
    snprintf(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
    goto out;
  }
  if ((rc = write_all(fd, head, (size_t)h.data_off)) != 0 ||
      (rc = write_all(fd, d->pix, (size_t)pix_len)) != 0 ||
      (rc = write_all(fd, d->y, (size_t)h.n)) != 0) {
    snprintf(why, whylen, "cannot write %s: %s", tmp, strerror(-rc));
    goto out;
  }
  if (fsync(fd) != 0) {
    rc = -errno;
    snprintf(why, whylen, "cannot fsync %s: %s", tmp, strerror(errno));
    goto out;
  }
  if (close(fd) != 0) {
    fd = -1;
    rc = -errno;
    snprintf(why, whylen, "cannot write %s: %s", tmp, strerror(errno));
    goto out;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    rc = -errno;
    snprintf(why, whylen, "cannot rename %s: %s", tmp, strerror(errno));
    goto out;
  }
  tmp[0] = 0; /* nothing to remove any more */
  {
    /* the rename itself survives a crash only once the directory is synced */
    int dfd = open(cdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
  }
out:
  if (fd >= 0) close(fd);
  if (rc && tmp[0]) unlink(tmp);
  free(head);
  return rc;
}

int datacache_load(const char *cdir, int kind, const char *dir, int test, int64_t limit,
                   struct dataset *out, char *err, size_t errlen) {
  char *ident = NULL, path[PATH_MAX], lock[PATH_MAX + 8], why[PATH_MAX + 256];
  char rdir[PATH_MAX];
  size_t ident_len = 0;
  uint64_t nh = 0;
  int lfd = -1, rc;
  struct dataset heap;
  memset(out, 0, sizeof(*out));
  memset(&heap, 0, sizeof(heap));
  /* a missing source is the parser's error to report, with its usual words */
  if (make_ident(kind, dir, test, &ident, &ident_len, &nh, why, sizeof(why)))
    return data_parse_split(kind, dir, test, limit, out, err, errlen);
  if (prepare_dir(cdir, why, sizeof(why)) != 0) {
    log_warn("data cache %s: %s: reading the data set without it", cdir, why);
    goto plain;
  }
  /* the worker passes <trial dir>/../../cache: name files by the real dir */
  if (realpath(cdir, rdir)) cdir = rdir;
  if (snprintf(path, sizeof(path), "%s/%s-%s-%016llx.cache", cdir, data_kind_name(kind),
               test ? "test" : "train", (unsigned long long)nh) >= (int)sizeof(path)) {
    log_warn("data cache %s: path too long: reading the data set without it", cdir);
    goto plain;
  }
  snprintf(lock, sizeof(lock), "%s.lock", path);
  rc = dc_open(path, kind, test, ident, ident_len, out, why, sizeof(why));
  if (rc == 0) goto hit;
  if (rc != -ENOENT) log_warn("data cache %s: %s: rebuilding it", path, why);
  lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lfd < 0) {
    log_warn("data cache %s: cannot open %s: %s: reading the data set "
             "without it",
             cdir, lock, strerror(errno));
    goto plain;
  }
  /* concurrent trials wait here for the one that builds the file */
  while (flock(lfd, LOCK_EX) != 0)
    if (errno != EINTR) {
      log_warn("data cache %s: cannot lock %s: %s: reading the data set "
               "without it",
               cdir, lock, strerror(errno));
      goto plain;
    }
  rc = dc_open(path, kind, test, ident, ident_len, out, why, sizeof(why));
  if (rc == 0) goto hit; /* another trial built it while this one waited */
  rc = data_parse_split(kind, dir, test, 0, &heap, err, errlen);
  if (rc) goto done;
  if (datacache_test_build_delay_ms > 0) {
    struct timespec ts = {datacache_test_build_delay_ms / 1000,
                          (long)(datacache_test_build_delay_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  rc = dc_write(cdir, path, kind, test, ident, ident_len, &heap, why, sizeof(why));
  if (rc) {
    log_warn("data cache %s: %s: this trial keeps its own copy", path, why);
    goto keep_heap;
  }
  rc = dc_open(path, kind, test, ident, ident_len, out, why, sizeof(why));
  if (rc) {
    log_warn("data cache %s: just written but %s: this trial keeps its own "
             "copy",
             path, why);
    goto keep_heap;
  }
  log_info("data cache: built %s (%lld images)", path, (long long)out->n);
  data_free(&heap);
  rc = 0;
  goto done;
hit:
  log_info("data cache: mapped %s (%lld images)", path, (long long)out->n);
  rc = 0;
  goto done;
keep_heap:
  *out = heap;
  rc = 0;
done:
  if (rc == 0 && limit > 0 && limit < out->n) out->n = limit;
  if (lfd >= 0) close(lfd); /* releases the lock */
  free(ident);
  return rc;
plain:
  if (lfd >= 0) close(lfd);
  free(ident);
  return data_parse_split(kind, dir, test, limit, out, err, errlen);
}
