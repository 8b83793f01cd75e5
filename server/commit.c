/* commit: the single writer thread of ctune-server (group commit). */
#include "commit.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "clock.h"
#include "log.h"

#define COMMIT_MAX_BATCH 8192

struct commit_op {
  struct commit_op *next;
  commit_apply_fn apply;
  commit_free_fn free_fn;
  void *arg;
};

struct commit_waiter {
  struct commit_waiter *next;
  uint64_t ticket;
  commit_done_fn done;
  void *ctx;
};

struct commit {
  struct store *st;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work;    /* ops were queued, or stop */
  pthread_cond_t settled; /* a batch ended */
  struct commit_op *head, *tail;
  struct commit_waiter *waiters;
  uint64_t issued;    /* last ticket handed out */
  uint64_t done;      /* every ticket <= done has ended */
  uint64_t last_good; /* every ticket <= last_good is committed */
  int stopping;
  uint64_t batches, ops;
};

static int commit_status_locked(struct commit *c, uint64_t ticket) {
  return ticket <= c->last_good ? 0 : -EIO;
}

static int commit_apply_batch(struct commit *c, struct commit_op *ops) {
  if (c->last_good != c->done) return -EIO; /* a failed batch left memory ahead of disk */
  int rc = store_begin(c->st);
  for (struct commit_op *op = ops; !rc && op; op = op->next) rc = op->apply(c->st, op->arg);
  if (!rc) rc = store_commit(c->st);
  if (rc) {
    store_rollback(c->st);
    log_error("commit: batch failed (%d); refusing further writes", rc);
  }
  return rc;
}

static void *commit_main(void *arg) {
  struct commit *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->head && !c->stopping) pthread_cond_wait(&c->work, &c->mu);
    if (!c->head && c->stopping) break;
    /* Take up to COMMIT_MAX_BATCH ops off the queue. */
    struct commit_op *batch = c->head, *last = batch;
    uint64_t n = 1;
    while (last->next && n < COMMIT_MAX_BATCH) { last = last->next; n++; }
    c->head = last->next;
    if (!c->head) c->tail = NULL;
    last->next = NULL;
    uint64_t upto = c->done + n;
    pthread_mutex_unlock(&c->mu);

    double t0 = clock_mono_s();
    int rc = commit_apply_batch(c, batch);
    double took = clock_mono_s() - t0;
    if (took > 0.02) /* every reply in the batch waited this long */
      log_warn("commit: %llu op(s) took %.1f ms", (unsigned long long)n, took * 1e3);
    while (batch) {
      struct commit_op *next = batch->next;
      if (batch->free_fn) batch->free_fn(batch->arg);
      free(batch);
      batch = next;
    }

    pthread_mutex_lock(&c->mu);
    c->done = upto;
    if (!rc) c->last_good = upto;
    c->batches++;
    c->ops += n;
    /* Detach the waiters this batch settles; call them without the lock. */
    struct commit_waiter *ready = NULL, **pp = &c->waiters;
    while (*pp) {
      struct commit_waiter *w = *pp;
      if (w->ticket <= upto) { *pp = w->next; w->next = ready; ready = w; }
      else pp = &w->next;
    }
    uint64_t good = c->last_good;
    pthread_cond_broadcast(&c->settled);
    pthread_mutex_unlock(&c->mu);
    while (ready) {
      struct commit_waiter *next = ready->next;
      ready->done(ready->ctx, ready->ticket <= good ? 0 : -EIO);
      free(ready);
      ready = next;
    }
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int commit_start(struct store *st, struct commit **out) {
  struct commit *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->st = st;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->work, NULL);
  pthread_cond_init(&c->settled, NULL);
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
  while (c->waiters) { /* nobody should be left; answer them anyway */
    struct commit_waiter *w = c->waiters;
    c->waiters = w->next;
    w->done(w->ctx, commit_status_locked(c, w->ticket));
    free(w);
  }
  pthread_cond_destroy(&c->settled);
  pthread_cond_destroy(&c->work);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

int commit_enqueue(struct commit *c, commit_apply_fn apply, commit_free_fn free_fn,
                   void *arg, uint64_t *ticket) {
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
  if (c->tail) c->tail->next = op;
  else c->head = op;
  c->tail = op;
  *ticket = ++c->issued;
  pthread_cond_signal(&c->work);
  pthread_mutex_unlock(&c->mu);
  return 0;
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

void commit_stats(struct commit *c, uint64_t *batches, uint64_t *ops) {
  pthread_mutex_lock(&c->mu);
  *batches = c->batches;
  *ops = c->ops;
  pthread_mutex_unlock(&c->mu);
}
