/* tbexport: `ctune export EXP --format tensorboard --output DIR` — an
 * experiment as TensorBoard event files (common/tfevents.c):
 *   DIR/events.out.tfevents.*          the HParams experiment: every config
 *                                      key's domain and every metric's name;
 *   DIR/<trial name>/events.out.tfevents.*   per trial: the HParams session
 *       start (its config values), every numeric metric of every result as a
 *       scalar at step = the experiment's time attribute, and the session
 *       end (its status).
 * Nested config and result objects are flattened with '/' ("opt/lr"). */
#ifndef CTUNE_CLI_TBEXPORT_H
#define CTUNE_CLI_TBEXPORT_H

#include <cJSON.h>
#include <stddef.h>

struct tbexport_stats {
  long long runs, scalars;
};

/* experiment: GET /experiments/ID; trials: the array or {"trials": [...]};
 * results: {"results": [{"trial_id", "result"}...]} (may be NULL). 0, or a
 * negative errno with msg naming what failed. */
int tbexport_write(const char *dir, const cJSON *experiment, const cJSON *trials,
                   const cJSON *results, struct tbexport_stats *st, char *msg, size_t msglen);

/* The CLI's end of it: checks dir, writes, prints what it wrote and how to
 * view it; returns a CLI exit code (exitcode.h). */
int tbexport_cmd(const char *dir, const cJSON *experiment, const cJSON *trials,
                 const cJSON *results);

#endif
