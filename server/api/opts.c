/* opts: flag parsing for ctune-server (pure: the unit tests call it). */
#include "opts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quarantine.h"

const char opts_usage[] =
    "usage: ctune-server [--db PATH] [--bind ADDR] [--port N] [--listen-fd FD]\n"
    "                    [--token-file FILE]\n"
    "                    [--no-auth] [--allowed-host NAME[:PORT]]...\n"
    "                    [--lease-timeout S] [--heartbeat-interval S] [--threads N]\n"
    "                    [--worker-retention-s S] [--quarantine-after K]\n"
    "                    [--max-checkpoint-mb N] [--wal-checkpoint-frames N]\n"
    "                    [--durability full|normal] [--tls-cert FILE --tls-key FILE]\n"
    "                    [--web-dir DIR] [--vendor-dir DIR] [--read-only]\n"
    "                    [--help] [--version]\n"
    "\n"
    "  --db PATH               SQLite database (created when missing; default ctune.db)\n"
    "  --read-only             serve the database as it is, changing nothing: every\n"
    "                          write is refused (405 read_only), no lock is taken, so it\n"
    "                          runs beside the server that writes it; no login URL file\n"
    "  --bind ADDR             address to listen on (default 127.0.0.1)\n"
    "  --port N                TCP port (default 8470; 0 picks a free one)\n"
    "  --listen-fd FD          serve on this inherited listening TCP socket, bound to\n"
    "                          the --bind address (its port wins over --port): whoever\n"
    "                          starts the server knows its URL before it is ready\n"
    "  --token-file FILE       lines admin=TOKEN, worker=TOKEN (and viewer=TOKEN); every\n"
    "                          API request needs Authorization: Bearer TOKEN. Default:\n"
    "                          PATH.tokens beside --db, created (mode 0600) when missing\n"
    "  --no-auth               no tokens: anyone who reaches the port controls every\n"
    "                          worker; refused unless --bind is a loopback address\n"
    "  --allowed-host NAME[:PORT]  also serve requests whose Host is NAME (a DNS name of\n"
    "                          this machine, or of a reverse proxy) on this port, or\n"
    "                          NAME:PORT on PORT (a port forwarder's: ssh -L, docker -p);\n"
    "                          repeatable. Served without it: IP addresses on any port,\n"
    "                          localhost and the --bind name on this port\n"
    "  --lease-timeout S       seconds without heartbeat before a worker's trials go\n"
    "                          back to PENDING (default 30)\n"
    "  --heartbeat-interval S  interval told to workers (default 5)\n"
    "  --worker-retention-s S  a lost worker leaves GET /api/v1/workers after S seconds\n"
    "                          of silence (default 3600); it is listed again if it comes\n"
    "                          back. A worker that stops cleanly deregisters at once\n"
    "  --quarantine-after K    a worker that fails K trials in a row while other workers\n"
    "                          succeed gets no more leases until an admin releases it\n"
    "                          (default 3; 0: never)\n"
    "  --threads N             HTTP threads (default 2)\n"
    "  --max-checkpoint-mb N   largest checkpoint accepted (default 256)\n"
    "  --wal-checkpoint-frames N  WAL pages after which the writer completes a\n"
    "                          checkpoint (default 8192, i.e. 32 MiB)\n"
    "  --durability full|normal  full (default): a reply that acknowledges a write is\n"
    "                          sent after its commit reached the disk (fsync): it\n"
    "                          survives kill -9, an OS crash and a power cut.\n"
    "                          normal: after the commit reached the OS: it survives\n"
    "                          kill -9 of the server, not an OS crash or power cut\n"
    "  --tls-cert FILE         serve HTTPS (libmicrohttpd's TLS) with this PEM certificate\n"
    "                          (a chain: the server's certificate first); needs --tls-key.\n"
    "                          Without TLS, a non-loopback --bind sends the tokens and the\n"
    "                          commands workers run in clear text (a warning says so)\n"
    "  --tls-key FILE          the PEM private key of --tls-cert (keep it 0600)\n"
    "  --web-dir DIR           dashboard files served at / (default: BIN/../share/ctune/web\n"
    "                          beside this executable when installed, else\n"
    "                          " CTUNE_WEB_DIR_DEFAULT ")\n"
    "  --vendor-dir DIR        files served at /vendor/ (default: BIN/../share/javascript\n"
    "                          when it has chart.js, else " CTUNE_VENDOR_DIR_DEFAULT ")\n";

/* An installed copy (make install, the Debian package) finds its files
 * relative to its own executable, resolved through /proc/self/exe, before
 * the build tree's compiled-in paths: it keeps working once the build tree
 * is gone, wherever PREFIX put it. Returns buf when <exe dir>/../rel/probe
 * exists, else fallback. */
static const char *opts_beside_exe(char *buf, size_t len, const char *rel, const char *probe,
                                   const char *fallback) {
  char exe[PATH_MAX], path[PATH_MAX + 256];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return fallback;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return fallback;
  *slash = '\0';
  if (snprintf(path, sizeof path, "%s/../%s/%s", exe, rel, probe) >= (int)sizeof path ||
      access(path, R_OK) != 0)
    return fallback;
  if (snprintf(path, sizeof path, "%s/../%s", exe, rel) >= (int)sizeof path) return fallback;
  char real[PATH_MAX];
  if (!realpath(path, real) || strlen(real) >= len) return fallback;
  memcpy(buf, real, strlen(real) + 1);
  return buf;
}

static int opts_number(const char *flag, const char *v, double lo, double hi, double *out,
                       char *err, size_t errlen) {
  char *end = NULL;
  errno = 0;
  double x = v ? strtod(v, &end) : NAN;
  if (!v || !*v || *end || errno || !isfinite(x) || x < lo || x > hi) {
    snprintf(err, errlen, "%s: expected a number in [%g, %g], got '%s'", flag, lo, hi,
             v ? v : "(nothing)");
    return -EINVAL;
  }
  *out = x;
  return 0;
}

static int opts_integer(const char *flag, const char *v, double lo, double hi, double *out,
                        char *err, size_t errlen) {
  if (opts_number(flag, v, lo, hi, out, err, errlen)) return -EINVAL;
  if (*out != floor(*out)) {
    snprintf(err, errlen, "%s: expected an integer, got '%s'", flag, v);
    return -EINVAL;
  }
  return 0;
}

int opts_parse(int argc, char **argv, struct server_options *o, enum opts_action *action, char *err,
               size_t errlen) {
  *o = (struct server_options){.db_path = "ctune.db",
                               .bind = "127.0.0.1",
                               .port = 8470,
                               .listen_fd = -1,
                               .token_file = NULL,
                               .lease_timeout_s = 30,
                               .heartbeat_interval_s = 5,
                               .web_dir = CTUNE_WEB_DIR_DEFAULT,
                               .vendor_dir = CTUNE_VENDOR_DIR_DEFAULT,
                               .threads = 2,
                               .max_checkpoint_bytes = 256LL * 1024 * 1024,
                               .wal_frames = 8192,
                               .sync_full = 1,
                               .worker_retention_s = 3600,
                               .quarantine_after = QUARANTINE_AFTER_DEFAULT};
  *action = OPTS_RUN;
  static char web_near[PATH_MAX], vendor_near[PATH_MAX];
  o->web_dir = opts_beside_exe(web_near, sizeof web_near, "share/ctune/web", "index.html",
                               CTUNE_WEB_DIR_DEFAULT);
  o->vendor_dir = opts_beside_exe(vendor_near, sizeof vendor_near, "share/javascript", "chart.js",
                                  CTUNE_VENDOR_DIR_DEFAULT);
  int hb_set = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      *action = OPTS_HELP;
      return 0;
    }
    if (!strcmp(a, "--version")) {
      *action = OPTS_VERSION;
      return 0;
    }
    if (!strcmp(a, "--no-auth")) { /* the flags without a value */
      o->no_auth = 1;
      continue;
    }
    if (!strcmp(a, "--read-only")) {
      o->read_only = 1;
      continue;
    }
    /* Every other flag takes a value, as "--flag VALUE" or "--flag=VALUE". */
    char name[64];
    const char *v = NULL, *eq = strchr(a, '=');
    if (strncmp(a, "--", 2)) {
      snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
      return -EINVAL;
    }
    if (eq) {
      snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
      v = eq + 1;
    } else {
      snprintf(name, sizeof name, "%s", a);
      if (i + 1 < argc) v = argv[++i];
    }
    double x;
    if (!strcmp(name, "--db"))
      o->db_path = v;
    else if (!strcmp(name, "--bind"))
      o->bind = v;
    else if (!strcmp(name, "--token-file"))
      o->token_file = v;
    else if (!strcmp(name, "--allowed-host")) {
      if (o->nallowed_hosts == (int)(sizeof o->allowed_hosts / sizeof o->allowed_hosts[0])) {
        snprintf(err, errlen, "--allowed-host: at most %d names",
                 (int)(sizeof o->allowed_hosts / sizeof o->allowed_hosts[0]));
        return -EINVAL;
      }
      /* NAME or NAME:PORT (the port a forwarder serves this server on). */
      const char *colon = v ? strchr(v, ':') : NULL;
      if (colon) {
        char *end = NULL;
        errno = 0;
        long p = strtol(colon + 1, &end, 10);
        if (colon == v || strchr(colon + 1, ':') || end == colon + 1 || *end || errno || p < 1 ||
            p > 65535) {
          snprintf(err, errlen,
                   "--allowed-host: expected NAME or NAME:PORT (a port 1-65535), got '%s'", v);
          return -EINVAL;
        }
      }
      if (v) o->allowed_hosts[o->nallowed_hosts++] = v;
    } else if (!strcmp(name, "--tls-cert"))
      o->tls_cert = v;
    else if (!strcmp(name, "--tls-key"))
      o->tls_key = v;
    else if (!strcmp(name, "--web-dir"))
      o->web_dir = v;
    else if (!strcmp(name, "--vendor-dir"))
      o->vendor_dir = v;
    else if (!strcmp(name, "--durability")) {
      if (!v || (strcmp(v, "full") && strcmp(v, "normal"))) {
        snprintf(err, errlen, "--durability: expected full or normal, got '%s'",
                 v ? v : "(nothing)");
        return -EINVAL;
      }
      o->sync_full = !strcmp(v, "full");
    } else if (!strcmp(name, "--port")) {
      if (opts_integer(name, v, 0, 65535, &x, err, errlen)) return -EINVAL;
      o->port = (int)x;
    } else if (!strcmp(name, "--listen-fd")) {
      if (opts_integer(name, v, 3, INT_MAX, &x, err, errlen)) return -EINVAL;
      o->listen_fd = (int)x;
    } else if (!strcmp(name, "--lease-timeout")) {
      if (opts_number(name, v, 0.1, 86400, &x, err, errlen)) return -EINVAL;
      o->lease_timeout_s = x;
    } else if (!strcmp(name, "--heartbeat-interval")) {
      if (opts_number(name, v, 0.05, 3600, &x, err, errlen)) return -EINVAL;
      o->heartbeat_interval_s = x;
      hb_set = 1;
    } else if (!strcmp(name, "--worker-retention-s")) {
      if (opts_number(name, v, 0.1, 1e9, &x, err, errlen)) return -EINVAL;
      o->worker_retention_s = x;
    } else if (!strcmp(name, "--quarantine-after")) {
      if (opts_integer(name, v, 0, QUARANTINE_RECENT, &x, err, errlen)) return -EINVAL;
      o->quarantine_after = (int)x;
    } else if (!strcmp(name, "--threads")) {
      if (opts_integer(name, v, 1, 64, &x, err, errlen)) return -EINVAL;
      o->threads = (int)x;
    } else if (!strcmp(name, "--wal-checkpoint-frames")) {
      if (opts_integer(name, v, 16, 1000000, &x, err, errlen)) return -EINVAL;
      o->wal_frames = (int)x;
    } else if (!strcmp(name, "--max-checkpoint-mb")) {
      if (opts_integer(name, v, 1, 4096, &x, err, errlen)) return -EINVAL;
      o->max_checkpoint_bytes = (int64_t)x * 1024 * 1024;
    } else {
      snprintf(err, errlen, "unknown flag %s (see --help)", name);
      return -EINVAL;
    }
    if (!v || !*v) {
      snprintf(err, errlen, "%s needs a value", name);
      return -EINVAL;
    }
  }
  if (o->no_auth && o->token_file) {
    snprintf(err, errlen, "--no-auth and --token-file contradict each other: pick one");
    return -EINVAL;
  }
  if (!o->tls_cert != !o->tls_key) {
    snprintf(err, errlen, "%s %s given without %s: TLS needs both the certificate and its key",
             o->tls_cert ? "--tls-cert" : "--tls-key", o->tls_cert ? o->tls_cert : o->tls_key,
             o->tls_cert ? "--tls-key FILE" : "--tls-cert FILE");
    return -EINVAL;
  }
  if (!hb_set && o->heartbeat_interval_s * 3 > o->lease_timeout_s)
    o->heartbeat_interval_s = o->lease_timeout_s / 3; /* short test timeouts */
  if (o->heartbeat_interval_s >= o->lease_timeout_s) {
    snprintf(err, errlen, "--heartbeat-interval (%g) must be shorter than --lease-timeout (%g)",
             o->heartbeat_interval_s, o->lease_timeout_s);
    return -EINVAL;
  }
  return 0;
}
