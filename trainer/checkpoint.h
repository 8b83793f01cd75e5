/* The checkpoint: everything a resumed run needs to continue exactly where
 * the interrupted one stopped. A pure encoder/decoder (magic, version, CRC-32)
 * and an atomic file writer (temporary file, fsync, rename, fsync dir). */
#ifndef CTUNE_TRAINER_CHECKPOINT_H
#define CTUNE_TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#define CKPT_MAGIC "CTUNECKP"
/* 2: the split (seed, val_fraction, train_limit, data set) is recorded */
#define CKPT_VERSION 2u
#define CKPT_FILE "checkpoint.bin"

struct ckpt {
  struct model_spec model;
  int32_t optim_kind;
  int64_t epoch; /* epochs completed */
  int64_t pos;   /* training samples done in the current epoch */
  int64_t step;  /* optimiser steps so far */
  uint64_t rng;  /* shuffle RNG state after this epoch's shuffle */
  double time_total_s, epoch_time_s, epoch_train_time_s;
  double train_loss_sum;
  int64_t train_count;
  double last_loss, last_accuracy;
  /* the split the run was made on: resuming under another one would move
   * validation images into training */
  int64_t seed, train_limit;
  double val_fraction;
  int32_t dataset; /* enum data_kind */
  int64_t n_train;
  int32_t *perm; /* n_train: this epoch's order of training indices */
  int64_t n_params, n_state;
  float *params, *state;
};

/* Encodes c into a new buffer (*out, *len; caller frees). */
int ckpt_encode(const struct ckpt *c, uint8_t **out, size_t *len);
/* Decodes buf into c, allocating perm, params and state (ckpt_free them).
 * -EINVAL with a reason in err for a bad magic, version, size or checksum. */
int ckpt_decode(const uint8_t *buf, size_t len, struct ckpt *c, char *err, size_t errlen);
void ckpt_free(struct ckpt *c);

/* Creates dir when missing and checks that it is writable, so a bad
 * --checkpoint-dir fails before any training rather than after an epoch. */
int ckpt_prepare_dir(const char *dir, char *err, size_t errlen);

/* Writes <dir>/checkpoint.bin atomically; creates dir if missing. On failure
 * the previous checkpoint is untouched and no temporary file is left. */
int ckpt_save(const char *dir, const struct ckpt *c, char *err, size_t errlen);
/* Reads <dir>/checkpoint.bin: -ENOENT when there is none, -EINVAL when it is
 * corrupt, -EIO when unreadable. */
int ckpt_load(const char *dir, struct ckpt *c, char *err, size_t errlen);

#endif
