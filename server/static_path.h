/* static_path: pure helpers for serving files — content types by extension
 * and the check that keeps a request path inside its folder. */
#ifndef CTUNE_STATIC_PATH_H
#define CTUNE_STATIC_PATH_H

#include <stddef.h>

/* The Content-Type for a file name (text/javascript for .js and .mjs so
 * browsers accept ES modules); application/octet-stream when unknown. */
const char *static_content_type(const char *name);

/* 0 when rel (already percent-decoded, no leading '/') is a safe relative
 * path: no "..", no "." segments, no empty segments, no backslash, no NUL
 * bytes, no control characters. -EINVAL otherwise. */
int static_path_check(const char *rel);

/* Joins root and rel into buf; "" maps to index.html, and a trailing '/'
 * gets index.html. -ENAMETOOLONG / -EINVAL (unsafe rel). */
int static_path_join(const char *root, const char *rel, char *buf, size_t n);

#endif
