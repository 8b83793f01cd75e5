/* Fuzz target: the CIFAR-10 batch reader (trainer/data.c): n records of one
 * label byte + 3072 pixel bytes; every accepted record is read. */
#include <stdint.h>
#include <stdlib.h>

#include "data.h"

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  int64_t n = 0;
  if (data_parse_cifar(data, size, &n, err, sizeof err) == 0) {
    if (n < 0 || (uint64_t)n * 3073u > size) abort();
    unsigned s = 0;
    for (int64_t i = 0; i < n * 3073; i++) s += data[i];
    sink = s;
  }
  return 0;
}
