/* When a GPU test may skip. Only when the CUDA runtime itself says there is
 * no device (cudaErrorNoDevice, zero devices, or no driver installed at all,
 * which the runtime reports as an insufficient driver): any other error is
 * printed with the runtime's own name and sentence and fails the test, so a
 * broken GPU (driver too old, fabric manager not ready, exclusive-process
 * mode) is never reported as "no device". Skipping turns into failing when
 * CTUNE_REQUIRE_GPU=1 or `nvidia-smi -L` lists a GPU. */
#ifndef CTUNE_GPU_SKIP_H
#define CTUNE_GPU_SKIP_H

#include <stddef.h>

#define GPU_RUN 0
#define GPU_FAIL 1
#define GPU_SKIP 77

/* The pure decision. err/err_name/err_text: what cudaGetDeviceCount
 * returned (err 0: success); no_device: err is cudaErrorNoDevice;
 * insufficient_driver: err is cudaErrorInsufficientDriver; driver_present:
 * libcuda.so.1 loads; require: CTUNE_REQUIRE_GPU=1 or nvidia-smi lists a GPU.
 * Writes the line to print into msg. */
int gpu_skip_decide(int err, const char *err_name, const char *err_text, int no_device,
                    int insufficient_driver, int driver_present, int count, int need, int require,
                    char *msg, size_t len);

/* Asks the runtime and the machine, prints the verdict's line, returns
 * GPU_RUN, GPU_SKIP (exit 77) or GPU_FAIL (exit 1). need: devices the test
 * needs (fewer but at least one visible is a skip: a smaller machine). */
int gpu_test_gate(int need);

#endif
