/* testhook: the named places where a test build lets a test bend the
 * program (a fault, a shorter delay, a forced decision), in the manner of
 * SQLite's sqlite3FaultSim sites. They exist only when the build defines
 * CTUNE_TESTHOOKS (cmake -DCTUNE_TESTHOOKS=ON: `make test` builds its own
 * variants so). In any other build TESTHOOK(site) is a constant NULL: the
 * site's code folds away, and the binary holds no CTUNE_TEST_ name.
 *
 * A test sets a site through the environment of the process it starts,
 * CTUNE_TEST_<NAME> (read once, at the first use of any site), or in-process
 * with testhook_set. HACKING.md lists the sites and what each value means. */
#ifndef CTUNE_TESTHOOK_H
#define CTUNE_TESTHOOK_H

enum testhook_site {
  TESTHOOK_FAULT,             /* store faults: "busy=N,delay_ms=MS,..." (store.h) */
  TESTHOOK_DECIDE,            /* a forced decision: "pause_at=T" | "exploit_at=..." (decide.c) */
  TESTHOOK_COMPACT_DELAY_MS,  /* an ended trial's history is compacted after MS */
  TESTHOOK_COLD_DELAY_MS,     /* a finished experiment goes cold after MS */
  TESTHOOK_HTTP_TIMEOUT_S,    /* the idle connection timeout */
  TESTHOOK_SSE_KEEPALIVE_S,   /* the event streams' keepalive period */
  TESTHOOK_SPOOL_FAULT,       /* upload spool files fail: "open=ERRNO" | "write=ERRNO" [@FILE] */
  TESTHOOK_OUTBOX_FAULT_FILE, /* while this file exists, outbox writes fail -ENOSPC */
  TESTHOOK_WORKER_TICK_MS,    /* the worker's housekeeping tick every MS, not 2000 */
  TESTHOOK_SUPERVISE_REPORT,  /* DIR: trial N's supervisor misbehaves as DIR/N says (execwrap.h) */
  TESTHOOK_WATCH_PAUSE_S,     /* the watch's pause between looks, not 1 s */
  TESTHOOK_COUNT
};

#ifdef CTUNE_TESTHOOKS
/* The site's value (NULL when unset or empty). */
const char *testhook_value(enum testhook_site site);
/* Sets (value) or clears (NULL) a site in this process. Not thread-safe
 * against a concurrent testhook_value of the same site: set before use. */
void testhook_set(enum testhook_site site, const char *value);
#define TESTHOOK(site) testhook_value(site)
#else
#define TESTHOOK(site) ((const char *)0)
#endif

#endif
