/* The floor under ctune-server's durable result ingestion on this machine:
 * HTTP servers that do nothing with a result but (optionally) make it
 * durable, driven by the same wrk script as the real server
 * (bench_results.py --floor builds and runs this).
 *
 *   http_floor MODE [DIR]      prints "listening on 127.0.0.1:PORT"
 *
 * MODE:
 *   mhd            libmicrohttpd set up as ctune-server sets it up (internal
 *                  epoll, a pool of 2 threads, connections handed over by an
 *                  acceptor thread), every POST answered at once from one
 *                  shared response: what libmicrohttpd and the kernel cost.
 *   mhd-durable    the same, but each request is suspended and queued; one
 *                  writer thread appends each batch's bodies to DIR/floor.log,
 *                  fdatasyncs it and resumes the batch: ctune's durable path
 *                  without SQLite, routing, authentication or state.
 *   mhd-tpc-durable  libmicrohttpd with a thread per connection, whose
 *                  handler waits for its batch's fdatasync (no suspend or
 *                  resume: libmicrohttpd offers neither in that mode).
 *   epoll          no library: 2 epoll threads, a keep-alive HTTP/1.1 reader
 *                  of Content-Length bodies, a fixed reply: the floor of the
 *                  kernel's loopback TCP and the client.
 *   epoll-durable  the same with the writer: it appends and fdatasyncs each
 *                  batch and sends the batch's replies itself (no suspend, no
 *                  resume, no wake-up of the reading thread).
 *
 * Every reply is the 200 a result gets from ctune-server, byte for byte the
 * same length. SIGTERM or SIGINT stops it; it prints the requests answered
 * and the batches flushed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define FLOOR_THREADS 2
#define FLOOR_BODY_MAX 4096
#define FLOOR_BUF 16384

static const char floor_body[] = "{\"decision\":\"continue\"}";

static int floor_listen_fd = -1;
static int floor_log_fd = -1;
static atomic_long floor_answered, floor_batches;

/* ---- the writer: one queue of pending requests, one thread -------------- */

struct floor_item {
  struct floor_item *next;
  void *owner; /* the MHD connection state or the epoll connection */
  size_t len;
  char body[];
};

static pthread_mutex_t floor_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t floor_cv = PTHREAD_COND_INITIALIZER;
static struct floor_item *floor_head, **floor_tail = &floor_head;
static void (*floor_release)(struct floor_item *);

static int floor_enqueue(void *owner, const char *body, size_t len) {
  struct floor_item *it = malloc(sizeof *it + len);
  if (!it) return -ENOMEM;
  it->next = NULL;
  it->owner = owner;
  it->len = len;
  memcpy(it->body, body, len);
  pthread_mutex_lock(&floor_mu);
  *floor_tail = it;
  floor_tail = &it->next;
  pthread_cond_signal(&floor_cv);
  pthread_mutex_unlock(&floor_mu);
  return 0;
}

static void *floor_writer(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&floor_mu);
    while (!floor_head) pthread_cond_wait(&floor_cv, &floor_mu);
    struct floor_item *batch = floor_head;
    floor_head = NULL;
    floor_tail = &floor_head;
    pthread_mutex_unlock(&floor_mu);
    struct iovec iov[64];
    int n = 0;
    for (struct floor_item *it = batch; it; it = it->next) {
      iov[n++] = (struct iovec){it->body, it->len};
      if (n == 64 || !it->next) {
        if (writev(floor_log_fd, iov, n) < 0) perror("writev");
        n = 0;
      }
    }
    if (fdatasync(floor_log_fd) != 0) perror("fdatasync");
    atomic_fetch_add(&floor_batches, 1);
    while (batch) {
      struct floor_item *next = batch->next;
      floor_release(batch);
      free(batch);
      batch = next;
    }
  }
  return NULL;
}

/* ---- libmicrohttpd ------------------------------------------------------ */

static struct MHD_Daemon *floor_mhd;
static struct MHD_Response *floor_response;
static int floor_durable;

static int floor_tpc; /* a thread per connection: the handler waits */

struct floor_req {
  struct MHD_Connection *conn;
  size_t len;
  int done;             /* 1 once its batch is durable */
  pthread_cond_t ready; /* floor_tpc: signalled with floor_mu held */
  char body[FLOOR_BODY_MAX];
};

static void floor_mhd_release(struct floor_item *it) {
  struct floor_req *r = it->owner;
  if (floor_tpc) {
    pthread_mutex_lock(&floor_mu);
    r->done = 1;
    pthread_cond_signal(&r->ready);
    pthread_mutex_unlock(&floor_mu);
    return;
  }
  r->done = 1;
  MHD_resume_connection(r->conn);
}

static enum MHD_Result floor_access(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version, const char *upload,
                                    size_t *upload_size, void **ctx) {
  (void)cls, (void)url, (void)method, (void)version;
  struct floor_req *r = *ctx;
  if (!r) {
    if (!(r = calloc(1, sizeof *r))) return MHD_NO;
    r->conn = conn;
    pthread_cond_init(&r->ready, NULL);
    *ctx = r;
    return MHD_YES;
  }
  if (*upload_size) {
    size_t k = *upload_size;
    if (r->len + k > sizeof r->body) return MHD_NO;
    memcpy(r->body + r->len, upload, k);
    r->len += k;
    *upload_size = 0;
    return MHD_YES;
  }
  if (floor_durable && floor_tpc) {
    if (floor_enqueue(r, r->body, r->len) < 0) return MHD_NO;
    pthread_mutex_lock(&floor_mu);
    while (!r->done) pthread_cond_wait(&r->ready, &floor_mu);
    pthread_mutex_unlock(&floor_mu);
  } else if (floor_durable && !r->done) {
    MHD_suspend_connection(conn);
    if (floor_enqueue(r, r->body, r->len) < 0) return MHD_NO;
    return MHD_YES;
  }
  atomic_fetch_add(&floor_answered, 1);
  return MHD_queue_response(conn, MHD_HTTP_OK, floor_response);
}

static void floor_completed(void *cls, struct MHD_Connection *conn, void **ctx,
                            enum MHD_RequestTerminationCode why) {
  (void)cls, (void)conn, (void)why;
  struct floor_req *r = *ctx;
  if (r) pthread_cond_destroy(&r->ready);
  free(r);
  *ctx = NULL;
}

static void *floor_acceptor(void *arg) {
  (void)arg;
  for (;;) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(floor_listen_fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;
    }
    MHD_add_connection(floor_mhd, fd, (struct sockaddr *)&ss, sl);
  }
  return NULL;
}

static int floor_mhd_start(void) {
  floor_response = MHD_create_response_from_buffer(strlen(floor_body), (void *)floor_body,
                                                   MHD_RESPMEM_PERSISTENT);
  if (!floor_response) return -ENOMEM;
  MHD_add_response_header(floor_response, "Content-Type", "application/json");
  floor_release = floor_mhd_release;
  if (floor_tpc)
    floor_mhd =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                             MHD_USE_POLL | MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC,
                         0, NULL, NULL, floor_access, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                         floor_completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_END);
  else
    floor_mhd = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_TURBO | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC,
        0, NULL, NULL, floor_access, NULL, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)FLOOR_THREADS,
        MHD_OPTION_NOTIFY_COMPLETED, floor_completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 1024u,
        MHD_OPTION_END);
  if (!floor_mhd) return -EIO;
  pthread_t t;
  return -pthread_create(&t, NULL, floor_acceptor, NULL);
}

/* ---- epoll -------------------------------------------------------------- */

static char floor_reply[256];
static size_t floor_reply_len;

struct floor_conn {
  int fd;
  int refs; /* the reading thread's, and the writer's while a reply is owed */
  int closed;
  size_t have;
  char buf[FLOOR_BUF];
};

static pthread_mutex_t floor_conn_mu = PTHREAD_MUTEX_INITIALIZER;

static void floor_conn_put(struct floor_conn *c) {
  pthread_mutex_lock(&floor_conn_mu);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&floor_conn_mu);
  if (last) {
    close(c->fd);
    free(c);
  }
}

static void floor_epoll_release(struct floor_item *it) {
  struct floor_conn *c = it->owner;
  pthread_mutex_lock(&floor_conn_mu);
  int closed = c->closed;
  pthread_mutex_unlock(&floor_conn_mu);
  /* A small reply into a socket whose peer waits for it: it fits. */
  if (!closed && send(c->fd, floor_reply, floor_reply_len, MSG_NOSIGNAL) > 0)
    atomic_fetch_add(&floor_answered, 1);
  floor_conn_put(c);
}

/* The length of the first complete request in buf, 0 if it is not all
 * there yet, -1 if it is not one this floor reads. */
static long floor_request_len(const char *buf, size_t have) {
  const char *end = memmem(buf, have, "\r\n\r\n", 4);
  if (!end) return have >= FLOOR_BUF ? -1 : 0;
  size_t head = (size_t)(end - buf) + 4;
  long body = 0;
  for (const char *p = buf; p < end; p++) {
    if ((p == buf || p[-1] == '\n') && !strncasecmp(p, "Content-Length:", 15)) {
      body = strtol(p + 15, NULL, 10);
      break;
    }
  }
  if (body < 0 || body > FLOOR_BODY_MAX) return -1;
  return head + (size_t)body <= have ? (long)(head + (size_t)body) : 0;
}

/* Reads what came; answers (or queues) every complete request. 0 to keep
 * the connection, -1 to drop it. */
static int floor_conn_read(struct floor_conn *c) {
  for (;;) {
    ssize_t k = recv(c->fd, c->buf + c->have, sizeof c->buf - c->have, 0);
    if (k == 0) return -1;
    if (k < 0) return errno == EAGAIN ? 0 : -1;
    c->have += (size_t)k;
    long n;
    while ((n = floor_request_len(c->buf, c->have)) > 0) {
      if (floor_durable) {
        pthread_mutex_lock(&floor_conn_mu);
        c->refs++;
        pthread_mutex_unlock(&floor_conn_mu);
        const char *body = memmem(c->buf, (size_t)n, "\r\n\r\n", 4) + 4;
        if (floor_enqueue(c, body, (size_t)(c->buf + n - body)) < 0) return -1;
      } else {
        if (send(c->fd, floor_reply, floor_reply_len, MSG_NOSIGNAL) < 0) return -1;
        atomic_fetch_add(&floor_answered, 1);
      }
      memmove(c->buf, c->buf + n, c->have - (size_t)n);
      c->have -= (size_t)n;
    }
    if (n < 0) return -1;
    if ((size_t)k < sizeof c->buf) return 0; /* drained */
  }
}

static int floor_ep[FLOOR_THREADS];

static void *floor_epoll_loop(void *arg) {
  int ep = *(int *)arg;
  struct epoll_event ev[64];
  for (;;) {
    int n = epoll_wait(ep, ev, 64, -1);
    for (int i = 0; i < n; i++) {
      struct floor_conn *c = ev[i].data.ptr;
      if (floor_conn_read(c) < 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        pthread_mutex_lock(&floor_conn_mu);
        c->closed = 1;
        pthread_mutex_unlock(&floor_conn_mu);
        shutdown(c->fd, SHUT_RDWR);
        floor_conn_put(c);
      }
    }
  }
  return NULL;
}

static void *floor_epoll_acceptor(void *arg) {
  (void)arg;
  for (unsigned next = 0;; next++) {
    int fd = accept4(floor_listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct floor_conn *c = calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->fd = fd;
    c->refs = 1;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = c};
    if (epoll_ctl(floor_ep[next % FLOOR_THREADS], EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      free(c);
    }
  }
  return NULL;
}

static int floor_epoll_start(void) {
  floor_reply_len = (size_t)snprintf(floor_reply, sizeof floor_reply,
                                     "HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\n"
                                     "Content-Length: %zu\r\nContent-Type: application/json\r\n"
                                     "Date: Sat, 28 Nov 2026 00:00:00 GMT\r\n\r\n%s",
                                     strlen(floor_body), floor_body);
  floor_release = floor_epoll_release;
  pthread_t t;
  for (int i = 0; i < FLOOR_THREADS; i++) {
    if ((floor_ep[i] = epoll_create1(EPOLL_CLOEXEC)) < 0) return -errno;
    int rc = pthread_create(&t, NULL, floor_epoll_loop, &floor_ep[i]);
    if (rc) return -rc;
  }
  return -pthread_create(&t, NULL, floor_epoll_acceptor, NULL);
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  const char *dir = argc > 2 ? argv[2] : ".";
  int mhd =
      !strcmp(mode, "mhd") || !strcmp(mode, "mhd-durable") || !strcmp(mode, "mhd-tpc-durable");
  floor_tpc = !strcmp(mode, "mhd-tpc-durable");
  int epoll = !strcmp(mode, "epoll") || !strcmp(mode, "epoll-durable");
  if (!mhd && !epoll) {
    fprintf(stderr, "usage: http_floor mhd|mhd-durable|mhd-tpc-durable|epoll|epoll-durable [DIR]\n"
                    "  (bench/server/http_floor.c says what each mode measures)\n");
    return 2;
  }
  floor_durable = strstr(mode, "-durable") != NULL;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, NULL); /* every thread made below inherits it */
  if (floor_durable) {
    char path[4096];
    snprintf(path, sizeof path, "%s/floor.log", dir);
    floor_log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    if (floor_log_fd < 0) {
      fprintf(stderr, "http_floor: %s: %s\n", path, strerror(errno));
      return 1;
    }
  }
  floor_listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  int one = 1;
  setsockopt(floor_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (floor_listen_fd < 0 || bind(floor_listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(floor_listen_fd, 1024) != 0 ||
      getsockname(floor_listen_fd, (struct sockaddr *)&sa, &sl) != 0) {
    perror("http_floor: listen");
    return 1;
  }
  int rc = mhd ? floor_mhd_start() : floor_epoll_start();
  if (rc < 0) {
    fprintf(stderr, "http_floor: cannot start %s: %s\n", mode, strerror(-rc));
    return 1;
  }
  if (floor_durable) {
    pthread_t t;
    if ((rc = pthread_create(&t, NULL, floor_writer, NULL)) != 0) {
      fprintf(stderr, "http_floor: writer: %s\n", strerror(rc));
      return 1;
    }
  }
  printf("listening on 127.0.0.1:%d\n", ntohs(sa.sin_port));
  fflush(stdout);
  int sig;
  sigwait(&stop, &sig);
  printf("answered %ld requests, %ld durable batches\n", atomic_load(&floor_answered),
         atomic_load(&floor_batches));
  fflush(stdout);
  _exit(0); /* the threads hold connections mid-flight: no orderly teardown */
}
