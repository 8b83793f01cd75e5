/* The member processes of one trial (trainer/dist.c): torchrun's variables
 * read strictly, each error naming the variable; the rendezvous handing
 * rank 0's bytes to the other ranks (forked children); a member or rank 0
 * that never comes is a bounded wait. */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "dist.h"

static char err[512];

static void members(const char *world, const char *rank, const char *addr, const char *port) {
  const char *names[] = {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"};
  const char *values[] = {world, rank, addr, port};
  for (int i = 0; i < 4; i++) {
    if (values[i])
      setenv(names[i], values[i], 1);
    else
      unsetenv(names[i]);
  }
  err[0] = '\0';
}

/* A port nothing listens on now (the kernel's pick, then closed). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t len = sizeof(a);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

START_TEST(one_process_without_the_variables) {
  struct dist d;
  members(NULL, NULL, NULL, NULL);
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.world_size, 1);
  members("1", NULL, NULL, NULL);
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.world_size, 1);
  /* one process needs no rendezvous */
  char blob[4] = "abc";
  ck_assert_int_eq(dist_share(&d, blob, sizeof(blob), 10, err, sizeof(err)), 0);
}
END_TEST

START_TEST(reads_a_member) {
  struct dist d;
  members("4", "3", "10.0.0.5", "29511");
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.world_size, 4);
  ck_assert_int_eq(d.rank, 3);
  ck_assert_str_eq(d.addr, "10.0.0.5");
  ck_assert_str_eq(d.port, "29511");
}
END_TEST

START_TEST(bad_variables_are_named) {
  struct dist d;
  members("two", "0", "h", "1");
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "WORLD_SIZE=two: expected an integer from 1 to 65536");
  members("2", NULL, "h", "1");
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "WORLD_SIZE=2 but RANK is unset (a member needs its rank)");
  members("2", "2", "h", "1");
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "RANK=2: expected an integer from 0 to 1");
  members("2", "1", "h", "70000");
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "MASTER_PORT=70000: expected an integer from 1 to 65535");
  members("2", "1", NULL, "80");
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "MASTER_ADDR or MASTER_PORT is unset"));
}
END_TEST

/* world ranks: rank 0 here, the others forked first (they must wait for
 * rank 0 to listen); each child exits 0 when it got the bytes. */
static void share_among(int world) {
  char port[16];
  snprintf(port, sizeof(port), "%d", free_port());
  pid_t kids[8];
  const char blob[128] = "the NCCL id of rank 0";
  for (int r = 1; r < world; r++) {
    kids[r] = fork();
    ck_assert_int_ge(kids[r], 0);
    if (kids[r] == 0) {
      struct dist d;
      char got[128] = {0}, rs[16], ws[16];
      snprintf(rs, sizeof(rs), "%d", r);
      snprintf(ws, sizeof(ws), "%d", world);
      members(ws, rs, "127.0.0.1", port);
      int ok = dist_from_env(&d, err, sizeof(err)) == 0 &&
               dist_share(&d, got, sizeof(got), 10000, err, sizeof(err)) == 0 &&
               memcmp(got, blob, sizeof(blob)) == 0;
      _exit(ok ? 0 : 1);
    }
  }
  struct dist d;
  char ws[16];
  snprintf(ws, sizeof(ws), "%d", world);
  members(ws, "0", "127.0.0.1", port);
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), 0);
  ck_assert_msg(dist_share(&d, (void *)blob, sizeof(blob), 10000, err, sizeof(err)) == 0, "%s",
                err);
  for (int r = 1; r < world; r++) {
    int st = -1;
    ck_assert_int_eq(waitpid(kids[r], &st, 0), kids[r]);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d did not get the bytes", r);
  }
}

START_TEST(rank_0_hands_its_bytes_to_every_member) {
  share_among(2);
  share_among(4);
}
END_TEST

START_TEST(a_member_that_never_comes_is_a_bounded_wait) {
  struct dist d;
  char port[16], blob[16] = "x";
  snprintf(port, sizeof(port), "%d", free_port());
  members("2", "0", "127.0.0.1", port);
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), 0);
  double t0 = clock_mono_s();
  ck_assert_int_eq(dist_share(&d, blob, sizeof(blob), 200, err, sizeof(err)), -ETIMEDOUT);
  ck_assert_double_lt(clock_mono_s() - t0, 5.0);
  ck_assert_ptr_nonnull(strstr(err, "rank 0: 1 of 2 members joined the rendezvous on port "));
}
END_TEST

START_TEST(rank_0_that_never_listens_is_a_bounded_wait) {
  struct dist d;
  char port[16], blob[16];
  snprintf(port, sizeof(port), "%d", free_port());
  members("2", "1", "127.0.0.1", port);
  ck_assert_int_eq(dist_from_env(&d, err, sizeof(err)), 0);
  double t0 = clock_mono_s();
  ck_assert_int_eq(dist_share(&d, blob, sizeof(blob), 200, err, sizeof(err)), -ETIMEDOUT);
  ck_assert_double_lt(clock_mono_s() - t0, 5.0);
  ck_assert_ptr_nonnull(strstr(err, "rank 1 cannot get the NCCL id from rank 0 at 127.0.0.1:"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("dist");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, one_process_without_the_variables);
  tcase_add_test(tc, reads_a_member);
  tcase_add_test(tc, bad_variables_are_named);
  tcase_add_test(tc, rank_0_hands_its_bytes_to_every_member);
  tcase_add_test(tc, a_member_that_never_comes_is_a_bounded_wait);
  tcase_add_test(tc, rank_0_that_never_listens_is_a_bounded_wait);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
