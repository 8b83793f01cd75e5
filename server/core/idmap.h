/* idmap: trial id -> index into the caller's own array. Open addressing,
 * linear probing, at most half full, grows by doubling, never shrinks.
 * A zeroed struct idmap is an empty map; idmap_free releases it. */
#ifndef CTUNE_IDMAP_H
#define CTUNE_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct idmap_ent {
  int64_t id;
  size_t v; /* index + 1; 0: empty */
};

struct idmap {
  struct idmap_ent *e;
  size_t cap, n; /* cap: 0 or a power of two */
};

/* 0 and *idx set when id is present, -ENOENT when not. */
int idmap_get(const struct idmap *m, int64_t id, size_t *idx);
/* Maps id (not present yet) to idx: 0 or -ENOMEM (map unchanged). */
int idmap_put(struct idmap *m, int64_t id, size_t idx);
size_t idmap_count(const struct idmap *m);
void idmap_free(struct idmap *m);

#endif
