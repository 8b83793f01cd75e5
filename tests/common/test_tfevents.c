/* tfevents: CRC32C and TFRecord's mask against known vectors (RFC 3720
 * B.4 and TensorBoard's own masked_crc32c), varints and protobuf fields
 * against the encoding guide's examples, and one record of a real file. */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tfevents.h"

START_TEST(crc32c_known_vectors) {
  uint8_t buf[32];
  ck_assert_uint_eq(tfev_crc32c(0, "123456789", 9), 0xE3069283u);
  memset(buf, 0, sizeof(buf));
  ck_assert_uint_eq(tfev_crc32c(0, buf, 32), 0x8A9136AAu);
  memset(buf, 0xff, sizeof(buf));
  ck_assert_uint_eq(tfev_crc32c(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
  ck_assert_uint_eq(tfev_crc32c(0, buf, 32), 0x46DD794Eu);
  /* continuing a CRC over a second piece equals one pass */
  ck_assert_uint_eq(tfev_crc32c(tfev_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
  ck_assert_uint_eq(tfev_crc32c(0, "", 0), 0u);
}
END_TEST

START_TEST(masked_crc_matches_tensorboard) {
  /* values of tensorboard...pywrap_tensorflow.masked_crc32c */
  ck_assert_uint_eq(tfev_mask_crc(tfev_crc32c(0, "", 0)), 0xa282ead8u);
  ck_assert_uint_eq(tfev_mask_crc(tfev_crc32c(0, "123456789", 9)), 0xc78ab0e5u);
  const uint8_t len25[8] = {25, 0, 0, 0, 0, 0, 0, 0};
  ck_assert_uint_eq(tfev_mask_crc(tfev_crc32c(0, len25, 8)), 0x2808f18bu);
}
END_TEST

static void expect_varint(uint64_t v, const char *hex) {
  uint8_t out[10];
  char got[32] = "";
  size_t n = tfev_varint(v, out);
  for (size_t i = 0; i < n; i++) sprintf(got + 2 * i, "%02x", out[i]);
  ck_assert_msg(!strcmp(got, hex), "varint %llu: %s, wanted %s", (unsigned long long)v, got, hex);
}

START_TEST(varints) {
  expect_varint(0, "00");
  expect_varint(1, "01");
  expect_varint(127, "7f");
  expect_varint(128, "8001");
  expect_varint(150, "9601");
  expect_varint(300, "ac02");
  expect_varint(16384, "808001");
  expect_varint(UINT32_MAX, "ffffffff0f");
  /* int64 -1 (a negative step) takes all ten bytes */
  expect_varint((uint64_t)-1, "ffffffffffffffffff01");
}
END_TEST

static void expect_buf(const struct sbuf *b, const char *hex) {
  char got[256] = "";
  ck_assert_int_eq(b->err, 0);
  ck_assert_uint_lt(b->len, sizeof(got) / 2);
  for (size_t i = 0; i < b->len; i++) sprintf(got + 2 * i, "%02x", (unsigned char)b->buf[i]);
  ck_assert_msg(!strcmp(got, hex), "encoded %s, wanted %s", got, hex);
}

START_TEST(protobuf_fields) {
  struct sbuf b, inner;
  sbuf_init(&b);
  sbuf_init(&inner);
  tfev_put_varint_field(&b, 1, 150); /* the encoding guide's Test1 */
  expect_buf(&b, "089601");
  sbuf_reset(&b);
  tfev_put_string(&b, 2, "testing"); /* Test2 */
  expect_buf(&b, "120774657374696e67");
  sbuf_reset(&b);
  tfev_put_varint_field(&inner, 1, 150); /* Test3: a nested message */
  tfev_put_msg(&b, 3, &inner);
  expect_buf(&b, "1a03089601");
  sbuf_reset(&b);
  tfev_put_float(&b, 2, 1.0f); /* fixed32, little endian */
  expect_buf(&b, "150000803f");
  sbuf_reset(&b);
  tfev_put_double(&b, 1, 1.0); /* fixed64 */
  expect_buf(&b, "09000000000000f03f");
  sbuf_reset(&b);
  const double two[] = {1.0, -2.0};
  tfev_put_packed_doubles(&b, 6, two, 2); /* packed: one length, no keys */
  expect_buf(&b, "3210000000000000f03f00000000000000c0");
  sbuf_reset(&b);
  tfev_put_varint_field(&b, 16, 1); /* field numbers past 15 take two bytes */
  expect_buf(&b, "800101");
  sbuf_free(&b);
  sbuf_free(&inner);
}
END_TEST

START_TEST(file_holds_framed_records) {
  char dir[] = "/tmp/ctune-tfevents-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char sub[128];
  snprintf(sub, sizeof(sub), "%s/a/b", dir); /* parents are created */
  struct tfev_writer *w = NULL;
  ck_assert_int_eq(tfev_open(&w, sub, 1700000000.5), 0);
  ck_assert_int_eq(tfev_write_scalar(w, 1700000001.0, 7, "loss", 0.25f), 0);
  char path[512];
  snprintf(path, sizeof(path), "%s", tfev_path(w));
  ck_assert_ptr_nonnull(strstr(path, "/events.out.tfevents.1700000000."));
  ck_assert_int_eq(tfev_close(w), 0);

  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  uint8_t data[4096];
  size_t n = fread(data, 1, sizeof(data), f);
  fclose(f);
  size_t off = 0;
  int records = 0;
  while (off < n) {
    ck_assert_uint_ge(n - off, 16);
    uint64_t len = 0;
    for (int i = 0; i < 8; i++) len |= (uint64_t)data[off + i] << (8 * i);
    uint32_t hcrc = 0, dcrc = 0;
    for (int i = 0; i < 4; i++) hcrc |= (uint32_t)data[off + 8 + i] << (8 * i);
    ck_assert_uint_eq(hcrc, tfev_mask_crc(tfev_crc32c(0, data + off, 8)));
    ck_assert_uint_le(off + 12 + len + 4, n);
    for (int i = 0; i < 4; i++) dcrc |= (uint32_t)data[off + 12 + len + i] << (8 * i);
    ck_assert_uint_eq(dcrc, tfev_mask_crc(tfev_crc32c(0, data + off + 12, len)));
    const uint8_t *ev = data + off + 12;
    ck_assert_uint_eq(ev[0], 0x09); /* wall_time = 1, fixed64 */
    if (records == 0) {
      /* Event.file_version = 3 right after wall_time (step 0 is omitted) */
      ck_assert_uint_eq(len, 9 + 2 + 13);
      ck_assert_uint_eq(ev[9], 0x1a);
      ck_assert_uint_eq(ev[10], 13);
      ck_assert(!memcmp(ev + 11, "brain.Event:2", 13));
    } else {
      ck_assert_uint_eq(ev[9], 0x10); /* step = 2, varint */
      ck_assert_uint_eq(ev[10], 7);
      ck_assert_uint_eq(ev[11], 0x2a); /* summary = 5 */
    }
    off += 12 + len + 4;
    records++;
  }
  ck_assert_int_eq(records, 2);
  unlink(path);
  rmdir(sub);
  snprintf(sub, sizeof(sub), "%s/a", dir);
  rmdir(sub);
  rmdir(dir);
}
END_TEST

START_TEST(open_refuses_a_file_as_folder) {
  char path[] = "/tmp/ctune-tfevents-file-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  struct tfev_writer *w = NULL;
  ck_assert_int_lt(tfev_open(&w, path, 1.0), 0);
  ck_assert_ptr_null(w);
  unlink(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tfevents");
  TCase *tc = tcase_create("encode");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, crc32c_known_vectors);
  tcase_add_test(tc, masked_crc_matches_tensorboard);
  tcase_add_test(tc, varints);
  tcase_add_test(tc, protobuf_fields);
  tcase_add_test(tc, file_holds_framed_records);
  tcase_add_test(tc, open_refuses_a_file_as_folder);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
