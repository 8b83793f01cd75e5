/* commit: group commit. Writes are queued as ops; one thread applies every
 * queued op in one transaction and then tells each waiter, so many concurrent
 * requests share one commit and each is answered only after its data is in. */
#ifndef CTUNE_COMMIT_H
#define CTUNE_COMMIT_H

#include <stdint.h>

#include "store.h"

struct commit;

typedef int (*commit_apply_fn)(struct store *st, void *arg);
typedef void (*commit_free_fn)(void *arg);
/* Runs on the commit thread after the ticket's batch ended; status 0 or -EIO. */
typedef void (*commit_done_fn)(void *ctx, int status);

int commit_start(struct store *st, struct commit **out);
/* Applies what is queued, then stops the thread and frees everything. */
void commit_stop(struct commit *c);

/* Queues one op; apply runs later on the commit thread, then free(arg) (also
 * when the batch fails). Queue order is commit order, so callers that hold
 * their own lock while queueing get their order preserved. *ticket grows by
 * one per op. -ENOMEM (then free(arg) was already called). */
int commit_enqueue(struct commit *c, commit_apply_fn apply, commit_free_fn free_fn,
                   void *arg, uint64_t *ticket);
/* The last ticket handed out (0 = none). */
uint64_t commit_last_ticket(struct commit *c);

/* Blocks until the ticket is committed: 0, or -EIO when its batch failed. */
int commit_wait(struct commit *c, uint64_t ticket);
/* Non-blocking wait: when the ticket is already done returns 1 with *status.
 * Otherwise calls before(ctx) under the queue lock (so a resume can never
 * overtake a suspend), registers done(ctx, status) to run after the commit,
 * and returns 0. -ENOMEM. */
int commit_when_done(struct commit *c, uint64_t ticket, void (*before)(void *ctx),
                     commit_done_fn done, void *ctx, int *status);

/* Commits and batches so far (for /metrics). */
void commit_stats(struct commit *c, uint64_t *batches, uint64_t *ops);

#endif
