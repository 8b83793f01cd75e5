/* opts: ctune-server's command line, parsed without side effects. */
#ifndef CTUNE_OPTS_H
#define CTUNE_OPTS_H

#include <stddef.h>

#include "state.h"

enum opts_action { OPTS_RUN = 0, OPTS_HELP, OPTS_VERSION };

extern const char opts_usage[];

/* Fills o with defaults, then argv. Returns 0 with *action set, or -EINVAL
 * with err naming the flag and what is wrong. Pointers into argv are kept. */
int opts_parse(int argc, char **argv, struct server_options *o, enum opts_action *action, char *err,
               size_t errlen);

#endif
