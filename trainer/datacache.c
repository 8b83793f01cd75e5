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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define DC_MAGIC "CTDCACHE"
#define DC_VERSION 2u
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

/* The wide checksum (the data's): XXH3's accumulator shape, which SSE2
 * runs at the memory's speed where datacache_sum's 64-bit multiplies stop
 * at about two thirds of it (it is paid by every process that maps the
 * cache). 8 lanes of 64 bits; per 64-byte stripe each lane adds its word to
 * raw[] and lo32 * hi32 of the word xor a key to acc[]; the key depends on
 * the stripe's place in its 1 KB block, and every block ends in a scramble,
 * so moved data changes the sum as well as changed data. The tail under a
 * block and the lanes go through datacache_sum. */
#define DC_LANES 8
#define DC_STRIPES 16
#define DC_BLOCK (DC_LANES * DC_STRIPES * 8)
/* splitmix64 from 0x243F6A8885A308D3: DC_STRIPES * DC_LANES stripe keys,
 * then DC_LANES scramble keys */
static const uint64_t dc_keys[DC_STRIPES * DC_LANES + DC_LANES] = {
    0x2cb0f69f4abea221ull, 0x9417034723148989ull, 0xdd555950609dfe03ull, 0xdbafb150deb12800ull,
    0x7e789b2e6c442cb6ull, 0xf41e5636c7e4f8c4ull, 0x0959d150f8fba7e4ull, 0xa97316f13cdb9eeaull,
    0x74cd8258f9520068ull, 0x55c74a62e116868bull, 0xd2f4c799a2023cbdull, 0xdf98cb79a37b51b9ull,
    0x396f5885524f3905ull, 0xaf1d56386ca3b276ull, 0xa9ffbe6b5104e85aull, 0x6bd0c51b9fd533b3ull,
    0x980ce91c50ab4b56ull, 0x28ac395780fe62c5ull, 0x768912e3a6bcedc7ull, 0x50b3e8c9332c7c88ull,
    0xce3bbfe520bd47daull, 0xcba6c8e8e0bb7c4full, 0xbf194db8434a346dull, 0x7d8f2a7b60416d7full,
    0x0849d1f6e0e10a5eull, 0x7654b590d064e22full, 0x16d1da9507df3af2ull, 0xf63aef1089ea30e4ull,
    0x9ade6673cc6c522bull, 0x4c75bc274e37087cull, 0xd35e12b49f51f27bull, 0x22ddf2ffcee481eaull,
    0x06007fb13c59a1f1ull, 0x8966a38c651ea4daull, 0x25242f018fc01ac6ull, 0xa73ec74fa31b717cull,
    0x7ee0abdd9797d3a2ull, 0x5c06ff7dc4ac1880ull, 0x8434e41042c28a7dull, 0x770a372d64327351ull,
    0xeed940dad9e9c06dull, 0x8977e93646524825ull, 0xa9897f0a62a51616ull, 0xa35d4250c53f2b3aull,
    0x4072542a94b9c33eull, 0x3154a7a62447e8abull, 0x686865712a1a245eull, 0x0fba67727d7b3b98ull,
    0x0634e2024536912full, 0xd9ff52a26cf9881aull, 0x9435dc0399f932daull, 0x18d39fc1af93e7f0ull,
    0x12f7147c1e7f46abull, 0xdedf66783eddb4a0ull, 0x6f75480614554798ull, 0xe40e95e8ef84bde2ull,
    0xbb41fe601fefb566ull, 0x5c3702e4c7bf19f1ull, 0x8c7d1d0d3d4a8ec5ull, 0xee779996ba62dccbull,
    0x80ccb15bf530844bull, 0xdf56e7dc4d57959cull, 0x9eb86a81fe90b68eull, 0x6a25741fa696fbd3ull,
    0x7009346385a45644ull, 0x8f4acc8c1520dd73ull, 0x75a59d61ae0f8464ull, 0xd9600a5f4b8b735cull,
    0x90ee70d4c2774058ull, 0x8a5f6c4b9a613341ull, 0xbae94e097390fd42ull, 0x653727708a8cae7cull,
    0x54a64593163b976full, 0x551fb9261926a565ull, 0x903b2aad4c38672aull, 0x83731d929aa1ff24ull,
    0x48311d2ec01f36edull, 0x53a5db5b92e313efull, 0xd3b8cb608aab8b70ull, 0x0f022cd022ea0cbfull,
    0xba7e97a12f21baa6ull, 0xb895acc1e36f3046ull, 0x88cb4b1adbf0f0c0ull, 0xa08f47edd89b430bull,
    0x4060ccb36efd6c18ull, 0x0dcf835fb6b9345eull, 0x38df4ac46ee5762bull, 0x986360357932dcbdull,
    0xbdeb8d63741fe7d9ull, 0x5d23cb0aedffc430ull, 0x6a5efe3a842100a4ull, 0x0d4cc01bf4e09a16ull,
    0x03dbef4217c97212ull, 0x3d8ded6c69c8b3acull, 0x53d290fa4dcee280ull, 0x00ce706478000997ull,
    0xbdf7b12c56756763ull, 0x06c99071719dc103ull, 0xd5897678e0df3feeull, 0x74429d9ac72f7146ull,
    0x9730ae769149cbbaull, 0x10ec1a636fd6612dull, 0x5dc5d9ea650fa766ull, 0xb360e068cac3adc2ull,
    0xf8df11cb5ce17a0cull, 0xa9292bbae2191df9ull, 0x3f3d169157da4aefull, 0x41d2dab33367f9dfull,
    0x95e671eefbd33caeull, 0xd5bedcacb64a8fa9ull, 0xe494760f1ba45656ull, 0x21b556b8b6ee2c5full,
    0xa1ed31d3d69b05ccull, 0x025819f971a39e83ull, 0xb9b3379a4081919aull, 0x550758640bf14a28ull,
    0x151feebb4e040f10ull, 0x423490df7adfc8b3ull, 0x8bae8d6e276c88e4ull, 0x526dd4f720811612ull,
    0xffd5fb93b0b2d28cull, 0xa9abb68f830215a8ull, 0x1751110c78d039feull, 0x103f09c76e08c0b5ull,
    0x2862583ce905324full, 0x939829751e945862ull, 0xfd2baf95439547eeull, 0x3f96e3e88a7e3ef0ull,
    0x3db34783d40d6e72ull, 0xb2fd49e41fa25861ull, 0x18d2c928bf0bc4a3ull, 0x2806ff0a63ce82b4ull,
    0x86748de3e14404e4ull, 0xa22ae3b5ff1a68ceull, 0x316214df224e0d71ull, 0xd8fb60f9bcdde6b5ull,
};
#define DC_P_ACC 0x9E3779B1u
#define DC_P_RAW 0x85EBCA77u

static void wide_blocks_ref(uint64_t *acc, uint64_t *raw, const uint8_t *p, size_t nblk) {
  for (size_t b = 0; b < nblk; b++, p += DC_BLOCK) {
    for (int s = 0; s < DC_STRIPES; s++) {
      uint64_t w[DC_LANES];
      memcpy(w, p + s * DC_LANES * 8, sizeof(w));
      for (int l = 0; l < DC_LANES; l++) {
        const uint64_t x = w[l] ^ dc_keys[s * DC_LANES + l];
        raw[l] += w[l];
        acc[l] += (x & 0xffffffffu) * (x >> 32);
      }
    }
    for (int l = 0; l < DC_LANES; l++) {
      acc[l] = (acc[l] ^ (acc[l] >> 47) ^ dc_keys[DC_STRIPES * DC_LANES + l]) * DC_P_ACC;
      raw[l] = (raw[l] ^ (raw[l] >> 29)) * DC_P_RAW;
    }
  }
}

#if defined(__SSE2__)
/* a 64-bit lane times a 32-bit constant, as the reference's uint64_t * */
static inline __m128i mul64_32(__m128i t, __m128i k) {
  return _mm_add_epi64(_mm_mul_epu32(t, k),
                       _mm_slli_epi64(_mm_mul_epu32(_mm_srli_epi64(t, 32), k), 32));
}

/* wide_blocks_ref with two lanes a register (SSE2 is x86-64's baseline) */
static void wide_blocks(uint64_t *acc, uint64_t *raw, const uint8_t *p, size_t nblk) {
  __m128i a[DC_LANES / 2], r[DC_LANES / 2];
  for (int j = 0; j < DC_LANES / 2; j++) {
    a[j] = _mm_loadu_si128((const __m128i *)(acc + 2 * j));
    r[j] = _mm_loadu_si128((const __m128i *)(raw + 2 * j));
  }
  const __m128i pa = _mm_set1_epi64x(DC_P_ACC), pr = _mm_set1_epi64x(DC_P_RAW);
  for (size_t b = 0; b < nblk; b++, p += DC_BLOCK) {
    for (int s = 0; s < DC_STRIPES; s++)
      for (int j = 0; j < DC_LANES / 2; j++) {
        const __m128i w = _mm_loadu_si128((const __m128i *)(p + s * DC_LANES * 8 + 16 * j));
        const __m128i x =
            _mm_xor_si128(w, _mm_loadu_si128((const __m128i *)(dc_keys + s * DC_LANES + 2 * j)));
        r[j] = _mm_add_epi64(r[j], w);
        a[j] = _mm_add_epi64(a[j], _mm_mul_epu32(x, _mm_srli_epi64(x, 32)));
      }
    for (int j = 0; j < DC_LANES / 2; j++) {
      const __m128i k = _mm_loadu_si128((const __m128i *)(dc_keys + DC_STRIPES * DC_LANES + 2 * j));
      a[j] = mul64_32(_mm_xor_si128(_mm_xor_si128(a[j], _mm_srli_epi64(a[j], 47)), k), pa);
      r[j] = mul64_32(_mm_xor_si128(r[j], _mm_srli_epi64(r[j], 29)), pr);
    }
  }
  for (int j = 0; j < DC_LANES / 2; j++) {
    _mm_storeu_si128((__m128i *)(acc + 2 * j), a[j]);
    _mm_storeu_si128((__m128i *)(raw + 2 * j), r[j]);
  }
}
#else
#define wide_blocks wide_blocks_ref
#endif

static uint64_t wide_sum(uint64_t seed, const uint8_t *p, size_t len,
                         void (*blocks)(uint64_t *, uint64_t *, const uint8_t *, size_t)) {
  uint64_t lanes[2 * DC_LANES]; /* acc, then raw */
  for (int l = 0; l < DC_LANES; l++) {
    lanes[l] = seed + dc_keys[l];
    lanes[DC_LANES + l] = seed;
  }
  const size_t nblk = len / DC_BLOCK;
  blocks(lanes, lanes + DC_LANES, p, nblk);
  const uint64_t h = datacache_sum(seed, p + nblk * DC_BLOCK, len - nblk * DC_BLOCK);
  return datacache_sum(h, (const uint8_t *)lanes, sizeof(lanes));
}

uint64_t datacache_wide_sum(uint64_t seed, const uint8_t *p, size_t len) {
  return wide_sum(seed, p, len, wide_blocks);
}

uint64_t datacache_wide_sum_ref(uint64_t seed, const uint8_t *p, size_t len) {
  return wide_sum(seed, p, len, wide_blocks_ref);
}

/* The data checksum: the pixels', then the labels' seeded with it. */
static uint64_t data_sum(const uint8_t *pix, size_t pix_len, const uint8_t *y, size_t n) {
  return datacache_wide_sum(datacache_wide_sum(0, pix, pix_len), y, n);
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
  /* MAP_POPULATE: the checksum below reads every page anyway; mapping them
   * in one call saves a fault per 16 pages */
  map = mmap(NULL, map_len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
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
