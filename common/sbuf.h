/* sbuf: a growable byte buffer with a sticky error, for building text or a
 * binary message before one write: callers append without checking and
 * check once at the end (err, or sbuf_take's result). Once anything was
 * added the bytes are followed by a NUL, so text can be used as a C string.
 * The CLI's output, jsonout's printer and tfevents' protobuf encoder build
 * into it. */
#ifndef CTUNE_SBUF_H
#define CTUNE_SBUF_H

#include <stddef.h>

struct sbuf {
  char *buf; /* len bytes and a NUL once anything was added; else NULL */
  size_t len;
  size_t cap;
  int err; /* 0, or the first error: -ENOMEM after a failed growth */
};

void sbuf_init(struct sbuf *s);
void sbuf_free(struct sbuf *s);
/* Empties it and keeps its memory (and its error, which stays sticky). */
void sbuf_reset(struct sbuf *s);
/* Makes err a negative errno unless it already holds one: a builder's own
 * failure ends the buffer as a failed growth does. */
void sbuf_fail(struct sbuf *s, int err);
/* n bytes of data (which may be NULL when n is 0). */
void sbuf_putn(struct sbuf *s, const void *data, size_t n);
void sbuf_puts(struct sbuf *s, const char *str);
void sbuf_putc(struct sbuf *s, char c);
void sbuf_printf(struct sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the text to the caller (never NULL on success: "" when empty).
 * Returns 0 or the sticky error; the buffer is empty afterwards either way. */
int sbuf_take(struct sbuf *s, char **out);

#endif
