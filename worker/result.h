/* Decides whether one stdout line of a trial is a result and extracts it. */
#ifndef CTUNE_WORKER_RESULT_H
#define CTUNE_WORKER_RESULT_H

#include <errno.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* A line that starts with '{' but is not one valid JSON object (bad syntax,
 * trailing garbage), or whose time attribute is not a finite number: it looks
 * like a result and is not one. The caller logs a warning naming the trial. */
#define RESULT_MALFORMED (-EBADMSG)

/* A line is a result when it is a JSON object whose time_attr member is a
 * finite number. The non-finite tokens that Python's json.dumps and NumPy
 * print (NaN, -NaN, Infinity, -Infinity, nan, inf, ...) are read as null.
 * Returns 1 and *out = a new flat object holding only the line's numeric and
 * null members (what POST /results accepts; numbers exactly as parsed, so a
 * printer that round-trips doubles forwards them bit for bit), with *t set
 * to the time value; 0 when the line is plain log output (or a JSON object
 * without the time attribute); RESULT_MALFORMED; -ENOMEM. */
int result_parse_line(const char *line, size_t len, const char *time_attr,
                      cJSON **out, double *t);

/* line[0..len) with every non-finite token standing as a value outside a
 * string replaced by null. malloc'ed, NUL-terminated, *out_len its length;
 * NULL on OOM. */
char *result_fix_nonfinite(const char *line, size_t len, size_t *out_len);

#endif
