/* The pure parts of a preemption notice (worker/preempt.c,
 * docs/worker.md#preemption): how the grace is split, which output of a
 * notice command is a notice, reading SigCgt (SIGUSR1 goes only to a
 * process that catches it), and the request file. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preempt.h"

START_TEST(plan_splits_the_grace_in_thirds) {
  struct preempt_plan p = preempt_plan(30000, 10000);
  ck_assert_uint_eq(p.ask_ms, 10000);
  ck_assert_uint_eq(p.term_ms, 10000);
  p = preempt_plan(5000, 10000);
  ck_assert_uint_eq(p.ask_ms, 1666);
  ck_assert_uint_eq(p.term_ms, 1666);
  p = preempt_plan(120000, 3000); /* SIGKILL no later than --stop-grace-s */
  ck_assert_uint_eq(p.ask_ms, 40000);
  ck_assert_uint_eq(p.term_ms, 3000);
}
END_TEST

START_TEST(notice_output) {
  ck_assert_int_eq(preempt_output_is_notice(NULL), 0);
  ck_assert_int_eq(preempt_output_is_notice(""), 0);
  ck_assert_int_eq(preempt_output_is_notice(" \n"), 0);
  ck_assert_int_eq(preempt_output_is_notice("FALSE"), 0); /* GCE until preempted */
  ck_assert_int_eq(preempt_output_is_notice("false\n"), 0);
  ck_assert_int_eq(preempt_output_is_notice("0\n"), 0);
  ck_assert_int_eq(preempt_output_is_notice("TRUE"), 1);
  ck_assert_int_eq(preempt_output_is_notice("{\"action\": \"terminate\", \"time\": "
                                            "\"2026-11-27T20:00:00Z\"}\n"),
                   1); /* AWS instance-action */
  ck_assert_int_eq(preempt_output_is_notice("00"), 1);
  ck_assert_int_eq(preempt_output_is_notice("falsey"), 1);
}
END_TEST

static void on_usr1(int sig) { (void)sig; }

START_TEST(sigcgt) {
  /* SIGUSR1 is 10: bit 9; SIGTERM 15: bit 14. */
  const char *both = "Name:\tpython3\nSigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\n"
                     "SigCgt:\t0000000180004002\nCapInh:\t0\n";
  ck_assert_int_eq(preempt_status_catches(both, SIGUSR1), 0);
  ck_assert_int_eq(preempt_status_catches(both, SIGTERM), 1);
  const char *usr1 = "Name:\tx\nSigCgt:\t0000000000000200\n";
  ck_assert_int_eq(preempt_status_catches(usr1, SIGUSR1), 1);
  ck_assert_int_eq(preempt_status_catches(usr1, SIGTERM), 0);
  ck_assert_int_eq(preempt_status_catches("Name:\tx\n", SIGUSR1), 0);
  ck_assert_int_eq(preempt_status_catches("Name:\tx\nSigCgt:\tzz\n", SIGUSR1), 0);
  ck_assert_int_eq(preempt_status_catches(NULL, SIGUSR1), 0);
  /* This process: catches SIGUSR1 once a handler is set. */
  ck_assert_int_eq(preempt_catches(getpid(), SIGUSR1), 0);
  struct sigaction sa = {.sa_handler = on_usr1}, old;
  ck_assert_int_eq(sigaction(SIGUSR1, &sa, &old), 0);
  ck_assert_int_eq(preempt_catches(getpid(), SIGUSR1), 1);
  sigaction(SIGUSR1, &old, NULL);
  ck_assert_int_eq(preempt_catches(-1, SIGUSR1), 0);
}
END_TEST

START_TEST(request_file) {
  char dir[] = "/tmp/ctune-preempt-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(preempt_request_file(dir), 0);
  ck_assert_int_eq(preempt_request_file(dir), 0); /* again: still there */
  char path[128];
  snprintf(path, sizeof path, "%s/" PREEMPT_REQUEST_FILE, dir);
  struct stat st;
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(unlink(path), 0);
  ck_assert_int_eq(rmdir(dir), 0);
  ck_assert_int_lt(preempt_request_file(dir), 0); /* its dir is gone */
}
END_TEST

int main(void) {
  Suite *s = suite_create("preempt");
  TCase *tc = tcase_create("all");
  tcase_add_test(tc, plan_splits_the_grace_in_thirds);
  tcase_add_test(tc, notice_output);
  tcase_add_test(tc, sigcgt);
  tcase_add_test(tc, request_file);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
