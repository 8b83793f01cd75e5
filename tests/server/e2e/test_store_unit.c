/* Unit tests (Check) for ctune-server's store and group commit on a temporary
 * SQLite file: migrations, round trips, batching, waiting, failure handling. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "commit.h"
#include "migrations.h"
#include "store.h"
#include "store_logs.h"

static char dir[64], db[128];

static const char *db_path_for_test(void) { return db; }

static void setup(void) {
  strcpy(dir, "/tmp/ctune-store-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(db, sizeof db, "%s/t.db", dir);
}

static void teardown(void) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "%s/t.db", dir);
  unlink(cmd);
  snprintf(cmd, sizeof cmd, "%s/t.db-wal", dir);
  unlink(cmd);
  snprintf(cmd, sizeof cmd, "%s/t.db-shm", dir);
  unlink(cmd);
  snprintf(cmd, sizeof cmd, "%s/link.db", dir);
  unlink(cmd);
  snprintf(cmd, sizeof cmd, "%s/link.db-wal", dir);
  unlink(cmd);
  rmdir(dir);
}

static struct store *open_store(void) {
  struct store *st = NULL;
  char err[256];
  ck_assert_msg(store_open(db, 8192, 1, &st, err, sizeof err) == 0, "%s", err);
  return st;
}

struct result_op {
  struct store_result_row row;
  char data[64];
};

static int apply_result(struct store *st, void *arg) {
  return store_insert_result(st, &((struct result_op *)arg)->row);
}

static struct result_op *make_result(int64_t seq, int64_t trial, double t) {
  struct result_op *op = calloc(1, sizeof *op);
  snprintf(op->data, sizeof op->data, "{\"training_iteration\":%g}", t);
  op->row = (struct store_result_row){.seq = seq,
                                      .trial_id = trial,
                                      .experiment_id = 1,
                                      .t = t,
                                      .decision = "continue",
                                      .data = op->data};
  return op;
}

static int count_results(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  (void)seq;
  (void)trial_id;
  (void)data;
  (*(int *)ctx)++;
  return 0;
}

/* Rule: the WAL the store flushes (--durability full) is the one SQLite
 * writes, the real database file's, even when the path given is a symlink:
 * flushing a -wal named after the link would flush an empty file. */
START_TEST(durable_flush_follows_a_symlinked_path) {
  char link[160], link_wal[170], real_wal[170];
  snprintf(link, sizeof link, "%s/link.db", dir);
  snprintf(link_wal, sizeof link_wal, "%s-wal", link);
  snprintf(real_wal, sizeof real_wal, "%s-wal", db);
  ck_assert_int_eq(symlink("t.db", link), 0);
  struct store *st = NULL;
  char err[256];
  ck_assert_msg(store_open(link, 8192, 1, &st, err, sizeof err) == 0, "%s", err);
  ck_assert(store_sync_full(st));
  ck_assert_int_eq(store_put_seq(st, 5), 0);
  ck_assert_int_eq(store_sync(st), 0);
  ck_assert_int_eq(access(link_wal, F_OK), -1); /* nothing named after the link */
  ck_assert_int_eq(access(real_wal, F_OK), 0);
  store_close(st);
}
END_TEST

START_TEST(migrations_and_round_trip) {
  struct store *st = open_store();
  struct store_experiment_row e = {1, "exp", "RUNNING", "{}", 42, 1.5, 0,
                                   0, 3,     NULL,      0,    1,  "",  "[]"};
  struct store_trial_row t = {.id = 1,
                              .experiment_id = 1,
                              .idx = 0,
                              .name = "exp_00000",
                              .status = "PENDING",
                              .config = "{\"lr\":0.1}",
                              .created_at = 1.5,
                              .updated_seq = 4};
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_put_experiment(st, &e), 0);
  ck_assert_int_eq(store_put_trial(st, &t), 0);
  ck_assert_int_eq(store_put_checkpoint(st, 1, 3, 0xdeadbeef, "abc", 3), 0);
  ck_assert_int_eq(store_put_log(st, 1, 1, 1, "tail", 4), 0);
  ck_assert_int_eq(store_commit(st), 0);
  store_close(st);
  /* reopening applies no migration twice (002 rebuilt results with its rows)
   * and reads back what was written */
  st = open_store();
  int64_t it;
  uint32_t crc;
  void *data;
  size_t len;
  ck_assert_int_eq(store_get_checkpoint(st, 1, &it, &crc, &data, &len), 0);
  ck_assert_int_eq(it, 3);
  ck_assert_uint_eq(crc, 0xdeadbeef);
  ck_assert_int_eq((int)len, 3);
  ck_assert_int_eq(memcmp(data, "abc", 3), 0);
  free(data);
  ck_assert_int_eq(store_get_checkpoint(st, 2, &it, &crc, &data, &len), -ENOENT);
  char *log;
  ck_assert_int_eq(store_get_log(st, 1, &log, &len), 0);
  ck_assert_str_eq(log, "tail");
  free(log);
  store_close(st);
}
END_TEST

/* Every attempt's log is kept, each marked, the newest upload of an
 * attempt replacing its earlier one; one attempt's log reads as it is; a
 * trial's output cannot forge a section; older attempts are bounded. */
START_TEST(logs_of_every_attempt) {
  struct store *st = open_store();
  struct store_experiment_row e = {1, "exp", "RUNNING", "{}", 42, 1.5, 0,
                                   0, 3,     NULL,      0,    1,  "",  "[]"};
  struct store_trial_row t = {.id = 1,
                              .experiment_id = 1,
                              .name = "exp_00000",
                              .status = "RUNNING",
                              .config = "{}",
                              .updated_seq = 4};
  char *log;
  size_t len;
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_put_experiment(st, &e), 0);
  ck_assert_int_eq(store_put_trial(st, &t), 0);
  ck_assert_int_eq(store_put_log(st, 1, 1, 1, "epoch 1\n", 8), 0);
  ck_assert_int_eq(store_put_log(st, 1, 1, 1,
                                 "epoch 1\nepoch 2\nfake \x1e"
                                 "9 9\n",
                                 26),
                   0);
  ck_assert_int_eq(store_commit(st), 0);
  ck_assert_int_eq(store_get_log(st, 1, &log, &len), 0);
  ck_assert_str_eq(log, "epoch 1\nepoch 2\nfake ?9 9\n"); /* one attempt: as it is */
  free(log);
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_put_log(st, 1, 2, 3, "resumed at 2", 12), 0);
  ck_assert_int_eq(store_commit(st), 0);
  ck_assert_int_eq(store_get_log(st, 1, &log, &len), 0);
  ck_assert_str_eq(log, "--- attempt 1 (worker 1) ---\nepoch 1\nepoch 2\nfake ?9 9\n"
                        "--- attempt 2 (worker 3) ---\nresumed at 2");
  ck_assert_uint_eq(len, strlen(log));
  free(log);
  /* Older attempts beyond the bound go first. */
  ck_assert_int_eq(store_begin(st), 0);
  for (int a = 3; a <= STORE_LOGS_MAX_ATTEMPTS + 4; a++) {
    char line[32];
    int n = snprintf(line, sizeof line, "attempt %d\n", a);
    ck_assert_int_eq(store_put_log(st, 1, a, 1, line, (size_t)n), 0);
  }
  ck_assert_int_eq(store_commit(st), 0);
  ck_assert_int_eq(store_get_log(st, 1, &log, &len), 0);
  ck_assert_ptr_null(strstr(log, "(worker 3)"));
  ck_assert_ptr_nonnull(strstr(log, "--- attempt 4 (worker 1) ---\nattempt 4\n"));
  ck_assert_ptr_nonnull(strstr(log, "--- attempt 20 (worker 1) ---\nattempt 20\n"));
  ck_assert_ptr_null(strstr(log, "--- attempt 3 "));
  free(log);
  store_close(st);
  /* A row written before attempts were kept reads as it is, and is kept
   * as an earlier attempt's when a later one uploads. */
  char *row, *out;
  size_t rl, ol;
  ck_assert_int_eq(store_logs_merge("old text\n", 9, 2, 5, 0, "new", 3, &row, &rl), 0);
  ck_assert_int_eq(store_logs_render(row, rl, &out, &ol), 0);
  ck_assert_str_eq(out, "--- an earlier attempt ---\nold text\n--- attempt 2 (worker 5) ---\nnew");
  free(out);
  free(row);
  ck_assert_int_eq(store_logs_render("legacy", 6, &out, &ol), 0);
  ck_assert_str_eq(out, "legacy");
  free(out);
}
END_TEST

START_TEST(group_commit_orders_and_waits) {
  struct store *st = open_store();
  struct commit *c;
  ck_assert_int_eq(commit_start(st, &c), 0);
  uint64_t ticket = 0, prev = 0;
  for (int i = 1; i <= 500; i++) {
    ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(i, 1 + i % 7, i), &ticket),
                     0);
    ck_assert_uint_eq(ticket, prev + 1);
    ck_assert_uint_eq(commit_group_close(c, i), ticket); /* one group per "hold" */
    prev = ticket;
  }
  ck_assert_int_eq(commit_wait(c, ticket), 0);
  int n = 0;
  ck_assert_int_eq(store_experiment_results(st, 1, 0, 0, count_results, &n), 0);
  ck_assert_int_eq(n, 500);
  n = 0;
  ck_assert_int_eq(store_experiment_results(st, 1, 490, 0, count_results, &n), 0);
  ck_assert_int_eq(n, 10);
  uint64_t batches, ops;
  commit_stats(c, &batches, &ops);
  ck_assert_uint_eq(ops, 500);
  ck_assert_uint_le(batches, 500);
  commit_stop(c);
  store_close(st);
}
END_TEST

static int callback_status = 1;
static int before_called;
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cb_cv = PTHREAD_COND_INITIALIZER;

static void before(void *ctx) {
  (void)ctx;
  before_called = 1;
}

static void done(void *ctx, int status) {
  (void)ctx;
  pthread_mutex_lock(&cb_mu);
  callback_status = status;
  pthread_cond_signal(&cb_cv);
  pthread_mutex_unlock(&cb_mu);
}

static int apply_fail(struct store *st, void *arg) {
  (void)st;
  (void)arg;
  return -EIO;
}

/* Waits for a ticket through commit_when_done (the reply path). */
static int wait_cb(struct commit *c, uint64_t t) {
  int status = 7;
  pthread_mutex_lock(&cb_mu);
  callback_status = 1;
  int r = commit_when_done(c, t, before, done, NULL, &status);
  if (r == 0) {
    ck_assert_int_eq(before_called, 1);
    while (callback_status == 1) pthread_cond_wait(&cb_cv, &cb_mu);
    status = callback_status;
  }
  pthread_mutex_unlock(&cb_mu);
  return status;
}

static int nresults(struct store *st) {
  int n = 0;
  ck_assert_int_eq(store_experiment_results(st, 1, 0, 0, count_results, &n), 0);
  return n;
}

/* A durable batch waits for the clients its replies released, bounded by
 * half a flush and 2 ms; a full enough queue, or a lone client, goes at once. */
START_TEST(gather_waits_for_clients_still_out) {
  ck_assert(commit_gather_s(48, 64, 0.004) == 0); /* 3/4 back: commit now */
  ck_assert(commit_gather_s(1, 1, 0.004) == 0);   /* a lone client never waits */
  ck_assert(commit_gather_s(0, 0, 0.004) == 0);
  ck_assert(commit_gather_s(2, 64, 0.001) == 0.0005); /* half a flush */
  ck_assert(commit_gather_s(2, 64, 0.300) == 0.002);  /* a stalled disk: 2 ms at most */
  /* The expectation follows the largest batch and decays to a lone client. */
  ck_assert_uint_eq(commit_expect_next(10, 64), 64);
  uint64_t e = 64;
  int n = 0;
  while (e > 1 && n < 100) e = commit_expect_next(e, 1), n++;
  ck_assert_uint_eq(e, 1);
  ck_assert_int_le(n, 64);
  ck_assert_uint_eq(commit_expect_next(1, 1), 1);
}
END_TEST

START_TEST(failed_group_fails_alone) {
  struct store *st = open_store();
  struct commit *c;
  ck_assert_int_eq(commit_start(st, &c), 0);
  uint64_t t1, t2, t3;
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(1, 1, 1), &t1), 0);
  commit_group_close(c, 1);
  ck_assert_int_eq(commit_wait(c, t1), 0);
  int status = 7;
  /* already committed: answered at once, before() not called */
  ck_assert_int_eq(commit_when_done(c, t1, before, done, NULL, &status), 1);
  ck_assert_int_eq(status, 0);
  ck_assert_int_eq(before_called, 0);
  /* one group: a good row and a failing op; nothing of it is stored */
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(2, 1, 2), &t2), 0);
  ck_assert_int_eq(commit_enqueue(c, apply_fail, NULL, NULL, &t2), 0);
  commit_group_close(c, 2);
  ck_assert_int_eq(commit_wait(c, t2), -EIO);
  ck_assert_int_eq(nresults(st), 1);
  /* the store stays writable: the next group commits */
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(3, 1, 3), &t3), 0);
  commit_group_close(c, 3);
  ck_assert_int_eq(wait_cb(c, t3), 0);
  ck_assert_int_eq(nresults(st), 2);
  ck_assert_uint_eq(commit_failures(c), 1);
  commit_stop(c);
  store_close(st);
}
END_TEST

/* Holds the commit thread inside its first op until released, so that the
 * test can line up several groups behind it (one batch). */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_entered;

static int apply_gate(struct store *st, void *arg) {
  (void)st;
  (void)arg;
  pthread_mutex_lock(&gate_mu);
  gate_entered = 1;
  pthread_cond_broadcast(&gate_cv);
  while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
  pthread_mutex_unlock(&gate_mu);
  return 0;
}

static int repairs;
static struct commit *repair_c;
static void repair(void *ctx) {
  (void)ctx;
  commit_repair_point(repair_c);
  pthread_mutex_lock(&gate_mu);
  repairs++;
  pthread_cond_broadcast(&gate_cv);
  pthread_mutex_unlock(&gate_mu);
}

START_TEST(failure_in_a_batch_keeps_earlier_groups) {
  struct store *st = open_store();
  struct commit *c;
  ck_assert_int_eq(commit_start(st, &c), 0);
  repair_c = c;
  commit_set_repair(c, repair, NULL);
  uint64_t tg, ta, tb, tbad, tafter, tlate;
  ck_assert_int_eq(commit_enqueue(c, apply_gate, NULL, NULL, &tg), 0);
  commit_group_close(c, 1);
  pthread_mutex_lock(&gate_mu);
  while (!gate_entered) pthread_cond_wait(&gate_cv, &gate_mu);
  pthread_mutex_unlock(&gate_mu);
  /* queued while the thread is busy: one batch of four groups */
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(1, 1, 1), &ta), 0);
  commit_group_close(c, 2);
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(2, 1, 2), &tb), 0);
  commit_group_close(c, 3);
  ck_assert_int_eq(commit_enqueue(c, apply_fail, NULL, NULL, &tbad), 0);
  commit_group_close(c, 4);
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(3, 1, 3), &tafter), 0);
  commit_group_close(c, 5);
  pthread_mutex_lock(&gate_mu);
  gate_open = 1;
  pthread_cond_broadcast(&gate_cv);
  pthread_mutex_unlock(&gate_mu);
  ck_assert_int_eq(commit_wait(c, tg), 0);
  ck_assert_int_eq(commit_wait(c, ta), 0);
  ck_assert_int_eq(commit_wait(c, tb), 0);
  ck_assert_int_eq(commit_wait(c, tbad), -EIO);
  /* queued behind the failure before the repair: refused, not stored */
  ck_assert_int_eq(commit_wait(c, tafter), -EAGAIN);
  char why[160];
  commit_failure_reason(c, tafter, why, sizeof why);
  ck_assert_str_eq(why, "Input/output error");
  pthread_mutex_lock(&gate_mu);
  while (!repairs) pthread_cond_wait(&gate_cv, &gate_mu);
  pthread_mutex_unlock(&gate_mu);
  ck_assert_int_eq(repairs, 1);
  /* after the repair point: stored again */
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(4, 1, 4), &tlate), 0);
  commit_group_close(c, 6);
  ck_assert_int_eq(commit_wait(c, tlate), 0);
  ck_assert_int_eq(nresults(st), 3);
  commit_stop(c);
  store_close(st);
}
END_TEST

START_TEST(busy_is_retried) {
  setenv("CTUNE_TEST_FAULT", "busy=3", 1);
  struct store *st = open_store();
  unsetenv("CTUNE_TEST_FAULT");
  struct commit *c;
  ck_assert_int_eq(commit_start(st, &c), 0);
  uint64_t t;
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(1, 1, 1), &t), 0);
  commit_group_close(c, 1);
  ck_assert_int_eq(commit_wait(c, t), 0);
  ck_assert_int_eq(nresults(st), 1);
  ck_assert_uint_eq(commit_failures(c), 0);
  commit_stop(c);
  store_close(st);
}
END_TEST

static int64_t saved_seq(void) {
  struct store *st = open_store();
  int64_t v = -1;
  ck_assert_int_eq(store_get_seq(st, &v), 0);
  store_close(st);
  return v;
}

START_TEST(change_counter_is_saved_and_never_lowered) {
  struct store *st = open_store();
  struct commit *c;
  ck_assert_int_eq(commit_start(st, &c), 0);
  /* a hold that moved the counter without a row still saves it */
  uint64_t t = commit_group_close(c, 41);
  ck_assert_uint_ne(t, 0);
  ck_assert_int_eq(commit_wait(c, t), 0);
  /* nothing changed: nothing handed over */
  ck_assert_uint_eq(commit_group_close(c, 41), 0);
  ck_assert_int_eq(commit_enqueue(c, apply_result, free, make_result(1, 1, 1), &t), 0);
  commit_group_close(c, 40);
  ck_assert_int_eq(commit_wait(c, t), 0);
  commit_stop(c);
  store_close(st);
  ck_assert_int_eq(saved_seq(), 41);
}
END_TEST

START_TEST(oversized_value_is_refused) {
  setenv("CTUNE_TEST_FAULT", "blob_limit=1000", 1);
  struct store *st = open_store();
  unsetenv("CTUNE_TEST_FAULT");
  static char big[4000];
  memset(big, 'x', sizeof big);
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_put_checkpoint(st, 1, 1, 0, big, sizeof big), -E2BIG);
  ck_assert_int_eq(store_put_checkpoint(st, 1, 1, 0, big, 10), 0);
  ck_assert_int_eq(store_commit(st), 0);
  store_close(st);
}
END_TEST

static int collect_t(void *ctx, int64_t seq, int64_t trial_id, const char *data) {
  (void)trial_id;
  char *buf = ctx;
  char item[64];
  snprintf(item, sizeof item, "%lld:%s;", (long long)seq, data);
  strcat(buf, item);
  return 0;
}

/* Rule: the main loop's checkpoint (store_checkpoint) copies committed WAL
 * frames back into the database file. Its own connection opens the WAL only
 * at its first read; before one it copied nothing, and the writer's
 * checkpoint at --wal-checkpoint-frames did it all inside a commit. */
START_TEST(passive_checkpoint_copies_the_wal_back) {
  struct store *st = open_store();
  ck_assert_int_eq(store_begin(st), 0);
  for (int i = 1; i <= 400; i++) {
    struct result_op *op = make_result(i, 1 + i % 7, i);
    ck_assert_int_eq(store_insert_result(st, &op->row), 0);
    free(op);
  }
  ck_assert_int_eq(store_commit(st), 0);
  struct stat before, after;
  ck_assert_int_eq(stat(db, &before), 0);
  int copied = 0;
  ck_assert_int_eq(store_checkpoint(st, &copied), 0);
  ck_assert_int_eq(stat(db, &after), 0);
  ck_assert_msg(after.st_size > before.st_size,
                "the database file stayed at %lld bytes: nothing was copied back",
                (long long)after.st_size);
  store_close(st);
}
END_TEST

START_TEST(results_read_back_by_seq) {
  struct store *st = open_store();
  ck_assert_int_eq(store_begin(st), 0);
  for (int i = 1; i <= 5; i++) {
    struct result_op *op = make_result(i, 1 + i % 2, i);
    ck_assert_int_eq(store_insert_result(st, &op->row), 0);
    free(op);
  }
  ck_assert_int_eq(store_commit(st), 0);
  int64_t seqs[] = {4, 2, 9};
  char buf[512] = "";
  ck_assert_int_eq(store_results_by_seq(st, seqs, 3, collect_t, buf), 0);
  /* in the order asked for; a seq with no row is skipped */
  ck_assert_str_eq(buf, "4:{\"training_iteration\":4};2:{\"training_iteration\":2};");
  store_close(st);
}
END_TEST

static int nan_seen;
static int load_asha(void *ctx, const struct store_asha_row *r) {
  (void)ctx;
  if (isnan(r->value)) nan_seen++;
  return 0;
}
static int load_nop_exp(void *c, const struct store_experiment_row *r) {
  (void)c;
  (void)r;
  return 0;
}
static int load_nop_trial(void *c, const struct store_trial_row *r) {
  (void)c;
  (void)r;
  return 0;
}
static int load_nop_result(void *c, const struct store_result_row *r) {
  (void)c;
  (void)r;
  return 0;
}
static int load_nop_asha(void *c, const struct store_asha_row *r) {
  (void)c;
  (void)r;
  return 0;
}
static int load_nop_worker(void *c, const struct store_worker_row *r) {
  (void)c;
  (void)r;
  return 0;
}
static int load_nop_ckpt(void *c, int64_t t, int64_t i) {
  (void)c;
  (void)t;
  (void)i;
  return 0;
}

START_TEST(asha_nan_round_trips_as_null) {
  struct store *st = open_store();
  struct store_asha_row r = {1, 1, 0, 1.0, NAN, 1, 5};
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_insert_asha(st, &r), 0);
  r.value = 2.5;
  ck_assert_int_eq(store_insert_asha(st, &r), 0);
  ck_assert_int_eq(store_commit(st), 0);
  struct store_loader l = {NULL,           load_nop_exp,
                           load_nop_trial, load_nop_result,
                           load_asha,      load_nop_worker,
                           load_nop_ckpt,  NULL,
                           NULL,           NULL,
                           NULL,           NULL};
  ck_assert_int_eq(store_load(st, &l), 0);
  ck_assert_int_eq(nan_seen, 1);
  store_close(st);
}
END_TEST

/* 008: a trial's generation and each result's round-trip (PBT). */
static int64_t gens_seen[8];
static int ngens_seen;
static int load_gen_trial(void *c, const struct store_trial_row *r) {
  (void)c;
  gens_seen[ngens_seen++] = r->generation;
  return 0;
}
static int load_gen_result(void *c, const struct store_result_row *r) {
  (void)c;
  gens_seen[ngens_seen++] = r->gen * 10 + (int64_t)r->t;
  return 0;
}

START_TEST(generations_round_trip) {
  struct store *st = open_store();
  struct store_experiment_row e = {1, "exp", "RUNNING", "{}", 42, 1.5, 0,
                                   0, 3,     NULL,      0,    1,  "",  "[]"};
  struct store_trial_row t = {.id = 1,
                              .experiment_id = 1,
                              .name = "exp_00000",
                              .status = "PENDING",
                              .config = "{}",
                              .generation = 2};
  struct result_op *a = make_result(5, 1, 3.0), *b = make_result(6, 1, 3.0);
  b->row.gen = 2; /* the same time value in a later generation: a second row */
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_put_experiment(st, &e), 0);
  ck_assert_int_eq(store_put_trial(st, &t), 0);
  ck_assert_int_eq(store_insert_result(st, &a->row), 0);
  ck_assert_int_eq(store_insert_result(st, &b->row), 0);
  ck_assert_int_eq(store_commit(st), 0);
  free(a);
  free(b);
  store_close(st);
  st = open_store();
  struct store_loader l = {NULL,           load_nop_exp,
                           load_gen_trial, load_gen_result,
                           load_nop_asha,  load_nop_worker,
                           load_nop_ckpt,  NULL,
                           NULL,           NULL,
                           NULL,           NULL};
  ck_assert_int_eq(store_load(st, &l), 0);
  ck_assert_int_eq(ngens_seen, 3);
  ck_assert_int_eq(gens_seen[0], 2);  /* the trial's generation */
  ck_assert_int_eq(gens_seen[1], 3);  /* gen 0, t 3 */
  ck_assert_int_eq(gens_seen[2], 23); /* gen 2, t 3 */
  store_close(st);
}
END_TEST

/* Migration 016: a trial's attribution and a worker's quarantine reason
 * round-trip; NULL / "" read back as none. */
static char attr_seen[1024];
static int load_attr_trial(void *c, const struct store_trial_row *r) {
  (void)c;
  size_t n = strlen(attr_seen);
  snprintf(attr_seen + n, sizeof attr_seen - n, "t%lld:%s;", (long long)r->id,
           r->attribution ? r->attribution : "-");
  return 0;
}
static int load_attr_worker(void *c, const struct store_worker_row *r) {
  (void)c;
  size_t n = strlen(attr_seen);
  snprintf(attr_seen + n, sizeof attr_seen - n, "w%lld:%.200s;", (long long)r->id,
           r->quarantine[0] ? r->quarantine : "-");
  return 0;
}

START_TEST(attribution_and_quarantine_round_trip) {
  struct store *st = open_store();
  struct store_experiment_row e = {1, "exp", "RUNNING", "{}", 42, 1.5, 0,
                                   0, 3,     NULL,      0,    1,  "",  "[]"};
  struct store_trial_row t1 = {.id = 1,
                               .experiment_id = 1,
                               .name = "exp_00000",
                               .status = "PENDING",
                               .config = "{}",
                               .attribution = "machine"};
  struct store_trial_row t2 = {.id = 2,
                               .experiment_id = 1,
                               .idx = 1,
                               .name = "exp_00001",
                               .status = "PENDING",
                               .config = "{}"};
  struct store_worker_row w1 = {
      .id = 1, .name = "bad", .cpu = 1, .secret = "1.x", .quarantine = "failed 3 trials in a row"};
  struct store_worker_row w2 = {.id = 2, .name = "good", .cpu = 1, .secret = "2.x"};
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_put_experiment(st, &e), 0);
  ck_assert_int_eq(store_put_trial(st, &t1), 0);
  ck_assert_int_eq(store_put_trial(st, &t2), 0);
  ck_assert_int_eq(store_put_worker(st, &w1), 0);
  ck_assert_int_eq(store_put_worker(st, &w2), 0);
  ck_assert_int_eq(store_commit(st), 0);
  store_close(st);
  st = open_store();
  struct store_loader l = {NULL,
                           load_nop_exp,
                           load_attr_trial,
                           load_gen_result,
                           load_nop_asha,
                           load_attr_worker,
                           load_nop_ckpt,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL};
  attr_seen[0] = 0;
  ck_assert_int_eq(store_load(st, &l), 0);
  ck_assert_str_eq(attr_seen, "t1:machine;t2:-;w1:failed 3 trials in a row;w2:-;");
  store_close(st);
}
END_TEST

START_TEST(upgrade_from_version_1_keeps_results) {
  /* A database made by the first schema, with a result in it. */
  sqlite3 *db = NULL;
  ck_assert_int_eq(sqlite3_open(db_path_for_test(), &db), SQLITE_OK);
  ck_assert_int_eq(migrations_table[0].version, 1);
  ck_assert_int_eq(sqlite3_exec(db, migrations_table[0].sql, NULL, NULL, NULL), SQLITE_OK);
  ck_assert_int_eq(sqlite3_exec(db,
                                "PRAGMA user_version=1; INSERT INTO results VALUES"
                                "(7, 1, 1, 3.0, 'continue', '{\"training_iteration\":3}')",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
  struct store *st = open_store();
  int64_t seq = 7;
  char buf[256] = "";
  ck_assert_int_eq(store_results_by_seq(st, &seq, 1, collect_t, buf), 0);
  ck_assert_str_eq(buf, "7:{\"training_iteration\":3};");
  /* the rebuilt table takes a second row for the same (trial, t) */
  struct result_op *op = make_result(8, 1, 3.0);
  ck_assert_int_eq(store_begin(st), 0);
  ck_assert_int_eq(store_insert_result(st, &op->row), 0);
  ck_assert_int_eq(store_commit(st), 0);
  free(op);
  store_close(st);
}
END_TEST

/* Rule: a gang trial's members each keep a section of their own in an
 * attempt (rank 0's is the plain one); an upload replaces its own rank's
 * only; a later attempt keeps the earlier one's members as one attempt. */
START_TEST(logs_of_gang_members) {
  char *row = NULL, *next = NULL, *out = NULL;
  size_t rl, nl, ol;
  ck_assert_int_eq(store_logs_merge(NULL, 0, 1, 1, 0, "r0 a", 4, &row, &rl), 0);
  ck_assert_int_eq(store_logs_merge(row, rl, 1, 2, 2, "r2 a", 4, &next, &nl), 0);
  free(row);
  ck_assert_int_eq(store_logs_merge(next, nl, 1, 2, 2, "r2 b", 4, &row, &rl), 0);
  free(next);
  ck_assert_int_eq(store_logs_merge(row, rl, 1, 1, 0, "r0 b", 4, &next, &nl), 0);
  free(row);
  ck_assert_int_eq(store_logs_render(next, nl, &out, &ol), 0);
  ck_assert_str_eq(out,
                   "--- attempt 1 rank 2 (worker 2) ---\nr2 b\n--- attempt 1 (worker 1) ---\nr0 b");
  free(out);
  ck_assert_int_eq(store_logs_merge(next, nl, 2, 3, 1, "r1 c", 4, &row, &rl), 0);
  free(next);
  ck_assert_int_eq(store_logs_render(row, rl, &out, &ol), 0);
  ck_assert_str_eq(out,
                   "--- attempt 1 rank 2 (worker 2) ---\nr2 b\n--- attempt 1 (worker 1) ---\nr0 b\n"
                   "--- attempt 2 rank 1 (worker 3) ---\nr1 c");
  free(out);
  free(row);
}
END_TEST

int main(void) {
  Suite *s = suite_create("server_store");
  TCase *tc = tcase_create("store");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, migrations_and_round_trip);
  tcase_add_test(tc, logs_of_every_attempt);
  tcase_add_test(tc, logs_of_gang_members);
  tcase_add_test(tc, group_commit_orders_and_waits);
  tcase_add_test(tc, gather_waits_for_clients_still_out);
  tcase_add_test(tc, failed_group_fails_alone);
  tcase_add_test(tc, failure_in_a_batch_keeps_earlier_groups);
  tcase_add_test(tc, busy_is_retried);
  tcase_add_test(tc, change_counter_is_saved_and_never_lowered);
  tcase_add_test(tc, oversized_value_is_refused);
  tcase_add_test(tc, results_read_back_by_seq);
  tcase_add_test(tc, passive_checkpoint_copies_the_wal_back);
  tcase_add_test(tc, upgrade_from_version_1_keeps_results);
  tcase_add_test(tc, generations_round_trip);
  tcase_add_test(tc, attribution_and_quarantine_round_trip);
  tcase_add_test(tc, asha_nan_round_trips_as_null);
  tcase_add_test(tc, durable_flush_follows_a_symlinked_path);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
