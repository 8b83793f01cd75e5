/* Line splitter over a growable buffer. */
#include "linebuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void linebuf_init(struct linebuf *lb, size_t max) {
  memset(lb, 0, sizeof *lb);
  lb->max = max ? max : 1;
}

static void linebuf_emit(const char *s, size_t n, linebuf_cb cb, void *arg) {
  if (n > 0 && s[n - 1] == '\r') n--;
  cb(arg, s, n);
}

int linebuf_feed(struct linebuf *lb, const char *data, size_t n, linebuf_cb cb, void *arg) {
  while (n > 0) {
    const char *nl = memchr(data, '\n', n);
    size_t take = nl ? (size_t)(nl - data) : n;
    if (lb->len + take > lb->max) take = lb->max - lb->len;
    if (lb->len + take > lb->cap) {
      size_t cap = lb->cap ? lb->cap : 256;
      while (cap < lb->len + take) cap *= 2;
      char *b = realloc(lb->buf, cap);
      if (!b) return -ENOMEM;
      lb->buf = b;
      lb->cap = cap;
    }
    if (take) memcpy(lb->buf + lb->len, data, take);
    lb->len += take;
    data += take;
    n -= take;
    if (n > 0 && *data == '\n') {
      linebuf_emit(lb->buf, lb->len, cb, arg);
      lb->len = 0;
      data++;
      n--;
    } else if (lb->len == lb->max) {
      cb(arg, lb->buf, lb->len);
      lb->len = 0;
    }
  }
  return 0;
}

void linebuf_flush(struct linebuf *lb, linebuf_cb cb, void *arg) {
  if (lb->len) linebuf_emit(lb->buf, lb->len, cb, arg);
  lb->len = 0;
}

void linebuf_free(struct linebuf *lb) {
  free(lb->buf);
  memset(lb, 0, sizeof *lb);
}
