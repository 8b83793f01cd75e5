/* The isolation policy of one worker (see isolate.h). */
#include "isolate.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct isolate *isolate_installed;

void isolate_install(const struct isolate *iso) { isolate_installed = iso; }
const struct isolate *isolate_current(void) { return isolate_installed; }

static int isolate_err(char *err, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int isolate_err(char *err, size_t len, int rc, const char *fmt, ...) {
  if (err && len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* Calls fn for each non-empty item of a comma list. */
static int isolate_each(const char *list, int (*fn)(struct isolate *, const char *, char *, size_t),
                        struct isolate *iso, char *err, size_t len) {
  char *copy = strdup(list), *save = NULL;
  if (!copy) return -ENOMEM;
  int rc = 0, any = 0;
  for (char *it = strtok_r(copy, ",", &save); it && rc == 0; it = strtok_r(NULL, ",", &save)) {
    while (*it == ' ') it++;
    if (!*it) continue;
    any = 1;
    rc = fn(iso, it, err, len);
  }
  free(copy);
  if (rc == 0 && !any) rc = isolate_err(err, len, -EINVAL, "empty list");
  return rc;
}

static int isolate_add_kind(struct isolate *iso, const char *k, char *err, size_t len) {
  if (!strcmp(k, "builtin"))
    iso->trainables |= ISOLATE_BUILTIN;
  else if (!strcmp(k, "command"))
    iso->trainables |= ISOLATE_COMMAND;
  else if (!strcmp(k, "all"))
    iso->trainables |= ISOLATE_ALL;
  else
    return isolate_err(err, len, -EINVAL, "'%s' is not builtin, command or all", k);
  return 0;
}

int isolate_parse_trainables(struct isolate *iso, const char *arg, char *err, size_t len) {
  iso->trainables = 0;
  return isolate_each(arg, isolate_add_kind, iso, err, len);
}

static int isolate_add_allow(struct isolate *iso, const char *p, char *err, size_t len) {
  if (p[0] != '/') return isolate_err(err, len, -EINVAL, "'%s' is not an absolute path", p);
  if (iso->nallow >= ISOLATE_MAX_ALLOW)
    return isolate_err(err, len, -E2BIG, "more than %d programs", ISOLATE_MAX_ALLOW);
  char *real = realpath(p, NULL);
  if (!real) return isolate_err(err, len, -errno, "%s: %s", p, strerror(errno));
  iso->allow[iso->nallow++] = real;
  return 0;
}

int isolate_parse_allow(struct isolate *iso, const char *list, char *err, size_t len) {
  return isolate_each(list, isolate_add_allow, iso, err, len);
}

static int isolate_add_pass(struct isolate *iso, const char *name, char *err, size_t len) {
  if (strchr(name, '='))
    return isolate_err(err, len, -EINVAL, "'%s': give variable names only", name);
  if (iso->npass >= ISOLATE_MAX_PASS)
    return isolate_err(err, len, -E2BIG, "more than %d names", ISOLATE_MAX_PASS);
  if (!(iso->pass[iso->npass] = strdup(name))) return -ENOMEM;
  iso->npass++;
  return 0;
}

int isolate_parse_pass_env(struct isolate *iso, const char *list, char *err, size_t len) {
  return isolate_each(list, isolate_add_pass, iso, err, len);
}

int isolate_set_user(struct isolate *iso, const char *user, char *err, size_t len) {
  errno = 0;
  struct passwd *pw = getpwnam(user);
  if (!pw) {
    char *end;
    long uid = strtol(user, &end, 10);
    if (*user && !*end && uid >= 0) pw = getpwuid((uid_t)uid);
  }
  if (!pw) return isolate_err(err, len, -ENOENT, "no user '%s' in the passwd database", user);
  if (pw->pw_uid == 0 || pw->pw_gid == 0)
    return isolate_err(err, len, -EINVAL, "'%s' is root (uid or gid 0): give an unprivileged user",
                       user);
  iso->run_as = 1;
  iso->uid = pw->pw_uid;
  iso->gid = pw->pw_gid;
  snprintf(iso->user, sizeof iso->user, "%s", pw->pw_name);
  snprintf(iso->home, sizeof iso->home, "%s", pw->pw_dir && *pw->pw_dir ? pw->pw_dir : "/");
  /* Its own supplementary groups (video/render for GPUs), read here once:
   * the supervisor then needs no NSS lookup between fork and exec. */
  int n = ISOLATE_MAX_GROUPS;
  if (getgrouplist(pw->pw_name, pw->pw_gid, iso->groups, &n) < 0) n = ISOLATE_MAX_GROUPS;
  iso->ngroups = 0;
  for (int i = 0; i < n; i++)
    if (iso->groups[i] != 0) iso->groups[iso->ngroups++] = iso->groups[i]; /* never root's */
  return 0;
}

void isolate_free(struct isolate *iso) {
  for (int i = 0; i < iso->nallow; i++) free(iso->allow[i]);
  for (int i = 0; i < iso->npass; i++) free(iso->pass[i]);
  for (int i = 0; i < iso->nhide; i++) free(iso->hide[i]);
  for (int i = 0; i < iso->nshow; i++) free(iso->show[i]);
  iso->nallow = iso->npass = iso->nhide = iso->nshow = 0;
}

int isolate_add_view(struct isolate *iso, int show, const char *path) {
  char **list = show ? iso->show : iso->hide;
  int *n = show ? &iso->nshow : &iso->nhide;
  if (*n >= ISOLATE_MAX_VIEW) return -E2BIG;
  /* The mounts name real paths: a symlink on the way would be followed at
   * mount time anyway, but the dirs to show must be found under the covers
   * by the same names. */
  char *p = realpath(path, NULL), cwd[PATH_MAX];
  if (!p && path[0] != '/' && getcwd(cwd, sizeof cwd)) {
    /* Not there yet (a database's -wal): absolute all the same, since the
     * supervisor resolves it from the trial's cwd. */
    if (asprintf(&p, "%s/%s", cwd, path) < 0) p = NULL;
    if (!p) return -ENOMEM;
  }
  if (!p && !(p = strdup(path))) return -ENOMEM;
  list[(*n)++] = p;
  return 0;
}

/* The worker's variables a trial sees: locale, time zone, PATH and TMPDIR,
 * the trainer's log level, the CUDA device order the GPU ids assume, and
 * HOME/USER/LOGNAME (replaced by the run-as user's). Nothing else, so no
 * credential in the worker's environment (CTUNE_TOKEN, cloud keys) leaks. */
static const char *const isolate_base[] = {
    "PATH",     "HOME", "USER",   "LOGNAME",         "LANG",
    "LANGUAGE", "TZ",   "TMPDIR", "CTUNE_LOG_LEVEL", "CUDA_DEVICE_ORDER",
    NULL};

static int isolate_name_is(const char *entry, const char *name) {
  size_t n = strlen(name);
  return !strncmp(entry, name, n) && entry[n] == '=';
}

int isolate_env_passes(const struct isolate *iso, const char *entry) {
  if (!strchr(entry, '=')) return 0;
  if (!strncmp(entry, "LC_", 3)) return 1;
  for (const char *const *b = isolate_base; *b; b++)
    if (isolate_name_is(entry, *b)) return 1;
  for (int i = 0; iso && i < iso->npass; i++)
    if (isolate_name_is(entry, iso->pass[i])) return 1;
  return 0;
}

static const char *isolate_env_get(char *const *env, const char *name) {
  for (; env && *env; env++)
    if (isolate_name_is(*env, name)) return *env + strlen(name) + 1;
  return NULL;
}

/* argv[0] as execvp would find it: a malloc'ed absolute path, or NULL. */
static char *isolate_resolve(const char *prog, char *const *env, const char *cwd) {
  char *out = NULL;
  if (strchr(prog, '/')) {
    if (prog[0] == '/') return strdup(prog);
    if (asprintf(&out, "%s/%s", cwd ? cwd : ".", prog) < 0) return NULL;
    return out;
  }
  const char *path = isolate_env_get(env, "PATH");
  if (!path) path = ISOLATE_DEFAULT_PATH;
  while (1) {
    const char *end = strchr(path, ':');
    size_t n = end ? (size_t)(end - path) : strlen(path);
    if (asprintf(&out, "%.*s/%s", (int)n, n ? path : ".", prog) < 0) return NULL;
    if (out[0] != '/' && cwd) { /* a relative PATH entry: relative to cwd */
      char *abs = NULL;
      if (asprintf(&abs, "%s/%s", cwd, out) < 0) abs = NULL;
      free(out);
      out = abs;
      if (!out) return NULL;
    }
    if (access(out, X_OK) == 0) return out;
    free(out);
    out = NULL;
    if (!end) return NULL;
    path = end + 1;
  }
}

int isolate_check(const struct isolate *iso, const char *kind, char *const *argv, char *const *env,
                  const char *cwd, char **resolved, char *err, size_t len) {
  *resolved = NULL;
  if (!iso) return 0;
  int is_cmd = !strcmp(kind, "command");
  unsigned need = is_cmd ? ISOLATE_COMMAND : ISOLATE_BUILTIN;
  if (!(iso->trainables & need))
    return isolate_err(err, len, -EPERM,
                       "this worker does not run %s trainables (ctune-worker --trainables %s)",
                       kind, (iso->trainables & ISOLATE_BUILTIN) ? "builtin" : "command");
  if (!is_cmd || iso->nallow == 0 || !argv) return 0; /* argv NULL: the kind only */
  char *abs = isolate_resolve(argv[0], env, cwd);
  char *real = abs ? realpath(abs, NULL) : NULL;
  int ok = 0;
  for (int i = 0; real && i < iso->nallow && !ok; i++) ok = !strcmp(real, iso->allow[i]);
  free(real);
  if (!ok) {
    free(abs);
    return isolate_err(err, len, -EPERM,
                       "program '%s' is not allowed on this worker (ctune-worker "
                       "--allow-command lists the programs it runs)",
                       argv[0]);
  }
  *resolved = abs;
  return 0;
}

int isolate_open_file(const char *path, int flags, mode_t mode, struct stat *st) {
  /* O_NONBLOCK: a FIFO planted in the trial dir must not hang the worker's
   * loop in open(); it is refused just below. */
  int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
  if (fd < 0) return -errno;
  struct stat tmp;
  if (!st) st = &tmp;
  int e = fstat(fd, st) != 0 ? -errno : !S_ISREG(st->st_mode) ? -EINVAL : 0;
  if (e < 0) {
    close(fd);
    return e;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

int isolate_chown(const struct isolate *iso, int fd, const char *path) {
  if (!iso || !iso->run_as) return 0;
  int r = fd >= 0 ? fchown(fd, iso->uid, iso->gid) : lchown(path, iso->uid, iso->gid);
  return r == 0 ? 0 : -errno;
}
