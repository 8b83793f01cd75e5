/* What a trial that ended badly is reported as (worker/failure.c,
 * docs/protocol.md#fail-reasons): a user's program gets its own exit
 * status, not ctune-train's names; ctune-train keeps them; running out of
 * the memory a trial was limited to names memory_mb and the limit. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "failure.h"

static void described(const struct failure_in *in, const char *reason, const char *msg) {
  const char *r = NULL;
  char *m = NULL;
  ck_assert_int_eq(failure_describe(in, &r, &m), 0);
  ck_assert_str_eq(r, reason);
  ck_assert_str_eq(m, msg);
  free(m);
}

START_TEST(user_exit_codes_are_the_users) {
  struct failure_in in = {.command = 1, .exit_code = 1, .lines = "RuntimeError: boom at epoch 2"};
  described(&in, "trial_exit", "your program exited with status 1\nRuntimeError: boom at epoch 2");
  in.exit_code = 2;
  in.lines = "python3: can't open file 'trian.py'";
  described(&in, "trial_exit",
            "your program exited with status 2\npython3: can't open file 'trian.py'");
  in.lines = NULL;
  described(&in, "trial_exit", "your program exited with status 2");
  in.exit_code = 127; /* the exec wrapper's: it could not be started */
  in.lines = "cannot run 'nope'";
  described(&in, "exec_failed", "cannot run 'nope'");
  in.exit_code = 0;
  in.term_signal = SIGSEGV;
  in.lines = "";
  described(&in, "signal", "killed by signal 11 (Segmentation fault)");
}
END_TEST

START_TEST(the_trainer_keeps_its_names) {
  struct failure_in in = {.command = 0, .exit_code = 1, .lines = "assertion failed"};
  described(&in, "internal", "assertion failed");
  in.exit_code = 2;
  described(&in, "bad_config", "assertion failed");
  in.exit_code = 5;
  described(&in, "diverged", "assertion failed");
  in.exit_code = 42;
  described(&in, "exit_code", "assertion failed");
}
END_TEST

START_TEST(out_of_memory_names_the_limit) {
  /* RLIMIT_AS: the allocation fails and the program says so. */
  struct failure_in in = {.command = 1,
                          .exit_code = 1,
                          .lines = "Traceback ...\nMemoryError",
                          .memory_mb = 1500,
                          .memory_how = "RLIMIT_AS"};
  described(&in, "out_of_memory",
            "out of memory: the trial is limited to memory_mb 1500 (RLIMIT_AS); give it more "
            "(resources_per_trial.memory_mb) or use less\nTraceback ...\nMemoryError");
  /* The cgroup's OOM killer: SIGKILL, and memory.events counts it. */
  struct failure_in k = {.command = 1,
                         .term_signal = SIGKILL,
                         .memory_mb = 512,
                         .memory_how = "cgroup memory.max",
                         .oom_kills = 1};
  described(&k, "out_of_memory",
            "out of memory: the trial is limited to memory_mb 512 (cgroup memory.max); give it "
            "more (resources_per_trial.memory_mb) or use less");
  /* ctune-train's own out-of-memory exit. */
  struct failure_in b = {.exit_code = 6,
                         .lines = "cannot allocate 4 GiB",
                         .memory_mb = 100,
                         .memory_how = "RLIMIT_AS"};
  described(&b, "out_of_memory",
            "out of memory: the trial is limited to memory_mb 100 (RLIMIT_AS); give it more "
            "(resources_per_trial.memory_mb) or use less\ncannot allocate 4 GiB");
  /* Without a limit, or a SIGKILL the OOM killer did not send: as before. */
  in.memory_mb = 0;
  described(&in, "trial_exit", "your program exited with status 1\nTraceback ...\nMemoryError");
  k.oom_kills = 0;
  described(&k, "signal", "killed by signal 9 (Killed)");
}
END_TEST

START_TEST(helpers) {
  ck_assert_int_eq(failure_oom_kills("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n"),
                   2);
  ck_assert_int_eq(failure_oom_kills("low 0\n"), 0);
  ck_assert_int_eq(failure_oom_kills(NULL), 0);
  cJSON *c = cJSON_Parse("{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"]}}");
  cJSON *b = cJSON_Parse("{\"trainable\": {\"type\": \"builtin\"}}");
  ck_assert_int_eq(failure_is_command(c), 1);
  ck_assert_int_eq(failure_is_command(b), 0);
  ck_assert_int_eq(failure_is_command(NULL), 0);
  cJSON_Delete(c);
  cJSON_Delete(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("failure");
  TCase *tc = tcase_create("all");
  tcase_add_test(tc, user_exit_codes_are_the_users);
  tcase_add_test(tc, the_trainer_keeps_its_names);
  tcase_add_test(tc, out_of_memory_names_the_limit);
  tcase_add_test(tc, helpers);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
