/* utf8: a strict UTF-8 decoder used to validate bodies and repair text. */
#include "utf8.h"

/* Length of the valid sequence at s (1..4), or 0 when it is not valid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned cp, min;
  if (c >= 0xc2 && c <= 0xdf)
    len = 2, cp = c & 0x1f, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef)
    len = 3, cp = c & 0x0f, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4)
    len = 4, cp = c & 0x07, min = 0x10000;
  else
    return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

int utf8_valid(const char *s, size_t n, size_t *bad_at) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t l = utf8_seq(u + i, n - i);
    if (!l) {
      if (bad_at) *bad_at = i;
      return 0;
    }
    i += l;
  }
  return 1;
}

size_t utf8_sanitize(char *s, size_t n) {
  unsigned char *u = (unsigned char *)s;
  size_t fixed = 0;
  for (size_t i = 0; i < n;) {
    size_t l = utf8_seq(u + i, n - i);
    if (!l) {
      u[i++] = '?';
      fixed++;
    } else {
      i += l;
    }
  }
  return fixed;
}
