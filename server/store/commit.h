/* commit: group commit. Writes are queued as ops; one thread applies every
 * queued op in one transaction and then tells each waiter, so many concurrent
 * requests share one commit and each is answered only after its data is in.
 *
 * Ops queued during one hold of the caller's model lock form one GROUP
 * (commit_group_close, called by server_unlock, hands it over): a group is
 * never split across transactions, so a change that touches several rows
 * commits whole or not at all. A ticket names a group. */
#ifndef CTUNE_COMMIT_H
#define CTUNE_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct commit;

typedef int (*commit_apply_fn)(struct store *st, void *arg);
typedef void (*commit_free_fn)(void *arg);
/* Runs on the commit thread after the ticket's batch ended; status 0, -EIO
 * (this group's own write failed) or -EAGAIN (refused: it was queued behind a
 * failed group and may have built on its state; nothing of it was stored). */
typedef void (*commit_done_fn)(void *ctx, int status);

int commit_start(struct store *st, struct commit **out);
/* Applies what is queued, then stops the thread and frees everything. */
void commit_stop(struct commit *c);
/* The change counter the store holds already (a read-only server's, which
 * stores nothing): a hold that leaves it at or below seq queues no group. */
void commit_seq_stored(struct commit *c, int64_t seq);

/* Queues one op into the open group; apply runs later on the commit thread,
 * then free(arg) (also when the group fails). Callers hold the one model lock
 * from here to commit_group_close, so queue order is commit order. *ticket
 * is the ticket the open group will get. -ENOMEM (then free(arg) was called). */
int commit_enqueue(struct commit *c, commit_apply_fn apply, commit_free_fn free_fn, void *arg,
                   uint64_t *ticket);
/* The open group stores a row that carries this change number (a result's
 * seq, a trial's updated_seq): loading finds it there, so a batch whose
 * numbers are all carried by rows needs no write of the counter itself (one
 * page less per commit on the hot path). */
void commit_cover_seq(struct commit *c, int64_t seq);
/* Hands the open group to the commit thread as one unit (caller holds the
 * model lock). seq: the caller's change counter, stored with the group so the
 * counter never goes backwards across a restart; a hold that moved it without
 * queueing an op still gets a (row-less) group. Records the group's ticket in
 * the calling thread's current hold (commit_hold_begin). Returns the ticket,
 * or 0 when nothing was handed over. */
uint64_t commit_group_close(struct commit *c, int64_t seq);
/* The last ticket handed out (0 = none). */
uint64_t commit_last_ticket(struct commit *c);

/* A request's view of its lock holds (thread-local while it is dispatched):
 * every group closed by this thread lands in ticket; with wait_all (writes),
 * a hold that queued nothing still waits for everything handed over before
 * it, since what it answered from memory may not be durable yet. */
#define COMMIT_HOLD_OWN 4
struct commit_hold {
  uint64_t ticket;               /* what the reply waits for */
  uint64_t own[COMMIT_HOLD_OWN]; /* groups this request handed over itself */
  int nown;                      /* more than fit: the last one replaces the last slot */
  int wait_all;
};
void commit_hold_begin(struct commit_hold *h, int wait_all);
void commit_hold_end(void);

/* Blocks until the ticket is committed: 0, -EIO or -EAGAIN (see above). */
int commit_wait(struct commit *c, uint64_t ticket);
/* Blocks until everything handed over so far has ended, committed or not:
 * for a read of the store that must see every change made before it (a
 * failed change is not there, and the model is rebuilt without it). */
void commit_flush(struct commit *c);
/* Non-blocking wait: when the ticket is already done returns 1 with *status.
 * Otherwise calls before(ctx) under the queue lock (so a resume can never
 * overtake a suspend), registers done(ctx, status) to run after the commit,
 * and returns 0. -ENOMEM. */
int commit_when_done(struct commit *c, uint64_t ticket, void (*before)(void *ctx),
                     commit_done_fn done, void *ctx, int *status);
/* The status of an ended ticket: 0, -EIO or -EAGAIN (as for waiters). */
int commit_ticket_status(struct commit *c, uint64_t ticket);
/* Why the ticket failed, for the reply ("" when it did not or is unknown). */
void commit_failure_reason(struct commit *c, uint64_t ticket, char *buf, size_t n);

/* After a hard failure the commit thread calls repair(ctx) before anything
 * else: it must take the model lock, call commit_repair_point (every group
 * handed over until then is refused: it may build on the failed one), bring
 * the model back in line with the store, and unlock. Without a repair
 * function the groups queued at the failure are refused and nothing else. */
void commit_set_repair(struct commit *c, void (*repair)(void *ctx), void *ctx);
void commit_repair_point(struct commit *c);

/* With durable commits, how long the writer waits for more groups before
 * it takes a batch: none once 3/4 of the groups expected in a full batch are
 * queued (the replies of the last batches come back as new requests), else
 * half the recent flush time, at most 2 ms. A batch taken earlier would make
 * the rest wait for its flush and then their own. */
double commit_gather_s(uint64_t queued, uint64_t expect, double flush_avg);
/* The groups expected in a full batch after one of ngroups: the peak so far,
 * down by a sixteenth (at least one) per batch, so that after a burst a lone
 * client soon commits without waiting again. */
uint64_t commit_expect_next(uint64_t expect, uint64_t ngroups);

/* Commits and batches so far (for /metrics); failed groups so far. */
void commit_stats(struct commit *c, uint64_t *batches, uint64_t *ops);
uint64_t commit_failures(struct commit *c);
/* Flushes of the WAL so far (durable commits) and the seconds they took. */
void commit_flush_stats(struct commit *c, uint64_t *flushes, double *seconds);
/* Groups handed to the writer and not ended yet (committed, failed or
 * refused): how far the writer is behind (for /metrics). */
uint64_t commit_pending(struct commit *c);

#endif
