/* text: see text.h. */
#include "text.h"

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

/* ESC [ params final, ESC ] text (BEL | ESC \), ESC P/X/^/_ text ESC \, or
 * ESC and one byte: returns the bytes the sequence at p spans. */
static size_t text_escape_len(const unsigned char *p) {
  size_t i = 1;
  if (!p[i]) return i;
  if (p[i] == '[') {
    for (i = 2; p[i] && (p[i] < 0x40 || p[i] > 0x7E); i++) {
    }
    return p[i] ? i + 1 : i;
  }
  if (p[i] == ']' || p[i] == 'P' || p[i] == 'X' || p[i] == '^' || p[i] == '_') {
    for (i = 2; p[i]; i++) {
      if (p[i] == 0x07) return i + 1;
      if (p[i] == 0x1B && p[i + 1] == '\\') return i + 2;
    }
    return i;
  }
  return 2;
}

void text_strip_controls(char *str) {
  unsigned char *r = (unsigned char *)str, *w = r;
  while (*r) {
    if (*r == 0x1B) {
      r += text_escape_len(r);
    } else if (*r == '\r') {
      /* A progress bar's carriage return: a line of its own, not an overwrite. */
      if (r[1] != '\n') *w++ = '\n';
      r++;
    } else if ((*r < 0x20 && *r != '\n' && *r != '\t') || *r == 0x7F) {
      r++;
    } else if (r[0] == 0xC2 && r[1] >= 0x80 && r[1] <= 0x9F) {
      r += 2; /* C1 controls (U+0080..U+009F): 8-bit CSI among them */
    } else {
      *w++ = *r++;
    }
  }
  *w = 0;
}
