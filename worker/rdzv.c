/* rdzv: rendezvous ports of gang trials (rdzv.h). */
#include "rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int rdzv_ports_init(struct rdzv_ports *s, const char *run_dir) {
  s->dir[0] = '\0';
  char d[sizeof s->dir];
  if (snprintf(d, sizeof d, "%s/port", run_dir) >= (int)sizeof d) return -ENAMETOOLONG;
  if (mkdir(d, 0755) != 0 && errno != EEXIST) return -errno;
  snprintf(s->dir, sizeof s->dir, "%s", d);
  return 0;
}

/* The machine-wide claim of port: a locked fd, -EWOULDBLOCK when another
 * holder has it, or -1 without a claim dir (or when the file cannot be
 * made: this worker's own set still tells its trials apart). */
static int rdzv_claim(const struct rdzv_ports *s, int port) {
  if (!s->dir[0]) return -1;
  char p[sizeof s->dir + 16];
  snprintf(p, sizeof p, "%s/%d", s->dir, port);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -EWOULDBLOCK;
  }
  return fd;
}

int rdzv_probe_free_port(void *ctx) {
  (void)ctx;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  int rc = 0;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len))
    rc = -errno;
  close(fd);
  return rc ? rc : ntohs(a.sin_port);
}

static int rdzv_in_use(const struct rdzv_ports *s, int port) {
  for (size_t i = 0; i < s->n; i++)
    if (s->port[i] == port) return 1;
  return 0;
}

int rdzv_port_take(struct rdzv_ports *s, rdzv_probe_fn probe, void *ctx) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 8;
    int *p = realloc(s->port, nc * sizeof *p);
    if (!p) return -ENOMEM;
    s->port = p;
    int *f = realloc(s->fd, nc * sizeof *f);
    if (!f) return -ENOMEM;
    s->fd = f;
    s->cap = nc;
  }
  for (int tries = 0; tries < 64; tries++) {
    int port = probe(ctx);
    if (port < 0) return port;
    if (port == 0 || rdzv_in_use(s, port)) continue;
    int fd = rdzv_claim(s, port);
    if (fd == -EWOULDBLOCK) continue; /* another trial on this machine has it */
    s->fd[s->n] = fd;
    s->port[s->n++] = port;
    return port;
  }
  return -EADDRINUSE;
}

void rdzv_port_put(struct rdzv_ports *s, int port) {
  for (size_t i = 0; i < s->n; i++)
    if (s->port[i] == port) {
      if (s->fd[i] >= 0) close(s->fd[i]); /* the lock goes; the file may stay */
      s->n--;
      s->port[i] = s->port[s->n];
      s->fd[i] = s->fd[s->n];
      return;
    }
}

void rdzv_ports_free(struct rdzv_ports *s) {
  for (size_t i = 0; i < s->n; i++)
    if (s->fd[i] >= 0) close(s->fd[i]);
  free(s->port);
  free(s->fd);
  memset(s, 0, sizeof *s);
}
