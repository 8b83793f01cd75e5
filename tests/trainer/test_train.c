/* The training loop in-process on tiny synthetic data: it learns, resume
 * (after an epoch or mid-epoch) equals an uninterrupted run bit for bit, and
 * every failure maps to its exit code without leaving files behind. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

#include "backend.h"
#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "exit_codes.h"
#include "test_util.h"
#include "train.h"

static char *dir, ckdir[4200];
static char err[1024];
static volatile sig_atomic_t stop;

static void setup(void) {
  dir = tu_mkdtemp();
  ck_assert_ptr_nonnull(dir);
  ck_assert_int_eq(tu_write_idx_set(dir, 600, 100, 28, 28), 0);
  snprintf(ckdir, sizeof(ckdir), "%s/ck", dir);
  stop = 0;
  err[0] = 0;
}
static void teardown(void) { tu_rmtree(dir); }

static void base(struct train_config *c) {
  config_defaults(c);
  c->data_dir = dir;
  c->epochs = 3;
  c->batch_size = 16;
  c->l1 = 32;
  c->l2 = 16;
  c->seed = 5;
}

/* Runs and returns the exit code; *out gets stdout (caller frees). */
static int run(const struct train_config *c, char **out) {
  static size_t len;
  static char *buf;
  buf = NULL;
  len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  int code = train_run(c, &stop, f, err, sizeof(err));
  fclose(f);
  if (out)
    *out = buf;
  else
    free(buf);
  return code;
}

/* Drops the timing fields so runs can be compared. */
static void strip_times(char *s) {
  const char *keys[] = {"\"time_this_iter_s\"", "\"time_total_s\"", "\"samples_per_s\""};
  for (int k = 0; k < 3; k++)
    for (char *p = strstr(s, keys[k]); p; p = strstr(s, keys[k])) {
      char *e = p;
      while (*e && *e != ',' && *e != '}') e++;
      if (*e == ',') e += 2;
      memmove(p, e, strlen(e) + 1);
    }
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

START_TEST(mlp_learns_and_reports_json_lines) {
  struct train_config c;
  base(&c);
  c.model = MODEL_MLP;
  /* Margin on both sides, under every OpenBLAS kernel: 0.01 reaches 1.0 in
   * three epochs, half of it still about 0.8, twice it 1.0. At 0.05 (with
   * momentum 0.9) the run sat at the edge of stability, and the kernel's
   * rounding decided whether it collapsed to one class. */
  c.lr = 0.01;
  c.test = 1;
  char *out;
  ck_assert_int_eq(run(&c, &out), TRAIN_EXIT_OK);
  ck_assert_int_eq(count_lines(out), 3);
  ck_assert(strncmp(out, "{\"training_iteration\": 1, \"loss\": ", 34) == 0);
  const char *last = strstr(out, "\"training_iteration\": 3");
  ck_assert_ptr_nonnull(last);
  double acc = 0, tacc = 0;
  ck_assert(sscanf(strstr(last, "\"accuracy\""), "\"accuracy\": %lf", &acc) == 1);
  ck_assert(sscanf(strstr(last, "\"test_accuracy\""), "\"test_accuracy\": %lf", &tacc) == 1);
  /* chance is 0.1 */
  ck_assert_msg(acc > 0.8 && tacc > 0.8, "accuracy %g test %g", acc, tacc);
  free(out);
}
END_TEST

/* The resume tests compare runs bit for bit, which does not depend on the
 * set's size: 200 of the 600 rows (160 to train, 40 to validate) keep many
 * steps per epoch at a third of the work of all of them. */
#define RESUME_ROWS 200

START_TEST(resume_after_epoch_equals_uninterrupted) {
  struct train_config c;
  base(&c);
  c.train_limit = RESUME_ROWS; /* 10 steps an epoch */
  c.optimizer = OPTIM_ADAM;
  c.lr = 0.001;
  char *full, *part1, *part2;
  ck_assert_int_eq(run(&c, &full), 0);
  c.checkpoint_dir = ckdir;
  c.epochs = 1;
  ck_assert_int_eq(run(&c, &part1), 0);
  c.epochs = 3;
  c.resume = 1;
  ck_assert_int_eq(run(&c, &part2), 0);
  ck_assert_int_eq(count_lines(part1), 1);
  ck_assert_int_eq(count_lines(part2), 2);
  char both[8192];
  snprintf(both, sizeof(both), "%s%s", part1, part2);
  strip_times(both);
  strip_times(full);
  ck_assert_str_eq(both, full);
  free(full);
  free(part1);
  free(part2);
}
END_TEST

static void on_alarm(int sig) {
  (void)sig;
  stop = 1;
}

START_TEST(stop_mid_epoch_saves_and_resume_equals_uninterrupted) {
  struct train_config c;
  base(&c);
  c.train_limit = RESUME_ROWS;
  c.batch_size = 1; /* many steps per epoch, so the stop lands inside one */
  c.epochs = 3;
  char *full, *part1, *part2;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(run(&c, &full), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* stop at a sixth of an uninterrupted run's time: inside the first epoch,
   * whatever the machine's speed */
  long us = (long)((t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000) / 6;
  if (us < 1000) us = 1000;
  c.checkpoint_dir = ckdir;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 0}, {us / 1000000L, us % 1000000L}};
  setitimer(ITIMER_REAL, &it, NULL);
  ck_assert_int_eq(run(&c, &part1), 0);
  ck_assert_msg(stop == 1, "the run ended before the timer");
  struct ckpt k;
  ck_assert_int_eq(ckpt_load(ckdir, &k, err, sizeof(err)), 0);
  ck_assert_msg(k.epoch < 3, "stopped too late to test anything");
  ckpt_free(&k);
  stop = 0;
  c.resume = 1;
  ck_assert_int_eq(run(&c, &part2), 0);
  char both[8192];
  snprintf(both, sizeof(both), "%s%s", part1, part2);
  strip_times(both);
  strip_times(full);
  ck_assert_str_eq(both, full);
  free(full);
  free(part1);
  free(part2);
}
END_TEST

START_TEST(diverged_exit_5_keeps_last_good_checkpoint) {
  struct train_config c;
  base(&c);
  c.model = MODEL_MLP;
  /* weight decay 1 at lr 10 multiplies the weights by about -9 a step:
   * they overflow to inf within an epoch and the loss becomes NaN */
  c.lr = 10;
  c.momentum = 0.9;
  c.weight_decay = 1;
  c.epochs = 5;
  c.checkpoint_dir = ckdir;
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_DIVERGED);
  ck_assert_msg(strstr(err, "diverged") != NULL, "%s", err);
  /* whatever was saved is a whole, valid checkpoint and nothing else */
  struct ckpt k;
  int rc = ckpt_load(ckdir, &k, err, sizeof(err));
  ck_assert(rc == 0 || rc == -ENOENT);
  if (rc == 0) ckpt_free(&k);
  DIR *d = opendir(ckdir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      ck_assert(!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                !strcmp(e->d_name, CKPT_FILE));
    closedir(d);
  }
}
END_TEST

START_TEST(corrupt_or_foreign_checkpoint_exit_4) {
  struct train_config c;
  base(&c);
  c.model = MODEL_MLP;
  c.epochs = 1;
  c.checkpoint_dir = ckdir;
  ck_assert_int_eq(run(&c, NULL), 0);
  /* another model's checkpoint */
  c.resume = 1;
  c.epochs = 2;
  c.l1 = 33;
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_CHECKPOINT);
  ck_assert_msg(strstr(err, "another model") != NULL, "%s", err);
  /* a flipped byte */
  c.l1 = 32;
  char path[4300];
  snprintf(path, sizeof(path), "%s/%s", ckdir, CKPT_FILE);
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  fseek(f, 200, SEEK_SET);
  int ch = fgetc(f);
  fseek(f, 200, SEEK_SET);
  fputc(ch ^ 0xff, f);
  fclose(f);
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_CHECKPOINT);
  ck_assert_msg(strstr(err, "checksum") != NULL, "%s", err);
}
END_TEST

/* A resumed run on another split would train on validation images: every
 * part of the split is recorded and checked, even when n_train matches. */
START_TEST(resume_under_another_split_exit_4) {
  struct train_config c;
  base(&c);
  c.model = MODEL_MLP;
  c.epochs = 1;
  c.checkpoint_dir = ckdir;
  ck_assert_int_eq(run(&c, NULL), 0);
  c.resume = 1;
  c.epochs = 2;
  c.seed += 1; /* same sizes, another shuffle */
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_CHECKPOINT);
  ck_assert_msg(strstr(err, "another data split (seed") != NULL, "%s", err);
  ck_assert_msg(strstr(err, "validation images into training") != NULL, "%s", err);
  c.seed -= 1;
  c.val_fraction += 0.0001; /* may leave n_train as it was */
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_CHECKPOINT);
  ck_assert_msg(strstr(err, "another data split") != NULL, "%s", err);
  c.val_fraction -= 0.0001;
  int64_t limit = c.train_limit;
  c.train_limit = limit ? limit + 1 : 1000000; /* beyond the data: same n */
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_CHECKPOINT);
  c.train_limit = limit;
  ck_assert_int_eq(run(&c, NULL), 0); /* the same split resumes */
}
END_TEST

START_TEST(unusable_checkpoint_dir_exit_4_before_training) {
  struct train_config c;
  base(&c);
  char bad[4300];
  snprintf(bad, sizeof(bad), "%s/no/such/parent", dir);
  c.checkpoint_dir = bad;
  char *out;
  ck_assert_int_eq(run(&c, &out), TRAIN_EXIT_CHECKPOINT);
  ck_assert_str_eq(out, ""); /* failed before the first epoch */
  ck_assert_msg(strstr(err, "no/such/parent") != NULL, "%s", err);
  free(out);
}
END_TEST

START_TEST(missing_data_exit_3) {
  struct train_config c;
  base(&c);
  char missing[4300];
  snprintf(missing, sizeof(missing), "%s/nothing-here", dir);
  c.data_dir = missing;
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_DATA);
  ck_assert_msg(strstr(err, "nothing-here/train-images-idx3-ubyte.gz") != NULL, "%s", err);
  c.data_dir = dir;
  c.test = 1;
  char p[4300];
  snprintf(p, sizeof(p), "%s/t10k-labels-idx1-ubyte.gz", dir);
  unlink(p);
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_DATA);
}
END_TEST

START_TEST(split_too_small_is_bad_config) {
  struct train_config c;
  base(&c);
  c.train_limit = 2;
  c.val_fraction = 0.6; /* floor(2 * 0.4) = 0 training images */
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_USAGE);
  ck_assert_msg(strstr(err, "\"val_fraction\"") != NULL, "%s", err);
}
END_TEST

START_TEST(drop_last_and_train_limit) {
  struct train_config c;
  base(&c);
  c.model = MODEL_MLP;
  c.epochs = 1;
  c.train_limit = 250; /* 200 train, 50 val */
  c.batch_size = 64;
  c.checkpoint_dir = ckdir;
  struct ckpt k;
  ck_assert_int_eq(run(&c, NULL), 0);
  ck_assert_int_eq(ckpt_load(ckdir, &k, err, sizeof(err)), 0);
  ck_assert_int_eq(k.n_train, 200);
  ck_assert_int_eq(k.train_count, 200);
  ckpt_free(&k);
  c.drop_last = 1;
  ck_assert_int_eq(run(&c, NULL), 0);
  ck_assert_int_eq(ckpt_load(ckdir, &k, err, sizeof(err)), 0);
  ck_assert_int_eq(k.train_count, 192);
  ckpt_free(&k);
}
END_TEST

START_TEST(cifar10_cnn_runs_and_learns) {
  /* 3x32x32 records whose class shows as a bright row in the red plane */
  const int n = 300;
  size_t len = (size_t)n * 3073;
  uint8_t *b = malloc(len);
  ck_assert_ptr_nonnull(b);
  uint32_t seed = 9;
  for (int i = 0; i < n; i++) {
    uint8_t *rec = b + (size_t)i * 3073;
    rec[0] = (uint8_t)(i % 10);
    for (int k = 0; k < 3072; k++) {
      seed = seed * 1103515245u + 12345u;
      int v = (int)((seed >> 16) % 64);
      if (k < 1024 && k / 32 == 3 * (i % 10)) v += 180;
      rec[1 + k] = (uint8_t)v;
    }
  }
  char cdir[4300], name[32];
  snprintf(cdir, sizeof(cdir), "%s/cifar-10-batches-bin", dir);
  ck_assert_int_eq(mkdir(cdir, 0755), 0);
  for (int i = 1; i <= 5; i++) {
    snprintf(name, sizeof(name), "data_batch_%d.bin", i);
    ck_assert_int_eq(tu_write(cdir, name, b, len, 0), 0);
  }
  ck_assert_int_eq(tu_write(cdir, "test_batch.bin", b, len, 0), 0);
  free(b);
  struct train_config c;
  base(&c);
  c.dataset = DATA_CIFAR10;
  c.train_limit = 600;
  c.epochs = 4;
  c.batch_size = 8;
  c.lr = 0.01;
  c.test = 1;
  char *out;
  ck_assert_int_eq(run(&c, &out), TRAIN_EXIT_OK);
  ck_assert_int_eq(count_lines(out), 4);
  const char *last = strstr(out, "\"training_iteration\": 4");
  double tacc = 0;
  ck_assert(last &&
            sscanf(strstr(last, "\"test_accuracy\""), "\"test_accuracy\": %lf", &tacc) == 1);
  ck_assert_msg(tacc > 0.3, "cifar test accuracy %g (chance 0.1)", tacc);
  free(out);
}
END_TEST

START_TEST(cuda_without_device_exit_7) {
  struct train_config c;
  base(&c);
  c.device = DEVICE_CUDA;
  c.epochs = 1;
  ck_assert_int_eq(run(&c, NULL), TRAIN_EXIT_NO_DEVICE);
  ck_assert_msg(strstr(err, "--device cuda") != NULL, "%s", err);
}
END_TEST

int main(void) {
  Suite *s = suite_create("train");
  TCase *tc = tcase_create("train");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, mlp_learns_and_reports_json_lines);
  tcase_add_test(tc, resume_after_epoch_equals_uninterrupted);
  tcase_add_test(tc, stop_mid_epoch_saves_and_resume_equals_uninterrupted);
  tcase_add_test(tc, diverged_exit_5_keeps_last_good_checkpoint);
  tcase_add_test(tc, corrupt_or_foreign_checkpoint_exit_4);
  tcase_add_test(tc, resume_under_another_split_exit_4);
  tcase_add_test(tc, missing_data_exit_3);
  tcase_add_test(tc, unusable_checkpoint_dir_exit_4_before_training);
  tcase_add_test(tc, split_too_small_is_bad_config);
  tcase_add_test(tc, drop_last_and_train_limit);
  tcase_add_test(tc, cifar10_cnn_runs_and_learns);
  tcase_add_test(tc, cuda_without_device_exit_7);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
