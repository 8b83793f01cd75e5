/* IDX and CIFAR-10 readers: strict parsing (magic, dimensions, exact sizes,
 * label range) so a truncated or corrupt file is an error, never garbage. */
#include "data.h"
#include "datacache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <zlib.h>

#define CIFAR_REC (1 + 3 * 32 * 32)

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int data_parse_idx_images(const uint8_t *buf, size_t len, int64_t *n, int *h, int *w,
                          const uint8_t **pixels, char *err, size_t errlen) {
  if (len < 16) {
    snprintf(err, errlen, "IDX image file too short for its header (%zu bytes)", len);
    return -EINVAL;
  }
  if (be32(buf) != 0x00000803) {
    snprintf(err, errlen, "not an IDX image file: magic 0x%08x, expected 0x00000803",
             (unsigned)be32(buf));
    return -EINVAL;
  }
  uint32_t cnt = be32(buf + 4), rows = be32(buf + 8), cols = be32(buf + 12);
  if (cnt == 0 || rows == 0 || cols == 0 || rows > 4096 || cols > 4096) {
    snprintf(err, errlen, "IDX image file has bad dimensions %ux%ux%u", (unsigned)cnt,
             (unsigned)rows, (unsigned)cols);
    return -EINVAL;
  }
  uint64_t need = 16 + (uint64_t)cnt * rows * cols;
  if ((uint64_t)len != need) {
    snprintf(err, errlen,
             "IDX image file holds %zu bytes, its header says %llu "
             "(truncated or corrupt)",
             len, (unsigned long long)need);
    return -EINVAL;
  }
  *n = cnt;
  *h = (int)rows;
  *w = (int)cols;
  *pixels = buf + 16;
  return 0;
}

int data_parse_idx_labels(const uint8_t *buf, size_t len, int64_t *n, const uint8_t **labels,
                          char *err, size_t errlen) {
  if (len < 8) {
    snprintf(err, errlen, "IDX label file too short for its header (%zu bytes)", len);
    return -EINVAL;
  }
  if (be32(buf) != 0x00000801) {
    snprintf(err, errlen, "not an IDX label file: magic 0x%08x, expected 0x00000801",
             (unsigned)be32(buf));
    return -EINVAL;
  }
  uint32_t cnt = be32(buf + 4);
  if (cnt == 0 || (uint64_t)len != 8 + (uint64_t)cnt) {
    snprintf(err, errlen,
             "IDX label file holds %zu bytes, its header says %llu "
             "(truncated or corrupt)",
             len, (unsigned long long)(8 + (uint64_t)cnt));
    return -EINVAL;
  }
  for (uint32_t i = 0; i < cnt; i++)
    if (buf[8 + i] > 9) {
      snprintf(err, errlen, "IDX label %u is %u, expected 0..9", (unsigned)i, (unsigned)buf[8 + i]);
      return -EINVAL;
    }
  *n = cnt;
  *labels = buf + 8;
  return 0;
}

int data_parse_cifar(const uint8_t *buf, size_t len, int64_t *n, char *err, size_t errlen) {
  if (len == 0 || len % CIFAR_REC != 0) {
    snprintf(err, errlen,
             "CIFAR-10 batch holds %zu bytes, not a whole number of %d-byte "
             "records (truncated or corrupt)",
             len, CIFAR_REC);
    return -EINVAL;
  }
  int64_t cnt = (int64_t)(len / CIFAR_REC);
  for (int64_t i = 0; i < cnt; i++)
    if (buf[i * CIFAR_REC] > 9) {
      snprintf(err, errlen, "CIFAR-10 record %lld has label %u, expected 0..9", (long long)i,
               (unsigned)buf[i * CIFAR_REC]);
      return -EINVAL;
    }
  *n = cnt;
  return 0;
}

static long source_reads;

long data_source_reads(void) { return __atomic_load_n(&source_reads, __ATOMIC_RELAXED); }

const char *data_kind_name(int kind) {
  switch (kind) {
  case DATA_MNIST:
    return "mnist";
  case DATA_CIFAR10:
    return "cifar10";
  default:
    return "fashion-mnist";
  }
}

int data_read_file(const char *path, uint8_t **out, size_t *len, char *err, size_t errlen) {
  struct stat st;
  __atomic_fetch_add(&source_reads, 1, __ATOMIC_RELAXED);
  if (stat(path, &st) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return errno == ENOENT ? -ENOENT : -EIO;
  }
  gzFile f = gzopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -EIO;
  }
  size_t cap = (size_t)st.st_size * 4 + 4096, n = 0;
  uint8_t *buf = malloc(cap);
  int rc = 0;
  if (!buf) {
    rc = -ENOMEM;
    snprintf(err, errlen, "%s: out of memory", path);
    goto out;
  }
  for (;;) {
    if (cap - n < 65536) {
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb) {
        rc = -ENOMEM;
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
      }
      buf = nb;
      cap *= 2;
    }
    int got = gzread(f, buf + n, (unsigned)(cap - n > (1u << 30) ? (1u << 30) : cap - n));
    if (got < 0) {
      int zerr;
      const char *msg = gzerror(f, &zerr);
      snprintf(err, errlen, "%s: corrupt or truncated gzip data: %s", path,
               msg ? msg : "read error");
      rc = -EIO;
      goto out;
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  /* zlib stops quietly at a truncated gzip stream unless asked */
  {
    int zerr = Z_OK;
    gzerror(f, &zerr);
    if (zerr != Z_OK && zerr != Z_STREAM_END) {
      snprintf(err, errlen, "%s: corrupt or truncated gzip data", path);
      rc = -EIO;
      goto out;
    }
  }
out:
  gzclose(f);
  if (rc) {
    free(buf);
    return rc;
  }
  *out = buf;
  *len = n;
  return 0;
}

const char *data_default_dir(int kind) {
  switch (kind) {
  case DATA_MNIST:
    return "/usr/share/datasets/mnist";
  case DATA_CIFAR10:
    return "/usr/share/datasets/cifar10";
  default:
    return "/usr/share/datasets/fashion-mnist";
  }
}

void data_free(struct dataset *d) {
  if (!d) return;
  /* A copy of a mapped data set that was given pixels of its own (the
   * trainer's validation rows) still carries map: only pixels inside the
   * mapping mean this is the mapping's owner. */
  const uintptr_t m = (uintptr_t)d->map, p = (uintptr_t)d->pix;
  if (d->map && p >= m && p < m + d->map_len) {
    munmap(d->map, d->map_len);
  } else {
    free(d->pix);
    free(d->y);
  }
  d->map = NULL;
  d->map_len = 0;
  d->pix = NULL;
  d->y = NULL;
  d->n = 0;
}

static inline float norm_pixel(uint8_t p) { return ((float)p / 255.0f - 0.5f) / 0.5f; }

/* 256 entries computed by norm_pixel itself, so gathered batches hold the
 * same bits as the float images the loaders used to keep. */
static float norm_table[256];
static pthread_once_t norm_once = PTHREAD_ONCE_INIT;

static void norm_table_init(void) {
  for (int p = 0; p < 256; p++) norm_table[p] = norm_pixel((uint8_t)p);
}

/* norm_pixel 8 pixels at a time on CPUs with AVX2: the same three IEEE
 * operations (x / 0.5 as x * 2, which is exact), so the same bits as the
 * table; the last count % 8 pixels take the table. */
#if defined(__x86_64__) && defined(__GNUC__)
#include "avx2_util.h"
#include "conv_avx2.h"

static AVX2 int64_t normalise_avx2(const uint8_t *pix, int64_t count, float *out) {
  const __m256 k255 = _mm256_set1_ps(255.0f), half = _mm256_set1_ps(0.5f),
               two = _mm256_set1_ps(2.0f);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i p8 = _mm_loadl_epi64((const __m128i *)(pix + i));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p8));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_sub_ps(_mm256_div_ps(f, k255), half), two));
  }
  return i;
}
#define NORMALISE_AVX2(pix, count, out) (conv_avx2_cpu_ok() ? normalise_avx2(pix, count, out) : 0)
#else
#define NORMALISE_AVX2(pix, count, out) 0
#endif

void data_normalise(const uint8_t *pix, int64_t count, float *out) {
  pthread_once(&norm_once, norm_table_init);
  for (int64_t i = NORMALISE_AVX2(pix, count, out); i < count; i++) out[i] = norm_table[pix[i]];
}

void data_gather(const struct dataset *d, const int32_t *idx, int64_t n, float *x, uint8_t *y) {
  const int64_t dim = (int64_t)d->c * d->h * d->w;
  for (int64_t i = 0; i < n; i++) {
    /* the images are read in a random order: fetch the next one's lines
     * while this one is converted */
    if (i + 1 < n) {
      const uint8_t *next = d->pix + (int64_t)idx[i + 1] * dim;
      for (int64_t k = 0; k < dim; k += 64) __builtin_prefetch(next + k);
    }
    data_normalise(d->pix + (int64_t)idx[i] * dim, dim, x + i * dim);
    y[i] = d->y[idx[i]];
  }
}

/* First existing of name.gz and name in dir. */
static void pick_path(char *path, size_t cap, const char *dir, const char *name) {
  struct stat st;
  snprintf(path, cap, "%s/%s.gz", dir, name);
  if (stat(path, &st) == 0) return;
  snprintf(path, cap, "%s/%s", dir, name);
  if (stat(path, &st) == 0) return;
  snprintf(path, cap, "%s/%s.gz", dir, name); /* report the usual name */
}

static int load_idx(const char *dir, int test, int64_t limit, struct dataset *out, char *err,
                    size_t errlen) {
  char ipath[4096], lpath[4096], why[512];
  uint8_t *ibuf = NULL, *lbuf = NULL;
  size_t ilen = 0, llen = 0;
  int64_t n, nl;
  int h, w, rc;
  const uint8_t *pix, *lab;
  pick_path(ipath, sizeof(ipath), dir, test ? "t10k-images-idx3-ubyte" : "train-images-idx3-ubyte");
  pick_path(lpath, sizeof(lpath), dir, test ? "t10k-labels-idx1-ubyte" : "train-labels-idx1-ubyte");
  rc = data_read_file(ipath, &ibuf, &ilen, err, errlen);
  if (rc) goto out;
  rc = data_read_file(lpath, &lbuf, &llen, err, errlen);
  if (rc) goto out;
  rc = data_parse_idx_images(ibuf, ilen, &n, &h, &w, &pix, why, sizeof(why));
  if (rc) {
    snprintf(err, errlen, "%s: %s", ipath, why);
    goto out;
  }
  rc = data_parse_idx_labels(lbuf, llen, &nl, &lab, why, sizeof(why));
  if (rc) {
    snprintf(err, errlen, "%s: %s", lpath, why);
    goto out;
  }
  if (nl != n) {
    snprintf(err, errlen, "%s holds %lld images but %s holds %lld labels", ipath, (long long)n,
             lpath, (long long)nl);
    rc = -EINVAL;
    goto out;
  }
  if (limit > 0 && limit < n) n = limit;
  const int64_t d = (int64_t)h * w;
  out->pix = malloc((size_t)(n * d));
  out->y = malloc((size_t)n);
  if (!out->pix || !out->y) {
    data_free(out);
    snprintf(err, errlen, "out of memory loading %s", ipath);
    rc = -ENOMEM;
    goto out;
  }
  memcpy(out->pix, pix, (size_t)(n * d));
  memcpy(out->y, lab, (size_t)n);
  out->n = n;
  out->c = 1;
  out->h = h;
  out->w = w;
  out->n_classes = 10;
out:
  free(ibuf);
  free(lbuf);
  return rc;
}

static const char *const cifar_train_files[] = {"data_batch_1.bin", "data_batch_2.bin",
                                                "data_batch_3.bin", "data_batch_4.bin",
                                                "data_batch_5.bin"};
static const char *const cifar_test_files[] = {"test_batch.bin"};

/* accept both DIR and DIR/cifar-10-batches-bin (the tarball's folder) */
static void cifar_base(char *base, size_t cap, const char *dir) {
  struct stat st;
  snprintf(base, cap, "%s/cifar-10-batches-bin", dir);
  if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) snprintf(base, cap, "%s", dir);
}

int data_source_paths(int kind, const char *dir, int test, char (*paths)[DATA_PATH_MAX], int max) {
  char base[DATA_PATH_MAX];
  int n = 0;
  if (!dir) dir = data_default_dir(kind);
  if (kind == DATA_CIFAR10) {
    const char *const *files = test ? cifar_test_files : cifar_train_files;
    const int nfiles = test ? 1 : 5;
    cifar_base(base, sizeof(base), dir);
    for (int f = 0; f < nfiles && n < max; f++)
      snprintf(paths[n++], DATA_PATH_MAX, "%.3000s/%s", base, files[f]);
    return n;
  }
  if (n < max)
    pick_path(paths[n++], DATA_PATH_MAX, dir,
              test ? "t10k-images-idx3-ubyte" : "train-images-idx3-ubyte");
  if (n < max)
    pick_path(paths[n++], DATA_PATH_MAX, dir,
              test ? "t10k-labels-idx1-ubyte" : "train-labels-idx1-ubyte");
  return n;
}

static int load_cifar(const char *dir, int test, int64_t limit, struct dataset *out, char *err,
                      size_t errlen) {
  const char *const *files = test ? cifar_test_files : cifar_train_files;
  const int nfiles = test ? 1 : 5;
  char base[4096], path[4200], why[512];
  cifar_base(base, sizeof(base), dir);
  const int64_t d = 3 * 32 * 32;
  int64_t cap = 0, n = 0;
  int rc = 0;
  memset(out, 0, sizeof(*out));
  for (int f = 0; f < nfiles && (limit <= 0 || n < limit); f++) {
    uint8_t *buf = NULL;
    size_t len = 0;
    int64_t cnt;
    snprintf(path, sizeof(path), "%s/%s", base, files[f]);
    rc = data_read_file(path, &buf, &len, err, errlen);
    if (rc) goto fail;
    rc = data_parse_cifar(buf, len, &cnt, why, sizeof(why));
    if (rc) {
      snprintf(err, errlen, "%s: %s", path, why);
      free(buf);
      goto fail;
    }
    if (limit > 0 && n + cnt > limit) cnt = limit - n;
    if (n + cnt > cap) {
      int64_t ncap = n + cnt;
      uint8_t *nx = realloc(out->pix, (size_t)(ncap * d));
      if (nx) out->pix = nx;
      uint8_t *ny = realloc(out->y, (size_t)ncap);
      if (ny) out->y = ny;
      if (!nx || !ny) {
        free(buf);
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory loading %s", path);
        goto fail;
      }
      cap = ncap;
    }
    for (int64_t i = 0; i < cnt; i++) {
      const uint8_t *rec = buf + i * (1 + d);
      out->y[n + i] = rec[0];
      memcpy(out->pix + (n + i) * d, rec + 1, (size_t)d);
    }
    n += cnt;
    free(buf);
  }
  out->n = n;
  out->c = 3;
  out->h = 32;
  out->w = 32;
  out->n_classes = 10;
  return 0;
fail:
  data_free(out);
  return rc;
}

int data_parse_split(int kind, const char *dir, int test, int64_t limit, struct dataset *out,
                     char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (!dir) dir = data_default_dir(kind);
  if (kind == DATA_CIFAR10) return load_cifar(dir, test, limit, out, err, errlen);
  return load_idx(dir, test, limit, out, err, errlen);
}

int data_load(int kind, const char *dir, int test, int64_t limit, struct dataset *out, char *err,
              size_t errlen) {
  const char *cache = datacache_dir();
  if (!cache) return data_parse_split(kind, dir, test, limit, out, err, errlen);
  return datacache_load(cache, kind, dir ? dir : data_default_dir(kind), test, limit, out, err,
                        errlen);
}
