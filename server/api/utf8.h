/* utf8: checks and repairs UTF-8, so every JSON reply is valid UTF-8 even
 * when a request carried stray bytes. */
#ifndef CTUNE_UTF8_H
#define CTUNE_UTF8_H

#include <stddef.h>

/* 1 when [s, s+n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF);
 * otherwise 0 with *bad_at the offset of the first bad byte (may be NULL). */
int utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Replaces every byte that is not part of a valid sequence with '?', in
 * place; the length does not change. Returns how many bytes were replaced. */
size_t utf8_sanitize(char *s, size_t n);

#endif
