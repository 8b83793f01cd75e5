/* proc: starting, watching and stopping ctune-server and ctune-worker. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

static int is_exec(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int proc_find(const char *name, char *out, size_t outlen, char *err, size_t errlen) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      snprintf(out, outlen, "%s/%s", self, name);
      if (is_exec(out)) return 0;
    }
  }
  const char *path = getenv("PATH");
  if (path) {
    const char *p = path;
    while (*p) {
      size_t len = strcspn(p, ":");
      if (len > 0) {
        snprintf(out, outlen, "%.*s/%s", (int)len, p, name);
        if (is_exec(out)) return 0;
      }
      p += len;
      if (*p == ':') p++;
    }
  }
  snprintf(err, errlen,
           "cannot find %s next to %s nor on PATH; build it (cmake --build ... --target %s) "
           "or add its folder to PATH",
           name, n > 0 ? self : "ctune", name);
  return -ENOENT;
}

/* Blocks ctune's stop signals (SIGINT, SIGTERM, SIGHUP); *old gets the
 * mask to restore. */
static void proc_block_stops(sigset_t *old) {
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGHUP);
  sigprocmask(SIG_BLOCK, &stops, old);
}

int proc_spawn(struct proc *p, const char *name, char *const argv[], const char *log_path) {
  int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return -errno;
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  pid_t parent = getpid();
  /* Until the child has dropped ctune's handlers, a signal would run the
   * copy of on_signal it inherited and be lost there: proc_stop's SIGTERM,
   * sent right after the start (a config the server rejects), left the
   * child running to the 30 s grace. Blocked across the fork, it stays
   * pending in the child until the default action is back. */
  sigset_t old;
  proc_block_stops(&old);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(fd);
    close(devnull);
    return -e;
  }
  if (pid == 0) {
    /* Own group: the terminal's Ctrl-C reaches only ctune, which then stops
     * the children in order. PDEATHSIG: no orphans if ctune is killed. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    dup2(devnull, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    execv(argv[0], argv);
    dprintf(2, "ctune: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid); /* also from the parent, so there is no window */
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(fd);
  close(devnull);
  p->pid = pid;
  p->status = 0;
  p->name = name;
  p->termed = 0;
  return 0;
}

int proc_exited(struct proc *p) {
  if (p->pid <= 0) return 1;
  int st;
  pid_t r = waitpid(p->pid, &st, WNOHANG);
  if (r == p->pid || (r < 0 && errno == ECHILD)) {
    p->status = r == p->pid ? st : 0;
    p->pid = 0;
    return 1;
  }
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

volatile sig_atomic_t proc_hurry;

/* Waits up to ms for an event on fd (-1: none) or the exit of p, whichever
 * comes first, or for one of ctune's stop signals, with no window between
 * the caller's last look at its flags and the wait: the signals are blocked
 * while `quit` (the flag their handler sets) is read, and ppoll lets them
 * in. The exit is p's pidfd; where there is none (Linux < 5.3), the wait
 * is 20 ms at most and the caller looks again. */
static void proc_await(struct proc *p, int fd, int ms, const volatile sig_atomic_t *quit) {
  sigset_t old;
  proc_block_stops(&old);
  int pidfd = p->pid > 0 ? (int)syscall(SYS_pidfd_open, p->pid, 0) : -1;
  struct pollfd pf[2] = {{pidfd, POLLIN, 0}, {fd, POLLIN, 0}};
  if (pidfd < 0 && ms > 20) ms = 20;
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  if (!(quit && *quit) && !proc_hurry) ppoll(pf, 2, &ts, &old);
  if (pidfd >= 0) close(pidfd);
  sigprocmask(SIG_SETMASK, &old, NULL);
}

/* Milliseconds left until deadline (at least 1 while it is ahead). */
static int proc_left_ms(uint64_t deadline) {
  uint64_t now = clock_mono_ms();
  return now >= deadline ? 0 : deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

void proc_term(struct proc *p) {
  if (p->pid <= 0 || p->termed) return;
  kill(p->pid, SIGTERM);
  p->termed = 1;
}

void proc_stop(struct proc *p, int grace_ms) {
  if (p->pid <= 0) return;
  proc_term(p);
  uint64_t deadline = clock_mono_ms() + (uint64_t)grace_ms;
  while (!proc_hurry && clock_mono_ms() < deadline) {
    if (proc_exited(p)) return;
    /* Its exit is awaited, not polled for: ctune run's end is not held up
     * by a sleep. */
    proc_await(p, -1, proc_left_ms(deadline), NULL);
  }
  /* The whole group: whatever it left behind goes too. */
  kill(-p->pid, SIGKILL);
  kill(p->pid, SIGKILL);
  int st;
  if (waitpid(p->pid, &st, 0) == p->pid) p->status = st;
  p->pid = 0;
}

/* Looks once for a whole line holding `text` (at its start when at_start)
 * from byte offset on; copies what follows it. */
static int proc_find_line(const char *log_path, long offset, const char *text, int at_start,
                          char *out, size_t outlen) {
  FILE *f = fopen(log_path, "r");
  if (!f) return 0;
  char line[1024];
  int found = 0;
  if (fseek(f, offset, SEEK_SET) == 0) {
    while (!found && fgets(line, sizeof(line), f)) {
      char *hit = strstr(line, text);
      if (hit && (!at_start || hit == line) && strchr(line, '\n')) {
        char *rest = hit + strlen(text);
        rest[strcspn(rest, "\r\n")] = '\0';
        if (out) snprintf(out, outlen, "%s", rest);
        found = 1;
      }
    }
  }
  fclose(f);
  return found;
}

/* Every change to the log is an event (inotify): the line is read the
 * moment it is written, not at the next look of a poll loop. Without
 * inotify, a look every 25 ms. */
static int proc_wait_log(struct proc *p, const char *log_path, long offset, const char *text,
                         int at_start, int timeout_ms, const volatile sig_atomic_t *stop, char *out,
                         size_t outlen) {
  uint64_t deadline = clock_mono_ms() + (uint64_t)timeout_ms;
  int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ino >= 0 && inotify_add_watch(ino, log_path, IN_MODIFY) < 0) {
    close(ino);
    ino = -1;
  }
  int rc;
  for (;;) {
    if (proc_find_line(log_path, offset, text, at_start, out, outlen)) {
      rc = 0;
      break;
    }
    if (proc_exited(p)) {
      rc = -ECHILD;
      break;
    }
    if (stop && *stop) {
      rc = -EINTR;
      break;
    }
    int left = proc_left_ms(deadline);
    if (left == 0) {
      rc = -ETIMEDOUT;
      break;
    }
    if (ino < 0) {
      sleep_ms(left < 25 ? left : 25);
      continue;
    }
    proc_await(p, ino, left, stop);
    char ev[4096];
    while (read(ino, ev, sizeof ev) > 0) {
    }
  }
  if (ino >= 0) close(ino);
  return rc;
}

int proc_wait_log_line(struct proc *p, const char *log_path, long offset, const char *prefix,
                       int timeout_ms, const volatile sig_atomic_t *stop, char *out,
                       size_t outlen) {
  return proc_wait_log(p, log_path, offset, prefix, 1, timeout_ms, stop, out, outlen);
}

int proc_wait_log_text(struct proc *p, const char *log_path, long offset, const char *text,
                       int timeout_ms, const volatile sig_atomic_t *stop) {
  return proc_wait_log(p, log_path, offset, text, 0, timeout_ms, stop, NULL, 0);
}
