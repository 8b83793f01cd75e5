/* cudaGetErrorName for the CUDA double (mock_cuda.c has the sentences): the
 * plugin's probe names the runtime's error code in its messages. */
#include <cuda_runtime_api.h>

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorNoDevice:
    return "cudaErrorNoDevice";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  default:
    return "cudaErrorUnknown";
  }
}
