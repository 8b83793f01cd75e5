/* The decoded-data cache: one file per (data set, split, source files) in a
 * directory (ctune-train --data-cache DIR), holding the images and labels
 * exactly as struct dataset keeps them (uint8, CHW). The first trial to need
 * a split parses the source files and writes the file atomically (a temp
 * file, fsync, rename) under an flock, so trials started together build it
 * once; every trial then maps it read-only and MAP_SHARED, so the trials of
 * a worker (and of other workers on the host) share one copy in the page
 * cache instead of each gunzipping and holding its own.
 *
 * A cache file is trusted only after checking its magic, format version,
 * header checksum, the source files' identity (real path, size, mtime,
 * inode: a changed source makes it stale), its sizes and a checksum of the
 * pixels and labels. A bad, stale or unwritable cache is a warning and a
 * rebuild (or a plain parse), never a crash and never wrong data. */
#ifndef CTUNE_TRAINER_DATACACHE_H
#define CTUNE_TRAINER_DATACACHE_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

/* The cache directory data_load uses; NULL (the default) = no cache. The
 * pointer is kept. */
void datacache_set_dir(const char *dir);
const char *datacache_dir(void);

/* ctune-train's --data-cache DIR (or --data-cache=DIR): removes every
 * occurrence from argv (updating *argc) and sets the directory, so the rest
 * goes to config_parse_args unchanged. -EINVAL with a message in err for a
 * missing or empty value. */
int datacache_take_flag(int *argc, char **argv, char *err, size_t errlen);
/* Its lines for --help. */
const char *datacache_usage(void);

/* data_load through the cache in cache_dir: maps the split's cache file,
 * building it first when it is missing, stale or corrupt. Errors are the
 * source's (as data_parse_split's); a cache that cannot be used only warns
 * and falls back to the parsed data. out->map is set when mapped. */
int datacache_load(const char *cache_dir, int kind, const char *dir, int test, int64_t limit,
                   struct dataset *out, char *err, size_t errlen);

/* The cache file's path for a split (its name hashes the sources' real
 * paths). -ENOENT (and the reason in err) when a source file is missing. */
int datacache_path(const char *cache_dir, int kind, const char *dir, int test, char *path,
                   size_t cap, char *err, size_t errlen);

/* Checksum of the cache's header and identity (64-bit, 4 lanes): exposed
 * for tests. */
uint64_t datacache_sum(uint64_t seed, const uint8_t *p, size_t len);
/* Checksum of the cache's pixels and labels, built as XXH3's accumulator
 * (see datacache.c): with SSE2 it runs at the memory's speed, as every
 * trial process checks the whole file; _ref is the plain-C reference the
 * SSE2 path must equal. */
uint64_t datacache_wide_sum(uint64_t seed, const uint8_t *p, size_t len);
uint64_t datacache_wide_sum_ref(uint64_t seed, const uint8_t *p, size_t len);

/* Tests only: milliseconds a builder waits while holding the lock, so that
 * concurrent trials really overlap. */
extern int datacache_test_build_delay_ms;

#endif
