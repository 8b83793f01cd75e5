/* Allocator: dedicated CPUs never shared, fractional packing, memory, free. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "alloc.h"
#include "cpuset.h"

static struct alloc_pool pool;

static void setup_pool(int ncpu, int ngpu, long mem) {
  int cpus[ALLOC_MAX_CPUS] = {0}, gpus[ALLOC_MAX_GPUS] = {0};
  long gmem[ALLOC_MAX_GPUS] = {0};
  for (int i = 0; i < ncpu; i++) cpus[i] = i * 2; /* ids need not be dense */
  for (int i = 0; i < ngpu; i++) {
    gpus[i] = i;
    gmem[i] = 16000;
  }
  ck_assert_int_eq(alloc_init(&pool, cpus, ncpu, gpus, gmem, ngpu, mem), 0);
}

START_TEST(dedicated_cpus_never_shared) {
  setup_pool(4, 0, 1000);
  struct alloc_grant a, b, c;
  struct alloc_req r1 = {1, 0, 0}, r2 = {2, 0, 0};
  ck_assert_int_eq(alloc_take(&pool, 1, &r1, &a), 0);
  ck_assert_int_eq(alloc_take(&pool, 2, &r2, &b), 0);
  ck_assert_int_eq(a.ncpus, 1);
  ck_assert_int_eq(b.ncpus, 2);
  for (int i = 0; i < b.ncpus; i++) ck_assert_int_ne(a.cpus[0], b.cpus[i]);
  ck_assert_int_ne(b.cpus[0], b.cpus[1]);
  /* 1 CPU left: a request for 2 must wait, not share. */
  ck_assert_int_eq(alloc_take(&pool, 3, &r2, &c), -ENOSPC);
  ck_assert_int_eq(alloc_take(&pool, 3, &r1, &c), 0);
  int seen[8] = {0};
  seen[a.cpus[0] / 2]++;
  seen[b.cpus[0] / 2]++;
  seen[b.cpus[1] / 2]++;
  seen[c.cpus[0] / 2]++;
  for (int i = 0; i < 4; i++) ck_assert_int_eq(seen[i], 1);
  ck_assert_int_eq(alloc_idle_cpus(&pool), 0);
  alloc_release(&pool, &b);
  ck_assert_int_eq(alloc_idle_cpus(&pool), 2);
  ck_assert_int_eq(alloc_take(&pool, 4, &r2, &b), 0);
}
END_TEST

START_TEST(fractional_cpu_packs_and_whole_waits) {
  setup_pool(2, 0, 0);
  struct alloc_grant a, b, c, d;
  struct alloc_req half = {0.5, 0, 0}, one = {1, 0, 0};
  ck_assert_int_eq(alloc_take(&pool, 1, &half, &a), 0);
  ck_assert_int_eq(alloc_take(&pool, 2, &half, &b), 0);
  ck_assert(a.cpu_shared && b.cpu_shared);
  ck_assert_int_eq(a.cpus[0], b.cpus[0]); /* packed on one CPU */
  ck_assert_int_eq(alloc_take(&pool, 3, &one, &c), 0);
  ck_assert_int_ne(c.cpus[0], a.cpus[0]);
  ck_assert_int_eq(alloc_take(&pool, 4, &half, &d), -ENOSPC);
  struct alloc_free f;
  alloc_free_amounts(&pool, &f);
  ck_assert(f.cpu == 0);
  alloc_release(&pool, &a);
  alloc_free_amounts(&pool, &f);
  ck_assert(fabs(f.cpu - 0.5) < 1e-9);
}
END_TEST

START_TEST(gpu_whole_and_fractional_with_memory_cap) {
  setup_pool(8, 2, 0);
  struct alloc_grant a, b, c, d;
  struct alloc_req q = {1, 0.25, 0}, whole = {1, 1, 0}, two = {1, 2, 0};
  ck_assert_int_eq(alloc_take(&pool, 1, &q, &a), 0);
  ck_assert_int_eq(a.ngpus, 1);
  ck_assert(fabs(a.gpu_frac - 0.25) < 1e-9);
  ck_assert_int_eq(a.gpu_mem_mb, 4000);
  ck_assert_int_eq(alloc_take(&pool, 2, &q, &b), 0);
  ck_assert_int_eq(b.gpus[0], a.gpus[0]);                    /* best fit: same device */
  ck_assert_int_eq(alloc_take(&pool, 3, &two, &c), -ENOSPC); /* one device is shared */
  ck_assert_int_eq(alloc_take(&pool, 3, &whole, &c), 0);
  ck_assert_int_ne(c.gpus[0], a.gpus[0]);
  ck_assert_int_eq(c.gpu_mem_mb, 0);
  ck_assert_int_eq(alloc_take(&pool, 4, &whole, &d), -ENOSPC);
  struct alloc_free f;
  alloc_free_amounts(&pool, &f);
  ck_assert(fabs(f.gpu - 0.5) < 1e-9);
  alloc_release(&pool, &a);
  alloc_release(&pool, &b);
  ck_assert_int_eq(alloc_take(&pool, 4, &whole, &d), 0);
}
END_TEST

START_TEST(memory_budget_and_bad_requests) {
  setup_pool(4, 0, 1000);
  struct alloc_grant a, b;
  struct alloc_req r = {1, 0, 600}, bad_gpu = {1, 1.5, 0}, neg = {-1, 0, 0}, nan_cpu = {NAN, 0, 0};
  ck_assert_int_eq(alloc_take(&pool, 1, &r, &a), 0);
  ck_assert_int_eq(alloc_take(&pool, 2, &r, &b), -ENOSPC);
  ck_assert_int_eq(alloc_take(&pool, 2, &bad_gpu, &b), -EINVAL);
  ck_assert_int_eq(alloc_take(&pool, 2, &neg, &b), -EINVAL);
  ck_assert_int_eq(alloc_take(&pool, 2, &nan_cpu, &b), -EINVAL);
  /* A failed take changes nothing. */
  ck_assert_int_eq(alloc_idle_cpus(&pool), 3);
  alloc_release(&pool, &a);
  ck_assert_int_eq(alloc_take(&pool, 2, &r, &b), 0);
  struct alloc_req huge = {64, 0, 0};
  ck_assert(!alloc_could_ever_fit(&pool, &huge));
  ck_assert(alloc_could_ever_fit(&pool, &r));
}
END_TEST

START_TEST(cpuset_parse_and_format) {
  int ids[16];
  char buf[64];
  ck_assert_int_eq(cpuset_parse("0-3,6", ids, 16), 5);
  ck_assert_int_eq(ids[4], 6);
  ck_assert_int_eq(cpuset_parse("5,1,1", ids, 16), 2);
  ck_assert_int_eq(ids[0], 1);
  ck_assert_int_eq(cpuset_format(ids, 2, buf, sizeof buf), 0);
  ck_assert_str_eq(buf, "1,5");
  ck_assert_int_eq(cpuset_parse("3-1", ids, 16), -EINVAL);
  ck_assert_int_eq(cpuset_parse("a", ids, 16), -EINVAL);
  ck_assert_int_eq(cpuset_parse("1,", ids, 16), -EINVAL);
  ck_assert_int_eq(cpuset_parse("", ids, 16), -EINVAL);
  ck_assert_int_eq(cpuset_parse("0-20", ids, 16), -E2BIG);
  ck_assert_int_eq(cpuset_format(ids, 2, buf, 2), -ENOSPC);
}
END_TEST

int main(void) {
  Suite *s = suite_create("alloc");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, dedicated_cpus_never_shared);
  tcase_add_test(tc, fractional_cpu_packs_and_whole_waits);
  tcase_add_test(tc, gpu_whole_and_fractional_with_memory_cap);
  tcase_add_test(tc, memory_budget_and_bad_requests);
  tcase_add_test(tc, cpuset_parse_and_format);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
