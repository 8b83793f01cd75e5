/* secret: constant-time comparison of credentials (secret.h). */
#include "secret.h"

#include <string.h>

int secret_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  /* Walk the longer length so the time does not depend on a mismatch spot. */
  size_t n = la > lb ? la : lb;
  unsigned diff = (unsigned)(la ^ lb);
  for (size_t i = 0; i < n; i++) {
    unsigned char ca = i < la ? (unsigned char)a[i] : 0;
    unsigned char cb = i < lb ? (unsigned char)b[i] : 0;
    diff |= (unsigned)(ca ^ cb);
  }
  return diff == 0;
}
