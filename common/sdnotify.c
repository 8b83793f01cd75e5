/* sdnotify: one datagram to $NOTIFY_SOCKET (see sdnotify.h). libsystemd is
 * not linked: the protocol is a single sendto(), and a container or a Slurm
 * node without systemd must not need the library. */
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

static int sdnotify_send(const char *addr, const char *state) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(addr);
  if (addr[0] != '/' && addr[0] != '@') return -EINVAL;
  if (n >= sizeof sa.sun_path) return -ENAMETOOLONG;
  memcpy(sa.sun_path, addr, n);
  /* An abstract name starts with a NUL byte and is exactly n bytes long:
   * the length passed to sendto() must not count a terminator. */
  if (addr[0] == '@') sa.sun_path[0] = '\0';
  socklen_t len =
      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (addr[0] == '/' ? 1 : 0));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int rc = 0;
  ssize_t w;
  do {
    w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
  } while (w < 0 && errno == EINTR);
  if (w < 0)
    rc = -errno;
  else if ((size_t)w != strlen(state))
    rc = -EIO;
  close(fd);
  return rc;
}

int sdnotify(const char *state) {
  const char *addr = getenv("NOTIFY_SOCKET");
  if (!addr || !*addr) return 0;
  int rc = sdnotify_send(addr, state);
  /* Said, not fatal: a unit waiting for READY=1 times out and names itself,
   * and the daemon itself works without the notification. */
  if (rc < 0) log_warn("cannot tell %s to NOTIFY_SOCKET %s: %s", state, addr, strerror(-rc));
  return rc;
}
