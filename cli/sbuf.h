/* sbuf: a growable text buffer for building output before one write; errors
 * are sticky so callers check once at the end. */
#ifndef CTUNE_CLI_SBUF_H
#define CTUNE_CLI_SBUF_H

#include <stddef.h>

struct sbuf {
  char *buf;  /* always NUL-terminated once anything was added */
  size_t len;
  size_t cap;
  int err;    /* 0, or -ENOMEM after a failed growth */
};

void sbuf_init(struct sbuf *s);
void sbuf_free(struct sbuf *s);
void sbuf_puts(struct sbuf *s, const char *str);
void sbuf_putn(struct sbuf *s, const char *str, size_t n);
void sbuf_putc(struct sbuf *s, char c);
void sbuf_printf(struct sbuf *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hands the text to the caller (never NULL on success: "" when empty).
 * Returns 0 or the sticky error; the buffer is empty afterwards either way. */
int sbuf_take(struct sbuf *s, char **out);

/* Display columns of UTF-8 text (continuation bytes take no column). */
size_t text_width(const char *str);
/* Bytes of str that fit in `cols` display columns. */
size_t text_prefix_bytes(const char *str, size_t cols);

#endif
