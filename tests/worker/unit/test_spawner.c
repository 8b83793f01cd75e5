/* The spawner with real processes: what it starts is this process's child
 * (its exit reaped here), in a session of its own, with the stdio it was
 * given; an exec that fails says so on the child's stderr and exits 127; a
 * spawner killed by SIGKILL is replaced at the next spawn and the children
 * it started run on; one lost between its clone and its answer leaves no
 * stray running. (Child processes: registered with the e2e label.) */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "spawner.h"

struct ended {
  int pid; /* or a negative errno */
  int n;
  int status;
};

static void on_pid_cb(void *arg, int pid) {
  struct ended *e = arg;
  e->pid = pid;
}

static void on_exit_cb(void *arg, int status) {
  struct ended *e = arg;
  e->n++;
  e->status = status;
}

/* Reads fd to its end (every writer closed), bounded by the buffer. */
static void read_all(int fd, char *buf, size_t cap) {
  size_t n = 0;
  for (;;) {
    ssize_t k = read(fd, buf + n, cap - 1 - n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0 || (n += (size_t)k) == cap - 1) break;
  }
  buf[n] = '\0';
}

static struct spawner *start(uv_loop_t *loop) {
  ck_assert_int_eq(uv_loop_init(loop), 0);
  struct spawner *s = NULL;
  ck_assert_int_eq(spawner_new(&s), 0);
  ck_assert_int_eq(spawner_attach(s, loop), 0);
  return s;
}

/* Nothing awaited any more: the loop ends, and the spawner with it. */
static void finish(uv_loop_t *loop, struct spawner *s) {
  spawner_detach(s);
  uv_run(loop, UV_RUN_DEFAULT);
  spawner_free(s);
  ck_assert_int_eq(uv_loop_close(loop), 0);
}

/* Runs the loop until the spawner's answer for e has come. */
static void await_pid(uv_loop_t *loop, struct ended *e) {
  while (e->pid == 0 && uv_run(loop, UV_RUN_ONCE)) {
  }
}

/* Runs the loop until e has seen its child's exit (the SIGCHLD handle keeps
 * it alive until then). */
static void await_exit(uv_loop_t *loop, struct ended *e) {
  while (e->n == 0 && uv_run(loop, UV_RUN_ONCE)) {
  }
}

START_TEST(child_is_ours_in_its_own_session) {
  uv_loop_t loop;
  struct spawner *s = start(&loop);
  int out[2], err[2], rep[2];
  ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
  ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
  ck_assert_int_eq(pipe2(rep, O_CLOEXEC), 0);
  char *argv[] = {"sh", "-c",
                  "echo $PPID $(cut -d' ' -f6 /proc/$$/stat) $$ \"$X\" $(pwd); "
                  "echo err >&2; echo rep >&3; exit 3",
                  NULL};
  char *env[] = {"X=from the request", "PATH=/usr/bin:/bin", NULL};
  struct spawner_req r = {"/bin/sh", argv, env, "/tmp", {out[1], err[1], rep[1]}};
  struct ended e = {0, 0, 0};
  struct spawner_child *c = NULL;
  ck_assert_int_eq(spawner_spawn(s, &r, on_pid_cb, on_exit_cb, &e, &c), 0);
  ck_assert_int_eq(e.pid, 0); /* an event, never inside the call */
  await_pid(&loop, &e);
  int pid = e.pid;
  ck_assert_int_gt(pid, 0);
  close(out[1]);
  close(err[1]);
  close(rep[1]);
  char o[256], er[64], rp[64], want[256];
  read_all(out[0], o, sizeof o);
  read_all(err[0], er, sizeof er);
  read_all(rep[0], rp, sizeof rp);
  /* Parent: this process, not the spawner; session: its own. */
  snprintf(want, sizeof want, "%d %d %d from the request /tmp\n", (int)getpid(), pid, pid);
  ck_assert_str_eq(o, want);
  ck_assert_str_eq(er, "err\n");
  ck_assert_str_eq(rp, "rep\n");
  await_exit(&loop, &e);
  ck_assert_int_eq(e.n, 1);
  ck_assert(WIFEXITED(e.status));
  ck_assert_int_eq(WEXITSTATUS(e.status), 3);
  close(out[0]);
  close(err[0]);
  close(rep[0]);
  finish(&loop, s);
}
END_TEST

START_TEST(failed_exec_says_why_and_exits_127) {
  uv_loop_t loop;
  struct spawner *s = start(&loop);
  int err[2];
  ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
  char *argv[] = {"nothing-here", NULL};
  char *env[] = {NULL};
  struct spawner_req r = {"/nonexistent/ctune-supervise", argv, env, NULL, {-1, err[1], -1}};
  struct ended e = {0, 0, 0};
  struct spawner_child *c = NULL;
  ck_assert_int_eq(spawner_spawn(s, &r, on_pid_cb, on_exit_cb, &e, &c), 0);
  close(err[1]);
  await_pid(&loop, &e); /* the spawner's copies of the fds are closed by then */
  char er[256];
  read_all(err[0], er, sizeof er);
  close(err[0]);
  ck_assert_str_eq(er, "ctune-worker: cannot run the trial's supervisor "
                       "/nonexistent/ctune-supervise: ENOENT\n");
  await_exit(&loop, &e);
  ck_assert(WIFEXITED(e.status));
  ck_assert_int_eq(WEXITSTATUS(e.status), 127);
  finish(&loop, s);
}
END_TEST

/* What the worker ignores or blocks (libcurl, libuv) is not the trial's:
 * its program starts with every signal default and none blocked. Also the
 * two that glibc keeps for itself (32, 33), which its sigaction() refuses
 * to change but which a worker may inherit ignored (a CI runner's did). */
START_TEST(child_starts_with_default_signals) {
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  unsigned long ign[4] = {(unsigned long)SIG_IGN, 0, 0, 0};
  ck_assert_int_eq(syscall(SYS_rt_sigaction, 32, ign, NULL, sizeof ign[0]), 0);
  ck_assert_int_eq(syscall(SYS_rt_sigaction, 33, ign, NULL, sizeof ign[0]), 0);
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  sigprocmask(SIG_BLOCK, &block, NULL);
  uv_loop_t loop;
  struct spawner *s = start(&loop);
  int out[2];
  ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
  char *argv[] = {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status", NULL};
  char *env[] = {NULL};
  struct spawner_req r = {"/bin/grep", argv, env, NULL, {out[1], -1, -1}};
  struct ended e = {0, 0, 0};
  struct spawner_child *c = NULL;
  ck_assert_int_eq(spawner_spawn(s, &r, on_pid_cb, on_exit_cb, &e, &c), 0);
  close(out[1]);
  await_pid(&loop, &e);
  char o[256];
  read_all(out[0], o, sizeof o);
  close(out[0]);
  ck_assert_str_eq(o, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  await_exit(&loop, &e);
  ck_assert_int_eq(WEXITSTATUS(e.status), 0);
  finish(&loop, s);
}
END_TEST

START_TEST(killed_spawner_is_replaced_and_children_run_on) {
  uv_loop_t loop;
  struct spawner *s = start(&loop);
  /* The first child waits for a line on its fd 3, which this test holds. */
  int gate[2];
  ck_assert_int_eq(pipe2(gate, O_CLOEXEC), 0);
  char *argv[] = {"sh", "-c", "read x <&3; exit 5", NULL};
  char *env[] = {NULL};
  struct spawner_req r = {"/bin/sh", argv, env, NULL, {-1, -1, gate[0]}};
  struct ended e1 = {0, 0, 0}, e2 = {0, 0, 0};
  struct spawner_child *c = NULL;
  ck_assert_int_eq(spawner_spawn(s, &r, on_pid_cb, on_exit_cb, &e1, &c), 0);
  close(gate[0]);
  await_pid(&loop, &e1);
  ck_assert_int_gt(e1.pid, 0);
  pid_t first = spawner_pid(s);
  ck_assert_int_gt(first, 0);
  ck_assert_int_eq(kill(first, SIGKILL), 0);
  /* Whether its death is seen at the request (a broken pipe) or after it
   * (end of file, SIGCHLD), the request goes to a new spawner. */
  char *argv2[] = {"sh", "-c", "exit 7", NULL};
  struct spawner_req r2 = {"/bin/sh", argv2, env, NULL, {-1, -1, -1}};
  ck_assert_int_eq(spawner_spawn(s, &r2, on_pid_cb, on_exit_cb, &e2, &c), 0);
  await_pid(&loop, &e2);
  ck_assert_int_gt(e2.pid, 0);
  ck_assert_int_gt(spawner_pid(s), 0);
  ck_assert_int_ne(spawner_pid(s), first);
  await_exit(&loop, &e2);
  ck_assert_int_eq(WEXITSTATUS(e2.status), 7);
  /* The first child outlived the spawner that started it. */
  ck_assert_int_eq(e1.n, 0);
  ck_assert_int_eq(write(gate[1], "go\n", 3), 3);
  await_exit(&loop, &e1);
  ck_assert(WIFEXITED(e1.status));
  ck_assert_int_eq(WEXITSTATUS(e1.status), 5);
  close(gate[1]);
  finish(&loop, s);
}
END_TEST

/* A spawner that dies after its clone but before its answer: the request
 * is retried on a new spawner and the stray clone is ended, so the program
 * runs once. */
START_TEST(stray_of_a_lost_spawner_is_ended) {
  uv_loop_t loop;
  struct spawner *s = start(&loop);
  int out[2], gate[2];
  ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
  ck_assert_int_eq(pipe2(gate, O_CLOEXEC), 0);
  char *argv[] = {"sh", "-c", "read x <&3; echo ran; exit 4", NULL};
  char *env[] = {NULL};
  struct spawner_req r = {"/bin/sh", argv, env, NULL, {out[1], -1, gate[0]}};
  struct ended e = {0, 0, 0};
  struct spawner_child *c = NULL;
  pid_t first = spawner_pid(s);
  spawner_test_die_next(s);
  ck_assert_int_eq(spawner_spawn(s, &r, on_pid_cb, on_exit_cb, &e, &c), 0);
  await_pid(&loop, &e);
  ck_assert_int_gt(e.pid, 0);
  ck_assert_int_ne(spawner_pid(s), first);
  close(out[1]);
  close(gate[0]);
  /* Enough for two: a stray left running would print too. */
  ck_assert_int_eq(write(gate[1], "go\ngo\n", 6), 6);
  close(gate[1]);
  char o[64];
  read_all(out[0], o, sizeof o);
  close(out[0]);
  ck_assert_str_eq(o, "ran\n");
  await_exit(&loop, &e);
  ck_assert_int_eq(e.n, 1);
  ck_assert_int_eq(WEXITSTATUS(e.status), 4);
  finish(&loop, s);
}
END_TEST

/* A request the spawner refuses (no argv) comes back as an error, from
 * the loop, and no exit follows. */
START_TEST(refused_request_is_an_error_event) {
  uv_loop_t loop;
  struct spawner *s = start(&loop);
  char *argv[] = {NULL};
  struct spawner_req r = {"/bin/sh", argv, argv, NULL, {-1, -1, -1}};
  struct ended e = {0, 0, 0};
  struct spawner_child *c = NULL;
  ck_assert_int_eq(spawner_spawn(s, &r, on_pid_cb, on_exit_cb, &e, &c), 0);
  await_pid(&loop, &e);
  ck_assert_int_eq(e.pid, -E2BIG);
  finish(&loop, s); /* returns: nothing is awaited any more */
  ck_assert_int_eq(e.n, 0);
}
END_TEST

/* Bounds await_exit_within's wait. */
static void on_guard(uv_timer_t *t) { *(int *)t->data = 1; }

/* Runs the loop until e has seen its child's exit or ms have passed. */
static void await_exit_within(uv_loop_t *loop, struct ended *e, uint64_t ms) {
  uv_timer_t guard;
  int fired = 0;
  uv_timer_init(loop, &guard);
  guard.data = &fired;
  uv_timer_start(&guard, on_guard, ms, 0);
  while (e->n == 0 && !fired && uv_run(loop, UV_RUN_ONCE)) {
  }
  uv_close((uv_handle_t *)&guard, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
}

/* Rule: an ended child is reaped, and only it, whatever else is this
 * process's child: one still running, and an ended one that is not the
 * spawner's (libuv's, a helper's), which the kernel may name first and is
 * left for its owner to reap. */
START_TEST(exits_are_reaped_past_a_child_not_ours) {
  uv_loop_t loop;
  struct spawner *s = start(&loop);
  int hold[2];
  ck_assert_int_eq(pipe2(hold, O_CLOEXEC), 0);
  char *argv_a[] = {"sh", "-c", "read x <&3", NULL}, *argv_b[] = {"sh", "-c", "exit 5", NULL};
  char *env[] = {"PATH=/usr/bin:/bin", NULL};
  struct spawner_req ra = {"/bin/sh", argv_a, env, NULL, {-1, -1, hold[0]}};
  struct spawner_req rb = {"/bin/sh", argv_b, env, NULL, {-1, -1, -1}};
  struct ended a = {0, 0, 0}, b = {0, 0, 0};
  struct spawner_child *ca = NULL, *cb = NULL;
  ck_assert_int_eq(spawner_spawn(s, &ra, on_pid_cb, on_exit_cb, &a, &ca), 0);
  await_pid(&loop, &a);
  ck_assert_int_gt(a.pid, 0);
  close(hold[0]);
  pid_t foreign = fork();
  ck_assert_int_ge(foreign, 0);
  if (foreign == 0) _exit(9);
  siginfo_t si;
  ck_assert_int_eq(waitid(P_PID, (id_t)foreign, &si, WEXITED | WNOWAIT), 0); /* a zombie now */
  ck_assert_int_eq(spawner_spawn(s, &rb, on_pid_cb, on_exit_cb, &b, &cb), 0);
  await_exit_within(&loop, &b, 10000);
  ck_assert_int_eq(b.n, 1);
  ck_assert(WIFEXITED(b.status) && WEXITSTATUS(b.status) == 5);
  ck_assert_int_eq(a.n, 0);
  close(hold[1]);
  await_exit_within(&loop, &a, 10000);
  ck_assert_int_eq(a.n, 1);
  int st = 0;
  ck_assert_int_eq(waitpid(foreign, &st, WNOHANG), foreign); /* left to its owner */
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 9);
  finish(&loop, s);
}
END_TEST

int main(void) {
  Suite *su = suite_create("spawner");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, child_is_ours_in_its_own_session);
  tcase_add_test(tc, failed_exec_says_why_and_exits_127);
  tcase_add_test(tc, child_starts_with_default_signals);
  tcase_add_test(tc, killed_spawner_is_replaced_and_children_run_on);
  tcase_add_test(tc, stray_of_a_lost_spawner_is_ended);
  tcase_add_test(tc, refused_request_is_an_error_event);
  tcase_add_test(tc, exits_are_reaped_past_a_child_not_ours);
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
