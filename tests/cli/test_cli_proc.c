/* ctune run's children (cli/proc.c) with real processes: their exit and
 * their log lines are awaited as events, so `ctune run` moves on the
 * moment a child has exited or said it is ready, not at the next look of a
 * poll loop. Shown by the waiting thread's voluntary context switches, which
 * load does not change: one wait is a few, a loop that looks every 20-25 ms
 * over 0.3 s is a dozen or more. (Child processes: the e2e label.) */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h"

static long voluntary_switches(void) {
  struct rusage ru;
  ck_assert_int_eq(getrusage(RUSAGE_THREAD, &ru), 0);
  return ru.ru_nvcsw;
}

static void start(struct proc *p, char *log, size_t len, const char *script) {
  snprintf(log, len, "/tmp/ctune-cli-proc-test.XXXXXX");
  int fd = mkstemp(log);
  ck_assert_int_ge(fd, 0);
  close(fd);
  char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
  memset(p, 0, sizeof *p);
  ck_assert_int_eq(proc_spawn(p, "sh", argv, log), 0);
}

START_TEST(stop_returns_when_the_child_exits) {
  struct proc p;
  char log[64], rest[64];
  /* SIGTERM ignored: it exits by itself 0.3 s after it is told to stop. */
  start(&p, log, sizeof log, "trap '' TERM; echo ready; sleep 0.3; exit 7");
  ck_assert_int_eq(proc_wait_log_line(&p, log, 0, "ready", 10000, NULL, rest, sizeof rest), 0);
  long before = voluntary_switches();
  proc_stop(&p, 10000);
  long woke = voluntary_switches() - before;
  ck_assert_msg(woke <= 5, "proc_stop woke %ld times over the 0.3 s wait", woke);
  ck_assert(WIFEXITED(p.status));
  ck_assert_int_eq(WEXITSTATUS(p.status), 7); /* it ended itself, not the grace's SIGKILL */
  ck_assert_int_eq(p.pid, 0);
  unlink(log);
}
END_TEST

START_TEST(log_line_wakes_the_wait) {
  struct proc p;
  char log[64];
  start(&p, log, sizeof log,
        "sleep 0.3; echo '2026 ctune-worker info registered with x'; sleep 30");
  long before = voluntary_switches();
  ck_assert_int_eq(proc_wait_log_text(&p, log, 0, "registered with ", 10000, NULL), 0);
  long woke = voluntary_switches() - before;
  ck_assert_msg(woke <= 5, "the log wait woke %ld times over 0.3 s", woke);
  /* Not there: the deadline, and a child's exit ends the wait at once. */
  ck_assert_int_eq(proc_wait_log_text(&p, log, 0, "never written", 50, NULL), -ETIMEDOUT);
  proc_stop(&p, 10000);
  unlink(log);
}
END_TEST

START_TEST(log_wait_ends_when_the_child_exits) {
  struct proc p;
  char log[64];
  start(&p, log, sizeof log, "sleep 0.05; exit 3");
  ck_assert_int_eq(proc_wait_log_text(&p, log, 0, "registered with ", 10000, NULL), -ECHILD);
  ck_assert_int_eq(WEXITSTATUS(p.status), 3);
  unlink(log);
}
END_TEST

/* ctune run tells its worker to drain as soon as the experiment ends, and
 * stops it later as usual: one SIGTERM in all, since a second one makes
 * ctune-worker kill its trials without their checkpoints. */
START_TEST(term_then_stop_sends_one_sigterm) {
  struct proc p;
  char log[64];
  /* Each SIGTERM is logged and leaves it 0.1 s more: time for a second
   * one to come and be logged too. */
  start(&p, log, sizeof log,
        "trap 'echo term; left=5' TERM; left=500; echo ready; "
        "while [ $left -gt 0 ]; do sleep 0.02; left=$((left-1)); done; exit 4");
  ck_assert_int_eq(proc_wait_log_text(&p, log, 0, "ready", 10000, NULL), 0);
  proc_term(&p);
  ck_assert_int_eq(proc_wait_log_text(&p, log, 0, "term", 10000, NULL), 0);
  proc_stop(&p, 10000);
  ck_assert_int_eq(WEXITSTATUS(p.status), 4);
  FILE *f = fopen(log, "r");
  ck_assert_ptr_nonnull(f);
  char line[64];
  int terms = 0;
  while (fgets(line, sizeof line, f)) terms += !strcmp(line, "term\n");
  fclose(f);
  ck_assert_int_eq(terms, 1);
  unlink(log);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cli_proc");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, stop_returns_when_the_child_exits);
  tcase_add_test(tc, log_line_wakes_the_wait);
  tcase_add_test(tc, log_wait_ends_when_the_child_exits);
  tcase_add_test(tc, term_then_stop_sends_one_sigterm);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
