/* Trials apart from their worker: the isolation policy of one ctune-worker.
 *
 *  - which trainables it runs (--trainables, --allow-command): a lease it may
 *    not run fails at once with reason bad_config;
 *  - which variables of its own environment a trial sees (a short fixed list
 *    plus --pass-env; never CTUNE_TOKEN or anything else);
 *  - the user trials run as (--run-as): the supervisor drops to it before
 *    exec, and the trial dir and logs are owned by it;
 *  - what a trial cannot see (supervise.h, supervise_view): the work dir
 *    (identity, outbox, lock, other trials' dirs), the token file and the
 *    --hide paths, all but its own dir and the shared dirs it needs; how
 *    (ns) is found once at start.
 *
 * The policy is process-wide and fixed before the loop starts: main.c fills
 * one and installs it (isolate_install); the trial runtime reads it with
 * isolate_current(). The argv builder takes it explicitly (trainable_ctx.iso)
 * so it stays pure and testable. */
#ifndef CTUNE_WORKER_ISOLATE_H
#define CTUNE_WORKER_ISOLATE_H

#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#define ISOLATE_BUILTIN 1u
#define ISOLATE_COMMAND 2u
#define ISOLATE_ALL (ISOLATE_BUILTIN | ISOLATE_COMMAND)
#define ISOLATE_MAX_ALLOW 32
#define ISOLATE_MAX_PASS 32
#define ISOLATE_MAX_GROUPS 64
/* Paths hidden from or shown to a trial (SUPERVISE_MAX_VIEW leaves room for
 * its own dir). */
#define ISOLATE_MAX_VIEW 16
/* PATH of a trial when the worker has none. */
#define ISOLATE_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

struct isolate {
  unsigned trainables;            /* ISOLATE_BUILTIN | ISOLATE_COMMAND */
  char *allow[ISOLATE_MAX_ALLOW]; /* real paths of allowed programs; none = any */
  int nallow;
  char *pass[ISOLATE_MAX_PASS]; /* --pass-env names */
  int npass;
  int run_as; /* trials run as uid/gid below */
  uid_t uid;
  gid_t gid;
  gid_t groups[ISOLATE_MAX_GROUPS]; /* supplementary groups of that user */
  int ngroups;
  char user[256];
  char home[PATH_MAX];
  int ns;                       /* SUPERVISE_NS_* (supervise.h) */
  char *hide[ISOLATE_MAX_VIEW]; /* covered in a trial's view */
  int nhide;
  char *show[ISOLATE_MAX_VIEW]; /* shown again under them (besides its own dir) */
  int nshow;
};

/* All of these return 0 or a negative errno with a message in err. */
/* "builtin", "command", "all", or a comma list of the first two. */
int isolate_parse_trainables(struct isolate *iso, const char *arg, char *err, size_t len);
/* A comma list of program paths; each must exist (kept as its real path). */
int isolate_parse_allow(struct isolate *iso, const char *list, char *err, size_t len);
/* A comma list of variable names of the worker's environment to pass on. */
int isolate_parse_pass_env(struct isolate *iso, const char *list, char *err, size_t len);
/* A user name (or numeric uid) from the passwd database; never root. */
int isolate_set_user(struct isolate *iso, const char *user, char *err, size_t len);
void isolate_free(struct isolate *iso);
/* Adds a path to hide from trials (show 0) or to show them (show 1): kept
 * as its real path when it exists, else made absolute against the cwd.
 * -E2BIG, -ENOMEM. */
int isolate_add_view(struct isolate *iso, int show, const char *path);

void isolate_install(const struct isolate *iso);
/* The installed policy, or NULL (no restriction, no run-as). */
const struct isolate *isolate_current(void);

/* Whether the worker's variable `entry` ("NAME=value") reaches a trial. */
int isolate_env_passes(const struct isolate *iso, const char *entry);

/* Whether a trial of this kind ("builtin" / "command") with this argv may run
 * (argv NULL: the kind only).
 * For a command under --allow-command, argv[0] is resolved as execvp would
 * (the trial's PATH from env when it holds no '/', cwd for a relative path)
 * and *resolved gets that absolute path (malloc'ed: the worker execs exactly
 * what it checked). -EPERM with a message when refused, -ENOMEM. */
int isolate_check(const struct isolate *iso, const char *kind, char *const *argv, char *const *env,
                  const char *cwd, char **resolved, char *err, size_t len);

/* Opens a file in a trial dir without following a symlink and refuses
 * anything but a regular file (a FIFO never blocks the open): the fd, or
 * -ELOOP (a symlink), -EINVAL (not a regular file), or another -errno. st
 * gets the file's fstat. flags are added to O_NOFOLLOW | O_CLOEXEC. */
int isolate_open_file(const char *path, int flags, mode_t mode, struct stat *st);
/* Gives a file or dir the run-as user (no-op without one): fd >= 0 uses
 * fchown, else lchown of path. 0 or -errno. */
int isolate_chown(const struct isolate *iso, int fd, const char *path);

#endif
