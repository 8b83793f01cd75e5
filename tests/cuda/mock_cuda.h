/* Test double of the CUDA runtime, cuBLAS, NCCL and kernels/cuda_ops.h on
 * host memory, so the CUDA backend's orchestration (buffer carving, GEMM
 * shapes, layouts, sharding, all-reduce, streams, cleanup) runs on machines
 * without a GPU. It is strict where the real libraries are undefined: device
 * pointers must lie inside a live allocation of the current device, handles
 * and streams must belong to the current device, new memory is NaN-filled,
 * and queued work runs only when something must wait for it. */
#ifndef CTUNE_MOCK_CUDA_H
#define CTUNE_MOCK_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Devices the mock reports (default 2, or CTUNE_MOCK_GPUS). */
void mock_cuda_set_devices(int n);
/* The k-th call from now that can fail does fail (k >= 1); 0 turns failures
 * off. Frees, destroys, cudaSetDevice and ncclGroupEnd never fail here. */
void mock_cuda_fail_at(long k);
/* CTUNE_MOCK_FAIL=cublasCreate: cublasCreate always fails with
 * CUBLAS_STATUS_NOT_INITIALIZED (for ctune-train run as a process). */
/* Calls so far that could have failed (to size a fault-injection loop). */
long mock_cuda_calls(void);
/* Allocations, pinned blocks, streams, events, handles and communicators
 * still alive. */
long mock_cuda_live(void);
/* What the backend asked of the "GPU": submits counts every piece of work
 * handed to a stream from the host (a kernel launch, a cuBLAS call, a copy,
 * a memset, a wait; a graph launch counts once, not its calls), syncs every
 * host wait (stream, event or device synchronisation, a pageable download).
 * Calls recorded into a graph by stream capture count nothing; graph_nodes
 * counts the calls (kernels, cuBLAS calls, copies) that graph launches ran. */
struct mock_cuda_counts {
  long submits, graph_launches, syncs, graph_nodes;
};
void mock_cuda_get_counts(struct mock_cuda_counts *out);
/* A violated rule (out-of-range pointer, wrong device, a lone rank's
 * all-reduce, ...) aborts the test with a message. */

/* For the kernel doubles: count a call (nonzero: it must fail), check a
 * device range, check that a stream belongs to the current device. */
int mock_cuda_failing(void);
void mock_cuda_dev_range(const void *p, size_t bytes, const char *what);
void mock_cuda_on_stream(cudaStream_t s, const char *what);
/* Queues fn(arg) on stream s (NULL: runs it now); fn frees arg. */
void mock_cuda_enqueue(cudaStream_t s, void (*fn)(void *), void *arg);
/* As mock_cuda_enqueue for arguments not made by mock_cuda_args: clone
 * copies them for each launch of a graph that captured the call, destroy
 * frees a copy that never ran. */
void mock_cuda_enqueue_clone(cudaStream_t s, void (*fn)(void *), void *arg,
                             void *(*clone)(const void *), void (*destroy)(void *));
/* A heap copy of size bytes at src, for a queued call's arguments. */
void *mock_cuda_args(const void *src, size_t size);

#ifdef __cplusplus
}
#endif

#endif
