/* The capped GPU allocator's bookkeeping: a per-device byte budget and bump
 * carving of arenas. Pure C (no CUDA), so the accounting is unit-tested on
 * the CPU; kernels/cuda_backend.c does the cudaMalloc/cudaFree around it. */
#ifndef CTUNE_GPU_MEM_H
#define CTUNE_GPU_MEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every buffer carved from an arena starts on this boundary (cudaMalloc's own
 * alignment, and enough for float4 and cuBLAS). */
#define GPU_MEM_ALIGN 256

/* One device's budget. limit 0 means no cap. */
struct gpu_mem {
  int64_t limit; /* bytes */
  int64_t used;  /* bytes held now */
  int64_t peak;  /* most bytes ever held at once */
};

/* A block obtained in one allocation, handed out in aligned pieces. base is
 * the device address as an integer so this file never dereferences it. */
struct gpu_arena {
  uintptr_t base;
  int64_t size;
  int64_t off;
};

void gpu_mem_init(struct gpu_mem *m, int64_t limit_bytes);
/* Records bytes as held; -ENOMEM (and nothing recorded) when that would pass
 * the limit, -EINVAL for a negative size. */
int gpu_mem_reserve(struct gpu_mem *m, int64_t bytes);
/* Gives back bytes reserved earlier. */
void gpu_mem_release(struct gpu_mem *m, int64_t bytes);

/* bytes rounded up to GPU_MEM_ALIGN. */
int64_t gpu_mem_round(int64_t bytes);

void gpu_arena_init(struct gpu_arena *a, uintptr_t base, int64_t size);
/* Next aligned piece of bytes (0 allowed: a valid, empty piece); -ENOMEM when
 * the arena is exhausted, which means the plan that sized it was wrong. */
int gpu_arena_take(struct gpu_arena *a, int64_t bytes, uintptr_t *out);

/* The message a person sees on out-of-memory, e.g. "out of GPU memory at
 * batch_size 512 (needs ~300 MiB, limit 256 MiB): try a smaller batch_size".
 * limit_bytes 0 means "the device's free memory", given as free_bytes. */
void gpu_mem_oom_message(char *buf, size_t len, int batch_size, int64_t need_bytes,
                         int64_t limit_bytes, int64_t free_bytes);

/* Bytes as MiB (1 MiB = 2^20 bytes), rounded up, for messages and reports. */
double gpu_mem_mib(int64_t bytes);

#ifdef __cplusplus
}
#endif

#endif
