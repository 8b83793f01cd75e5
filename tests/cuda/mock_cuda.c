/* Test double of the CUDA runtime, cuBLAS and NCCL on host memory (see
 * mock_cuda.h). Work queued on a stream runs as late as CUDA allows: only
 * when the host synchronises on it, another stream waits for it, or memory
 * is freed. So a missing wait or synchronisation shows up as stale data. */
#include "mock_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MOCK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOCK_ASAN 1
#endif
#endif
#ifdef MOCK_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* One queued piece of work; fn runs it and frees arg. */
struct op {
  void (*fn)(void *arg);
  void *arg;
  struct op *next;
};
#define MAX_STREAMS 256
struct CUgraph_st; /* below: a captured list of calls */
struct CUstream_st {
  int dev;
  struct CUgraph_st *capturing; /* between BeginCapture and EndCapture */
  struct op *head, *tail;
  long enqueued, done; /* ops ever queued / run */
  int running;
  int eager; /* runs its work as soon as it is queued */
};
/* The last record: stream and how many of its ops it covers. */
struct CUevent_st {
  int dev;
  cudaStream_t s;
  long pos;
};
static cudaStream_t streams[MAX_STREAMS];
static int n_streams;
static long streams_created;
struct cublasContext {
  int dev;
  cudaStream_t stream;
};
struct ncclComm {
  int rank, nranks, dev;
  int remote, fd; /* ncclCommInitRank: the socket to the hub (below) */
};

#define MAX_ALLOCS 4096
struct block {
  char *p;
  size_t size;
  int dev; /* -1: pinned host memory */
};
static struct block blocks[MAX_ALLOCS];
static int n_blocks;
static int n_devices = -1, cur_dev;
static struct mock_cuda_counts counts;
static long calls, fail_at, live_objects;
static cudaError_t last_err = cudaSuccess;

/* Counts each time nothing at all is left (no allocation, stream, event,
 * graph, handle or communicator): see the recycling in alloc(). */
static long quiet_epoch;
static void live_dec(void) {
  live_objects--;
  if (n_blocks == 0 && live_objects == 0) quiet_epoch++;
}

void mock_cuda_set_devices(int n) { n_devices = n; }
void mock_cuda_fail_at(long k) { fail_at = k > 0 ? calls + k : 0; }
long mock_cuda_calls(void) { return calls; }
long mock_cuda_live(void) { return n_blocks + live_objects; }
void mock_cuda_get_counts(struct mock_cuda_counts *out) { *out = counts; }

static int devices(void) {
  if (n_devices < 0) {
    const char *e = getenv("CTUNE_MOCK_GPUS");
    n_devices = e ? atoi(e) : 2;
  }
  return n_devices;
}

/* Counts the call; nonzero when this one must fail (fault injection). */
int mock_cuda_failing(void) {
  calls++;
  return fail_at && calls == fail_at;
}

static void die(const char *fmt, const char *what, long a, long b) {
  fprintf(stderr, "mock_cuda: ");
  fprintf(stderr, fmt, what, a, b);
  fprintf(stderr, "\n");
  abort();
}

static struct block *find(const void *p) {
  for (int i = 0; i < n_blocks; i++)
    if ((const char *)p >= blocks[i].p && (const char *)p < blocks[i].p + blocks[i].size)
      return &blocks[i];
  return NULL;
}

/* [p, p+bytes) must be inside one live device allocation on the current
 * device: what a kernel or cuBLAS may touch. */
void mock_cuda_dev_range(const void *p, size_t bytes, const char *what) {
  if (bytes == 0) return;
  struct block *b = find(p);
  if (!b || b->dev < 0) die("%s: pointer is not device memory (%ld, %ld)", what, 0, 0);
  if ((const char *)p + bytes > b->p + b->size)
    die("%s: %ld bytes past the end of a %ld-byte allocation", what,
        (long)((const char *)p + bytes - (b->p + b->size)), (long)b->size);
  if (b->dev != cur_dev)
    die("%s: memory of device %ld used while device %ld is current", what, b->dev, cur_dev);
}

/* Host side of a copy: pinned blocks are range-checked, pageable memory is
 * the caller's. */
static void host_range(const void *p, size_t bytes, const char *what) {
  struct block *b = find(p);
  if (b && b->dev >= 0) die("%s: device pointer used as host memory", what, 0, 0);
  if (b && (const char *)p + bytes > b->p + b->size)
    die("%s: %ld bytes past the end of pinned block of %ld", what,
        (long)((const char *)p + bytes - (b->p + b->size)), (long)b->size);
}

static void on_current(int dev, const char *what) {
  if (dev != cur_dev)
    die("%s: object of device %ld used while device %ld is current", what, dev, cur_dev);
}

/* ---- streams --------------------------------------------------------- */

/* Runs s's queued work until `upto` ops of it have run. */
static void run_until(cudaStream_t s, long upto) {
  if (s->running && s->done < upto)
    die("%s: circular wait between streams (%ld, %ld)", "run", s->done, upto);
  s->running++;
  while (s->done < upto && s->head) {
    struct op *o = s->head;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    o->fn(o->arg);
    free(o);
    s->done++;
  }
  s->running--;
}

static void run_all(cudaStream_t s) { run_until(s, s->enqueued); }

/* cudaFree and friends synchronise: everything queued anywhere runs first. */
static void run_everything(void) {
  for (int i = 0; i < n_streams; i++) run_all(streams[i]);
}

/* ---- graphs ----------------------------------------------------------
 * A capturing stream records each call (its function and a pristine copy of
 * its arguments) instead of queueing it; a launch of the instantiated graph
 * queues a fresh copy of every recorded call, in order, on the stream. */
struct gnode {
  void (*fn)(void *);
  void *arg; /* the template: never run, cloned at each launch */
  void *(*clone)(const void *);
  void (*destroy)(void *);
};
struct CUgraph_st {
  int dev;
  struct gnode *node;
  int n, cap;
};
struct CUgraphExec_st {
  struct CUgraph_st g; /* a copy: the graph may be destroyed first */
};

static const void *last_args; /* what mock_cuda_args handed out last */
static size_t last_args_size;
static size_t clone_size;
static void *clone_args(const void *a) { return mock_cuda_args(a, clone_size); }

static void queue_op(cudaStream_t s, void (*fn)(void *), void *arg) {
  struct op *o = malloc(sizeof(*o));
  if (!o) die("%s: out of host memory", "enqueue", 0, 0);
  *o = (struct op){fn, arg, NULL};
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->enqueued++;
  if (s->eager) run_all(s);
}

/* clone NULL: plain arguments from mock_cuda_args, kept with their size in
 * front and copied by size at each launch. */
static void graph_add(struct CUgraph_st *g, void (*fn)(void *), void *arg,
                      void *(*clone)(const void *), void (*destroy)(void *)) {
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    struct gnode *nn = realloc(g->node, (size_t)cap * sizeof(*nn));
    if (!nn) die("%s: out of host memory", "graph", 0, 0);
    g->node = nn;
    g->cap = cap;
  }
  struct gnode *q = &g->node[g->n++];
  *q = (struct gnode){fn, arg, clone, destroy ? destroy : free};
  if (!clone) {
    if (arg != last_args)
      die("%s: captured call without copyable arguments (%ld, %ld)", "graph", 0, 0);
    size_t *t = malloc(sizeof(size_t) + last_args_size);
    if (!t) die("%s: out of host memory", "graph", 0, 0);
    t[0] = last_args_size;
    memcpy(t + 1, arg, last_args_size);
    free(arg);
    q->arg = t;
    q->destroy = free;
  }
}

void mock_cuda_enqueue_clone(cudaStream_t s, void (*fn)(void *), void *arg,
                             void *(*clone)(const void *), void (*destroy)(void *)) {
  if (s && s->capturing) {
    if (!clone) die("%s: no clone function (%ld, %ld)", "capture", 0, 0);
    graph_add(s->capturing, fn, arg, clone, destroy);
    return;
  }
  counts.submits++;
  if (!s) {
    run_everything();
    fn(arg);
    return;
  }
  queue_op(s, fn, arg);
}

void mock_cuda_enqueue(cudaStream_t s, void (*fn)(void *), void *arg) {
  if (s && s->capturing) {
    graph_add(s->capturing, fn, arg, NULL, NULL);
    return;
  }
  counts.submits++;
  if (!s) { /* the legacy default stream: the work runs now */
    run_everything();
    fn(arg);
    return;
  }
  struct op *o = malloc(sizeof(*o));
  if (!o) die("%s: out of host memory", "enqueue", 0, 0);
  *o = (struct op){fn, arg, NULL};
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  s->enqueued++;
  if (s->eager) run_all(s);
}

void *mock_cuda_args(const void *src, size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) die("%s: out of host memory", "args", 0, 0);
  memcpy(p, src, size);
  last_args = p;
  last_args_size = size;
  return p;
}

static void on_stream_not_capturing(cudaStream_t s, const char *what) {
  if (s && s->capturing)
    die("%s: not allowed while the stream is capturing (%ld, %ld)", what, 0, 0);
}

static void no_capture_anywhere(const char *what) {
  for (int i = 0; i < n_streams; i++) on_stream_not_capturing(streams[i], what);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  (void)mode;
  if (mock_cuda_failing()) return cudaErrorUnknown;
  if (!s) return cudaErrorStreamCaptureUnsupported;
  on_current(s->dev, "cudaStreamBeginCapture");
  if (s->capturing) return cudaErrorIllegalState;
  s->capturing = calloc(1, sizeof(*s->capturing));
  if (!s->capturing) return cudaErrorMemoryAllocation;
  s->capturing->dev = s->dev;
  live_objects++;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  /* not a failure point: capture always ends, and the graph is handed back */
  if (!s || !s->capturing) return cudaErrorIllegalState;
  *g = s->capturing;
  s->capturing = NULL;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
  *st = s && s->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

static void graph_free_nodes(struct CUgraph_st *g) {
  for (int i = 0; i < g->n; i++) g->node[i].destroy(g->node[i].arg);
  free(g->node);
}

static void *node_clone(const struct gnode *q) {
  if (q->clone) return q->clone(q->arg);
  const size_t *t = q->arg;
  clone_size = t[0];
  return clone_args(t + 1);
}

/* The executable copy owns its own templates. */
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
  (void)flags;
  if (mock_cuda_failing()) return cudaErrorUnknown;
  struct CUgraphExec_st *x = calloc(1, sizeof(*x));
  if (!x) return cudaErrorMemoryAllocation;
  x->g.dev = g->dev;
  x->g.n = x->g.cap = g->n;
  x->g.node = calloc((size_t)(g->n ? g->n : 1), sizeof(struct gnode));
  if (!x->g.node) {
    free(x);
    return cudaErrorMemoryAllocation;
  }
  for (int i = 0; i < g->n; i++) {
    struct gnode *q = &g->node[i], *c = &x->g.node[i];
    *c = *q;
    if (q->clone) {
      c->arg = q->clone(q->arg);
    } else {
      const size_t *t = q->arg;
      size_t *u = malloc(sizeof(size_t) + t[0]);
      if (!u) die("%s: out of host memory", "graph", 0, 0);
      memcpy(u, t, sizeof(size_t) + t[0]);
      c->arg = u;
    }
  }
  *e = x;
  live_objects++;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  if (!s) return cudaErrorInvalidResourceHandle;
  on_current(s->dev, "cudaGraphLaunch");
  on_stream_not_capturing(s, "cudaGraphLaunch");
  if (e->g.dev != s->dev)
    die("%s: graph of device %ld launched on a stream of %ld", "cudaGraphLaunch", e->g.dev, s->dev);
  counts.graph_launches++;
  counts.submits++;
  counts.graph_nodes += e->g.n;
  for (int i = 0; i < e->g.n; i++) {
    struct gnode *q = &e->g.node[i];
    queue_op(s, q->fn, node_clone(q));
  }
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  if (!g) return cudaSuccess;
  graph_free_nodes(g);
  free(g);
  live_dec();
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  if (!e) return cudaErrorInvalidValue; /* as the runtime: there is no graph */
  run_everything();                     /* a launched graph's work finishes first */
  graph_free_nodes(&e->g);
  free(e);
  live_dec();
  return cudaSuccess;
}

/* ---- CUDA runtime ---------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  *count = devices();
  return *count ? cudaSuccess : cudaErrorNoDevice;
}

/* Not a failure point: selecting a valid device fails only when the device
 * is lost, which this double does not model. */
cudaError_t cudaSetDevice(int dev) {
  if (dev < 0 || dev >= devices()) return cudaErrorInvalidDevice;
  cur_dev = dev;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int dev) {
  if (dev < 0 || dev >= devices()) return cudaErrorInvalidDevice;
  snprintf(bus, (size_t)len, "00000000:%02X:00.0", 0x10 + dev);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_err;
  last_err = cudaSuccess;
  return e;
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "no error";
  case cudaErrorMemoryAllocation:
    return "out of memory (mock)";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected (mock)";
  case cudaErrorInvalidValue:
    return "invalid argument (mock)";
  default:
    return "unknown error (mock)";
  }
}

static void no_capture_anywhere(const char *what);

/* Freed memory kept for reuse. Fresh memory is most of the cost of a
 * session on the double (the fault-injection loops run hundreds of them,
 * and each plans megabytes of arenas): every page faulted in and zeroed by
 * the kernel before the NaN fill below, and given back at free. A block is
 * reused only after a moment when nothing at all was live: a pointer kept
 * into freed memory within a session (a graph not rebuilt after a re-plan)
 * then still meets a fresh address, and under ASan a poisoned one, as
 * without recycling. Reused or not, a block is filled with NaN. */
#define POOL_SLOTS 64
#define POOL_BYTES ((size_t)512 << 20)
static struct pooled {
  char *p;
  size_t rounded;
  long epoch; /* quiet_epoch when it was freed */
} pool[POOL_SLOTS];
static int n_pool;
static size_t pool_bytes;

static char *pool_take(size_t rounded) {
  for (int i = 0; i < n_pool; i++)
    if (pool[i].rounded == rounded && pool[i].epoch < quiet_epoch) {
      char *m = pool[i].p;
      pool_bytes -= rounded;
      pool[i] = pool[--n_pool];
      UNPOISON(m, rounded);
      return m;
    }
  return NULL;
}

static void pool_give(char *m, size_t rounded) {
  if (n_pool == POOL_SLOTS || pool_bytes + rounded > POOL_BYTES) {
    free(m);
    return;
  }
  POISON(m, rounded);
  pool[n_pool++] = (struct pooled){m, rounded, quiet_epoch};
  pool_bytes += rounded;
}

static size_t rounded_size(size_t size) {
  size_t rounded = (size + 255) / 256 * 256;
  return rounded ? rounded : 256;
}

static cudaError_t alloc(void **p, size_t size, int dev) {
  no_capture_anywhere("cudaMalloc");
  if (mock_cuda_failing()) return cudaErrorMemoryAllocation;
  if (n_blocks == MAX_ALLOCS) die("%s: too many allocations", "alloc", 0, 0);
  size_t rounded = rounded_size(size);
  char *m = pool_take(rounded);
  if (!m) m = aligned_alloc(256, rounded);
  if (!m) return cudaErrorMemoryAllocation;
  memset(m, 0xff, rounded); /* NaN: unwritten values show */
  blocks[n_blocks++] = (struct block){m, size, dev};
  *p = m;
  return cudaSuccess;
}

static cudaError_t release(void *p, int want_dev) {
  if (!p) return cudaSuccess;
  no_capture_anywhere("cudaFree");
  run_everything();
  for (int i = 0; i < n_blocks; i++)
    if (blocks[i].p == p) {
      if ((blocks[i].dev < 0) != (want_dev < 0))
        die("%s: freed with the wrong function", "free", 0, 0);
      pool_give(p, rounded_size(blocks[i].size));
      blocks[i] = blocks[--n_blocks];
      if (n_blocks == 0 && live_objects == 0) quiet_epoch++;
      return cudaSuccess;
    }
  die("%s: not an allocation", "free", 0, 0);
  return cudaErrorInvalidValue;
}

cudaError_t cudaMalloc(void **p, size_t size) { return alloc(p, size, cur_dev); }
cudaError_t cudaHostAlloc(void **p, size_t size, unsigned flags) {
  (void)flags;
  return alloc(p, size, -1);
}
cudaError_t cudaFree(void *p) { return release(p, 0); }
cudaError_t cudaFreeHost(void *p) { return release(p, -1); }

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  *free_b = (size_t)1 << 30;
  *total = (size_t)2 << 30;
  return cudaSuccess;
}

struct copy_args {
  void *dst;
  const void *src;
  size_t n;
  void *staged; /* pageable source copied at call time, as CUDA stages it */
};

static void run_copy(void *arg) {
  struct copy_args *a = arg;
  memcpy(a->dst, a->staged ? a->staged : a->src, a->n);
  free(a->staged);
  free(a);
}

/* Pinned memory is read and written when the copy runs; pageable memory is
 * staged at the call (H2D) or waited for (D2H), as CUDA does. */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  if (s) on_current(s->dev, "cudaMemcpyAsync stream");
  int pageable = 0;
  if (kind == cudaMemcpyHostToDevice) {
    mock_cuda_dev_range(dst, n, "cudaMemcpyAsync H2D dst");
    host_range(src, n, "cudaMemcpyAsync H2D src");
    pageable = !find(src);
  } else if (kind == cudaMemcpyDeviceToHost) {
    mock_cuda_dev_range(src, n, "cudaMemcpyAsync D2H src");
    host_range(dst, n, "cudaMemcpyAsync D2H dst");
    pageable = !find(dst);
  } else {
    die("%s: unexpected copy kind %ld", "cudaMemcpyAsync", (long)kind, 0);
  }
  if (pageable && s && s->capturing)
    die("%s: pageable host memory in a captured copy (%ld, %ld)", "cudaMemcpyAsync", 0, 0);
  struct copy_args a = {dst, src, n, NULL};
  if (pageable && kind == cudaMemcpyHostToDevice) a.staged = mock_cuda_args(src, n ? n : 1);
  mock_cuda_enqueue(s, run_copy, mock_cuda_args(&a, sizeof(a)));
  if (pageable && kind == cudaMemcpyDeviceToHost && s) {
    counts.syncs++; /* the host waits for a pageable download */
    run_all(s);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, n, kind, NULL);
}

struct set_args {
  void *p;
  int v;
  size_t n;
};

static void run_set(void *arg) {
  struct set_args *a = arg;
  memset(a->p, a->v, a->n);
  free(a);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  if (s) on_current(s->dev, "cudaMemsetAsync stream");
  mock_cuda_dev_range(p, n, "cudaMemsetAsync");
  struct set_args a = {p, v, n};
  mock_cuda_enqueue(s, run_set, mock_cuda_args(&a, sizeof(a)));
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, NULL); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  if (mock_cuda_failing()) return cudaErrorUnknown;
  if (n_streams == MAX_STREAMS) die("%s: too many streams", "stream", 0, 0);
  *s = calloc(1, sizeof(**s));
  if (!*s) return cudaErrorMemoryAllocation;
  (*s)->dev = cur_dev;
  /* CTUNE_MOCK_EAGER=odd|even: every second stream (by creation order) runs
   * its work at once while the others wait as long as they can: the
   * schedule that exposes a missing wait in the other direction. */
  const char *eager = getenv("CTUNE_MOCK_EAGER");
  if (eager && (!strcmp(eager, "odd") || !strcmp(eager, "even")))
    (*s)->eager = (int)(streams_created % 2) == (eager[0] == 'o');
  streams_created++;
  streams[n_streams++] = *s;
  live_objects++;
  return cudaSuccess;
}

/* Queued work still runs, as CUDA finishes it after the stream is gone. */
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  on_current(s->dev, "cudaStreamDestroy");
  run_all(s);
  for (int i = 0; i < n_streams; i++)
    if (streams[i] == s) streams[i] = streams[--n_streams];
  free(s);
  live_dec();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  on_stream_not_capturing(s, "cudaStreamSynchronize");
  counts.syncs++;
  run_all(s);
  return cudaSuccess;
}

struct wait_args {
  cudaStream_t s;
  long pos;
};

static void run_wait(void *arg) {
  struct wait_args *a = arg;
  run_until(a->s, a->pos);
  free(a);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) {
  (void)f;
  if (mock_cuda_failing()) return cudaErrorUnknown;
  on_current(s->dev, "cudaStreamWaitEvent stream");
  if (!e->s) return cudaSuccess; /* never recorded: nothing to wait for */
  struct wait_args a = {e->s, e->pos};
  mock_cuda_enqueue(s, run_wait, mock_cuda_args(&a, sizeof(a)));
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  if (mock_cuda_failing()) return cudaErrorUnknown;
  *e = calloc(1, sizeof(**e));
  if (!*e) return cudaErrorMemoryAllocation;
  (*e)->dev = cur_dev;
  live_objects++;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  on_current(s->dev, "cudaEventRecord stream");
  if (e->dev != s->dev)
    die("%s: event of device %ld, stream of %ld", "cudaEventRecord", e->dev, s->dev);
  e->s = s;
  e->pos = s->enqueued;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  counts.syncs++;
  if (e->s) run_until(e->s, e->pos);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  free(e);
  live_dec();
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  if (mock_cuda_failing()) return cudaErrorUnknown;
  no_capture_anywhere("cudaDeviceSynchronize");
  counts.syncs++;
  run_everything();
  return cudaSuccess;
}

/* ---- cuBLAS ---------------------------------------------------------- */

/* CTUNE_MOCK_FAIL=<call>: that call fails every time with what a GPU whose
 * library cannot start returns (end-to-end tests of ctune-train, where the
 * counting fault injection cannot reach). */
static int named_fault(const char *call) {
  const char *f = getenv("CTUNE_MOCK_FAIL");
  return f && !strcmp(f, call);
}

cublasStatus_t cublasCreate(cublasHandle_t *h) {
  if (named_fault("cublasCreate")) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mock_cuda_failing()) return CUBLAS_STATUS_ALLOC_FAILED;
  *h = calloc(1, sizeof(**h));
  if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
  (*h)->dev = cur_dev;
  live_objects++;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
  on_current(h->dev, "cublasDestroy");
  free(h);
  live_dec();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (mock_cuda_failing()) return CUBLAS_STATUS_INTERNAL_ERROR;
  on_current(h->dev, "cublasSetStream");
  if (s->dev != h->dev)
    die("%s: stream of device %ld, handle of %ld", "cublasSetStream", s->dev, h->dev);
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t size) {
  if (mock_cuda_failing()) return CUBLAS_STATUS_INTERNAL_ERROR;
  on_current(h->dev, "cublasSetWorkspace");
  mock_cuda_dev_range(ws, size, "cublasSetWorkspace");
  if ((uintptr_t)ws % 256) die("%s: workspace not 256-aligned", "cublasSetWorkspace", 0, 0);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  (void)mode;
  if (mock_cuda_failing()) return CUBLAS_STATUS_INTERNAL_ERROR;
  on_current(h->dev, "cublasSetMathMode");
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? "success" : "failure (mock)";
}

const char *cublasGetStatusName(cublasStatus_t st) {
  switch (st) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  default:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  }
}

struct gemm_args {
  cublasOperation_t ta, tb;
  int m, n, k;
  float alpha;
  const float *A;
  int lda;
  const float *B;
  int ldb;
  float beta;
  float *C;
  int ldc;
};

static float gemm_out(const struct gemm_args *g, float *c, double acc) {
  return (float)(g->alpha * acc + (g->beta != 0.0f ? g->beta * *c : 0.0f));
}

/* Each C element is one double sum over p = 0..k-1 in order (a float times
 * a float is exact in double), so results do not depend on how the loops
 * below are blocked; a block of GEMM_I x GEMM_J elements keeps that many
 * independent sums going at once, rather than waiting on one add at a time
 * (this loop was most of the double's time in the tests). */
enum { GEMM_I = 4, GEMM_J = 2 };

/* One block's sums, from the packed copies below only (the double's own
 * buffers, sized where they are filled): the device memory itself is read
 * and written with the sanitizers on, in the packing and the stores. Left
 * out of ASan and UBSan, which made this loop 4x slower and it was most
 * of the double's time under them. */
__attribute__((no_sanitize("address", "undefined"))) static void
gemm_block(const float *at, int m, const float *b0, int k, double acc[GEMM_J][GEMM_I]) {
  const float *b1 = b0 + k;
  double c00 = 0, c01 = 0, c02 = 0, c03 = 0; /* (named: kept in registers) */
  double c10 = 0, c11 = 0, c12 = 0, c13 = 0;
  for (int p = 0; p < k; p++) {
    const float *a = at + (size_t)p * m;
    const double a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    const double x = b0[p], y = b1[p];
    c00 += a0 * x, c01 += a1 * x, c02 += a2 * x, c03 += a3 * x;
    c10 += a0 * y, c11 += a1 * y, c12 += a2 * y, c13 += a3 * y;
  }
  acc[0][0] = c00, acc[0][1] = c01, acc[0][2] = c02, acc[0][3] = c03;
  acc[1][0] = c10, acc[1][1] = c11, acc[1][2] = c12, acc[1][3] = c13;
}

static void run_gemm(void *arg) {
  struct gemm_args *g = arg;
  const int m = g->m, n = g->n, k = g->k, lda = g->lda, ldb = g->ldb;
  const float *A = g->A, *B = g->B;
  /* pack op(A) as [k][m] and op(B)^T as [n][k], so a block's row values
   * and a column's values are each contiguous (fast enough under ASan);
   * into buffers kept from one call to the next (the double runs on one
   * thread), as a fresh allocation per call is fresh pages under ASan */
  static float *pack;
  static size_t pack_cap;
  const size_t need = ((size_t)m + n) * k + 1;
  if (need > pack_cap) {
    free(pack);
    pack_cap = need > 2 * pack_cap ? need : 2 * pack_cap;
    if (!(pack = malloc(pack_cap * sizeof(float))))
      die("%s: out of host memory", "cublasSgemm", 0, 0);
  }
  float *at = pack, *bp = pack + (size_t)m * k;
  for (int p = 0; p < k; p++)
    for (int i = 0; i < m; i++)
      at[(size_t)p * m + i] =
          g->ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
  for (int j = 0; j < n; j++)
    for (int p = 0; p < k; p++)
      bp[(size_t)j * k + p] =
          g->tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
  const int mb = m - m % GEMM_I, nb = n - n % GEMM_J;
  for (int j = 0; j < nb; j += GEMM_J)
    for (int i = 0; i < mb; i += GEMM_I) {
      double acc[GEMM_J][GEMM_I];
      gemm_block(at + i, m, bp + (size_t)j * k, k, acc);
      for (int q = 0; q < GEMM_J; q++)
        for (int r = 0; r < GEMM_I; r++) {
          float *c = &g->C[i + r + (size_t)(j + q) * g->ldc];
          *c = gemm_out(g, c, acc[q][r]);
        }
    }
  /* the edges: rows from mb on in the blocked columns, all rows past nb */
  for (int j = 0; j < n; j++)
    for (int i = j < nb ? mb : 0; i < m; i++) {
      const float *b = bp + (size_t)j * k;
      double acc = 0;
      for (int p = 0; p < k; p++) acc += (double)at[(size_t)p * m + i] * b[p];
      float *c = &g->C[i + (size_t)j * g->ldc];
      *c = gemm_out(g, c, acc);
    }
  free(g);
}

/* Column-major C = alpha op(A) op(B) + beta C with cuBLAS's argument rules;
 * beta 0 never reads C (it may hold NaN). Runs on the handle's stream. */
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc) {
  if (mock_cuda_failing()) return CUBLAS_STATUS_EXECUTION_FAILED;
  on_current(h->dev, "cublasSgemm handle");
  if (!h->stream || h->stream->dev != cur_dev)
    die("%s: no stream of device %ld", "cublasSgemm", cur_dev, 0);
  int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) ||
      ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  mock_cuda_dev_range(A, ((size_t)lda * (ac - 1) + ar) * sizeof(float), "cublasSgemm A");
  mock_cuda_dev_range(B, ((size_t)ldb * (bc - 1) + br) * sizeof(float), "cublasSgemm B");
  mock_cuda_dev_range(C, ((size_t)ldc * (n - 1) + m) * sizeof(float), "cublasSgemm C");
  struct gemm_args a = {ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc};
  mock_cuda_enqueue(h->stream, run_gemm, mock_cuda_args(&a, sizeof(a)));
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- NCCL ------------------------------------------------------------ */

#define MAX_QUEUED 64
struct queued {
  const float *send;
  float *recv;
  size_t count;
  ncclRedOp_t op;
  ncclComm_t comm;
  cudaStream_t stream;
};

/* One all-reduce over the ranks' streams: it runs when the first rank's
 * stream reaches it, after running every other rank's stream up to it. */
struct collective {
  int nranks, reduced, refs;
  struct queued q[MAX_QUEUED];
  long pos[MAX_QUEUED]; /* each rank's op count including this one */
};

struct coll_arg {
  struct collective *c;
  int rank;
};

static void run_collective(void *arg) {
  struct coll_arg *a = arg;
  struct collective *c = a->c;
  if (!c->reduced) {
    for (int r = 0; r < c->nranks; r++)
      if (r != a->rank) run_until(c->q[r].stream, c->pos[r] - 1);
    for (size_t i = 0; i < c->q[0].count; i++) {
      double acc = 0;
      for (int r = 0; r < c->nranks; r++) acc += c->q[r].send[i];
      if (c->q[0].op == ncclAvg) acc /= c->nranks;
      for (int r = 0; r < c->nranks; r++) c->q[r].recv[i] = (float)acc;
    }
    c->reduced = 1;
  }
  if (--c->refs == 0) free(c);
  free(a);
}
static struct queued queue[MAX_QUEUED];
static int n_queued, group_depth;
static ncclResult_t group_error; /* an op of the open group failed */

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devlist) {
  if (mock_cuda_failing()) return ncclUnhandledCudaError;
  for (int i = 0; i < n; i++) {
    comms[i] = malloc(sizeof(*comms[i]));
    if (!comms[i]) return ncclSystemError; /* test double: leaks are fine here */
    *comms[i] = (struct ncclComm){i, n, devlist[i], 0, -1};
    live_objects++;
  }
  return ncclSuccess;
}

/* ---- ranks in several processes --------------------------------------
 * ncclGetUniqueId starts a hub thread listening on an abstract Unix socket
 * whose name is the id; each ncclCommInitRank connects and says (nranks,
 * rank). An all-reduce over such communicators runs at ncclGroupEnd: each
 * rank's stream is run up to it, its buffer goes to the hub, which sums
 * (then averages) in rank order in double, exactly as run_collective does
 * for ranks of one process, and sends every rank the same floats. A process
 * sends for all its ranks before it reads any answer, so the hub, which
 * reads ranks in order and then answers in order, never waits on a reader. */
#define HUB_MAX_RANKS 64
struct hub_hello {
  int32_t nranks, rank;
};
struct hub_msg {
  uint64_t count;
  int32_t op;
};

static int full_io(int fd, void *buf, size_t n, int writing) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void *hub_main(void *arg) {
  int lfd = (int)(intptr_t)arg, fds[HUB_MAX_RANKS], nranks = 0, joined = 0;
  float *buf[HUB_MAX_RANKS] = {0};
  do {
    struct hub_hello h;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0 || full_io(fd, &h, sizeof(h), 0) || h.nranks < 1 || h.nranks > HUB_MAX_RANKS ||
        h.rank < 0 || h.rank >= h.nranks || (nranks && h.nranks != nranks))
      die("%s: bad hello (rank %ld of %ld)", "mock nccl hub", fd < 0 ? -1 : h.rank, h.nranks);
    nranks = h.nranks;
    fds[h.rank] = fd;
    joined++;
  } while (joined < nranks);
  close(lfd);
  for (;;) {
    struct hub_msg m[HUB_MAX_RANKS];
    int r;
    for (r = 0; r < nranks; r++) {
      if (full_io(fds[r], &m[r], sizeof(m[r]), 0)) break; /* a rank hung up: done */
      if (m[r].count != m[0].count || m[r].op != m[0].op)
        die("%s: rank %ld sent %ld floats, rank 0 another count or op", "mock nccl hub", r,
            (long)m[r].count);
      free(buf[r]);
      buf[r] = malloc(m[r].count * sizeof(float) + 1);
      if (!buf[r] || full_io(fds[r], buf[r], m[r].count * sizeof(float), 0))
        die("%s: rank %ld: cannot read its %ld floats", "mock nccl hub", r, (long)m[r].count);
    }
    if (r < nranks) break;
    for (size_t i = 0; i < m[0].count; i++) {
      double acc = 0;
      for (r = 0; r < nranks; r++) acc += buf[r][i];
      if (m[0].op == ncclAvg) acc /= nranks;
      buf[0][i] = (float)acc;
    }
    for (r = 0; r < nranks; r++)
      if (full_io(fds[r], buf[0], m[0].count * sizeof(float), 1)) break;
  }
  for (int r = 0; r < nranks; r++) {
    close(fds[r]);
    free(buf[r]);
  }
  return NULL;
}

static socklen_t hub_addr(const ncclUniqueId *id, struct sockaddr_un *a) {
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  size_t n = strnlen(id->internal + 1, sizeof(a->sun_path) - 2);
  memcpy(a->sun_path + 1, id->internal + 1, n); /* sun_path[0] = 0: abstract */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static int made;
  if (mock_cuda_failing()) return ncclSystemError;
  memset(id, 0, sizeof(*id));
  snprintf(id->internal + 1, sizeof(id->internal) - 1, "ctune-mock-nccl-%ld-%d", (long)getpid(),
           made++);
  struct sockaddr_un a;
  socklen_t len = hub_addr(id, &a);
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  pthread_t t;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, len) || listen(lfd, HUB_MAX_RANKS) ||
      pthread_create(&t, NULL, hub_main, (void *)(intptr_t)lfd)) {
    if (lfd >= 0) close(lfd);
    return ncclSystemError;
  }
  pthread_detach(t);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (mock_cuda_failing()) return ncclUnhandledCudaError;
  if (nranks < 1 || nranks > HUB_MAX_RANKS || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  struct sockaddr_un a;
  socklen_t len = hub_addr(&id, &a);
  struct hub_hello h = {nranks, rank};
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&a, len) || full_io(fd, &h, sizeof(h), 1)) {
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  *comm = malloc(sizeof(**comm));
  if (!*comm) {
    close(fd);
    return ncclSystemError;
  }
  **comm = (struct ncclComm){rank, nranks, cur_dev, 1, fd};
  live_objects++;
  return ncclSuccess;
}

/* The queued all-reduce of this process's ranks of a communicator that
 * spans processes: now, through the hub. */
static ncclResult_t remote_collective(void) {
  for (int q = 0; q < n_queued; q++) {
    struct queued *o = &queue[q];
    struct hub_msg m = {o->count, o->op};
    run_all(o->stream); /* the rank's work up to the all-reduce */
    if (full_io(o->comm->fd, &m, sizeof(m), 1) ||
        full_io(o->comm->fd, (void *)o->send, o->count * sizeof(float), 1))
      return ncclSystemError;
  }
  for (int q = 0; q < n_queued; q++)
    if (full_io(queue[q].comm->fd, queue[q].recv, queue[q].count * sizeof(float), 0))
      return ncclSystemError;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (c && c->remote) close(c->fd);
  free(c);
  live_dec();
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : "NCCL failure (mock)";
}

ncclResult_t ncclGroupStart(void) {
  if (mock_cuda_failing()) return ncclInternalError;
  group_depth++;
  return ncclSuccess;
}

/* Runs the queued all-reduce once every rank has joined. */
ncclResult_t ncclGroupEnd(void) {
  /* not a failure point: the group's errors surface here instead */
  if (group_depth < 1) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  if (group_error != ncclSuccess) { /* as NCCL: the group is dropped */
    ncclResult_t e = group_error;
    group_error = ncclSuccess;
    n_queued = 0;
    return e;
  }
  if (n_queued == 0) return ncclSuccess;
  if (queue[0].comm->remote) {
    ncclResult_t e = remote_collective();
    n_queued = 0;
    return e;
  }
  int nranks = queue[0].comm->nranks;
  if (n_queued != nranks) die("%s: %ld ranks joined of %ld", "ncclGroupEnd", n_queued, nranks);
  struct collective *c = calloc(1, sizeof(*c));
  if (!c) die("%s: out of host memory", "ncclGroupEnd", 0, 0);
  c->nranks = c->refs = nranks;
  /* every rank's place first: an eager stream runs its part at once */
  for (int r = 0; r < nranks; r++) {
    c->q[r] = queue[r];
    c->pos[r] = queue[r].stream->enqueued + 1;
    for (int o = 0; o < r; o++)
      if (queue[o].stream == queue[r].stream)
        die("%s: ranks %ld and %ld share a stream", "ncclGroupEnd", o, r);
  }
  for (int r = 0; r < nranks; r++) {
    struct coll_arg a = {c, r};
    mock_cuda_enqueue(queue[r].stream, run_collective, mock_cuda_args(&a, sizeof(a)));
  }
  n_queued = 0;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  if (mock_cuda_failing()) {
    if (group_depth) group_error = ncclInternalError;
    return ncclInternalError;
  }
  if (type != ncclFloat || (op != ncclAvg && op != ncclSum)) return ncclInvalidArgument;
  if (!group_depth && c->nranks > 1)
    die("%s: %ld ranks from one thread outside a group would deadlock", "ncclAllReduce", c->nranks,
        0);
  if (s->dev != c->dev)
    die("%s: stream of device %ld, communicator of %ld", "ncclAllReduce", s->dev, c->dev);
  int saved = cur_dev;
  cur_dev = c->dev; /* NCCL does not need the device current; check ranges on its own */
  mock_cuda_dev_range(send, count * sizeof(float), "ncclAllReduce send");
  mock_cuda_dev_range(recv, count * sizeof(float), "ncclAllReduce recv");
  cur_dev = saved;
  if (n_queued == MAX_QUEUED) return ncclInternalError;
  queue[n_queued++] = (struct queued){send, recv, count, op, c, s};
  if (!group_depth) { /* one rank, outside a group */
    group_depth++;
    return ncclGroupEnd();
  }
  return ncclSuccess;
}

void mock_cuda_on_stream(cudaStream_t s, const char *what) {
  if (s) on_current(s->dev, what);
}
