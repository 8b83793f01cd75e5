/* preempt: the pure parts of a preemption notice (preempt.h). */
#include "preempt.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

struct preempt_plan preempt_plan(unsigned grace_ms, unsigned stop_grace_ms) {
  struct preempt_plan p = {grace_ms / 3, grace_ms / 3};
  if (p.term_ms > stop_grace_ms) p.term_ms = stop_grace_ms;
  return p;
}

int preempt_output_is_notice(const char *out) {
  if (!out) return 0;
  while (isspace((unsigned char)*out)) out++;
  size_t n = strlen(out);
  while (n > 0 && isspace((unsigned char)out[n - 1])) n--;
  if (n == 0) return 0;
  if ((n == 5 && !strncasecmp(out, "false", 5)) || (n == 1 && out[0] == '0')) return 0;
  return 1;
}

int preempt_status_catches(const char *status, int sig) {
  if (!status || sig < 1 || sig > 64) return 0;
  const char *p = strstr(status, "\nSigCgt:");
  if (!p) return 0;
  p += strlen("\nSigCgt:");
  char *end;
  errno = 0;
  uint64_t mask = strtoull(p, &end, 16);
  if (errno || end == p) return 0;
  return (mask >> (sig - 1)) & 1u;
}

int preempt_catches(pid_t pid, int sig) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return preempt_status_catches(buf, sig);
}

int preempt_request_file(const char *dir) {
  char path[4200];
  if (snprintf(path, sizeof path, "%s/%s", dir, PREEMPT_REQUEST_FILE) >= (int)sizeof path)
    return -ENAMETOOLONG;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -errno;
  close(fd);
  return 0;
}
