/* auth: the token file and bearer-token checks (constant time). */
#ifndef CTUNE_AUTH_H
#define CTUNE_AUTH_H

#include <stddef.h>

#include "route.h"

/* Reads "admin=TOKEN" and "worker=TOKEN" lines ('#' comments, blank lines
 * allowed). Both must be present, distinct, and 16..255 characters of
 * [A-Za-z0-9._~+/=-]. -EINVAL / -EIO with err saying what is wrong where. */
int auth_load(const char *path, char *admin, char *worker, size_t cap, char *err,
              size_t errlen);

/* Equal strings, in time independent of where they differ. */
int auth_equal(const char *a, const char *b);

/* Access granted by an Authorization header value (may be NULL):
 * RA_ADMIN, RA_WORKER, or -1 when it matches neither. */
int auth_role(const char *authorization, const char *admin, const char *worker);

/* 1 when addr is a loopback address (127.0.0.0/8, ::1, localhost). */
int auth_is_loopback(const char *addr);

#endif
