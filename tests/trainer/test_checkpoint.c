/* Checkpoint format round trip, corruption detection and atomic saving. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "test_util.h"

static char *dir;
static char err[1024];
static int32_t perm[5] = {4, 2, 0, 1, 3};
static float params[7] = {1, -2, 3.5f, 0, 1e-9f, -7, 8};
static float state[14];

static struct ckpt sample(void) {
  for (int i = 0; i < 14; i++) state[i] = (float)i * 0.25f;
  struct ckpt c = {
      .model = {1, 1, 28, 28, 10, 120, 84},
      .optim_kind = 1,
      .epoch = 3,
      .pos = 2,
      .step = 1234,
      .rng = 0xdeadbeefcafef00dull,
      .time_total_s = 12.5,
      .epoch_time_s = 1.5,
      .epoch_train_time_s = 1.25,
      .train_loss_sum = 9.75,
      .train_count = 64,
      .last_loss = 0.3,
      .last_accuracy = 0.9,
      .n_train = 5,
      .perm = perm,
      .n_params = 7,
      .n_state = 14,
      .params = params,
      .state = state,
  };
  return c;
}

static void setup(void) { dir = tu_mkdtemp(); }
static void teardown(void) { tu_rmtree(dir); }

START_TEST(encode_decode_roundtrip) {
  struct ckpt c = sample(), d;
  uint8_t *buf;
  size_t len;
  ck_assert_int_eq(ckpt_encode(&c, &buf, &len), 0);
  ck_assert(memcmp(buf, CKPT_MAGIC, 8) == 0);
  ck_assert_int_eq(ckpt_decode(buf, len, &d, err, sizeof(err)), 0);
  ck_assert(memcmp(&d.model, &c.model, sizeof(c.model)) == 0);
  ck_assert(d.epoch == 3 && d.pos == 2 && d.step == 1234 && d.rng == c.rng);
  ck_assert(d.time_total_s == 12.5 && d.train_loss_sum == 9.75 && d.train_count == 64);
  ck_assert(d.last_loss == 0.3 && d.last_accuracy == 0.9 && d.optim_kind == 1);
  ck_assert(memcmp(d.perm, perm, sizeof(perm)) == 0);
  ck_assert(memcmp(d.params, params, sizeof(params)) == 0);
  ck_assert(memcmp(d.state, state, sizeof(state)) == 0);
  ckpt_free(&d);
  free(buf);
}
END_TEST

START_TEST(every_flipped_byte_is_detected) {
  struct ckpt c = sample(), d;
  uint8_t *buf;
  size_t len;
  ck_assert_int_eq(ckpt_encode(&c, &buf, &len), 0);
  for (size_t i = 0; i < len; i++) {
    buf[i] ^= 0x10;
    ck_assert_msg(ckpt_decode(buf, len, &d, err, sizeof(err)) == -EINVAL, "flip at %zu accepted",
                  i);
    buf[i] ^= 0x10;
  }
  for (size_t cut = 0; cut < len; cut += 13)
    ck_assert_int_eq(ckpt_decode(buf, cut, &d, err, sizeof(err)), -EINVAL);
  free(buf);
}
END_TEST

START_TEST(version_mismatch_named) {
  struct ckpt c = sample(), d;
  uint8_t *buf;
  size_t len;
  ck_assert_int_eq(ckpt_encode(&c, &buf, &len), 0);
  buf[8] = 99;
  ck_assert_int_eq(ckpt_decode(buf, len, &d, err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, "version 99") != NULL, "%s", err);
  free(buf);
}
END_TEST

START_TEST(save_load_atomic_no_leftovers) {
  struct ckpt c = sample(), d;
  char sub[4200];
  snprintf(sub, sizeof(sub), "%s/trial", dir); /* created by save */
  ck_assert_int_eq(ckpt_load(sub, &d, err, sizeof(err)), -ENOENT);
  ck_assert_int_eq(ckpt_save(sub, &c, err, sizeof(err)), 0);
  c.epoch = 4;
  ck_assert_int_eq(ckpt_save(sub, &c, err, sizeof(err)), 0);
  ck_assert_int_eq(ckpt_load(sub, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.epoch, 4);
  ckpt_free(&d);
  DIR *dd = opendir(sub);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(dd)))
    if (e->d_name[0] != '.' || strstr(e->d_name, "tmp")) {
      files++;
      ck_assert_str_eq(e->d_name, CKPT_FILE);
    }
  closedir(dd);
  ck_assert_int_eq(files, 1);
}
END_TEST

START_TEST(unwritable_dir_keeps_old_checkpoint) {
  struct ckpt c = sample(), d;
  ck_assert_int_eq(ckpt_save(dir, &c, err, sizeof(err)), 0);
  if (geteuid() == 0) return; /* root writes anywhere; the rest still ran */
  chmod(dir, 0555);
  c.epoch = 9;
  int rc = ckpt_save(dir, &c, err, sizeof(err));
  chmod(dir, 0755);
  ck_assert_int_ne(rc, 0);
  ck_assert_int_eq(ckpt_load(dir, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.epoch, 3);
  ckpt_free(&d);
}
END_TEST

START_TEST(corrupt_file_names_path) {
  ck_assert_int_eq(tu_write(dir, CKPT_FILE, "CTUNECKPgarbage-garbage-garbage", 31, 0), 0);
  struct ckpt d;
  ck_assert_int_eq(ckpt_load(dir, &d, err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, CKPT_FILE) != NULL, "%s", err);
}
END_TEST

int main(void) {
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("checkpoint");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, encode_decode_roundtrip);
  tcase_add_test(tc, every_flipped_byte_is_detected);
  tcase_add_test(tc, version_mismatch_named);
  tcase_add_test(tc, save_load_atomic_no_leftovers);
  tcase_add_test(tc, unwritable_dir_keeps_old_checkpoint);
  tcase_add_test(tc, corrupt_file_names_path);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
