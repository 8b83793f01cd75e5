/* Fuzz target: the checkpoint reader (trainer/checkpoint.c). The CRC-32 at
 * the end would stop almost every mutation at the checksum, so the target
 * decodes the input twice: as it is, and with its last four bytes replaced
 * by the right CRC, which lets the fuzzer reach the header and size checks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "checkpoint.h"

static volatile float sink;

static void decode(const uint8_t *buf, size_t len) {
  struct ckpt c;
  char err[256];
  if (ckpt_decode(buf, len, &c, err, sizeof err) != 0) return;
  if (c.n_train < 0 || c.n_params < 0 || c.n_state < 0) abort();
  float s = 0;
  for (int64_t i = 0; i < c.n_train; i++) s += (float)c.perm[i];
  for (int64_t i = 0; i < c.n_params; i++) s += c.params[i];
  for (int64_t i = 0; i < c.n_state; i++) s += c.state[i];
  sink = s;
  ckpt_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  decode(data, size);
  if (size < 4) return 0;
  uint8_t *fixed = malloc(size);
  if (!fixed) return 0;
  memcpy(fixed, data, size);
  uint32_t crc = (uint32_t)crc32(0L, fixed, (uInt)(size - 4));
  memcpy(fixed + size - 4, &crc, 4);
  decode(fixed, size);
  free(fixed);
  return 0;
}
