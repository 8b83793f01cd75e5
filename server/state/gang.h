/* gang: trials of several member processes (resources_per_trial.num_workers
 * > 1, docs/scheduling.md#gang-trials): their placement, all members or
 * none, on as few workers as possible, under one hold of the model lock;
 * the delivery of each member's lease to its worker; the rendezvous
 * (MASTER_ADDR, MASTER_PORT) that rank 0's worker reports; and the members'
 * fences, heartbeats and expiry, any of which ends the attempt of every
 * member at once. The trial's own lease (worker_id, attempt) is rank 0's:
 * results, checkpoints, complete and fail come from it as for any trial. */
#ifndef CTUNE_GANG_H
#define CTUNE_GANG_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "state.h"

struct gang_member {
  int64_t worker_id;
  int node_rank, local_rank, local_world;
  int delivered;              /* its worker has its lease */
  uint64_t listed_gen;        /* the heartbeat of its worker that last listed it */
  uint64_t unlisted_since_ms; /* a heartbeat of its worker left it out since */
  uint64_t deadline_ms;       /* monotonic: its lease ends unless renewed */
};

/* A trial's placement for one attempt. Kept after the attempt ends (active
 * 0) until the next placement, so that a member's final log upload is still
 * told apart from a stale one. */
struct srv_gang {
  int world, nnodes;
  int attempt;
  int active; /* its members' resources are charged */
  int master_port;
  char master_addr[64]; /* "" until rank 0's worker reports the rendezvous */
  struct gang_member m[];
};

/* A worker offered to the placement: how many members fit on it. */
struct gang_slot {
  int64_t worker_id;
  int64_t cap;
};

/* The pure placement: n members on the fewest slots (largest capacity
 * first; among equal capacities the earlier slot, so a caller lists the
 * worker asking first). node_of[rank] gets the slot index of each rank,
 * filled node by node (rank 0 on the first node). Returns the number of
 * nodes, or -ENOSPC when the slots hold fewer than n members. */
int gang_place(const struct gang_slot *slots, int nslots, int n, int *node_of);

/* How many members of r fit in the free amounts given, at most limit
 * (memory_mb INT64_MAX: memory is not accounted). */
int64_t gang_capacity(const struct spec_resources *r, double cpu, double gpu, int64_t memory_mb,
                      int64_t limit);

/* Places t (PENDING, of a gang experiment) on the live workers: the asking
 * worker's share is capped by what it says is free (cpu, gpu, memory_mb;
 * INT64_MAX: not said). All members are charged and t leased (its lease
 * is rank 0's), or nothing changes: -ENOSPC (not now), -E2BIG (the members
 * do not fit even an idle fleet), or another negative error. */
int gang_lease(struct server *s, struct srv_trial *t, struct srv_worker *asking, double cpu,
               double gpu, int64_t memory_mb, uint64_t *ticket);

/* Gives back what the ranks >= 1 of t's placement hold (state_release, at
 * every end of a lease). */
void gang_release(struct server *s, struct srv_trial *t);

/* A member lease of w not yet delivered: the lowest such rank of a running
 * gang trial; ranks >= 1 only once the rendezvous is known. *out NULL:
 * none. */
void gang_deliver(struct server *s, struct srv_worker *w, struct srv_trial **out, int *rank);

/* Rank 0's worker reports the rendezvous of its attempt (lease l). 0, or
 * -ESTALE (why says), -EINVAL (not a gang trial, a bad address or port),
 * -EEXIST (another rendezvous was already reported for this attempt). */
int gang_rendezvous(struct server *s, struct srv_trial *t, const struct lease_token *l,
                    const char *addr, int port, char *why, size_t whylen);

/* Whether worker_id runs a member of t's placement (current: of its
 * running attempt; else of its latest, for final uploads). */
int gang_has_worker(const struct srv_trial *t, int64_t worker_id, int current);

/* The fence of member rank of t (rank 0: state_check_fence). */
enum fence gang_check_member(struct server *s, struct srv_trial *t, const struct lease_token *l,
                             int rank, char *why, size_t whylen);

/* A heartbeat of w listed member rank of t at attempt (gen: that
 * heartbeat): 1 when it is a current member (its lease is renewed for two
 * heartbeat intervals), 0 when its worker must stop it. Rank 0's is also
 * the trial's lease, renewed as any trial's. */
int gang_heartbeat_member(struct server *s, struct srv_worker *w, struct srv_trial *t, int attempt,
                          int rank, uint64_t gen, uint64_t now_ms);

/* After heartbeat gen of w: a delivered member of w unlisted for two
 * heartbeat intervals ends its trial's attempt. Returns how many attempts
 * ended, or a negative error. */
int gang_reconcile_worker(struct server *s, struct srv_worker *w, uint64_t gen, uint64_t now_ms,
                          uint64_t *ticket);

/* A member (rank >= 1) under lease l failed: one failure of the trial
 * (TE_FAIL under rank 0's lease), whichever member it was. -ESTALE with why
 * for a stale member, as TE_FAIL. */
int gang_member_fail(struct server *s, struct srv_trial *t, const struct lease_token *l, int rank,
                     const char *error, char *why, size_t whylen, uint64_t *ticket);

/* A member (rank >= 1) under lease l gave its lease back before it started
 * (no room on its worker): the attempt of all ends at once, back to PENDING
 * with no failure counted (as a lost member's). -ESTALE with why for a
 * stale member; 0 when that attempt had already ended. */
int gang_member_release(struct server *s, struct srv_trial *t, const struct lease_token *l,
                        int rank, char *why, size_t whylen, uint64_t *ticket);

/* The timer's part (state_expire_leases): a member whose lease ran out (its
 * worker silent for two heartbeat intervals, its lease never fetched within
 * a lease timeout) ends its trial's attempt; so does a
 * RUNNING gang trial without a placement (a restart does not keep them). */
void gang_expire(struct server *s, uint64_t now_ms);

/* Why a gang experiment's trials wait, once no single member is too large
 * for every worker: 1 with the sentence in buf; 0 for a trial of one
 * process (buf untouched). */
int gang_pending_reason(struct server *s, const struct srv_experiment *e, char *buf, size_t n);

/* The starvation rule (docs/scheduling.md#gang-trials): a gang that fits
 * an idle fleet but has waited for free room a lease timeout holds back the
 * other trials of the workers it could use. 1: w's request gets nothing else
 * now. */
int gang_holds_back(struct server *s, struct srv_experiment *e, struct srv_worker *w,
                    uint64_t now_ms);

#endif
