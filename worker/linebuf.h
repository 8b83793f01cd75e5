/* Splits a byte stream (a child's stdout) into lines. */
#ifndef CTUNE_WORKER_LINEBUF_H
#define CTUNE_WORKER_LINEBUF_H

#include <stddef.h>

typedef void (*linebuf_cb)(void *arg, const char *line, size_t len);

struct linebuf {
  char *buf;
  size_t len, cap;
  size_t max; /* a line longer than this is delivered in max-sized pieces */
};

void linebuf_init(struct linebuf *lb, size_t max);
/* Calls cb for each complete line (without '\n'; a trailing '\r' is kept
 * off too). Returns 0 or -ENOMEM (the data is then dropped). */
int linebuf_feed(struct linebuf *lb, const char *data, size_t n, linebuf_cb cb, void *arg);
/* Delivers a last unterminated line, at end of stream. */
void linebuf_flush(struct linebuf *lb, linebuf_cb cb, void *arg);
void linebuf_free(struct linebuf *lb);

#endif
