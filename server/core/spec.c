/* spec: see spec.h. */
#include "spec.h"

#include <stdarg.h>
#include <stdio.h>

void spec_error_set(struct validate_error *err, const char *path, const char *fmt, ...)
{
	va_list ap;
	if (!err)
		return;
	snprintf(err->path, sizeof err->path, "%s", path ? path : "");
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
}

void spec_path_join(char *dst, size_t size, const char *base, char sep, const char *key)
{
	size_t n = 0;
	if (size == 0)
		return;
	for (; base && *base && n + 1 < size; base++)
		dst[n++] = *base;
	if (n > 0 && sep && n + 1 < size)
		dst[n++] = sep;
	for (; key && *key && n + 1 < size; key++)
		dst[n++] = *key;
	dst[n] = '\0';
}
