/* The decoded-data cache: built once and then mapped without reading the
 * source files (counted by data_source_reads), rebuilt when the source
 * changes or the cache file is bad in any way, built once by concurrent
 * trials (real processes), never used from a directory others can write,
 * and training on it gives the very same losses as training without it. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "backend.h"
#include "config.h"
#include "data.h"
#include "datacache.h"
#include "test_util.h"
#include "train.h"

static char *dir, cdir[4200], cpath[8400];
static char err[1024];
static uint8_t *ref_pix, *ref_y;
static int64_t ref_n;

#define N_TRAIN 60
#define H 6
#define W 5

/* The split as the parser gives it: what every cache read must equal. */
static void load_reference(void) {
  struct dataset d;
  ck_assert_int_eq(data_parse_split(DATA_FASHION_MNIST, dir, 0, 0, &d, err, sizeof(err)), 0);
  free(ref_pix);
  free(ref_y);
  ref_n = d.n;
  ref_pix = malloc((size_t)(d.n * H * W));
  ref_y = malloc((size_t)d.n);
  ck_assert(ref_pix && ref_y);
  memcpy(ref_pix, d.pix, (size_t)(d.n * H * W));
  memcpy(ref_y, d.y, (size_t)d.n);
  data_free(&d);
}

static void setup(void) {
  dir = tu_mkdtemp();
  ck_assert_ptr_nonnull(dir);
  ck_assert_int_eq(tu_write_idx_set(dir, N_TRAIN, 20, H, W), 0);
  snprintf(cdir, sizeof(cdir), "%s/cache", dir);
  datacache_set_dir(cdir);
  datacache_test_build_delay_ms = 0;
  err[0] = 0;
  load_reference();
  ck_assert_int_eq(
      datacache_path(cdir, DATA_FASHION_MNIST, dir, 0, cpath, sizeof(cpath), err, sizeof(err)), 0);
}
static void teardown(void) {
  datacache_set_dir(NULL);
  tu_rmtree(dir);
  free(ref_pix);
  free(ref_y);
  ref_pix = ref_y = NULL;
}

/* Loads through the cache; returns how many source files that read. */
static long load(struct dataset *d, int64_t limit) {
  long before = data_source_reads();
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 0, limit, d, err, sizeof(err)), 0);
  return data_source_reads() - before;
}

static void assert_reference(const struct dataset *d, int64_t n) {
  ck_assert_int_eq(d->n, n);
  ck_assert_int_eq(d->c, 1);
  ck_assert_int_eq(d->h, H);
  ck_assert_int_eq(d->w, W);
  ck_assert_int_eq(d->n_classes, 10);
  ck_assert_int_eq(memcmp(d->pix, ref_pix, (size_t)(n * H * W)), 0);
  ck_assert_int_eq(memcmp(d->y, ref_y, (size_t)n), 0);
}

/* Files in the cache directory whose name contains part. */
static int count_files(const char *part) {
  DIR *d = opendir(cdir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, part)) n++;
  closedir(d);
  return n;
}

START_TEST(built_once_then_mapped_without_parsing) {
  struct dataset d;
  ck_assert_int_eq(load(&d, 0), 2); /* images and labels, once */
  ck_assert_ptr_nonnull(d.map);
  assert_reference(&d, ref_n);
  data_free(&d);
  ck_assert_ptr_null(d.pix);
  struct stat st;
  ck_assert_int_eq(stat(cdir, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  ck_assert_int_eq(stat(cpath, &st), 0);
  ck_assert_int_eq(count_files(".tmp."), 0);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(load(&d, 0), 0); /* mapped: no source file read */
    ck_assert_ptr_nonnull(d.map);
    assert_reference(&d, ref_n);
    data_free(&d);
  }
  /* the limit keeps the first images of the mapped file */
  ck_assert_int_eq(load(&d, 7), 0);
  assert_reference(&d, 7);
  data_free(&d);
  /* the test split has a file of its own */
  long before = data_source_reads();
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 1, 0, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 20);
  data_free(&d);
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 1, 0, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(data_source_reads() - before, 2);
  data_free(&d);
  ck_assert_int_eq(count_files(".cache"), 4); /* 2 files + 2 lock files */
}
END_TEST

START_TEST(first_build_with_a_limit_caches_the_whole_split) {
  struct dataset d;
  ck_assert_int_eq(load(&d, 5), 2);
  assert_reference(&d, 5);
  data_free(&d);
  ck_assert_int_eq(load(&d, 0), 0);
  assert_reference(&d, ref_n);
  data_free(&d);
}
END_TEST

START_TEST(changed_source_rebuilds) {
  struct dataset d;
  ck_assert_int_eq(load(&d, 0), 2);
  data_free(&d);
  /* a new train set (other size, so other pixels) under the same names */
  ck_assert_int_eq(tu_write_idx_set(dir, N_TRAIN + 10, 20, H, W), 0);
  load_reference();
  ck_assert_int_eq(ref_n, N_TRAIN + 10);
  ck_assert_int_eq(load(&d, 0), 2);
  assert_reference(&d, ref_n);
  data_free(&d);
  ck_assert_int_eq(load(&d, 0), 0);
  data_free(&d);
  /* only touched (same bytes, new mtime): stale as well */
  char p[8300];
  snprintf(p, sizeof(p), "%s/train-labels-idx1-ubyte.gz", dir);
  struct timespec ts[2] = {{0, UTIME_NOW}, {12345, 0}};
  ck_assert_int_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
  ck_assert_int_eq(load(&d, 0), 2);
  assert_reference(&d, ref_n);
  data_free(&d);
  /* the stale file was replaced, not left beside the new one */
  ck_assert_int_eq(count_files(".cache"), 2);
}
END_TEST

/* Rewrites the cache file through f, then checks that the next load warns
 * (we only see its effect), rebuilds from the source and gives the right
 * data, and that the rebuilt file is then used as it is. */
static void corrupt_and_check(void (*f)(int fd, off_t size)) {
  struct dataset d;
  ck_assert_int_eq(load(&d, 0), 2);
  data_free(&d);
  int fd = open(cpath, O_RDWR);
  ck_assert_int_ge(fd, 0);
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  f(fd, st.st_size);
  close(fd);
  ck_assert_int_eq(load(&d, 0), 2);
  assert_reference(&d, ref_n);
  data_free(&d);
  ck_assert_int_eq(load(&d, 0), 0);
  assert_reference(&d, ref_n);
  data_free(&d);
}

static void flip_at(int fd, off_t at) {
  uint8_t b;
  ck_assert_int_eq(pread(fd, &b, 1, at), 1);
  b ^= 0x40;
  ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
}
static void flip_pixel(int fd, off_t size) { flip_at(fd, size - N_TRAIN - 3); }
static void flip_label(int fd, off_t size) { flip_at(fd, size - 2); }
static void flip_magic(int fd, off_t size) {
  (void)size;
  flip_at(fd, 0);
}
static void flip_version(int fd, off_t size) {
  (void)size;
  flip_at(fd, 8);
}
static void flip_header_count(int fd, off_t size) {
  (void)size;
  flip_at(fd, 40); /* n */
}
static void flip_identity(int fd, off_t size) {
  (void)size;
  flip_at(fd, 100);
}
static void truncate_data(int fd, off_t size) { ck_assert_int_eq(ftruncate(fd, size - 1), 0); }
static void truncate_header(int fd, off_t size) {
  (void)size;
  ck_assert_int_eq(ftruncate(fd, 30), 0);
}
static void empty_file(int fd, off_t size) {
  (void)size;
  ck_assert_int_eq(ftruncate(fd, 0), 0);
}
static void garbage(int fd, off_t size) {
  uint8_t junk[4096];
  for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (uint8_t)(i * 131 + 7);
  for (off_t o = 0; o < size; o += (off_t)sizeof(junk))
    ck_assert_int_ge(pwrite(fd, junk, sizeof(junk), o), 1);
}

START_TEST(corrupt_cache_files_are_rebuilt) {
  void (*const fs[])(int, off_t) = {
      flip_pixel,    flip_label,    flip_magic,      flip_version, flip_header_count,
      flip_identity, truncate_data, truncate_header, empty_file,   garbage};
  for (size_t i = 0; i < sizeof(fs) / sizeof(fs[0]); i++) {
    unlink(cpath);
    corrupt_and_check(fs[i]);
  }
  /* a directory where the cache file should be: parsed, never a crash */
  unlink(cpath);
  ck_assert_int_eq(mkdir(cpath, 0700), 0);
  struct dataset d;
  ck_assert_int_eq(load(&d, 0), 2);
  ck_assert_ptr_null(d.map);
  assert_reference(&d, ref_n);
  data_free(&d);
  rmdir(cpath);
}
END_TEST

START_TEST(concurrent_builders_build_one_file) {
  /* the builder holds the lock a while: the others must wait for it */
  datacache_test_build_delay_ms = 300;
  enum { K = 4 };
  pid_t pids[K];
  int fds[K][2];
  for (int k = 0; k < K; k++) {
    ck_assert_int_eq(pipe(fds[k]), 0);
    pids[k] = fork();
    ck_assert_int_ge(pids[k], 0);
    if (pids[k] == 0) {
      struct dataset d;
      long before = data_source_reads();
      int ok = data_load(DATA_FASHION_MNIST, dir, 0, 0, &d, err, sizeof(err)) == 0 && d.map &&
               d.n == ref_n && memcmp(d.pix, ref_pix, (size_t)(ref_n * H * W)) == 0 &&
               memcmp(d.y, ref_y, (size_t)ref_n) == 0;
      long reads = data_source_reads() - before;
      char msg[32];
      int len = snprintf(msg, sizeof(msg), "%d %ld", ok, reads);
      ssize_t w = write(fds[k][1], msg, (size_t)len);
      _exit(w == len ? 0 : 1);
    }
    close(fds[k][1]);
  }
  long total = 0;
  for (int k = 0; k < K; k++) {
    int status;
    ck_assert_int_eq(waitpid(pids[k], &status, 0), pids[k]);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char msg[32] = "";
    ck_assert_int_gt(read(fds[k][0], msg, sizeof(msg) - 1), 0);
    close(fds[k][0]);
    int ok = 0;
    long reads = -1;
    ck_assert_int_eq(sscanf(msg, "%d %ld", &ok, &reads), 2);
    ck_assert_msg(ok, "trial %d got wrong data", k);
    total += reads;
  }
  ck_assert_int_eq(total, 2); /* one trial parsed; three mapped its file */
  ck_assert_int_eq(count_files(".cache"), 2);
  ck_assert_int_eq(count_files(".tmp."), 0);
}
END_TEST

START_TEST(leftover_temp_file_is_removed) {
  char tmp[8500];
  snprintf(tmp, sizeof(tmp), "%s.tmp.99999999", cpath);
  ck_assert_int_eq(mkdir(cdir, 0700), 0);
  ck_assert_int_eq(tu_write(cdir, strrchr(tmp, '/') + 1, "x", 1, 0), 0);
  struct dataset d;
  ck_assert_int_eq(load(&d, 0), 2);
  data_free(&d);
  ck_assert_int_eq(count_files(".tmp."), 0);
}
END_TEST

START_TEST(untrusted_or_unusable_dir_falls_back_to_parsing) {
  struct dataset d;
  /* writable by others: someone could swap the file */
  ck_assert_int_eq(mkdir(cdir, 0700), 0);
  ck_assert_int_eq(chmod(cdir, 0777), 0);
  ck_assert_int_eq(load(&d, 0), 2);
  ck_assert_ptr_null(d.map);
  assert_reference(&d, ref_n);
  data_free(&d);
  ck_assert_int_eq(count_files(".cache"), 0);
  rmdir(cdir);
  /* a file where the directory should be */
  ck_assert_int_eq(tu_write(dir, "cache", "x", 1, 0), 0);
  ck_assert_int_eq(load(&d, 0), 2);
  ck_assert_ptr_null(d.map);
  assert_reference(&d, ref_n);
  data_free(&d);
}
END_TEST

START_TEST(missing_source_same_error_as_without_cache) {
  char p[8300], e1[1024], e2[1024];
  snprintf(p, sizeof(p), "%s/train-labels-idx1-ubyte.gz", dir);
  ck_assert_int_eq(unlink(p), 0);
  struct dataset d;
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 0, 0, &d, e1, sizeof(e1)), -ENOENT);
  datacache_set_dir(NULL);
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 0, 0, &d, e2, sizeof(e2)), -ENOENT);
  ck_assert_str_eq(e1, e2);
}
END_TEST

START_TEST(take_flag_removes_the_option) {
  char *argv[] = {"ctune-train", "--epochs", "1", "--data-cache", "/x", "--data-cache=/y",
                  "--lr",        "0.1",      NULL};
  int argc = 8;
  ck_assert_int_eq(datacache_take_flag(&argc, argv, err, sizeof(err)), 0);
  ck_assert_int_eq(argc, 5);
  ck_assert_str_eq(argv[3], "--lr");
  ck_assert_ptr_null(argv[5]);
  ck_assert_str_eq(datacache_dir(), "/y");
  char *miss[] = {"ctune-train", "--data-cache", NULL};
  argc = 2;
  ck_assert_int_eq(datacache_take_flag(&argc, miss, err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, "missing value") != NULL, "%s", err);
  char *empty[] = {"ctune-train", "--data-cache=", NULL};
  argc = 2;
  ck_assert_int_eq(datacache_take_flag(&argc, empty, err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, "empty path") != NULL, "%s", err);
}
END_TEST

/* --- training: the same losses with and without the cache --- */

static volatile sig_atomic_t stop;

static char *train_out(const struct train_config *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  int code = train_run(c, &stop, f, err, sizeof(err));
  fclose(f);
  ck_assert_msg(code == 0, "train_run: %d %s", code, err);
  /* drop the timing fields, which differ from run to run */
  const char *keys[] = {"\"time_this_iter_s\"", "\"time_total_s\"", "\"samples_per_s\""};
  for (int k = 0; k < 3; k++)
    for (char *p = strstr(buf, keys[k]); p; p = strstr(buf, keys[k])) {
      char *e = p;
      while (*e && *e != ',' && *e != '}') e++;
      if (*e == ',') e += 2;
      memmove(p, e, strlen(e) + 1);
    }
  return buf;
}

START_TEST(same_losses_with_and_without_cache) {
  ck_assert_int_eq(tu_write_idx_set(dir, 300, 50, 28, 28), 0);
  struct train_config c;
  config_defaults(&c);
  c.data_dir = dir;
  c.epochs = 2;
  c.batch_size = 16;
  c.l1 = 16;
  c.l2 = 8;
  c.seed = 11;
  c.test = 1;
  c.model = MODEL_MLP;
  datacache_set_dir(NULL);
  char *plain = train_out(&c);
  datacache_set_dir(cdir);
  long before = data_source_reads();
  char *built = train_out(&c);
  ck_assert_int_eq(data_source_reads() - before, 4); /* train and test */
  char *mapped = train_out(&c);
  ck_assert_int_eq(data_source_reads() - before, 4); /* nothing more */
  ck_assert_str_eq(built, plain);
  ck_assert_str_eq(mapped, plain);
  ck_assert(strstr(plain, "\"loss\"") != NULL);
  free(plain);
  free(built);
  free(mapped);
}
END_TEST

START_TEST(checksum_sees_every_byte) {
  uint8_t b[100];
  for (int i = 0; i < 100; i++) b[i] = (uint8_t)i;
  uint64_t s = datacache_sum(0, b, sizeof(b));
  for (int i = 0; i < 100; i++) {
    b[i] ^= 1;
    ck_assert(datacache_sum(0, b, sizeof(b)) != s);
    b[i] ^= 1;
  }
  ck_assert(datacache_sum(0, b, 99) != s);
  ck_assert(datacache_sum(1, b, 100) != s);
}
END_TEST

/* The data's checksum: the SSE2 path equals the plain-C reference at every
 * length around the 1 KB block and its 64-byte stripes. */
START_TEST(wide_checksum_matches_reference) {
  enum { LEN = 5 * 1024 + 100 };
  uint8_t *b = malloc(LEN);
  ck_assert_ptr_nonnull(b);
  uint64_t x = 1;
  for (int i = 0; i < LEN; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b[i] = (uint8_t)(x >> 56);
  }
  const size_t lens[] = {0, 1, 63, 64, 1023, 1024, 1025, 2048, 3000, LEN};
  for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
    for (uint64_t seed = 0; seed < 3; seed++)
      ck_assert_uint_eq(datacache_wide_sum(seed, b, lens[i]),
                        datacache_wide_sum_ref(seed, b, lens[i]));
  free(b);
}
END_TEST

/* ... and it sees every byte, the length, the seed, and data moved within
 * a block or between blocks (sums of words alone would not). */
START_TEST(wide_checksum_sees_every_byte_and_order) {
  enum { LEN = 3 * 1024 + 50 };
  uint8_t *b = malloc(LEN), tmp[1024];
  ck_assert_ptr_nonnull(b);
  for (int i = 0; i < LEN; i++) b[i] = (uint8_t)(i * 7 + (i >> 8));
  const uint64_t s = datacache_wide_sum(0, b, LEN);
  for (int i = 0; i < LEN; i++) {
    b[i] ^= 1;
    ck_assert(datacache_wide_sum(0, b, LEN) != s);
    b[i] ^= 1;
  }
  ck_assert(datacache_wide_sum(0, b, LEN - 1) != s);
  ck_assert(datacache_wide_sum(1, b, LEN) != s);
  /* swap stripes 0 and 1 of block 0 (64 bytes each) */
  memcpy(tmp, b, 64);
  memcpy(b, b + 64, 64);
  memcpy(b + 64, tmp, 64);
  ck_assert(datacache_wide_sum(0, b, LEN) != s);
  memcpy(b + 64, b, 64);
  memcpy(b, tmp, 64);
  ck_assert_uint_eq(datacache_wide_sum(0, b, LEN), s);
  /* swap blocks 0 and 1 */
  memcpy(tmp, b, 1024);
  memcpy(b, b + 1024, 1024);
  memcpy(b + 1024, tmp, 1024);
  ck_assert(datacache_wide_sum(0, b, LEN) != s);
  free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("datacache");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, built_once_then_mapped_without_parsing);
  tcase_add_test(tc, first_build_with_a_limit_caches_the_whole_split);
  tcase_add_test(tc, changed_source_rebuilds);
  tcase_add_test(tc, corrupt_cache_files_are_rebuilt);
  tcase_add_test(tc, concurrent_builders_build_one_file);
  tcase_add_test(tc, leftover_temp_file_is_removed);
  tcase_add_test(tc, untrusted_or_unusable_dir_falls_back_to_parsing);
  tcase_add_test(tc, missing_source_same_error_as_without_cache);
  tcase_add_test(tc, take_flag_removes_the_option);
  tcase_add_test(tc, same_losses_with_and_without_cache);
  tcase_add_test(tc, checksum_sees_every_byte);
  tcase_add_test(tc, wide_checksum_matches_reference);
  tcase_add_test(tc, wide_checksum_sees_every_byte_and_order);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
