/* config: reads an experiment config file into cJSON with errors that name
 * the file, line and column; derives the names `ctune run` stores it under. */
#ifndef CTUNE_CLI_CONFIG_H
#define CTUNE_CLI_CONFIG_H

#include <stddef.h>
#include <cJSON.h>

/* Parses text (from `where`, used in messages) that must be one JSON object.
 * Returns 0 with *out owned by the caller, or -EINVAL with err filled. */
int config_parse(const char *text, const char *where, cJSON **out, char *err, size_t errlen);
/* Reads and parses a file (at most 4 MiB). -ENOENT/-EACCES/-EINVAL/-ENOMEM. */
int config_load(const char *path, cJSON **out, char *err, size_t errlen);
/* The experiment's "name", or "experiment" (the server's default). */
const char *config_name(const cJSON *cfg);
/* name made safe for a file name: [A-Za-z0-9._-] kept, others become '_'. */
void config_file_stem(const char *name, char *out, size_t outlen);

#endif
