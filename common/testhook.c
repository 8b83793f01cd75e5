/* testhook: the test-build sites' values (testhook.h). Empty unless the
 * build defines CTUNE_TESTHOOKS. */
#include "testhook.h"

#ifdef CTUNE_TESTHOOKS
#include <pthread.h>
#include <stdlib.h>

static const char *const testhook_env[TESTHOOK_COUNT] = {
    [TESTHOOK_FAULT] = "CTUNE_TEST_FAULT",
    [TESTHOOK_DECIDE] = "CTUNE_TEST_DECIDE",
    [TESTHOOK_COMPACT_DELAY_MS] = "CTUNE_TEST_COMPACT_DELAY_MS",
    [TESTHOOK_COLD_DELAY_MS] = "CTUNE_TEST_COLD_DELAY_MS",
    [TESTHOOK_HTTP_TIMEOUT_S] = "CTUNE_TEST_HTTP_TIMEOUT_S",
    [TESTHOOK_SSE_KEEPALIVE_S] = "CTUNE_TEST_SSE_KEEPALIVE_S",
    [TESTHOOK_SPOOL_FAULT] = "CTUNE_TEST_SPOOL_FAULT",
    [TESTHOOK_OUTBOX_FAULT_FILE] = "CTUNE_TEST_OUTBOX_FAULT_FILE",
    [TESTHOOK_WORKER_TICK_MS] = "CTUNE_TEST_WORKER_TICK_MS",
    [TESTHOOK_SUPERVISE_REPORT] = "CTUNE_TEST_SUPERVISE_REPORT",
    [TESTHOOK_WATCH_PAUSE_S] = "CTUNE_TEST_WATCH_PAUSE_S",
};

static const char *testhook_values[TESTHOOK_COUNT];
static pthread_once_t testhook_once = PTHREAD_ONCE_INIT;

/* Once, so that a hot path (one site is on every result) reads an array, not
 * the environment. */
static void testhook_load(void) {
  for (int i = 0; i < TESTHOOK_COUNT; i++) {
    const char *v = getenv(testhook_env[i]);
    testhook_values[i] = v && *v ? v : NULL;
  }
}

const char *testhook_value(enum testhook_site site) {
  pthread_once(&testhook_once, testhook_load);
  return site >= 0 && site < TESTHOOK_COUNT ? testhook_values[site] : NULL;
}

void testhook_set(enum testhook_site site, const char *value) {
  pthread_once(&testhook_once, testhook_load);
  if (site >= 0 && site < TESTHOOK_COUNT) testhook_values[site] = value && *value ? value : NULL;
}
#endif
