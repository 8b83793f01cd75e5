/* sbuf: growable text buffer with a sticky error, plus UTF-8 width helpers. */
#include "sbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sbuf_init(struct sbuf *s) { memset(s, 0, sizeof(*s)); }

void sbuf_free(struct sbuf *s) {
  free(s->buf);
  sbuf_init(s);
}

static int sbuf_reserve(struct sbuf *s, size_t extra) {
  if (s->err) return s->err;
  if (s->len + extra + 1 <= s->cap) return 0;
  size_t cap = s->cap ? s->cap : 256;
  while (cap < s->len + extra + 1) cap *= 2;
  char *nb = realloc(s->buf, cap);
  if (!nb) {
    s->err = -ENOMEM;
    return s->err;
  }
  s->buf = nb;
  s->cap = cap;
  return 0;
}

void sbuf_putn(struct sbuf *s, const char *str, size_t n) {
  if (sbuf_reserve(s, n)) return;
  memcpy(s->buf + s->len, str, n);
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

size_t text_width(const char *str) {
  size_t w = 0;
  for (const unsigned char *p = (const unsigned char *)str; *p; p++)
    if ((*p & 0xC0) != 0x80) w++;
  return w;
}

size_t text_prefix_bytes(const char *str, size_t cols) {
  size_t w = 0, i = 0;
  const unsigned char *p = (const unsigned char *)str;
  for (; p[i]; i++) {
    if ((p[i] & 0xC0) != 0x80) {
      if (w == cols) break;
      w++;
    }
  }
  return i;
}
