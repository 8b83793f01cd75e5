/* Helpers shared by the trainer's unit tests: temporary directories that are
 * always removed, and tiny data-set files written by the tests themselves. */
#ifndef CTUNE_TEST_TRAINER_UTIL_H
#define CTUNE_TEST_TRAINER_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static inline char *tu_mkdtemp(void) {
  char tmpl[] = "/tmp/ctune-train-test-XXXXXX";
  char *d = mkdtemp(tmpl);
  return d ? strdup(d) : NULL;
}

static int tu_rm_cb(const char *p, const struct stat *sb, int f, struct FTW *ftw) {
  (void)sb;
  (void)f;
  (void)ftw;
  return remove(p);
}

static inline void tu_rmtree(char *dir) {
  if (!dir) return;
  nftw(dir, tu_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  free(dir);
}

/* Writes bytes to dir/name, gzipped when gz. */
static inline int tu_write(const char *dir, const char *name, const void *buf, size_t len, int gz) {
  char path[8192];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (!f) return -1;
    int ok = gzwrite(f, buf, (unsigned)len) == (int)len;
    return gzclose(f) == Z_OK && ok ? 0 : -1;
  }
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(buf, 1, len, f) == len;
  return fclose(f) == 0 && ok ? 0 : -1;
}

static inline void tu_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* n images h x w whose class (i % 10) shows as a bright band at a
 * class-dependent row, plus noise: learnable in a few epochs. Returns the
 * image file bytes (caller frees) and fills labels (n bytes + 8 header). */
static inline uint8_t *tu_idx_images(int n, int h, int w, size_t *len, uint8_t **labels,
                                     size_t *llen) {
  *labels = NULL;
  *len = 16 + (size_t)n * h * w;
  *llen = 8 + (size_t)n;
  uint8_t *b = malloc(*len), *l = malloc(*llen);
  if (!b || !l) {
    free(b);
    free(l);
    return NULL;
  }
  tu_be32(b, 0x803);
  tu_be32(b + 4, (uint32_t)n);
  tu_be32(b + 8, (uint32_t)h);
  tu_be32(b + 12, (uint32_t)w);
  tu_be32(l, 0x801);
  tu_be32(l + 4, (uint32_t)n);
  uint32_t s = 12345;
  for (int i = 0; i < n; i++) {
    int cls = i % 10;
    l[8 + i] = (uint8_t)cls;
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        s = s * 1103515245u + 12345u;
        int v = (int)((s >> 16) % 64);
        if (y == (cls * (h - 1)) / 9) v += 180;
        b[16 + ((size_t)i * h + y) * w + x] = (uint8_t)v;
      }
  }
  *labels = l;
  return b;
}

/* Writes a train and a test set (gzipped, the real file names) into dir. */
static inline int tu_write_idx_set(const char *dir, int n_train, int n_test, int h, int w) {
  for (int t = 0; t < 2; t++) {
    size_t len, llen;
    uint8_t *lab = NULL;
    uint8_t *img = tu_idx_images(t ? n_test : n_train, h, w, &len, &lab, &llen);
    if (!img) return -1;
    int rc =
        tu_write(dir, t ? "t10k-images-idx3-ubyte.gz" : "train-images-idx3-ubyte.gz", img, len, 1);
    if (!rc)
      rc = tu_write(dir, t ? "t10k-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte.gz", lab, llen,
                    1);
    free(img);
    free(lab);
    if (rc) return rc;
  }
  return 0;
}

#endif
