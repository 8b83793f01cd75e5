/* tls: reading and sanity-checking the server's certificate and key. */
#include "tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TLS_PEM_MAX (1024 * 1024)

/* A PEM block of this kind: its BEGIN line, with the label the kind allows
 * ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE
 * KEY" for keys), and a matching END further on. */
static int tls_has_block(const char *text, enum tls_pem_kind kind) {
  for (const char *p = text; (p = strstr(p, "-----BEGIN ")); p++) {
    const char *label = p + strlen("-----BEGIN ");
    const char *close = strstr(label, "-----");
    if (!close) return 0;
    size_t n = (size_t)(close - label);
    int ok = kind == TLS_PEM_CERT
                 ? (n == strlen("CERTIFICATE") && !strncmp(label, "CERTIFICATE", n))
                 : (n >= strlen("PRIVATE KEY") &&
                    !strncmp(close - strlen("PRIVATE KEY"), "PRIVATE KEY", strlen("PRIVATE KEY")));
    if (!ok) continue;
    char end[128];
    snprintf(end, sizeof end, "-----END %.*s-----", (int)(n < 100 ? n : 100), label);
    if (strstr(close, end)) return 1;
  }
  return 0;
}

int tls_load_pem(const char *flag, const char *path, enum tls_pem_kind kind, char **out, char *err,
                 size_t errlen) {
  *out = NULL;
  char *buf = NULL;
  int rc;
  FILE *f = fopen(path, "rb");
  if (!f) {
    rc = -errno;
    snprintf(err, errlen, "%s %s: cannot read it: %s", flag, path, strerror(-rc));
    return rc;
  }
  buf = malloc(TLS_PEM_MAX + 1);
  if (!buf) {
    rc = -ENOMEM;
    snprintf(err, errlen, "%s %s: out of memory", flag, path);
    goto out;
  }
  size_t n = fread(buf, 1, TLS_PEM_MAX + 1, f);
  if (ferror(f)) {
    rc = -EIO;
    snprintf(err, errlen, "%s %s: cannot read it: %s", flag, path, strerror(errno));
    goto out;
  }
  if (n > TLS_PEM_MAX) {
    rc = -EFBIG;
    snprintf(err, errlen, "%s %s: larger than 1 MiB; is it really a PEM %s?", flag, path,
             kind == TLS_PEM_CERT ? "certificate" : "private key");
    goto out;
  }
  buf[n] = '\0';
  /* An embedded NUL would cut the text libmicrohttpd reads. */
  if (strlen(buf) != n || !tls_has_block(buf, kind)) {
    rc = -EINVAL;
    snprintf(err, errlen, "%s %s: not a PEM %s (expected a block starting with %s)", flag, path,
             kind == TLS_PEM_CERT ? "certificate" : "private key",
             kind == TLS_PEM_CERT ? "-----BEGIN CERTIFICATE-----" : "-----BEGIN PRIVATE KEY-----");
    goto out;
  }
  *out = buf;
  buf = NULL;
  rc = 0;
out:
  free(buf);
  fclose(f);
  return rc;
}
