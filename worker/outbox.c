/* Persistent FIFO of messages to deliver exactly once (see outbox.h). Files
 * are written to a temporary name and renamed, so a crash never leaves half a
 * message; no fsync: a worker crash loses nothing, a power cut may. */
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

uint64_t outbox_backoff_ms(int attempts) {
  if (attempts <= 0) return 0;
  uint64_t d = 100;
  for (int i = 1; i < attempts && d < 10000; i++) d *= 2;
  return d > 10000 ? 10000 : d;
}

static void outbox_item_free(struct outbox_item *it) {
  if (!it) return;
  free(it->path);
  free(it->body);
  free(it);
}

static void outbox_link(struct outbox *ob, struct outbox_item *it) {
  it->next = NULL;
  if (ob->tail) ob->tail->next = it;
  else ob->head = it;
  ob->tail = it;
  ob->n++;
  if (it->kind == OUTBOX_RESULT) ob->n_results++;
}

static int outbox_file(const struct outbox *ob, uint64_t seq, const char *suffix,
                       char *buf, size_t len) {
  int w = snprintf(buf, len, "%s/%016" PRIu64 ".json%s", ob->dir, seq, suffix);
  return (w < 0 || (size_t)w >= len) ? -ENAMETOOLONG : 0;
}

static int outbox_write(const struct outbox *ob, const struct outbox_item *it) {
  char tmp[4096], fin[4096];
  int rc;
  if ((rc = outbox_file(ob, it->seq, ".tmp", tmp, sizeof tmp)) < 0) return rc;
  if ((rc = outbox_file(ob, it->seq, "", fin, sizeof fin)) < 0) return rc;
  cJSON *o = cJSON_CreateObject();
  char *text = NULL;
  if (!o || !cJSON_AddNumberToObject(o, "trial_id", it->trial_id) ||
      !cJSON_AddStringToObject(o, "kind", it->kind == OUTBOX_RESULT ? "result" : "end") ||
      !cJSON_AddStringToObject(o, "path", it->path) ||
      !cJSON_AddStringToObject(o, "body", it->body) ||
      !(text = cJSON_PrintUnformatted(o))) {
    cJSON_Delete(o);
    return -ENOMEM;
  }
  cJSON_Delete(o);
  rc = 0;
  FILE *f = fopen(tmp, "w");
  if (!f) rc = -errno;
  else {
    if (fputs(text, f) < 0) rc = -EIO;
    if (fclose(f) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, fin) != 0) rc = -errno;
    if (rc < 0) unlink(tmp);
  }
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
  if (cJSON_IsNumber(tid) && cJSON_IsString(kind) && cJSON_IsString(path) &&
      cJSON_IsString(body) && (it = calloc(1, sizeof *it))) {
    it->seq = seq;
    it->trial_id = tid->valueint;
    it->kind = strcmp(kind->valuestring, "result") ? OUTBOX_END : OUTBOX_RESULT;
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
    if (sscanf(e->d_name, "%" SCNu64 "%15s", &seq, rest) != 2) continue;
    if (strcmp(rest, ".json")) {
      if (!strcmp(rest, ".json.tmp")) {  /* a write cut short: never acked */
        char p[4096];
        if (outbox_file(ob, seq, ".tmp", p, sizeof p) == 0) unlink(p);
      }
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      uint64_t *s = realloc(seqs, cap * sizeof *s);
      if (!s) { rc = -ENOMEM; goto done; }
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
    outbox_link(ob, it);
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
  struct outbox_item *it = ob->head;
  while (it) {
    struct outbox_item *next = it->next;
    outbox_item_free(it);
    it = next;
  }
  free(ob->dir);
  memset(ob, 0, sizeof *ob);
}

int outbox_has_room(const struct outbox *ob) { return ob->n_results < ob->max_results; }

int outbox_push(struct outbox *ob, enum outbox_kind kind, int trial_id,
                const char *path, const char *body) {
  if (kind == OUTBOX_RESULT && ob->n_results >= ob->max_results) return -ENOSPC;
  if (kind == OUTBOX_END && ob->n - ob->n_results >= OUTBOX_END_RESERVE) return -ENOSPC;
  struct outbox_item *it = calloc(1, sizeof *it);
  if (!it) return -ENOMEM;
  it->seq = ob->next_seq;
  it->kind = kind;
  it->trial_id = trial_id;
  it->path = strdup(path);
  it->body = strdup(body);
  if (!it->path || !it->body) {
    outbox_item_free(it);
    return -ENOMEM;
  }
  if (ob->dir) {
    int rc = outbox_write(ob, it);
    if (rc < 0) {
      outbox_item_free(it);
      return rc;
    }
  }
  ob->next_seq++;
  outbox_link(ob, it);
  return 0;
}

void outbox_ack(struct outbox *ob) {
  struct outbox_item *it = ob->head;
  if (!it) return;
  if (ob->dir) {
    char p[4096];
    if (outbox_file(ob, it->seq, "", p, sizeof p) == 0 && unlink(p) != 0 && errno != ENOENT)
      log_warn("outbox: cannot remove %s: %s", p, strerror(errno));
  }
  ob->head = it->next;
  if (!ob->head) ob->tail = NULL;
  ob->n--;
  if (it->kind == OUTBOX_RESULT) ob->n_results--;
  outbox_item_free(it);
  ob->attempts = 0;
  ob->next_try_ms = 0;
}

void outbox_failed(struct outbox *ob, uint64_t now_ms) {
  ob->attempts++;
  ob->next_try_ms = now_ms + outbox_backoff_ms(ob->attempts);
}

int outbox_ready(const struct outbox *ob, uint64_t now_ms) {
  return ob->head && now_ms >= ob->next_try_ms;
}
