/* ctune-server: parses flags, opens the store, rebuilds the model, serves
 * HTTP until SIGTERM/SIGINT, and expires leases of silent workers. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "trace.h"
#include "http.h"
#include "log.h"
#include "opts.h"
#include "sdnotify.h"
#include "state.h"
#include "decide.h"
#include "testhook.h"
#include "tls.h"

/* The database by what it is, not by how --db names it: a symlink, a
 * relative path or another mount of its folder must not give a second
 * server a lock, a token file and a -wal of its own for the same file (two
 * servers on one database overwrite each other's acknowledged writes, and
 * --durability full would flush a -wal that SQLite never writes). The file
 * is created here, as SQLite would create it, so that it can be resolved;
 * everything beside it is named after the result. */
static int main_resolve_db(const char *db, int read_only, char *real, size_t cap, char *err,
                           size_t errlen) {
  if (!strcmp(db, ":memory:") || !strncmp(db, "file:", 5)) {
    if (snprintf(real, cap, "%s", db) >= (int)cap) goto toolong;
    return 0;
  }
  /* --read-only creates nothing: the file must be there. */
  int fd =
      read_only ? open(db, O_RDONLY | O_CLOEXEC) : open(db, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    snprintf(err, errlen, "--db %s: cannot %s: %s", db,
             read_only ? "open it (--read-only)" : "open or create it", strerror(e));
    return -e;
  }
  close(fd);
  char buf[PATH_MAX];
  if (!realpath(db, buf)) {
    int e = errno;
    snprintf(err, errlen, "--db %s: cannot resolve its path: %s", db, strerror(e));
    return -e;
  }
  if (snprintf(real, cap, "%s", buf) >= (int)cap) goto toolong;
  return 0;
toolong:
  snprintf(err, errlen, "--db %s: path too long", db);
  return -ENAMETOOLONG;
}

/* Who holds the flock on the file open as fd: the pid in /proc/locks whose
 * entry names the file's device and inode (the kernel's own record, which a
 * hard link cannot hide). 0 when none is found or /proc is not there. */
static long main_lock_holder(int fd) {
  struct stat sb;
  FILE *f = fstat(fd, &sb) ? NULL : fopen("/proc/locks", "re");
  if (!f) return 0;
  char line[256];
  long found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    char kind[16], mode[16];
    long pid;
    unsigned maj, min;
    unsigned long long ino;
    /* "1: FLOCK  ADVISORY  WRITE 1234 fe:00:10954883 0 EOF"; a waiter's
     * line has "->" where the kind is, and fails the match. */
    if (sscanf(line, "%*d: %15s %*s %15s %ld %x:%x:%llu", kind, mode, &pid, &maj, &min, &ino) ==
            6 &&
        !strcmp(kind, "FLOCK") && !strcmp(mode, "WRITE") && pid > 0 && ino == sb.st_ino &&
        maj == major(sb.st_dev) && min == minor(sb.st_dev))
      found = pid;
  }
  fclose(f);
  return found;
}

/* The name under which process pid has the file open as fd open, from its
 * /proc/PID/fd links (readable for a process of the same user). */
static void main_lock_holder_path(long pid, int fd, char *out, size_t cap) {
  struct stat me, sb;
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%ld/fd", pid);
  DIR *d = fstat(fd, &me) ? NULL : opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    char link[sizeof dir + 300];
    if (e->d_name[0] == '.' ||
        snprintf(link, sizeof link, "%s/%s", dir, e->d_name) >= (int)sizeof link)
      continue;
    if (stat(link, &sb) || sb.st_dev != me.st_dev || sb.st_ino != me.st_ino) continue;
    ssize_t n = readlink(link, out, cap - 1);
    if (n > 0) {
      out[n] = '\0';
      break;
    }
  }
  closedir(d);
}

/* Two servers on one database would both think they own every trial: hold
 * an exclusive flock on the database file itself for the process's
 * lifetime (the kernel drops it when the process dies, kill -9 included).
 * The lock is the file's, not a name's: a symlink, a bind mount of the
 * folder and a hard link all find it. flock and SQLite's fcntl locks do
 * not interact on Linux, and SQLite never closes this descriptor. A
 * private ":memory:" database takes no lock; a "file:" name, which is no
 * path of its own, locks <db>.lock instead. <db>.lock holds the holder's pid and path, for the
 * message; the refused server asks the kernel (/proc/locks) who holds the
 * lock, since a hard link's lock file has another name. */
static int main_lock_db(const char *db, const char *given, int *fd_out, char *err, size_t errlen) {
  *fd_out = -1;
  if (!strcmp(db, ":memory:")) return 0;
  char note[PATH_MAX + 8];
  if (snprintf(note, sizeof note, "%s.lock", db) >= (int)sizeof note) {
    snprintf(err, errlen, "--db %s: path too long", given);
    return -ENAMETOOLONG;
  }
  int plain = strncmp(db, "file:", 5) != 0;
  const char *path = plain ? db : note;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open it to lock the database: %s", path, strerror(e));
    return -e;
  }
  if (flock(fd, LOCK_EX | LOCK_NB)) {
    int e = errno;
    if (e != EWOULDBLOCK) {
      close(fd);
      snprintf(err, errlen, "%s: cannot lock the database: %s", path, strerror(e));
      return -e;
    }
    char who[PATH_MAX + 64] = "";
    int nfd = open(note, O_RDONLY | O_CLOEXEC);
    ssize_t n = nfd >= 0 ? pread(nfd, who, sizeof who - 1, 0) : 0;
    if (nfd >= 0) close(nfd);
    who[n > 0 ? n : 0] = '\0';
    char *other = strchr(who, '\n');
    if (other) *other++ = '\0';
    if (other) other[strcspn(other, "\n")] = '\0';
    /* The kernel's holder wins over a note that a hard link's name left
     * behind (or that is not there); its path is then read from its fds. */
    char opened[PATH_MAX] = "";
    long holder = main_lock_holder(fd);
    if (holder > 0 && holder != strtol(who, NULL, 10)) {
      snprintf(who, sizeof who, "%ld", holder);
      main_lock_holder_path(holder, fd, opened, sizeof opened);
      other = opened;
    }
    close(fd);
    int named = strcmp(db, given) != 0;
    snprintf(err, errlen,
             "database %s%s%s%s is in use by another ctune-server (pid %s%s%s); one database "
             "takes one server: stop that one first or pass another --db",
             db, named ? " (--db " : "", named ? given : "", named ? ")" : "",
             who[0] ? who : "unknown", other && *other && strcmp(other, db) ? ", opened as " : "",
             other && *other && strcmp(other, db) ? other : "");
    return -EBUSY;
  }
  char me[PATH_MAX + 32];
  int n = snprintf(me, sizeof me, "%d\n%s\n", (int)getpid(), db);
  int nfd = plain ? open(note, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : fd;
  if (nfd < 0 || ftruncate(nfd, 0) || pwrite(nfd, me, (size_t)n, 0) != n)
    log_warn("%s: cannot write this server's pid into it: %s", note, strerror(errno));
  if (plain && nfd >= 0) close(nfd);
  *fd_out = fd;
  return 0;
}

/* The commit thread calls this after the store refused a write: from the
 * repair point on, memory is the store again (commit.h). */
static void main_repair(void *ctx) {
  struct server *s = ctx;
  char err[512];
  double t0 = clock_mono_s();
  /* Test builds: a slow repair ("repair_delay_ms=MS" in the store's fault
   * spec), so that a test can read the model between a refused write and
   * its rebuild, were the refusal answered before it. */
  const char *slow = TESTHOOK(TESTHOOK_FAULT);
  if (slow && (slow = strstr(slow, "repair_delay_ms="))) {
    struct timespec ts = {0, atol(slow + 16) % 1000 * 1000000L};
    nanosleep(&ts, NULL);
  }
  server_lock(s);
  commit_repair_point(s->commit);
  int rc = state_reload(s, err, sizeof err);
  server_unlock(s);
  if (rc)
    log_error("rebuilding the model after a failed write failed (%s); serving the old one", err);
  else
    log_warn("model rebuilt from the database after a failed write (%.0f ms)",
             (clock_mono_s() - t0) * 1e3);
}

/* Tokens by default: --token-file, else <db>.tokens (created when missing);
 * --no-auth only on loopback. */
static int main_tokens(struct server *s, char *err, size_t errlen) {
  if (s->opt.no_auth) {
    if (!auth_is_loopback(s->opt.bind)) {
      snprintf(err, errlen,
               "refusing --no-auth on %s: anyone who can reach it could run any "
               "command on every worker. Drop --no-auth (tokens are created beside the "
               "database) or bind 127.0.0.1",
               s->opt.bind);
      return -EINVAL;
    }
    log_warn("--no-auth: NO AUTHENTICATION. Every local user (and every process on this "
             "machine) can submit experiments, i.e. run any command on every worker");
    return 0;
  }
  int rc = auth_sessions_new(&s->sessions);
  if (rc) {
    snprintf(err, errlen, "out of memory");
    return rc;
  }
  if (s->opt.token_file) {
    rc = auth_load(s->opt.token_file, s->admin_token, s->worker_token, s->viewer_token,
                   sizeof s->admin_token, err, errlen);
    if (rc) return rc;
    log_info("tokens from %s", s->opt.token_file);
  } else {
    if (!strcmp(s->opt.db_path, ":memory:") || !strncmp(s->opt.db_path, "file:", 5)) {
      snprintf(err, errlen,
               "--db %s has no place for its token file: pass --token-file FILE "
               "(or --no-auth on loopback)",
               s->opt.db_path);
      return -EINVAL;
    }
    int created = 0;
    rc = auth_default_file(s->opt.db_path, s->tokens_path, sizeof s->tokens_path, s->admin_token,
                           s->worker_token, s->viewer_token, sizeof s->admin_token, &created, err,
                           errlen);
    if (rc) return rc;
    log_info("%s tokens in %s (admin, worker, viewer; mode 0600)", created ? "created" : "using",
             s->tokens_path);
  }
  s->auth = 1;
  return 0;
}

/* The dashboard's URL; with_token: Jupyter's way in, a URL that logs a
 * browser in (a session cookie) and drops the token from the address bar.
 * A wildcard bind is opened on loopback. */
static void main_dashboard_url(const struct server *s, int port, int with_token, char *buf,
                               size_t n) {
  const char *h = s->opt.bind;
  if (!strcmp(h, "0.0.0.0"))
    h = "127.0.0.1";
  else if (!strcmp(h, "::"))
    h = "::1";
  int v6 = strchr(h, ':') != NULL; /* an IPv6 address goes in brackets */
  snprintf(buf, n, "%s://%s%s%s:%d/%s%s", s->opt.tls_cert_pem ? "https" : "http", v6 ? "[" : "", h,
           v6 ? "]" : "", port, with_token ? "?token=" : "", with_token ? s->admin_token : "");
}

/* The login URL carries the admin token, a shell on every worker: it goes
 * to <db>.login-url (0600, beside the database, rewritten at each start:
 * the port may change) and to stdout only when stdout is a terminal. A
 * journal, a log file or a pipe gets the URL without the token and the
 * file's path. path stays "" when there is no file (a database in memory,
 * or the write failed: logged). */
static void main_write_login_url(const struct server *s, int port, char *path, size_t n) {
  const char *db = s->opt.db_path;
  char tmp[PATH_MAX + 64], text[sizeof s->admin_token + 300];
  if (!strcmp(db, ":memory:") || !strncmp(db, "file:", 5)) return;
  if (snprintf(path, n, "%s.login-url", db) >= (int)n ||
      snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
    path[0] = '\0';
    return;
  }
  main_dashboard_url(s, port, 1, text, sizeof text - 1);
  strcat(text, "\n");
  unlink(tmp); /* a leftover of a crashed start with our pid */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  size_t len = strlen(text);
  int ok = fd >= 0 && fchmod(fd, 0600) == 0 && write(fd, text, len) == (ssize_t)len;
  int e = errno;
  if (fd >= 0) close(fd);
  if (ok && rename(tmp, path)) ok = 0, e = errno;
  if (!ok) {
    log_warn("%s: cannot write the dashboard's login URL: %s", path, strerror(e));
    if (fd >= 0) unlink(tmp);
    path[0] = '\0';
  }
}

static void main_print_dashboard(const struct server *s, int port, const char *login_file) {
  char url[sizeof s->admin_token + 300];
  int tty = isatty(STDOUT_FILENO);
  main_dashboard_url(s, port, tty, url, sizeof url);
  if (tty)
    printf("dashboard: %s\n", url);
  else if (login_file[0])
    printf("dashboard: %s (log in with the URL in %s)\n", url, login_file);
  else
    printf("dashboard: %s (log in with ?token= and the admin token of %s)\n", url,
           s->opt.token_file ? s->opt.token_file : s->tokens_path);
}

/* A store error at start, and a full disk behind it? SQLite says
 * "database or disk is full", or "disk I/O error" when it cannot even grow
 * its -shm file: the space left on the database's filesystem tells. */
static void main_space_hint(const char *db, const char *why, char *buf, size_t n) {
  char dir[PATH_MAX];
  struct statvfs vfs;
  buf[0] = '\0';
  snprintf(dir, sizeof dir, "%s", db);
  char *slash = strrchr(dir, '/');
  if (!slash) return; /* a database in memory */
  *(slash == dir ? slash + 1 : slash) = '\0';
  if (statvfs(dir, &vfs)) return;
  unsigned long long kib = (unsigned long long)vfs.f_bavail * vfs.f_frsize / 1024;
  if (kib < 1024 || strstr(why, "full"))
    snprintf(buf, n, " (%s has %llu KiB free: is the disk full? free some space there)", dir, kib);
}

/* The repair at start (state_repair) could not be stored: say why, in
 * SQLite's words, and where. Nothing was changed, so a start once the
 * cause is gone finds the same database. */
static void main_repair_failed(struct server *s, int rep, uint64_t ticket) {
  char why[200] = "", space[PATH_MAX + 160];
  if (!rep) commit_failure_reason(s->commit, ticket, why, sizeof why);
  if (!why[0]) snprintf(why, sizeof why, "%s", strerror(rep ? -rep : EIO));
  main_space_hint(s->opt.db_path, why, space, sizeof space);
  log_error("cannot start: the database %s needs a write at start to finish what a crash left "
            "half done, and it was refused: %s%s. Nothing was changed; start again once the "
            "database can be written",
            s->opt.db_path, why, space);
}

int main(int argc, char **argv) {
  struct server s;
  enum opts_action action;
  char err[4 * PATH_MAX + 512]; /* messages name paths: --db, the real one, the holder's */
  struct http *http = NULL;
  int rc = 2, port = 0, state_ready = 0;

  memset(&s, 0, sizeof s);
  log_set_program("ctune-server");
  if (opts_parse(argc, argv, &s.opt, &action, err, sizeof err)) {
    fprintf(stderr, "ctune-server: %s\n", err);
    return 2;
  }
  if (action == OPTS_HELP) {
    fputs(opts_usage, stdout);
    return 0;
  }
  if (action == OPTS_VERSION) {
    printf("ctune-server %s\n", CTUNE_VERSION);
    return 0;
  }
  /* From here on s.opt.db_path is the database file's own path. */
  char db_real[PATH_MAX];
  const char *db_given = s.opt.db_path;
  if (main_resolve_db(db_given, s.opt.read_only, db_real, sizeof db_real, err, sizeof err)) {
    fprintf(stderr, "ctune-server: %s\n", err);
    return 2;
  }
  s.opt.db_path = db_real;
  /* Locked first: a refused server makes nothing (no token file beside a
   * hard link's name). A read-only server takes no lock: it writes
   * nothing, so it may read beside the one server that writes. */
  int lock_fd = -1;
  if (!s.opt.read_only && main_lock_db(s.opt.db_path, db_given, &lock_fd, err, sizeof err)) {
    log_error("%s", err);
    auth_sessions_free(s.sessions);
    return 1;
  }
  if (main_tokens(&s, err, sizeof err)) {
    fprintf(stderr, "ctune-server: %s\n", err);
    auth_sessions_free(s.sessions);
    if (lock_fd >= 0) close(lock_fd);
    return 2;
  }

  /* --tls-cert/--tls-key are read now, so a wrong file is named before
   * anything starts; the text is kept until the daemon stops. */
  if (s.opt.tls_cert && (tls_load_pem("--tls-cert", s.opt.tls_cert, TLS_PEM_CERT,
                                      &s.opt.tls_cert_pem, err, sizeof err) ||
                         tls_load_pem("--tls-key", s.opt.tls_key, TLS_PEM_KEY, &s.opt.tls_key_pem,
                                      err, sizeof err))) {
    fprintf(stderr, "ctune-server: %s\n", err);
    free(s.opt.tls_cert_pem);
    auth_sessions_free(s.sessions);
    if (lock_fd >= 0) close(lock_fd);
    return 2;
  }

  /* Signals are taken synchronously by this thread; block them before any
   * other thread starts so that they all inherit the mask. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  rc = 1;
  if (s.opt.read_only ? store_open_read_only(s.opt.db_path, &s.store, err, sizeof err)
                      : store_open(s.opt.db_path, s.opt.wal_frames, s.opt.sync_full, &s.store, err,
                                   sizeof err)) {
    char space[PATH_MAX + 160];
    main_space_hint(s.opt.db_path, err, space, sizeof space);
    log_error("cannot open the database %s: %s%s", s.opt.db_path, err, space);
    goto out;
  }
  if (state_init(&s)) goto out;
  state_ready = 1;
  if (state_load(&s, err, sizeof err)) {
    log_error("%s", err);
    goto out;
  }
  log_info("loaded %lld experiment(s), %lld trial(s), %lld worker(s) from %s; lease timeout %g s",
           (long long)s.nexps, (long long)s.ntrials, (long long)s.nworkers, s.opt.db_path,
           s.opt.lease_timeout_s);
  if (commit_start(s.store, &s.commit)) goto out;
  /* Read-only: the commit thread stays idle (no write route reaches a
   * handler), and the loaded counter is no change to store. */
  if (s.opt.read_only) commit_seq_stored(s.commit, s.seq);
  /* What a crash between the writes of an older version left half done is
   * finished before anyone sees it. Without a repair callback yet: a
   * refused write here ends the start (a rebuild would repair, and fail,
   * again and again on a full disk). */
  server_lock(&s);
  int rep = s.opt.read_only ? 0 : state_repair(&s); /* read-only: shown as stored */
  server_unlock(&s);
  uint64_t last = commit_last_ticket(s.commit);
  if (rep || commit_wait(s.commit, last)) {
    main_repair_failed(&s, rep, last);
    goto out;
  }
  commit_set_repair(s.commit, main_repair, &s);
  if (http_start(&s, &http, &port, err, sizeof err)) {
    log_error("%s", err);
    goto out;
  }
  /* Written before "listening on", so whoever waits for that line finds it.
   * A read-only server writes none: <db>.login-url names the server that
   * writes the database, for those who look for it there. */
  char login_file[PATH_MAX + 32] = "";
  if (s.auth && !s.opt.read_only) main_write_login_url(&s, port, login_file, sizeof login_file);
  if (s.opt.read_only)
    log_info("read-only: %s is served as loaded; writes are refused", s.opt.db_path);
  /* An IPv6 address goes in brackets in a URL. */
  int v6 = strchr(s.opt.bind, ':') != NULL;
  printf("listening on %s://%s%s%s:%d\n", s.opt.tls_cert_pem ? "https" : "http", v6 ? "[" : "",
         s.opt.bind, v6 ? "]" : "", port);
  s.port = port;
  if (s.auth) main_print_dashboard(&s, port, login_file);
  fflush(stdout);
  sdnotify("READY=1"); /* systemd Type=notify: listening now */
  if (!s.opt.tls_cert_pem && !auth_is_loopback(s.opt.bind))
    log_warn("listening on %s without TLS: the tokens, and the commands workers run, travel "
             "in clear text; pass --tls-cert FILE --tls-key FILE (or put a TLS proxy in "
             "front)",
             s.opt.bind);

  /* Wait for a signal, checking leases a few times a second meanwhile. */
  int copied = 0;
  for (;;) {
    /* While writes stream in, checkpoint every 20 ms so that the writer's own
     * checkpoint (--wal-checkpoint-frames) finds little left to copy. */
    struct timespec ts = {0, (copied ? 20 : 200) * 1000 * 1000};
    int sig = sigtimedwait(&sigs, NULL, &ts);
    if (sig == SIGTERM || sig == SIGINT) {
      log_info("signal %d: stopping", sig);
      sdnotify("STOPPING=1");
      break;
    }
    if (s.opt.read_only) continue; /* no expiry, no timer, nothing to checkpoint */
    uint64_t tr[5] = {trace_ns()}; /* trace builds: the pass's times (trace.h) */
    server_lock(&s);               /* the unlock hands what expiry changed to the commit thread */
    tr[1] = trace_ns();
    state_expire_leases(&s, clock_mono_ms());
    if (decide_tick(&s, clock_mono_ms(), &(uint64_t){0})) /* time_budget_s runs on the clock */
      log_error("time budget: cannot queue the experiments' run time");
    server_unlock(&s);
    tr[2] = trace_ns();
    if (store_checkpoint(s.store, &copied)) log_warn("store: WAL checkpoint failed");
    tr[3] = trace_ns();
    tr[4] = (uint64_t)copied;
    trace_put(TRACE_CKPT, tr, 5);
  }
  rc = 0;
out:
  /* Order: no new requests, the writer drains (answering held replies),
   * then the HTTP threads stop and the database closes. */
  if (s.commit) commit_wait(s.commit, commit_last_ticket(s.commit));
  http_stop(http);
  commit_stop(s.commit);
  if (state_ready) state_free(&s);
  state_reload_cleanup();
  store_close(s.store);
  auth_sessions_free(s.sessions);
  free(s.opt.tls_cert_pem);
  free(s.opt.tls_key_pem);
  if (lock_fd >= 0) close(lock_fd);
  if (!rc) log_info("stopped");
  return rc;
}
