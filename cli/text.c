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
