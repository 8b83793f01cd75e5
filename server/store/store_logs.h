/* store_logs: the text of a trial's `logs` row, which keeps every attempt's
 * output (docs/protocol.md#logs-of-every-attempt). Each attempt is a
 * section: a header line "\x1e<attempt> <worker id>\n", then the tail its
 * worker last uploaded; a gang trial's member rank R >= 1 has its own,
 * "\x1e<attempt> <worker id> <R>\n". A trial's own output cannot hold the marker byte
 * (store_logs_merge turns it into '?'). A row without a header is one
 * written before attempts were kept. Pure. */
#ifndef CTUNE_STORE_LOGS_H
#define CTUNE_STORE_LOGS_H

#include <stddef.h>
#include <stdint.h>

/* Earlier attempts kept beside the current one: at most this many, of at
 * most STORE_LOGS_KEEP bytes together (the oldest go first). */
#define STORE_LOGS_MAX_ATTEMPTS 16
#define STORE_LOGS_KEEP (1024 * 1024)
/* Sections read from a row: the attempts above and a gang's members. */
#define STORE_LOGS_MAX_SECTIONS (STORE_LOGS_MAX_ATTEMPTS + 2 + 64)

/* The row after attempt's worker uploaded text (its whole tail so far):
 * the sections of earlier attempts, bounded, then this attempt's. old may
 * be NULL. *out is malloc'd and NUL-terminated. 0 or -ENOMEM. */
int store_logs_merge(const char *old, size_t oldlen, int attempt, int64_t worker_id, int rank,
                     const char *text, size_t len, char **out, size_t *outlen);
/* What GET /trials/{id}/logs shows: one attempt's output as it is; more
 * than one each after a line "--- attempt N (worker W) ---". *out is
 * malloc'd. 0 or -ENOMEM. */
int store_logs_render(const char *row, size_t len, char **out, size_t *outlen);

#endif
