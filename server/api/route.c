/* route: path pattern matching for the routing table. */
#include "route.h"

#include <errno.h>
#include <string.h>

enum route_method route_method_parse(const char *m) {
  if (!strcmp(m, "GET")) return RM_GET;
  if (!strcmp(m, "POST")) return RM_POST;
  if (!strcmp(m, "PUT")) return RM_PUT;
  if (!strcmp(m, "DELETE")) return RM_DELETE;
  if (!strcmp(m, "PATCH")) return RM_PATCH;
  if (!strcmp(m, "HEAD")) return RM_HEAD;
  return RM_OTHER;
}

/* Parses [s, e) as a positive int64 without sign or leading zeros. */
static int route_parse_id(const char *s, const char *e, int64_t *out) {
  if (s == e || e - s > 18 || *s == '0') return -EINVAL;
  int64_t v = 0;
  for (const char *p = s; p < e; p++) {
    if (*p < '0' || *p > '9') return -EINVAL;
    v = v * 10 + (*p - '0');
  }
  *out = v;
  return 0;
}

static int route_try(const struct route *r, const char *path, struct route_match *m) {
  const char *p = r->pattern, *u = path;
  m->nids = 0;
  m->rest = NULL;
  for (;;) {
    if (*p != '/' || *u != '/') return *p == *u ? 0 : -ENOENT; /* both ended */
    p++, u++;
    const char *pe = strchr(p, '/'), *ue = strchr(u, '/');
    if (!pe) pe = p + strlen(p);
    if (!ue) ue = u + strlen(u);
    if (pe - p == 1 && *p == '*' && !*pe) {
      m->rest = u;
      return 0;
    }
    if (pe - p == 4 && !strncmp(p, "{id}", 4)) {
      if (m->nids == 2 || route_parse_id(u, ue, &m->ids[m->nids])) return -ENOENT;
      m->nids++;
    } else if (pe - p != ue - u || strncmp(p, u, (size_t)(pe - p))) {
      return -ENOENT;
    }
    p = pe, u = ue;
    if (!*p && !*u) return 0;
  }
}

int route_find(const struct route *table, size_t n, enum route_method method, const char *path,
               struct route_match *out) {
  enum route_method want = method == RM_HEAD ? RM_GET : method;
  /* The request's own method first (a few of the table's routes): every
   * request is routed twice (head and body), so the scan is kept short. */
  for (size_t i = 0; i < n; i++) {
    struct route_match m;
    if (table[i].method != want || route_try(&table[i], path, &m)) continue;
    m.route = &table[i];
    *out = m;
    return 0;
  }
  /* None: a path another method's route knows is a wrong method. A
   * catch-all only answers its own method; it must not turn a wrong method
   * on an API path into 405 for the whole tree. */
  for (size_t i = 0; i < n; i++) {
    struct route_match m;
    if (table[i].method != want && !route_try(&table[i], path, &m) && !m.rest) return -EOPNOTSUPP;
  }
  return -ENOENT;
}
