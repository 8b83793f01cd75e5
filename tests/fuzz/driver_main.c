/* The fuzz targets without libFuzzer: feeds every file named on the command
 * line (or found in a directory named there) to LLVMFuzzerTestOneInput once.
 * Built with the project's own compiler, so the corpus and the regression
 * inputs run in every build (under ASan and UBSan in the sanitizer build)
 * whether clang is installed or not. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path, long *count) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buf = malloc(cap);
  int rc = 0;
  while (buf) {
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (len < cap) break;
    uint8_t *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  if (!buf || ferror(f)) {
    fprintf(stderr, "fuzz driver: %s: cannot read\n", path);
    rc = -1;
  } else {
    /* An exact-size copy, so ASan sees a read past the input's end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
      rc = -1;
    } else {
      memcpy(exact, buf, len);
      LLVMFuzzerTestOneInput(exact, len);
      free(exact);
      (*count)++;
    }
  }
  free(buf);
  fclose(f);
  return rc;
}

static int run_path(const char *path, long *count) {
  struct stat st;
  if (stat(path, &st)) {
    fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return run_file(path, count);
  struct dirent **names = NULL;
  int n = scandir(path, &names, NULL, alphasort), rc = 0;
  if (n < 0) return -1;
  for (int i = 0; i < n; i++) {
    if (names[i]->d_name[0] != '.') {
      char child[4096];
      snprintf(child, sizeof child, "%s/%s", path, names[i]->d_name);
      if (run_path(child, count)) rc = -1;
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  long count = 0;
  int rc = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i], &count)) rc = 1;
  printf("fuzz driver: %ld input(s) ran without a crash\n", count);
  return rc;
}
