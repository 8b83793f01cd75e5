/* Messages to the server that must arrive exactly once (results, trial ends):
 * kept as one file per message under <work dir>/outbox, so a server outage or
 * a worker restart loses nothing. Each message carries the lease it belongs
 * to (worker id and attempt: the X-Ctune-Lease fence,
 * docs/protocol.md#leases-and-fencing). Messages are kept in one FIFO lane per trial, so a message
 * the server refuses, or that waits for its trial's checkpoint, never holds
 * back another trial's; each lane has its own retry backoff. The server's
 * idempotency turns "at least once" into "exactly once".
 *
 * Fault injection in test builds (testhook.h): while the file named by the
 * site TESTHOOK_OUTBOX_FAULT_FILE exists, writing a message fails with
 * -ENOSPC (as on a full disk). */
#ifndef CTUNE_WORKER_OUTBOX_H
#define CTUNE_WORKER_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

enum outbox_kind { OUTBOX_RESULT = 0, OUTBOX_END = 1 };

/* A lease: worker id and attempt. attempt 0: none (a message written by a
 * worker before protocol v2; it is sent without a fence). */
struct outbox_lease {
  int worker_id;
  long attempt;
};

struct outbox_item {
  uint64_t seq;
  enum outbox_kind kind;
  int trial_id;
  struct outbox_lease lease;
  char *path;               /* "/api/v1/trials/3/results"; always POST */
  char *body;               /* JSON, valid UTF-8 */
  struct outbox_item *next; /* in its lane */
};

struct outbox_lane {
  int trial_id;
  struct outbox_item *head, *tail;
  size_t n, n_results;
  int attempts;              /* failed tries of the head */
  uint64_t next_try_ms;      /* earliest time the head may be sent again */
  uint64_t failing_since_ms; /* the head's first failed try (0: not failing) */
  long last_status;          /* the caller's: the last failure's HTTP status (0: no answer) */
  char last_code[48];        /* the caller's: its error code ("" when none) */
  int stuck;                 /* the caller's: failing so long that it was said (once) */
  int inflight;              /* the caller's: a request for the head is out */
  int single;                /* the caller's: send the head alone (a batch was refused) */
  int dropped_worker;        /* the caller's: the last lease it dropped (log once) */
  long dropped_attempt;
  /* the caller's: the final log tail that the END of end_log_lease carries
   * (malloc'd, freed with the lane; memory only) */
  char *end_log;
  struct outbox_lease end_log_lease;
  struct outbox_lane *next;
};

struct outbox {
  char *dir;          /* NULL: memory only */
  size_t max_results; /* results beyond this are refused (-ENOSPC) */
  size_t n_results, n;
  struct outbox_lane *lanes;
  uint64_t next_seq;
  unsigned nspare; /* files spare.0 .. spare.<nspare-1>, reused (outbox.c) */
};

/* Trial ends are accepted beyond max_results (up to this many more), so a
 * full queue never keeps a finished trial from being reported. */
#define OUTBOX_END_RESERVE 4096

/* dir may be NULL. Loads messages left by an earlier run, in order; skips
 * (and logs) unreadable files. 0 or negative errno. */
int outbox_open(struct outbox *ob, const char *dir, size_t max_results);
void outbox_close(struct outbox *ob);
/* outbox_push flags. */
#define OUTBOX_F_FORCE 1 /* a result beyond max_results (a trial's last ones) */
#define OUTBOX_F_MEM 2   /* unwritable (disk full): keep it in memory, return 1 */

/* Appends a message to its trial's lane and persists it before returning.
 * The body is made valid UTF-8 first (invalid bytes become U+FFFD).
 * -ENOSPC when the bound is reached or the disk is full; other write errors
 * as negative errno. OUTBOX_F_MEM is for what must not wait (a trial's end,
 * its last results): a worker crash then loses it, a full disk does not. */
int outbox_push(struct outbox *ob, enum outbox_kind kind, int trial_id,
                const struct outbox_lease *lease, const char *path, const char *body, int flags);
struct outbox_lane *outbox_lane(struct outbox *ob, int trial_id);
/* Removes the first n items of the lane (delivered, or refused for good)
 * from memory and disk and resets the lane's backoff and failure record. */
void outbox_ack(struct outbox *ob, struct outbox_lane *lane, size_t n);
/* Removes every item of the lane that belongs to lease (the server said that
 * lease is over: 409 not_leased). Returns how many. */
size_t outbox_drop_lease(struct outbox *ob, struct outbox_lane *lane,
                         const struct outbox_lease *lease);
/* Frees lanes that are empty and not in flight. */
void outbox_gc(struct outbox *ob);
/* The lane's head failed for a transient reason: it waits
 * outbox_backoff_ms(attempts), and at least at_least_ms (the server's
 * Retry-After, outbox_retry_after_ms), before the next try, and
 * failing_since_ms keeps when this run of failures began. */
void outbox_failed(struct outbox_lane *lane, uint64_t now_ms, uint64_t at_least_ms);
/* How long the lane's head has been failing (0: it is not). */
uint64_t outbox_failing_ms(const struct outbox_lane *lane, uint64_t now_ms);
int outbox_ready(const struct outbox_lane *lane, uint64_t now_ms);
/* Results of lease still queued in the lane. */
size_t outbox_lane_results(const struct outbox_lane *lane, const struct outbox_lease *lease);
/* Body for the lane's head: when the head is a result, up to max_items
 * consecutive results of the same lease joined as a JSON array (at most
 * max_bytes, but always at least the head; a single result is sent as its
 * own object). *n gets the number of items. malloc'ed; NULL on OOM. */
char *outbox_batch(const struct outbox_lane *lane, size_t max_items, size_t max_bytes, size_t *n);
/* Delay after `attempts` consecutive failures: 100 ms doubling to 10 s. */
uint64_t outbox_backoff_ms(int attempts);
/* Longest wait a Retry-After imposes: a server that asks for more is
 * asked again after this. */
#define OUTBOX_RETRY_AFTER_MAX_MS 60000
/* The wait a reply's Retry-After value asks for, in ms: only on 429 and
 * 503 (what the header means there), delta-seconds only (an HTTP-date, as
 * ctune-server never sends, is not followed), at most
 * OUTBOX_RETRY_AFTER_MAX_MS. 0 when value is NULL or none applies. A
 * retry waits the larger of this and its own backoff. */
uint64_t outbox_retry_after_ms(long status, const char *value);
int outbox_has_room(const struct outbox *ob);
/* Copy of s[0..len) as valid UTF-8: each byte of an invalid or truncated
 * sequence becomes U+FFFD; NUL bytes are dropped. malloc'ed, NUL-terminated,
 * *out_len its length (may be NULL); NULL on OOM. */
char *outbox_utf8_clean(const char *s, size_t len, size_t *out_len);

#endif
