/* tls: the PEM files given with --tls-cert/--tls-key, read once at start so
 * that a wrong path or a file that is not PEM is reported naming the file
 * (libmicrohttpd itself only says that the daemon did not start). */
#ifndef CTUNE_TLS_H
#define CTUNE_TLS_H

#include <stddef.h>

enum tls_pem_kind { TLS_PEM_CERT, TLS_PEM_KEY };

/* Reads path (at most 1 MiB) into *out (malloc'd, NUL-terminated) and checks
 * that it holds a PEM block of the kind: "-----BEGIN CERTIFICATE-----" for a
 * certificate, "-----BEGIN ... PRIVATE KEY-----" for a key. Returns 0, or a
 * negative errno with err naming the flag, the file and what is wrong. */
int tls_load_pem(const char *flag, const char *path, enum tls_pem_kind kind, char **out, char *err,
                 size_t errlen);

#endif
