/* Messages to the server that must arrive exactly once (results, trial ends):
 * a bounded FIFO kept as one file per message under <work dir>/outbox, so a
 * server outage or a worker restart loses nothing. Delivery is head first,
 * retried with exponential backoff; the server's idempotency turns "at least
 * once" into "exactly once". */
#ifndef CTUNE_WORKER_OUTBOX_H
#define CTUNE_WORKER_OUTBOX_H

#include <stddef.h>
#include <stdint.h>

enum outbox_kind { OUTBOX_RESULT = 0, OUTBOX_END = 1 };

struct outbox_item {
  uint64_t seq;
  enum outbox_kind kind;
  int trial_id;
  char *path;   /* "/api/v1/trials/3/results"; always POST */
  char *body;   /* JSON */
  struct outbox_item *next;
};

struct outbox {
  char *dir;            /* NULL: memory only */
  size_t max_results;   /* results beyond this are refused (-ENOSPC) */
  size_t n_results, n;
  struct outbox_item *head, *tail;
  uint64_t next_seq;
  int attempts;         /* failed tries of the head */
  uint64_t next_try_ms; /* earliest time the head may be sent again */
};

/* Trial ends are accepted beyond max_results (up to this many more), so a
 * full queue never keeps a finished trial from being reported. */
#define OUTBOX_END_RESERVE 4096

/* dir may be NULL. Loads messages left by an earlier run, in order; skips
 * (and logs) unreadable files. 0 or negative errno. */
int outbox_open(struct outbox *ob, const char *dir, size_t max_results);
void outbox_close(struct outbox *ob);
/* Appends a message and persists it before returning. -ENOSPC when full. */
int outbox_push(struct outbox *ob, enum outbox_kind kind, int trial_id,
                const char *path, const char *body);
static inline struct outbox_item *outbox_head(struct outbox *ob) { return ob->head; }
/* The head was delivered (or definitively refused): drop it from memory and
 * disk and reset the backoff. */
void outbox_ack(struct outbox *ob);
/* The head's delivery failed for a transient reason. */
void outbox_failed(struct outbox *ob, uint64_t now_ms);
int outbox_ready(const struct outbox *ob, uint64_t now_ms);
/* Delay after `attempts` consecutive failures: 100 ms doubling to 10 s. */
uint64_t outbox_backoff_ms(int attempts);
int outbox_has_room(const struct outbox *ob);

#endif
