/* tfevents: TFRecord framing and hand-encoded tensorboard.Event protobufs. */
#include "tfevents.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC32C ------------------------------------------------------------ */

static uint32_t crc_table[256];
static int crc_ready;

/* Built on first use; two threads racing here compute the same table. */
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[i] = c;
  }
  crc_ready = 1;
}

uint32_t tfev_crc32c(uint32_t crc, const void *data, size_t n) {
  const uint8_t *p = data;
  if (!crc_ready) crc_init();
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t tfev_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

size_t tfev_varint(uint64_t v, uint8_t out[10]) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  out[n++] = (uint8_t)v;
  return n;
}

/* ---- protobuf building ------------------------------------------------- */

/* Every field goes through sbuf_putn: the message grows and fails (sticky
 * -ENOMEM) as any sbuf does. */
static void put_varint(struct sbuf *b, uint64_t v) {
  uint8_t tmp[10];
  sbuf_putn(b, tmp, tfev_varint(v, tmp));
}

static void put_key(struct sbuf *b, unsigned field, unsigned wire) {
  put_varint(b, ((uint64_t)field << 3) | wire);
}

static void put_le(struct sbuf *b, uint64_t v, int bytes) {
  uint8_t tmp[8];
  for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
  sbuf_putn(b, tmp, (size_t)bytes);
}

void tfev_put_varint_field(struct sbuf *b, unsigned field, uint64_t v) {
  put_key(b, field, 0);
  put_varint(b, v);
}

void tfev_put_double(struct sbuf *b, unsigned field, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof(u));
  put_key(b, field, 1);
  put_le(b, u, 8);
}

void tfev_put_float(struct sbuf *b, unsigned field, float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  put_key(b, field, 5);
  put_le(b, u, 4);
}

void tfev_put_bytes(struct sbuf *b, unsigned field, const void *data, size_t n) {
  put_key(b, field, 2);
  put_varint(b, n);
  sbuf_putn(b, data, n);
}

void tfev_put_string(struct sbuf *b, unsigned field, const char *s) {
  tfev_put_bytes(b, field, s, strlen(s));
}

void tfev_put_msg(struct sbuf *b, unsigned field, const struct sbuf *msg) {
  if (msg->err) {
    sbuf_fail(b, msg->err);
    return;
  }
  tfev_put_bytes(b, field, msg->buf, msg->len);
}

void tfev_put_packed_doubles(struct sbuf *b, unsigned field, const double *v, size_t n) {
  put_key(b, field, 2);
  put_varint(b, (uint64_t)n * 8);
  for (size_t i = 0; i < n; i++) {
    uint64_t u;
    memcpy(&u, &v[i], sizeof(u));
    put_le(b, u, 8);
  }
}

/* ---- Summary.Value ----------------------------------------------------- */

/* summary.proto, Summary.Value: tag = 1, simple_value = 2 (float),
 * histo = 5 (HistogramProto), tensor = 8, metadata = 9. */
int tfev_value_scalar(struct sbuf *value, const char *tag, float v) {
  tfev_put_string(value, 1, tag);
  tfev_put_float(value, 2, v);
  return value->err;
}

int tfev_value_histogram(struct sbuf *value, const char *tag, const float *v, size_t n,
                         int buckets) {
  double mn = INFINITY, mx = -INFINITY, sum = 0.0, sq = 0.0;
  size_t finite = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(v[i])) continue; /* a histogram of NaN has no edges */
    double d = v[i];
    mn = d < mn ? d : mn;
    mx = d > mx ? d : mx;
    sum += d;
    sq += d * d;
    finite++;
  }
  if (!finite) mn = mx = 0.0;
  if (buckets < 1) buckets = 1;
  if (mn == mx) buckets = 1;
  double *limit = malloc(sizeof(double) * (size_t)buckets);
  double *count = calloc((size_t)buckets, sizeof(double));
  if (!limit || !count) {
    free(limit);
    free(count);
    return -ENOMEM;
  }
  double width = (mx - mn) / buckets;
  for (int k = 0; k < buckets; k++) limit[k] = mn + width * (k + 1);
  limit[buckets - 1] = mx; /* exact right edge, no rounding past max */
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(v[i])) continue;
    int k = width > 0 ? (int)((v[i] - mn) / width) : 0;
    if (k >= buckets) k = buckets - 1;
    if (k < 0) k = 0;
    count[k] += 1.0;
  }
  /* histogram.proto, HistogramProto: min = 1, max = 2, num = 3, sum = 4,
   * sum_squares = 5, bucket_limit = 6 (repeated double, packed),
   * bucket = 7 (repeated double, packed). */
  struct sbuf h;
  sbuf_init(&h);
  tfev_put_double(&h, 1, mn);
  tfev_put_double(&h, 2, mx);
  tfev_put_double(&h, 3, (double)finite);
  tfev_put_double(&h, 4, sum);
  tfev_put_double(&h, 5, sq);
  tfev_put_packed_doubles(&h, 6, limit, (size_t)buckets);
  tfev_put_packed_doubles(&h, 7, count, (size_t)buckets);
  free(limit);
  free(count);
  tfev_put_string(value, 1, tag);
  tfev_put_msg(value, 5, &h);
  sbuf_free(&h);
  return value->err;
}

int tfev_value_plugin(struct sbuf *value, const char *tag, const char *plugin_name,
                      const struct sbuf *content) {
  /* SummaryMetadata: plugin_data = 1 {plugin_name = 1, content = 2}. */
  struct sbuf pd, md;
  sbuf_init(&pd);
  sbuf_init(&md);
  tfev_put_string(&pd, 1, plugin_name);
  tfev_put_msg(&pd, 2, content);
  tfev_put_msg(&md, 1, &pd);
  /* TensorProto {dtype = 1: DT_FLOAT (1), tensor_shape = 2: {dim = 2: {}}}:
   * the empty float tensor of tensorboard.plugins.hparams.metadata. */
  static const uint8_t null_tensor[] = {0x08, 0x01, 0x12, 0x02, 0x12, 0x00};
  tfev_put_string(value, 1, tag);
  tfev_put_msg(value, 9, &md);
  tfev_put_bytes(value, 8, null_tensor, sizeof(null_tensor));
  sbuf_free(&pd);
  sbuf_free(&md);
  return value->err;
}

/* ---- files ------------------------------------------------------------- */

struct tfev_writer {
  FILE *f;
  int err;
  char path[];
};

int tfev_mkdirs(const char *dir) {
  size_t len = strlen(dir);
  char *p = malloc(len + 1);
  int rc = 0;
  if (!p) return -ENOMEM;
  memcpy(p, dir, len + 1);
  for (size_t i = 1; i <= len; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      rc = -errno;
      break;
    }
    p[i] = c;
  }
  if (!rc) {
    struct stat st;
    if (stat(dir, &st) != 0)
      rc = -errno;
    else if (!S_ISDIR(st.st_mode))
      rc = -ENOTDIR;
  }
  free(p);
  return rc;
}

/* One TFRecord: u64 length, masked crc of those 8 bytes, data, masked crc. */
static int write_record(struct tfev_writer *w, const struct sbuf *data) {
  uint8_t head[12], tail[4];
  uint64_t len = data->len;
  if (w->err) return w->err;
  if (data->err) return data->err;
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
  uint32_t c = tfev_mask_crc(tfev_crc32c(0, head, 8));
  for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(c >> (8 * i));
  c = tfev_mask_crc(tfev_crc32c(0, data->buf, data->len));
  for (int i = 0; i < 4; i++) tail[i] = (uint8_t)(c >> (8 * i));
  errno = 0;
  if (fwrite(head, 1, 12, w->f) != 12 ||
      (data->len && fwrite(data->buf, 1, data->len, w->f) != data->len) ||
      fwrite(tail, 1, 4, w->f) != 4)
    w->err = errno ? -errno : -EIO;
  return w->err;
}

/* event.proto, Event: wall_time = 1 (double), step = 2 (int64),
 * file_version = 3 (string), summary = 5 (Summary). */
static int write_event(struct tfev_writer *w, double wall_time, int64_t step,
                       const char *file_version, const struct sbuf *summary) {
  struct sbuf ev;
  sbuf_init(&ev);
  tfev_put_double(&ev, 1, wall_time);
  if (step) tfev_put_varint_field(&ev, 2, (uint64_t)step);
  if (file_version) tfev_put_string(&ev, 3, file_version);
  if (summary) tfev_put_msg(&ev, 5, summary);
  int rc = ev.err ? ev.err : write_record(w, &ev);
  sbuf_free(&ev);
  return rc;
}

int tfev_open(struct tfev_writer **out, const char *dir, double wall_time) {
  static unsigned seq; /* two files of one process in one second */
  char host[64] = "localhost";
  *out = NULL;
  int rc = tfev_mkdirs(dir);
  if (rc) return rc;
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  for (char *h = host; *h; h++)
    if (*h == '/') *h = '_';
  size_t cap = strlen(dir) + sizeof(host) + 96;
  struct tfev_writer *w = calloc(1, sizeof(*w) + cap);
  if (!w) return -ENOMEM;
  /* TensorBoard finds files whose name holds "tfevents" and reads them in
   * name order: the time first keeps later files later. */
  snprintf(w->path, cap, "%s/events.out.tfevents.%010lld.%s.%ld.%u", dir, (long long)wall_time,
           host, (long)getpid(), seq++);
  w->f = fopen(w->path, "wbx");
  if (!w->f) {
    rc = -errno;
    free(w);
    return rc;
  }
  rc = write_event(w, wall_time, 0, "brain.Event:2", NULL);
  if (rc) {
    fclose(w->f);
    unlink(w->path);
    free(w);
    return rc;
  }
  *out = w;
  return 0;
}

int tfev_write_summary(struct tfev_writer *w, double wall_time, int64_t step,
                       const struct sbuf *summary) {
  return write_event(w, wall_time, step, NULL, summary);
}

int tfev_write_scalar(struct tfev_writer *w, double wall_time, int64_t step, const char *tag,
                      float v) {
  struct sbuf val, sum;
  sbuf_init(&val);
  sbuf_init(&sum);
  tfev_value_scalar(&val, tag, v);
  tfev_put_msg(&sum, 1, &val); /* Summary: value = 1 (repeated) */
  int rc = sum.err ? sum.err : tfev_write_summary(w, wall_time, step, &sum);
  sbuf_free(&val);
  sbuf_free(&sum);
  return rc;
}

int tfev_flush(struct tfev_writer *w) {
  if (!w->err && fflush(w->f) != 0) w->err = -errno;
  return w->err;
}

int tfev_close(struct tfev_writer *w) {
  if (!w) return 0;
  int rc = tfev_flush(w);
  if (fclose(w->f) != 0 && !rc) rc = -errno;
  free(w);
  return rc;
}

const char *tfev_path(const struct tfev_writer *w) { return w->path; }
