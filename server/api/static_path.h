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

/* Headers every reply of the daemon carries (http.c adds them). The
 * dashboard is one page of its own scripts and styles (no inline script, no
 * eval, no inline style attribute: dom.js sets properties, not markup), the
 * favicon is a data: URL, Chart.js draws on a canvas; so default-src 'self'
 * holds, and frame-ancestors 'none' with X-Frame-Options stops clickjacking
 * of the cancel button. JSON replies get the same set: nosniff keeps a
 * browser from reading one as a script or page. */
struct static_header {
  const char *name, *value;
};
extern const struct static_header static_security_headers[];
extern const size_t static_nsecurity_headers;

/* 1 when rel (below /vendor/) is a file the dashboard loads: the vendor dir
 * is a whole system folder (/usr/share/javascript), of which only this short
 * list is served. 0 otherwise (the caller answers 404). */
int static_vendor_allowed(const char *rel);

#endif
