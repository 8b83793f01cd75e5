/* store: SQLite access for ctune-server — migrations, prepared statements for
 * the hot writes, and the reads the API and the loader need. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "migrations.h"
#include "store_logs.h"
#include "testhook.h"

enum {
  ST_BEGIN,
  ST_COMMIT,
  ST_ROLLBACK,
  ST_PUT_EXP,
  ST_PUT_TRIAL,
  ST_INS_RESULT,
  ST_INS_ASHA,
  ST_PUT_WORKER,
  ST_PUT_CKPT,
  ST_PUT_LOG,
  ST_GET_LOG, /* the row store_put_log merges into */
  ST_SAVEPOINT,
  ST_ROLLBACK_TO,
  ST_RELEASE,
  ST_PUT_SEQ,
  ST_INS_EVENT,
  ST_INS_SCHED_REC,
  ST_COPY_CKPT, /* a decision's writes */
  ST_SNAP_CKPT,
  ST_COPY_SNAP,
  ST_DEL_EXP, /* DELETE of an experiment */
  ST_COUNT
};

static const char *const store_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PUT_EXP] = "INSERT OR REPLACE INTO experiments(id,name,status,config,seed,"
                   "created_at,ended_at,updated_seq,end_reason,run_time_s,priority,notes,tags) "
                   "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [ST_PUT_TRIAL] = "INSERT OR REPLACE INTO trials(id,experiment_id,idx,name,status,"
                     "stopped_early,config,bracket,error,exit_code,num_failures,attempt,"
                     "worker_id,created_at,started_at,ended_at,updated_seq,reason,generation,"
                     "lease_end_action,checkpoint_time_total_s,created_seq,res_known,nres,"
                     "first_seq,last_seq,last_t,score_last,score_avg,score_last5,score_last10,"
                     "score_min,score_max,attribution) "
                     "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [ST_INS_RESULT] = "INSERT INTO results(seq,trial_id,experiment_id,t,decision,data,gen) "
                      "VALUES(?,?,?,?,?,?,?)",
    [ST_INS_ASHA] = "INSERT INTO asha_records(experiment_id,trial_id,bracket,milestone,"
                    "value,stopped_early,seq) VALUES(?,?,?,?,?,?,?)",
    [ST_PUT_WORKER] = "INSERT OR REPLACE INTO workers(id,name,cpu,gpu,memory_mb,"
                      "registered_at,last_heartbeat,secret,quarantine,spot) "
                      "VALUES(?,?,?,?,?,?,?,?,?,?)",
    [ST_PUT_CKPT] = "INSERT OR REPLACE INTO checkpoints(trial_id,iteration,crc32,data) "
                    "VALUES(?,?,?,?)",
    [ST_PUT_LOG] = "INSERT OR REPLACE INTO logs(trial_id,log) VALUES(?,?)",
    [ST_GET_LOG] = "SELECT log FROM logs WHERE trial_id=?",
    [ST_SAVEPOINT] = "SAVEPOINT g",
    [ST_ROLLBACK_TO] = "ROLLBACK TO g",
    [ST_RELEASE] = "RELEASE g",
    [ST_PUT_SEQ] = "UPDATE meta SET value=max(value,?) WHERE key='seq'",
    [ST_INS_EVENT] = "INSERT INTO trial_events(seq,trial_id,experiment_id,time,kind,reason,data) "
                     "VALUES(?,?,?,?,?,?,?)",
    [ST_INS_SCHED_REC] = "INSERT INTO sched_records(experiment_id,seq,trial_id,record) "
                         "VALUES(?,?,?,?)",
    /* Exploit: the donor's stored checkpoint becomes the trial's, bytes and
     * iteration label, inside the decision's transaction. */
    [ST_COPY_CKPT] = "INSERT OR REPLACE INTO checkpoints(trial_id,iteration,crc32,data) "
                     "SELECT ?,iteration,crc32,data FROM checkpoints WHERE trial_id=?",
    /* PBT (migration 012): a top trial's checkpoint of its ranked result is
     * kept for the trials that clone it later. */
    [ST_SNAP_CKPT] = "INSERT OR REPLACE INTO pbt_checkpoints(trial_id,iteration,crc32,data) "
                     "SELECT trial_id,iteration,crc32,data FROM checkpoints WHERE trial_id=?",
    [ST_COPY_SNAP] = "INSERT OR REPLACE INTO checkpoints(trial_id,iteration,crc32,data) "
                     "SELECT ?,iteration,crc32,data FROM pbt_checkpoints WHERE trial_id=?",
    /* Everything of one experiment, children first (the caller's transaction
     * makes it all or nothing). ?1 = experiment id. */
    [ST_DEL_EXP] = "DELETE FROM checkpoints WHERE trial_id IN "
                   "(SELECT id FROM trials WHERE experiment_id=?1)",
};

/* The rest of an experiment's delete: one statement each (a prepared
 * statement holds one). */
static const char *const store_del_sql[] = {
    /* Ids are never handed out twice: the largest ever is kept before the
     * rows that carry it go (the loader pads its model up to them). */
    "INSERT OR REPLACE INTO meta(key,value) VALUES('max_experiment_id', max("
    "COALESCE((SELECT value FROM meta WHERE key='max_experiment_id'),0),"
    "COALESCE((SELECT max(id) FROM experiments),0)))",
    "INSERT OR REPLACE INTO meta(key,value) VALUES('max_trial_id', max("
    "COALESCE((SELECT value FROM meta WHERE key='max_trial_id'),0),"
    "COALESCE((SELECT max(id) FROM trials),0)))",
    "DELETE FROM logs WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id=?1)",
    "DELETE FROM pbt_checkpoints WHERE trial_id IN "
    "(SELECT id FROM trials WHERE experiment_id=?1)",
    "DELETE FROM results WHERE experiment_id=?1",
    "DELETE FROM asha_records WHERE experiment_id=?1",
    "DELETE FROM trial_events WHERE experiment_id=?1",
    "DELETE FROM sched_records WHERE experiment_id=?1",
    "DELETE FROM trials WHERE experiment_id=?1",
    "DELETE FROM experiments WHERE id=?1",
};

/* Test-only faults (TESTHOOK_FAULT, see store.h). */
struct store_faults {
  int busy;                 /* the next N begins find the database busy */
  int delay_ms;             /* every begin waits this long first (lines requests up) */
  int kill_after_trial_end; /* armed: SIGKILL after the commit that ends a trial */
  int armed;
  /* SIGKILL just before the COMMIT of a transaction that writes or deletes an
   * experiment row (a pause, an extend, a delete half done: nothing of it may
   * survive). */
  int kill_before_exp_commit, armed_before;
  /* The flush after the first transaction that stores a result fails
   * (-EIO, after 300 ms), as fdatasync does when the disk refuses the
   * write-back. */
  int sync_fail_after_result, armed_sync;
  /* Every COMMIT fails as on a full disk (SQLITE_FULL). */
  int disk_full;
};

struct store {
  sqlite3 *w;    /* writer: commit thread only */
  sqlite3 *r;    /* reader: guarded by rlock */
  sqlite3 *c;    /* checkpointer: the main loop only */
  int ckpt_done; /* WAL frames at the last checkpoint */
  int wal_fd;    /* the -wal file, for store_checkpoint's flush */
  int sync_fd;   /* the -wal file again, for store_sync (commit side) */
  char wal_path[4096];
  pthread_mutex_t rlock;
  sqlite3_stmt *stmt[ST_COUNT];
  struct store_faults fault;
  char errmsg[160];
};

static void store_faults_parse(struct store *st) {
  const char *spec = TESTHOOK(TESTHOOK_FAULT);
  if (!spec || !*spec) return;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    long v = eq ? strtol(eq + 1, NULL, 10) : 1;
    if (eq) *eq = 0;
    if (!strcmp(kv, "busy"))
      st->fault.busy = (int)v;
    else if (!strcmp(kv, "kill_after_trial_end"))
      st->fault.kill_after_trial_end = v != 0;
    else if (!strcmp(kv, "delay_ms"))
      st->fault.delay_ms = (int)v;
    else if (!strcmp(kv, "kill_before_exp_commit"))
      st->fault.kill_before_exp_commit = v != 0;
    else if (!strcmp(kv, "sync_fail_after_result"))
      st->fault.sync_fail_after_result = v != 0;
    else if (!strcmp(kv, "disk_full"))
      st->fault.disk_full = v != 0;
    else if (!strcmp(kv, "blob_limit"))
      sqlite3_limit(st->w, SQLITE_LIMIT_LENGTH, (int)v);
    else
      continue;
    log_warn("store: test fault injection on: %s=%ld", kv, v);
  }
}

static int store_exec(sqlite3 *db, const char *sql, char *err, size_t errlen, const char *what) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    snprintf(err, errlen, "%s: %s", what, msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return -EIO;
  }
  return 0;
}

static int store_user_version(sqlite3 *db, int *v) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK) return -EIO;
  int rc = sqlite3_step(s) == SQLITE_ROW ? 0 : -EIO;
  if (!rc) *v = sqlite3_column_int(s, 0);
  sqlite3_finalize(s);
  return rc;
}

static int store_migrate(sqlite3 *db, char *err, size_t errlen) {
  int have = 0;
  if (store_user_version(db, &have)) {
    snprintf(err, errlen, "reading user_version: %s", sqlite3_errmsg(db));
    return -EIO;
  }
  for (int i = 0; i < migrations_count; i++) {
    const struct migration *m = &migrations_table[i];
    if (m->version <= have) continue;
    char what[160], pragma[64];
    snprintf(what, sizeof what, "migration %s", m->name);
    snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", m->version);
    if (store_exec(db, "BEGIN IMMEDIATE", err, errlen, what)) return -EIO;
    if (store_exec(db, m->sql, err, errlen, what) || store_exec(db, pragma, err, errlen, what)) {
      sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
      return -EIO;
    }
    if (store_exec(db, "COMMIT", err, errlen, what)) return -EIO;
    log_info("store: applied migration %s", m->name);
  }
  return 0;
}

static int store_open_conn(const char *path, int read_only, sqlite3 **db, char *err,
                           size_t errlen) {
  int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path, db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
    snprintf(err, errlen, "cannot open database %s: %s", path,
             *db ? sqlite3_errmsg(*db) : "out of memory");
    return -EIO;
  }
  sqlite3_busy_timeout(*db, 5000);
  return 0;
}

static int store_wal_autocheckpoint(sqlite3 *db, int frames, char *err, size_t errlen) {
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA wal_autocheckpoint=%d", frames);
  return store_exec(db, sql, err, errlen, "setting wal_autocheckpoint");
}

/* The -wal file (SQLite keeps using the same one while it has the database
 * open) and, once, its directory entry: after this, fdatasync of the fd makes
 * every committed frame durable. */
static int store_open_sync(struct store *st, char *err, size_t errlen) {
  st->sync_fd = open(st->wal_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (st->sync_fd < 0 || fdatasync(st->sync_fd)) {
    snprintf(err, errlen, "%s: %s", st->wal_path, strerror(errno));
    return -EIO;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", st->wal_path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *(slash == dir ? slash + 1 : slash) = 0;
  else
    snprintf(dir, sizeof dir, ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

int store_sync(struct store *st) {
  if (st->sync_fd < 0) return 0;
  if (st->fault.armed_sync) {
    /* A disk that takes its time before it refuses: long enough for a reply
     * sent too early to reach the client (the test would see it). */
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    return -EIO;
  }
  return fdatasync(st->sync_fd) ? -errno : 0;
}

int store_sync_full(const struct store *st) { return st->sync_fd >= 0; }

/* An empty store, no connection open yet (NULL: out of memory). */
static struct store *store_new(void) {
  struct store *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  if (pthread_mutex_init(&st->rlock, NULL)) {
    free(st);
    return NULL;
  }
  st->wal_fd = -1;
  st->sync_fd = -1;
  return st;
}

int store_open(const char *path, int wal_frames, int sync_full, struct store **out, char *err,
               size_t errlen) {
  struct store *st = store_new();
  if (!st) return -ENOMEM;
  int rc = -EIO;
  /* The database holds every worker's secret and every config (env values
   * included): created 0600 (SQLite gives its -wal and -shm files the same
   * mode), and a file others can read is narrowed to 0600. */
  if (strcmp(path, ":memory:") != 0) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct stat sb;
    if (fd >= 0 && !fstat(fd, &sb) && (sb.st_mode & 077)) {
      if (fchmod(fd, sb.st_mode & 0700))
        log_warn("store: %s is readable by others and "
                 "chmod failed: %s",
                 path, strerror(errno));
      else
        log_warn("store: %s was readable by others: mode set to 0600", path);
    }
    if (fd >= 0) close(fd);
  }
  if (store_open_conn(path, 0, &st->w, err, errlen)) goto fail;
  /* The -wal file SQLite itself writes (it resolves symlinks in the path),
   * never one named after the path as given: flushing another file would
   * acknowledge writes that are not on the disk. */
  sqlite3_filename fn = sqlite3_db_filename(st->w, "main");
  const char *wal = fn && *fn ? sqlite3_filename_wal(fn) : NULL; /* NULL: in memory */
  if (snprintf(st->wal_path, sizeof st->wal_path, "%s", wal ? wal : "") >=
      (int)sizeof st->wal_path) {
    snprintf(err, errlen, "database %s: path too long", path);
    goto fail;
  }
  /* WAL + synchronous=NORMAL: a commit is in the WAL file (the OS has it)
   * before COMMIT returns, so kill -9 of the server loses nothing committed,
   * and SQLite syncs around every checkpoint, so the file is never corrupt.
   * Durable acknowledgements (sync_full, the default) add store_sync: an
   * fdatasync of the WAL after the commit and before any reply. That is what
   * synchronous=FULL does inside COMMIT, but called by the commit thread
   * after the transaction has ended, so the WAL write lock is not held
   * during the flush. */
  if (store_exec(st->w, "PRAGMA journal_mode=WAL", err, errlen, "enabling WAL") ||
      store_exec(st->w, "PRAGMA synchronous=NORMAL", err, errlen, "setting synchronous") ||
      store_exec(st->w, "PRAGMA foreign_keys=OFF", err, errlen, "pragma") ||
      /* Result inserts touch index pages all over (trial_id, t): a 32 MiB
       * page cache keeps them in memory past a few hundred thousand rows. */
      store_exec(st->w, "PRAGMA cache_size=-32768", err, errlen, "pragma") ||
      /* store_checkpoint (main thread, PASSIVE) copies the WAL back off the
       * commit path, but under constant writes it never quite finishes, so
       * the WAL could never restart and would grow without bound. The
       * writer's own checkpoint (default 8192 frames, 32 MiB) finishes the job,
       * with little left to copy, and lets the next commit restart the WAL. */
      store_wal_autocheckpoint(st->w, wal_frames, err, errlen))
    goto fail;
  if (store_migrate(st->w, err, errlen)) goto fail;
  for (int i = 0; i < ST_COUNT; i++) {
    if (sqlite3_prepare_v3(st->w, store_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i],
                           NULL) != SQLITE_OK) {
      snprintf(err, errlen, "preparing statement %d: %s", i, sqlite3_errmsg(st->w));
      goto fail;
    }
  }
  if (store_open_conn(path, 0, &st->r, err, errlen)) goto fail;
  if (store_open_conn(path, 0, &st->c, err, errlen)) goto fail;
  /* A connection opens the WAL at its first read: until then its
   * sqlite3_wal_checkpoint_v2 finds no WAL and copies nothing (log -1), and
   * the writer's own checkpoint at --wal-checkpoint-frames did all of it, a
   * 32 MiB copy and the database's fsync inside one commit, every reply
   * waiting (the durable benchmark's slowest batches, 25-30 ms). */
  if (store_exec(st->c, "SELECT 1 FROM sqlite_master LIMIT 1", err, errlen,
                 "opening the WAL for checkpoints"))
    goto fail;
  store_faults_parse(st);
  if (sync_full && st->wal_path[0] && store_open_sync(st, err, errlen)) goto fail;
  *out = st;
  return 0;
fail:
  store_close(st);
  return rc;
}

/* The schema must be this version's own: no migration runs here. */
static int store_check_version(sqlite3 *db, const char *path, char *err, size_t errlen) {
  int have = 0, want = 0;
  for (int i = 0; i < migrations_count; i++)
    if (migrations_table[i].version > want) want = migrations_table[i].version;
  if (store_user_version(db, &have)) {
    snprintf(err, errlen, "reading user_version of %s: %s", path, sqlite3_errmsg(db));
    return -EIO;
  }
  if (have == want) return 0;
  snprintf(err, errlen,
           have < want ? "%s has schema version %d, older than this server's %d: --read-only "
                         "does not migrate it; start ctune-server on it without --read-only once"
                       : "%s has schema version %d, newer than this server's %d: read it with "
                         "the ctune-server that wrote it",
           path, have, want);
  return -EPROTO;
}

int store_open_read_only(const char *path, struct store **out, char *err, size_t errlen) {
  struct store *st = store_new();
  if (!st) return -ENOMEM;
  int rc = -EIO;
  if (store_open_conn(path, 1, &st->w, err, errlen)) goto fail;
  /* Belt and braces over the open flags: SQLite refuses any write. */
  if (store_exec(st->w, "PRAGMA query_only=1", err, errlen, "pragma")) goto fail;
  if ((rc = store_check_version(st->w, path, err, errlen))) goto fail;
  rc = -EIO;
  for (int i = 0; i < ST_COUNT; i++) {
    if (sqlite3_prepare_v3(st->w, store_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i],
                           NULL) != SQLITE_OK) {
      snprintf(err, errlen, "preparing statement %d: %s", i, sqlite3_errmsg(st->w));
      goto fail;
    }
  }
  if (store_open_conn(path, 1, &st->r, err, errlen) ||
      store_exec(st->r, "PRAGMA query_only=1", err, errlen, "pragma"))
    goto fail;
  *out = st;
  return 0;
fail:
  store_close(st);
  return rc;
}

void store_close(struct store *st) {
  if (!st) return;
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(st->stmt[i]);
  sqlite3_close(st->c);
  sqlite3_close(st->r);
  sqlite3_close(st->w);
  if (st->wal_fd >= 0) close(st->wal_fd);
  if (st->sync_fd >= 0) close(st->sync_fd);
  pthread_mutex_destroy(&st->rlock);
  free(st);
}

/* Runs a bound statement to completion and resets it for the next use. */
static int store_step(struct store *st, sqlite3_stmt *s) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_DONE) {
    snprintf(st->errmsg, sizeof st->errmsg, "%s", sqlite3_errmsg(st->w));
    log_error("store: %s", st->errmsg);
    rc &= 0xff; /* the primary code of an extended one */
    return rc == SQLITE_CONSTRAINT                    ? -EEXIST
           : rc == SQLITE_BUSY || rc == SQLITE_LOCKED ? -EBUSY
           : rc == SQLITE_FULL                        ? -ENOSPC
                                                      : -EIO;
  }
  return 0;
}

const char *store_errmsg(struct store *st) { return st->errmsg; }

/* A value SQLite refuses to take (over its length limit): nothing stored. */
static int store_bind_failed(struct store *st, sqlite3_stmt *s) {
  snprintf(st->errmsg, sizeof st->errmsg, "%s", sqlite3_errmsg(st->w));
  log_error("store: %s", st->errmsg);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return -E2BIG;
}

static void bind_text(sqlite3_stmt *s, int i, const char *v) {
  if (v)
    sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, i);
}

static void bind_time(sqlite3_stmt *s, int i, double v) {
  if (v > 0)
    sqlite3_bind_double(s, i, v);
  else
    sqlite3_bind_null(s, i);
}

/* NaN and the infinities are stored as NULL (SQLite has no NaN). */
static void bind_real_or_null(sqlite3_stmt *s, int i, double v) {
  if (isfinite(v))
    sqlite3_bind_double(s, i, v);
  else
    sqlite3_bind_null(s, i);
}

/* 011 (ARCHITECTURE.md#bounded-memory): parameters 22..33 of ST_PUT_TRIAL. */
static void store_bind_summary(sqlite3_stmt *s, const struct store_trial_row *r) {
  sqlite3_bind_int64(s, 22, r->created_seq);
  sqlite3_bind_int(s, 23, r->res_known);
  sqlite3_bind_int64(s, 24, r->nres);
  sqlite3_bind_int64(s, 25, r->first_seq);
  sqlite3_bind_int64(s, 26, r->last_seq);
  if (r->nres)
    sqlite3_bind_double(s, 27, r->last_t);
  else
    sqlite3_bind_null(s, 27);
  for (int k = 0; k < 6; k++) bind_real_or_null(s, 28 + k, r->scores[k]);
}

int store_begin(struct store *st) {
  st->errmsg[0] = 0;
  if (st->fault.delay_ms > 0) {
    struct timespec ts = {st->fault.delay_ms / 1000, (long)(st->fault.delay_ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
  }
  if (st->fault.busy > 0) {
    st->fault.busy--;
    snprintf(st->errmsg, sizeof st->errmsg, "database is locked (injected)");
    return -EBUSY;
  }
  return store_step(st, st->stmt[ST_BEGIN]);
}

int store_commit(struct store *st) {
  if (st->fault.armed_before) raise(SIGKILL); /* test: crash before this commit */
  if (st->fault.disk_full) {                  /* test: what SQLite says when the WAL cannot grow */
    snprintf(st->errmsg, sizeof st->errmsg, "database or disk is full (injected)");
    log_error("store: %s", st->errmsg);
    return -ENOSPC;
  }
  int rc = store_step(st, st->stmt[ST_COMMIT]);
  if (!rc && st->fault.armed) raise(SIGKILL); /* test: crash right after this commit */
  return rc;
}

int store_rollback(struct store *st) {
  st->fault.armed = 0;
  st->fault.armed_before = 0;
  return store_step(st, st->stmt[ST_ROLLBACK]);
}

int store_savepoint(struct store *st) { return store_step(st, st->stmt[ST_SAVEPOINT]); }
int store_rollback_to(struct store *st) { return store_step(st, st->stmt[ST_ROLLBACK_TO]); }
int store_release(struct store *st) { return store_step(st, st->stmt[ST_RELEASE]); }

int store_put_seq(struct store *st, int64_t seq) {
  sqlite3_bind_int64(st->stmt[ST_PUT_SEQ], 1, seq);
  return store_step(st, st->stmt[ST_PUT_SEQ]);
}

int store_put_experiment(struct store *st, const struct store_experiment_row *r) {
  sqlite3_stmt *s = st->stmt[ST_PUT_EXP];
  sqlite3_bind_int64(s, 1, r->id);
  bind_text(s, 2, r->name);
  bind_text(s, 3, r->status);
  bind_text(s, 4, r->config);
  sqlite3_bind_int64(s, 5, (int64_t)r->seed);
  sqlite3_bind_double(s, 6, r->created_at);
  if (r->has_ended_at)
    sqlite3_bind_double(s, 7, r->ended_at);
  else
    sqlite3_bind_null(s, 7);
  sqlite3_bind_int64(s, 8, r->updated_seq);
  bind_text(s, 9, r->end_reason);
  sqlite3_bind_double(s, 10, r->run_time_s);
  sqlite3_bind_double(s, 11, r->priority > 0 ? r->priority : 1); /* 010 */
  bind_text(s, 12, r->notes ? r->notes : "");
  bind_text(s, 13, r->tags ? r->tags : "[]");
  if (st->fault.kill_before_exp_commit) st->fault.armed_before = 1;
  return store_step(st, s);
}

int store_put_trial(struct store *st, const struct store_trial_row *r) {
  sqlite3_stmt *s = st->stmt[ST_PUT_TRIAL];
  sqlite3_bind_int64(s, 1, r->id);
  sqlite3_bind_int64(s, 2, r->experiment_id);
  sqlite3_bind_int64(s, 3, r->idx);
  bind_text(s, 4, r->name);
  bind_text(s, 5, r->status);
  sqlite3_bind_int(s, 6, r->stopped_early);
  bind_text(s, 7, r->config);
  sqlite3_bind_int(s, 8, r->bracket);
  bind_text(s, 9, r->error);
  if (r->has_exit_code)
    sqlite3_bind_int(s, 10, r->exit_code);
  else
    sqlite3_bind_null(s, 10);
  sqlite3_bind_int(s, 11, r->num_failures);
  sqlite3_bind_int(s, 12, r->attempt);
  if (r->worker_id)
    sqlite3_bind_int64(s, 13, r->worker_id);
  else
    sqlite3_bind_null(s, 13);
  sqlite3_bind_double(s, 14, r->created_at);
  bind_time(s, 15, r->started_at);
  bind_time(s, 16, r->ended_at);
  sqlite3_bind_int64(s, 17, r->updated_seq);
  bind_text(s, 18, r->reason);
  sqlite3_bind_int64(s, 19, r->generation);
  bind_text(s, 20, r->lease_end_action); /* 009 */
  if (r->has_ck_time_total)
    sqlite3_bind_double(s, 21, r->ck_time_total_s);
  else
    sqlite3_bind_null(s, 21);
  store_bind_summary(s, r);         /* 011 */
  bind_text(s, 34, r->attribution); /* 016 */
  if (st->fault.kill_after_trial_end && r->status &&
      (!strcmp(r->status, "TERMINATED") || !strcmp(r->status, "ERROR")))
    st->fault.armed = 1;
  return store_step(st, s);
}

int store_insert_result(struct store *st, const struct store_result_row *r) {
  sqlite3_stmt *s = st->stmt[ST_INS_RESULT];
  sqlite3_bind_int64(s, 1, r->seq);
  sqlite3_bind_int64(s, 2, r->trial_id);
  sqlite3_bind_int64(s, 3, r->experiment_id);
  sqlite3_bind_double(s, 4, r->t);
  bind_text(s, 5, r->decision);
  bind_text(s, 6, r->data);
  sqlite3_bind_int64(s, 7, r->gen);
  if (st->fault.sync_fail_after_result) st->fault.armed_sync = 1;
  return store_step(st, s);
}

int store_insert_asha(struct store *st, const struct store_asha_row *r) {
  sqlite3_stmt *s = st->stmt[ST_INS_ASHA];
  sqlite3_bind_int64(s, 1, r->experiment_id);
  sqlite3_bind_int64(s, 2, r->trial_id);
  sqlite3_bind_int(s, 3, r->bracket);
  sqlite3_bind_double(s, 4, r->milestone);
  if (isfinite(r->value))
    sqlite3_bind_double(s, 5, r->value);
  else
    sqlite3_bind_null(s, 5);
  sqlite3_bind_int(s, 6, r->stopped_early);
  sqlite3_bind_int64(s, 7, r->seq);
  return store_step(st, s);
}

int store_insert_event(struct store *st, const struct store_event_row *r) {
  sqlite3_stmt *s = st->stmt[ST_INS_EVENT];
  sqlite3_bind_int64(s, 1, r->seq);
  sqlite3_bind_int64(s, 2, r->trial_id);
  sqlite3_bind_int64(s, 3, r->experiment_id);
  sqlite3_bind_double(s, 4, r->time);
  bind_text(s, 5, r->kind);
  bind_text(s, 6, r->reason);
  bind_text(s, 7, r->data);
  return store_step(st, s);
}

int store_insert_sched_record(struct store *st, int64_t experiment_id, int64_t seq,
                              int64_t trial_id, const char *record) {
  sqlite3_stmt *s = st->stmt[ST_INS_SCHED_REC];
  sqlite3_bind_int64(s, 1, experiment_id);
  sqlite3_bind_int64(s, 2, seq);
  sqlite3_bind_int64(s, 3, trial_id);
  bind_text(s, 4, record);
  return store_step(st, s);
}

int store_copy_checkpoint(struct store *st, int64_t from_trial, int64_t to_trial) {
  sqlite3_stmt *s = st->stmt[ST_COPY_CKPT];
  sqlite3_bind_int64(s, 1, to_trial);
  sqlite3_bind_int64(s, 2, from_trial);
  return store_step(st, s);
}

int store_snapshot_checkpoint(struct store *st, int64_t trial_id) {
  sqlite3_stmt *s = st->stmt[ST_SNAP_CKPT];
  sqlite3_bind_int64(s, 1, trial_id);
  return store_step(st, s);
}

int store_copy_snapshot(struct store *st, int64_t from_trial, int64_t to_trial) {
  sqlite3_stmt *s = st->stmt[ST_COPY_SNAP];
  sqlite3_bind_int64(s, 1, to_trial);
  sqlite3_bind_int64(s, 2, from_trial);
  return store_step(st, s);
}

int store_delete_experiment(struct store *st, int64_t experiment_id) {
  sqlite3_stmt *s = st->stmt[ST_DEL_EXP];
  sqlite3_bind_int64(s, 1, experiment_id);
  int rc = store_step(st, s);
  for (size_t i = 0; !rc && i < sizeof store_del_sql / sizeof store_del_sql[0]; i++) {
    /* Rare (a user's delete): prepared on use, on the writer's connection. */
    sqlite3_stmt *d = NULL;
    if (sqlite3_prepare_v2(st->w, store_del_sql[i], -1, &d, NULL) != SQLITE_OK) {
      snprintf(st->errmsg, sizeof st->errmsg, "%s", sqlite3_errmsg(st->w));
      log_error("store: %s", st->errmsg);
      return -EIO;
    }
    if (sqlite3_bind_parameter_count(d)) sqlite3_bind_int64(d, 1, experiment_id);
    rc = store_step(st, d);
    sqlite3_finalize(d);
  }
  if (!rc && st->fault.kill_before_exp_commit) st->fault.armed_before = 1;
  return rc;
}

int store_put_worker(struct store *st, const struct store_worker_row *r) {
  sqlite3_stmt *s = st->stmt[ST_PUT_WORKER];
  sqlite3_bind_int64(s, 1, r->id);
  bind_text(s, 2, r->name);
  sqlite3_bind_double(s, 3, r->cpu);
  sqlite3_bind_double(s, 4, r->gpu);
  sqlite3_bind_int64(s, 5, r->memory_mb);
  sqlite3_bind_double(s, 6, r->registered_at);
  sqlite3_bind_double(s, 7, r->last_heartbeat);
  bind_text(s, 8, r->secret);
  bind_text(s, 9, r->quarantine[0] ? r->quarantine : NULL); /* 016 */
  sqlite3_bind_int(s, 10, r->spot != 0);                    /* 017 */
  return store_step(st, s);
}

int store_put_checkpoint(struct store *st, int64_t trial_id, int64_t iteration, uint32_t crc,
                         const void *data, size_t len) {
  sqlite3_stmt *s = st->stmt[ST_PUT_CKPT];
  sqlite3_bind_int64(s, 1, trial_id);
  sqlite3_bind_int64(s, 2, iteration);
  sqlite3_bind_int64(s, 3, (int64_t)crc);
  if (sqlite3_bind_blob64(s, 4, len ? data : "", len, SQLITE_STATIC) != SQLITE_OK)
    return store_bind_failed(st, s);
  return store_step(st, s);
}

int store_put_log(struct store *st, int64_t trial_id, int attempt, int64_t worker_id,
                  const char *log, size_t len) {
  return store_put_member_log(st, trial_id, attempt, worker_id, 0, log, len);
}

int store_put_member_log(struct store *st, int64_t trial_id, int attempt, int64_t worker_id,
                         int rank, const char *log, size_t len) {
  /* Read in the writer's own transaction: the row it replaces. */
  sqlite3_stmt *g = st->stmt[ST_GET_LOG];
  sqlite3_bind_int64(g, 1, trial_id);
  int rc = sqlite3_step(g);
  char *row = NULL;
  size_t rowlen = 0;
  if (rc == SQLITE_ROW)
    rc = store_logs_merge((const char *)sqlite3_column_text(g, 0),
                          (size_t)sqlite3_column_bytes(g, 0), attempt, worker_id, rank, log, len,
                          &row, &rowlen);
  else if (rc == SQLITE_DONE)
    rc = store_logs_merge(NULL, 0, attempt, worker_id, rank, log, len, &row, &rowlen);
  else
    rc = -EIO;
  sqlite3_reset(g);
  sqlite3_clear_bindings(g);
  if (rc) {
    if (rc == -EIO) log_error("store: %s", sqlite3_errmsg(st->w));
    return rc;
  }
  sqlite3_stmt *s = st->stmt[ST_PUT_LOG];
  sqlite3_bind_int64(s, 1, trial_id);
  if (sqlite3_bind_text64(s, 2, row, rowlen, SQLITE_TRANSIENT, SQLITE_UTF8) != SQLITE_OK) {
    free(row);
    return store_bind_failed(st, s);
  }
  free(row);
  return store_step(st, s);
}

int store_checkpoint(struct store *st, int *copied) {
  int log = 0, done = 0;
  *copied = 0;
  if (!st->c) return 0; /* a read-only store copies nothing back */
  /* With synchronous=NORMAL the WAL is only synced by checkpoints, so the
   * writer's checkpoint would flush everything written since the last one
   * (tens of ms, every reply waiting). Flushing it here, often and off the
   * commit path, leaves that checkpoint almost nothing to sync. An fd of our
   * own flushes the same file; it stays open until store_close. */
  if (st->sync_fd < 0) { /* durable commits flush the WAL themselves */
    if (st->wal_fd < 0 && st->wal_path[0]) st->wal_fd = open(st->wal_path, O_RDONLY | O_CLOEXEC);
    if (st->wal_fd >= 0) fdatasync(st->wal_fd);
  }
  int rc = sqlite3_wal_checkpoint_v2(st->c, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  /* Did the WAL move since the last call? While writes go on, come back soon.
   * (log is -1 when the checkpoint was busy: count that as moving.) */
  *copied = log < 0 || log != st->ckpt_done;
  st->ckpt_done = log;
  return rc == SQLITE_OK || rc == SQLITE_BUSY ? 0 : -EIO;
}

/* ---- reader side ---- */

static const char *col_text(sqlite3_stmt *s, int i) {
  return (const char *)sqlite3_column_text(s, i);
}

static double col_time(sqlite3_stmt *s, int i) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? 0 : sqlite3_column_double(s, i);
}

/* Prepares on the reader connection; the caller holds rlock. */
static double col_real_or_nan(sqlite3_stmt *s, int i) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

/* A trial row's columns, in the order store_trial_row_read takes them. */
#define STORE_TRIAL_COLS                                                                           \
  "id,experiment_id,idx,name,status,stopped_early,config,bracket,error,exit_code,"                 \
  "num_failures,attempt,worker_id,created_at,started_at,ended_at,updated_seq,reason,"              \
  "generation,lease_end_action,checkpoint_time_total_s,created_seq,res_known,nres,"                \
  "first_seq,last_seq,last_t,score_last,score_avg,score_last5,score_last10,score_min,"             \
  "score_max,attribution"
#define STORE_TRIAL_NCOLS 34

static void store_trial_row_read(sqlite3_stmt *s, struct store_trial_row *r) {
  *r = (struct store_trial_row){.id = sqlite3_column_int64(s, 0),
                                .experiment_id = sqlite3_column_int64(s, 1),
                                .idx = sqlite3_column_int64(s, 2),
                                .name = col_text(s, 3),
                                .status = col_text(s, 4),
                                .stopped_early = sqlite3_column_int(s, 5),
                                .config = col_text(s, 6),
                                .bracket = sqlite3_column_int(s, 7),
                                .error = col_text(s, 8),
                                .has_exit_code = sqlite3_column_type(s, 9) != SQLITE_NULL,
                                .exit_code = sqlite3_column_int(s, 9),
                                .num_failures = sqlite3_column_int(s, 10),
                                .attempt = sqlite3_column_int(s, 11),
                                .worker_id = sqlite3_column_int64(s, 12),
                                .created_at = sqlite3_column_double(s, 13),
                                .started_at = col_time(s, 14),
                                .ended_at = col_time(s, 15),
                                .updated_seq = sqlite3_column_int64(s, 16),
                                .reason = col_text(s, 17),
                                .generation = sqlite3_column_int64(s, 18),
                                .lease_end_action = col_text(s, 19),
                                .has_ck_time_total = sqlite3_column_type(s, 20) != SQLITE_NULL,
                                .ck_time_total_s = sqlite3_column_double(s, 20),
                                .created_seq = sqlite3_column_int64(s, 21),
                                .res_known = sqlite3_column_int(s, 22),
                                .nres = sqlite3_column_int64(s, 23),
                                .first_seq = sqlite3_column_int64(s, 24),
                                .last_seq = sqlite3_column_int64(s, 25),
                                .last_t = col_real_or_nan(s, 26)};
  for (int k = 0; k < 6; k++) r->scores[k] = col_real_or_nan(s, 27 + k);
  r->attribution = col_text(s, 33); /* 016 */
}

static int store_rprep(struct store *st, const char *sql, sqlite3_stmt **s) {
  if (sqlite3_prepare_v2(st->r, sql, -1, s, NULL) != SQLITE_OK) {
    log_error("store: %s", sqlite3_errmsg(st->r));
    return -EIO;
  }
  return 0;
}

static int store_result_rows(struct store *st, sqlite3_stmt *s, const struct store_loader *l) {
  int rc = 0, step;
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
    struct store_result_row r = {.seq = sqlite3_column_int64(s, 0),
                                 .trial_id = sqlite3_column_int64(s, 1),
                                 .experiment_id = sqlite3_column_int64(s, 2),
                                 .t = sqlite3_column_double(s, 3),
                                 .decision = col_text(s, 4),
                                 .data = col_text(s, 5),
                                 .gen = sqlite3_column_int64(s, 6)};
    rc = l->result(l->ctx, &r);
  }
  if (!rc && step != SQLITE_DONE) {
    log_error("store: %s", sqlite3_errmsg(st->r));
    rc = -EIO;
  }
  return rc;
}

static int store_load_results_all(struct store *st, const struct store_loader *l) {
  sqlite3_stmt *s = NULL;
  if (store_rprep(st,
                  "SELECT seq,trial_id,experiment_id,t,decision,data,gen FROM results "
                  "ORDER BY seq",
                  &s))
    return -EIO;
  int rc = store_result_rows(st, s, l);
  sqlite3_finalize(s);
  return rc;
}

struct store_since {
  int64_t id, since;
};

/* ARCHITECTURE.md#bounded-memory: only the results the loader asks for, from
 * the seq it names per experiment. When few experiments need theirs, one
 * range scan each (index results_by_experiment), so a restart does not read
 * every result ever; when most do and none needs a summary computed (a
 * restart of a server whose work is live), one pass in seq order is cheaper
 * than index lookups (the table is in seq order), filtered here. */
static int store_load_results_by_experiment(struct store *st, const struct store_loader *l) {
  sqlite3_stmt *ids = NULL, *s = NULL;
  struct store_since *need = NULL;
  size_t n = 0, cap = 0, nexp = 0;
  int rc = 0, step, backfill = 0;
  if (store_rprep(st, "SELECT max(seq) FROM results", &ids)) return -EIO;
  if (sqlite3_step(ids) == SQLITE_ROW && sqlite3_column_type(ids, 0) != SQLITE_NULL && l->seq_seen)
    l->seq_seen(l->ctx, sqlite3_column_int64(ids, 0));
  sqlite3_finalize(ids);
  if (store_rprep(st, "SELECT id FROM experiments ORDER BY id", &ids)) return -EIO;
  while (!rc && (step = sqlite3_step(ids)) == SQLITE_ROW) {
    int bf = 0;
    int64_t id = sqlite3_column_int64(ids, 0), since = l->results_since(l->ctx, id, &bf);
    nexp++;
    if (since < 0) continue;
    backfill |= bf;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      struct store_since *g = realloc(need, nc * sizeof *g);
      if (!g)
        rc = -ENOMEM;
      else
        need = g, cap = nc;
    }
    if (!rc) need[n++] = (struct store_since){id, since};
  }
  sqlite3_finalize(ids);
  if (rc || !n) goto out;
  if (!backfill && n * 2 > nexp) {
    /* One pass; rows of experiments not needed or before their seq are
     * skipped before anything is parsed. need[] is in id order. */
    int64_t from = need[0].since;
    for (size_t i = 1; i < n; i++)
      if (need[i].since < from) from = need[i].since;
    if (store_rprep(st,
                    "SELECT seq,trial_id,experiment_id,t,decision,data,gen FROM results "
                    "WHERE seq>=? ORDER BY seq",
                    &s)) {
      rc = -EIO;
      goto out;
    }
    sqlite3_bind_int64(s, 1, from);
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
      int64_t eid = sqlite3_column_int64(s, 2), seq = sqlite3_column_int64(s, 0);
      size_t lo = 0, hi = n;
      while (lo < hi) { /* binary search by id */
        size_t mid = (lo + hi) / 2;
        if (need[mid].id < eid)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == n || need[lo].id != eid || seq < need[lo].since) continue;
      struct store_result_row r = {.seq = seq,
                                   .trial_id = sqlite3_column_int64(s, 1),
                                   .experiment_id = eid,
                                   .t = sqlite3_column_double(s, 3),
                                   .decision = col_text(s, 4),
                                   .data = col_text(s, 5),
                                   .gen = sqlite3_column_int64(s, 6)};
      rc = l->result(l->ctx, &r);
    }
    if (!rc && step != SQLITE_DONE) rc = -EIO;
    for (size_t i = 0; !rc && i < n && l->results_done; i++)
      rc = l->results_done(l->ctx, need[i].id);
    goto out;
  }
  if (store_rprep(st,
                  "SELECT seq,trial_id,experiment_id,t,decision,data,gen FROM results "
                  "WHERE experiment_id=? AND seq>=? ORDER BY seq",
                  &s)) {
    rc = -EIO;
    goto out;
  }
  for (size_t i = 0; !rc && i < n; i++) {
    sqlite3_bind_int64(s, 1, need[i].id);
    sqlite3_bind_int64(s, 2, need[i].since);
    rc = store_result_rows(st, s, l);
    sqlite3_reset(s);
    if (!rc && l->results_done) rc = l->results_done(l->ctx, need[i].id);
  }
out:
  sqlite3_finalize(s);
  free(need);
  return rc;
}

static int store_load_rows(struct store *st, const struct store_loader *l) {
  sqlite3_stmt *s = NULL;
  int rc = 0, step;
  if (store_rprep(st,
                  "SELECT id,name,status,config,seed,created_at,ended_at,updated_seq,"
                  "end_reason,run_time_s,priority,notes,tags FROM experiments ORDER BY id",
                  &s))
    return -EIO;
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
    struct store_experiment_row r = {.id = sqlite3_column_int64(s, 0),
                                     .name = col_text(s, 1),
                                     .status = col_text(s, 2),
                                     .config = col_text(s, 3),
                                     .seed = (uint64_t)sqlite3_column_int64(s, 4),
                                     .created_at = sqlite3_column_double(s, 5),
                                     .has_ended_at = sqlite3_column_type(s, 6) != SQLITE_NULL,
                                     .ended_at = sqlite3_column_double(s, 6),
                                     .updated_seq = sqlite3_column_int64(s, 7),
                                     .end_reason = col_text(s, 8),
                                     .run_time_s = sqlite3_column_double(s, 9),
                                     .priority = sqlite3_column_double(s, 10),
                                     .notes = col_text(s, 11),
                                     .tags = col_text(s, 12)};
    rc = l->experiment(l->ctx, &r);
  }
  sqlite3_finalize(s);
  if (rc) return rc;

  /* Bounded memory: the experiments whose trials are not all ended with a
   * summary cannot start cold. */
  if (l->not_cold) {
    if (store_rprep(st,
                    "SELECT DISTINCT experiment_id FROM trials WHERE res_known=0 OR "
                    "status NOT IN ('TERMINATED','ERROR')",
                    &s))
      return -EIO;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) l->not_cold(l->ctx, sqlite3_column_int64(s, 0));
    sqlite3_finalize(s);
    if (step != SQLITE_DONE) return -EIO;
  }
  if (store_rprep(st, "SELECT " STORE_TRIAL_COLS " FROM trials ORDER BY id", &s)) return -EIO;
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
    struct store_trial_row r;
    store_trial_row_read(s, &r);
    rc = l->trial(l->ctx, &r);
  }
  sqlite3_finalize(s);
  if (rc) return rc;

  if ((rc = l->results_since ? store_load_results_by_experiment(st, l)
                             : store_load_results_all(st, l)))
    return rc;

  if (store_rprep(st,
                  "SELECT experiment_id,trial_id,bracket,milestone,value,stopped_early,"
                  "seq FROM asha_records ORDER BY seq, rowid",
                  &s))
    return -EIO;
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
    struct store_asha_row r = {
        .experiment_id = sqlite3_column_int64(s, 0),
        .trial_id = sqlite3_column_int64(s, 1),
        .bracket = sqlite3_column_int(s, 2),
        .milestone = sqlite3_column_double(s, 3),
        .value = sqlite3_column_type(s, 4) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 4),
        .stopped_early = sqlite3_column_int(s, 5),
        .seq = sqlite3_column_int64(s, 6)};
    rc = l->asha(l->ctx, &r);
  }
  sqlite3_finalize(s);
  if (rc) return rc;

  /* Scheduler records, replayed in seq order. */
  if (l->sched_record) {
    if (store_rprep(st,
                    "SELECT experiment_id,seq,trial_id,record FROM sched_records "
                    "ORDER BY seq, rowid",
                    &s))
      return -EIO;
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW)
      rc = l->sched_record(l->ctx, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
                           sqlite3_column_int64(s, 2), col_text(s, 3));
    sqlite3_finalize(s);
    if (rc) return rc;
  }

  if (store_rprep(st,
                  "SELECT id,name,cpu,gpu,memory_mb,registered_at,last_heartbeat,"
                  "secret,quarantine,spot FROM workers ORDER BY id",
                  &s))
    return -EIO;
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
    struct store_worker_row r = {.id = sqlite3_column_int64(s, 0),
                                 .name = col_text(s, 1),
                                 .cpu = sqlite3_column_double(s, 2),
                                 .gpu = sqlite3_column_double(s, 3),
                                 .memory_mb = sqlite3_column_int64(s, 4),
                                 .registered_at = sqlite3_column_double(s, 5),
                                 .last_heartbeat = sqlite3_column_double(s, 6)};
    const char *sec = col_text(s, 7);
    snprintf(r.secret, sizeof r.secret, "%s", sec ? sec : "");
    const char *q = col_text(s, 8); /* 016 */
    snprintf(r.quarantine, sizeof r.quarantine, "%s", q ? q : "");
    r.spot = sqlite3_column_int(s, 9) != 0; /* 017 */
    rc = l->worker(l->ctx, &r);
  }
  sqlite3_finalize(s);
  if (rc) return rc;

  if (store_rprep(st, "SELECT trial_id,iteration FROM checkpoints", &s)) return -EIO;
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW)
    rc = l->checkpoint(l->ctx, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1));
  sqlite3_finalize(s);
  return rc;
}

int store_load_snapshots(struct store *st, int (*fn)(void *ctx, int64_t trial_id, int64_t it),
                         void *ctx) {
  sqlite3_stmt *s = NULL;
  int rc = 0, step = SQLITE_DONE;
  pthread_mutex_lock(&st->rlock);
  if (store_rprep(st, "SELECT trial_id,iteration FROM pbt_checkpoints", &s)) {
    pthread_mutex_unlock(&st->rlock);
    return -EIO;
  }
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW)
    rc = fn(ctx, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1));
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc ? rc : step == SQLITE_DONE ? 0 : -EIO;
}

int store_get_meta(struct store *st, const char *key, int64_t *value) {
  sqlite3_stmt *s = NULL;
  *value = 0;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st, "SELECT value FROM meta WHERE key=?", &s);
  if (!rc) {
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW)
      *value = sqlite3_column_int64(s, 0);
    else if (step != SQLITE_DONE)
      rc = -EIO;
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_get_seq(struct store *st, int64_t *seq) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st, "SELECT value FROM meta WHERE key='seq'", &s);
  if (!rc) {
    int step = sqlite3_step(s);
    *seq = step == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    if (step != SQLITE_ROW && step != SQLITE_DONE) rc = -EIO;
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_load(struct store *st, const struct store_loader *l) {
  pthread_mutex_lock(&st->rlock);
  int rc = store_load_rows(st, l);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

static int store_each_result(struct store *st, sqlite3_stmt *s, store_result_fn fn, void *ctx) {
  int rc = 0, step;
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW)
    rc = fn(ctx, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), col_text(s, 2));
  if (!rc && step != SQLITE_DONE) {
    log_error("store: %s", sqlite3_errmsg(st->r));
    rc = -EIO;
  }
  return rc;
}

int store_experiment_trials(struct store *st, int64_t experiment_id, store_trial_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  int rc = 0, step;
  pthread_mutex_lock(&st->rlock);
  /* The checkpoint's iteration comes along (its data is never read here). */
  if (store_rprep(st,
                  "SELECT " STORE_TRIAL_COLS ",(SELECT iteration FROM checkpoints c "
                  "WHERE c.trial_id=trials.id) FROM trials WHERE experiment_id=? ORDER BY idx",
                  &s))
    rc = -EIO;
  if (!rc) sqlite3_bind_int64(s, 1, experiment_id);
  while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
    struct store_trial_row r;
    store_trial_row_read(s, &r);
    int has_ck = sqlite3_column_type(s, STORE_TRIAL_NCOLS) != SQLITE_NULL;
    rc = fn(ctx, &r, has_ck, has_ck ? sqlite3_column_int64(s, STORE_TRIAL_NCOLS) : 0);
  }
  if (!rc && step != SQLITE_DONE) {
    log_error("store: %s", sqlite3_errmsg(st->r));
    rc = -EIO;
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_trial_experiment(struct store *st, int64_t trial_id, int64_t *experiment_id) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st, "SELECT experiment_id FROM trials WHERE id=?", &s);
  if (!rc) {
    sqlite3_bind_int64(s, 1, trial_id);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW)
      *experiment_id = sqlite3_column_int64(s, 0);
    else
      rc = step == SQLITE_DONE ? -ENOENT : -EIO;
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_trial_results(struct store *st, int64_t experiment_id, int64_t trial_id,
                        int64_t first_seq, int64_t last_seq, int64_t offset, int64_t limit,
                        store_result_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st,
                       "SELECT seq,trial_id,data FROM results WHERE experiment_id=? AND "
                       "seq BETWEEN ? AND ? AND trial_id=? ORDER BY seq LIMIT ? OFFSET ?",
                       &s);
  if (!rc) {
    sqlite3_bind_int64(s, 1, experiment_id);
    sqlite3_bind_int64(s, 2, first_seq);
    sqlite3_bind_int64(s, 3, last_seq);
    sqlite3_bind_int64(s, 4, trial_id);
    sqlite3_bind_int64(s, 5, limit > 0 ? limit : -1);
    sqlite3_bind_int64(s, 6, offset > 0 ? offset : 0);
    rc = store_each_result(st, s, fn, ctx);
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_trial_decision(struct store *st, int64_t experiment_id, int64_t trial_id,
                         int64_t first_seq, int64_t last_seq, int64_t gen, double t,
                         char *decision) {
  sqlite3_stmt *s = NULL;
  *decision = 0;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st,
                       "SELECT decision FROM results WHERE experiment_id=? AND "
                       "seq BETWEEN ? AND ? AND trial_id=? AND gen=? AND t=? "
                       "ORDER BY seq DESC LIMIT 1",
                       &s);
  if (!rc) {
    sqlite3_bind_int64(s, 1, experiment_id);
    sqlite3_bind_int64(s, 2, first_seq);
    sqlite3_bind_int64(s, 3, last_seq);
    sqlite3_bind_int64(s, 4, trial_id);
    sqlite3_bind_int64(s, 5, gen);
    sqlite3_bind_double(s, 6, t);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
      const char *d = col_text(s, 0);
      *decision = d && d[0] == 's' ? 's' : 'c';
    } else if (step != SQLITE_DONE) {
      log_error("store: %s", sqlite3_errmsg(st->r));
      rc = -EIO;
    }
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_trial_rows(struct store *st, int64_t experiment_id, int64_t trial_id, int64_t first_seq,
                     int64_t last_seq, store_row_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st,
                       "SELECT seq,trial_id,experiment_id,t,decision,data,gen FROM results "
                       "WHERE experiment_id=? AND seq BETWEEN ? AND ? AND trial_id=? "
                       "ORDER BY seq",
                       &s);
  if (!rc) {
    sqlite3_bind_int64(s, 1, experiment_id);
    sqlite3_bind_int64(s, 2, first_seq);
    sqlite3_bind_int64(s, 3, last_seq);
    sqlite3_bind_int64(s, 4, trial_id);
    struct store_loader l = {.ctx = ctx, .result = fn};
    rc = store_result_rows(st, s, &l);
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_put_trial_summaries(struct store *st, const struct store_trial_row *rows, size_t n) {
  sqlite3_stmt *s = NULL;
  if (sqlite3_prepare_v2(st->w,
                         "UPDATE trials SET created_seq=?22,res_known=?23,nres=?24,"
                         "first_seq=?25,last_seq=?26,last_t=?27,score_last=?28,score_avg=?29,"
                         "score_last5=?30,score_last10=?31,score_min=?32,score_max=?33 "
                         "WHERE id=?1",
                         -1, &s, NULL) != SQLITE_OK) {
    log_error("store: %s", sqlite3_errmsg(st->w));
    return -EIO;
  }
  int rc = store_begin(st);
  for (size_t i = 0; !rc && i < n; i++) {
    sqlite3_bind_int64(s, 1, rows[i].id);
    store_bind_summary(s, &rows[i]);
    rc = store_step(st, s);
  }
  sqlite3_finalize(s);
  if (!rc)
    rc = store_commit(st);
  else
    store_rollback(st);
  return rc;
}

int store_results_by_seq(struct store *st, const int64_t *seqs, size_t n, store_result_fn fn,
                         void *ctx) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st, "SELECT seq,trial_id,data FROM results WHERE seq=?", &s);
  for (size_t i = 0; !rc && i < n; i++) {
    sqlite3_bind_int64(s, 1, seqs[i]);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW)
      rc = fn(ctx, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), col_text(s, 2));
    else if (step != SQLITE_DONE) {
      log_error("store: %s", sqlite3_errmsg(st->r));
      rc = -EIO;
    }
    sqlite3_reset(s);
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_experiment_results(struct store *st, int64_t experiment_id, int64_t since, int64_t limit,
                             store_result_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st,
                       "SELECT seq,trial_id,data FROM results WHERE experiment_id=? "
                       "AND seq>? ORDER BY seq LIMIT ?",
                       &s);
  if (!rc) {
    sqlite3_bind_int64(s, 1, experiment_id);
    sqlite3_bind_int64(s, 2, since);
    sqlite3_bind_int64(s, 3, limit > 0 ? limit : -1);
    rc = store_each_result(st, s, fn, ctx);
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_experiment_metric(struct store *st, int64_t experiment_id, const char *metric,
                            store_metric_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  /* json_extract with a quoted key so metric names with dots stay one key. */
  int rc = store_rprep(st,
                       "SELECT trial_id, json_extract(data, '$.\"' || ? || '\"') "
                       "FROM results WHERE experiment_id=? ORDER BY trial_id, seq",
                       &s);
  if (!rc) {
    sqlite3_bind_text(s, 1, metric, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, experiment_id);
    int step;
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
      int type = sqlite3_column_type(s, 1);
      int has = type == SQLITE_INTEGER || type == SQLITE_FLOAT;
      rc = fn(ctx, sqlite3_column_int64(s, 0), has, has ? sqlite3_column_double(s, 1) : 0);
    }
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_get_checkpoint(struct store *st, int64_t trial_id, int64_t *iteration, uint32_t *crc,
                         void **data, size_t *len) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st, "SELECT iteration,crc32,data FROM checkpoints WHERE trial_id=?", &s);
  if (!rc) {
    sqlite3_bind_int64(s, 1, trial_id);
    if (sqlite3_step(s) == SQLITE_ROW) {
      size_t n = (size_t)sqlite3_column_bytes(s, 2);
      void *buf = malloc(n ? n : 1);
      if (!buf)
        rc = -ENOMEM;
      else {
        if (n) memcpy(buf, sqlite3_column_blob(s, 2), n);
        *iteration = sqlite3_column_int64(s, 0);
        *crc = (uint32_t)sqlite3_column_int64(s, 1);
        *data = buf;
        *len = n;
      }
    } else
      rc = -ENOENT;
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_get_log(struct store *st, int64_t trial_id, char **log, size_t *len) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st, "SELECT log FROM logs WHERE trial_id=?", &s);
  if (!rc) {
    sqlite3_bind_int64(s, 1, trial_id);
    if (sqlite3_step(s) == SQLITE_ROW)
      rc = store_logs_render((const char *)sqlite3_column_text(s, 0),
                             (size_t)sqlite3_column_bytes(s, 0), log, len);
    else
      rc = -ENOENT;
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

/* GET /trials/{id} events (docs/protocol.md#decisions-and-trial-events). */
/* Trial events, of one trial (kind NULL) or of one kind (trial_id 0), in order. */
static int store_events_where(struct store *st, int64_t trial_id, const char *kind,
                              store_event_fn fn, void *ctx) {
  sqlite3_stmt *s = NULL;
  pthread_mutex_lock(&st->rlock);
  int rc = store_rprep(st,
                       kind ? "SELECT seq,trial_id,experiment_id,time,kind,reason,data "
                              "FROM trial_events WHERE kind=? ORDER BY seq"
                            : "SELECT seq,trial_id,experiment_id,time,kind,reason,data "
                              "FROM trial_events WHERE trial_id=? ORDER BY seq",
                       &s),
      step;
  if (!rc) {
    if (kind)
      sqlite3_bind_text(s, 1, kind, -1, SQLITE_TRANSIENT);
    else
      sqlite3_bind_int64(s, 1, trial_id);
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
      struct store_event_row r = {.seq = sqlite3_column_int64(s, 0),
                                  .trial_id = sqlite3_column_int64(s, 1),
                                  .experiment_id = sqlite3_column_int64(s, 2),
                                  .time = sqlite3_column_double(s, 3),
                                  .kind = col_text(s, 4),
                                  .reason = col_text(s, 5),
                                  .data = col_text(s, 6)};
      rc = fn(ctx, &r);
    }
  }
  sqlite3_finalize(s);
  pthread_mutex_unlock(&st->rlock);
  return rc;
}

int store_trial_events(struct store *st, int64_t trial_id, store_event_fn fn, void *ctx) {
  return store_events_where(st, trial_id, NULL, fn, ctx);
}

int store_events_of_kind(struct store *st, const char *kind, store_event_fn fn, void *ctx) {
  return store_events_where(st, 0, kind, fn, ctx);
}
