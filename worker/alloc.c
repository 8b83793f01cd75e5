/* Resource allocator: dedicated CPU ids, whole or packed fractional GPUs, and
 * a host memory budget. Pure logic over struct alloc_pool. */
#include "alloc.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* Fractions are summed in floating point; 1e-9 absorbs 0.1+0.2-style error. */
#define ALLOC_EPS 1e-9

int alloc_init(struct alloc_pool *pool, const int *cpu_ids, int ncpus, const int *gpu_ids,
               const long *gpu_mem_mb, int ngpus, long memory_mb) {
  if (ncpus < 0 || ncpus > ALLOC_MAX_CPUS || ngpus < 0 || ngpus > ALLOC_MAX_GPUS || memory_mb < 0)
    return -EINVAL;
  memset(pool, 0, sizeof *pool);
  pool->ncpus = ncpus;
  for (int i = 0; i < ncpus; i++) pool->cpus[i].id = cpu_ids[i];
  pool->ngpus = ngpus;
  for (int i = 0; i < ngpus; i++) {
    pool->gpus[i].id = gpu_ids[i];
    pool->gpus[i].mem_mb = gpu_mem_mb ? gpu_mem_mb[i] : 0;
  }
  pool->memory_mb = memory_mb;
  return 0;
}

static int alloc_req_valid(const struct alloc_req *req) {
  if (!isfinite(req->cpu) || !isfinite(req->gpu)) return 0;
  if (req->cpu < 0 || req->gpu < 0 || req->memory_mb < 0) return 0;
  /* 1.5 GPUs cannot be packed on one device nor given as whole devices. */
  if (req->gpu > 1 && fabs(req->gpu - round(req->gpu)) > ALLOC_EPS) return 0;
  return 1;
}

static int alloc_cpu_whole(double cpu) { return cpu >= 1 - ALLOC_EPS; }
static int alloc_gpu_whole(double gpu) { return gpu >= 1 - ALLOC_EPS; }

int alloc_could_ever_fit(const struct alloc_pool *pool, const struct alloc_req *req) {
  if (!alloc_req_valid(req)) return 0;
  if (req->memory_mb > pool->memory_mb) return 0;
  if (req->cpu > 0 && (int)ceil(req->cpu - ALLOC_EPS) > pool->ncpus) return 0;
  if (req->gpu > 0 && (int)ceil(req->gpu - ALLOC_EPS) > pool->ngpus) return 0;
  return 1;
}

/* Best fit: the shared slot with the least room that still takes `need`, so
 * small shares fill partly used devices before breaking into an idle one. */
static int alloc_pick_cpu_share(const struct alloc_pool *pool, double need) {
  int best = -1;
  double best_room = 2;
  for (int i = 0; i < pool->ncpus; i++) {
    const struct alloc_cpu *c = &pool->cpus[i];
    if (c->owner) continue;
    double room = 1 - c->shared_used;
    if (room + ALLOC_EPS < need) continue;
    if (room < best_room) {
      best_room = room;
      best = i;
    }
  }
  return best;
}

static int alloc_pick_gpu_share(const struct alloc_pool *pool, double need) {
  int best = -1;
  double best_room = 2;
  for (int i = 0; i < pool->ngpus; i++) {
    const struct alloc_gpu *g = &pool->gpus[i];
    if (g->owner) continue;
    double room = 1 - g->shared_used;
    if (room + ALLOC_EPS < need) continue;
    if (room < best_room) {
      best_room = room;
      best = i;
    }
  }
  return best;
}

int alloc_take(struct alloc_pool *pool, int trial_id, const struct alloc_req *req,
               struct alloc_grant *grant) {
  if (trial_id <= 0 || !alloc_req_valid(req)) return -EINVAL;
  memset(grant, 0, sizeof *grant);
  grant->trial_id = trial_id;
  grant->cpu_quota = req->cpu;
  grant->memory_mb = req->memory_mb;
  if (req->memory_mb > pool->memory_mb - pool->memory_used) return -ENOSPC;

  /* Pick everything first, commit only when all of it fits. */
  int cpu_idx[ALLOC_MAX_CPUS], ncpu = 0, cpu_share = -1;
  if (alloc_cpu_whole(req->cpu)) {
    int want = (int)ceil(req->cpu - ALLOC_EPS);
    for (int i = 0; i < pool->ncpus && ncpu < want; i++)
      if (!pool->cpus[i].owner && pool->cpus[i].shared_used <= ALLOC_EPS) cpu_idx[ncpu++] = i;
    if (ncpu < want) return -ENOSPC;
  } else if (req->cpu > 0) {
    cpu_share = alloc_pick_cpu_share(pool, req->cpu);
    if (cpu_share < 0) return -ENOSPC;
  }

  int gpu_idx[ALLOC_MAX_GPUS], ngpu = 0, gpu_share = -1;
  if (alloc_gpu_whole(req->gpu)) {
    int want = (int)llround(req->gpu);
    for (int i = 0; i < pool->ngpus && ngpu < want; i++)
      if (!pool->gpus[i].owner && pool->gpus[i].shared_used <= ALLOC_EPS) gpu_idx[ngpu++] = i;
    if (ngpu < want) return -ENOSPC;
  } else if (req->gpu > 0) {
    gpu_share = alloc_pick_gpu_share(pool, req->gpu);
    if (gpu_share < 0) return -ENOSPC;
  }

  for (int i = 0; i < ncpu; i++) {
    pool->cpus[cpu_idx[i]].owner = trial_id;
    grant->cpus[grant->ncpus++] = pool->cpus[cpu_idx[i]].id;
  }
  if (cpu_share >= 0) {
    pool->cpus[cpu_share].shared_used += req->cpu;
    grant->cpus[grant->ncpus++] = pool->cpus[cpu_share].id;
    grant->cpu_shared = 1;
  }
  for (int i = 0; i < ngpu; i++) {
    pool->gpus[gpu_idx[i]].owner = trial_id;
    grant->gpus[grant->ngpus++] = pool->gpus[gpu_idx[i]].id;
  }
  if (gpu_share >= 0) {
    struct alloc_gpu *g = &pool->gpus[gpu_share];
    g->shared_used += req->gpu;
    grant->gpus[grant->ngpus++] = g->id;
    grant->gpu_frac = req->gpu;
    grant->gpu_mem_mb = (long)floor((double)g->mem_mb * req->gpu);
  }
  pool->memory_used += req->memory_mb;
  return 0;
}

void alloc_release(struct alloc_pool *pool, const struct alloc_grant *grant) {
  for (int i = 0; i < pool->ncpus; i++) {
    struct alloc_cpu *c = &pool->cpus[i];
    if (c->owner == grant->trial_id) c->owner = 0;
    if (grant->cpu_shared && grant->ncpus == 1 && c->id == grant->cpus[0]) {
      c->shared_used -= grant->cpu_quota;
      if (c->shared_used < ALLOC_EPS) c->shared_used = 0;
    }
  }
  for (int i = 0; i < pool->ngpus; i++) {
    struct alloc_gpu *g = &pool->gpus[i];
    if (g->owner == grant->trial_id) g->owner = 0;
    if (grant->gpu_frac > 0 && g->id == grant->gpus[0]) {
      g->shared_used -= grant->gpu_frac;
      if (g->shared_used < ALLOC_EPS) g->shared_used = 0;
    }
  }
  pool->memory_used -= grant->memory_mb;
  if (pool->memory_used < 0) pool->memory_used = 0;
}

int alloc_idle_cpus(const struct alloc_pool *pool) {
  int n = 0;
  for (int i = 0; i < pool->ncpus; i++)
    if (!pool->cpus[i].owner && pool->cpus[i].shared_used <= ALLOC_EPS) n++;
  return n;
}

void alloc_free_amounts(const struct alloc_pool *pool, struct alloc_free *out) {
  /* Whole idle units if any (a request of that size fits); otherwise the
   * largest single share left, which is what a fractional request can get. */
  int idle = alloc_idle_cpus(pool);
  double room = 0;
  for (int i = 0; i < pool->ncpus; i++) {
    const struct alloc_cpu *c = &pool->cpus[i];
    if (!c->owner && 1 - c->shared_used > room) room = 1 - c->shared_used;
  }
  out->cpu = idle > 0 ? idle : room;

  int gidle = 0;
  double groom = 0;
  for (int i = 0; i < pool->ngpus; i++) {
    const struct alloc_gpu *g = &pool->gpus[i];
    if (g->owner) continue;
    if (g->shared_used <= ALLOC_EPS) gidle++;
    if (1 - g->shared_used > groom) groom = 1 - g->shared_used;
  }
  out->gpu = gidle > 0 ? gidle : groom;
  out->memory_mb = pool->memory_mb - pool->memory_used;
}
