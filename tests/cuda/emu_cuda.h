/* Just enough of CUDA's execution model to run kernels/cuda_ops.cu on the
 * host: blocks one after another; the threads of a plain kernel one after
 * another; the threads of a kernel that uses __syncthreads as cooperative
 * coroutines that switch at each barrier, so shared memory and barriers
 * behave as on a GPU. Include after <cuda_runtime_api.h>.
 *
 * A block of 256 threads with 9 barriers is some 5,000 switches, and a
 * training step runs dozens of such blocks. swapcontext() makes a
 * sigprocmask system call at every switch (and getcontext() at every
 * thread's start), which was nine tenths of the emulated tests' time; on
 * x86-64 the coroutines switch with the few instructions below instead
 * (callee-saved registers and the stack pointer: the signal mask never
 * changes here). Elsewhere, or where a shadow stack is on (a bare stack
 * switch would break it), ucontext as before; CTUNE_EMU_UCONTEXT=1 forces
 * it, to compare. */
#ifndef CTUNE_EMU_CUDA_H
#define CTUNE_EMU_CUDA_H

#include <ucontext.h>

#include <cstdint>
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

#if defined(__x86_64__) && defined(__linux__)
/* Saves the callee-saved registers on the current stack, stores the stack
 * pointer in *save, and resumes the coroutine whose stack pointer is to
 * (which returns from its own call of this, or starts: emu::fresh_stack).
 * MXCSR and the x87 control word are callee-saved too, but no kernel
 * changes them, so they are left alone. */
extern "C" void ctune_emu_switch(void **save, void *to);
asm(".text\n"
    ".p2align 4\n"
    ".hidden ctune_emu_switch\n"
    ".globl ctune_emu_switch\n"
    ".type ctune_emu_switch,@function\n"
    "ctune_emu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size ctune_emu_switch, .-ctune_emu_switch\n");
#define EMU_FAST_SWITCH 1
#else
#define EMU_FAST_SWITCH 0
#endif

namespace emu {
const unsigned kMaxThreads = 1024;
const size_t kStack = 64 * 1024;
static ucontext_t sched, ctx[kMaxThreads];
static char *stacks;
static bool done[kMaxThreads];
static unsigned current;
static bool cooperative;
static int fast = -1; /* the switch above in use (decided at first launch) */
static std::function<void()> *job;

static void trampoline() {
  (*job)();
  done[current] = true; /* then uc_link resumes the scheduler */
}

#if EMU_FAST_SWITCH
static void *sched_sp, *sp[kMaxThreads]; /* where each coroutine stopped */

static bool shadow_stack_on() {
  unsigned long long ssp = 0;
  /* rdsspq is a no-op (ssp stays 0) unless a shadow stack is active */
  asm volatile(".byte 0xf3, 0x48, 0x0f, 0x1e, 0xc8" /* rdsspq %rax */
               : "+a"(ssp));
  return ssp != 0;
}

[[noreturn]] static void fast_entry() {
  (*job)();
  done[current] = true;
  void *dead;
  ctune_emu_switch(&dead, sched_sp); /* never resumed */
  std::abort();
}

/* A stack that ctune_emu_switch "returns" into fast_entry from: six zero
 * registers, then fast_entry as the return address, then a zero return
 * address for fast_entry itself, which leaves the stack aligned as at any
 * function's entry. Each thread's top sits a cache line further down its
 * stack than the last one's (mod 16 KiB): tops a power of two apart all
 * fall in the same cache set and evict each other at every switch. */
static void *fresh_stack(char *base, unsigned t) {
  uintptr_t top = (uintptr_t)(base + kStack - (t * 64u) % 16384u) & ~(uintptr_t)15;
  void **p = (void **)top;
  *--p = nullptr;
  *--p = (void *)fast_entry;
  for (int i = 0; i < 6; i++) *--p = nullptr;
  return p;
}
#endif

/* (apart: getcontext returns twice, which would pin launch_sync's locals) */
__attribute__((noinline)) static void start_ucontext(unsigned t, char *stack) {
  getcontext(&ctx[t]);
  ctx[t].uc_stack.ss_sp = stack;
  ctx[t].uc_stack.ss_size = kStack;
  ctx[t].uc_link = &sched;
  makecontext(&ctx[t], trampoline, 0);
}

static bool use_fast() {
  if (fast < 0) {
    const char *u = std::getenv("CTUNE_EMU_UCONTEXT");
    fast = EMU_FAST_SWITCH && !(u && *u && *u != '0');
#if EMU_FAST_SWITCH
    if (fast && shadow_stack_on()) fast = 0;
#endif
  }
  return fast == 1;
}

static void syncthreads() {
  if (!cooperative) {
    std::fprintf(stderr, "emu: __syncthreads in a kernel launched as plain\n");
    std::abort();
  }
#if EMU_FAST_SWITCH
  if (fast == 1) {
    ctune_emu_switch(&sp[current], sched_sp);
    return;
  }
#endif
  swapcontext(&ctx[current], &sched);
}

template <class F> static void launch(unsigned grid, unsigned block, F body) {
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

template <class F> static void launch_sync(unsigned grid, unsigned block, F body) {
  if (block > kMaxThreads) std::abort();
  if (!stacks && !(stacks = (char *)std::malloc(kMaxThreads * kStack))) std::abort();
  const bool quick = use_fast();
  (void)quick; /* (without the switch above) */
  std::function<void()> f = body;
  job = &f;
  cooperative = true;
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; b++) {
    blockIdx = {b, 0, 0};
    for (unsigned t = 0; t < block; t++) {
      char *stack = stacks + (size_t)t * kStack;
      done[t] = false;
#if EMU_FAST_SWITCH
      if (quick) {
        sp[t] = fresh_stack(stack, t);
        continue;
      }
#endif
      start_ucontext(t, stack);
    }
    /* each pass runs every thread up to its next barrier (or its end) */
    for (bool left = true; left;) {
      left = false;
      for (unsigned t = 0; t < block; t++) {
        if (done[t]) continue;
        current = t;
        threadIdx = {t, 0, 0};
#if EMU_FAST_SWITCH
        if (quick)
          ctune_emu_switch(&sched_sp, sp[t]);
        else
#endif
          swapcontext(&sched, &ctx[t]);
        left = left || !done[t];
      }
    }
  }
  cooperative = false;
  job = nullptr;
}
} // namespace emu

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
template <class F> static void enqueue(cudaStream_t s, F f) {
  mock_cuda_enqueue_clone(s, run_queued, new std::function<void()>(f), clone_queued, drop_queued);
}
} // namespace emu

#define __syncthreads() emu::syncthreads()
/* Blocks run one after another here: memory is always coherent and an
 * atomic is a plain read-modify-write. */
#define __threadfence() ((void)0)
static unsigned atomicAdd(unsigned *p, unsigned v) {
  unsigned old = *p;
  *p = old + v;
  return old;
}
#define CUOPS_LAUNCH(kernel, grid, stream, ...)                                                    \
  emu::enqueue((stream),                                                                           \
               [=]() { emu::launch((grid), CUOPS_THREADS, [&]() { kernel(__VA_ARGS__); }); })
#define CUOPS_LAUNCH_SYNC(kernel, grid, stream, ...)                                               \
  emu::enqueue((stream),                                                                           \
               [=]() { emu::launch_sync((grid), CUOPS_THREADS, [&]() { kernel(__VA_ARGS__); }); })

#endif
