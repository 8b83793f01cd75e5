/* auth: token files, bearer and session checks (constant time), and the
 * request-head defences against cross-site requests and DNS rebinding. */
#include "auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "secret.h"

#define AUTH_MAX_SESSIONS 256

struct auth_session {
  char id[48]; /* "" when the slot is free */
  int role;
  uint64_t used; /* a counter, for least-recently-used eviction */
};

struct auth_sessions {
  pthread_mutex_t mu;
  uint64_t clock;
  struct auth_session s[AUTH_MAX_SESSIONS];
};

static int auth_token_ok(const char *t) {
  size_t n = strlen(t);
  if (n < 16 || n > 255) return 0;
  for (const char *p = t; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          strchr("._~+/=-_", *p)))
      return 0;
  return 1;
}

int auth_load(const char *path, char *admin, char *worker, char *viewer, size_t cap, char *err,
              size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
    return -EIO;
  }
  /* Checked on the open file, so the file read is the file checked. */
  struct stat st;
  if (fstat(fd, &st)) {
    snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
    close(fd);
    return -EIO;
  }
  if (st.st_mode & 077) {
    snprintf(err, errlen,
             "token file %s may be read or written by other users (mode %03o): "
             "anyone who reads it controls every worker. Run: chmod 600 %s",
             path, (unsigned)(st.st_mode & 0777), path);
    close(fd);
    return -EPERM;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    snprintf(err, errlen, "token file %s: %s", path, strerror(errno));
    return -EIO;
  }
  char line[1024], vbuf[256];
  int lineno = 0, rc = 0;
  admin[0] = worker[0] = vbuf[0] = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    lineno++;
    line[strcspn(line, "\r\n")] = 0;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#') continue;
    char *eq = strchr(p, '=');
    char *dst = NULL;
    size_t dcap = cap;
    if (eq && eq - p == 5 && !strncmp(p, "admin", 5))
      dst = admin;
    else if (eq && eq - p == 6 && !strncmp(p, "worker", 6))
      dst = worker;
    else if (eq && eq - p == 6 && !strncmp(p, "viewer", 6))
      dst = vbuf, dcap = sizeof vbuf;
    if (!dst) {
      snprintf(err, errlen, "%s:%d: expected admin=TOKEN, worker=TOKEN or viewer=TOKEN", path,
               lineno);
      rc = -EINVAL;
    } else if (!auth_token_ok(eq + 1) || strlen(eq + 1) >= dcap) {
      snprintf(err, errlen,
               "%s:%d: a token must be 16 to 255 characters of "
               "[A-Za-z0-9._~+/=-]",
               path, lineno);
      rc = -EINVAL;
    } else {
      snprintf(dst, dcap, "%s", eq + 1);
    }
  }
  fclose(f);
  if (rc) return rc;
  if (!admin[0] || !worker[0]) {
    snprintf(err, errlen, "%s: needs both an admin= and a worker= line", path);
    return -EINVAL;
  }
  if (!strcmp(admin, worker) || (vbuf[0] && (!strcmp(vbuf, admin) || !strcmp(vbuf, worker)))) {
    snprintf(err, errlen, "%s: the admin, worker and viewer tokens must differ", path);
    return -EINVAL;
  }
  if (viewer) snprintf(viewer, cap, "%s", vbuf);
  return 0;
}

/* n random bytes as URL-safe base64 without padding (43 characters for 32). */
static int auth_random_text(size_t nbytes, char *out, size_t cap) {
  static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  unsigned char raw[64];
  if (nbytes > sizeof raw || cap < (nbytes * 4 + 2) / 3 + 1) return -EINVAL;
  size_t got = 0;
  while (got < nbytes) {
    ssize_t n = getrandom(raw + got, nbytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    got += (size_t)n;
  }
  size_t o = 0;
  for (size_t i = 0; i < nbytes; i += 3) {
    unsigned v = (unsigned)raw[i] << 16;
    if (i + 1 < nbytes) v |= (unsigned)raw[i + 1] << 8;
    if (i + 2 < nbytes) v |= raw[i + 2];
    out[o++] = b64[(v >> 18) & 63];
    out[o++] = b64[(v >> 12) & 63];
    if (i + 1 < nbytes) out[o++] = b64[(v >> 6) & 63];
    if (i + 2 < nbytes) out[o++] = b64[v & 63];
  }
  out[o] = 0;
  return 0;
}

int auth_default_file(const char *db, char *path, size_t pathlen, char *admin, char *worker,
                      char *viewer, size_t cap, int *created, char *err, size_t errlen) {
  *created = 0;
  if (snprintf(path, pathlen, "%s.tokens", db) >= (int)pathlen) {
    snprintf(err, errlen, "--db %s: path too long", db);
    return -ENAMETOOLONG;
  }
  if (!access(path, F_OK)) return auth_load(path, admin, worker, viewer, cap, err, errlen);
  char a[64], w[64], v[64], tmp[4200];
  int rc;
  if ((rc = auth_random_text(32, a, sizeof a)) || (rc = auth_random_text(32, w, sizeof w)) ||
      (rc = auth_random_text(32, v, sizeof v))) {
    snprintf(err, errlen, "getrandom: %s", strerror(-rc));
    return -EIO;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  unlink(tmp); /* a leftover of a crashed start with our pid */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create token file %s: %s", tmp, strerror(errno));
    return -EIO;
  }
  char text[512];
  int n = snprintf(text, sizeof text,
                   "# ctune tokens (created by ctune-server; keep this file 0600).\n"
                   "# admin: full control, and so a shell on every worker (command trainables).\n"
                   "# worker: for ctune-worker. viewer: read-only dashboard.\n"
                   "admin=%s\nworker=%s\nviewer=%s\n",
                   a, w, v);
  int ok = fchmod(fd, 0600) == 0 && write(fd, text, (size_t)n) == n && fsync(fd) == 0;
  int e = errno;
  close(fd);
  /* link() refuses to replace: of two starts racing here only one file wins,
   * and both then read that one. */
  if (!ok || (link(tmp, path) && errno != EEXIST)) {
    if (ok) e = errno;
    unlink(tmp);
    snprintf(err, errlen, "cannot create token file %s: %s", path, strerror(e));
    return -EIO;
  }
  unlink(tmp);
  rc = auth_load(path, admin, worker, viewer, cap, err, errlen);
  if (!rc && !strcmp(admin, a)) *created = 1;
  return rc;
}

int auth_role(const char *authorization, const char *admin, const char *worker,
              const char *viewer) {
  if (!authorization || strncasecmp(authorization, "Bearer ", 7)) return -1;
  const char *tok = authorization + 7;
  while (*tok == ' ') tok++;
  if (!*tok) return -1;
  /* Check all so the time does not reveal which one matched. */
  int is_admin = secret_equal(tok, admin), is_worker = secret_equal(tok, worker);
  int is_viewer = viewer && viewer[0] && secret_equal(tok, viewer);
  if (is_admin) return RA_ADMIN;
  if (is_worker) return RA_WORKER;
  if (is_viewer) return AUTH_VIEWER;
  return -1;
}

int auth_is_loopback(const char *addr) {
  if (!strcmp(addr, "localhost")) return 1;
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, addr, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, addr, &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return 1;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
  }
  return 0;
}

int auth_rate_take(struct auth_rate *r, double burst, double per_s, double now, double *wait_s) {
  if (!r->started) {
    r->started = 1;
    r->tokens = burst;
    r->last = now;
  }
  if (now > r->last) {
    r->tokens += (now - r->last) * per_s;
    if (r->tokens > burst) r->tokens = burst;
    r->last = now;
  }
  if (r->tokens >= 1) {
    r->tokens -= 1;
    return 0;
  }
  *wait_s = (1 - r->tokens) / per_s;
  return -EAGAIN;
}

int auth_sessions_new(struct auth_sessions **out) {
  struct auth_sessions *ss = calloc(1, sizeof *ss);
  if (!ss) return -ENOMEM;
  if (pthread_mutex_init(&ss->mu, NULL)) {
    free(ss);
    return -ENOMEM;
  }
  *out = ss;
  return 0;
}

void auth_sessions_free(struct auth_sessions *ss) {
  if (!ss) return;
  pthread_mutex_destroy(&ss->mu);
  explicit_bzero(ss->s, sizeof ss->s);
  free(ss);
}

int auth_session_create(struct auth_sessions *ss, int role, char *id, size_t cap) {
  char v[48];
  int rc = auth_random_text(32, v, sizeof v);
  if (rc) return rc;
  if (cap < sizeof v) return -EINVAL;
  pthread_mutex_lock(&ss->mu);
  /* A free slot, else the least recently used session (its browser logs in
   * again); for a viewer, the least recently used viewer session: a viewer
   * logging in over and over pushes out viewer sessions, never the admin's. */
  struct auth_session *slot = NULL, *same = NULL, *any = NULL;
  for (int i = 0; i < AUTH_MAX_SESSIONS && !slot; i++) {
    struct auth_session *x = &ss->s[i];
    if (!x->id[0])
      slot = x;
    else {
      if (!any || x->used < any->used) any = x;
      if (x->role == AUTH_VIEWER && (!same || x->used < same->used)) same = x;
    }
  }
  if (!slot) slot = role == AUTH_VIEWER && same ? same : any;
  snprintf(slot->id, sizeof slot->id, "%s", v);
  slot->role = role;
  slot->used = ++ss->clock;
  pthread_mutex_unlock(&ss->mu);
  snprintf(id, cap, "%s", v);
  return 0;
}

int auth_session_lookup(struct auth_sessions *ss, const char *id) {
  int role = -1;
  if (!ss || !id || !id[0]) return -1;
  pthread_mutex_lock(&ss->mu);
  for (int i = 0; i < AUTH_MAX_SESSIONS; i++) {
    struct auth_session *x = &ss->s[i];
    /* Every slot compared, in constant time each. */
    if (x->id[0] && secret_equal(id, x->id)) {
      role = x->role;
      x->used = ++ss->clock;
    }
  }
  pthread_mutex_unlock(&ss->mu);
  return role;
}
