/* trace: the benchmark's per-request records (trace.h); CTUNE_TRACE builds only. */
#include "trace.h"

#ifdef CTUNE_TRACE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TRACE_MAX (1u << 21)

struct trace_rec {
  uint32_t kind, n;
  uint64_t v[TRACE_NV];
};

static struct trace_rec *trace_recs;
static atomic_uint trace_next;
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;

uint64_t trace_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void trace_dump(void) {
  const char *path = getenv("CTUNE_TRACE_FILE");
  char name[4096];
  if (!path) return;
  /* "%d" in the name: the process id (two servers in one benchmark run) */
  if (strstr(path, "%d"))
    snprintf(name, sizeof name, path, (int)getpid());
  else
    snprintf(name, sizeof name, "%s", path);
  FILE *f = fopen(name, "w");
  if (!f) return;
  unsigned n = atomic_load(&trace_next);
  if (n > TRACE_MAX) n = TRACE_MAX;
  for (unsigned i = 0; i < n; i++) {
    const struct trace_rec *r = &trace_recs[i];
    if (!r->kind) continue;
    fprintf(f, "%u", r->kind);
    for (uint32_t k = 0; k < r->n; k++) fprintf(f, " %llu", (unsigned long long)r->v[k]);
    fputc('\n', f);
  }
  fclose(f);
}

static void trace_init(void) {
  if (!getenv("CTUNE_TRACE_FILE")) return;
  trace_recs = calloc(TRACE_MAX, sizeof *trace_recs);
  if (trace_recs) atexit(trace_dump);
}

void trace_put(enum trace_kind kind, const uint64_t *v, int n) {
  pthread_once(&trace_once, trace_init);
  if (!trace_recs) return;
  unsigned i = atomic_fetch_add(&trace_next, 1);
  if (i >= TRACE_MAX) return;
  struct trace_rec *r = &trace_recs[i];
  r->n = (uint32_t)(n < TRACE_NV ? n : TRACE_NV);
  for (uint32_t k = 0; k < r->n; k++) r->v[k] = v[k];
  r->kind = (uint32_t)kind;
}
#endif
