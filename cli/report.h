/* report: the progress reporter as pure functions of an experiment's state
 * (experiment, trials and workers as the REST API gives them), a clock and a
 * width → text or JSON. No I/O: golden tests pin the output. */
#ifndef CTUNE_CLI_REPORT_H
#define CTUNE_CLI_REPORT_H

#include <stddef.h>
#include <cJSON.h>

#define REPORT_MAX_ROWS 20
/* Display columns of the reason column of the trial table ("…" past it). */
#define REPORT_REASON_COLS 48

struct report_trial {
  long long id;
  const char *name; /* borrowed from the trials document */
  const char *status;
  int stopped_early;
  long long iteration;
  double total_time_s;        /* last_result.time_total_s, NaN when absent */
  const cJSON *config;        /* may be NULL */
  const cJSON *last_result;   /* may be NULL */
  const char *error;          /* may be NULL */
  const char *pending_reason; /* may be NULL */
  const char *reason;         /* the scheduler's last decision, may be NULL */
  long long exit_code;        /* -1 when none */
  int infeasible;             /* outcome constraints: "feasible" is false */
};

struct report_state {
  cJSON *experiment;  /* owned: GET /api/v1/experiments/{id} */
  cJSON *trials_doc;  /* owned: GET .../trials ({"trials": [...]}) */
  cJSON *workers_doc; /* owned, may be NULL: GET /api/v1/workers */
  struct report_trial *trials;
  size_t ntrials;
  long long last_seq; /* the trials list's last_seq, -1 when absent */
  int have_workers;
  int workers_alive;
  double cpu_total, cpu_used, gpu_total, gpu_used;
};

/* Takes ownership of the three documents (also on failure; workers may be
 * NULL). Returns 0, -EINVAL when exp or trials have the wrong shape, -ENOMEM. */
int report_state_load(struct report_state *s, cJSON *experiment, cJSON *trials, cJSON *workers);
void report_state_free(struct report_state *s);

/* Whether prev can be brought up to date from the trials changed since it
 * (GET .../trials?since=prev->last_seq): it has a last_seq and no PENDING
 * trial (whose pending_reason changes without a change of the trial). */
int report_state_mergeable(const struct report_state *prev);

/* cur = prev with the trials of `changed` (a since= read: {"trials": [...],
 * "last_seq": N}) in place of theirs and the new ones after them, by id: the
 * list a full read would give. Takes experiment, changed and workers (also
 * on failure). prev's unchanged trials are moved into cur, not copied:
 * prev stays readable (report_events(prev, cur)) until cur is freed; free
 * prev first. Only the changed trials are read again. On failure prev is
 * as it was. 0, -EINVAL (a shape), -ENOMEM. */
int report_state_merge(struct report_state *cur, struct report_state *prev, cJSON *experiment,
                       cJSON *changed, cJSON *workers);

/* The status block and the trial table, every line at most `width` columns.
 * now: Unix seconds. max_rows: table rows before "… N more" lines (0 = all).
 * *out is malloc'd. 0 or -ENOMEM. */
int report_render(const struct report_state *s, double now, int width, int max_rows, char **out);

/* Only the trial table and its notes (`ctune trials`). */
int report_render_table(const struct report_state *s, int width, int max_rows, char **out);

/* One line per trial that started, ended, failed or went back to pending
 * between prev and cur (prev NULL: nothing). *out is malloc'd ("" if none). */
int report_events(const struct report_state *prev, const struct report_state *cur, char **out);

/* What a watch's first fetch is told against: from_start (the watcher
 * submitted the experiment, so every trial was PENDING then) an empty
 * state, so trials that started before that fetch are told too; otherwise
 * NULL (attaching to an experiment under way: its past is not retold). */
const struct report_state *report_events_base(int from_start);

/* The same state as one JSON object (the --json reporter's line); NULL on
 * out of memory. */
cJSON *report_to_json(const struct report_state *s, double now);

/* A config or result value as the table shows it: numbers %.6g (integral
 * ones without a point), strings bare, everything else as compact JSON. */
void report_fmt_value(const cJSON *v, char *buf, size_t len);
/* "preempted: N times, I iterations and S s of work lost" from an
 * experiment's "preemptions"; 0 (buf untouched) when it has none. */
int report_fmt_preemptions(const cJSON *e, char *buf, size_t n);

/* The status to show for an experiment: its "status", except that one
 * that ended TERMINATED with every trial in ERROR shows "FAILED" (as Ray's
 * tune.run raises then). NULL when the object has no status. */
const char *report_exp_status(const cJSON *experiment);
/* Whether the experiment ended with every one of its trials in ERROR (at
 * least one): `ctune run` exits CLI_EXIT_TRIALS_FAILED then. */
int report_exp_all_error(const cJSON *experiment);

/* A decision's reason on one line, at most cols display columns ("…" at the
 * cut; cols 0: whole). */
void report_fmt_reason(const char *reason, size_t cols, char *buf, size_t len);

/* ctune trial ID: one trial (GET /api/v1/trials/{id}: status, reason, config,
 * last result, and its "events" history, PBT exploits shown as the donor and
 * the config keys that changed). experiment and trials (the experiment's
 * trial list, for the donors' names) may be NULL. *out is malloc'd.
 * 0, -EINVAL (not an object) or -ENOMEM. */
int report_trial_detail(const cJSON *trial, const cJSON *experiment, const cJSON *trials,
                        char **out);

/* One event of a trial's history (no time, no newline): "t=6 exploited trial
 * 7 (pbt_00006): lr 0.01 → 0.012" for an exploit with its data, else the
 * event's reason, else its kind. trials as above (may be NULL). */
void report_fmt_event(const cJSON *event, const cJSON *trials, char *buf, size_t len);

/* "l1=64, lr=0.001" for the keys of obj (NULL keys: all), at most len bytes;
 * a nested object's keys as "optimizer.beta1=0.9". */
void report_fmt_params(const cJSON *obj, char *buf, size_t len);

#endif
