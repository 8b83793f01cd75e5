/* The spawner process and the worker's side of it; see spawner.h. */
#include "spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"

#define SPAWNER_MAGIC 0x63747370u
/* The largest request (program, cwd, argv and env together). */
#define SPAWNER_MAX_REQ (1u << 20)
#define SPAWNER_MAX_STRINGS 65536u
/* How long the worker waits for the spawner to take a request and answer:
 * a clone of a small process, unless the machine is very loaded. */
#define SPAWNER_WAIT_MS 10000

struct spawner_hdr {
  uint32_t magic;
  uint32_t len;   /* the strings after the header */
  uint32_t nargv; /* then nenv, after the program and the cwd */
  uint32_t nenv;
  uint32_t has_cwd;
  uint32_t fdmask; /* which of the child's 1, 2, 3 come with the message */
  uint32_t flags;  /* SPAWNER_F_* */
};

/* Test builds: the spawner dies right after the clone, before its answer. */
#define SPAWNER_F_TEST_DIE 1u

struct spawner_reply {
  int32_t pid;
  int32_t err;
};

struct spawner_child {
  struct spawner *s;
  pid_t pid; /* 0 until the spawner answers */
  spawner_pid_cb on_pid;
  spawner_exit_cb on_exit;
  void *arg;
  int kill_sig; /* forgotten before the answer: sent to the pid once known */
  int err;      /* failed: handed to on_pid from the loop */
  /* Until the answer: the request, sent again to a new spawner if this
   * one is lost. */
  struct spawner_hdr h;
  char *body;
  int fds[3];
  int tries;
  struct spawner_child *next; /* in children (answered) or pending (not yet) */
};

/* One spawner process's socket, watched by the loop (freed once closed). */
struct spawner_conn {
  uv_poll_t poll;
  struct spawner *s;
};

struct spawner {
  pid_t pid; /* 0: none (not started, or lost: the next spawn starts one) */
  int fd;    /* the worker's end of the socketpair */
  struct spawner_conn *conn;
  uv_loop_t *loop;
  uv_signal_t chld;
  uv_timer_t timer; /* the oldest unanswered request's deadline */
  uv_timer_t later; /* hands failures to their callbacks from the loop */
  int attached;
  int test_die; /* test builds: the next request asks the spawner to die */
  int waiting;  /* children with an exit callback: the SIGCHLD handle is ref'd */
  char rbuf[sizeof(struct spawner_reply)];
  size_t rlen;
  char file[PATH_MAX];            /* the last request's program: strays are recognised by it */
  struct spawner_child *children; /* answered: reaped on SIGCHLD */
  struct spawner_child *pending;  /* sent, unanswered, oldest first */
  struct spawner_child **pending_tail;
  struct spawner_child *failed; /* requests given up, for `later` */
};

/* ---- the spawner process: async-signal-safe calls only, no allocation ---- */

static char spawner_buf[SPAWNER_MAX_REQ];
static char *spawner_strs[SPAWNER_MAX_STRINGS + 2];

/* What the cloned child runs is on spawner_stack, which AddressSanitizer
 * does not know as a stack (it would warn on the child's stderr at _exit):
 * these few functions, libc calls only, go uninstrumented. */
#define SPAWNER_CHILD_CODE __attribute__((no_sanitize_address))

SPAWNER_CHILD_CODE static void spawner_say(int fd, const char *a, const char *b, int err) {
  const char *name = err ? strerrorname_np(err) : NULL;
  const char *parts[] = {"ctune-worker: ", a,   b ? " " : "", b ? b : "", name ? ": " : "",
                         name ? name : "", "\n"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (write(fd, parts[i], strlen(parts[i])) < 0) return;
}

/* Reads (or, out, writes) all n bytes: 0, or -1 at end of file or error. */
static int spawner_full(int fd, char *p, size_t n, int out) {
  while (n > 0) {
    ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Every signal default and none blocked, as the trials are to start. glibc
 * refuses sigaction() on the two real-time signals it keeps for itself (32
 * and 33), yet an ignored disposition of theirs is inherited across exec
 * like any other (a worker started by a runtime that ignores them would
 * pass that on): those are reset by the kernel's call, whose all-zero
 * action is SIG_DFL with no flags and an empty mask in every layout. */
static void spawner_default_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, &sa, NULL) == 0) continue;
    unsigned long dfl[4] = {0, 0, 0, 0};
    syscall(SYS_rt_sigaction, sig, dfl, NULL, sizeof dfl[0]);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* In the cloned child: its own session, its stdio, exec. Its signals are
 * the spawner's own, already default (spawner_main), and no handler is ever
 * installed in the spawner: nothing to reset here. It shares the spawner's
 * memory until the exec (spawner_clone): it writes only its own stack and
 * its copy of the fd table. */
SPAWNER_CHILD_CODE static void spawner_exec(const char *file, char **argv, char **env,
                                            const char *cwd, const int *fds) {
  int tmp[3];
  for (int i = 0; i < 3; i++) tmp[i] = fds[i] >= 0 ? fcntl(fds[i], F_DUPFD_CLOEXEC, 10) : -1;
  setsid();
  int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nul >= 0) dup2(nul, 0);
  for (int i = 0; i < 3; i++) {
    if (tmp[i] >= 0)
      dup2(tmp[i], i + 1);
    else
      close(i + 1);
  }
  int out = fds[1] >= 0 ? 2 : -1;
  if (cwd && chdir(cwd) != 0) {
    if (out >= 0) spawner_say(out, "cannot enter the trial's dir", cwd, errno);
    _exit(127);
  }
  execve(file, argv, env);
  if (out >= 0) spawner_say(out, "cannot run the trial's supervisor", file, errno);
  _exit(127);
}

/* What the cloned child runs, on its own stack. */
struct spawner_job {
  const char *file, *cwd;
  char **argv, **env;
  const int *fds;
};

SPAWNER_CHILD_CODE static int spawner_child_main(void *arg) {
  const struct spawner_job *j = arg;
  spawner_exec(j->file, j->argv, j->env, j->cwd, j->fds);
  return 127;
}

/* The child's stack: the spawner is single-threaded and, with CLONE_VFORK,
 * waits for the child's exec before it clones the next. */
static char spawner_stack[64 * 1024] __attribute__((aligned(64)));

/* The worker's child, not ours (CLONE_PARENT): its parent-death signal,
 * getppid() and exit status belong to the worker. CLONE_VM | CLONE_VFORK,
 * as posix_spawn does: no copy of this process's page tables (a fork of
 * the worker's, libcurl and all) to make and to tear down again at the
 * child's exec. The pid, or -1 with errno. */
static long spawner_clone(struct spawner_job *j) {
  return clone(spawner_child_main, spawner_stack + sizeof spawner_stack,
               CLONE_PARENT | CLONE_VM | CLONE_VFORK | SIGCHLD, j);
}

/* Splits n NUL-terminated strings off *p (within end) into out. */
static int spawner_split(char **p, const char *end, uint32_t n, char **out) {
  for (uint32_t i = 0; i < n; i++) {
    const char *z = memchr(*p, '\0', (size_t)(end - *p));
    if (!z) return -1;
    out[i] = *p;
    *p = (char *)z + 1;
  }
  out[n] = NULL;
  return 0;
}

/* One request: 0, or -1 when the worker is gone. */
static int spawner_serve(int sock) {
  struct spawner_hdr h;
  char cbuf[CMSG_SPACE(3 * sizeof(int))];
  struct iovec iov = {&h, sizeof h};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof cbuf;
  ssize_t n;
  do n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return -1;
  int got[3] = {-1, -1, -1}, ngot = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && ngot < 3; i++)
        memcpy(&got[ngot++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  if ((size_t)n < sizeof h && spawner_full(sock, (char *)&h + n, sizeof h - (size_t)n, 0) < 0)
    return -1;
  int fds[3] = {-1, -1, -1}, k = 0;
  for (int i = 0; i < 3; i++)
    if (h.fdmask & (1u << i) && k < ngot) fds[i] = got[k++];
  struct spawner_reply r = {-1, 0};
  if (h.magic != SPAWNER_MAGIC) return -1; /* out of step: nothing can be trusted */
  if (h.len > SPAWNER_MAX_REQ || h.nargv + (uint64_t)h.nenv > SPAWNER_MAX_STRINGS || h.nargv == 0) {
    r.err = E2BIG;
    for (uint32_t left = h.len; left > 0;) { /* skip it, stay in step */
      uint32_t c = left < sizeof spawner_buf ? left : (uint32_t)sizeof spawner_buf;
      if (spawner_full(sock, spawner_buf, c, 0) < 0) return -1;
      left -= c;
    }
  } else if (spawner_full(sock, spawner_buf, h.len, 0) < 0) {
    return -1;
  } else {
    char *p = spawner_buf, *end = spawner_buf + h.len;
    char *head[3];
    char **argv = spawner_strs, **env = spawner_strs + h.nargv + 1;
    if (spawner_split(&p, end, h.has_cwd ? 2 : 1, head) < 0 ||
        spawner_split(&p, end, h.nargv, argv) < 0 || spawner_split(&p, end, h.nenv, env) < 0) {
      r.err = EINVAL;
    } else {
      struct spawner_job j = {head[0], h.has_cwd ? head[1] : NULL, argv, env, fds};
      long pid = spawner_clone(&j);
#ifdef CTUNE_TESTHOOKS
      if (pid > 0 && h.flags & SPAWNER_F_TEST_DIE) raise(SIGKILL);
#endif
      if (pid < 0)
        r.err = errno;
      else
        r.pid = (int32_t)pid;
    }
  }
  for (int i = 0; i < ngot; i++) close(got[i]);
  return spawner_full(sock, (char *)&r, sizeof r, 1);
}

static void spawner_main(int sock, pid_t worker) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != worker) _exit(0);
  prctl(PR_SET_NAME, "ctune-spawner");
  setsid(); /* a terminal's ^C is for the worker, which drains */
  spawner_default_signals();
  /* Nothing of the worker's but the socket: no lock, claim or log fd of
   * its stays open here. */
  int s = sock >= 3 ? sock : fcntl(sock, F_DUPFD_CLOEXEC, 3);
  if (s < 0) _exit(1);
  if (s > 3) close_range(3, (unsigned)s - 1, 0);
  close_range((unsigned)s + 1, ~0u, 0);
  while (spawner_serve(s) == 0) {
  }
  _exit(0);
}

/* ---- the worker's side ---- */

static void spawner_on_readable(uv_poll_t *h, int status, int events);

static void spawner_conn_closed(uv_handle_t *h) { free(h->data); }

static void spawner_conn_close(struct spawner *s) {
  if (!s->conn) return;
  uv_poll_stop(&s->conn->poll);
  uv_close((uv_handle_t *)&s->conn->poll, spawner_conn_closed);
  s->conn = NULL;
}

static int spawner_fork(struct spawner *s) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -errno;
  pid_t worker = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = -errno;
    close(sv[0]);
    close(sv[1]);
    return e;
  }
  if (pid == 0) {
    close(sv[0]);
    spawner_main(sv[1], worker);
  }
  close(sv[1]);
  /* Requests are written whole (a bounded wait: a spawner that hangs is a
   * fault); answers are read by the loop. */
  struct timeval tv = {SPAWNER_WAIT_MS / 1000, (SPAWNER_WAIT_MS % 1000) * 1000};
  setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  s->pid = pid;
  s->fd = sv[0];
  s->rlen = 0;
  if (s->attached) {
    struct spawner_conn *c = calloc(1, sizeof *c);
    int rc = c ? uv_poll_init(s->loop, &c->poll, sv[0]) : -ENOMEM;
    if (rc < 0) {
      free(c);
      kill(pid, SIGKILL);
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
      }
      close(sv[0]);
      s->pid = 0;
      s->fd = -1;
      return rc;
    }
    c->s = s;
    c->poll.data = c;
    s->conn = c;
    uv_poll_start(&c->poll, UV_READABLE, spawner_on_readable);
    uv_unref((uv_handle_t *)&c->poll);
  }
  log_info("spawner: pid %d starts the trials' supervisors", (int)pid);
  return 0;
}

static void spawner_waiting(struct spawner *s, int delta) {
  s->waiting += delta;
  if (!s->attached) return;
  if (s->waiting > 0)
    uv_ref((uv_handle_t *)&s->chld);
  else
    uv_unref((uv_handle_t *)&s->chld);
}

static void spawner_track(struct spawner *s, struct spawner_child *c) {
  c->next = s->children;
  s->children = c;
}

static void spawner_request_free(struct spawner_child *c) {
  for (int i = 0; i < 3; i++)
    if (c->fds[i] >= 0) close(c->fds[i]);
  c->fds[0] = c->fds[1] = c->fds[2] = -1;
  free(c->body);
  c->body = NULL;
}

/* A request that will not be answered: its pid callback gets err. */
static void spawner_fail(struct spawner_child *c, int err) {
  spawner_pid_cb cb = c->on_pid;
  void *arg = c->arg;
  if (c->on_exit) spawner_waiting(c->s, -1);
  spawner_request_free(c);
  free(c);
  if (cb) cb(arg, err);
}

static int spawner_known(const struct spawner *s, pid_t pid) {
  for (const struct spawner_child *c = s->children; c; c = c->next)
    if (c->pid == pid) return 1;
  return 0;
}

/* A spawner lost after it took a request may have cloned the child without
 * answering: a child of this process that nobody knows, which would run
 * the trial unwatched (and twice, once the request is sent again). Such
 * strays, still the spawner's image or already the requested program, are
 * ended (a supervisor by SIGUSR2, its signal to kill its tree) and reaped
 * as forgotten children. */
static void spawner_end_strays(struct spawner *s) {
  char path[64], buf[4096], want[PATH_MAX], exe[PATH_MAX];
  snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  if (!s->file[0] || !realpath(s->file, want)) want[0] = '\0';
  for (char *p = buf, *end; *p; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p) break;
    if (pid <= 1 || spawner_known(s, (pid_t)pid)) continue;
    char comm[32] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
      ssize_t k = read(fd, comm, sizeof comm - 1);
      comm[k > 0 ? k : 0] = '\0';
      close(fd);
    }
    snprintf(path, sizeof path, "/proc/%ld/exe", pid);
    ssize_t el = readlink(path, exe, sizeof exe - 1);
    exe[el > 0 ? el : 0] = '\0';
    int unexeced = !strcmp(comm, "ctune-spawner\n");
    if (!unexeced && (!want[0] || strcmp(exe, want) != 0)) continue;
    struct spawner_child *c = calloc(1, sizeof *c);
    if (!c) continue; /* a zombie at worst: it is still ended */
    kill((pid_t)pid, unexeced ? SIGKILL : SIGUSR2);
    log_error("spawner: ended pid %ld, started by the lost spawner without its answer", pid);
    c->s = s;
    c->pid = (pid_t)pid;
    c->fds[0] = c->fds[1] = c->fds[2] = -1;
    spawner_track(s, c);
  }
}

/* Writes c's request to the spawner (starting one if none runs). */
static int spawner_send(struct spawner *s, struct spawner_child *c) {
  int rc;
  if (s->pid <= 0 && (rc = spawner_fork(s)) < 0) return rc;
  char cbuf[CMSG_SPACE(3 * sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  int fds[3], nf = 0;
  c->h.fdmask = 0;
  c->h.flags = 0;
  for (int i = 0; i < 3; i++)
    if (c->fds[i] >= 0) {
      fds[nf++] = c->fds[i];
      c->h.fdmask |= 1u << i;
    }
  if (s->test_die) c->h.flags |= SPAWNER_F_TEST_DIE;
  s->test_die = 0;
  struct iovec iov = {&c->h, sizeof c->h};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (nf) {
    m.msg_control = cbuf;
    m.msg_controllen = CMSG_SPACE(nf * sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nf * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nf * sizeof(int));
  }
  ssize_t n;
  do n = sendmsg(s->fd, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  const char *p = (const char *)&c->h + n;
  size_t left = sizeof c->h - (size_t)n;
  for (int part = 0; part < 2; part++) {
    while (left > 0) {
      ssize_t k = send(s->fd, p, left, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return -errno;
      p += k;
      left -= (size_t)k;
    }
    p = c->body;
    left = c->h.len;
  }
  return 0;
}

static void spawner_enqueue(struct spawner *s, struct spawner_child *c) {
  c->next = NULL;
  *s->pending_tail = c;
  s->pending_tail = &c->next;
}

static void spawner_on_timeout(uv_timer_t *t);

static void spawner_on_later(uv_timer_t *t) {
  struct spawner *s = t->data;
  while (s->failed) {
    struct spawner_child *c = s->failed;
    s->failed = c->next;
    spawner_fail(c, c->err);
  }
}

static void spawner_arm(struct spawner *s) {
  if (s->pending)
    uv_timer_start(&s->timer, spawner_on_timeout, SPAWNER_WAIT_MS, 0);
  else
    uv_timer_stop(&s->timer);
}

/* The spawner failed, hung or died: it is ended (killed if need be, and
 * reaped), whatever it started unannounced is ended, and the requests it
 * left unanswered go to a new one (once each; a second loss fails them). */
static void spawner_lost(struct spawner *s, const char *why, int err, int reaped) {
  if (s->pid <= 0) return;
  log_error("spawner (pid %d) %s%s%s: starting a new one", (int)s->pid, why, err ? ": " : "",
            err ? strerror(err) : "");
  if (!reaped) {
    kill(s->pid, SIGKILL);
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  spawner_conn_close(s);
  close(s->fd);
  s->fd = -1;
  s->pid = 0;
  spawner_end_strays(s);
  struct spawner_child *q = s->pending, *failed = NULL;
  s->pending = NULL;
  s->pending_tail = &s->pending;
  int rc = 0;
  while (q) {
    struct spawner_child *c = q;
    q = c->next;
    if (c->tries++ > 0 || (rc = spawner_send(s, c)) < 0) {
      c->next = failed;
      failed = c;
      continue;
    }
    spawner_enqueue(s, c);
  }
  spawner_arm(s);
  while (failed) { /* the callbacks from the loop: this may run inside a spawn */
    struct spawner_child *c = failed;
    failed = c->next;
    c->err = rc < 0 ? rc : -EPIPE;
    c->next = s->failed;
    s->failed = c;
    uv_timer_start(&s->later, spawner_on_later, 0, 0);
  }
}

static void spawner_on_timeout(uv_timer_t *t) {
  struct spawner *s = t->data;
  if (s->pending) spawner_lost(s, "did not answer in time", 0, 0);
}

/* The answer to the oldest pending request. */
static void spawner_answer(struct spawner *s, const struct spawner_reply *r) {
  struct spawner_child *c = s->pending;
  if (!c) {
    spawner_lost(s, "answered a request never made", 0, 0);
    return;
  }
  s->pending = c->next;
  if (!s->pending) s->pending_tail = &s->pending;
  spawner_arm(s);
  if (r->pid <= 0) {
    spawner_fail(c, r->err > 0 ? -r->err : -EIO);
    return;
  }
  spawner_request_free(c);
  c->pid = r->pid;
  spawner_track(s, c);
  if (c->kill_sig) kill(c->pid, c->kill_sig);
  if (c->on_pid) c->on_pid(c->arg, c->pid);
}

static void spawner_on_chld(uv_signal_t *h, int sig);

static void spawner_on_readable(uv_poll_t *h, int status, int events) {
  (void)events;
  struct spawner_conn *conn = h->data;
  struct spawner *s = conn->s;
  for (int i = 0; i < 64 && s->conn == conn; i++) {
    ssize_t k = recv(s->fd, s->rbuf + s->rlen, sizeof s->rbuf - s->rlen, MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && status == 0) break;
    if (k <= 0) {
      spawner_lost(s, "closed its socket", k < 0 ? errno : 0, 0);
      break;
    }
    s->rlen += (size_t)k;
    if (s->rlen < sizeof s->rbuf) continue;
    struct spawner_reply r;
    memcpy(&r, s->rbuf, sizeof r);
    s->rlen = 0;
    spawner_answer(s, &r);
  }
  /* A child that ended before its pid was known is reaped now. */
  spawner_on_chld(&s->chld, SIGCHLD);
}

int spawner_new(struct spawner **out) {
  struct spawner *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->fd = -1;
  s->pending_tail = &s->pending;
  int rc = spawner_fork(s);
  if (rc < 0) {
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

pid_t spawner_pid(const struct spawner *s) { return s->pid; }

/* Reaps the child at *pp if it has ended (unlinked, its callback called):
 * 1 when it was, else 0. */
static int spawner_reap(struct spawner *s, struct spawner_child **pp) {
  struct spawner_child *c = *pp;
  int st;
  pid_t r;
  while ((r = waitpid(c->pid, &st, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == 0 || (r < 0 && errno != ECHILD)) return 0;
  *pp = c->next;
  if (r < 0) st = W_EXITCODE(127, 0); /* reaped by someone else: not ours to know */
  spawner_exit_cb cb = c->on_exit;
  void *arg = c->arg;
  if (cb) spawner_waiting(s, -1);
  free(c);
  if (cb) cb(arg, st);
  return 1;
}

static void spawner_on_chld(uv_signal_t *h, int sig) {
  (void)sig;
  struct spawner *s = h->data;
  int st;
  if (s->pid > 0 && waitpid(s->pid, &st, WNOHANG) == s->pid) {
    char why[64];
    snprintf(why, sizeof why, "%s %d", WIFSIGNALED(st) ? "was killed by signal" : "exited with",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    spawner_lost(s, why, 0, 1);
  }
  /* The kernel names an ended child without reaping it (WNOWAIT): one call
   * when none has ended, one more per child ended, instead of a waitpid for
   * each child running (32 a SIGCHLD at 32 trials at once). A child that is
   * not ours (libuv's, a helper's) may come first: then each of ours is
   * tried, as its owner may reap it only later. */
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc;
    while ((rc = waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT)) < 0 && errno == EINTR) {
    }
    if (rc == 0 && si.si_pid == 0) return; /* nothing has ended */
    struct spawner_child **pp = &s->children;
    while (rc == 0 && *pp && (*pp)->pid != si.si_pid) pp = &(*pp)->next;
    if (rc != 0 || !*pp || !spawner_reap(s, pp)) break;
  }
  for (struct spawner_child **pp = &s->children; *pp;)
    if (!spawner_reap(s, pp)) pp = &(*pp)->next;
}

int spawner_attach(struct spawner *s, uv_loop_t *loop) {
  s->loop = loop;
  int rc = uv_signal_init(loop, &s->chld);
  if (rc < 0) return rc;
  s->chld.data = s;
  uv_timer_init(loop, &s->timer);
  uv_timer_init(loop, &s->later);
  s->timer.data = s->later.data = s;
  uv_unref((uv_handle_t *)&s->timer);
  rc = uv_signal_start(&s->chld, spawner_on_chld, SIGCHLD);
  struct spawner_conn *c = rc == 0 ? calloc(1, sizeof *c) : NULL;
  if (rc == 0 && !c) rc = -ENOMEM;
  if (rc == 0 && (rc = uv_poll_init(loop, &c->poll, s->fd)) < 0) {
    free(c);
    c = NULL;
  }
  if (rc < 0) {
    uv_close((uv_handle_t *)&s->chld, NULL);
    uv_close((uv_handle_t *)&s->timer, NULL);
    uv_close((uv_handle_t *)&s->later, NULL);
    return rc;
  }
  c->s = s;
  c->poll.data = c;
  s->conn = c;
  uv_poll_start(&c->poll, UV_READABLE, spawner_on_readable);
  uv_unref((uv_handle_t *)&c->poll);
  s->attached = 1;
  spawner_waiting(s, 0);
  return 0;
}

/* The request's strings, packed. */
static char *spawner_pack(const struct spawner_req *r, struct spawner_hdr *h) {
  size_t len = strlen(r->file) + 1 + (r->cwd ? strlen(r->cwd) + 1 : 0);
  uint32_t na = 0, ne = 0;
  for (; r->argv[na]; na++) len += strlen(r->argv[na]) + 1;
  for (; r->env && r->env[ne]; ne++) len += strlen(r->env[ne]) + 1;
  if (len > SPAWNER_MAX_REQ) {
    errno = E2BIG;
    return NULL;
  }
  char *buf = malloc(len), *p = buf;
  if (!buf) return NULL;
  const char *head[2] = {r->file, r->cwd};
  for (int i = 0; i < (r->cwd ? 2 : 1); i++) p = stpcpy(p, head[i]) + 1;
  for (uint32_t i = 0; i < na; i++) p = stpcpy(p, r->argv[i]) + 1;
  for (uint32_t i = 0; i < ne; i++) p = stpcpy(p, r->env[i]) + 1;
  *h = (struct spawner_hdr){SPAWNER_MAGIC, (uint32_t)len, na, ne, r->cwd != NULL, 0, 0};
  return buf;
}

int spawner_spawn(struct spawner *s, const struct spawner_req *r, spawner_pid_cb on_pid,
                  spawner_exit_cb on_exit, void *arg, struct spawner_child **child) {
  if (!s->attached) return -EINVAL;
  struct spawner_child *c = calloc(1, sizeof *c);
  if (!c) return -ENOMEM;
  c->s = s;
  c->fds[0] = c->fds[1] = c->fds[2] = -1;
  int rc = 0;
  if (!(c->body = spawner_pack(r, &c->h))) rc = errno ? -errno : -ENOMEM;
  /* Its own copies of the fds: the request may be sent again. */
  for (int i = 0; i < 3 && rc == 0; i++)
    if (r->fds[i] >= 0 && (c->fds[i] = fcntl(r->fds[i], F_DUPFD_CLOEXEC, 3)) < 0) rc = -errno;
  snprintf(s->file, sizeof s->file, "%s", r->file);
  /* A spawner that fails to take it is replaced once, for this request. */
  for (int tries = 0; rc == 0; tries++) {
    if ((rc = spawner_send(s, c)) == 0 || tries == 1) break;
    spawner_lost(s, rc == -EAGAIN ? "did not take a request in time" : "failed a request", -rc, 0);
    rc = 0;
  }
  if (rc < 0) {
    spawner_request_free(c);
    free(c);
    return rc;
  }
  c->on_pid = on_pid;
  c->on_exit = on_exit;
  c->arg = arg;
  spawner_enqueue(s, c);
  spawner_arm(s);
  if (on_exit) spawner_waiting(s, 1);
  *child = c;
  return 0;
}

void spawner_forget(struct spawner_child *c, int sig) {
  if (!c) return;
  if (c->on_exit) spawner_waiting(c->s, -1);
  c->on_pid = NULL;
  c->on_exit = NULL;
  c->arg = NULL;
  if (!c->pid) c->kill_sig = sig;
}

#ifdef CTUNE_TESTHOOKS
void spawner_test_die_next(struct spawner *s) { s->test_die = 1; }
#endif

void spawner_detach(struct spawner *s) {
  if (s && s->attached) {
    s->attached = 0;
    spawner_conn_close(s);
    uv_close((uv_handle_t *)&s->chld, NULL);
    uv_close((uv_handle_t *)&s->timer, NULL);
    uv_close((uv_handle_t *)&s->later, NULL);
  }
}

void spawner_free(struct spawner *s) {
  if (!s) return;
  if (s->pid > 0) {
    close(s->fd); /* end of file: it exits */
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  for (int list = 0; list < 3; list++) {
    struct spawner_child *c = list == 0 ? s->children : list == 1 ? s->pending : s->failed;
    while (c) {
      struct spawner_child *next = c->next;
      spawner_request_free(c);
      free(c);
      c = next;
    }
  }
  free(s);
}
