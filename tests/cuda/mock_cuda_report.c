/* Linked into the double's plugin (libctune-cuda-double.so) only: at exit,
 * writes the double's counters as one JSON line to $CTUNE_MOCK_COUNTS, so an
 * end-to-end test of ctune-train can see how often the trainer made the host
 * wait (test_train_fast.py). */
#include <stdio.h>
#include <stdlib.h>

#include "mock_cuda.h"

__attribute__((destructor)) static void mock_cuda_report(void) {
  const char *path = getenv("CTUNE_MOCK_COUNTS");
  if (!path || !*path) return;
  struct mock_cuda_counts c;
  mock_cuda_get_counts(&c);
  FILE *f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "{\"submits\": %ld, \"graph_launches\": %ld, \"syncs\": %ld}\n", c.submits,
          c.graph_launches, c.syncs);
  fclose(f);
}
