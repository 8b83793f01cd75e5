/* Fuzz target: the IDX readers (trainer/data.c) for MNIST / Fashion-MNIST
 * images and labels. Whatever they accept is read to its last byte, so a
 * header that promises more than the buffer holds shows as an overflow. */
#include <stdint.h>
#include <stdlib.h>

#include "data.h"

static volatile unsigned sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  int64_t n = 0;
  int h = 0, w = 0;
  const uint8_t *px = NULL;
  if (data_parse_idx_images(data, size, &n, &h, &w, &px, err, sizeof err) == 0) {
    if (n < 0 || h <= 0 || w <= 0) abort();
    size_t total = (size_t)n * (size_t)h * (size_t)w;
    if (total && (px < data || px + total > data + size)) abort();
    unsigned s = 0;
    for (size_t i = 0; i < total; i++) s += px[i];
    sink = s;
  }
  const uint8_t *labels = NULL;
  if (data_parse_idx_labels(data, size, &n, &labels, err, sizeof err) == 0) {
    if (n < 0 || (n && (labels < data || labels + n > data + size))) abort();
    unsigned s = 0;
    for (int64_t i = 0; i < n; i++) s += labels[i];
    sink = s;
  }
  return 0;
}
