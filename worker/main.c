/* ctune-worker: command line, resource discovery, signals, and the loop. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include <uv.h>

#include "cgroup.h"
#include "cpuset.h"
#include "execwrap.h"
#include "http.h"
#include "gpu.h"
#include "isolate.h"
#include "log.h"
#include "sdnotify.h"
#include "spawner.h"
#include "supervise.h"
#include "sysres.h"
#include "preempt.h"
#include "preempt_watch.h"
#include "workdir.h"
#include "worker.h"

static const char usage[] =
    "usage: ctune-worker --server URL [options]\n"
    "  --server URL         ctune-server base URL (e.g. http://127.0.0.1:8470)\n"
    "  --token-file F       send the token in F as 'Authorization: Bearer'\n"
    "  --ca-file F          PEM CA bundle that verifies an https:// server (default: the\n"
    "                       system store); https is always verified, never skipped\n"
    "  --cpus N             a COUNT: offer N CPUs, picked from this process's affinity\n"
    "                       mask, unclaimed ones first (default: the mask, capped by\n"
    "                       the cgroup CPU quota rounded down)\n"
    "  --cpu-list LIST      a LIST of CPU ids to offer, e.g. 0-3,6 (--cpu-list 0 is CPU 0)\n"
    "  --exclusive-cpus     refuse to start when a chosen CPU is already claimed by\n"
    "                       another ctune-worker (default: warn, naming the CPUs shared);\n"
    "                       claims are files in <run dir>/cpu; run dir: $CTUNE_RUN_DIR,\n"
    "                       else systemd's $RUNTIME_DIRECTORY, else /run/ctune as root,\n"
    "                       else $XDG_RUNTIME_DIR/ctune, else /tmp/ctune-<uid>\n"
    "  --gpus LIST|N        GPU ids or count (default: the devices of an inherited\n"
    "                       CUDA_VISIBLE_DEVICES, else all detected via NVML/libcuda)\n"
    "  --gpu-mem-mb N       memory per GPU given with --gpus (default 16384)\n"
    "  --mps                start or join a CUDA MPS daemon (pipes and logs under the\n"
    "                       work dir) so trials sharing a GPU run at once, each capped\n"
    "                       at its share (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)\n"
    "  --memory-mb N        host memory to offer (default: MemTotal, capped by the\n"
    "                       cgroup memory limit)\n"
    "  --work-dir D         trial dirs and the outbox (default ./ctune-worker.<name>)\n"
    "  --hide PATH          also hide this file or dir from trials (repeatable; the\n"
    "                       work dir and the --token-file are always hidden)\n"
    "  --name NAME          worker name (default: host name)\n"
    "  --train-bin PATH     ctune-train (default: next to ctune-worker)\n"
    "  --poll-ms N          lease poll interval when idle (default 1000)\n"
    "  --stop-grace-s N     SIGTERM to SIGKILL grace for trials (default 10)\n"
    "  --preemption-grace-s N  SIGTERM is a preemption notice: the machine goes in N s;\n"
    "                       trials checkpoint and every lease is released as\n"
    "                       preempted within N s (without it SIGTERM is a clean drain)\n"
    "  --preemption-notice CMD  poll CMD (run by /bin/sh -c; exit 0 with an output\n"
    "                       other than empty, FALSE or 0 is a notice), or\n"
    "                       file:PATH (a notice once PATH exists); grace as above,\n"
    "                       default 30 s\n"
    "  --preemption-poll-ms N  how often the notice is polled (default 5000)\n"
    "  --spot               register as a spot worker (labels {\"spot\": true}): trials\n"
    "                       at a promotion rung go to other workers first\n"
    "  --max-queued N       results kept while the server is away (default 100000)\n"
    "  --outbox-stall-s N   fail a trial whose results cannot be written (disk full)\n"
    "                       for N s (default 300; 0: wait for ever)\n"
    "  --keep-trial-dirs N  dirs (logs, checkpoint) of ended trials kept in the work\n"
    "                       dir, the most recent first (default 20); older ones are\n"
    "                       removed once their messages are delivered\n"
    "  --no-cgroup          do not use cgroup v2 even when it is delegated\n"
    "  --advertise-addr A   where other workers reach this one's gang trials\n"
    "                       (MASTER_ADDR; default: the address it reaches the\n"
    "                       server from)\n"
    "  --run-as USER        run trials as this unprivileged user (the worker must be\n"
    "                       root; it keeps its own user); trial dirs and logs are\n"
    "                       then that user's. A root worker without it warns\n"
    "  --trainables KINDS   trainables this worker runs: builtin, command or all\n"
    "                       (default all); a leased trial of another kind fails at\n"
    "                       once with reason bad_config\n"
    "  --allow-command LIST command trainables may run only these programs\n"
    "                       (comma list of absolute paths, e.g. /usr/bin/python3)\n"
    "  --pass-env NAMES     also pass these variables of the worker's environment\n"
    "                       to trials (comma list, e.g. LD_LIBRARY_PATH); trials\n"
    "                       otherwise get only PATH, HOME, USER, LOGNAME, LANG,\n"
    "                       LANGUAGE, LC_*, TZ, TMPDIR, CTUNE_LOG_LEVEL and\n"
    "                       CUDA_DEVICE_ORDER of it (never CTUNE_TOKEN)\n"
    "  --version, --help\n";

static struct worker *g_worker;
static int g_sigterm_preempts; /* --preemption-grace-s: SIGTERM is a preemption notice */

static void on_signal(uv_signal_t *h, int sig) {
  (void)h;
  log_info("got %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  sdnotify("STOPPING=1");
  if (g_worker && sig == SIGTERM && g_sigterm_preempts)
    worker_preempt(g_worker, "SIGTERM");
  else if (g_worker)
    worker_drain(g_worker);
}

static void on_preempt_notice(void *arg, const char *what) {
  (void)arg;
  sdnotify("STOPPING=1");
  if (g_worker) worker_preempt(g_worker, what);
}

/* Two workers on one work dir would share its outbox and trial dirs and lose
 * messages. An flock on <work dir>/worker.lock, held for the worker's life
 * (the kernel drops it when the process dies, kill -9 included), keeps the
 * second one out; the file holds the holder's pid for the error message.
 * Returns the fd to keep open, or -1 after printing why. */
static int lock_work_dir(const char *dir) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/worker.lock", dir);
  /* O_CLOEXEC: trials and their supervisors must not inherit the lock. */
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    fprintf(stderr, "ctune-worker: --work-dir %s: cannot open %s: %s\n", dir, path,
            strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char pid[32] = "";
    ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    pid[n > 0 ? n : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    if (e == EWOULDBLOCK)
      fprintf(stderr,
              "ctune-worker: --work-dir %s is in use by another ctune-worker (pid %s); "
              "workers must not share a work dir: give each its own --work-dir\n",
              dir, pid[0] ? pid : "unknown");
    else
      fprintf(stderr, "ctune-worker: --work-dir %s: cannot lock %s: %s\n", dir, path, strerror(e));
    close(fd);
    return -1;
  }
  if (fchmod(fd, 0600) != 0) { /* an older worker's 0644 lock: harmless */
  }
  char me[32];
  int n = snprintf(me, sizeof me, "%d\n", (int)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)n, 0) != n)
    fprintf(stderr, "ctune-worker: --work-dir %s: cannot write my pid into %s: %s\n", dir, path,
            strerror(errno));
  return fd;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi) {
    fprintf(stderr, "ctune-worker: %s: '%s' is not an integer in [%ld, %ld]\n", flag, v, lo, hi);
    return -EINVAL;
  }
  *out = x;
  return 0;
}

/* Which CPUs the worker offers, decided before it claims them: the
 * candidates (the affinity mask, or --cpu-list), how many to take, and
 * where that figure came from (logged). */
struct cpu_plan {
  int cand[CPUSET_MAX];
  int ncand;
  int want;
  int exact; /* --cpu-list: exactly the candidates */
  char why[4096];
};

static int plan_cpus(const char *count_arg, const char *list_arg, struct cpu_plan *pl) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed[CPUSET_MAX], na = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int i = 0; i < CPUSET_MAX && i < CPU_SETSIZE; i++)
      if (CPU_ISSET(i, &set)) allowed[na++] = i;
  char mask[2048] = "?";
  cpuset_format(allowed, na, mask, sizeof mask);
  memset(pl, 0, sizeof *pl);
  if (count_arg && list_arg) {
    fprintf(stderr, "ctune-worker: give --cpus N (a count) or --cpu-list LIST (CPU ids), "
                    "not both\n");
    return -EINVAL;
  }
  if (list_arg) {
    int n = cpuset_parse(list_arg, pl->cand, ALLOC_MAX_CPUS);
    if (n <= 0) {
      fprintf(stderr,
              "ctune-worker: --cpu-list '%s': expected CPU ids like 0-3,6 (at most "
              "%d)\n",
              list_arg, ALLOC_MAX_CPUS);
      return -EINVAL;
    }
    for (int i = 0; i < n; i++)
      if (!CPU_ISSET(pl->cand[i], &set)) {
        fprintf(stderr,
                "ctune-worker: --cpu-list: CPU %d is not in this process's affinity "
                "mask (%s)\n",
                pl->cand[i], mask);
        return -EINVAL;
      }
    pl->ncand = pl->want = n;
    pl->exact = 1;
    snprintf(pl->why, sizeof pl->why, "--cpu-list %s", list_arg);
    return 0;
  }
  memcpy(pl->cand, allowed, (size_t)na * sizeof *allowed);
  pl->ncand = na;
  if (count_arg) {
    /* The old --cpus took a list too; say where that went. */
    if (strpbrk(count_arg, ",-")) {
      fprintf(stderr,
              "ctune-worker: --cpus '%s': --cpus takes a count of CPUs (e.g. --cpus "
              "2); for CPU ids use --cpu-list %s\n",
              count_arg, count_arg);
      return -EINVAL;
    }
    long n;
    if (parse_long("--cpus", count_arg, 1, ALLOC_MAX_CPUS, &n) < 0) return -EINVAL;
    if (n > na) {
      fprintf(stderr,
              "ctune-worker: --cpus %ld: only %d CPUs are allowed to this process "
              "(affinity mask %s)\n",
              n, na, mask);
      return -EINVAL;
    }
    pl->want = (int)n;
    snprintf(pl->why, sizeof pl->why, "--cpus %ld, from the affinity mask %s", n, mask);
    return 0;
  }
  pl->want = na > ALLOC_MAX_CPUS ? ALLOC_MAX_CPUS : na;
  double quota = 0;
  char where[900];
  if (sysres_cpu_quota(NULL, &quota, where, sizeof where) == 1 &&
      sysres_quota_cpus(quota) < pl->want) {
    pl->want = sysres_quota_cpus(quota);
    snprintf(pl->why, sizeof pl->why,
             "affinity mask %s (%d CPUs) capped by the CPU quota "
             "%.2f of %s, rounded down",
             mask, na, quota, where);
  } else {
    snprintf(pl->why, sizeof pl->why, "affinity mask %s%s", mask,
             quota > 0 ? " (the cgroup CPU quota is not lower)" : ", no cgroup CPU quota");
  }
  return 0;
}

/* Claims the planned CPUs (sysres.h) so that two workers on one machine do
 * not silently share a core. Returns the count, or -1 after saying why. */
static int claim_cpus(const struct cpu_plan *pl, const char *name, int exclusive,
                      struct sysres_claim *claim, int *ids) {
  char dir[PATH_MAX];
  int rc = sysres_run_dir(dir, sizeof dir);
  if (rc == 0) rc = sysres_claim_cpus(dir, name, pl->cand, pl->ncand, pl->want, pl->exact, claim);
  if (rc < 0) {
    if (exclusive) {
      fprintf(stderr, "ctune-worker: --exclusive-cpus: cannot claim CPUs in %s/cpu: %s\n", dir,
              strerror(-rc));
      return -1;
    }
    log_warn("cannot claim CPUs in %s/cpu (%s): other ctune-workers on this machine cannot "
             "see which CPUs this one uses",
             dir, strerror(-rc));
    memset(claim, 0, sizeof *claim);
    for (int i = 0; i < pl->want; i++) claim->ids[claim->n++] = pl->cand[i];
  }
  char list[2048] = "", shared[2048] = "";
  cpuset_format(claim->ids, claim->n, list, sizeof list);
  cpuset_format(claim->shared, claim->nshared, shared, sizeof shared);
  if (claim->nshared > 0) {
    if (exclusive) {
      fprintf(stderr,
              "ctune-worker: --exclusive-cpus: CPU(s) %s already claimed by another "
              "ctune-worker on this machine (%s); %s\n",
              shared, claim->holders,
              pl->exact ? "choose other ids with --cpu-list"
                        : "no unclaimed CPU is left in this worker's affinity mask");
      sysres_release(claim);
      return -1;
    }
    log_warn("CPU(s) %s already claimed by another ctune-worker on this machine (%s): this "
             "worker SHARES them, %s; give --exclusive-cpus to refuse instead",
             shared, claim->holders,
             pl->exact ? "as --cpu-list asked" : "no unclaimed CPU is left in its affinity mask");
  }
  if (rc == 0) log_info("cpu: claimed CPU(s) %s in %s/cpu", list, dir);
  memcpy(ids, claim->ids, (size_t)claim->n * sizeof *ids);
  return claim->n;
}

/* Without --memory-mb: MemTotal, capped by the cgroup memory limit. */
static long detect_memory_mb(char *why, size_t len) {
  unsigned long long total = 0, lim = 0;
  char where[900];
  if (sysres_mem_total(NULL, &total) < 0) {
    struct sysinfo si;
    if (sysinfo(&si) == 0) total = (unsigned long long)si.totalram * si.mem_unit;
  }
  if (sysres_memory_limit(NULL, &lim, where, sizeof where) == 1 && lim < total) {
    snprintf(why, len, "the memory limit of %s (MemTotal %llu MiB)", where, total >> 20);
    return (long)(lim >> 20);
  }
  snprintf(why, len, "MemTotal%s",
           lim ? " (the cgroup memory limit is not lower)" : ", no cgroup memory limit");
  return (long)(total >> 20);
}

static int pick_gpus(const char *arg, long mem, int *ids, long *mem_mb, int cap) {
  int n;
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (!arg && cvd) {
    /* What a parent (Slurm, a container runtime, a user) allowed: those
     * devices only. Trials get the same indices back in their own
     * CUDA_VISIBLE_DEVICES; sizes come from NVML when it knows the index. */
    int all[ALLOC_MAX_GPUS];
    long all_mem[ALLOC_MAX_GPUS];
    char bad[128];
    int na = gpu_detect(all, all_mem, ALLOC_MAX_GPUS);
    n = sysres_cuda_visible(cvd, ids, cap, bad, sizeof bad);
    for (int i = 0; i < n; i++) {
      mem_mb[i] = mem;
      for (int j = 0; j < na; j++)
        if (all[j] == ids[i]) mem_mb[i] = all_mem[j];
    }
    if (bad[0])
      log_warn("CUDA_VISIBLE_DEVICES=%s: '%s' is not a device index (UUIDs are not supported "
               "here): only the %d device(s) before it are offered; give --gpus to say which",
               cvd, bad, n);
    log_info("gpu: %d (the inherited CUDA_VISIBLE_DEVICES=%s)", n, cvd);
    return n;
  }
  if (!arg) {
    n = gpu_detect(ids, mem_mb, cap);
    log_info("gpu: %d (every device NVML/libcuda reports; CUDA_VISIBLE_DEVICES is not set)", n);
    return n;
  }
  if (!strpbrk(arg, ",-")) {
    long c;
    if (parse_long("--gpus", arg, 0, cap, &c) < 0) return -EINVAL;
    for (n = 0; n < c; n++) ids[n] = n;
  } else if ((n = cpuset_parse(arg, ids, cap)) <= 0) {
    fprintf(stderr, "ctune-worker: --gpus '%s': expected a count or a list like 0,1\n", arg);
    return -EINVAL;
  }
  for (int i = 0; i < n; i++) mem_mb[i] = mem;
  return n;
}

/* The file holds the token itself, or ctune-server's "worker=TOKEN" line. */
static char *read_token(const char *file) {
  FILE *f = fopen(file, "r");
  if (!f) {
    fprintf(stderr, "ctune-worker: --token-file %s: %s\n", file, strerror(errno));
    return NULL;
  }
  char line[4096], first[4096] = "", *found = NULL;
  while (fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
      line[--n] = '\0';
    if (!n) continue;
    if (!strncmp(line, "worker=", 7)) {
      found = strdup(line + 7);
      break;
    }
    if (!first[0]) memcpy(first, line, n + 1);
  }
  fclose(f);
  if (!found && first[0] && !strchr(first, '=')) found = strdup(first);
  if (!found)
    fprintf(stderr,
            "ctune-worker: --token-file %s holds no token (a bare token or a "
            "worker=TOKEN line)\n",
            file);
  return found;
}

/* --hide paths, besides the work dir and the token file (isolate.h). */
#define MAIN_MAX_HIDE (ISOLATE_MAX_VIEW - 2)

/* Whether a trial's private view (supervise_private_view) can be made here,
 * made as a trial makes it: in a child, as the --run-as user for a user
 * namespace. 0, or -1 with why. */
static int probe_view(const struct isolate *iso, int ns, char *why, size_t len) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return snprintf(why, len, "pipe: %s", strerror(errno)), -1;
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, len, "fork: %s", strerror(errno));
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    char err[600] = "";
    int rc = 0;
    /* Not the worker's own cwd, which the --run-as user may not enter: a
     * trial runs in its own dir (the probe, where any user may be). */
    if (chdir("/") != 0) rc = -errno, snprintf(err, sizeof err, "chdir /: %s", strerror(errno));
    if (rc == 0 && ns == SUPERVISE_NS_USER && iso->run_as &&
        (setgroups((size_t)iso->ngroups, iso->groups) != 0 || setgid(iso->gid) != 0 ||
         setuid(iso->uid) != 0))
      rc = -errno, snprintf(err, sizeof err, "cannot become %s: %s", iso->user, strerror(errno));
    struct supervise_view v = {.ns = ns, .nhide = iso->nhide, .nshow = iso->nshow};
    for (int i = 0; i < iso->nhide; i++) v.hide[i] = iso->hide[i];
    for (int i = 0; i < iso->nshow; i++) v.show[i] = iso->show[i];
    if (rc == 0) rc = supervise_private_view(&v, err, sizeof err);
    if (rc < 0 && write(fds[1], err, strlen(err)) < 0) _exit(1);
    _exit(rc < 0 ? 1 : 0);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t k;
  while (n + 1 < len && ((k = read(fds[0], why + n, len - 1 - n)) > 0 || (k < 0 && errno == EINTR)))
    if (k > 0) n += (size_t)k;
  if (len) why[n] = '\0';
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  if (!n) snprintf(why, len, "the probe failed (wait status %d)", st);
  return -1;
}

/* What a trial must not read, what it needs under that, and how its view is
 * made here (isolate.h, supervise.h); said once, loudly when it cannot be. */
static int setup_trial_view(struct isolate *iso, const char *work_dir, const char *token_file,
                            const char *const *hides, int nhides) {
  char cache[PATH_MAX + 16];
  int rc = isolate_add_view(iso, 0, work_dir);
  if (rc == 0 && token_file) rc = isolate_add_view(iso, 0, token_file);
  for (int i = 0; i < nhides && rc == 0; i++) rc = isolate_add_view(iso, 0, hides[i]);
  /* ctune-train's data cache is shared by the trials (trainer/datacache.h):
   * made now, so that it can be shown to them. */
  snprintf(cache, sizeof cache, "%s/cache", work_dir);
  if (mkdir(cache, 0700) == 0) isolate_chown(iso, -1, cache);
  if (rc == 0) rc = isolate_add_view(iso, 1, cache);
  if (rc < 0) return rc;
  char why[700] = "", why2[700] = "";
  iso->ns = SUPERVISE_NS_NONE;
  if ((geteuid() != 0 || iso->run_as) && probe_view(iso, SUPERVISE_NS_USER, why, sizeof why) == 0)
    iso->ns = SUPERVISE_NS_USER;
  else if (geteuid() == 0 && probe_view(iso, SUPERVISE_NS_MOUNT, why2, sizeof why2) == 0)
    iso->ns = SUPERVISE_NS_MOUNT;
  if (iso->ns == SUPERVISE_NS_USER)
    log_info("trials see only their own dir of %s (a user and mount namespace each): not this "
             "worker's identity, outbox, lock or token file, nor other trials' dirs",
             work_dir);
  else if (iso->ns == SUPERVISE_NS_MOUNT)
    log_info("trials see only their own dir of %s (a mount namespace each, made as root%s%s)",
             work_dir, why[0] ? "; no user namespace: " : "", why);
  else
    log_error("TRIALS CAN ACT AS THIS WORKER: no private view of the files can be made for "
              "them (%s%s%s): every trial can read this worker's identity (its secret) in %s, "
              "its outbox and token file and other trials' dirs, and with the secret send "
              "results, checkpoints and ends for every trial this worker runs. Allow "
              "unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and "
              "kernel.unprivileged_userns_clone=1 or the AppArmor userns rule where the "
              "distribution has them), or run the worker as root with --run-as USER",
              why[0] ? why : why2, why[0] && why2[0] ? "; as root: " : "", why[0] ? why2 : "",
              work_dir);
  return 0;
}

/* --run-as: the user must reach <work dir>/trials/<id> (every parent of the
 * work dir searchable by it). Checked once at start, as that user, so a
 * misconfigured worker says so instead of failing every trial. */
static int check_run_as_reach(const struct isolate *iso, const char *dir) {
  pid_t pid = fork();
  if (pid < 0) return 0; /* cannot check: the trials will say it */
  if (pid == 0) {
    if (setgroups((size_t)iso->ngroups, iso->groups) != 0 || setgid(iso->gid) != 0 ||
        setuid(iso->uid) != 0)
      _exit(2);
    _exit(access(dir, X_OK) == 0 ? 0 : 1);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], EXECWRAP_FLAG)) return execwrap_main(argc, argv, 2);
  log_set_program("ctune-worker");
  /* A SIGTERM or SIGINT before the loop's handlers exist (while the worker
   * claims CPUs, probes the trial view, sweeps cgroups) waits, blocked, for
   * them instead of killing a worker that owns a claim and a work dir: the
   * drain that follows is the one any SIGTERM gets. */
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, NULL);

  static struct worker_opts o;
  const char *cpus_arg = NULL, *cpu_list_arg = NULL, *gpus_arg = NULL, *token_file = NULL;
  int exclusive_cpus = 0;
  static struct cpu_plan cpu_plan;
  static struct sysres_claim cpu_claim;
  int use_cgroup = 1;
  const char *run_as = NULL, *trainables_arg = NULL, *allow_arg = NULL, *pass_arg = NULL;
  /* Whatever the worker creates (outbox, lock, trial dirs and logs, and the
   * files trials create) is private unless made otherwise on purpose. */
  umask(077);
  long gpu_mem = 16384, v;
  char host[256] = "worker";
  gethostname(host, sizeof host - 1);
  o.name = host;
  o.poll_ms = 1000;
  o.stop_grace_ms = 10000;
  o.max_queued = 100000;
  o.keep_trial_dirs = WORKDIR_KEEP_ENDED;
  o.outbox_stall_ms = 300000;
  o.memory_mb = -1; /* detected after the options unless --memory-mb */

  enum {
    O_SERVER = 1,
    O_TOKEN,
    O_CPUS,
    O_GPUS,
    O_GPUMEM,
    O_MEM,
    O_WORK,
    O_NAME,
    O_TRAIN,
    O_POLL,
    O_GRACE,
    O_QUEUE,
    O_STALL,
    O_KEEP,
    O_ADVERTISE,
    O_NOCG,
    O_VERSION,
    O_HELP,
    O_RUNAS,
    O_TRAINABLES,
    O_ALLOWCMD,
    O_PASSENV,
    O_CAFILE,
    O_MPS,
    O_CPULIST,
    O_EXCLCPUS,
    O_HIDE,
    O_PGRACE,
    O_PNOTICE,
    O_PPOLL,
    O_SPOT
  };
  const char *notice_spec = NULL;
  long notice_poll_ms = PREEMPT_DEFAULT_POLL_MS;
  int use_mps = 0;
  const char *hides[MAIN_MAX_HIDE];
  int nhides = 0;
  static const struct option longopts[] = {{"server", required_argument, 0, O_SERVER},
                                           {"token-file", required_argument, 0, O_TOKEN},
                                           {"cpus", required_argument, 0, O_CPUS},
                                           {"gpus", required_argument, 0, O_GPUS},
                                           {"gpu-mem-mb", required_argument, 0, O_GPUMEM},
                                           {"memory-mb", required_argument, 0, O_MEM},
                                           {"work-dir", required_argument, 0, O_WORK},
                                           {"name", required_argument, 0, O_NAME},
                                           {"train-bin", required_argument, 0, O_TRAIN},
                                           {"poll-ms", required_argument, 0, O_POLL},
                                           {"stop-grace-s", required_argument, 0, O_GRACE},
                                           {"max-queued", required_argument, 0, O_QUEUE},
                                           {"outbox-stall-s", required_argument, 0, O_STALL},
                                           {"no-cgroup", no_argument, 0, O_NOCG},
                                           {"keep-trial-dirs", required_argument, 0, O_KEEP},
                                           {"advertise-addr", required_argument, 0, O_ADVERTISE},
                                           {"run-as", required_argument, 0, O_RUNAS},
                                           {"trainables", required_argument, 0, O_TRAINABLES},
                                           {"allow-command", required_argument, 0, O_ALLOWCMD},
                                           {"pass-env", required_argument, 0, O_PASSENV},
                                           {"ca-file", required_argument, 0, O_CAFILE},
                                           {"mps", no_argument, 0, O_MPS},
                                           {"cpu-list", required_argument, 0, O_CPULIST},
                                           {"exclusive-cpus", no_argument, 0, O_EXCLCPUS},
                                           {"hide", required_argument, 0, O_HIDE},
                                           {"preemption-grace-s", required_argument, 0, O_PGRACE},
                                           {"preemption-notice", required_argument, 0, O_PNOTICE},
                                           {"preemption-poll-ms", required_argument, 0, O_PPOLL},
                                           {"spot", no_argument, 0, O_SPOT},
                                           {"version", no_argument, 0, O_VERSION},
                                           {"help", no_argument, 0, O_HELP},
                                           {0, 0, 0, 0}};
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case O_SERVER:
      o.server = optarg;
      break;
    case O_TOKEN:
      token_file = optarg;
      break;
    case O_CPUS:
      cpus_arg = optarg;
      break;
    case O_CPULIST:
      cpu_list_arg = optarg;
      break;
    case O_EXCLCPUS:
      exclusive_cpus = 1;
      break;
    case O_GPUS:
      gpus_arg = optarg;
      break;
    case O_GPUMEM:
      if (parse_long("--gpu-mem-mb", optarg, 1, 1L << 30, &gpu_mem)) return 2;
      break;
    case O_MEM:
      if (parse_long("--memory-mb", optarg, 0, 1L << 40, &o.memory_mb)) return 2;
      break;
    case O_WORK:
      o.work_dir = optarg;
      break;
    case O_NAME:
      o.name = optarg;
      break;
    case O_TRAIN:
      o.train_bin = optarg;
      break;
    case O_POLL:
      if (parse_long("--poll-ms", optarg, 1, 600000, &v)) return 2;
      o.poll_ms = (unsigned)v;
      break;
    case O_GRACE:
      if (parse_long("--stop-grace-s", optarg, 0, 3600, &v)) return 2;
      o.stop_grace_ms = (unsigned)v * 1000;
      break;
    case O_QUEUE:
      if (parse_long("--max-queued", optarg, 1, 100000000, &v)) return 2;
      o.max_queued = (size_t)v;
      break;
    case O_STALL:
      if (parse_long("--outbox-stall-s", optarg, 0, 86400, &v)) return 2;
      o.outbox_stall_ms = (unsigned)v * 1000;
      break;
    case O_ADVERTISE:
      o.advertise_addr = optarg;
      break;
    case O_KEEP:
      if (parse_long("--keep-trial-dirs", optarg, 0, 1000000, &v)) return 2;
      o.keep_trial_dirs = (int)v;
      break;
    case O_NOCG:
      use_cgroup = 0;
      break;
    case O_RUNAS:
      run_as = optarg;
      break;
    case O_TRAINABLES:
      trainables_arg = optarg;
      break;
    case O_ALLOWCMD:
      allow_arg = optarg;
      break;
    case O_PASSENV:
      pass_arg = optarg;
      break;
    case O_CAFILE:
      /* Checked now: curl would only say so on every request. */
      if (access(optarg, R_OK) != 0) {
        fprintf(stderr, "ctune-worker: --ca-file %s: %s\n", optarg, strerror(errno));
        return 2;
      }
      http_set_ca_file(optarg);
      break;
    case O_VERSION:
      puts("ctune-worker 0.1.0");
      return 0;
    case O_MPS:
      use_mps = 1;
      break;
    case O_HIDE:
      if (nhides == MAIN_MAX_HIDE) {
        fprintf(stderr, "ctune-worker: --hide: at most %d paths\n", MAIN_MAX_HIDE);
        return 2;
      }
      hides[nhides++] = optarg;
      break;
    case O_PGRACE:
      if (parse_long("--preemption-grace-s", optarg, 1, 3600, &v)) return 2;
      o.preempt_grace_ms = (unsigned)v * 1000;
      g_sigterm_preempts = 1;
      break;
    case O_PNOTICE:
      if (!optarg[0] || !strcmp(optarg, "file:")) {
        fprintf(stderr, "ctune-worker: --preemption-notice: give a command or file:PATH\n");
        return 2;
      }
      notice_spec = optarg;
      break;
    case O_PPOLL:
      if (parse_long("--preemption-poll-ms", optarg, 10, 3600000, &notice_poll_ms)) return 2;
      break;
    case O_SPOT:
      o.spot = 1;
      break;
    case O_HELP:
      fputs(usage, stdout);
      return 0;
    default:
      fprintf(stderr, "ctune-worker: unknown or incomplete option '%s'\n%s", argv[optind - 1],
              usage);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "ctune-worker: unexpected argument '%s'\n%s", argv[optind], usage);
    return 2;
  }
  if (!o.server || strncmp(o.server, "http", 4)) {
    fprintf(stderr, "ctune-worker: --server URL is required (e.g. http://127.0.0.1:8470)\n");
    return 2;
  }
  /* Trials apart from the worker (isolate.h). */
  static struct isolate iso = {.trainables = ISOLATE_ALL};
  char ierr[512] = "";
  if (trainables_arg && isolate_parse_trainables(&iso, trainables_arg, ierr, sizeof ierr) < 0) {
    fprintf(stderr, "ctune-worker: --trainables %s: %s\n", trainables_arg, ierr);
    return 2;
  }
  if (allow_arg && !(iso.trainables & ISOLATE_COMMAND)) {
    fprintf(stderr,
            "ctune-worker: --allow-command lists programs for command trainables, "
            "which --trainables %s refuses\n",
            trainables_arg);
    return 2;
  }
  const char *bad = NULL;
  if (allow_arg && isolate_parse_allow(&iso, allow_arg, ierr, sizeof ierr) < 0)
    bad = "--allow-command";
  else if (pass_arg && isolate_parse_pass_env(&iso, pass_arg, ierr, sizeof ierr) < 0)
    bad = "--pass-env";
  else if (run_as && isolate_set_user(&iso, run_as, ierr, sizeof ierr) < 0)
    bad = "--run-as";
  if (bad) {
    fprintf(stderr, "ctune-worker: %s: %s\n", bad, ierr);
    isolate_free(&iso);
    return 2;
  }
  if (iso.run_as && geteuid() != 0) {
    fprintf(stderr,
            "ctune-worker: --run-as %s needs a worker started as root (it drops "
            "each trial to that user); this one runs as uid %d\n",
            run_as, (int)geteuid());
    isolate_free(&iso);
    return 2;
  }
  isolate_install(&iso);
  char *token = NULL;
  if (token_file && !(token = read_token(token_file))) {
    isolate_free(&iso);
    return 2;
  }
  o.token = token;
  if (plan_cpus(cpus_arg, cpu_list_arg, &cpu_plan) < 0) {
    free(token);
    return 2;
  }
  if ((o.ngpus = pick_gpus(gpus_arg, gpu_mem, o.gpu_ids, o.gpu_mem_mb, ALLOC_MAX_GPUS)) < 0) {
    free(token);
    return 2;
  }

  char self[PATH_MAX], train[PATH_MAX + 16], work[PATH_MAX + 300], sup[PATH_MAX + 32];
  size_t sl = sizeof self;
  if (uv_exepath(self, &sl) != 0) {
    fprintf(stderr, "ctune-worker: cannot find my own executable path\n");
    free(token);
    return 1;
  }
  /* Trials start under the small supervisor beside this executable; under
   * ctune-worker itself only where it is missing (each start then loads
   * libcurl's libraries: about 10 ms more). */
  snprintf(sup, sizeof sup, "%s", self);
  char *sup_slash = strrchr(sup, '/');
  if (sup_slash) strcpy(sup_slash + 1, EXECWRAP_PROGRAM);
  if (sup_slash && access(sup, X_OK) == 0) {
    o.sup.exe = sup;
  } else {
    log_warn("no %s beside %s: trials start under ctune-worker itself, about 10 ms slower each",
             EXECWRAP_PROGRAM, self);
    o.sup.exe = self;
    o.sup.flag = EXECWRAP_FLAG;
  }
  if (!o.train_bin) {
    snprintf(train, sizeof train, "%s", self);
    char *slash = strrchr(train, '/');
    if (slash) strcpy(slash + 1, "ctune-train");
    o.train_bin = train;
  }
  if (!o.work_dir) {
    snprintf(work, sizeof work, "ctune-worker.%s", o.name);
    o.work_dir = work;
  }
  if (mkdir(o.work_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "ctune-worker: --work-dir %s: %s\n", o.work_dir, strerror(errno));
    free(token);
    return 1;
  }
  /* Trials run in a cwd of their own choosing: every path handed to them
   * (checkpoint dir, logs) must not depend on the worker's cwd. */
  static char work_abs[PATH_MAX];
  if (!realpath(o.work_dir, work_abs)) {
    fprintf(stderr, "ctune-worker: --work-dir %s: %s\n", o.work_dir, strerror(errno));
    free(token);
    return 1;
  }
  o.work_dir = work_abs;
  int lock_fd = lock_work_dir(o.work_dir);
  if (lock_fd < 0) {
    free(token);
    isolate_free(&iso);
    return 1;
  }
  if (setup_trial_view(&iso, o.work_dir, token_file, hides, nhides) < 0) {
    fprintf(stderr, "ctune-worker: too many paths to hide from trials (at most %d)\n",
            ISOLATE_MAX_VIEW);
    free(token);
    isolate_free(&iso);
    close(lock_fd);
    return 2;
  }
  /* What this worker may really use, and where each figure came from. */
  if ((o.ncpus = claim_cpus(&cpu_plan, o.name, exclusive_cpus, &cpu_claim, o.cpu_ids)) < 0) {
    free(token);
    isolate_free(&iso);
    close(lock_fd);
    return 1;
  }
  log_info("cpu: %d (%s)", o.ncpus, cpu_plan.why);
  if (o.memory_mb < 0) {
    char mwhy[1200];
    o.memory_mb = detect_memory_mb(mwhy, sizeof mwhy);
    log_info("memory_mb: %ld (%s)", o.memory_mb, mwhy);
  } else {
    log_info("memory_mb: %ld (--memory-mb)", o.memory_mb);
  }
  char mps_err[512];
  if (use_mps && gpu_mps_start(o.work_dir, mps_err, sizeof mps_err) < 0) {
    fprintf(stderr, "ctune-worker: --mps: %s\n", mps_err);
    free(token);
    isolate_free(&iso);
    return 2;
  }
  /* The MPS pipes are in the work dir: GPU trials reach them. */
  if ((gpu_mps_pipe_dir() && isolate_add_view(&iso, 1, gpu_mps_pipe_dir()) < 0) ||
      (gpu_mps_log_dir() && isolate_add_view(&iso, 1, gpu_mps_log_dir()) < 0))
    log_warn("cannot show the MPS dirs to trials: too many paths");
  {
    /* The outbox holds argv and results of trials: the worker's alone. */
    char ob[PATH_MAX + 16];
    snprintf(ob, sizeof ob, "%s/outbox", o.work_dir);
    if (chmod(ob, 0700) != 0 && errno != ENOENT)
      log_warn("cannot make %s private (0700): %s", ob, strerror(errno));
  }
  if (iso.run_as) {
    /* The trial's user must get through the work dir to its own trial dir
     * (0700, its own); 0711 lets it through without listing anything. */
    struct stat wst;
    if (stat(o.work_dir, &wst) == 0 && (wst.st_mode & 0001) == 0)
      chmod(o.work_dir, (wst.st_mode & 07777) | 0711);
    if (check_run_as_reach(&iso, o.work_dir) != 0) {
      fprintf(stderr,
              "ctune-worker: --run-as %s: that user cannot reach the work dir %s "
              "(a parent directory is not searchable by it): choose a --work-dir it can "
              "reach, e.g. under /var/lib or /tmp\n",
              iso.user, o.work_dir);
      free(token);
      isolate_free(&iso);
      close(lock_fd);
      return 1;
    }
    log_info("trials run as user %s (uid %d, gid %d), home %s", iso.user, (int)iso.uid,
             (int)iso.gid, iso.home);
  } else if (geteuid() == 0) {
    log_warn("running as root without --run-as: every trial runs as root, and any submitted "
             "command can do anything on this machine; give --run-as USER (an unprivileged "
             "user) to run trials as that user");
  }
  if (!(iso.trainables & ISOLATE_COMMAND))
    log_info("command trainables are refused here (--trainables builtin)");
  else if (iso.nallow > 0)
    log_info("command trainables may run only the %d program(s) of --allow-command", iso.nallow);

  /* What the per-trial limits mean here, said once. */
  static struct cgroup_ctx cg;
  char why[512] = "disabled by --no-cgroup";
  if (use_cgroup && cgroup_setup(&cg, "/sys/fs/cgroup", NULL, why, sizeof why) == 0)
    log_info("limits: cpu pinned per trial (sched_setaffinity); cpu.max and memory.max in "
             "cgroup %s/trial-<id>",
             cg.base);
  else
    log_info("limits: cpu pinned per trial (sched_setaffinity), memory_mb as RLIMIT_AS "
             "(address space) for CPU trials; NOT enforced: fractional cpu quotas and "
             "resident memory, because %s",
             why);
  /* Trial groups a killed predecessor on this work dir left behind: their
   * processes are killed and the groups removed (the records say which are
   * ours, whatever other workers share the same parent group). */
  snprintf(cg.marks, sizeof cg.marks, "%s/cgroups", o.work_dir);
  int swept = cgroup_sweep(&cg);
  if (swept > 0) log_info("removed %d stale trial cgroup(s) of an earlier run", swept);
  if (!cg.enabled) cg.marks[0] = '\0';
  o.cgroup = &cg;

  /* Forked now, while the worker is small and has one thread: every
   * trial's supervisor is started by it, so the loop never forks. */
  struct spawner *spawner = NULL;
  int src = spawner_new(&spawner);
  if (src < 0)
    log_warn("cannot start the spawner (%s): the worker forks each trial's supervisor itself",
             strerror(-src));
  uv_loop_t *loop = uv_default_loop();
  if (spawner && (src = spawner_attach(spawner, loop)) < 0) {
    log_warn("cannot watch the spawner's children (%s): the worker forks each trial's "
             "supervisor itself",
             uv_strerror(src));
    spawner_free(spawner);
    spawner = NULL;
  }
  o.sup.spawner = spawner;
  struct worker *w = NULL;
  int rc = worker_new(loop, &o, &w);
  if (rc < 0) {
    fprintf(stderr, "ctune-worker: cannot start: %s (work dir %s)\n", strerror(-rc), o.work_dir);
    free(token);
    return 1;
  }
  g_worker = w;
  uv_signal_t sterm, sint;
  uv_signal_init(loop, &sterm);
  uv_signal_init(loop, &sint);
  uv_signal_start(&sterm, on_signal, SIGTERM);
  uv_signal_start(&sint, on_signal, SIGINT);
  sigprocmask(SIG_UNBLOCK, &stop_signals, NULL);
  /* Signals must not keep the loop alive once the worker has closed. */
  uv_unref((uv_handle_t *)&sterm);
  uv_unref((uv_handle_t *)&sint);
  signal(SIGPIPE, SIG_IGN);
  /* An open of a log while the worker holds its lease (workdir_spare_reuse)
   * breaks the lease with a SIGIO: it must not end the worker. Trials get
   * every signal's default back (the spawner resets them). */
  signal(SIGIO, SIG_IGN);
  log_info("ctune-worker %s: server %s, %d cpu(s), %d gpu(s), memory_mb %ld, work dir %s", o.name,
           o.server, o.ncpus, o.ngpus, o.memory_mb, o.work_dir);
  struct preempt_watch *watch = NULL;
  if (notice_spec) {
    rc = preempt_watch_start(loop, notice_spec, (unsigned)notice_poll_ms, on_preempt_notice, NULL,
                             &watch);
    if (rc < 0) {
      fprintf(stderr, "ctune-worker: --preemption-notice: %s\n", strerror(-rc));
      worker_free(w);
      free(token);
      return 1;
    }
  }
  worker_start(w);
  uv_run(loop, UV_RUN_DEFAULT);
  g_worker = NULL;
  preempt_watch_close(watch);
  uv_close((uv_handle_t *)&sterm, NULL);
  uv_close((uv_handle_t *)&sint, NULL);
  spawner_detach(spawner);
  uv_run(loop, UV_RUN_DEFAULT);
  preempt_watch_free(watch);
  worker_free(w);
  spawner_free(spawner);
  uv_loop_close(loop);
  free(token);
  isolate_free(&iso);
  sysres_release(&cpu_claim);
  close(lock_fd);
  return 0;
}
