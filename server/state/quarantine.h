/* quarantine: failures told apart and bad machines taken out of service
 * (docs/scheduling.md#failures-told-apart, docs/server.md#quarantine). Each
 * failed attempt gets an attribution (server/core/attribution.h) from the
 * facts kept here; a worker whose failures others do not share stops
 * getting leases until an admin releases it. Lock held for all. */
#ifndef CTUNE_QUARANTINE_H
#define CTUNE_QUARANTINE_H

#include <stdint.h>

#include "model.h"

/* The K of --quarantine-after when none is given. */
#define QUARANTINE_AFTER_DEFAULT 3

/* TE_FAIL of t by the worker that holds its lease, t->error already set:
 * gives t its attribution, notes the failure on the worker (which may
 * quarantine it: its other trials are requeued and the failures of its
 * streak no longer count against their trials), and says in *counts
 * whether this failure counts against t (0: a machine's, or the one retry
 * elsewhere). Queues what changed. 0 or -ENOMEM. */
int quarantine_on_fail(struct server *s, struct srv_trial *t, uint64_t now_ms, int *counts,
                       uint64_t *ticket);
/* TE_COMPLETE of t on worker w (before t ends): a success on w; an earlier
 * failure of t on another worker is that machine's, and a worker whose
 * streak others do not share is quarantined. 0 or -ENOMEM. */
int quarantine_on_success(struct server *s, struct srv_trial *t, struct srv_worker *w,
                          uint64_t *ticket);
/* Whether the lease should pass t by for w now: w failed it, it is being
 * retried elsewhere and another worker may take it (for at most a lease
 * timeout after that failure). */
int quarantine_avoid(struct server *s, const struct srv_trial *t, const struct srv_worker *w,
                     uint64_t now_ms);
/* An admin puts w back in service (its streak forgotten). -EALREADY when
 * it is not quarantined. */
int quarantine_release(struct server *s, struct srv_worker *w, uint64_t *ticket);

#endif
