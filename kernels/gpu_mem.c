/* The capped GPU allocator's bookkeeping (see gpu_mem.h): budgets, arena
 * carving and the out-of-memory message. No CUDA here. */
#include "gpu_mem.h"

#include <errno.h>
#include <stdio.h>

void gpu_mem_init(struct gpu_mem *m, int64_t limit_bytes) {
  m->limit = limit_bytes > 0 ? limit_bytes : 0;
  m->used = 0;
  m->peak = 0;
}

int gpu_mem_reserve(struct gpu_mem *m, int64_t bytes) {
  if (bytes < 0) return -EINVAL;
  if (m->limit > 0 && bytes > m->limit - m->used) return -ENOMEM;
  m->used += bytes;
  if (m->used > m->peak) m->peak = m->used;
  return 0;
}

void gpu_mem_release(struct gpu_mem *m, int64_t bytes) {
  m->used -= bytes;
  if (m->used < 0) m->used = 0;
}

int64_t gpu_mem_round(int64_t bytes) {
  return (bytes + GPU_MEM_ALIGN - 1) / GPU_MEM_ALIGN * GPU_MEM_ALIGN;
}

void gpu_arena_init(struct gpu_arena *a, uintptr_t base, int64_t size) {
  a->base = base;
  a->size = size;
  a->off = 0;
}

int gpu_arena_take(struct gpu_arena *a, int64_t bytes, uintptr_t *out) {
  if (bytes < 0) return -EINVAL;
  int64_t need = gpu_mem_round(bytes);
  if (need > a->size - a->off) return -ENOMEM;
  *out = a->base + (uintptr_t)a->off;
  a->off += need;
  return 0;
}

double gpu_mem_mib(int64_t bytes) {
  const int64_t mib = 1 << 20;
  return (double)((bytes + mib - 1) / mib);
}

void gpu_mem_oom_message(char *buf, size_t len, int batch_size, int64_t need_bytes,
                         int64_t limit_bytes, int64_t free_bytes) {
  if (limit_bytes > 0)
    snprintf(buf, len,
             "out of GPU memory at batch_size %d (needs ~%.0f MiB, limit %.0f "
             "MiB): try a smaller batch_size",
             batch_size, gpu_mem_mib(need_bytes), (double)(limit_bytes >> 20));
  else
    snprintf(buf, len,
             "out of GPU memory at batch_size %d (needs ~%.0f MiB, %.0f MiB "
             "free on the device): try a smaller batch_size",
             batch_size, gpu_mem_mib(need_bytes), (double)(free_bytes >> 20));
}
