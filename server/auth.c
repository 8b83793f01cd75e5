/* auth: token file parsing and constant-time bearer checks. */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int auth_token_ok(const char *t) {
  size_t n = strlen(t);
  if (n < 16 || n > 255) return 0;
  for (const char *p = t; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          strchr("._~+/=-", *p)))
      return 0;
  return 1;
}

int auth_load(const char *path, char *admin, char *worker, size_t cap, char *err,
              size_t errlen) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(err, errlen, "--token-file %s: %s", path, strerror(errno));
    return -EIO;
  }
  char line[1024];
  int lineno = 0, rc = 0;
  admin[0] = worker[0] = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "\r\n")] = 0;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#') continue;
    char *eq = strchr(p, '=');
    char *dst = NULL;
    if (eq && eq - p == 5 && !strncmp(p, "admin", 5)) dst = admin;
    else if (eq && eq - p == 6 && !strncmp(p, "worker", 6)) dst = worker;
    if (!dst) {
      snprintf(err, errlen, "%s:%d: expected admin=TOKEN or worker=TOKEN", path, lineno);
      rc = -EINVAL;
    } else if (!auth_token_ok(eq + 1) || strlen(eq + 1) >= cap) {
      snprintf(err, errlen, "%s:%d: a token must be 16 to 255 characters of "
               "[A-Za-z0-9._~+/=-]", path, lineno);
      rc = -EINVAL;
    } else {
      snprintf(dst, cap, "%s", eq + 1);
    }
  }
  fclose(f);
  if (rc) return rc;
  if (!admin[0] || !worker[0]) {
    snprintf(err, errlen, "%s: needs both an admin= and a worker= line", path);
    return -EINVAL;
  }
  if (!strcmp(admin, worker)) {
    snprintf(err, errlen, "%s: the admin and worker tokens must differ", path);
    return -EINVAL;
  }
  return 0;
}

int auth_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  /* Walk the longer length so the time does not depend on a mismatch spot. */
  size_t n = la > lb ? la : lb;
  unsigned diff = (unsigned)(la ^ lb);
  for (size_t i = 0; i < n; i++) {
    unsigned char ca = i < la ? (unsigned char)a[i] : 0;
    unsigned char cb = i < lb ? (unsigned char)b[i] : 0;
    diff |= (unsigned)(ca ^ cb);
  }
  return diff == 0;
}

int auth_role(const char *authorization, const char *admin, const char *worker) {
  if (!authorization || strncasecmp(authorization, "Bearer ", 7)) return -1;
  const char *tok = authorization + 7;
  while (*tok == ' ') tok++;
  /* Check both so the time does not reveal which one matched. */
  int is_admin = auth_equal(tok, admin), is_worker = auth_equal(tok, worker);
  if (is_admin) return RA_ADMIN;
  if (is_worker) return RA_WORKER;
  return -1;
}

int auth_is_loopback(const char *addr) {
  return !strcmp(addr, "localhost") || !strncmp(addr, "127.", 4) || !strcmp(addr, "::1");
}
