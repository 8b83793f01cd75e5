/* IDX and CIFAR-10 readers on tiny files the test writes, including
 * truncated, corrupt and missing ones. */
#include <check.h>
#include <errno.h>
#include <math.h>

#include "conv_avx2.h"
#include "data.h"
#include "test_util.h"

static char *dir;
static char err[1024];

static void setup(void) {
  dir = tu_mkdtemp();
  ck_assert_ptr_nonnull(dir);
  err[0] = 0;
}
static void teardown(void) {
  tu_rmtree(dir);
  dir = NULL;
}

START_TEST(idx_gz_roundtrip_and_normalisation) {
  ck_assert_int_eq(tu_write_idx_set(dir, 30, 10, 6, 5), 0);
  struct dataset d;
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 0, 0, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 30);
  ck_assert_int_eq(d.c, 1);
  ck_assert_int_eq(d.h, 6);
  ck_assert_int_eq(d.w, 5);
  for (int i = 0; i < 30; i++) ck_assert_int_eq(d.y[i], i % 10);
  /* recompute pixel 0 of image 0 and check (p/255 - 0.5)/0.5 */
  size_t len, llen;
  uint8_t *lab, *img = tu_idx_images(30, 6, 5, &len, &lab, &llen);
  /* pixels are kept as stored (uint8); a gathered batch is normalised */
  ck_assert_int_eq(memcmp(d.pix, img + 16, 30 * 30), 0);
  int32_t idx[3] = {4, 0, 29};
  float x[3 * 30];
  uint8_t y[3];
  data_gather(&d, idx, 3, x, y);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(y[i], idx[i] % 10);
    for (int k = 0; k < 30; k++)
      ck_assert(x[i * 30 + k] == ((img[16 + idx[i] * 30 + k] / 255.0f - 0.5f) / 0.5f));
  }
  free(img);
  free(lab);
  data_free(&d);
  ck_assert_int_eq(data_load(DATA_MNIST, dir, 1, 0, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 10);
  data_free(&d);
  /* limit keeps the first images */
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 0, 7, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 7);
  data_free(&d);
}
END_TEST

/* Every pixel value, 8 at a time on AVX2 CPUs and the last ones by the
 * table, and on a CPU without AVX2: the bits of (p / 255 - 0.5) / 0.5. */
START_TEST(normalise_every_pixel_value) {
  enum { N = 256 + 7 };
  uint8_t pix[N];
  float x[N];
  for (int i = 0; i < N; i++) pix[i] = (uint8_t)(i * 37 + 11);
  for (int hide = 0; hide < 2; hide++) {
    conv_avx2_hide_cpu(hide);
    memset(x, 0xff, sizeof(x));
    data_normalise(pix, N, x);
    for (int i = 0; i < N; i++) {
      const float want = (pix[i] / 255.0f - 0.5f) / 0.5f;
      ck_assert_msg(memcmp(&x[i], &want, sizeof(float)) == 0, "pixel %d (%d): %.9g, want %.9g", i,
                    pix[i], x[i], want);
    }
  }
  conv_avx2_hide_cpu(0);
}
END_TEST

START_TEST(idx_plain_files_accepted) {
  size_t len, llen;
  uint8_t *lab, *img = tu_idx_images(12, 4, 4, &len, &lab, &llen);
  ck_assert_int_eq(tu_write(dir, "train-images-idx3-ubyte", img, len, 0), 0);
  ck_assert_int_eq(tu_write(dir, "train-labels-idx1-ubyte", lab, llen, 0), 0);
  struct dataset d;
  ck_assert_int_eq(data_load(DATA_MNIST, dir, 0, 0, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 12);
  data_free(&d);
  free(img);
  free(lab);
}
END_TEST

START_TEST(idx_missing_file) {
  struct dataset d;
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 0, 0, &d, err, sizeof(err)), -ENOENT);
  ck_assert_msg(strstr(err, "train-images-idx3-ubyte") != NULL, "%s", err);
}
END_TEST

START_TEST(idx_parser_rejects_bad_buffers) {
  size_t len, llen;
  uint8_t *lab, *img = tu_idx_images(5, 4, 4, &len, &lab, &llen);
  int64_t n;
  int h, w;
  const uint8_t *p;
  ck_assert_int_eq(data_parse_idx_images(img, len, &n, &h, &w, &p, err, sizeof(err)), 0);
  ck_assert_int_eq(data_parse_idx_images(img, len - 1, &n, &h, &w, &p, err, sizeof(err)), -EINVAL);
  ck_assert(strstr(err, "truncated") != NULL);
  ck_assert_int_eq(data_parse_idx_images(img, 10, &n, &h, &w, &p, err, sizeof(err)), -EINVAL);
  img[3] = 0x01; /* label magic on an image file */
  ck_assert_int_eq(data_parse_idx_images(img, len, &n, &h, &w, &p, err, sizeof(err)), -EINVAL);
  ck_assert(strstr(err, "magic") != NULL);
  const uint8_t *l;
  ck_assert_int_eq(data_parse_idx_labels(lab, llen, &n, &l, err, sizeof(err)), 0);
  ck_assert_int_eq(data_parse_idx_labels(lab, llen - 2, &n, &l, err, sizeof(err)), -EINVAL);
  lab[8 + 2] = 11;
  ck_assert_int_eq(data_parse_idx_labels(lab, llen, &n, &l, err, sizeof(err)), -EINVAL);
  ck_assert(strstr(err, "label 2") != NULL);
  free(img);
  free(lab);
}
END_TEST

START_TEST(idx_truncated_gzip_is_an_error) {
  size_t len, llen;
  uint8_t *lab, *img = tu_idx_images(50, 8, 8, &len, &lab, &llen);
  ck_assert_int_eq(tu_write(dir, "train-images-idx3-ubyte.gz", img, len, 1), 0);
  ck_assert_int_eq(tu_write(dir, "train-labels-idx1-ubyte.gz", lab, llen, 1), 0);
  /* cut the gzip stream in half */
  char path[4096];
  snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", dir);
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  uint8_t buf[8192];
  size_t got = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  ck_assert_int_eq(tu_write(dir, "train-images-idx3-ubyte.gz", buf, got / 2, 0), 0);
  struct dataset d;
  int rc = data_load(DATA_FASHION_MNIST, dir, 0, 0, &d, err, sizeof(err));
  ck_assert_msg(rc == -EIO || rc == -EINVAL, "rc %d", rc);
  ck_assert_msg(strstr(err, "train-images-idx3-ubyte.gz") != NULL, "%s", err);
  ck_assert_ptr_null(d.pix);
  free(img);
  free(lab);
}
END_TEST

START_TEST(idx_count_mismatch) {
  size_t len, llen, len2, llen2;
  uint8_t *lab, *img = tu_idx_images(20, 4, 4, &len, &lab, &llen);
  uint8_t *lab2, *img2 = tu_idx_images(19, 4, 4, &len2, &lab2, &llen2);
  ck_assert_int_eq(tu_write(dir, "train-images-idx3-ubyte.gz", img, len, 1), 0);
  ck_assert_int_eq(tu_write(dir, "train-labels-idx1-ubyte.gz", lab2, llen2, 1), 0);
  struct dataset d;
  ck_assert_int_eq(data_load(DATA_FASHION_MNIST, dir, 0, 0, &d, err, sizeof(err)), -EINVAL);
  ck_assert(strstr(err, "20 images") != NULL);
  free(img);
  free(lab);
  free(img2);
  free(lab2);
}
END_TEST

static uint8_t *cifar(int n, size_t *len) {
  *len = (size_t)n * 3073;
  uint8_t *b = malloc(*len);
  for (int i = 0; i < n; i++) {
    b[i * 3073] = (uint8_t)(i % 10);
    for (int k = 0; k < 3072; k++) b[i * 3073 + 1 + k] = (uint8_t)((i + k) & 0xff);
  }
  return b;
}

START_TEST(cifar_batches) {
  size_t len;
  uint8_t *b = cifar(4, &len);
  char name[64];
  for (int i = 1; i <= 5; i++) {
    snprintf(name, sizeof(name), "data_batch_%d.bin", i);
    ck_assert_int_eq(tu_write(dir, name, b, len, 0), 0);
  }
  ck_assert_int_eq(tu_write(dir, "test_batch.bin", b, len, 0), 0);
  struct dataset d;
  ck_assert_int_eq(data_load(DATA_CIFAR10, dir, 0, 0, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 20);
  ck_assert_int_eq(d.c, 3);
  ck_assert_int_eq(d.h, 32);
  ck_assert_int_eq(d.y[5], 1);
  /* image 5 (batch 2, record 1), channel 0 pixel 3 = (1 + 3) & 0xff */
  ck_assert_int_eq(d.pix[5 * 3072 + 3], 4);
  int32_t five = 5;
  float x5[3072];
  uint8_t y5;
  data_gather(&d, &five, 1, x5, &y5);
  ck_assert(x5[3] == (4 / 255.0f - 0.5f) / 0.5f);
  ck_assert_int_eq(y5, 1);
  data_free(&d);
  ck_assert_int_eq(data_load(DATA_CIFAR10, dir, 0, 6, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 6);
  data_free(&d);
  ck_assert_int_eq(data_load(DATA_CIFAR10, dir, 1, 0, &d, err, sizeof(err)), 0);
  ck_assert_int_eq(d.n, 4);
  data_free(&d);
  /* truncated batch 3 */
  ck_assert_int_eq(tu_write(dir, "data_batch_3.bin", b, len - 100, 0), 0);
  ck_assert_int_eq(data_load(DATA_CIFAR10, dir, 0, 0, &d, err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, "data_batch_3.bin") && strstr(err, "truncated"), "%s", err);
  ck_assert_ptr_null(d.pix);
  /* bad label */
  b[3073] = 200;
  ck_assert_int_eq(tu_write(dir, "data_batch_3.bin", b, len, 0), 0);
  ck_assert_int_eq(data_load(DATA_CIFAR10, dir, 0, 0, &d, err, sizeof(err)), -EINVAL);
  ck_assert_msg(strstr(err, "label 200") != NULL, "%s", err);
  free(b);
}
END_TEST

START_TEST(cifar_missing) {
  struct dataset d;
  ck_assert_int_eq(data_load(DATA_CIFAR10, dir, 0, 0, &d, err, sizeof(err)), -ENOENT);
  ck_assert(strstr(err, "data_batch_1.bin") != NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("data");
  TCase *tc = tcase_create("data");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, idx_gz_roundtrip_and_normalisation);
  tcase_add_test(tc, normalise_every_pixel_value);
  tcase_add_test(tc, idx_plain_files_accepted);
  tcase_add_test(tc, idx_missing_file);
  tcase_add_test(tc, idx_parser_rejects_bad_buffers);
  tcase_add_test(tc, idx_truncated_gzip_is_an_error);
  tcase_add_test(tc, idx_count_mismatch);
  tcase_add_test(tc, cifar_batches);
  tcase_add_test(tc, cifar_missing);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
