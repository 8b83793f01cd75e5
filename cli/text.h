/* text: display widths of UTF-8 text for the CLI's aligned tables. */
#ifndef CTUNE_CLI_TEXT_H
#define CTUNE_CLI_TEXT_H

#include <stddef.h>

/* Display columns of UTF-8 text (continuation bytes take no column). */
size_t text_width(const char *str);
/* Bytes of str that fit in `cols` display columns. */
size_t text_prefix_bytes(const char *str, size_t cols);
/* Removes in place what a terminal would obey rather than print: escape
 * sequences (CSI, OSC, DCS ...), C0 controls but newline and tab, DEL and
 * C1 controls; a lone carriage return becomes a newline. Trial output goes
 * through it before `ctune logs` prints it. */
void text_strip_controls(char *str);

#endif
