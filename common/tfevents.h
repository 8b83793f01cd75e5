/* tfevents: TensorBoard event files written in C, shared by `ctune export
 * --format tensorboard` and `ctune-train --tensorboard-dir`.
 *
 * An event file is a sequence of TFRecords (u64 length, masked CRC32C of the
 * length, the data, masked CRC32C of the data; little endian), each holding
 * one serialized tensorboard.Event. The protobuf is encoded by hand (varints
 * and length-delimited fields) so ctune needs no protobuf library; the field
 * numbers are those of TensorBoard's event.proto, summary.proto and
 * histogram.proto (see the comments at each use). */
#ifndef CTUNE_TFEVENTS_H
#define CTUNE_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "sbuf.h"

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes,
 * continuing from crc (0 to start). */
uint32_t tfev_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tfev_mask_crc(uint32_t crc);
/* Base-128 varint of v into out (at most 10 bytes); returns its length. */
size_t tfev_varint(uint64_t v, uint8_t out[10]);

/* A protobuf message is built in a struct sbuf (sbuf.h): the fields below
 * append to it, and its sticky err says at the end whether all did. */

/* Wire types 0 (varint), 1 (fixed64), 2 (length-delimited), 5 (fixed32). */
void tfev_put_varint_field(struct sbuf *b, unsigned field, uint64_t v);
void tfev_put_double(struct sbuf *b, unsigned field, double v);
void tfev_put_float(struct sbuf *b, unsigned field, float v);
void tfev_put_bytes(struct sbuf *b, unsigned field, const void *data, size_t n);
void tfev_put_string(struct sbuf *b, unsigned field, const char *s);
/* A nested message: its bytes as a length-delimited field (an error in the
 * nested buffer carries over). */
void tfev_put_msg(struct sbuf *b, unsigned field, const struct sbuf *msg);
/* A packed repeated double field. */
void tfev_put_packed_doubles(struct sbuf *b, unsigned field, const double *v, size_t n);

/* The bytes of one Summary.Value (summary.proto) for the pieces below; the
 * caller adds it to a Summary with tfev_put_msg(summary, 1, value). */
int tfev_value_scalar(struct sbuf *value, const char *tag, float v);
/* A HistogramProto (histogram.proto) of v[0..n) with `buckets` equal-width
 * buckets between min and max (one bucket when all values are equal). */
int tfev_value_histogram(struct sbuf *value, const char *tag, const float *v, size_t n,
                         int buckets);
/* A value that only carries plugin data (SummaryMetadata.plugin_data) with
 * an empty float tensor, as TensorBoard's own hparams writer does. */
int tfev_value_plugin(struct sbuf *value, const char *tag, const char *plugin_name,
                      const struct sbuf *content);

struct tfev_writer;

/* Creates dir (and its parents) and a new events.out.tfevents.* file in it,
 * whose first event is file_version "brain.Event:2". 0, or a negative errno
 * (-ENOMEM, or the failing mkdir/open's). */
int tfev_open(struct tfev_writer **out, const char *dir, double wall_time);
/* One Event {wall_time, step, summary} whose summary is the given Summary
 * message (a list of values as field 1). */
int tfev_write_summary(struct tfev_writer *w, double wall_time, int64_t step,
                       const struct sbuf *summary);
/* Shorthand: a Summary with one scalar. */
int tfev_write_scalar(struct tfev_writer *w, double wall_time, int64_t step, const char *tag,
                      float v);
/* Pushes buffered records to the file (TensorBoard reads a live file). */
int tfev_flush(struct tfev_writer *w);
/* Flushes, closes and frees (NULL is fine); returns the first write error. */
int tfev_close(struct tfev_writer *w);
/* The file's path (for messages). */
const char *tfev_path(const struct tfev_writer *w);

/* mkdir -p: 0 or a negative errno. */
int tfev_mkdirs(const char *dir);

#endif
