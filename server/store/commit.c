/* commit: the single writer thread of ctune-server (group commit). */
#include "commit.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "trace.h"

#define COMMIT_MAX_BATCH 8192
#define COMMIT_BUSY_TRIES 8       /* transient SQLITE_BUSY/LOCKED: retry the batch */
#define COMMIT_MAX_FAILS 64       /* failure ranges remembered (tickets long past are not asked) */
#define COMMIT_GATHER_MAX_S 0.002 /* the longest a small durable batch waits for more */
#define COMMIT_SLOW_S 0.02        /* a batch or a flush this slow is logged: every reply waited */
#define COMMIT_SLOW_LOG_S                                                                          \
  10.0 /* at most one such line per this long (a slow disk is slow                                 \
        * every time: one line per flush would flood the log) */

struct commit_op {
  struct commit_op *next;
  commit_apply_fn apply;
  commit_free_fn free_fn;
  void *arg;
};

struct commit_group {
  struct commit_group *next;
  struct commit_op *ops, *tail;
  uint64_t nops, ticket;
  int64_t seq;     /* the change counter at close */
  int64_t covered; /* the largest number a row of the group carries */
};

struct commit_waiter {
  struct commit_waiter *next;
  uint64_t ticket;
  commit_done_fn done;
  void *ctx;
  int status;
};

/* Tickets lo..hi failed: lo's own write failed, the rest were refused. hi is
 * UINT64_MAX until the repair point is known. */
struct commit_fail {
  uint64_t lo, hi;
  char reason[160];
};

struct commit {
  struct store *st;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work;              /* groups were queued, or stop */
  pthread_cond_t settled;           /* a batch ended */
  struct commit_group *head, *tail; /* closed groups, in ticket order */
  struct commit_group *open;        /* filled under the caller's model lock */
  struct commit_waiter *waiters;
  uint64_t issued;      /* last ticket handed out */
  uint64_t done;        /* every ticket <= done has ended */
  uint64_t refuse_upto; /* queued groups up to here are refused unapplied */
  int64_t seq_closed;   /* largest seq handed over */
  struct commit_fail fails[COMMIT_MAX_FAILS];
  int nfails;
  void (*repair)(void *ctx);
  void *repair_ctx;
  int stopping;
  uint64_t batches, ops, failed;
  /* Durable commits (store_sync_full): the writer flushes the WAL after
   * each batch and before it answers the batch's waiters. */
  int sync_full;
  uint64_t flushes; /* for /metrics (under mu) */
  double flush_s;   /* seconds spent flushing, all flushes */
  double flush_avg; /* recent flushes' duration (moving average) */
  uint64_t queued;  /* groups in head..tail */
  uint64_t expect;  /* groups a batch holds when every client is back (decaying peak) */
  int gathering;    /* the writer waits in commit_gather */
  /* Slow batches and flushes not logged yet, and when the last line went
   * out (the writer's own: no lock). */
  uint64_t slow_unlogged;
  double slow_logged_at;
  uint64_t tr_flushed; /* trace builds: the last flush ended */
};

static _Thread_local struct commit_hold *commit_cur_hold;

void commit_hold_begin(struct commit_hold *h, int wait_all) {
  h->ticket = 0;
  h->nown = 0;
  h->wait_all = wait_all;
  commit_cur_hold = h;
}

void commit_hold_end(void) { commit_cur_hold = NULL; }

static const struct commit_fail *commit_fail_of(const struct commit *c, uint64_t ticket) {
  for (int i = c->nfails; i-- > 0;)
    if (ticket >= c->fails[i].lo && ticket <= c->fails[i].hi) return &c->fails[i];
  return NULL;
}

static int commit_status_locked(struct commit *c, uint64_t ticket) {
  if (!c->nfails) return 0;
  const struct commit_fail *f = commit_fail_of(c, ticket);
  return !f ? 0 : ticket == f->lo ? -EIO : -EAGAIN;
}

static void commit_free_group(struct commit_group *g) {
  while (g->ops) {
    struct commit_op *next = g->ops->next;
    if (g->ops->free_fn) g->ops->free_fn(g->ops->arg);
    free(g->ops);
    g->ops = next;
  }
  free(g);
}

static int commit_apply_group(struct commit *c, struct commit_group *g) {
  int rc = 0;
  for (struct commit_op *op = g->ops; !rc && op; op = op->next) rc = op->apply(c->st, op->arg);
  return rc;
}

/* SQLite's message when it has one, else the error code's. */
static void commit_reason(struct commit *c, int rc, char *buf, size_t n) {
  const char *m = store_errmsg(c->st);
  snprintf(buf, n, "%s", m && *m ? m : strerror(-rc));
}

/* The counter needs its own row only when no row of the batch carries a
 * number at least as large (loading takes the largest of both). */
static int commit_save_seq(struct commit *c, int64_t seq, int64_t covered) {
  return seq > covered ? store_put_seq(c->st, seq) : 0;
}

/* Every group in one transaction: the fast path. */
static int commit_try_batch(struct commit *c, struct commit_group *batch) {
  int64_t seq = 0, covered = 0;
  int rc = store_begin(c->st);
  for (struct commit_group *g = batch; !rc && g; g = g->next) {
    rc = commit_apply_group(c, g);
    if (g->seq > seq) seq = g->seq;
    if (g->covered > covered) covered = g->covered;
  }
  if (!rc) rc = commit_save_seq(c, seq, covered);
  if (!rc) rc = store_commit(c->st);
  if (rc) store_rollback(c->st);
  return rc;
}

/* After a hard failure: the groups again, each under a savepoint, to find
 * the first that fails. The ones before it are committed. Returns the
 * failing group (NULL when, this time, all of them went in). */
static struct commit_group *commit_isolate(struct commit *c, struct commit_group *batch,
                                           char *reason, size_t n) {
  struct commit_group *bad = NULL;
  int64_t seq = 0, covered = 0;
  int rc = store_begin(c->st);
  if (rc) {
    commit_reason(c, rc, reason, n);
    return batch;
  }
  for (struct commit_group *g = batch; g; g = g->next) {
    if ((rc = store_savepoint(c->st))) {
      bad = g;
      break;
    }
    if ((rc = commit_apply_group(c, g))) {
      commit_reason(c, rc, reason, n);
      store_rollback_to(c->st);
      store_release(c->st);
      bad = g;
      break;
    }
    if ((rc = store_release(c->st))) {
      bad = g;
      break;
    }
    if (g->seq > seq) seq = g->seq;
    if (g->covered > covered) covered = g->covered;
  }
  if (bad == batch) {
    store_rollback(c->st);
    return bad;
  }
  rc = commit_save_seq(c, seq, covered);
  if (!rc) rc = store_commit(c->st);
  if (rc) { /* the prefix did not go in either (disk full, I/O error) */
    commit_reason(c, rc, reason, n);
    store_rollback(c->st);
    return batch;
  }
  return bad;
}

/* Applies a batch of groups. Returns the first group that failed (it and
 * every later one are not stored), or NULL when all were committed. */
static struct commit_group *commit_apply_batch(struct commit *c, struct commit_group *batch,
                                               char *reason, size_t n) {
  int rc = 0;
  for (int i = 0; i < COMMIT_BUSY_TRIES; i++) {
    rc = commit_try_batch(c, batch);
    if (rc != -EBUSY) break;
    /* Another connection holds the write lock (an operator's sqlite3, a
     * backup): wait a little and go again, nothing was stored. */
    struct timespec ts = {0, (long)(2 << i) * 1000 * 1000};
    log_warn("commit: database busy, retrying in %ld ms", ts.tv_nsec / 1000000);
    nanosleep(&ts, NULL);
  }
  if (!rc) return NULL;
  commit_reason(c, rc, reason, n);
  if (rc == -EBUSY) return batch;
  return commit_isolate(c, batch, reason, n);
}

/* A batch or a flush took `took` seconds: logged when slow, at most once per
 * COMMIT_SLOW_LOG_S with how many more were slow since the last line. */
static void commit_note_slow(struct commit *c, const char *what, uint64_t nops, double took) {
  if (took <= COMMIT_SLOW_S) return;
  double now = clock_mono_s();
  if (c->slow_logged_at > 0 && now - c->slow_logged_at < COMMIT_SLOW_LOG_S) {
    c->slow_unlogged++;
    return;
  }
  char more[128] = "";
  if (c->slow_unlogged)
    snprintf(more, sizeof more,
             " (and %llu more batch(es) or flush(es) over %.0f ms since the "
             "last such line)",
             (unsigned long long)c->slow_unlogged, COMMIT_SLOW_S * 1e3);
  if (nops)
    log_warn("commit: %s of %llu op(s) took %.1f ms%s", what, (unsigned long long)nops, took * 1e3,
             more);
  else
    log_warn("commit: %s took %.1f ms%s", what, took * 1e3, more);
  c->slow_unlogged = 0;
  c->slow_logged_at = now;
}

static void commit_settle(struct commit *c, uint64_t upto) {
  /* Detach the waiters this batch settles (their status taken under the
   * lock); call them without it. */
  struct commit_waiter *ready = NULL, **pp = &c->waiters;
  c->done = upto;
  while (*pp) {
    struct commit_waiter *w = *pp;
    if (w->ticket <= upto) {
      *pp = w->next;
      w->status = commit_status_locked(c, w->ticket);
      w->next = ready;
      ready = w;
    } else {
      pp = &w->next;
    }
  }
  pthread_cond_broadcast(&c->settled);
  pthread_mutex_unlock(&c->mu);
  while (ready) {
    struct commit_waiter *next = ready->next;
    ready->done(ready->ctx, ready->status);
    free(ready);
    ready = next;
  }
  pthread_mutex_lock(&c->mu);
}

/* A batch ended (committed, failed or refused): with durable commits the
 * WAL is flushed first (unlocked; wrote: the batch stored something), then
 * its waiters are answered.
 *
 * The flush is on the writer's own path on purpose. With a second thread
 * flushing while the writer commits the next batch, the writer commits every
 * small batch at once (2.8 results per commit under the load benchmark,
 * against 6.0 here), and the extra transactions and thread wake-ups cost 63
 * µs of server CPU per result against 55 (2 cores shared with the load,
 * runs interleaved), for fewer results/s. Groups that arrive during a flush
 * wait and go in together as the next batch. Every batch before this one
 * was flushed before its waiters were answered, so answers stay in order. */
static void commit_finish(struct commit *c, uint64_t upto, int wrote) {
  if (c->sync_full && wrote) {
    pthread_mutex_unlock(&c->mu);
    double t0 = clock_mono_s();
    int rc = store_sync(c->st);
    double took = clock_mono_s() - t0;
    commit_note_slow(c, "flushing the WAL", 0, took);
    if (rc) {
      /* After a failed flush nobody can tell what is on the disk (the kernel
       * may have dropped the dirty pages): acknowledge nothing more. A
       * restart recovers from what the database really holds. */
      log_error("commit: flushing the WAL to disk failed (%s); exiting without answering "
                "%llu waiting change(s)",
                strerror(-rc), (unsigned long long)(upto - c->done));
      _exit(1);
    }
    c->tr_flushed = trace_ns();
    pthread_mutex_lock(&c->mu);
    c->flushes++;
    c->flush_s += took;
    c->flush_avg = c->flush_avg > 0 ? c->flush_avg + (took - c->flush_avg) / 8 : took;
  }
  commit_settle(c, upto);
}

uint64_t commit_expect_next(uint64_t expect, uint64_t ngroups) {
  uint64_t decayed = expect - (expect + 15) / 16;
  return ngroups > decayed ? ngroups : decayed;
}

double commit_gather_s(uint64_t queued, uint64_t expect, double flush_avg) {
  if (queued * 4 >= expect * 3) return 0;
  double w = flush_avg / 2;
  return w < COMMIT_GATHER_MAX_S ? w : COMMIT_GATHER_MAX_S;
}

/* Durable commits: the replies a batch released come back as new requests
 * while the next batch could start. Taking the first one or two of them
 * alone makes the rest wait for that batch's flush and then their own; a
 * short wait (half a flush at most) lets them share one. */
static void commit_gather(struct commit *c) {
  double w = c->sync_full ? commit_gather_s(c->queued, c->expect, c->flush_avg) : 0;
  if (w <= 0) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  long ns = ts.tv_nsec + (long)(w * 1e9);
  ts.tv_sec += ns / 1000000000L;
  ts.tv_nsec = ns % 1000000000L;
  c->gathering = 1;
  while (!c->stopping && commit_gather_s(c->queued, c->expect, c->flush_avg) > 0)
    if (pthread_cond_timedwait(&c->work, &c->mu, &ts)) break;
  c->gathering = 0;
}

static void commit_record_failure(struct commit *c, uint64_t lo, const char *reason) {
  if (c->nfails == COMMIT_MAX_FAILS) {
    memmove(c->fails, c->fails + 1, (COMMIT_MAX_FAILS - 1) * sizeof *c->fails);
    c->nfails--;
  }
  struct commit_fail *f = &c->fails[c->nfails++];
  f->lo = lo;
  /* Until the repair point: everything handed over so far (it may build on
   * the failed group's state), and more if the repair is slow to come. */
  f->hi = c->repair ? UINT64_MAX : c->issued;
  snprintf(f->reason, sizeof f->reason, "%s", reason);
  if (!c->repair) c->refuse_upto = c->issued;
}

static void *commit_main(void *arg) {
  struct commit *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->head && !c->stopping) pthread_cond_wait(&c->work, &c->mu);
    if (!c->head && c->stopping) break;
    uint64_t tr_wake = trace_ns();
    /* Groups already refused (behind a failure, before its repair) go first,
     * unapplied. */
    struct commit_group *refused = NULL, **rp = &refused;
    while (c->head && c->head->ticket <= c->refuse_upto) {
      struct commit_group *g = c->head;
      c->head = g->next;
      c->queued--;
      g->next = NULL;
      *rp = g;
      rp = &g->next;
    }
    if (refused) {
      uint64_t upto = c->done;
      for (struct commit_group *g = refused; g; g = g->next) upto = g->ticket;
      if (!c->head) c->tail = NULL;
      pthread_mutex_unlock(&c->mu);
      while (refused) {
        struct commit_group *next = refused->next;
        commit_free_group(refused);
        refused = next;
      }
      pthread_mutex_lock(&c->mu);
      commit_finish(c, upto, 0);
      continue;
    }
    commit_gather(c);
    uint64_t tr_start = trace_ns(), tr_first = c->head->ticket;
    /* Take whole groups, up to COMMIT_MAX_BATCH ops (at least one group). */
    struct commit_group *batch = c->head, *last = batch;
    uint64_t n = batch->nops, ngroups = 1;
    while (last->next && n + last->next->nops <= COMMIT_MAX_BATCH) {
      last = last->next;
      n += last->nops;
      ngroups++;
    }
    c->queued -= ngroups;
    c->expect = commit_expect_next(c->expect, ngroups);
    c->head = last->next;
    if (!c->head) c->tail = NULL;
    last->next = NULL;
    uint64_t upto = last->ticket;
    pthread_mutex_unlock(&c->mu);

    char reason[160] = "";
    double t0 = clock_mono_s();
    struct commit_group *bad = commit_apply_batch(c, batch, reason, sizeof reason);
    commit_note_slow(c, "a batch", n, clock_mono_s() - t0);
    uint64_t tr_commit = trace_ns();
    uint64_t bad_ticket = bad ? bad->ticket : 0, nbad = 0;
    int wrote = bad != batch; /* a failed batch may have committed a prefix */
    for (struct commit_group *g = bad; g; g = g->next) nbad++;
    while (batch) {
      struct commit_group *next = batch->next;
      commit_free_group(batch);
      batch = next;
    }

    pthread_mutex_lock(&c->mu);
    c->batches++;
    c->ops += n;
    if (bad_ticket) {
      c->failed += nbad;
      log_error("commit: group %llu failed (%s); it and %llu later group(s) were not "
                "stored; the model is rebuilt from the database",
                (unsigned long long)bad_ticket, reason[0] ? reason : "?",
                (unsigned long long)(c->issued - bad_ticket));
      commit_record_failure(c, bad_ticket, reason);
    }
    /* The repair before the answers: a client told its write failed must
     * not then read the refused change from memory (the model is rebuilt
     * from the database first). Waiters are callbacks, so none of them holds
     * the model lock the repair takes. */
    if (bad_ticket && c->repair) {
      pthread_mutex_unlock(&c->mu);
      c->repair(c->repair_ctx); /* takes the model lock, calls commit_repair_point */
      pthread_mutex_lock(&c->mu);
    }
    commit_finish(c, upto, wrote);
    uint64_t tr[] = {tr_first,  upto,          ngroups,    tr_wake, tr_start,
                     tr_commit, c->tr_flushed, trace_ns(), n};
    trace_put(TRACE_BATCH, tr, (int)(sizeof tr / sizeof tr[0]));
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

void commit_repair_point(struct commit *c) {
  pthread_mutex_lock(&c->mu);
  c->refuse_upto = c->issued;
  if (c->nfails && c->fails[c->nfails - 1].hi == UINT64_MAX) c->fails[c->nfails - 1].hi = c->issued;
  pthread_mutex_unlock(&c->mu);
}

void commit_set_repair(struct commit *c, void (*repair)(void *ctx), void *ctx) {
  pthread_mutex_lock(&c->mu);
  c->repair = repair;
  c->repair_ctx = ctx;
  pthread_mutex_unlock(&c->mu);
}

int commit_start(struct store *st, struct commit **out) {
  struct commit *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->st = st;
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->work, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&c->settled, NULL);
  c->sync_full = store_sync_full(st);
  if (pthread_create(&c->thread, NULL, commit_main, c)) {
    pthread_cond_destroy(&c->settled);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return -EAGAIN;
  }
  *out = c;
  return 0;
}

void commit_stop(struct commit *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stopping = 1;
  pthread_cond_signal(&c->work);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  if (c->open) commit_free_group(c->open); /* never handed over: nobody waits */
  while (c->waiters) {                     /* nobody should be left; answer them anyway */
    struct commit_waiter *w = c->waiters;
    c->waiters = w->next;
    w->done(w->ctx, w->ticket <= c->done ? commit_status_locked(c, w->ticket) : -EAGAIN);
    free(w);
  }
  pthread_cond_destroy(&c->settled);
  pthread_cond_destroy(&c->work);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

int commit_enqueue(struct commit *c, commit_apply_fn apply, commit_free_fn free_fn, void *arg,
                   uint64_t *ticket) {
  struct commit_op *op = malloc(sizeof *op);
  if (!op) {
    if (free_fn) free_fn(arg);
    return -ENOMEM;
  }
  op->next = NULL;
  op->apply = apply;
  op->free_fn = free_fn;
  op->arg = arg;
  pthread_mutex_lock(&c->mu);
  if (!c->open && !(c->open = calloc(1, sizeof *c->open))) {
    pthread_mutex_unlock(&c->mu);
    free(op);
    if (free_fn) free_fn(arg);
    return -ENOMEM;
  }
  struct commit_group *g = c->open;
  if (g->tail)
    g->tail->next = op;
  else
    g->ops = op;
  g->tail = op;
  g->nops++;
  /* Groups are closed in order under the model lock the caller holds. */
  *ticket = c->issued + 1;
  pthread_mutex_unlock(&c->mu);
  return 0;
}

void commit_cover_seq(struct commit *c, int64_t seq) {
  pthread_mutex_lock(&c->mu);
  if (c->open && seq > c->open->covered) c->open->covered = seq;
  pthread_mutex_unlock(&c->mu);
}

void commit_seq_stored(struct commit *c, int64_t seq) {
  pthread_mutex_lock(&c->mu);
  if (seq > c->seq_closed) c->seq_closed = seq;
  pthread_mutex_unlock(&c->mu);
}

uint64_t commit_group_close(struct commit *c, int64_t seq) {
  struct commit_hold *h = commit_cur_hold;
  uint64_t ticket = 0;
  pthread_mutex_lock(&c->mu);
  struct commit_group *g = c->open;
  /* A change counter moved without a row to carry it (a checkpoint upload,
   * say): a group of its own, so the number is saved before it is shown. */
  if (!g && seq > c->seq_closed) g = calloc(1, sizeof *g);
  if (g) {
    c->open = NULL;
    g->ticket = ticket = ++c->issued;
    g->seq = seq;
    if (seq > c->seq_closed) c->seq_closed = seq;
    if (c->tail)
      c->tail->next = g;
    else
      c->head = g;
    c->tail = g;
    c->queued++;
    /* A gathering writer wakes once, when enough is queued (or at its
     * deadline), not at every request. */
    if (!c->gathering || !commit_gather_s(c->queued, c->expect, c->flush_avg))
      pthread_cond_signal(&c->work);
  }
  if (h) {
    if (ticket) h->own[h->nown < COMMIT_HOLD_OWN ? h->nown++ : COMMIT_HOLD_OWN - 1] = ticket;
    uint64_t want = ticket ? ticket : h->wait_all ? c->issued : 0;
    if (want > h->ticket) h->ticket = want;
  }
  pthread_mutex_unlock(&c->mu);
  return ticket;
}

uint64_t commit_last_ticket(struct commit *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t t = c->issued;
  pthread_mutex_unlock(&c->mu);
  return t;
}

int commit_wait(struct commit *c, uint64_t ticket) {
  pthread_mutex_lock(&c->mu);
  while (c->done < ticket) pthread_cond_wait(&c->settled, &c->mu);
  int rc = commit_status_locked(c, ticket);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void commit_flush(struct commit *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t upto = c->issued;
  while (c->done < upto) pthread_cond_wait(&c->settled, &c->mu);
  pthread_mutex_unlock(&c->mu);
}

int commit_when_done(struct commit *c, uint64_t ticket, void (*before)(void *ctx),
                     commit_done_fn done, void *ctx, int *status) {
  pthread_mutex_lock(&c->mu);
  if (c->done >= ticket) {
    *status = commit_status_locked(c, ticket);
    pthread_mutex_unlock(&c->mu);
    return 1;
  }
  struct commit_waiter *w = malloc(sizeof *w);
  if (!w) {
    pthread_mutex_unlock(&c->mu);
    return -ENOMEM;
  }
  w->ticket = ticket;
  w->done = done;
  w->ctx = ctx;
  if (before) before(ctx);
  w->next = c->waiters;
  c->waiters = w;
  pthread_mutex_unlock(&c->mu);
  return 0;
}

int commit_ticket_status(struct commit *c, uint64_t ticket) {
  pthread_mutex_lock(&c->mu);
  int rc = commit_status_locked(c, ticket);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void commit_failure_reason(struct commit *c, uint64_t ticket, char *buf, size_t n) {
  pthread_mutex_lock(&c->mu);
  const struct commit_fail *f = commit_fail_of(c, ticket);
  snprintf(buf, n, "%s", f ? f->reason : "");
  pthread_mutex_unlock(&c->mu);
}

void commit_stats(struct commit *c, uint64_t *batches, uint64_t *ops) {
  pthread_mutex_lock(&c->mu);
  *batches = c->batches;
  *ops = c->ops;
  pthread_mutex_unlock(&c->mu);
}

void commit_flush_stats(struct commit *c, uint64_t *flushes, double *seconds) {
  pthread_mutex_lock(&c->mu);
  *flushes = c->flushes;
  *seconds = c->flush_s;
  pthread_mutex_unlock(&c->mu);
}

uint64_t commit_pending(struct commit *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t n = c->issued - c->done;
  pthread_mutex_unlock(&c->mu);
  return n;
}

uint64_t commit_failures(struct commit *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t n = c->failed;
  pthread_mutex_unlock(&c->mu);
  return n;
}
