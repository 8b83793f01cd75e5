/* jsonstrict: a validating scanner over raw JSON text, run before cJSON sees
 * it. cJSON cuts a string at an embedded \u0000 (a name "a\u0000b" becomes
 * "a"), keeps every duplicate key (the server then reads the first, a browser
 * the last) and, without require_null_terminated, ignores what follows the
 * value. Those three are only visible in the text itself, so this scanner
 * walks it once (RFC 8259 grammar, UTF-8 checked, no allocation per value)
 * and names the first problem with its key path ("trainable.argv[2]"). */
#ifndef CTUNE_JSONSTRICT_H
#define CTUNE_JSONSTRICT_H

#include <stddef.h>

/* Deeper than this is refused (cJSON's own limit is 1000). */
#define JSONSTRICT_MAX_DEPTH 1000

enum jsonstrict_problem {
  JSONSTRICT_OK = 0,
  JSONSTRICT_SYNTAX,    /* not JSON: grammar, bad UTF-8, lone surrogate, raw control char */
  JSONSTRICT_TRAILING,  /* one whole value, then more than whitespace */
  JSONSTRICT_NUL,       /* a string (key or value) holding \u0000 */
  JSONSTRICT_DUPLICATE, /* one object holding the same key twice (compared decoded) */
  JSONSTRICT_DEPTH,     /* nested deeper than JSONSTRICT_MAX_DEPTH */
};

struct jsonstrict_error {
  enum jsonstrict_problem problem;
  size_t offset;     /* byte of the text where the problem was seen */
  char path[256];    /* "config.lr", "argv[2]", "[0].loss"; "" for the top-level value */
  char message[640]; /* one line for a human, naming the path */
};

/* Checks that text[0..len) is exactly one strict JSON value (whitespace
 * around it allowed) with no NUL in any string and no duplicate key in any
 * object. Returns 0; -EINVAL with *err filled (err may be NULL); -ENOMEM.
 * The first problem in document order wins. */
int jsonstrict_check(const char *text, size_t len, struct jsonstrict_error *err);

#endif
