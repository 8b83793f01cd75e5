/* rdzv: rendezvous ports of gang trials (rdzv.h). */
#include "rdzv.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

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
    s->cap = nc;
  }
  for (int tries = 0; tries < 64; tries++) {
    int port = probe(ctx);
    if (port < 0) return port;
    if (port == 0 || rdzv_in_use(s, port)) continue;
    s->port[s->n++] = port;
    return port;
  }
  return -EADDRINUSE;
}

void rdzv_port_put(struct rdzv_ports *s, int port) {
  for (size_t i = 0; i < s->n; i++)
    if (s->port[i] == port) {
      s->port[i] = s->port[--s->n];
      return;
    }
}

void rdzv_ports_free(struct rdzv_ports *s) {
  free(s->port);
  *s = (struct rdzv_ports){0};
}
