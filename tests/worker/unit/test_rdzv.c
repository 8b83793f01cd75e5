/* Rendezvous ports (worker/rdzv.c): a port is never given to two running
 * trials of this worker, even when the kernel hands the same free port out
 * again; a port comes back when its trial ends. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "rdzv.h"

/* The kernel's picks as a test sets them: a port may come back at once
 * after its probe closed it. */
struct fake_probe {
  const int *ports;
  int n, next;
};

static int fake(void *ctx) {
  struct fake_probe *f = ctx;
  return f->ports[f->next++ % f->n];
}

/* Rule: many concurrent gangs on one machine never share a port, whatever
 * the probe repeats; a port given back is taken again. */
START_TEST(concurrent_gangs_never_share_a_port) {
  struct rdzv_ports s = {0};
  int seq[] = {40000, 40000, 40001, 40000, 40001, 40002, 40003};
  struct fake_probe f = {seq, 7, 0};
  ck_assert_int_eq(rdzv_port_take(&s, fake, &f), 40000);
  ck_assert_int_eq(rdzv_port_take(&s, fake, &f), 40001);
  ck_assert_int_eq(rdzv_port_take(&s, fake, &f), 40002);
  ck_assert_int_eq(rdzv_port_take(&s, fake, &f), 40003);
  /* Every port the probe gives is in use: refused, not shared. */
  ck_assert_int_eq(rdzv_port_take(&s, fake, &f), -EADDRINUSE);
  rdzv_port_put(&s, 40001);
  rdzv_port_put(&s, 12345); /* not taken: ignored */
  ck_assert_int_eq(rdzv_port_take(&s, fake, &f), 40001);
  rdzv_ports_free(&s);
  /* The real kernel: 200 gangs at once on this machine, all distinct. */
  int got[200];
  for (int i = 0; i < 200; i++) {
    got[i] = rdzv_port_take(&s, rdzv_probe_free_port, NULL);
    ck_assert_int_gt(got[i], 0);
    for (int j = 0; j < i; j++) ck_assert_int_ne(got[i], got[j]);
  }
  ck_assert_uint_eq(s.n, 200);
  rdzv_ports_free(&s);
}
END_TEST

/* Rule: two workers on one machine (two registries, one claim dir) never
 * hold the same port; a port its holder gave back, or whose holder died,
 * is free again. */
START_TEST(two_workers_on_one_machine_never_share_a_port) {
  char dir[] = "/tmp/ctune-rdzv-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  struct rdzv_ports a = {0}, b = {0};
  ck_assert_int_eq(rdzv_ports_init(&a, dir), 0);
  ck_assert_int_eq(rdzv_ports_init(&b, dir), 0);
  int seq[] = {41000, 41000, 41001};
  struct fake_probe fa = {seq, 3, 0}, fb = {seq, 3, 0};
  ck_assert_int_eq(rdzv_port_take(&a, fake, &fa), 41000);
  ck_assert_int_eq(rdzv_port_take(&b, fake, &fb), 41001); /* 41000 is a's */
  ck_assert_int_eq(rdzv_port_take(&a, fake, &fa), -EADDRINUSE);
  rdzv_port_put(&a, 41000);
  fb.next = 0;
  ck_assert_int_eq(rdzv_port_take(&b, fake, &fb), 41000);
  rdzv_ports_free(&b); /* a worker that ends (or dies) lets its claims go */
  fa.next = 0;
  ck_assert_int_eq(rdzv_port_take(&a, fake, &fa), 41000);
  rdzv_ports_free(&a);
  const char *left[] = {"port/41000", "port/41001", "port", ""};
  for (int i = 0; i < 4; i++) {
    char p[64];
    snprintf(p, sizeof p, "%s/%s", dir, left[i]);
    ck_assert_int_eq(remove(p), 0);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("worker_rdzv");
  TCase *tc = tcase_create("rdzv");
  tcase_add_test(tc, concurrent_gangs_never_share_a_port);
  tcase_add_test(tc, two_workers_on_one_machine_never_share_a_port);
  suite_add_tcase(s, tc);
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
