/* store_logs: see store_logs.h. */
#include "store_logs.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK '\x1e'

struct section {
  int attempt; /* 0: a row from before attempts were kept */
  int64_t worker;
  int rank; /* a gang trial's member; 0: rank 0 or a trial of one process */
  const char *body;
  size_t len;
};

/* Splits row into at most max sections (the last max when there are more);
 * returns how many. */
static size_t store_logs_split(const char *row, size_t len, struct section *out, size_t max) {
  size_t n = 0, i = 0;
  if (!row || !len) return 0;
  if (row[0] != MARK) { /* an older row: one section of unknown attempt */
    const char *m = memchr(row, MARK, len);
    out[n++] = (struct section){0, 0, 0, row, m ? (size_t)(m - row) : len};
    i = out[0].len;
  }
  while (i < len) {
    /* row[i] is the marker: "<attempt> <worker>\n" follows. */
    const char *nl = memchr(row + i, '\n', len - i);
    if (!nl) break;
    struct section s = {0, 0, 0, nl + 1, 0};
    char head[64];
    size_t hl = (size_t)(nl - (row + i + 1));
    snprintf(head, sizeof head, "%.*s", (int)(hl < sizeof head ? hl : sizeof head - 1),
             row + i + 1);
    int k = sscanf(head, "%d %" SCNd64 " %d", &s.attempt, &s.worker, &s.rank);
    if (k < 2) s.attempt = s.worker = 0;
    if (k < 3 || s.rank < 0) s.rank = 0;
    const char *end = memchr(s.body, MARK, len - (size_t)(s.body - row));
    s.len = end ? (size_t)(end - s.body) : len - (size_t)(s.body - row);
    i = (size_t)(s.body - row) + s.len;
    if (n == max) {
      memmove(out, out + 1, (max - 1) * sizeof *out);
      n--;
    }
    out[n++] = s;
  }
  return n;
}

/* A section's header line. */
static size_t store_logs_head(char *buf, size_t cap, int attempt, int64_t worker, int rank) {
  int k = rank ? snprintf(buf, cap, "%c%d %" PRId64 " %d\n", MARK, attempt, worker, rank)
               : snprintf(buf, cap, "%c%d %" PRId64 "\n", MARK, attempt, worker);
  return k > 0 ? (size_t)k : 0;
}

int store_logs_merge(const char *old, size_t oldlen, int attempt, int64_t worker_id, int rank,
                     const char *text, size_t len, char **out, size_t *outlen) {
  struct section sec[STORE_LOGS_MAX_SECTIONS];
  size_t n = store_logs_split(old, oldlen, sec, sizeof sec / sizeof sec[0]);
  /* Earlier attempts stay; this attempt's section (an earlier upload of
   * it) is replaced. A row from before attempts were kept is attempt 1's
   * when this is attempt 1. */
  size_t keep = 0, first = 0, bytes = 0;
  for (size_t i = 0; i < n; i++)
    if ((sec[i].attempt < attempt && !(sec[i].attempt == 0 && attempt <= 1)) ||
        (sec[i].attempt == attempt && sec[i].rank != rank))
      sec[keep++] = sec[i];
  /* The bound: the newest earlier attempts that fit (a gang's members of
   * one attempt are one attempt). */
  int attempts = 0, last = -1;
  for (size_t i = keep; i-- > 0;) {
    if (sec[i].attempt < attempt && sec[i].attempt != last) {
      attempts++;
      last = sec[i].attempt;
    }
    if (attempts > STORE_LOGS_MAX_ATTEMPTS || bytes + sec[i].len > STORE_LOGS_KEEP) {
      first = i + 1;
      break;
    }
    bytes += sec[i].len;
  }
  size_t cap = bytes + len + (keep - first + 1) * 64 + 1;
  char *buf = malloc(cap);
  if (!buf) return -ENOMEM;
  size_t u = 0;
  for (size_t i = first; i < keep; i++) {
    u += store_logs_head(buf + u, cap - u, sec[i].attempt, sec[i].worker, sec[i].rank);
    memcpy(buf + u, sec[i].body, sec[i].len);
    u += sec[i].len;
  }
  u += store_logs_head(buf + u, cap - u, attempt, worker_id, rank);
  for (size_t i = 0; i < len; i++) buf[u++] = text[i] == MARK ? '?' : text[i];
  buf[u] = 0;
  *out = buf;
  *outlen = u;
  return 0;
}

int store_logs_render(const char *row, size_t len, char **out, size_t *outlen) {
  struct section sec[STORE_LOGS_MAX_SECTIONS];
  size_t n = store_logs_split(row, len, sec, sizeof sec / sizeof sec[0]);
  size_t cap = len + n * 80 + 1;
  char *buf = malloc(cap);
  if (!buf) return -ENOMEM;
  size_t u = 0;
  for (size_t i = 0; i < n; i++) {
    if (n > 1) {
      if (u && buf[u - 1] != '\n') buf[u++] = '\n';
      if (sec[i].attempt && sec[i].rank)
        u += (size_t)snprintf(buf + u, cap - u, "--- attempt %d rank %d (worker %" PRId64 ") ---\n",
                              sec[i].attempt, sec[i].rank, sec[i].worker);
      else if (sec[i].attempt)
        u += (size_t)snprintf(buf + u, cap - u, "--- attempt %d (worker %" PRId64 ") ---\n",
                              sec[i].attempt, sec[i].worker);
      else
        u += (size_t)snprintf(buf + u, cap - u, "--- an earlier attempt ---\n");
    }
    memcpy(buf + u, sec[i].body, sec[i].len);
    u += sec[i].len;
  }
  buf[u] = 0;
  *out = buf;
  *outlen = u;
  return 0;
}
