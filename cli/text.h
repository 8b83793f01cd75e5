/* text: display widths of UTF-8 text for the CLI's aligned tables. */
#ifndef CTUNE_CLI_TEXT_H
#define CTUNE_CLI_TEXT_H

#include <stddef.h>

/* Display columns of UTF-8 text (continuation bytes take no column). */
size_t text_width(const char *str);
/* Bytes of str that fit in `cols` display columns. */
size_t text_prefix_bytes(const char *str, size_t cols);

#endif
