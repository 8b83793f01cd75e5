/* CPU id lists as users and the kernel write them ("0-3,6"): parse and format. */
#ifndef CTUNE_WORKER_CPUSET_H
#define CTUNE_WORKER_CPUSET_H

#include <stddef.h>

#define CPUSET_MAX 1024

/* Parses "0-3,6" into ascending unique ids. Returns the count, or -EINVAL
 * (bad syntax, id >= CPUSET_MAX, reversed range) or -E2BIG (more than cap). */
int cpuset_parse(const char *text, int *ids, int cap);
/* Writes ids as "0,2,5" (no ranges; easy to compare in tests). Returns 0, or
 * -ENOSPC if buf is too small. */
int cpuset_format(const int *ids, int n, char *buf, size_t len);

#endif
