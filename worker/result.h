/* Decides whether one stdout line of a trial is a result and extracts it. */
#ifndef CTUNE_WORKER_RESULT_H
#define CTUNE_WORKER_RESULT_H

#include <errno.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* A line that starts with '{' but is not one valid JSON object (bad syntax,
 * trailing garbage), or whose time attribute is not a finite number: it looks
 * like a result and is not one. The caller logs a warning naming the trial. */
#define RESULT_MALFORMED (-EBADMSG)

/* A line is a result when it is a JSON object whose time_attr member is a
 * finite number. The non-finite tokens that Python's json.dumps and NumPy
 * print (NaN, -NaN, Infinity, -Infinity, nan, inf, ...) are read as null.
 * Returns 1 and *out = a new flat object holding only the line's numeric and
 * null members (what POST /results accepts; numbers exactly as parsed, so a
 * printer that round-trips doubles forwards them bit for bit), with *t set
 * to the time value; 0 when the line is plain log output (or a JSON object
 * without the time attribute); RESULT_MALFORMED; -ENOMEM. */
int result_parse_line(const char *line, size_t len, const char *time_attr, cJSON **out, double *t);

/* As result_parse_line; with allow_missing, a JSON object holding at least
 * one number but no time attribute is a result too, with *t = NAN: the
 * caller numbers it (result_fill). Used when the time attribute is
 * training_iteration (Ray's habit: results are numbered for the script). */
int result_parse_line_opt(const char *line, size_t len, const char *time_attr, int allow_missing,
                          cJSON **out, double *t);

/* The reserved member RESULT_CKPT_KEY names the checkpoint file saved at a
 * line (docs/protocol.md#checkpoints-in-band): {"ino": N, "size": S} from
 * the stat of the checkpoint.bin the trial renamed into place before it
 * printed the line, and optionally "training_iteration" (a line without a
 * result: a checkpoint of the last result printed). The worker never
 * forwards it: it is not a metric. */
#define RESULT_CKPT_KEY "_checkpoint"
enum result_ckpt_state {
  RESULT_CKPT_NONE = 0, /* no such member */
  RESULT_CKPT_OK,
  RESULT_CKPT_BAD, /* present but not {"ino": N, "size": S, ...} of whole numbers */
};
struct result_ckpt {
  enum result_ckpt_state state;
  unsigned long long ino;
  long long size;
  int has_iter; /* "training_iteration" given as a finite number */
  double iter;
};

/* As result_parse_line_opt, and *ck says whether the line (a result or
 * not: a JSON object printed alone) carries RESULT_CKPT_KEY; *out never
 * holds it. ck is left RESULT_CKPT_NONE for a RESULT_MALFORMED line. */
int result_parse_line_ckpt(const char *line, size_t len, const char *time_attr, int allow_missing,
                           cJSON **out, double *t, struct result_ckpt *ck);

/* One attempt's clock and numbering
 * (docs/protocol.md#results-the-worker-fills-in). Set start_iter, start_total and started_mono when
 * the trial starts. */
struct result_clock {
  double start_total;  /* CTUNE_START_TIME_TOTAL_S */
  double started_mono; /* monotonic seconds when the trial started */
  double prev_mono;    /* monotonic seconds of the previous result */
  double prev_iter;    /* the previous training_iteration (CTUNE_START_ITERATION first) */
  long nresults;
};

/* Fills in what the trial did not report, in this order: training_iteration
 * (previous + 1, when the time attribute is training_iteration),
 * time_this_iter_s, time_total_s (start_total + this attempt's elapsed
 * seconds), timestamp (integer Unix seconds). *tv = the result's time value.
 * 0; -ENOMEM; -EINVAL when the time attribute is still not a number. */
int result_fill(cJSON *flat, const char *time_attr, struct result_clock *c, double now_mono,
                double now_wall, double *tv);

/* NULL when flat has `metric` (or metric is NULL/empty); else the contract's
 * error text, malloc'ed: "result has no metric 'M' (the experiment's metric);
 * it reported: k1, k2". metric may list several objectives separated by
 * commas (CTUNE_METRICS): the first one missing is named, "(one of the
 * experiment's metrics a, b)". NULL on OOM too (the caller checks metric
 * itself). */
char *result_missing_metric(const cJSON *flat, const char *metric);

/* The strings of a JSON array joined by commas, malloc'ed into *out (NULL
 * when arr is not a non-empty array of strings). 0 or -ENOMEM. Metric names
 * hold no comma (server/core/spec.c), so the list reads back unambiguously. */
int result_join_names(const cJSON *arr, char **out);

/* The metrics the first result of a lease must carry, comma-separated and
 * malloc'ed into *out (NULL: none): every objective ("metrics", else
 * "metric"), then each metric of "constraint_metrics" (outcome
 * constraints) not listed yet. 0 or -ENOMEM. */
int result_required_metrics(const cJSON *lease, char **out);

/* line[0..len) with every non-finite token standing as a value outside a
 * string replaced by null. malloc'ed, NUL-terminated, *out_len its length;
 * NULL on OOM. */
char *result_fix_nonfinite(const char *line, size_t len, size_t *out_len);

#endif
