/* workers: the worker registry in the model (register, seen, prune,
 * deregister). The API parses and renders; what a worker is, and when it
 * is listed, lost or gone, is decided here. Lock held for all. */
#ifndef CTUNE_WORKERS_H
#define CTUNE_WORKERS_H

#include <stdint.h>

#include "model.h"

/* What one registration may claim: a worker token must not be able to take
 * every trial with a made-up machine (a 1e9-CPU worker). */
#define WORKERS_MAX_CPU 4096.0
#define WORKERS_MAX_GPU 64.0
#define WORKERS_MAX_MEMORY_MB (64.0 * 1024 * 1024) /* 64 TiB */

/* Adds a worker with a fresh secret ("<id>.<64 hex digits>", 256 bits from
 * getrandom) and queues its row, its spot label in it (a worker registers
 * once: a restart must find the label in SQLite). -ENOMEM, or getrandom's
 * error. */
int workers_register(struct server *s, const char *name, double cpu, double gpu, int64_t memory_mb,
                     int spot, struct srv_worker **out, uint64_t *ticket);
/* The worker id is, unless it deregistered (it registers anew): NULL. */
struct srv_worker *workers_find(struct server *s, int64_t id);
/* A sign of life (heartbeat, lease): no longer lost, listed again if it was
 * pruned. */
void workers_touch(struct srv_worker *w);
/* One trial a heartbeat lists: v2 names the attempt; a bare id (v1,
 * has_attempt 0) stands for "whatever attempt is leased to me". stuck: the
 * worker's note that it cannot deliver this attempt's messages or
 * checkpoint (NULL: none), stored once per attempt as an "undelivered"
 * event of the trial. */
struct workers_listed {
  int64_t trial_id;
  int attempt, has_attempt;
  const char *stuck;
  int rank; /* a gang trial's member (gang.h); 0: rank 0 or a trial of one process */
};
/* What the reply tells the worker to stop, and why: "not_leased",
 * "ended", "cancelled" or "paused". */
struct workers_stop {
  int64_t trial_id;
  int attempt;
  const char *reason;
  int rank;
};
/* A heartbeat of w listing listed[0..n): a sign of life; each listed trial
 * leased to w at that attempt has its lease renewed (one of a paused
 * experiment is told to stop now and pauses with its checkpoint when the
 * lease ends; one the worker says is stuck gets its event); every other
 * listed one goes into stops (room for n) with why;
 * then the trials w holds and did not list start, or go on with, their
 * unlisted time (state_reconcile_worker: two intervals and they are
 * requeued; *requeued says how many, may be NULL). Returns how many stops,
 * or a negative error. */
int workers_heartbeat(struct server *s, struct srv_worker *w, const struct workers_listed *listed,
                      int n, struct workers_stop *stops, int *requeued, uint64_t now_ms,
                      uint64_t *ticket);
/* A clean stop: its RUNNING trials go back to PENDING, its secret is revoked
 * (persisted empty: the row stays hidden after a restart), and it leaves the
 * list. */
int workers_deregister(struct server *s, struct srv_worker *w, uint64_t *ticket);
/* Workers lost (silent) for --worker-retention-s leave the list; one that
 * comes back (its next heartbeat or lease) is listed again. Run with the
 * lease scan. */
void workers_prune(struct server *s, uint64_t now_ms);

#endif
