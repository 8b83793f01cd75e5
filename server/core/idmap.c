/* idmap: see idmap.h. */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>

#define IDMAP_MIN_CAP 64

static size_t hash_id(int64_t id, size_t mask) {
  uint64_t x = (uint64_t)id * 0x9e3779b97f4a7c15ULL;
  return (size_t)(x ^ (x >> 29)) & mask;
}

int idmap_get(const struct idmap *m, int64_t id, size_t *idx) {
  size_t mask;
  if (!m->cap) return -ENOENT;
  mask = m->cap - 1;
  for (size_t i = hash_id(id, mask);; i = (i + 1) & mask) {
    if (!m->e[i].v) return -ENOENT;
    if (m->e[i].id == id) {
      *idx = m->e[i].v - 1;
      return 0;
    }
  }
}

static void place(struct idmap_ent *e, size_t mask, int64_t id, size_t v) {
  size_t i = hash_id(id, mask);
  while (e[i].v) i = (i + 1) & mask;
  e[i].id = id;
  e[i].v = v;
}

int idmap_put(struct idmap *m, int64_t id, size_t idx) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : IDMAP_MIN_CAP;
    struct idmap_ent *e = calloc(cap, sizeof *e);
    if (!e) return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++)
      if (m->e[i].v) place(e, cap - 1, m->e[i].id, m->e[i].v);
    free(m->e);
    m->e = e;
    m->cap = cap;
  }
  place(m->e, m->cap - 1, id, idx + 1);
  m->n++;
  return 0;
}

size_t idmap_count(const struct idmap *m) { return m->n; }

void idmap_free(struct idmap *m) {
  free(m->e);
  m->e = NULL;
  m->cap = m->n = 0;
}
