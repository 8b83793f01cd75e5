/* lease_wait: held lease requests (lease_wait.h). Its own mutex, taken
 * after s->lock when both are held, never before it; the resume callbacks
 * run under it (libmicrohttpd's resume only queues the connection). */
#include "lease_wait.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "model.h"

struct lease_waits {
  pthread_mutex_t mu;
  _Atomic uint64_t gen;
  struct lease_waiter *head; /* parked (mu) */
  int n, closed;
};

int lease_wait_new(struct lease_waits **out) {
  struct lease_waits *lw = calloc(1, sizeof *lw);
  if (!lw) return -ENOMEM;
  if (pthread_mutex_init(&lw->mu, NULL)) {
    free(lw);
    return -ENOMEM;
  }
  *out = lw;
  return 0;
}

void lease_wait_free(struct lease_waits *lw) {
  if (!lw) return;
  pthread_mutex_destroy(&lw->mu);
  free(lw);
}

uint64_t lease_wait_gen(struct server *s) {
  return s->lease_waits ? atomic_load(&s->lease_waits->gen) : 0;
}

static void lease_wait_unlist(struct lease_waits *lw, struct lease_waiter *wt) {
  if (wt->prev)
    wt->prev->next = wt->next;
  else
    lw->head = wt->next;
  if (wt->next) wt->next->prev = wt->prev;
  wt->prev = wt->next = NULL;
  lw->n--;
}

/* Resumes (and unlists) every parked request with a deadline at or before
 * now_ms (UINT64_MAX: all); lw->mu held. */
static int lease_wait_resume_due(struct lease_waits *lw, uint64_t now_ms) {
  int n = 0;
  struct lease_waiter *wt = lw->head;
  while (wt) {
    struct lease_waiter *next = wt->next;
    if (wt->deadline_ms <= now_ms) {
      lease_wait_unlist(lw, wt);
      wt->resume(wt->ctx);
      n++;
    }
    wt = next;
  }
  return n;
}

void lease_wait_changed(struct server *s) {
  struct lease_waits *lw = s->lease_waits;
  if (!lw) return;
  atomic_fetch_add(&lw->gen, 1); /* before the lock: a parker checks it under it */
  pthread_mutex_lock(&lw->mu);
  if (lw->head) lease_wait_resume_due(lw, UINT64_MAX);
  pthread_mutex_unlock(&lw->mu);
}

int lease_wait_park(struct server *s, struct lease_waiter *wt, uint64_t seen_gen,
                    uint64_t deadline_ms, void (*suspend)(void *ctx), void (*resume)(void *ctx),
                    void *ctx) {
  struct lease_waits *lw = s->lease_waits;
  if (!lw) return -ESHUTDOWN;
  int rc = 0;
  pthread_mutex_lock(&lw->mu);
  if (lw->closed) {
    rc = -ESHUTDOWN;
  } else if (atomic_load(&lw->gen) != seen_gen) {
    rc = 1;
  } else {
    wt->deadline_ms = deadline_ms;
    wt->resume = resume;
    wt->ctx = ctx;
    wt->prev = NULL;
    wt->next = lw->head;
    if (lw->head) lw->head->prev = wt;
    lw->head = wt;
    lw->n++;
    if (suspend) suspend(ctx);
  }
  pthread_mutex_unlock(&lw->mu);
  return rc;
}

int lease_wait_expire(struct server *s, uint64_t now_ms) {
  struct lease_waits *lw = s->lease_waits;
  if (!lw) return 0;
  pthread_mutex_lock(&lw->mu);
  int n = lw->head ? lease_wait_resume_due(lw, now_ms) : 0;
  pthread_mutex_unlock(&lw->mu);
  return n;
}

int lease_wait_count(struct server *s) {
  struct lease_waits *lw = s->lease_waits;
  if (!lw) return 0;
  pthread_mutex_lock(&lw->mu);
  int n = lw->n;
  pthread_mutex_unlock(&lw->mu);
  return n;
}

void lease_wait_close(struct server *s) {
  struct lease_waits *lw = s->lease_waits;
  if (!lw) return;
  pthread_mutex_lock(&lw->mu);
  lw->closed = 1;
  lease_wait_resume_due(lw, UINT64_MAX);
  pthread_mutex_unlock(&lw->mu);
}
