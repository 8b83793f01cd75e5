/* Exec wrapper stage of a trial: affinity, rlimit, cgroup, then exec. */
#include "execwrap.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cpuset.h"

static int execwrap_fail(const char *what, const char *detail) {
  /* One JSON line like the trainer's, so the worker's failure report and the
   * trial log both say exactly what went wrong. */
  fprintf(stderr,
          "{\"error\": {\"code\": \"exec_failed\", \"message\": \"ctune-worker: %s%s%s\"}}\n",
          what, detail ? ": " : "", detail ? detail : "");
  return EXECWRAP_EXIT_EXEC;
}

static int execwrap_join_cgroup(const char *dir) {
  char path[4096], pid[32];
  if (snprintf(path, sizeof path, "%s/cgroup.procs", dir) >= (int)sizeof path) return -ENAMETOOLONG;
  int fd = open(path, O_WRONLY);
  if (fd < 0) return -errno;
  int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  int rc = write(fd, pid, (size_t)n) == n ? 0 : -errno;
  close(fd);
  return rc;
}

int execwrap_main(int argc, char **argv) {
  const char *cpus = NULL, *cgroup = NULL;
  long as_mb = 0, parent = 0;
  int i = 2;
  for (; i < argc; i++) {
    if (!strcmp(argv[i], "--")) { i++; break; }
    if (i + 1 >= argc) return execwrap_fail("--exec-trial: missing value for", argv[i]);
    if (!strcmp(argv[i], "--cpus")) cpus = argv[++i];
    else if (!strcmp(argv[i], "--rlimit-as-mb")) as_mb = atol(argv[++i]);
    else if (!strcmp(argv[i], "--cgroup")) cgroup = argv[++i];
    else if (!strcmp(argv[i], "--parent")) parent = atol(argv[++i]);
    else return execwrap_fail("--exec-trial: unknown option", argv[i]);
  }
  if (i >= argc) return execwrap_fail("--exec-trial: no program given", NULL);

  /* If the worker dies (kill -9, crash) the trial dies with it instead of
   * running on unsupervised while the server gives it to another worker.
   * The flag survives execve; the check after it closes the race with a
   * worker that died before the flag was set. */
  if (parent > 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
      return execwrap_fail("prctl(PR_SET_PDEATHSIG) failed", strerror(errno));
    if (getppid() != (pid_t)parent) return execwrap_fail("the worker is gone", NULL);
  }
  if (cgroup && execwrap_join_cgroup(cgroup) < 0)
    return execwrap_fail("cannot join cgroup", cgroup);
  if (cpus && *cpus) {
    int ids[CPUSET_MAX];
    int n = cpuset_parse(cpus, ids, CPUSET_MAX);
    if (n <= 0) return execwrap_fail("bad cpu list", cpus);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int k = 0; k < n; k++) CPU_SET(ids[k], &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      return execwrap_fail("sched_setaffinity failed", strerror(errno));
  }
  if (as_mb > 0) {
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = (rlim_t)as_mb * 1024 * 1024;
    if (setrlimit(RLIMIT_AS, &rl) != 0)
      return execwrap_fail("setrlimit(RLIMIT_AS) failed", strerror(errno));
  }
  execvp(argv[i], argv + i);
  char what[512];
  snprintf(what, sizeof what, "cannot run '%s'", argv[i]);
  return execwrap_fail(what, strerror(errno));
}
