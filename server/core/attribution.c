/* attribution: see attribution.h. */
#include "attribution.h"

#include <ctype.h>
#include <string.h>

static const char *const attr_names[] = {
    [ATTR_NONE] = "",           [ATTR_UNKNOWN] = "unknown",     [ATTR_CONFIG] = "config",
    [ATTR_MACHINE] = "machine", [ATTR_USER_CODE] = "user_code", [ATTR_RESOURCE] = "resource",
};

const char *attribution_name(enum attribution a) {
  return (unsigned)a < sizeof attr_names / sizeof *attr_names ? attr_names[a] : "";
}

int attribution_parse(const char *name) {
  for (size_t i = 0; name && i < sizeof attr_names / sizeof *attr_names; i++)
    if (!strcmp(name, attr_names[i])) return (int)i;
  return -1;
}

/* The worker's own head for a trial killed at its memory_mb
 * (worker/failure.c) and strsignal(SIGXCPU) for RLIMIT_CPU. */
static const char *const attr_resource_words[] = {
    "out of memory: the trial is limited to memory_mb",
    "CPU time limit exceeded",
};
/* What a GPU, its driver or its libraries say when the device is at fault
 * (or too small): the same config runs on another GPU. A device error is
 * checked before a traceback: PyTorch raises a Python exception for it. */
static const char *const attr_device_words[] = {
    "CUDA error",    "CUDA out of memory",
    "cudaError",     "CUBLAS_STATUS_",
    "CUDNN_STATUS_", "NCCL error",
    "CUDA driver",   "no CUDA-capable device",
    "ECC error",     "illegal memory access",
    "GPU is lost",   "Xid",
};

static int attr_has_any(const char *s, const char *const *words, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strstr(s, words[i])) return 1;
  return 0;
}

static int attr_reason_is(const char *error, const char *reason) {
  size_t n = strlen(reason);
  return !strncmp(error, reason, n) && (error[n] == ':' || error[n] == 0);
}

enum attr_kind attribution_kind(const char *error) {
  if (!error) return ATTR_KIND_OTHER;
  if (attr_has_any(error, attr_resource_words,
                   sizeof attr_resource_words / sizeof *attr_resource_words))
    return ATTR_KIND_RESOURCE;
  /* ctune-train's own "no_device", and its "out_of_memory" without the
   * worker's limit head: the GPU (or the host) ran out below any limit the
   * trial was given. */
  if (attr_reason_is(error, "no_device") || attr_reason_is(error, "out_of_memory") ||
      attr_has_any(error, attr_device_words, sizeof attr_device_words / sizeof *attr_device_words))
    return ATTR_KIND_DEVICE;
  if (strstr(error, "Traceback (most recent call last):")) return ATTR_KIND_TRACEBACK;
  return ATTR_KIND_OTHER;
}

enum attribution attribution_decide(const struct attribution_in *in) {
  if (in->worker_quarantined || in->ok_elsewhere) return ATTR_MACHINE;
  if (in->kind == ATTR_KIND_RESOURCE) return ATTR_RESOURCE;
  if (in->kind == ATTR_KIND_TRACEBACK && !in->had_result) return ATTR_USER_CODE;
  if (in->same_elsewhere) return ATTR_CONFIG;
  return ATTR_UNKNOWN;
}

int attribution_retry_elsewhere(enum attribution a, int retried_before, int other_worker) {
  return a == ATTR_UNKNOWN && !retried_before && other_worker;
}

void attribution_signature(const char *error, char *buf, size_t cap) {
  if (!cap) return;
  buf[0] = 0;
  if (!error) return;
  /* The reason: what precedes the first ": " of the first line. */
  size_t first = strcspn(error, "\n");
  const char *colon = strstr(error, ": ");
  size_t rlen = colon && (size_t)(colon - error) < first ? (size_t)(colon - error) : 0;
  /* The last non-empty line (the first line past its reason when it is the
   * only one). */
  const char *line = error + (rlen ? rlen + 2 : 0), *end = error + strlen(error);
  const char *best = line, *best_end = error + first;
  for (const char *p = error + first; p < end;) {
    p++; /* past '\n' */
    const char *q = p + strcspn(p, "\n");
    const char *a = p;
    while (a < q && isspace((unsigned char)*a)) a++;
    if (a < q) best = a, best_end = q;
    p = q;
  }
  while (best_end > best && isspace((unsigned char)best_end[-1])) best_end--;
  size_t o = 0;
  for (size_t i = 0; i < rlen && o + 1 < cap; i++) buf[o++] = error[i];
  if (rlen && o + 2 < cap) buf[o++] = ':', buf[o++] = ' ';
  for (const char *p = best; p < best_end && o + 1 < cap;) {
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && isxdigit((unsigned char)p[2])) {
      if (o + 4 >= cap) break;
      memcpy(buf + o, "0xN", 3), o += 3;
      for (p += 2; p < best_end && isxdigit((unsigned char)*p);) p++;
    } else if (isdigit((unsigned char)*p)) {
      buf[o++] = 'N';
      while (p < best_end && isdigit((unsigned char)*p)) p++;
    } else {
      buf[o++] = *p++;
    }
  }
  /* Never end inside a multi-byte character. */
  if (o > 0) {
    size_t k = o;
    while (k > 0 && ((unsigned char)buf[k - 1] & 0xC0) == 0x80) k--;
    if (k > 0 && ((unsigned char)buf[k - 1] & 0x80)) {
      unsigned char lead = (unsigned char)buf[k - 1];
      size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
      if (o - (k - 1) < need) o = k - 1;
    }
  }
  buf[o] = 0;
}
