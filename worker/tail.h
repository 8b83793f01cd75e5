/* The last N bytes of a stream (a trial's output), for log uploads and for
 * the stderr lines a failure report carries. */
#ifndef CTUNE_WORKER_TAIL_H
#define CTUNE_WORKER_TAIL_H

#include <stddef.h>

struct tail {
  char *ring;
  size_t cap;               /* bytes kept */
  size_t start;             /* index of the oldest byte */
  size_t len;               /* bytes held (<= cap) */
  unsigned long long total; /* bytes ever appended: detects "changed since" */
};

int tail_init(struct tail *t, size_t cap); /* 0 or -ENOMEM */
void tail_append(struct tail *t, const char *data, size_t n);
/* A malloc'ed NUL-terminated copy of what is held; NULL on -ENOMEM. */
char *tail_copy(const struct tail *t, size_t *len);
/* The last `lines` lines held (a trailing newline does not count as an empty
 * line); malloc'ed, NUL-terminated; NULL on -ENOMEM. */
char *tail_last_lines(const struct tail *t, int lines);
void tail_free(struct tail *t);

#endif
