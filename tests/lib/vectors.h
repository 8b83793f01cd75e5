/* vectors: reads a JSON file of reference vectors (what a Python
 * transcription of Ray's or a paper's algorithm decided, written by the
 * gen_*_vectors.py scripts) for the Check unit tests that replay them. */
#ifndef CTUNE_TEST_VECTORS_H
#define CTUNE_TEST_VECTORS_H

#include <cJSON.h>

/* Reads and parses the file at path into *out (the caller owns it:
 * cJSON_Delete). 0, -errno when it cannot be opened or read, -ENOMEM, or
 * -EINVAL when it is not JSON. */
int vectors_read(const char *path, cJSON **out);

/* vectors_read for a running Check test: the test fails, naming the path
 * and why, when the file cannot be read or parsed. */
cJSON *vectors_load(const char *path);

#endif
