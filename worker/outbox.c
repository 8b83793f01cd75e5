/* Persistent per-trial FIFO lanes of messages to deliver exactly once (see
 * outbox.h). Files are written under another name (a spare, or a .tmp)
 * and renamed, so a crash never leaves half a message; no fsync: a worker crash loses nothing, a
 * power cut may (or may leave an acknowledged message to be sent again,
 * below; the server takes it once). The file names carry one global
 * sequence number, so a restart rebuilds every lane in its order.
 *
 * A delivered message's file is not removed but kept as a spare (renamed
 * spare.N, up to OUTBOX_SPARES) and written over in place by the next
 * message, then renamed to its name: no inode made or freed. On ext4 without a journal each create
 * scans past every inode freed in the last seconds (recently_deleted()),
 * which made inode allocation 40-70 % of the worker's CPU at 32 trials a
 * second, on its event loop. */
#include "outbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "testhook.h"

uint64_t outbox_backoff_ms(int attempts) {
  if (attempts <= 0) return 0;
  uint64_t d = 100;
  for (int i = 1; i < attempts && d < 10000; i++) d *= 2;
  return d > 10000 ? 10000 : d;
}

uint64_t outbox_retry_after_ms(long status, const char *value) {
  if ((status != 429 && status != 503) || !value) return 0;
  while (*value == ' ' || *value == '\t') value++;
  if (*value < '0' || *value > '9') return 0;
  uint64_t s = 0;
  for (; *value >= '0' && *value <= '9'; value++)
    if (s < OUTBOX_RETRY_AFTER_MAX_MS / 1000) s = s * 10 + (uint64_t)(*value - '0');
  while (*value == ' ' || *value == '\t') value++;
  if (*value) return 0; /* "5s", "1.5", a date: not delta-seconds */
  return s * 1000 > OUTBOX_RETRY_AFTER_MAX_MS ? OUTBOX_RETRY_AFTER_MAX_MS : s * 1000;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid or cut
 * short (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
static size_t outbox_utf8_seq(const unsigned char *s, size_t len) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (len < n) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return n;
}

char *outbox_utf8_clean(const char *s, size_t len, size_t *out_len) {
  /* Worst case: every byte becomes the 3-byte U+FFFD. */
  if (len > (SIZE_MAX - 1) / 3) return NULL;
  char *out = malloc(len * 3 + 1);
  if (!out) return NULL;
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, o = 0;
  while (i < len) {
    if (p[i] == 0) {
      i++;
      continue;
    }
    size_t n = outbox_utf8_seq(p + i, len - i);
    if (n) {
      memcpy(out + o, p + i, n);
      o += n;
      i += n;
    } else {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
    }
  }
  out[o] = '\0';
  if (out_len) *out_len = o;
  return out;
}

static void outbox_item_free(struct outbox_item *it) {
  if (!it) return;
  free(it->path);
  free(it->body);
  free(it);
}

struct outbox_lane *outbox_lane(struct outbox *ob, int trial_id) {
  for (struct outbox_lane *l = ob->lanes; l; l = l->next)
    if (l->trial_id == trial_id) return l;
  return NULL;
}

static struct outbox_lane *outbox_lane_get(struct outbox *ob, int trial_id) {
  struct outbox_lane *l = outbox_lane(ob, trial_id);
  if (l) return l;
  if (!(l = calloc(1, sizeof *l))) return NULL;
  l->trial_id = trial_id;
  /* Appended, so lanes are served in the order their trials first spoke. */
  struct outbox_lane **pp = &ob->lanes;
  while (*pp) pp = &(*pp)->next;
  *pp = l;
  return l;
}

static void outbox_link(struct outbox *ob, struct outbox_lane *l, struct outbox_item *it) {
  it->next = NULL;
  if (l->tail)
    l->tail->next = it;
  else
    l->head = it;
  l->tail = it;
  l->n++;
  ob->n++;
  if (it->kind == OUTBOX_RESULT) {
    l->n_results++;
    ob->n_results++;
  }
}

#define OUTBOX_SPARES 64

static int outbox_spare(const struct outbox *ob, unsigned k, char *buf, size_t len) {
  int w = snprintf(buf, len, "%s/spare.%u", ob->dir, k);
  return (w < 0 || (size_t)w >= len) ? -ENAMETOOLONG : 0;
}

static int outbox_file(const struct outbox *ob, uint64_t seq, const char *suffix, char *buf,
                       size_t len) {
  int w = snprintf(buf, len, "%s/%016" PRIu64 ".json%s", ob->dir, seq, suffix);
  return (w < 0 || (size_t)w >= len) ? -ENAMETOOLONG : 0;
}

static int outbox_fault(void) {
  const char *f = TESTHOOK(TESTHOOK_OUTBOX_FAULT_FILE);
  return f && access(f, F_OK) == 0;
}

static int outbox_write_all(int fd, const char *text, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? -errno : -EIO;
    text += w;
    n -= (size_t)w;
  }
  return 0;
}

/* text as the file fin: written over the last spare in place, cut to its
 * length and renamed fin (one rename; a crash before it leaves a spare,
 * which no restart loads), else written to tmp and renamed fin. A spare's
 * longer old message must not trail this one; never cut to 0 bytes (ext4
 * would then write the file out at its close). */
static int outbox_put(struct outbox *ob, const char *text, const char *tmp, const char *fin) {
  size_t n = strlen(text);
  char sp[4096];
  const char *path = NULL;
  int fd = -1;
  while (fd < 0 && ob->nspare > 0 && outbox_spare(ob, ob->nspare - 1, sp, sizeof sp) == 0) {
    ob->nspare--;
    fd = open(sp, O_WRONLY | O_NOFOLLOW | O_CLOEXEC); /* gone (removed by hand): the next */
    path = sp;
  }
  if (fd < 0) {
    path = tmp;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
  }
  int rc = outbox_write_all(fd, text, n);
  if (rc == 0 && path == sp && ftruncate(fd, (off_t)n) != 0) rc = -errno;
  if (close(fd) != 0 && rc == 0) rc = -errno;
  if (rc == 0 && rename(path, fin) != 0) rc = -errno;
  if (rc < 0) unlink(path);
  return rc;
}

static int outbox_write(struct outbox *ob, const struct outbox_item *it) {
  char tmp[4096], fin[4096];
  int rc;
  if ((rc = outbox_file(ob, it->seq, ".tmp", tmp, sizeof tmp)) < 0) return rc;
  if ((rc = outbox_file(ob, it->seq, "", fin, sizeof fin)) < 0) return rc;
  if (outbox_fault()) return -ENOSPC;
  cJSON *o = cJSON_CreateObject();
  char *text = NULL;
  if (!o || !cJSON_AddNumberToObject(o, "trial_id", it->trial_id) ||
      !cJSON_AddStringToObject(o, "kind", it->kind == OUTBOX_RESULT ? "result" : "end") ||
      !cJSON_AddNumberToObject(o, "worker_id", it->lease.worker_id) ||
      !cJSON_AddNumberToObject(o, "attempt", (double)it->lease.attempt) ||
      !cJSON_AddStringToObject(o, "path", it->path) ||
      !cJSON_AddStringToObject(o, "body", it->body) || !(text = cJSON_PrintUnformatted(o))) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  cJSON_Delete(o);
  rc = outbox_put(ob, text, tmp, fin);
  free(text);
  return rc;
}

static struct outbox_item *outbox_read(const char *file, uint64_t seq) {
  struct outbox_item *it = NULL;
  char *text = NULL;
  FILE *f = fopen(file, "r");
  if (!f) return NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      char *t = realloc(text, cap);
      if (!t) goto done;
      text = t;
    }
    size_t r = fread(text + len, 1, cap - len - 1, f);
    len += r;
    if (r == 0) break;
  }
  text[len] = '\0';
  cJSON *o = cJSON_Parse(text);
  const cJSON *tid = cJSON_GetObjectItemCaseSensitive(o, "trial_id");
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
  const cJSON *path = cJSON_GetObjectItemCaseSensitive(o, "path");
  const cJSON *body = cJSON_GetObjectItemCaseSensitive(o, "body");
  const cJSON *wid = cJSON_GetObjectItemCaseSensitive(o, "worker_id");
  const cJSON *att = cJSON_GetObjectItemCaseSensitive(o, "attempt");
  if (cJSON_IsNumber(tid) && cJSON_IsString(kind) && cJSON_IsString(path) && cJSON_IsString(body) &&
      (it = calloc(1, sizeof *it))) {
    it->seq = seq;
    it->trial_id = tid->valueint;
    it->kind = strcmp(kind->valuestring, "result") ? OUTBOX_END : OUTBOX_RESULT;
    /* Files from before protocol v2 have no lease: sent unfenced. */
    it->lease.worker_id = cJSON_IsNumber(wid) ? wid->valueint : 0;
    it->lease.attempt = cJSON_IsNumber(att) ? (long)att->valuedouble : 0;
    it->path = strdup(path->valuestring);
    it->body = strdup(body->valuestring);
    if (!it->path || !it->body) {
      outbox_item_free(it);
      it = NULL;
    }
  }
  cJSON_Delete(o);
done:
  free(text);
  fclose(f);
  return it;
}

static int outbox_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int outbox_load(struct outbox *ob) {
  DIR *d = opendir(ob->dir);
  if (!d) return -errno;
  uint64_t *seqs = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    uint64_t seq;
    char rest[16];
    if (!strncmp(e->d_name, "spare.", 6)) { /* an earlier run's spare: no message */
      char p[4096];
      if (snprintf(p, sizeof p, "%s/%s", ob->dir, e->d_name) < (int)sizeof p) unlink(p);
      continue;
    }
    if (sscanf(e->d_name, "%" SCNu64 "%15s", &seq, rest) != 2) continue;
    if (strcmp(rest, ".json")) {
      if (!strcmp(rest, ".json.tmp")) { /* a write cut short: never acked */
        char p[4096];
        if (outbox_file(ob, seq, ".tmp", p, sizeof p) == 0) unlink(p);
      }
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      uint64_t *s = realloc(seqs, cap * sizeof *s);
      if (!s) {
        rc = -ENOMEM;
        goto done;
      }
      seqs = s;
    }
    seqs[n++] = seq;
  }
  if (n) qsort(seqs, n, sizeof *seqs, outbox_cmp_u64);
  for (size_t i = 0; i < n; i++) {
    char p[4096];
    if (outbox_file(ob, seqs[i], "", p, sizeof p) < 0) continue;
    struct outbox_item *it = outbox_read(p, seqs[i]);
    if (!it) {
      log_warn("outbox: skipping unreadable message %s", p);
      continue;
    }
    struct outbox_lane *l = outbox_lane_get(ob, it->trial_id);
    if (!l) {
      outbox_item_free(it);
      rc = -ENOMEM;
      goto done;
    }
    outbox_link(ob, l, it);
    if (seqs[i] >= ob->next_seq) ob->next_seq = seqs[i] + 1;
  }
  if (n) log_info("outbox: %zu undelivered message(s) from an earlier run", ob->n);
done:
  free(seqs);
  closedir(d);
  return rc;
}

int outbox_open(struct outbox *ob, const char *dir, size_t max_results) {
  memset(ob, 0, sizeof *ob);
  ob->max_results = max_results;
  ob->next_seq = 1;
  if (!dir) return 0;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -errno;
  if (!(ob->dir = strdup(dir))) return -ENOMEM;
  int rc = outbox_load(ob);
  if (rc < 0) outbox_close(ob);
  return rc;
}

void outbox_close(struct outbox *ob) {
  struct outbox_lane *l = ob->lanes;
  while (l) {
    struct outbox_lane *ln = l->next;
    struct outbox_item *it = l->head;
    while (it) {
      struct outbox_item *next = it->next;
      outbox_item_free(it);
      it = next;
    }
    free(l->end_log);
    free(l);
    l = ln;
  }
  char sp[4096];
  while (ob->dir && ob->nspare > 0 && outbox_spare(ob, --ob->nspare, sp, sizeof sp) == 0)
    unlink(sp);
  free(ob->dir);
  memset(ob, 0, sizeof *ob);
}

int outbox_has_room(const struct outbox *ob) { return ob->n_results < ob->max_results; }

int outbox_push(struct outbox *ob, enum outbox_kind kind, int trial_id,
                const struct outbox_lease *lease, const char *path, const char *body, int flags) {
  if (kind == OUTBOX_RESULT && ob->n_results >= ob->max_results && !(flags & OUTBOX_F_FORCE))
    return -ENOSPC;
  if (kind == OUTBOX_END && ob->n - ob->n_results >= OUTBOX_END_RESERVE) return -ENOSPC;
  struct outbox_item *it = calloc(1, sizeof *it);
  if (!it) return -ENOMEM;
  it->seq = ob->next_seq;
  it->kind = kind;
  it->trial_id = trial_id;
  if (lease) it->lease = *lease;
  it->path = strdup(path);
  it->body = outbox_utf8_clean(body, strlen(body), NULL);
  struct outbox_lane *l = outbox_lane_get(ob, trial_id);
  if (!it->path || !it->body || !l) {
    outbox_item_free(it);
    return -ENOMEM;
  }
  int rc = 0;
  if (ob->dir && (rc = outbox_write(ob, it)) < 0) {
    if (!(flags & OUTBOX_F_MEM)) {
      outbox_item_free(it);
      outbox_gc(ob);
      return rc;
    }
    log_warn("outbox: cannot write a message for trial %d (%s): kept in memory only", trial_id,
             strerror(-rc));
    rc = 1;
  }
  ob->next_seq++;
  outbox_link(ob, l, it);
  return rc;
}

static void outbox_unlink_file(struct outbox *ob, const struct outbox_item *it) {
  if (!ob->dir) return;
  char p[4096], sp[4096];
  if (outbox_file(ob, it->seq, "", p, sizeof p) < 0) return;
  /* Gone from the outbox either way: renamed to a spare, or removed. */
  if (ob->nspare < OUTBOX_SPARES && outbox_spare(ob, ob->nspare, sp, sizeof sp) == 0 &&
      rename(p, sp) == 0) {
    ob->nspare++;
    return;
  }
  if (unlink(p) != 0 && errno != ENOENT)
    log_warn("outbox: cannot remove %s: %s", p, strerror(errno));
}

static void outbox_unlinked(struct outbox *ob, struct outbox_lane *l, struct outbox_item *it) {
  outbox_unlink_file(ob, it);
  l->n--;
  ob->n--;
  if (it->kind == OUTBOX_RESULT) {
    l->n_results--;
    ob->n_results--;
  }
  outbox_item_free(it);
}

/* A new head (or none): its backoff and failure record start afresh. */
static void outbox_lane_reset(struct outbox_lane *l) {
  l->attempts = 0;
  l->next_try_ms = 0;
  l->failing_since_ms = 0;
  l->last_status = 0;
  l->last_code[0] = '\0';
  l->stuck = 0;
  l->single = 0;
}

void outbox_ack(struct outbox *ob, struct outbox_lane *l, size_t n) {
  while (n-- > 0 && l->head) {
    struct outbox_item *it = l->head;
    l->head = it->next;
    if (!l->head) l->tail = NULL;
    outbox_unlinked(ob, l, it);
  }
  outbox_lane_reset(l);
}

static int outbox_same_lease(const struct outbox_lease *a, const struct outbox_lease *b) {
  return a->worker_id == b->worker_id && a->attempt == b->attempt;
}

size_t outbox_drop_lease(struct outbox *ob, struct outbox_lane *l,
                         const struct outbox_lease *lease) {
  size_t n = 0;
  struct outbox_item **pp = &l->head, *prev = NULL;
  while (*pp) {
    struct outbox_item *it = *pp;
    if (outbox_same_lease(&it->lease, lease)) {
      *pp = it->next;
      outbox_unlinked(ob, l, it);
      n++;
    } else {
      prev = it;
      pp = &it->next;
    }
  }
  l->tail = prev;
  outbox_lane_reset(l);
  return n;
}

void outbox_gc(struct outbox *ob) {
  struct outbox_lane **pp = &ob->lanes;
  while (*pp) {
    struct outbox_lane *l = *pp;
    if (!l->head && !l->inflight) {
      *pp = l->next;
      free(l->end_log);
      free(l);
    } else {
      pp = &l->next;
    }
  }
}

void outbox_failed(struct outbox_lane *l, uint64_t now_ms, uint64_t at_least_ms) {
  if (!l->failing_since_ms) l->failing_since_ms = now_ms ? now_ms : 1;
  l->attempts++;
  uint64_t d = outbox_backoff_ms(l->attempts);
  l->next_try_ms = now_ms + (d > at_least_ms ? d : at_least_ms);
}

uint64_t outbox_failing_ms(const struct outbox_lane *l, uint64_t now_ms) {
  if (!l->failing_since_ms || now_ms < l->failing_since_ms) return 0;
  return now_ms - l->failing_since_ms;
}

int outbox_ready(const struct outbox_lane *l, uint64_t now_ms) {
  return l->head && !l->inflight && now_ms >= l->next_try_ms;
}

size_t outbox_lane_results(const struct outbox_lane *l, const struct outbox_lease *lease) {
  size_t n = 0;
  for (const struct outbox_item *it = l ? l->head : NULL; it; it = it->next)
    if (it->kind == OUTBOX_RESULT && outbox_same_lease(&it->lease, lease)) n++;
  return n;
}

char *outbox_batch(const struct outbox_lane *l, size_t max_items, size_t max_bytes, size_t *n) {
  const struct outbox_item *h = l->head;
  *n = 0;
  if (!h) return NULL;
  size_t count = 1, bytes = strlen(h->body) + 2;
  if (h->kind == OUTBOX_RESULT && !l->single) {
    for (const struct outbox_item *it = h->next; it && count < max_items; it = it->next) {
      size_t b = strlen(it->body) + 1;
      if (it->kind != OUTBOX_RESULT || !outbox_same_lease(&it->lease, &h->lease) ||
          bytes + b > max_bytes)
        break;
      bytes += b;
      count++;
    }
  }
  char *out = malloc(count == 1 ? strlen(h->body) + 1 : bytes + 1);
  if (!out) return NULL;
  if (count == 1) {
    strcpy(out, h->body);
  } else {
    char *p = out;
    *p++ = '[';
    const struct outbox_item *it = h;
    for (size_t i = 0; i < count; i++, it = it->next) {
      if (i) *p++ = ',';
      size_t b = strlen(it->body);
      memcpy(p, it->body, b);
      p += b;
    }
    *p++ = ']';
    *p = '\0';
  }
  *n = count;
  return out;
}
