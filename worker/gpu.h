/* GPU discovery at run time: dlopen NVML or the CUDA driver when present, so
 * ctune-worker has no link dependency on either. */
#ifndef CTUNE_WORKER_GPU_H
#define CTUNE_WORKER_GPU_H

#include <stddef.h>

/* Fills up to cap device ids (0..n-1) and their memory in MiB. Returns the
 * count (0 when no driver or device is present). */
int gpu_detect(int *ids, long *mem_mb, int cap);

/* --mps: starts the CUDA MPS control daemon (nvidia-cuda-mps-control -d)
 * with CUDA_MPS_PIPE_DIRECTORY (gpu_mps_pipe_path) and
 * CUDA_MPS_LOG_DIRECTORY=<work_dir>/mps/log, or joins the one already
 * answering there. -ENOENT (err says so) when the program is not on PATH. */
int gpu_mps_start(const char *work_dir, char *err, size_t errlen);
/* The MPS pipe directory for work_dir: <work_dir>/mps/pipe when it is at
 * most GPU_MPS_PIPE_MAX bytes (the daemon's sockets inside must fit the
 * 108-byte sun_path), else /tmp/ctune-mps-<hash of work_dir and uid>. 0, or
 * -ENAMETOOLONG. */
#define GPU_MPS_PIPE_MAX 64
int gpu_mps_pipe_path(const char *work_dir, unsigned uid, char *out, size_t len);
/* The directories a GPU trial must be given; NULL without --mps. */
const char *gpu_mps_pipe_dir(void);
const char *gpu_mps_log_dir(void);
/* With --mps and a share of mem_mb > 0: writes the trial's
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT value ("0=<mb>M") and returns 1; 0 when
 * there is none to set. */
int gpu_mps_mem_limit(long mem_mb, char *out, size_t len);

#endif
