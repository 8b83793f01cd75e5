/* Which CPU ids, GPU devices (or GPU fractions) and how much memory each trial
 * gets on this worker. Pure: the daemon owns one pool, tests build their own. */
#ifndef CTUNE_WORKER_ALLOC_H
#define CTUNE_WORKER_ALLOC_H

#define ALLOC_MAX_CPUS 256
#define ALLOC_MAX_GPUS 16

struct alloc_req {
  double cpu;     /* >= 1: ceil(cpu) dedicated ids; (0,1): a share of one id */
  double gpu;     /* integer: whole devices; (0,1): a share of one device */
  long memory_mb; /* host memory; 0 = no reservation */
};

struct alloc_grant {
  int trial_id;
  int ncpus;
  int cpus[ALLOC_MAX_CPUS];
  int cpu_shared;   /* 1: cpus[0] is shared with other fractional trials */
  double cpu_quota; /* the requested cpu amount (cgroup cpu.max) */
  int ngpus;
  int gpus[ALLOC_MAX_GPUS]; /* device ids as CUDA_VISIBLE_DEVICES wants them */
  double gpu_frac;          /* > 0 only for a fractional share of gpus[0] */
  long gpu_mem_mb;          /* memory cap on that device for a fractional share */
  long memory_mb;
};

struct alloc_cpu {
  int id;
  int owner;          /* trial holding it whole; 0 = none */
  double shared_used; /* sum of fractional shares placed on it */
};

struct alloc_gpu {
  int id;
  long mem_mb; /* device memory, for fractional caps */
  int owner;   /* trial holding it whole; 0 = none */
  double shared_used;
};

struct alloc_pool {
  int ncpus;
  struct alloc_cpu cpus[ALLOC_MAX_CPUS];
  int ngpus;
  struct alloc_gpu gpus[ALLOC_MAX_GPUS];
  long memory_mb;
  long memory_used;
};

/* What the lease request advertises as free: amounts any single new request
 * of that size is guaranteed to fit (not the sum of scattered fractions). */
struct alloc_free {
  double cpu;
  double gpu;
  long memory_mb;
};

/* gpu_mem_mb may be NULL (unknown sizes: fractional caps are then 0). */
int alloc_init(struct alloc_pool *pool, const int *cpu_ids, int ncpus, const int *gpu_ids,
               const long *gpu_mem_mb, int ngpus, long memory_mb);
/* 0 and a filled grant, -EINVAL for a malformed request (negative, NaN,
 * fractional above 1 for gpu), -ENOSPC when it does not fit now. */
int alloc_take(struct alloc_pool *pool, int trial_id, const struct alloc_req *req,
               struct alloc_grant *grant);
/* Would the request fit an empty pool? (Distinguishes "wait" from "never".) */
int alloc_could_ever_fit(const struct alloc_pool *pool, const struct alloc_req *req);
void alloc_release(struct alloc_pool *pool, const struct alloc_grant *grant);
void alloc_free_amounts(const struct alloc_pool *pool, struct alloc_free *out);
/* Number of CPU ids currently held by nobody (whole or shared). */
int alloc_idle_cpus(const struct alloc_pool *pool);

#endif
