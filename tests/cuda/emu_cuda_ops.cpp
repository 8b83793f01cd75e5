// The real kernels of kernels/cuda_ops.cu, compiled for the host and run
// under emu_cuda.h, so their index arithmetic, bounds and reductions are
// checked on machines without a GPU (device memory: the test double).
#include <cuda_runtime_api.h>

#include "emu_cuda.h"

#include "cuda_ops.cu"
