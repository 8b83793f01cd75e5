/* Decides whether one stdout line of a trial is a result and extracts it. */
#ifndef CTUNE_WORKER_RESULT_H
#define CTUNE_WORKER_RESULT_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* A line is a result when it is a JSON object whose time_attr member is a
 * finite number. Returns 1 and *out = a new flat object holding only the
 * line's numeric members (what POST /results accepts), with *t set to the
 * time value; 0 when the line is plain log output; -ENOMEM. */
int result_parse_line(const char *line, size_t len, const char *time_attr,
                      cJSON **out, double *t);

#endif
