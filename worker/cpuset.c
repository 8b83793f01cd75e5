/* CPU id lists: "0-3,6" <-> int arrays; no I/O. */
#include "cpuset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cpuset_number(const char **p, int *out) {
  const char *s = *p;
  if (*s < '0' || *s > '9') return -EINVAL;
  long v = 0;
  while (*s >= '0' && *s <= '9') {
    v = v * 10 + (*s - '0');
    if (v >= CPUSET_MAX) return -EINVAL;
    s++;
  }
  *p = s;
  *out = (int)v;
  return 0;
}

int cpuset_parse(const char *text, int *ids, int cap) {
  unsigned char seen[CPUSET_MAX];
  memset(seen, 0, sizeof seen);
  if (!text || !*text) return -EINVAL;
  const char *p = text;
  for (;;) {
    int lo, hi;
    if (cpuset_number(&p, &lo) < 0) return -EINVAL;
    hi = lo;
    if (*p == '-') {
      p++;
      if (cpuset_number(&p, &hi) < 0 || hi < lo) return -EINVAL;
    }
    for (int i = lo; i <= hi; i++) seen[i] = 1;
    if (*p == '\0') break;
    if (*p != ',') return -EINVAL;
    p++;
  }
  int n = 0;
  for (int i = 0; i < CPUSET_MAX; i++) {
    if (!seen[i]) continue;
    if (n == cap) return -E2BIG;
    ids[n++] = i;
  }
  return n;
}

int cpuset_format(const int *ids, int n, char *buf, size_t len) {
  size_t used = 0;
  if (len == 0) return -ENOSPC;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    int w = snprintf(buf + used, len - used, i ? ",%d" : "%d", ids[i]);
    if (w < 0 || (size_t)w >= len - used) return -ENOSPC;
    used += (size_t)w;
  }
  return 0;
}
