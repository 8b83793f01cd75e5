/* CUDA MPS for ctune-worker --mps (see gpu.h): the control daemon and what
 * a GPU trial's environment needs to use it. In the worker's core library,
 * since the trial argv/env builder (trainable.c) reads it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu.h"
#include "log.h"

/* ---- CUDA MPS (--mps) -------------------------------------------------
 * Several trials on one GPU run as separate processes. Without MPS the GPU
 * time-slices between their contexts (one context at a time, each switch
 * flushing the SMs); with MPS their kernels share the SMs at once through
 * one server. The worker starts the control daemon with its pipe and log
 * directories under the work dir (the pipes under /tmp when the work dir is
 * deep: sockets have a 108-byte path limit), or joins one already listening
 * there. */
static char mps_pipe[PATH_MAX], mps_log[PATH_MAX];

const char *gpu_mps_pipe_dir(void) { return mps_pipe[0] ? mps_pipe : NULL; }
const char *gpu_mps_log_dir(void) { return mps_log[0] ? mps_log : NULL; }

/* The program as PATH finds it, or -ENOENT. */
static int find_on_path(const char *name, char *out, size_t len) {
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/bin:/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    if (n > 0 && (size_t)snprintf(out, len, "%.*s/%s", (int)n, path, name) < len &&
        access(out, X_OK) == 0)
      return 0;
    path += n + (colon ? 1 : 0);
  }
  return -ENOENT;
}

/* Runs bin [arg] with text on its stdin (NULL: /dev/null) and output to the
 * log file; its exit status, or -errno. */
static int run_control(const char *bin, const char *arg, const char *text, const char *log_path) {
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int e = -errno;
    close(in[0]);
    close(in[1]);
    return e;
  }
  if (pid == 0) {
    dup2(in[0], 0);
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    if (arg)
      execl(bin, bin, arg, (char *)NULL);
    else
      execl(bin, bin, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  if (text) {
    ssize_t w = write(in[1], text, strlen(text));
    (void)w; /* a daemon that does not read its stdin answers by status */
  }
  close(in[1]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -errno;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int gpu_mps_pipe_path(const char *work_dir, unsigned uid, char *out, size_t len) {
  size_t n = (size_t)snprintf(out, len, "%s/mps/pipe", work_dir);
  if (n < len && n <= GPU_MPS_PIPE_MAX) return 0;
  /* FNV-1a over the work dir and the uid: the same worker finds its daemon
   * again, another user or work dir gets its own */
  unsigned long long h = 1469598103934665603ULL;
  for (const char *p = work_dir; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  for (int i = 0; i < 4; i++) h = (h ^ ((uid >> (8 * i)) & 0xff)) * 1099511628211ULL;
  return (size_t)snprintf(out, len, "/tmp/ctune-mps-%016llx", h) < len ? 0 : -ENAMETOOLONG;
}

/* A pipe directory outside the work dir lives in a shared /tmp: it must be
 * a real directory of ours, not one (or a link) someone else put there. */
static int pipe_dir_ours(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    return -EIO;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    snprintf(err, errlen,
             "MPS pipe directory %s exists but is not a directory owned by uid %u; remove it "
             "or use a shorter work dir",
             path, (unsigned)geteuid());
    return -EEXIST;
  }
  return 0;
}

int gpu_mps_start(const char *work_dir, char *err, size_t errlen) {
  char bin[PATH_MAX], dir[PATH_MAX], ctl_log[PATH_MAX], control[PATH_MAX];
  if (find_on_path("nvidia-cuda-mps-control", bin, sizeof bin) < 0) {
    snprintf(err, errlen,
             "nvidia-cuda-mps-control is not on PATH (it comes with the NVIDIA "
             "driver's utilities); without --mps, trials that share a GPU are "
             "time-sliced by the driver");
    return -ENOENT;
  }
  if ((size_t)snprintf(dir, sizeof dir, "%s/mps", work_dir) >= sizeof dir ||
      gpu_mps_pipe_path(work_dir, (unsigned)geteuid(), mps_pipe, sizeof mps_pipe) < 0 ||
      (size_t)snprintf(mps_log, sizeof mps_log, "%s/log", dir) >= sizeof mps_log ||
      (size_t)snprintf(ctl_log, sizeof ctl_log, "%s/worker-control.log", mps_log) >=
          sizeof ctl_log ||
      (size_t)snprintf(control, sizeof control, "%s/control", mps_pipe) >= sizeof control) {
    mps_pipe[0] = mps_log[0] = '\0';
    snprintf(err, errlen, "work dir path too long for the MPS directories");
    return -ENAMETOOLONG;
  }
  /* Trials (another user under --run-as too) connect to the pipes: 0755. */
  const char *dirs[] = {dir, mps_pipe, mps_log};
  for (int i = 0; i < 3; i++) {
    int rc = mkdir(dirs[i], 0755) != 0 && errno != EEXIST ? -EIO : 0;
    if (rc) snprintf(err, errlen, "cannot create %s: %s", dirs[i], strerror(errno));
    if (!rc && dirs[i] == mps_pipe) rc = pipe_dir_ours(mps_pipe, err, errlen);
    if (!rc && chmod(dirs[i], 0755) != 0) {
      snprintf(err, errlen, "cannot create %s: %s", dirs[i], strerror(errno));
      rc = -EIO;
    }
    if (rc) {
      mps_pipe[0] = mps_log[0] = '\0';
      return rc;
    }
  }
  /* The daemon and every client find each other through these. */
  setenv("CUDA_MPS_PIPE_DIRECTORY", mps_pipe, 1);
  setenv("CUDA_MPS_LOG_DIRECTORY", mps_log, 1);
  struct stat st;
  if (stat(control, &st) == 0 &&
      run_control(bin, NULL, "get_default_active_thread_percentage\n", ctl_log) == 0) {
    log_info("mps: joined the control daemon at %s", mps_pipe);
    return 0;
  }
  int rc = run_control(bin, "-d", NULL, ctl_log);
  if (rc != 0) {
    snprintf(err, errlen, "nvidia-cuda-mps-control -d failed (%s %d; its log: %s)",
             rc < 0 ? "error" : "exit status", rc < 0 ? -rc : rc, mps_log);
    mps_pipe[0] = mps_log[0] = '\0';
    return -EIO;
  }
  log_info("mps: started the control daemon (pipes %s, logs %s); stop it with "
           "'echo quit | CUDA_MPS_PIPE_DIRECTORY=%s nvidia-cuda-mps-control'",
           mps_pipe, mps_log, mps_pipe);
  return 0;
}

int gpu_mps_mem_limit(long mem_mb, char *out, size_t len) {
  if (!gpu_mps_pipe_dir() || mem_mb <= 0) return 0;
  /* the trial sees its one device as device 0 (CUDA_VISIBLE_DEVICES) */
  return (size_t)snprintf(out, len, "0=%ldM", mem_mb) < len ? 1 : -ENAMETOOLONG;
}
