/* Outbox: per-trial FIFO lanes, bound, leases, batches, UTF-8 cleaning,
 * disk-full fault, persistence across a restart, backoff. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outbox.h"
#include "testhook.h"

static char dir[256];

static void mk(void) {
  snprintf(dir, sizeof dir, "/tmp/ctune-outbox-test.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* The messages on disk (a delivered one's file kept as a spare is none). */
static int count_files(void) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && strncmp(e->d_name, "spare.", 6)) n++;
  closedir(d);
  return n;
}

static int count_spares(void) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += !strncmp(e->d_name, "spare.", 6);
  closedir(d);
  return n;
}

static ino_t inode_of(uint64_t seq) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%016llu.json", dir, (unsigned long long)seq);
  ck_assert_int_eq(stat(p, &st), 0);
  return st.st_ino;
}

static void rm(void) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char p[512];
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}

static const struct outbox_lease L1 = {7, 1}, L2 = {7, 2};

static const char *head_body(struct outbox *ob, int trial) {
  struct outbox_lane *l = outbox_lane(ob, trial);
  return l && l->head ? l->head->body : NULL;
}

START_TEST(fifo_bound_and_end_reserve) {
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, NULL, 2), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/r1", "{\"a\":1}", 0), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/r1", "{\"a\":2}", 0), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/r1", "{\"a\":3}", 0), -ENOSPC);
  ck_assert(!outbox_has_room(&ob));
  /* A trial's end is still accepted when results are at the bound, and so
   * are a finished trial's last results (FORCE). */
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_END, 1, &L1, "/c1", "{}", 0), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 2, &L1, "/r2", "{\"b\":1}", OUTBOX_F_FORCE), 0);
  struct outbox_lane *l = outbox_lane(&ob, 1);
  ck_assert_str_eq(l->head->body, "{\"a\":1}");
  outbox_ack(&ob, l, 1);
  ck_assert_str_eq(l->head->body, "{\"a\":2}");
  outbox_ack(&ob, l, 1);
  ck_assert(outbox_has_room(&ob)); /* 1 of 2 */
  ck_assert_str_eq(l->head->path, "/c1");
  outbox_ack(&ob, l, 1);
  ck_assert_ptr_null(l->head);
  outbox_ack(&ob, l, 1); /* harmless on empty */
  outbox_gc(&ob);
  ck_assert_ptr_null(outbox_lane(&ob, 1));
  ck_assert_str_eq(head_body(&ob, 2), "{\"b\":1}");
  outbox_close(&ob);
}
END_TEST

START_TEST(lanes_are_independent) {
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, NULL, 100), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_END, 1, &L1, "/t1/fail", "{\"bad\":1}", 0), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 2, &L1, "/t2/r", "{\"i\":1}", 0), 0);
  struct outbox_lane *l1 = outbox_lane(&ob, 1), *l2 = outbox_lane(&ob, 2);
  /* Trial 1's head failing (backoff) does not hold back trial 2's. */
  outbox_failed(l1, 1000, 0);
  outbox_failed(l1, 1000, 0);
  ck_assert(!outbox_ready(l1, 1100));
  ck_assert(outbox_ready(l2, 1100));
  l2->inflight = 1;
  ck_assert(!outbox_ready(l2, 1100));
  outbox_ack(&ob, l2, 1);
  l2->inflight = 0;
  ck_assert_int_eq((int)ob.n, 1);
  ck_assert_int_eq(l1->attempts, 2);
  outbox_close(&ob);
}
END_TEST

START_TEST(drop_lease_keeps_other_attempts) {
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, NULL, 100), 0);
  outbox_push(&ob, OUTBOX_RESULT, 5, &L1, "/r", "{\"i\":1}", 0);
  outbox_push(&ob, OUTBOX_RESULT, 5, &L1, "/r", "{\"i\":2}", 0);
  outbox_push(&ob, OUTBOX_END, 5, &L1, "/release", "{}", 0);
  outbox_push(&ob, OUTBOX_RESULT, 5, &L2, "/r", "{\"i\":3}", 0);
  struct outbox_lane *l = outbox_lane(&ob, 5);
  ck_assert_int_eq((int)outbox_lane_results(l, &L1), 2);
  ck_assert_int_eq((int)outbox_lane_results(l, &L2), 1);
  ck_assert_int_eq((int)outbox_drop_lease(&ob, l, &L1), 3);
  ck_assert_int_eq((int)ob.n, 1);
  ck_assert_int_eq((int)ob.n_results, 1);
  ck_assert_str_eq(l->head->body, "{\"i\":3}");
  ck_assert_ptr_eq(l->head, l->tail);
  outbox_push(&ob, OUTBOX_RESULT, 5, &L2, "/r", "{\"i\":4}", 0); /* tail still right */
  ck_assert_str_eq(l->head->next->body, "{\"i\":4}");
  outbox_close(&ob);
}
END_TEST

START_TEST(batches_results_of_one_lease) {
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, NULL, 1000), 0);
  char b[64];
  for (int i = 1; i <= 300; i++) {
    snprintf(b, sizeof b, "{\"i\":%d}", i);
    outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/r", b, 0);
  }
  outbox_push(&ob, OUTBOX_RESULT, 1, &L2, "/r", "{\"i\":301}", 0);
  outbox_push(&ob, OUTBOX_END, 1, &L2, "/complete", "{}", 0);
  struct outbox_lane *l = outbox_lane(&ob, 1);
  size_t n;
  char *body = outbox_batch(l, 256, 1 << 20, &n);
  ck_assert_int_eq((int)n, 256);
  ck_assert(!strncmp(body, "[{\"i\":1},{\"i\":2},", 17));
  ck_assert(strstr(body, ",{\"i\":256}]") != NULL);
  free(body);
  outbox_ack(&ob, l, n);
  body = outbox_batch(l, 256, 1 << 20, &n); /* stops at the next lease */
  ck_assert_int_eq((int)n, 44);
  free(body);
  body = outbox_batch(l, 256, 40, &n); /* byte bound */
  ck_assert_int_eq((int)n, 3);
  ck_assert_str_eq(body, "[{\"i\":257},{\"i\":258},{\"i\":259}]");
  free(body);
  l->single = 1; /* a refused batch is retried one by one */
  body = outbox_batch(l, 256, 1 << 20, &n);
  ck_assert_int_eq((int)n, 1);
  ck_assert_str_eq(body, "{\"i\":257}");
  free(body);
  outbox_ack(&ob, l, 44);
  ck_assert_int_eq(l->single, 0);
  body = outbox_batch(l, 256, 1 << 20, &n); /* one result: a plain object */
  ck_assert_int_eq((int)n, 1);
  ck_assert_str_eq(body, "{\"i\":301}");
  free(body);
  outbox_ack(&ob, l, 1);
  body = outbox_batch(l, 256, 1 << 20, &n); /* an end is never batched */
  ck_assert_int_eq((int)n, 1);
  ck_assert_str_eq(body, "{}");
  free(body);
  outbox_close(&ob);
}
END_TEST

START_TEST(utf8_is_cleaned) {
  size_t n;
  char *s = outbox_utf8_clean("ok \xc3\xa9", 5, &n); /* é kept */
  ck_assert_str_eq(s, "ok \xc3\xa9");
  ck_assert_int_eq((int)n, 5);
  free(s);
  /* é cut after its first byte (a tail cut mid-character), a stray
   * continuation byte, an overlong '/', a surrogate, a NUL. */
  s = outbox_utf8_clean("a\xc3", 2, &n);
  ck_assert_str_eq(s, "a\xef\xbf\xbd");
  free(s);
  s = outbox_utf8_clean("\xa9x\xc0\xafy\xed\xa0\x80z\0w", 11, NULL);
  ck_assert_str_eq(s, "\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbd"
                      "\xef\xbf\xbdzw");
  free(s);
  /* Pushed bodies come out clean. */
  struct outbox ob;
  outbox_open(&ob, NULL, 10);
  outbox_push(&ob, OUTBOX_END, 1, &L1, "/fail", "{\"error\":\"cut \xe2\x82\"}", 0);
  ck_assert_str_eq(head_body(&ob, 1), "{\"error\":\"cut \xef\xbf\xbd\xef\xbf\xbd\"}");
  outbox_close(&ob);
}
END_TEST

START_TEST(disk_full_is_reported_and_survivable) {
  mk();
  char fault[300];
  snprintf(fault, sizeof fault, "%s.fault", dir);
  testhook_set(TESTHOOK_OUTBOX_FAULT_FILE, fault);
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, dir, 100), 0);
  FILE *f = fopen(fault, "w");
  fclose(f);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/r", "{\"i\":1}", 0), -ENOSPC);
  ck_assert_int_eq((int)ob.n, 0);
  ck_assert_int_eq(count_files(), 0);
  /* A trial's end falls back to memory. */
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_END, 1, &L1, "/fail", "{}", OUTBOX_F_MEM), 1);
  ck_assert_int_eq((int)ob.n, 1);
  unlink(fault);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 2, &L1, "/r", "{\"i\":1}", 0), 0);
  ck_assert_int_eq(count_files(), 1);
  outbox_close(&ob);
  testhook_set(TESTHOOK_OUTBOX_FAULT_FILE, NULL);
  rm();
}
END_TEST

START_TEST(persists_across_restart_exactly_once) {
  mk();
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, dir, 100), 0);
  char body[64];
  for (int i = 1; i <= 5; i++) {
    snprintf(body, sizeof body, "{\"training_iteration\":%d}", i);
    ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 3, &L2, "/api/v1/trials/3/results", body, 0),
                     0);
  }
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_END, 3, &L2, "/api/v1/trials/3/complete", "{}", 0), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 4, &L1, "/x", "{\"n\":0}", 0), 0);
  struct outbox_lane *l = outbox_lane(&ob, 3);
  outbox_ack(&ob, l, 2); /* iterations 1 and 2 delivered (one batch) */
  ck_assert_int_eq(count_files(), 5);
  outbox_close(&ob); /* the worker dies here */

  /* A half-written message from the crash must not come back. */
  char junk[512];
  snprintf(junk, sizeof junk, "%s/0000000000000099.json.tmp", dir);
  FILE *f = fopen(junk, "w");
  fputs("{\"trial_", f);
  fclose(f);

  ck_assert_int_eq(outbox_open(&ob, dir, 100), 0);
  ck_assert_int_eq((int)ob.n, 5);
  ck_assert_int_eq((int)ob.n_results, 4);
  l = outbox_lane(&ob, 3);
  for (int i = 3; i <= 5; i++) {
    snprintf(body, sizeof body, "{\"training_iteration\":%d}", i);
    ck_assert_str_eq(l->head->body, body);
    ck_assert_int_eq(l->head->trial_id, 3);
    ck_assert_int_eq(l->head->kind, OUTBOX_RESULT);
    ck_assert_int_eq(l->head->lease.worker_id, 7); /* the fence survives */
    ck_assert_int_eq((int)l->head->lease.attempt, 2);
    outbox_ack(&ob, l, 1);
  }
  ck_assert_int_eq(l->head->kind, OUTBOX_END);
  /* New messages continue after the old sequence numbers. */
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_RESULT, 3, &L2, "/y", "{\"n\":1}", 0), 0);
  ck_assert_str_eq(l->head->path, "/api/v1/trials/3/complete");
  outbox_ack(&ob, l, 1);
  ck_assert_str_eq(l->head->path, "/y");
  outbox_ack(&ob, l, 1);
  ck_assert_str_eq(head_body(&ob, 4), "{\"n\":0}");
  outbox_ack(&ob, outbox_lane(&ob, 4), 1);
  ck_assert_int_eq(count_files(), 0);
  outbox_close(&ob);
  rm();
}
END_TEST

/* A delivered message's file is the next message's (renamed, written over,
 * cut to its length): no inode made or freed per message. A restart finds
 * the messages alone; spares a crash left are removed, never loaded. */
START_TEST(delivered_files_are_reused) {
  mk();
  struct outbox ob;
  ck_assert_int_eq(outbox_open(&ob, dir, 100), 0);
  const char *long_body = "{\"training_iteration\":1,\"loss\":0.123456789,\"a_long_name\":42}";
  ck_assert_int_eq(
      outbox_push(&ob, OUTBOX_RESULT, 5, &L1, "/api/v1/trials/5/results", long_body, 0), 0);
  ino_t first = inode_of(1);
  outbox_ack(&ob, outbox_lane(&ob, 5), 1);
  ck_assert_int_eq(count_files(), 0);
  ck_assert_int_eq(count_spares(), 1);
  int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ck_assert_int_ge(in, 0);
  ck_assert_int_ge(inotify_add_watch(in, dir, IN_MOVED_TO | IN_CREATE), 0);
  ck_assert_int_eq(outbox_push(&ob, OUTBOX_END, 5, &L1, "/c", "{}", 0), 0);
  ck_assert_int_eq(count_spares(), 0);
  ck_assert(inode_of(2) == first);
  /* Written over in place: one rename, to its name, and no file made. */
  char ev[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  ssize_t evn = read(in, ev, sizeof ev);
  int renames = 0, made = 0;
  for (ssize_t off = 0; off < evn;) {
    const struct inotify_event *e = (const void *)(ev + off);
    renames += !!(e->mask & IN_MOVED_TO);
    made += !!(e->mask & IN_CREATE);
    off += (ssize_t)(sizeof *e + e->len);
  }
  close(in);
  ck_assert_int_eq(renames, 1);
  ck_assert_int_eq(made, 0);
  /* Nothing of the longer message it replaced trails it. */
  char p[512], text[512] = "";
  snprintf(p, sizeof p, "%s/%016llu.json", dir, 2ULL);
  FILE *m = fopen(p, "r");
  ck_assert_ptr_nonnull(m);
  size_t got = fread(text, 1, sizeof text - 1, m);
  fclose(m);
  text[got] = '\0';
  ck_assert_ptr_null(strstr(text, "a_long_name"));
  ck_assert_int_eq(text[got - 1], '}');
  outbox_close(&ob); /* the message stays */
  char junk[512];
  snprintf(junk, sizeof junk, "%s/spare.7", dir); /* as a crash would leave one */
  FILE *f = fopen(junk, "w");
  fputs("{\"trial_id\":9,\"kind\":\"result\",\"path\":\"/x\",\"body\":\"{}\"}", f);
  fclose(f);
  ck_assert_int_eq(outbox_open(&ob, dir, 100), 0);
  ck_assert_int_eq(count_spares(), 0);
  ck_assert_int_eq((int)ob.n, 1); /* the short message read back whole: no bytes of the long one */
  struct outbox_lane *l = outbox_lane(&ob, 5);
  ck_assert_str_eq(l->head->path, "/c");
  ck_assert_str_eq(l->head->body, "{}");
  ck_assert_int_eq(l->head->kind, OUTBOX_END);
  outbox_ack(&ob, l, 1);
  outbox_close(&ob); /* its spare goes with the outbox */
  ck_assert_int_eq(count_spares(), 0);
  rm();
}
END_TEST

START_TEST(backoff_doubles_and_caps) {
  ck_assert_int_eq(outbox_backoff_ms(0), 0);
  ck_assert_int_eq(outbox_backoff_ms(1), 100);
  ck_assert_int_eq(outbox_backoff_ms(2), 200);
  ck_assert_int_eq(outbox_backoff_ms(5), 1600);
  ck_assert_int_eq(outbox_backoff_ms(8), 10000);
  ck_assert_int_eq(outbox_backoff_ms(1000), 10000);
  struct outbox ob;
  outbox_open(&ob, NULL, 10);
  outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/a", "{}", 0);
  struct outbox_lane *l = outbox_lane(&ob, 1);
  ck_assert(outbox_ready(l, 1000));
  outbox_failed(l, 1000, 0);
  outbox_failed(l, 1000, 0);
  ck_assert(!outbox_ready(l, 1199));
  ck_assert(outbox_ready(l, 1200));
  outbox_ack(&ob, l, 1); /* delivery resets the backoff */
  ck_assert_int_eq(l->attempts, 0);
  ck_assert(!outbox_ready(l, 0)); /* empty */
  outbox_close(&ob);
}
END_TEST

/* The server's Retry-After on a 429 or 503 is a floor under the backoff,
 * capped; on another status, or not delta-seconds, it is not followed. */
START_TEST(retry_after_is_a_floor) {
  ck_assert_uint_eq(outbox_retry_after_ms(503, "5"), 5000);
  ck_assert_uint_eq(outbox_retry_after_ms(429, " 2 "), 2000);
  ck_assert_uint_eq(outbox_retry_after_ms(429, "0"), 0);
  ck_assert_uint_eq(outbox_retry_after_ms(503, "3600"), OUTBOX_RETRY_AFTER_MAX_MS);
  ck_assert_uint_eq(outbox_retry_after_ms(503, "99999999999999999999999"),
                    OUTBOX_RETRY_AFTER_MAX_MS);
  ck_assert_uint_eq(outbox_retry_after_ms(503, NULL), 0);
  ck_assert_uint_eq(outbox_retry_after_ms(503, ""), 0);
  ck_assert_uint_eq(outbox_retry_after_ms(503, "-5"), 0);
  ck_assert_uint_eq(outbox_retry_after_ms(503, "1.5"), 0);
  ck_assert_uint_eq(outbox_retry_after_ms(503, "Fri, 27 Nov 2026 16:00:00 GMT"), 0);
  ck_assert_uint_eq(outbox_retry_after_ms(500, "5"), 0);
  ck_assert_uint_eq(outbox_retry_after_ms(408, "5"), 0);
  struct outbox ob;
  outbox_open(&ob, NULL, 10);
  outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/a", "{}", 0);
  struct outbox_lane *l = outbox_lane(&ob, 1);
  outbox_failed(l, 1000, outbox_retry_after_ms(503, "5")); /* backoff 100 ms: 5 s wins */
  ck_assert(!outbox_ready(l, 5999));
  ck_assert(outbox_ready(l, 6000));
  for (int i = 0; i < 8; i++) outbox_failed(l, 10000, 0); /* backoff 10 s */
  outbox_failed(l, 20000, 2000); /* a shorter Retry-After leaves the backoff */
  ck_assert_uint_eq(l->next_try_ms, 30000);
  outbox_close(&ob);
}
END_TEST

/* How long a head has been failing is kept across its retries and starts
 * afresh with the next head: the worker says a lane is stuck from it. */
START_TEST(failing_since_spans_retries) {
  struct outbox ob;
  outbox_open(&ob, NULL, 10);
  outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/a", "{}", 0);
  outbox_push(&ob, OUTBOX_RESULT, 1, &L1, "/a", "{}", 0);
  struct outbox_lane *l = outbox_lane(&ob, 1);
  ck_assert_int_eq(outbox_failing_ms(l, 5000), 0);
  outbox_failed(l, 1000, 0);
  outbox_failed(l, 3000, 0);
  outbox_failed(l, 9000, 0);
  ck_assert_int_eq(outbox_failing_ms(l, 10000), 9000);
  ck_assert_uint_eq(l->next_try_ms, 9000 + outbox_backoff_ms(3));
  l->stuck = 1;
  l->last_status = 503;
  outbox_ack(&ob, l, 1);
  ck_assert_int_eq(outbox_failing_ms(l, 10000), 0);
  ck_assert_int_eq(l->stuck, 0);
  ck_assert_int_eq(l->last_status, 0);
  outbox_failed(l, 12000, 0);
  ck_assert_int_eq(outbox_failing_ms(l, 12500), 500);
  outbox_close(&ob);
}
END_TEST

START_TEST(unwritable_dir_refuses) {
  struct outbox ob;
  ck_assert_int_lt(outbox_open(&ob, "/proc/self/nonexistent/outbox", 10), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("outbox");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, fifo_bound_and_end_reserve);
  tcase_add_test(tc, lanes_are_independent);
  tcase_add_test(tc, failing_since_spans_retries);
  tcase_add_test(tc, drop_lease_keeps_other_attempts);
  tcase_add_test(tc, batches_results_of_one_lease);
  tcase_add_test(tc, utf8_is_cleaned);
  tcase_add_test(tc, disk_full_is_reported_and_survivable);
  tcase_add_test(tc, persists_across_restart_exactly_once);
  tcase_add_test(tc, delivered_files_are_reused);
  tcase_add_test(tc, backoff_doubles_and_caps);
  tcase_add_test(tc, retry_after_is_a_floor);
  tcase_add_test(tc, unwritable_dir_refuses);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
