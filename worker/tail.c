/* Fixed-size byte ring holding a stream's latest output. */
#include "tail.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tail_init(struct tail *t, size_t cap) {
  memset(t, 0, sizeof *t);
  t->ring = malloc(cap ? cap : 1);
  if (!t->ring) return -ENOMEM;
  t->cap = cap ? cap : 1;
  return 0;
}

void tail_append(struct tail *t, const char *data, size_t n) {
  t->total += n;
  if (n >= t->cap) { /* only the last cap bytes survive */
    memcpy(t->ring, data + (n - t->cap), t->cap);
    t->start = 0;
    t->len = t->cap;
    return;
  }
  for (size_t i = 0; i < n;) {
    size_t end = (t->start + t->len) % t->cap;
    size_t chunk = t->cap - end;
    if (chunk > n - i) chunk = n - i;
    memcpy(t->ring + end, data + i, chunk);
    i += chunk;
    t->len += chunk;
    if (t->len > t->cap) {
      t->start = (t->start + (t->len - t->cap)) % t->cap;
      t->len = t->cap;
    }
  }
}

char *tail_copy(const struct tail *t, size_t *len) {
  char *out = malloc(t->len + 1);
  if (!out) return NULL;
  size_t first = t->cap - t->start;
  if (first > t->len) first = t->len;
  memcpy(out, t->ring + t->start, first);
  memcpy(out + first, t->ring, t->len - first);
  out[t->len] = '\0';
  if (len) *len = t->len;
  return out;
}

char *tail_last_lines(const struct tail *t, int lines) {
  size_t len;
  char *all = tail_copy(t, &len);
  if (!all) return NULL;
  size_t end = len;
  if (end > 0 && all[end - 1] == '\n') end--;
  size_t pos = end;
  int seen = 0;
  while (pos > 0) {
    if (all[pos - 1] == '\n' && ++seen == lines) break;
    pos--;
  }
  memmove(all, all + pos, end - pos);
  all[end - pos] = '\0';
  return all;
}

void tail_free(struct tail *t) {
  free(t->ring);
  memset(t, 0, sizeof *t);
}
