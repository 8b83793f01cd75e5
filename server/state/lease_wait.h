/* lease_wait: lease requests held on the server until a trial may have
 * become leasable for them, or until their wait ends (a long-poll;
 * docs/protocol.md#worker-routes). The state code calls lease_wait_changed()
 * wherever work may have appeared (a trial ended, went back to PENDING or
 * PAUSED, an experiment was added or changed, a worker left); the holder (the
 * API's HTTP layer) parks a request with lease_wait_park() after a lease that
 * found nothing, and tries the lease again when its resume callback runs.
 * The waits know nothing of connections: resume(ctx) is all they call.
 *
 * No lost wake-up: the generation read under s->lock before the lease is
 * compared again under the waits' own lock when parking, and the wake bumps
 * it before it takes that lock. */
#ifndef CTUNE_LEASE_WAIT_H
#define CTUNE_LEASE_WAIT_H

#include <stdint.h>

struct server;

/* The longest wait a lease request may ask for (wait_ms). */
#define LEASE_WAIT_MAX_MS 30000

/* One held request; its memory is the holder's and must stay put while it is
 * parked (from lease_wait_park() to its resume). */
struct lease_waiter {
  struct lease_waiter *prev, *next;
  uint64_t deadline_ms; /* clock_mono_ms() at which the wait ends */
  void (*resume)(void *ctx);
  void *ctx;
};

struct lease_waits;

int lease_wait_new(struct lease_waits **out);
void lease_wait_free(struct lease_waits *lw);
/* The generation: read it under s->lock before the lease is tried. */
uint64_t lease_wait_gen(struct server *s);
/* Something a held lease may now get: bump the generation and resume every
 * parked request (each is unlisted before its resume runs). */
void lease_wait_changed(struct server *s);
/* Parks wt until lease_wait_changed(), its deadline or lease_wait_close().
 * suspend(ctx) runs under the waits' lock before anyone can resume it.
 * 0: parked; 1: the generation moved since seen_gen (nothing parked: try
 * again now); -ESHUTDOWN: closed (answer now). */
int lease_wait_park(struct server *s, struct lease_waiter *wt, uint64_t seen_gen,
                    uint64_t deadline_ms, void (*suspend)(void *ctx), void (*resume)(void *ctx),
                    void *ctx);
/* Resumes the parked requests whose deadline is at or before now_ms (the
 * timer loop, state_expire_leases); returns how many. */
int lease_wait_expire(struct server *s, uint64_t now_ms);
/* Requests parked now. */
int lease_wait_count(struct server *s);
/* Resumes every parked request and refuses new ones (the server stops). */
void lease_wait_close(struct server *s);

#endif
