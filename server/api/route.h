/* route: matches a method and a path against the one routing table. Pure:
 * no I/O, so the unit tests reach it directly. */
#ifndef CTUNE_ROUTE_H
#define CTUNE_ROUTE_H

#include <stddef.h>
#include <stdint.h>

/* RM_PATCH: the one PATCH route edits an experiment. */
enum route_method { RM_GET = 0, RM_POST, RM_PUT, RM_DELETE, RM_PATCH, RM_HEAD, RM_OTHER };

/* Who may call a route when a token file is in use. */
enum route_access { RA_PUBLIC = 0, RA_WORKER, RA_ADMIN };

struct route {
  enum route_method method;
  /* Segments separated by '/'; "{id}" matches a positive decimal integer that
   * fits int64; a final "*" matches the rest of the path (possibly empty). */
  const char *pattern;
  enum route_access access;
  int handler; /* index the caller maps to a function */
};

struct route_match {
  const struct route *route;
  int64_t ids[2]; /* the {id} segments in order */
  int nids;
  const char *rest; /* what "*" matched, without a leading '/' */
};

enum route_method route_method_parse(const char *m);

/* 0 on a match (HEAD matches GET routes); -ENOENT when no pattern matches
 * the path; -EOPNOTSUPP when the path matches but not with this method. */
int route_find(const struct route *table, size_t n, enum route_method method, const char *path,
               struct route_match *out);

#endif
