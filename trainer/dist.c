/* The member processes of one trial (dist.h): torchrun's variables and the
 * rendezvous that shares rank 0's NCCL id. A connection carries the peer's
 * rank (4 bytes, network order) one way and the blob back. */
#include "dist.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

/* An integer variable in [lo, hi]; *set 0 when unset or empty. */
static int env_int(const char *name, long lo, long hi, long *out, int *set, char *err,
                   size_t errlen) {
  const char *v = getenv(name);
  char *end;
  *set = 0;
  if (!v || !*v) return 0;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || *end || n < lo || n > hi) {
    snprintf(err, errlen, "%s=%s: expected an integer from %ld to %ld", name, v, lo, hi);
    return -EINVAL;
  }
  *out = n;
  *set = 1;
  return 0;
}

int dist_from_env(struct dist *d, char *err, size_t errlen) {
  long world = 1, rank = 0, port = 0;
  int set, rc;
  memset(d, 0, sizeof(*d));
  d->world_size = 1;
  if ((rc = env_int("WORLD_SIZE", 1, 65536, &world, &set, err, errlen)) < 0) return rc;
  if (world == 1) return 0;
  if ((rc = env_int("RANK", 0, world - 1, &rank, &set, err, errlen)) < 0) return rc;
  if (!set) {
    snprintf(err, errlen, "WORLD_SIZE=%ld but RANK is unset (a member needs its rank)", world);
    return -EINVAL;
  }
  if ((rc = env_int("MASTER_PORT", 1, 65535, &port, &set, err, errlen)) < 0) return rc;
  const char *addr = getenv("MASTER_ADDR");
  if (!set || !addr || !*addr) {
    snprintf(err, errlen,
             "WORLD_SIZE=%ld but MASTER_ADDR or MASTER_PORT is unset (the "
             "rendezvous of the trial's members needs both)",
             world);
    return -EINVAL;
  }
  if (strlen(addr) >= sizeof(d->addr)) {
    snprintf(err, errlen, "MASTER_ADDR is longer than %zu bytes", sizeof(d->addr) - 1);
    return -EINVAL;
  }
  d->world_size = (int)world;
  d->rank = (int)rank;
  snprintf(d->addr, sizeof(d->addr), "%s", addr);
  snprintf(d->port, sizeof(d->port), "%ld", port);
  return 0;
}

static int ms_left(double deadline) {
  double left = deadline - clock_mono_s();
  return left > 0 ? (int)(left * 1000.0) + 1 : 0;
}

/* Moves len bytes on a connected socket before the deadline. */
static int move_all(int fd, void *buf, size_t len, int writing, double deadline) {
  char *p = buf;
  while (len > 0) {
    struct pollfd pfd = {fd, writing ? POLLOUT : POLLIN, 0};
    int n = poll(&pfd, 1, ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? -ETIMEDOUT : -errno;
    ssize_t k = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return k == 0 ? -ECONNRESET : -errno;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

static int serve(const struct dist *d, const void *blob, size_t len, double deadline, char *err,
                 size_t errlen) {
  struct addrinfo hints = {
      .ai_flags = AI_PASSIVE, .ai_family = AF_INET6, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  int lfd = -1, rc = 0, served = 0, one = 1, zero = 0;
  char *seen = calloc((size_t)d->world_size, 1);
  if (!seen) return -ENOMEM;
  /* one dual-stack socket: peers may come as IPv4 or IPv6 */
  if (getaddrinfo(NULL, d->port, &hints, &ai) != 0 ||
      (lfd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0)) < 0 ||
      setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0 ||
      bind(lfd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(lfd, d->world_size) < 0) {
    rc = errno ? -errno : -EIO;
    snprintf(err, errlen, "rank 0 cannot listen on MASTER_PORT=%s: %s", d->port, strerror(-rc));
    goto out;
  }
  while (served < d->world_size - 1) {
    struct pollfd pfd = {lfd, POLLIN, 0};
    int n = poll(&pfd, 1, ms_left(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      rc = n == 0 ? -ETIMEDOUT : -errno;
      snprintf(err, errlen, "rank 0: %d of %d members joined the rendezvous on port %s in time",
               served + 1, d->world_size, d->port);
      goto out;
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue; /* the peer gave up already: it will come again */
    uint32_t r_net;
    int r = move_all(fd, &r_net, sizeof(r_net), 0, deadline);
    uint32_t r_host = ntohl(r_net);
    if (r == 0 && (r_host < 1 || r_host >= (uint32_t)d->world_size || seen[r_host])) {
      close(fd);
      rc = -EPROTO;
      snprintf(err, errlen, "rank 0: a member said it is rank %u of %d (or came twice)", r_host,
               d->world_size);
      goto out;
    }
    if (r == 0) r = move_all(fd, (void *)blob, len, 1, deadline);
    close(fd);
    if (r == 0) {
      seen[r_host] = 1;
      served++;
    }
  }
out:
  if (lfd >= 0) close(lfd);
  if (ai) freeaddrinfo(ai);
  free(seen);
  return rc;
}

/* One try: 0, or -ECONNREFUSED and the like while rank 0 is not listening. */
static int fetch_once(const struct dist *d, const struct addrinfo *a, void *blob, size_t len,
                      double deadline) {
  int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int rc = 0;
  if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
    rc = -errno;
  } else {
    uint32_t r_net = htonl((uint32_t)d->rank);
    rc = move_all(fd, &r_net, sizeof(r_net), 1, deadline);
    if (rc == 0) rc = move_all(fd, blob, len, 0, deadline);
  }
  close(fd);
  return rc;
}

static int fetch(const struct dist *d, void *blob, size_t len, double deadline, char *err,
                 size_t errlen) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  int g = getaddrinfo(d->addr, d->port, &hints, &ai);
  if (g != 0) {
    snprintf(err, errlen, "MASTER_ADDR=%s: %s", d->addr, gai_strerror(g));
    return -EINVAL;
  }
  int rc;
  /* Rank 0 may start later than this member: a refused connection is tried
   * again, 20 ms apart (nothing here can wait on another process's listen),
   * until the deadline. */
  for (;;) {
    rc = fetch_once(d, ai, blob, len, deadline);
    if (rc != -ECONNREFUSED && rc != -ECONNRESET) break;
    if (ms_left(deadline) <= 20) {
      rc = -ETIMEDOUT;
      break;
    }
    poll(NULL, 0, 20);
  }
  freeaddrinfo(ai);
  if (rc)
    snprintf(err, errlen, "rank %d cannot get the NCCL id from rank 0 at %s:%s: %s", d->rank,
             d->addr, d->port, strerror(-rc));
  return rc;
}

int dist_share(const struct dist *d, void *blob, size_t len, int timeout_ms, char *err,
               size_t errlen) {
  if (d->world_size < 2) return 0;
  const double deadline = clock_mono_s() + timeout_ms / 1000.0;
  if (d->rank == 0) return serve(d, blob, len, deadline, err, errlen);
  return fetch(d, blob, len, deadline, err, errlen);
}
