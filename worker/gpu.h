/* GPU discovery at run time: dlopen NVML or the CUDA driver when present, so
 * ctune-worker has no link dependency on either. */
#ifndef CTUNE_WORKER_GPU_H
#define CTUNE_WORKER_GPU_H

/* Fills up to cap device ids (0..n-1) and their memory in MiB. Returns the
 * count (0 when no driver or device is present). */
int gpu_detect(int *ids, long *mem_mb, int cap);

#endif
