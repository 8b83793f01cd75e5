/* Data sets: parsers for IDX (MNIST, Fashion-MNIST) and CIFAR-10 binary
 * batches over memory buffers (pure), and loaders that read the files
 * (gzipped or not) into uint8 images, normalised to floats only when a batch
 * is gathered (a quarter of the memory of float images: Fashion-MNIST's
 * training set is 47 MB instead of 188 MB). */
#ifndef CTUNE_TRAINER_DATA_H
#define CTUNE_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

/* n images of c x h x w pixels as stored (uint8, CHW), and n labels <
 * n_classes. data_normalise turns pixels into the network's floats. */
struct dataset {
  int64_t n;
  int c, h, w, n_classes;
  uint8_t *pix;
  uint8_t *y;
  /* Non-NULL when pix and y point into a read-only mapping of a data cache
   * file (datacache.h), shared with every process that maps it: data_free
   * unmaps it instead of freeing pix and y, and nothing may write them. */
  void *map;
  size_t map_len;
};

/* (pixel/255 - 0.5) / 0.5, the PyTorch tutorial's Normalize((0.5,), (0.5,)),
 * for count pixels: the very floats the loaders used to store. */
void data_normalise(const uint8_t *pix, int64_t count, float *out);
/* Images idx[0..n) of d, normalised into x (n * c*h*w floats), labels into
 * y. */
void data_gather(const struct dataset *d, const int32_t *idx, int64_t n, float *x, uint8_t *y);

enum data_kind { DATA_FASHION_MNIST = 0, DATA_MNIST = 1, DATA_CIFAR10 = 2 };

/* Parsers fill the out-parameters with pointers into buf. On a malformed
 * buffer they return -EINVAL and write a one-line reason to err. */
int data_parse_idx_images(const uint8_t *buf, size_t len, int64_t *n, int *h, int *w,
                          const uint8_t **pixels, char *err, size_t errlen);
int data_parse_idx_labels(const uint8_t *buf, size_t len, int64_t *n, const uint8_t **labels,
                          char *err, size_t errlen);
/* One CIFAR-10 batch: records of 1 label byte + 3072 pixel bytes. */
int data_parse_cifar(const uint8_t *buf, size_t len, int64_t *n, char *err, size_t errlen);

/* Reads a whole file, gunzipping it when it is gzip (zlib reads plain files
 * as they are). -ENOENT when missing, -EIO when unreadable or corrupt. */
int data_read_file(const char *path, uint8_t **out, size_t *len, char *err, size_t errlen);

/* Loads the train (test = 0) or test split of kind from dir. limit > 0 keeps
 * the first limit images. Errors: -ENOENT, -EIO, -EINVAL (malformed),
 * -ENOMEM, each with a reason naming the file in err. With a cache directory
 * set (datacache_set_dir) the decoded split is mapped from its cache file,
 * built there on first use; without one, or when the cache cannot be used
 * (a warning says why), it is parsed from the source files as
 * data_parse_split does. */
int data_load(int kind, const char *dir, int test, int64_t limit, struct dataset *out, char *err,
              size_t errlen);
/* data_load without the cache: reads and parses the source files. */
int data_parse_split(int kind, const char *dir, int test, int64_t limit, struct dataset *out,
                     char *err, size_t errlen);
void data_free(struct dataset *d);

/* The source files data_parse_split reads for the whole split, into
 * paths[0..return value) (at most max; each DATA_PATH_MAX bytes), whether
 * they exist or not. */
#define DATA_PATH_MAX 4096
int data_source_paths(int kind, const char *dir, int test, char (*paths)[DATA_PATH_MAX], int max);
/* Source files read (data_read_file calls) by this process so far: a test's
 * proof that a cache hit parses nothing. */
long data_source_reads(void);
/* "fashion-mnist", "mnist", "cifar10". */
const char *data_kind_name(int kind);

/* Default directory of each data set. */
const char *data_default_dir(int kind);

#endif
