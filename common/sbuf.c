/* sbuf: see sbuf.h. */
#include "sbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sbuf_init(struct sbuf *s) { memset(s, 0, sizeof(*s)); }

void sbuf_free(struct sbuf *s) {
  free(s->buf);
  sbuf_init(s);
}

void sbuf_reset(struct sbuf *s) {
  s->len = 0;
  if (s->buf) s->buf[0] = '\0';
}

void sbuf_fail(struct sbuf *s, int err) {
  if (!s->err) s->err = err < 0 ? err : -EINVAL;
}

/* Room for extra more bytes and the NUL, doubling from 256. */
static int sbuf_reserve(struct sbuf *s, size_t extra) {
  if (s->err) return s->err;
  if (extra < s->cap - s->len) return 0; /* cap > len whenever cap > 0 */
  if (extra > SIZE_MAX - 1 - s->len) {
    s->err = -ENOMEM;
    return s->err;
  }
  size_t need = s->len + extra + 1, cap = s->cap ? s->cap : 256;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      s->err = -ENOMEM;
      return s->err;
    }
    cap *= 2;
  }
  char *nb = realloc(s->buf, cap);
  if (!nb) {
    s->err = -ENOMEM;
    return s->err;
  }
  s->buf = nb;
  s->cap = cap;
  return 0;
}

void sbuf_putn(struct sbuf *s, const void *data, size_t n) {
  if (sbuf_reserve(s, n)) return;
  if (n) memcpy(s->buf + s->len, data, n);
  s->len += n;
  s->buf[s->len] = '\0';
}

void sbuf_puts(struct sbuf *s, const char *str) { sbuf_putn(s, str, strlen(str)); }

void sbuf_putc(struct sbuf *s, char c) { sbuf_putn(s, &c, 1); }

void sbuf_printf(struct sbuf *s, const char *fmt, ...) {
  if (s->err) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    s->err = -EINVAL;
    return;
  }
  if (sbuf_reserve(s, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  s->len += (size_t)n;
}

int sbuf_take(struct sbuf *s, char **out) {
  int err = s->err;
  if (!err && !s->buf) err = sbuf_reserve(s, 0);
  if (err) {
    sbuf_free(s);
    *out = NULL;
    return err;
  }
  s->buf[s->len] = '\0';
  *out = s->buf;
  sbuf_init(s);
  return 0;
}
