/* vectors: see vectors.h. */
#include "vectors.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vectors_read(const char *path, cJSON **out) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;

  *out = NULL;
  if (!f) return -errno;
  /* Read to the end rather than trust ftell: a pipe or a file that
   * grows while read gives its whole text too. */
  for (;;) {
    size_t got;
    if (cap - n < 2) {
      size_t ncap = cap ? cap * 2 : 1 << 16;
      char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
      if (!nb) {
        rc = -ENOMEM;
        goto out;
      }
      buf = nb;
      cap = ncap;
    }
    got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    rc = -EIO;
    goto out;
  }
  buf[n] = 0;
  *out = cJSON_Parse(buf);
  if (!*out) rc = -EINVAL;
out:
  free(buf);
  fclose(f);
  return rc;
}

cJSON *vectors_load(const char *path) {
  cJSON *doc = NULL;
  int rc = vectors_read(path, &doc);
  ck_assert_msg(rc == 0, "cannot read %s: %s", path, rc == -EINVAL ? "not JSON" : strerror(-rc));
  return doc;
}
