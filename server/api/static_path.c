/* static_path: content types and traversal-proof path joining. */
#include "static_path.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
  const char *ext, *type;
} static_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".htm", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".json", "application/json"},
    {".map", "application/json"},
    {".txt", "text/plain; charset=utf-8"},
    {".woff2", "font/woff2"},
};

const char *static_content_type(const char *name) {
  const char *dot = strrchr(name, '.'), *slash = strrchr(name, '/');
  if (dot && (!slash || dot > slash))
    for (size_t i = 0; i < sizeof static_types / sizeof static_types[0]; i++)
      if (!strcasecmp(dot, static_types[i].ext)) return static_types[i].type;
  return "application/octet-stream";
}

int static_path_check(const char *rel) {
  const char *seg = rel;
  for (const char *p = rel;; p++) {
    if (*p == '/' || !*p) {
      size_t n = (size_t)(p - seg);
      /* An empty final segment is a directory request ("a/"); elsewhere it is "//". */
      if ((n == 0 && *p) || (n == 1 && seg[0] == '.') || (n == 2 && !strncmp(seg, "..", 2)))
        return -EINVAL;
      if (!*p) break;
      seg = p + 1;
    } else if (*p == '\\' || (unsigned char)*p < 0x20 || *p == 0x7f) {
      return -EINVAL;
    }
  }
  return 0;
}

int static_path_join(const char *root, const char *rel, char *buf, size_t n) {
  if (*rel && static_path_check(rel)) return -EINVAL;
  size_t rl = strlen(rel);
  const char *index = (!rl || rel[rl - 1] == '/') ? "index.html" : "";
  int w = snprintf(buf, n, "%s/%s%s", root, rel, index);
  if (w < 0 || (size_t)w >= n) return -ENAMETOOLONG;
  return 0;
}

const struct static_header static_security_headers[] = {
    {"Content-Security-Policy",
     "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
     "frame-ancestors 'none'"},
    {"X-Frame-Options", "DENY"},
    {"X-Content-Type-Options", "nosniff"},
    {"Referrer-Policy", "no-referrer"},
};
const size_t static_nsecurity_headers =
    sizeof static_security_headers / sizeof static_security_headers[0];

/* What web/js/charts.js loads (Debian's Chart.js 3 names it chart.min.js,
 * Chart.js 4 chart.umd.js). Add a file here when the dashboard starts to
 * load it. */
static const char *const static_vendor_files[] = {
    "chart.js/chart.min.js",
    "chart.js/chart.umd.js",
};

int static_vendor_allowed(const char *rel) {
  for (size_t i = 0; i < sizeof static_vendor_files / sizeof static_vendor_files[0]; i++)
    if (!strcmp(rel, static_vendor_files[i])) return 1;
  return 0;
}
