/* jsonout: prints a cJSON tree with exact numbers.
 *
 * cJSON 1.7.15 prints a double with "%1.15g" whenever the text parses back
 * to within DBL_EPSILON of it, so about one value in eight loses its last
 * bit, and integers past 2^31 come out as 8.34281827368917e+15 or 1e+17.
 * This printer writes the same layout as cJSON_Print/cJSON_PrintUnformatted
 * but every number as the shortest of %.15g/%.16g/%.17g that strtod reads
 * back to the identical double, integral values below 2^63 as integers, and
 * NaN/Infinity as null (JSON has neither). Everything that prints JSON
 * carrying numbers (server replies and stored results, worker messages, CLI
 * output) goes through it, so a number goes out exactly as it came in. */
#ifndef CTUNE_JSONOUT_H
#define CTUNE_JSONOUT_H

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* The longest text jsonout_number writes, with its NUL. */
#define JSONOUT_NUMBER_MAX 32

/* Writes v into buf (at least JSONOUT_NUMBER_MAX bytes) as JSON; returns its
 * length. "null" for NaN and infinities, "-0" for negative zero. */
int jsonout_number(double v, char *buf, size_t cap);

/* The tree as JSON text (malloc'd; the caller frees it), or NULL when out of
 * memory. Drop-in replacements for cJSON_PrintUnformatted and cJSON_Print. */
char *jsonout_print(const cJSON *item);
char *jsonout_print_pretty(const cJSON *item);

/* Integer nodes that print exactly even past 2^53, where a double cannot
 * hold every integer (a raw node: only for trees that are printed, not
 * read back with cJSON_GetNumberValue). NULL when out of memory. */
cJSON *jsonout_int64(int64_t v);
cJSON *jsonout_uint64(uint64_t v);
/* Adds such a node to an object; the node, or NULL when out of memory. */
cJSON *jsonout_add_int64(cJSON *object, const char *name, int64_t v);

#endif
