/* Just enough of CUDA's execution model to run kernels/cuda_ops.cu on the
 * host: blocks one after another; the threads of a plain kernel one after
 * another; the threads of a kernel that uses __syncthreads as cooperative
 * ucontext coroutines that switch at each barrier, so shared memory and
 * barriers behave as on a GPU. Include after <cuda_runtime_api.h>. */
#ifndef CTUNE_EMU_CUDA_H
#define CTUNE_EMU_CUDA_H

#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "mock_cuda.h"

/* host_defines.h made these empty; shared memory must be one array per block */
#undef __global__
#undef __shared__
#undef __device__
#undef __host__
#define __global__ static
#define __shared__ static
#define __device__
#define __host__

struct emu_dim3 {
  unsigned x, y, z;
};
static emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
const unsigned kMaxThreads = 1024;
const size_t kStack = 64 * 1024;
static ucontext_t sched, ctx[kMaxThreads];
static char *stacks;
static bool done[kMaxThreads];
static unsigned current;
static bool cooperative;
static std::function<void()> *job;

static void trampoline() {
  (*job)();
  done[current] = true; /* then uc_link resumes the scheduler */
}

static void syncthreads() {
  if (!cooperative) {
    std::fprintf(stderr, "emu: __syncthreads in a kernel launched as plain\n");
    std::abort();
  }
  swapcontext(&ctx[current], &sched);
}

template <class F>
static void launch(unsigned grid, unsigned block, F body) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; b++) {
    blockIdx = {b, 0, 0};
    for (unsigned t = 0; t < block; t++) {
      threadIdx = {t, 0, 0};
      body();
    }
  }
}

template <class F>
static void launch_sync(unsigned grid, unsigned block, F body) {
  if (block > kMaxThreads) std::abort();
  if (!stacks && !(stacks = (char *)std::malloc(kMaxThreads * kStack)))
    std::abort();
  std::function<void()> f = body;
  job = &f;
  cooperative = true;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; b++) {
    blockIdx = {b, 0, 0};
    for (unsigned t = 0; t < block; t++) {
      getcontext(&ctx[t]);
      ctx[t].uc_stack.ss_sp = stacks + (size_t)t * kStack;
      ctx[t].uc_stack.ss_size = kStack;
      ctx[t].uc_link = &sched;
      makecontext(&ctx[t], trampoline, 0);
      done[t] = false;
    }
    /* each pass runs every thread up to its next barrier (or its end) */
    for (bool left = true; left;) {
      left = false;
      for (unsigned t = 0; t < block; t++) {
        if (done[t]) continue;
        current = t;
        threadIdx = {t, 0, 0};
        swapcontext(&sched, &ctx[t]);
        left = left || !done[t];
      }
    }
  }
  cooperative = false;
  job = nullptr;
}
}  // namespace emu

namespace emu {
static void run_queued(void *p) {
  auto *f = static_cast<std::function<void()> *>(p);
  (*f)();
  delete f;
}

static void *clone_queued(const void *p) {
  return new std::function<void()>(*static_cast<const std::function<void()> *>(p));
}
static void drop_queued(void *p) { delete static_cast<std::function<void()> *>(p); }

/* A launch is queued on its stream like any other work (mock_cuda.c), or
 * recorded into the graph a capturing stream builds. */
template <class F>
static void enqueue(cudaStream_t s, F f) {
  mock_cuda_enqueue_clone(s, run_queued, new std::function<void()>(f),
                          clone_queued, drop_queued);
}
}  // namespace emu

#define __syncthreads() emu::syncthreads()
#define CUOPS_LAUNCH(kernel, grid, stream, ...)                        \
  emu::enqueue((stream), [=]() {                                       \
    emu::launch((grid), CUOPS_THREADS, [&]() { kernel(__VA_ARGS__); }); \
  })
#define CUOPS_LAUNCH_SYNC(kernel, grid, stream, ...)                        \
  emu::enqueue((stream), [=]() {                                            \
    emu::launch_sync((grid), CUOPS_THREADS, [&]() { kernel(__VA_ARGS__); }); \
  })

#endif
