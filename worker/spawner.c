/* The spawner process and the worker's side of it; see spawner.h. */
#include "spawner.h"

#include <errno.h>
#include <fcntl.h>
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
};

struct spawner_reply {
  int32_t pid;
  int32_t err;
};

struct spawner_child {
  struct spawner *s;
  pid_t pid;
  spawner_exit_cb cb;
  void *arg;
  struct spawner_child *next;
};

struct spawner {
  pid_t pid; /* 0: none (not started, or died: the next spawn starts one) */
  int fd;    /* the worker's end of the socketpair */
  uv_loop_t *loop;
  uv_signal_t chld;
  int attached;
  int waiting; /* children with a callback: the SIGCHLD handle is ref'd */
  struct spawner_child *children;
};

/* ---- the spawner process: async-signal-safe calls only, no allocation ---- */

static char spawner_buf[SPAWNER_MAX_REQ];
static char *spawner_strs[SPAWNER_MAX_STRINGS + 2];

static void spawner_say(int fd, const char *a, const char *b, int err) {
  const char *name = err ? strerrorname_np(err) : NULL;
  const char *parts[] = {"ctune-worker: ", a,   b ? " " : "", b ? b : "", name ? ": " : "",
                         name ? name : "", "\n"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (write(fd, parts[i], strlen(parts[i])) < 0) return;
}

static int spawner_read_full(int fd, char *p, size_t n) {
  while (n > 0) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static void spawner_default_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* In the cloned child: its own session, its stdio, default signals, exec. */
static void spawner_exec(const char *file, char **argv, char **env, const char *cwd,
                         const int *fds) {
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
  spawner_default_signals();
  int out = fds[1] >= 0 ? 2 : -1;
  if (cwd && chdir(cwd) != 0) {
    if (out >= 0) spawner_say(out, "cannot enter the trial's dir", cwd, errno);
    _exit(127);
  }
  execve(file, argv, env);
  if (out >= 0) spawner_say(out, "cannot run the trial's supervisor", file, errno);
  _exit(127);
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
  if ((size_t)n < sizeof h && spawner_read_full(sock, (char *)&h + n, sizeof h - (size_t)n) < 0)
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
      if (spawner_read_full(sock, spawner_buf, c) < 0) return -1;
      left -= c;
    }
  } else if (spawner_read_full(sock, spawner_buf, h.len) < 0) {
    return -1;
  } else {
    char *p = spawner_buf, *end = spawner_buf + h.len;
    char *head[3];
    char **argv = spawner_strs, **env = spawner_strs + h.nargv + 1;
    if (spawner_split(&p, end, h.has_cwd ? 2 : 1, head) < 0 ||
        spawner_split(&p, end, h.nargv, argv) < 0 || spawner_split(&p, end, h.nenv, env) < 0) {
      r.err = EINVAL;
    } else {
      /* The worker's child, not ours: its parent-death signal, getppid()
       * and exit status belong to the worker. */
      long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, NULL);
      if (pid == 0) spawner_exec(head[0], argv, env, h.has_cwd ? head[1] : NULL, fds);
      if (pid < 0)
        r.err = errno;
      else
        r.pid = (int32_t)pid;
    }
  }
  for (int i = 0; i < ngot; i++) close(got[i]);
  const char *w = (const char *)&r;
  for (size_t left = sizeof r; left > 0;) {
    ssize_t k2 = write(sock, w, left);
    if (k2 < 0 && errno == EINTR) continue;
    if (k2 <= 0) return -1;
    w += k2;
    left -= (size_t)k2;
  }
  return 0;
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
  /* Bounded waits on the socket: a spawner that hangs is a fault. */
  struct timeval tv = {SPAWNER_WAIT_MS / 1000, (SPAWNER_WAIT_MS % 1000) * 1000};
  setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  s->pid = pid;
  s->fd = sv[0];
  log_info("spawner: pid %d starts the trials' supervisors", (int)pid);
  return 0;
}

/* The spawner failed a request or died: it is ended (killed if need be, and
 * reaped) and the next spawn starts a new one. */
static void spawner_lost(struct spawner *s, const char *why, int err) {
  if (s->pid <= 0) return;
  log_error("spawner (pid %d) %s%s%s: starting a new one for the next trial", (int)s->pid, why,
            err ? ": " : "", err ? strerror(err) : "");
  kill(s->pid, SIGKILL);
  while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  close(s->fd);
  s->fd = -1;
  s->pid = 0;
}

int spawner_new(struct spawner **out) {
  struct spawner *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->fd = -1;
  int rc = spawner_fork(s);
  if (rc < 0) {
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

pid_t spawner_pid(const struct spawner *s) { return s->pid; }

static void spawner_waiting(struct spawner *s, int delta) {
  s->waiting += delta;
  if (!s->attached) return;
  if (s->waiting > 0)
    uv_ref((uv_handle_t *)&s->chld);
  else
    uv_unref((uv_handle_t *)&s->chld);
}

static void spawner_on_chld(uv_signal_t *h, int sig) {
  (void)sig;
  struct spawner *s = h->data;
  int st;
  if (s->pid > 0 && waitpid(s->pid, &st, WNOHANG) == s->pid) {
    char why[64];
    snprintf(why, sizeof why, "%s %d", WIFSIGNALED(st) ? "was killed by signal" : "exited with",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    close(s->fd);
    s->fd = -1;
    log_error("spawner (pid %d) %s: starting a new one for the next trial", (int)s->pid, why);
    s->pid = 0;
  }
  for (struct spawner_child **pp = &s->children; *pp;) {
    struct spawner_child *c = *pp;
    pid_t r;
    while ((r = waitpid(c->pid, &st, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r == 0 || (r < 0 && errno != ECHILD)) {
      pp = &c->next;
      continue;
    }
    *pp = c->next;
    if (r < 0) st = W_EXITCODE(127, 0); /* reaped by someone else: not ours to know */
    spawner_exit_cb cb = c->cb;
    void *arg = c->arg;
    if (cb) spawner_waiting(s, -1);
    free(c);
    if (cb) cb(arg, st);
  }
}

int spawner_attach(struct spawner *s, uv_loop_t *loop) {
  s->loop = loop;
  int rc = uv_signal_init(loop, &s->chld);
  if (rc < 0) return rc;
  s->chld.data = s;
  rc = uv_signal_start(&s->chld, spawner_on_chld, SIGCHLD);
  if (rc < 0) {
    uv_close((uv_handle_t *)&s->chld, NULL);
    return rc;
  }
  s->attached = 1;
  spawner_waiting(s, 0);
  return 0;
}

static int spawner_send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    p += k;
    n -= (size_t)k;
  }
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
  char *buf = malloc(len ? len : 1), *p = buf;
  if (!buf) return NULL;
  const char *head[2] = {r->file, r->cwd};
  for (int i = 0; i < (r->cwd ? 2 : 1); i++) p = stpcpy(p, head[i]) + 1;
  for (uint32_t i = 0; i < na; i++) p = stpcpy(p, r->argv[i]) + 1;
  for (uint32_t i = 0; i < ne; i++) p = stpcpy(p, r->env[i]) + 1;
  *h = (struct spawner_hdr){SPAWNER_MAGIC, (uint32_t)len, na, ne, r->cwd != NULL, 0};
  return buf;
}

/* One request and its answer: the pid, or a negative errno (-EPIPE and
 * the like: the spawner is at fault). */
static int spawner_ask(struct spawner *s, struct spawner_hdr *h, const char *body,
                       const struct spawner_req *r, int *fault) {
  char cbuf[CMSG_SPACE(3 * sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  int fds[3], nf = 0;
  h->fdmask = 0;
  for (int i = 0; i < 3; i++)
    if (r->fds[i] >= 0) {
      fds[nf++] = r->fds[i];
      h->fdmask |= 1u << i;
    }
  struct iovec iov = {h, sizeof *h};
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (nf) {
    m.msg_control = cbuf;
    m.msg_controllen = CMSG_SPACE(nf * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nf * sizeof(int));
    memcpy(CMSG_DATA(c), fds, nf * sizeof(int));
  }
  *fault = 1;
  ssize_t n;
  do n = sendmsg(s->fd, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  int rc = spawner_send_all(s->fd, (const char *)h + n, sizeof *h - (size_t)n);
  if (rc == 0) rc = spawner_send_all(s->fd, body, h->len);
  if (rc < 0) return rc;
  struct spawner_reply rep;
  size_t got = 0;
  while (got < sizeof rep) {
    ssize_t k = recv(s->fd, (char *)&rep + got, sizeof rep - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) return -EPIPE;
    if (k < 0) return -errno;
    got += (size_t)k;
  }
  *fault = 0;
  if (rep.pid > 0) return rep.pid;
  return rep.err > 0 ? -rep.err : -EIO;
}

int spawner_spawn(struct spawner *s, const struct spawner_req *r, spawner_exit_cb on_exit,
                  void *arg, struct spawner_child **child) {
  struct spawner_hdr h;
  char *body = spawner_pack(r, &h);
  if (!body) return -errno;
  struct spawner_child *c = calloc(1, sizeof *c);
  if (!c) {
    free(body);
    return -ENOMEM;
  }
  int rc = -EIO;
  /* A spawner that failed is replaced once, for this very request. */
  for (int tries = 0; tries < 2; tries++) {
    if (s->pid <= 0 && (rc = spawner_fork(s)) < 0) break;
    int fault = 0;
    rc = spawner_ask(s, &h, body, r, &fault);
    if (!fault) break;
    spawner_lost(s, rc == -EAGAIN ? "did not answer in time" : "failed a request", -rc);
  }
  free(body);
  if (rc < 0) {
    free(c);
    return rc;
  }
  c->s = s;
  c->pid = rc;
  c->cb = on_exit;
  c->arg = arg;
  c->next = s->children;
  s->children = c;
  if (on_exit) spawner_waiting(s, 1);
  *child = c;
  return rc;
}

void spawner_forget(struct spawner_child *c) {
  if (!c || !c->cb) return;
  c->cb = NULL;
  c->arg = NULL;
  spawner_waiting(c->s, -1);
}

void spawner_detach(struct spawner *s) {
  if (s && s->attached) {
    s->attached = 0;
    uv_close((uv_handle_t *)&s->chld, NULL);
  }
}

void spawner_free(struct spawner *s) {
  if (!s) return;
  if (s->pid > 0) {
    close(s->fd); /* end of file: it exits */
    while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  while (s->children) {
    struct spawner_child *c = s->children;
    s->children = c->next;
    free(c);
  }
  free(s);
}
