/* ctune-train's TensorBoard writer: scalars and weight histograms per epoch. */
#include "tb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "tfevents.h"

/* Histogram resolution: TensorBoard redraws into its own bins anyway. */
#define TB_BUCKETS 30

struct train_tb {
  struct tfev_writer *w;
  double lr;
};

int train_tb_take_flag(int *argc, char **argv, const char **dir, char *err, size_t errlen) {
  static const char flag[] = "--tensorboard-dir";
  const size_t flen = sizeof(flag) - 1;
  int out = 1;
  *dir = NULL;
  for (int i = 1; i < *argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, flag, flen) != 0 || (a[flen] != '\0' && a[flen] != '=')) {
      argv[out++] = argv[i];
      continue;
    }
    const char *v = a[flen] == '=' ? a + flen + 1 : NULL;
    if (!v) {
      if (i + 1 >= *argc) {
        snprintf(err, errlen, "flag --tensorboard-dir: missing value (a folder)");
        return -EINVAL;
      }
      v = argv[++i];
    }
    if (!*v) {
      snprintf(err, errlen, "flag --tensorboard-dir: the folder name is empty");
      return -EINVAL;
    }
    *dir = v;
  }
  argv[out] = NULL;
  *argc = out;
  return 0;
}

const char *train_tb_usage(void) {
  return "--tensorboard-dir DIR: write TensorBoard event files into DIR (created):\n"
         "  per epoch the reported scalars and lr, and a histogram of every layer's\n"
         "  weights and biases. View: tensorboard --logdir DIR\n";
}

int train_tb_open(struct train_tb **out, const char *dir, double lr, char *err, size_t errlen) {
  struct train_tb *tb = calloc(1, sizeof(*tb));
  *out = NULL;
  if (!tb) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  int rc = tfev_open(&tb->w, dir, clock_wall_s());
  if (rc) {
    snprintf(err, errlen, "flag --tensorboard-dir: cannot create an event file in %s: %s", dir,
             strerror(-rc));
    free(tb);
    return rc;
  }
  tb->lr = lr;
  *out = tb;
  return 0;
}

static void add_scalar(struct sbuf *sum, const char *tag, double v) {
  struct sbuf val;
  sbuf_init(&val);
  tfev_value_scalar(&val, tag, (float)v);
  tfev_put_msg(sum, 1, &val); /* Summary.value = 1 */
  sbuf_free(&val);
}

static void add_histogram(struct sbuf *sum, const char *tag, const float *v, int64_t n) {
  struct sbuf val;
  sbuf_init(&val);
  int rc = tfev_value_histogram(&val, tag, v, (size_t)n, TB_BUCKETS);
  if (rc) sbuf_fail(&val, rc);
  tfev_put_msg(sum, 1, &val);
  sbuf_free(&val);
}

int train_tb_epoch(void *ctx, const struct epoch_report *r, const struct model_layout *L,
                   const float *params) {
  struct train_tb *tb = ctx;
  struct sbuf sum;
  sbuf_init(&sum);
  /* the same names as the JSON line, so TensorBoard and ctune agree */
  add_scalar(&sum, "loss", r->loss);
  add_scalar(&sum, "accuracy", r->accuracy);
  add_scalar(&sum, "train_loss", r->train_loss);
  if (r->has_test) add_scalar(&sum, "test_accuracy", r->test_accuracy);
  add_scalar(&sum, "lr", tb->lr);
  add_scalar(&sum, "samples_per_s", r->samples_per_s);
  add_scalar(&sum, "time_this_iter_s", r->time_this_iter_s);
  if (r->has_gpu_mem) add_scalar(&sum, "gpu_mem_mb", r->gpu_mem_mb);
  if (r->batch_size_reduced) add_scalar(&sum, "batch_size", r->batch_size);
  int nconv = 0, nfc = 0;
  for (int i = 0; L && params && i < L->n_layers; i++) {
    const struct layer_shape *s = &L->layer[i];
    char name[32], tag[48];
    if (s->kind == LAYER_CONV)
      snprintf(name, sizeof(name), "conv%d", ++nconv);
    else
      snprintf(name, sizeof(name), "fc%d", ++nfc);
    snprintf(tag, sizeof(tag), "%s/weight", name);
    add_histogram(&sum, tag, params + s->w_off, s->w_size);
    snprintf(tag, sizeof(tag), "%s/bias", name);
    add_histogram(&sum, tag, params + s->b_off, s->b_size);
  }
  int rc = sum.err;
  if (!rc) rc = tfev_write_summary(tb->w, clock_wall_s(), r->training_iteration, &sum);
  /* flushed every epoch: TensorBoard follows a live run */
  if (!rc) rc = tfev_flush(tb->w);
  sbuf_free(&sum);
  return rc;
}

int train_tb_close(struct train_tb *tb) {
  if (!tb) return 0;
  int rc = tfev_close(tb->w);
  free(tb);
  return rc;
}
