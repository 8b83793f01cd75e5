/* Checkpoint format: "CTUNECKP", u32 version, u32 zero, the fixed fields, the
 * three arrays, then a u32 CRC-32 (zlib) of every byte before it. Fields are
 * in the machine's byte order (x86-64 and aarch64 are both little-endian). */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

struct wbuf {
  uint8_t *p;
  size_t n;
};

static void put(struct wbuf *w, const void *src, size_t n) {
  memcpy(w->p + w->n, src, n);
  w->n += n;
}

/* The fields in their on-disk order: a list clang-format would reflow
 * differently on each pass, so it is laid out by hand. */
// clang-format off
#define FIXED_FIELDS(X)                                                    \
  X(model.kind) X(model.in_c) X(model.in_h) X(model.in_w)                  \
  X(model.n_classes) X(model.l1) X(model.l2) X(optim_kind) X(epoch)        \
  X(pos) X(step) X(rng) X(time_total_s) X(epoch_time_s)                    \
  X(epoch_train_time_s) X(train_loss_sum) X(train_count) X(last_loss)      \
  X(last_accuracy) X(seed) X(train_limit) X(val_fraction) X(dataset)       \
  X(n_train) X(n_params) X(n_state)
// clang-format on

static size_t fixed_size(void) {
  size_t n = 0;
  struct ckpt c;
  (void)c;
#define SZ(f) n += sizeof(c.f);
  FIXED_FIELDS(SZ)
#undef SZ
  return n;
}

int ckpt_encode(const struct ckpt *c, uint8_t **out, size_t *len) {
  if (c->n_train < 0 || c->n_params < 0 || c->n_state < 0) return -EINVAL;
  size_t total = 16 + fixed_size() + sizeof(int32_t) * (size_t)c->n_train +
                 sizeof(float) * (size_t)(c->n_params + c->n_state) + 4;
  struct wbuf w = {malloc(total), 0};
  if (!w.p) return -ENOMEM;
  uint32_t ver = CKPT_VERSION, zero = 0;
  put(&w, CKPT_MAGIC, 8);
  put(&w, &ver, 4);
  put(&w, &zero, 4);
#define PUT(f) put(&w, &c->f, sizeof(c->f));
  FIXED_FIELDS(PUT)
#undef PUT
  if (c->n_train) put(&w, c->perm, sizeof(int32_t) * (size_t)c->n_train);
  if (c->n_params) put(&w, c->params, sizeof(float) * (size_t)c->n_params);
  if (c->n_state) put(&w, c->state, sizeof(float) * (size_t)c->n_state);
  uint32_t crc = (uint32_t)crc32(0L, w.p, (uInt)w.n);
  put(&w, &crc, 4);
  *out = w.p;
  *len = w.n;
  return 0;
}

void ckpt_free(struct ckpt *c) {
  free(c->perm);
  free(c->params);
  free(c->state);
  c->perm = NULL;
  c->params = c->state = NULL;
}

int ckpt_decode(const uint8_t *buf, size_t len, struct ckpt *c, char *err, size_t errlen) {
  memset(c, 0, sizeof(*c));
  const size_t fixed = fixed_size();
  if (len < 16 + fixed + 4) {
    snprintf(err, errlen, "checkpoint too short (%zu bytes)", len);
    return -EINVAL;
  }
  if (memcmp(buf, CKPT_MAGIC, 8) != 0) {
    snprintf(err, errlen, "not a ctune checkpoint (bad magic)");
    return -EINVAL;
  }
  uint32_t ver, crc;
  memcpy(&ver, buf + 8, 4);
  if (ver != CKPT_VERSION) {
    snprintf(err, errlen, "checkpoint format version %u, this build reads %u", (unsigned)ver,
             CKPT_VERSION);
    return -EINVAL;
  }
  memcpy(&crc, buf + len - 4, 4);
  if ((uint32_t)crc32(0L, buf, (uInt)(len - 4)) != crc) {
    snprintf(err, errlen, "checkpoint checksum mismatch (corrupt or truncated)");
    return -EINVAL;
  }
  size_t at = 16;
#define GET(f)                                                                                     \
  memcpy(&c->f, buf + at, sizeof(c->f));                                                           \
  at += sizeof(c->f);
  FIXED_FIELDS(GET)
#undef GET
  uint64_t need = (uint64_t)16 + fixed + 4;
  if (c->n_train < 0 || c->n_params < 0 || c->n_state < 0 || c->n_train > (1ll << 31) ||
      c->n_params > (1ll << 34) || c->n_state > (1ll << 35)) {
    snprintf(err, errlen, "checkpoint has impossible sizes");
    goto bad;
  }
  need +=
      sizeof(int32_t) * (uint64_t)c->n_train + sizeof(float) * (uint64_t)(c->n_params + c->n_state);
  if (need != len) {
    snprintf(err, errlen, "checkpoint size %zu does not match its header", len);
    goto bad;
  }
  c->perm = malloc(sizeof(int32_t) * (size_t)(c->n_train ? c->n_train : 1));
  c->params = malloc(sizeof(float) * (size_t)(c->n_params ? c->n_params : 1));
  c->state = malloc(sizeof(float) * (size_t)(c->n_state ? c->n_state : 1));
  if (!c->perm || !c->params || !c->state) {
    ckpt_free(c);
    snprintf(err, errlen, "out of memory reading the checkpoint");
    return -ENOMEM;
  }
  memcpy(c->perm, buf + at, sizeof(int32_t) * (size_t)c->n_train);
  at += sizeof(int32_t) * (size_t)c->n_train;
  memcpy(c->params, buf + at, sizeof(float) * (size_t)c->n_params);
  at += sizeof(float) * (size_t)c->n_params;
  memcpy(c->state, buf + at, sizeof(float) * (size_t)c->n_state);
  return 0;
bad:
  memset(c, 0, sizeof(*c));
  return -EINVAL;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

int ckpt_prepare_dir(const char *dir, char *err, size_t errlen) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    int e = errno;
    snprintf(err, errlen, "checkpoint dir %s: cannot create: %s", dir, strerror(e));
    return -e;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(err, errlen, "checkpoint dir %s: not a directory", dir);
    return -ENOTDIR;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    int e = errno;
    snprintf(err, errlen, "checkpoint dir %s: not writable: %s", dir, strerror(e));
    return -e;
  }
  return 0;
}

int ckpt_save(const char *dir, const struct ckpt *c, char *err, size_t errlen) {
  char path[4096], tmp[4200];
  uint8_t *buf = NULL;
  size_t len = 0;
  int fd = -1, rc;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    rc = -errno;
    snprintf(err, errlen, "checkpoint dir %s: %s", dir, strerror(errno));
    return rc;
  }
  snprintf(path, sizeof(path), "%s/%s", dir, CKPT_FILE);
  snprintf(tmp, sizeof(tmp), "%s/.%s.tmp.%ld", dir, CKPT_FILE, (long)getpid());
  rc = ckpt_encode(c, &buf, &len);
  if (rc) {
    snprintf(err, errlen, "cannot encode the checkpoint: %s", strerror(-rc));
    return rc;
  }
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = -errno;
    snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
    goto out;
  }
  rc = write_all(fd, buf, len);
  if (!rc && fsync(fd) != 0) rc = -errno;
  if (close(fd) != 0 && !rc) rc = -errno;
  fd = -1;
  if (!rc && rename(tmp, path) != 0) rc = -errno;
  if (rc) {
    snprintf(err, errlen, "writing %s: %s", path, strerror(-rc));
    unlink(tmp);
    goto out;
  }
  /* make the rename itself durable */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
out:
  free(buf);
  return rc;
}

int ckpt_load(const char *dir, struct ckpt *c, char *err, size_t errlen) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, CKPT_FILE);
  memset(c, 0, sizeof(*c));
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    snprintf(err, errlen, "%s: %s", path, strerror(e));
    return e == ENOENT ? -ENOENT : -EIO;
  }
  uint8_t *buf = NULL;
  size_t cap = 0, n = 0;
  int rc = 0;
  for (;;) {
    if (n == cap) {
      size_t ncap = cap ? cap * 2 : 1 << 16;
      uint8_t *nb = realloc(buf, ncap);
      if (!nb) {
        rc = -ENOMEM;
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
      }
      buf = nb;
      cap = ncap;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  if (ferror(f)) {
    rc = -EIO;
    snprintf(err, errlen, "%s: read error", path);
    goto out;
  }
  char why[256];
  rc = ckpt_decode(buf, n, c, why, sizeof(why));
  if (rc) snprintf(err, errlen, "%s: %s", path, why);
out:
  free(buf);
  fclose(f);
  return rc;
}
