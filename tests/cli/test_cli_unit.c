/* Unit tests of the ctune CLI's pure parts: argument parsing, config files,
 * the reporter (golden text with a fixed clock, width and trials), trial
 * events, the JSON reporter, CSV/JSON export, token files, exit codes. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "config.h"
#include "exitcode.h"
#include "export.h"
#include "http.h"
#include "report.h"
#include "sbuf.h"
#include "text.h"

#ifndef CLI_TEST_DIR
#error CLI_TEST_DIR must name tests/cli
#endif

/* 2026-11-18 11:08:20 UTC; the fixtures' experiments start 100 s before. */
#define NOW 1795000100.0

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  if (buf) buf[n] = '\0';
  fclose(f);
  return buf;
}

static cJSON *fixture(const char *name) {
  char path[512];
  snprintf(path, sizeof(path), "%s/fixtures/%s", CLI_TEST_DIR, name);
  char *text = slurp(path);
  ck_assert_msg(text != NULL, "cannot read %s", path);
  cJSON *doc = cJSON_Parse(text);
  free(text);
  ck_assert_msg(doc != NULL, "bad JSON in %s", path);
  return doc;
}

/* Compares text with golden/<name>; CTUNE_UPDATE_GOLDEN=1 rewrites it. */
static void golden(const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof(path), "%s/golden/%s", CLI_TEST_DIR, name);
  if (getenv("CTUNE_UPDATE_GOLDEN")) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return;
  }
  char *want = slurp(path);
  ck_assert_msg(want != NULL, "missing golden file %s", path);
  if (strcmp(want, text)) {
    char actual[600];
    snprintf(actual, sizeof(actual), "%s.actual", name);
    FILE *f = fopen(actual, "wb");
    if (f) {
      fputs(text, f);
      fclose(f);
    }
    free(want);
    ck_abort_msg("output differs from %s (actual output written to ./%s)", path, actual);
  }
  free(want);
}

static void load_asha(struct report_state *s) {
  ck_assert_int_eq(report_state_load(s, fixture("asha_experiment.json"),
                                     fixture("asha_trials.json"), fixture("workers.json")),
                   0);
}

static void load_grid(struct report_state *s) {
  ck_assert_int_eq(
      report_state_load(s, fixture("grid_experiment.json"), fixture("grid_trials.json"), NULL), 0);
}

static int max_line_width(const char *text) {
  int best = 0;
  char *copy = strdup(text);
  for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
    if ((int)text_width(l) > best) best = (int)text_width(l);
  free(copy);
  return best;
}

/* ---- reporter ---- */

START_TEST(report_asha_wide) {
  struct report_state s;
  char *text;
  load_asha(&s);
  ck_assert_int_eq(report_render(&s, NOW, 160, REPORT_MAX_ROWS, &text), 0);
  golden("asha_w160.txt", text);
  /* The spec, independent of the golden file: status order, 20 rows, more. */
  char *run = strstr(text, "| RUNNING"), *pend = strstr(text, "| PENDING");
  char *term = strstr(text, "| TERMINATED");
  ck_assert(run && pend && term && run < pend && pend < term);
  ck_assert_ptr_null(strstr(text, "| ERROR"));
  ck_assert_ptr_nonnull(strstr(text, "… 3 more TERMINATED"));
  ck_assert_ptr_nonnull(strstr(text, "… 2 more ERROR"));
  ck_assert_ptr_nonnull(strstr(text, "Logical resource usage: 2/2 CPUs, 0/0 GPUs (1 worker)"));
  ck_assert_ptr_nonnull(
      strstr(text, "Bracket 0 (stopped 12) cutoffs: iter 1: 0.5123 (n=20) | iter 2: 0.4402 (n=9)"));
  ck_assert_ptr_nonnull(strstr(text, "running for 00:01:40.00"));
  /* The trainer's JSON error line, not the first stderr line. */
  ck_assert_ptr_nonnull(strstr(
      text, "Error: fmnist-asha_00004 (exit code 5): diverged: loss is NaN at iteration 2\n"));
  ck_assert_int_le(max_line_width(text), 160);
  free(text);
  report_state_free(&s);
}
END_TEST

START_TEST(report_asha_narrow_trims_to_width) {
  struct report_state s;
  char *text;
  load_asha(&s);
  ck_assert_int_eq(report_render(&s, NOW, 80, REPORT_MAX_ROWS, &text), 0);
  golden("asha_w80.txt", text);
  ck_assert_int_le(max_line_width(text), 80);
  /* The metric stays; extra metrics go first. */
  ck_assert_ptr_nonnull(strstr(text, "   loss |"));
  ck_assert_ptr_null(strstr(text, "samples_per_s |"));
  ck_assert_ptr_nonnull(strstr(text, "hidden to fit 80 columns"));
  free(text);
  /* 120 columns (the default off a terminal): throughput and training loss
   * go before the other metrics, which go before the params. */
  ck_assert_int_eq(report_render(&s, NOW, 120, REPORT_MAX_ROWS, &text), 0);
  golden("asha_w120.txt", text);
  ck_assert_int_le(max_line_width(text), 120);
  /* The id column (for `ctune logs ID`) costs the accuracy column here. */
  ck_assert_ptr_nonnull(strstr(text, "| id | Trial name "));
  ck_assert_ptr_nonnull(
      strstr(text, "hidden to fit 120 columns: accuracy test_accuracy train_loss samples_per_s)"));
  free(text);
  ck_assert_int_eq(report_render(&s, NOW, 40, REPORT_MAX_ROWS, &text), 0);
  golden("asha_w40.txt", text);
  ck_assert_int_le(max_line_width(text), 40);
  free(text);
  report_state_free(&s);
}
END_TEST

START_TEST(report_all_rows) {
  struct report_state s;
  char *text;
  load_asha(&s);
  ck_assert_int_eq(report_render_table(&s, 0, 0, &text), 0);
  ck_assert_ptr_null(strstr(text, "more"));
  int rows = 0;
  for (char *p = text; (p = strstr(p, "| fmnist-asha_")); p++) rows++;
  ck_assert_int_eq(rows, 25);
  free(text);
  report_state_free(&s);
}
END_TEST

/* Outcome constraints: an infeasible trial says so in the status column
 * and in ctune trial, with its violation; a feasible one in ctune trial. */
START_TEST(report_infeasible) {
  struct report_state s;
  char *text;
  cJSON *e = cJSON_Parse("{\"id\":1,\"name\":\"con\",\"status\":\"TERMINATED\","
                         "\"metric\":\"loss\",\"mode\":\"min\",\"num_trials\":2,"
                         "\"counts\":{\"TERMINATED\":2}}");
  cJSON *ts =
      cJSON_Parse("{\"trials\":[{\"id\":1,\"name\":\"con_00000\",\"status\":\"TERMINATED\","
                  "\"iteration\":1,\"last_result\":{\"loss\":0.1,\"mem\":500},\"feasible\":false,"
                  "\"violation\":400},{\"id\":2,\"name\":\"con_00001\",\"status\":\"TERMINATED\","
                  "\"iteration\":1,\"last_result\":{\"loss\":0.3,\"mem\":50},\"feasible\":true,"
                  "\"violation\":0}]}");
  ck_assert_int_eq(report_state_load(&s, e, ts, NULL), 0);
  ck_assert_int_eq(report_render_table(&s, 160, 0, &text), 0);
  char *row0 = strstr(text, "con_00000"), *row1 = strstr(text, "con_00001");
  ck_assert_ptr_nonnull(row0);
  ck_assert_ptr_nonnull(row1);
  char *bad = strstr(text, "TERMINATED infeasible");
  ck_assert_msg(bad && bad > row0 && bad < row1, "%s", text);
  ck_assert_ptr_null(strstr(row1, "infeasible"));
  free(text);
  const cJSON *arr = cJSON_GetObjectItem(ts, "trials");
  ck_assert_int_eq(report_trial_detail(cJSON_GetArrayItem(arr, 0), NULL, NULL, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "Feasible: no (total violation 400)\n"));
  free(text);
  ck_assert_int_eq(report_trial_detail(cJSON_GetArrayItem(arr, 1), NULL, NULL, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "Feasible: yes (meets every constraint)\n"));
  free(text);
  report_state_free(&s);
}
END_TEST

/* Why an experiment ended early is shown under its status line;
 * the table's first column is the trial's numeric id. */
START_TEST(report_end_reason_and_ids) {
  struct report_state s;
  char *text;
  cJSON *exp = fixture("grid_experiment.json");
  cJSON_ReplaceItemInObjectCaseSensitive(exp, "status", cJSON_CreateString("CANCELLED"));
  cJSON_AddStringToObject(exp, "end_reason", "fail_fast: trial 11 (grid_00001) failed: diverged");
  ck_assert_int_eq(report_state_load(&s, exp, fixture("grid_trials.json"), NULL), 0);
  ck_assert_int_eq(report_render(&s, NOW, 100, REPORT_MAX_ROWS, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "'grid': CANCELLED (maximize accuracy)\n"
                                     "Ended: fail_fast: trial 11 (grid_00001) failed: diverged\n"));
  ck_assert_ptr_nonnull(strstr(text, "| id | Trial name "));
  ck_assert_ptr_nonnull(strstr(text, "| 11 | grid_00001 "));
  free(text);
  report_state_free(&s);
  load_grid(&s);
  ck_assert_int_eq(report_render(&s, NOW, 100, REPORT_MAX_ROWS, &text), 0);
  ck_assert_ptr_null(strstr(text, "Ended:"));
  free(text);
  report_state_free(&s);
}
END_TEST

/* An experiment that ended with every trial in ERROR is not shown as a
 * plain TERMINATED; one with a single good trial is. */
START_TEST(report_all_error_is_failed) {
  cJSON *e = cJSON_Parse("{\"id\":1,\"name\":\"x\",\"status\":\"TERMINATED\",\"counts\":{"
                         "\"PENDING\":0,\"RUNNING\":0,\"PAUSED\":0,\"TERMINATED\":0,\"ERROR\":3}}");
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(report_exp_all_error(e), 1);
  ck_assert_str_eq(report_exp_status(e), "FAILED");
  cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(e, "counts"), "TERMINATED",
                                         cJSON_CreateNumber(1));
  ck_assert_int_eq(report_exp_all_error(e), 0);
  ck_assert_str_eq(report_exp_status(e), "TERMINATED");
  cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(e, "counts"), "TERMINATED",
                                         cJSON_CreateNumber(0));
  cJSON_ReplaceItemInObjectCaseSensitive(e, "status", cJSON_CreateString("RUNNING"));
  ck_assert_str_eq(report_exp_status(e), "RUNNING"); /* not over yet */
  cJSON_ReplaceItemInObjectCaseSensitive(e, "status", cJSON_CreateString("CANCELLED"));
  ck_assert_str_eq(report_exp_status(e), "CANCELLED");
  cJSON_Delete(e);
  /* The status block says it. */
  struct report_state s;
  char *text;
  cJSON *exp = fixture("grid_experiment.json");
  cJSON *counts = cJSON_GetObjectItem(exp, "counts");
  cJSON *c;
  cJSON_ArrayForEach(c, counts) cJSON_SetNumberValue(c, strcmp(c->string, "ERROR") ? 0 : 4);
  ck_assert_int_eq(report_state_load(&s, exp, fixture("grid_trials.json"), NULL), 0);
  ck_assert_int_eq(report_render(&s, NOW, 120, REPORT_MAX_ROWS, &text), 0);
  ck_assert_ptr_nonnull(
      strstr(text, "'grid': FAILED (every trial ended in ERROR) (maximize accuracy)\n"));
  free(text);
  report_state_free(&s);
  /* The server's best (trial 11, accuracy 0.91) ended in ERROR: the status
   * block names the best of the others (trial 10, 0.85); none: no line. */
  load_grid(&s);
  for (size_t i = 0; i < s.ntrials; i++)
    if (s.trials[i].id == 11) s.trials[i].status = "ERROR";
  ck_assert_int_eq(report_render(&s, NOW, 120, REPORT_MAX_ROWS, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "Current best trial: grid_00000 with accuracy=0.85 "));
  free(text);
  for (size_t i = 0; i < s.ntrials; i++) s.trials[i].status = "ERROR";
  ck_assert_int_eq(report_render(&s, NOW, 120, REPORT_MAX_ROWS, &text), 0);
  ck_assert_ptr_null(strstr(text, "Current best trial"));
  free(text);
  report_state_free(&s);
}
END_TEST

START_TEST(report_grid_finished) {
  struct report_state s;
  char *text;
  load_grid(&s);
  ck_assert_int_eq(report_render(&s, NOW + 99999, 100, REPORT_MAX_ROWS, &text), 0);
  golden("grid_w100.txt", text);
  /* An ended experiment's running time stops at ended_at. */
  ck_assert_ptr_nonnull(strstr(text, "running for 01:02:05.50"));
  ck_assert_ptr_nonnull(strstr(text, "Scheduler: FIFO"));
  ck_assert_ptr_nonnull(
      strstr(text, "Current best trial: grid_00001 with accuracy=0.91 and params={lr=0.01}"));
  free(text);
  report_state_free(&s);
}
END_TEST

START_TEST(report_events_lines) {
  struct report_state prev, cur;
  char *text;
  load_asha(&prev);
  load_asha(&cur);
  /* Make three things happen between the polls. */
  int done = 0, early = 0, started = 0;
  for (size_t i = 0; i < prev.ntrials; i++) {
    struct report_trial *p = &prev.trials[i], *c = &cur.trials[i];
    if (!strcmp(c->status, "TERMINATED") && !c->stopped_early && !done++) p->status = "RUNNING";
    if (!strcmp(c->status, "TERMINATED") && c->stopped_early && !early++) p->status = "RUNNING";
    if (!strcmp(c->status, "ERROR")) p->status = "RUNNING";
    if (!strcmp(c->status, "RUNNING")) {
      p->status = "PENDING";
      if (started++)
        p->iteration = 3; /* had progress: a resume */
      else
        p->iteration = 0; /* a fresh start */
    }
    /* Started and ended between two polls: both lines. */
    if (c->id == 3) {
      p->status = "PENDING";
      p->iteration = 0;
    }
    if (!strcmp(c->status, "PENDING") && c->id == 18) p->status = "RUNNING";
  }
  ck_assert_int_eq(report_events(&prev, &cur, &text), 0);
  golden("events.txt", text);
  ck_assert_ptr_nonnull(strstr(text, "started with config {"));
  ck_assert_ptr_nonnull(
      strstr(text, "Trial fmnist-asha_00020 resumed at iteration 3 with config {"));
  ck_assert_ptr_nonnull(
      strstr(text, "Trial fmnist-asha_00002 started with config {l1=128, l2=8, lr=0.00130976, "
                   "batch_size=2, momentum=0.9}\n"
                   "Trial fmnist-asha_00002 stopped early by the scheduler at iteration 1:"));
  ck_assert_ptr_nonnull(strstr(text, "completed after 10 iterations: loss="));
  ck_assert_ptr_nonnull(strstr(text, "stopped early by the scheduler at iteration"));
  ck_assert_ptr_nonnull(strstr(text, "errored at iteration"));
  ck_assert_ptr_nonnull(strstr(text, "is pending again (was RUNNING)"));
  free(text);
  /* No previous state: nothing to say. */
  ck_assert_int_eq(report_events(NULL, &cur, &text), 0);
  ck_assert_str_eq(text, "");
  free(text);
  ck_assert_int_eq(report_events(&cur, &cur, &text), 0);
  ck_assert_str_eq(text, "");
  free(text);
  report_state_free(&prev);
  report_state_free(&cur);
}
END_TEST

/* ---- a watch's later looks: only the trials changed since ---- */

static cJSON *merge_trial(int id, const char *status, int iter) {
  char text[512];
  snprintf(text, sizeof(text),
           "{\"id\": %d, \"name\": \"m_%05d\", \"status\": \"%s\", \"config\": {\"x\": %d}, "
           "\"iteration\": %d, \"last_result\": %s}",
           id, id, status, id, iter, iter ? "{\"training_iteration\": 1, \"loss\": 0.5}" : "null");
  cJSON *t = cJSON_Parse(text);
  ck_assert_ptr_nonnull(t);
  return t;
}

/* {"trials": [...], "last_seq": seq} of the trials given as id, status, iteration. */
static cJSON *merge_doc(long long seq, int n, const int *ids, const char *const *st,
                        const int *iter) {
  cJSON *d = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(d, "trials");
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, merge_trial(ids[i], st[i], iter[i]));
  cJSON_AddNumberToObject(d, "last_seq", (double)seq);
  return d;
}

static cJSON *merge_exp(void) {
  return cJSON_Parse("{\"id\": 1, \"name\": \"m\", \"status\": \"RUNNING\", \"metric\": \"loss\", "
                     "\"mode\": \"min\", \"num_trials\": 6, \"counts\": {}}");
}

/* Trial 2 ended, 4 and 5 were made and started, in change order (5 first):
 * the merged state is the one a whole read gives, its events are those of
 * two whole reads, and prev stays readable until it is freed. */
START_TEST(report_merge_changed_trials) {
  struct report_state prev, cur, full;
  char *got, *want, *ev;
  int ids0[] = {1, 2, 3}, it0[] = {1, 0, 0};
  const char *st0[] = {"TERMINATED", "RUNNING", "RUNNING"};
  ck_assert_int_eq(report_state_load(&prev, merge_exp(), merge_doc(10, 3, ids0, st0, it0), NULL),
                   0);
  ck_assert(report_state_mergeable(&prev));
  int ids1[] = {5, 2, 4}, it1[] = {0, 1, 0};
  const char *st1[] = {"RUNNING", "TERMINATED", "RUNNING"};
  ck_assert_int_eq(
      report_state_merge(&cur, &prev, merge_exp(), merge_doc(14, 3, ids1, st1, it1), NULL), 0);
  int ids2[] = {1, 2, 3, 4, 5}, it2[] = {1, 1, 0, 0, 0};
  const char *st2[] = {"TERMINATED", "TERMINATED", "RUNNING", "RUNNING", "RUNNING"};
  ck_assert_int_eq(report_state_load(&full, merge_exp(), merge_doc(14, 5, ids2, st2, it2), NULL),
                   0);
  ck_assert_int_eq(cur.last_seq, 14);
  ck_assert_int_eq(cur.ntrials, 5);
  for (size_t i = 0; i < cur.ntrials; i++) {
    ck_assert_int_eq(cur.trials[i].id, full.trials[i].id);
    ck_assert_str_eq(cur.trials[i].status, full.trials[i].status);
  }
  ck_assert_int_eq(report_render(&cur, 1e9, 120, REPORT_MAX_ROWS, &got), 0);
  ck_assert_int_eq(report_render(&full, 1e9, 120, REPORT_MAX_ROWS, &want), 0);
  ck_assert_str_eq(got, want);
  free(got);
  free(want);
  ck_assert_int_eq(report_events(&prev, &cur, &ev), 0);
  ck_assert_str_eq(ev, "Trial m_00002 completed after 1 iteration: loss=0.5\n"
                       "Trial m_00004 started with config {x=4}\n"
                       "Trial m_00005 started with config {x=5}\n");
  free(ev);
  report_state_free(&prev);
  report_state_free(&cur);
  /* A PENDING trial's pending_reason is fresh only in a whole read; a
   * list without last_seq cannot be followed. */
  full.trials[3].status = "PENDING";
  ck_assert(!report_state_mergeable(&full));
  full.trials[3].status = "RUNNING";
  full.last_seq = -1;
  ck_assert(!report_state_mergeable(&full));
  report_state_free(&full);
  /* Nothing changed: the same trials, at the new last_seq. */
  ck_assert_int_eq(report_state_load(&prev, merge_exp(), merge_doc(10, 3, ids0, st0, it0), NULL),
                   0);
  ck_assert_int_eq(
      report_state_merge(&cur, &prev, merge_exp(), merge_doc(11, 0, NULL, NULL, NULL), NULL), 0);
  ck_assert_int_eq(cur.ntrials, 3);
  ck_assert_int_eq(cur.last_seq, 11);
  ck_assert_str_eq(cur.trials[2].status, "RUNNING");
  report_state_free(&prev);
  report_state_free(&cur);
  /* A changed list of the wrong shape: refused, prev untouched. */
  ck_assert_int_eq(report_state_load(&prev, merge_exp(), merge_doc(10, 3, ids0, st0, it0), NULL),
                   0);
  ck_assert_int_eq(
      report_state_merge(&cur, &prev, merge_exp(), cJSON_Parse("{\"trials\": [3]}"), NULL),
      -EINVAL);
  ck_assert_int_eq(prev.ntrials, 3);
  ck_assert_str_eq(prev.trials[2].status, "RUNNING");
  report_state_free(&prev);
}
END_TEST

/* The event stream's frames are scanned for the member that says whose
 * they are, not parsed; what the scan cannot read is parsed. */
START_TEST(watch_frames_told_apart) {
  long long ids[] = {4, 7, 9};
  int urgent = 0;
  const char *other = "{\"id\": 8, \"name\": \"a\\\"},{\\\"experiment_id\\\": 1\", \"config\": "
                      "{\"experiment_id\": 1, \"l\": [1, {\"x\": \"}\"}]}, \"experiment_id\": 2, "
                      "\"status\": \"RUNNING\"}";
  ck_assert_int_eq(watch_frame_relevant("trial", other, 1, ids, 3, &urgent), 0);
  ck_assert_int_eq(watch_frame_relevant("trial", other, 2, ids, 3, &urgent), 1);
  ck_assert_int_eq(urgent, 0);
  /* an escaped quote, a nested object's commas: not the top level */
  ck_assert_int_eq(watch_frame_relevant("trial",
                                        "{\"name\": \"x\\\", \\\"experiment_id\\\": 1, "
                                        "\\\"y\\\": \\\"\", \"experiment_id\": 2}",
                                        1, ids, 3, &urgent),
                   0);
  ck_assert_int_eq(watch_frame_relevant("trial",
                                        "{\"config\": {\"a\": 1, \"experiment_id\": 1}, "
                                        "\"experiment_id\": 2}",
                                        1, ids, 3, &urgent),
                   0);
  ck_assert_int_eq(watch_frame_relevant("result", "{\"trial_id\":7,\"seq\":3,\"result\":{}}", 2,
                                        ids, 3, &urgent),
                   1);
  ck_assert_int_eq(watch_frame_relevant("result",
                                        "{\"trial_id\": 8, \"result\": {\"trial_id\": 7}}", 2, ids,
                                        3, &urgent),
                   0);
  ck_assert_int_eq(watch_frame_relevant("worker", "{\"id\": 5}", 2, ids, 3, &urgent), 1);
  ck_assert_int_eq(
      watch_frame_relevant("experiment", "{\"id\": 2, \"status\": \"PAUSED\"}", 2, ids, 3, &urgent),
      1);
  ck_assert_int_eq(urgent, 0);
  ck_assert_int_eq(watch_frame_relevant("experiment", "{\"id\": 2, \"status\": \"CANCELLED\"}", 2,
                                        ids, 3, &urgent),
                   1);
  ck_assert_int_eq(urgent, 1);
  ck_assert_int_eq(watch_frame_relevant("experiment", "{\"id\": 3, \"status\": \"CANCELLED\"}", 2,
                                        ids, 3, &urgent),
                   0);
  ck_assert_int_eq(urgent, 0);
  /* deleted: no status, parsed, and the end all the same */
  ck_assert_int_eq(
      watch_frame_relevant("experiment", "{\"id\": 2, \"deleted\": true}", 2, ids, 3, &urgent), 1);
  ck_assert_int_eq(urgent, 1);
  /* a key the scan does not match (an escape in it): parsed */
  ck_assert_int_eq(
      watch_frame_relevant("trial", "{\"experiment\\u005fid\": 1}", 2, ids, 3, &urgent), 0);
  ck_assert_int_eq(watch_frame_relevant("trial", "not json", 2, ids, 3, &urgent), 1);
  ck_assert_ptr_null(watch_json_member("[1]", "id"));
  ck_assert_ptr_null(watch_json_member("{\"a\": [1, 2}", "id"));
  ck_assert_str_eq(watch_json_member("{ \"a\" : { \"id\": 1 } , \"id\" : 5 }", "id"), "5 }");
}
END_TEST

/* ---- visible decisions ---- */

static void load_decisions(struct report_state *s) {
  ck_assert_int_eq(report_state_load(s, fixture("decisions_experiment.json"),
                                     fixture("decisions_trials.json"), NULL),
                   0);
}

/* `ctune trials` and the reporter: PAUSED rows after PENDING, the reason
 * column cut to REPORT_REASON_COLS with "…", dropped before iter/time. */
START_TEST(report_reason_column) {
  struct report_state s;
  char *text;
  load_decisions(&s);
  ck_assert_str_eq(s.trials[0].reason, "paused at rung 1 (t=3)");
  ck_assert_ptr_null(s.trials[5].reason);
  ck_assert_int_eq(report_render(&s, NOW, 160, REPORT_MAX_ROWS, &text), 0);
  golden("decisions_w160.txt", text);
  ck_assert_ptr_nonnull(strstr(text, "(1 RUNNING, 1 PENDING, 2 PAUSED, 2 TERMINATED)"));
  char *pend = strstr(text, "| PENDING"), *paused = strstr(text, "| PAUSED");
  char *term = strstr(text, "| TERMINATED");
  ck_assert(pend && paused && term && pend < paused && paused < term);
  ck_assert_ptr_nonnull(strstr(text, "| reason "));
  ck_assert_ptr_nonnull(strstr(text, " paused at rung 1 (t=3) "));
  ck_assert_ptr_nonnull(strstr(text, " promoted from rung 1 (top 1 of 3) "));
  /* 80 bytes of sentence: cut at 47 columns and an ellipsis. */
  ck_assert_ptr_nonnull(strstr(text, " stopped at t=3: 0.63 worse than the top 1 of 3… "));
  ck_assert_ptr_null(strstr(text, "(cutoff 0.41)"));
  ck_assert_int_le(max_line_width(text), 160);
  free(text);
  /* Narrow: the params go, then the reason shrinks (to 20 columns), then
   * it goes before the total time. */
  ck_assert_int_eq(report_render_table(&s, 100, 0, &text), 0);
  golden("decisions_w100.txt", text);
  ck_assert_ptr_nonnull(strstr(text, "hidden to fit 100 columns: lr momentum)"));
  ck_assert_ptr_nonnull(strstr(text, "| paused at rung 1 (t=3)   "));
  ck_assert_ptr_nonnull(strstr(text, "| stopped at t=3: 0.63 worse t… |"));
  ck_assert_int_le(max_line_width(text), 100);
  free(text);
  ck_assert_int_eq(report_render_table(&s, 80, 0, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "hidden to fit 80 columns: lr momentum reason)"));
  ck_assert_ptr_nonnull(strstr(text, "total time (s)"));
  free(text);
  report_state_free(&s);
  /* No trial with a reason: no column (the ASHA table keeps its shape). */
  load_asha(&s);
  ck_assert_int_eq(report_render_table(&s, 0, 0, &text), 0);
  ck_assert_ptr_null(strstr(text, "reason"));
  free(text);
  report_state_free(&s);
  char buf[64];
  report_fmt_reason("a\nb", 0, buf, sizeof(buf));
  ck_assert_str_eq(buf, "a");
  report_fmt_reason("lr 0.01 → 0.012", 8, buf, sizeof(buf));
  ck_assert_str_eq(buf, "lr 0.01…");
  report_fmt_reason("lr 0.01 → 0.012", 15, buf, sizeof(buf));
  ck_assert_str_eq(buf, "lr 0.01 → 0.012");
}
END_TEST

/* A PAUSED trial that its scheduler then stopped (HyperBand's halving)
 * never ran again: no "resumed" line, only the stop; a trial that started
 * and ended between two polls still gets both lines. */
/* Rule: `ctune run` (it submitted the experiment) tells the trials that
 * started before its first fetch; a watch that attaches retells nothing. */
START_TEST(report_events_first_fetch) {
  struct report_state cur;
  char *text;
  load_asha(&cur);
  ck_assert_int_eq(report_events(report_events_base(1), &cur, &text), 0);
  size_t running = 0;
  for (size_t i = 0; i < cur.ntrials; i++) running += !strcmp(cur.trials[i].status, "RUNNING");
  ck_assert_uint_gt(running, 0);
  size_t told = 0;
  for (const char *q = text; (q = strstr(q, " started with config {")); q++) told++;
  ck_assert_uint_ge(told, running);
  ck_assert_ptr_null(strstr(text, "pending again"));
  free(text);
  ck_assert_int_eq(report_events(report_events_base(0), &cur, &text), 0);
  ck_assert_str_eq(text, "");
  free(text);
  report_state_free(&cur);
}
END_TEST

START_TEST(report_events_paused_then_stopped) {
  struct report_state prev, cur;
  char *text;
  load_decisions(&prev);
  load_decisions(&cur);
  for (size_t i = 0; i < prev.ntrials; i++) {
    struct report_trial *p = &prev.trials[i];
    if (p->id == 41) {
      p->status = "PAUSED";
      p->reason = "paused at rung 1 (t=3)";
    }
    if (p->id == 44) {
      p->status = "PENDING";
      p->iteration = 0;
    }
  }
  ck_assert_int_eq(report_events(&prev, &cur, &text), 0);
  ck_assert_ptr_null(strstr(text, "fmnist-hb_00001 resumed"));
  ck_assert_ptr_nonnull(strstr(
      text, "Trial fmnist-hb_00001 stopped early by the scheduler at iteration 3: loss=0.63 — "
            "stopped at t=3: 0.63 worse than the top 1 of 3 trials at rung 1 (cutoff 0.41)\n"));
  ck_assert_ptr_nonnull(strstr(text, "Trial fmnist-hb_00004 started with config {"));
  ck_assert_ptr_nonnull(strstr(text, "Trial fmnist-hb_00004 completed after 9 iterations"));
  free(text);
  report_state_free(&prev);
  report_state_free(&cur);
}
END_TEST

/* The end-of-trial lines of run/watch say why: stop, pause, promotion,
 * stop rule, and an exploit that changed no status between two polls. */
START_TEST(report_events_reasons) {
  struct report_state prev, cur;
  char *text;
  load_decisions(&prev);
  load_decisions(&cur);
  for (size_t i = 0; i < prev.ntrials; i++) {
    struct report_trial *p = &prev.trials[i];
    p->reason = NULL;
    if (p->id == 40 || p->id == 41 || p->id == 44) p->status = "RUNNING";
    if (p->id == 42) { /* resumed by a promotion */
      p->status = "PAUSED";
      p->reason = "paused at rung 0 (t=1)";
    }
    if (p->id == 43) p->reason = "paused at rung 0 (t=1)"; /* nothing new */
  }
  /* An exploit between two polls: RUNNING before and after. */
  cur.trials[5].status = "RUNNING";
  cur.trials[5].iteration = 6;
  cur.trials[5].reason = "exploited trial 44 at t=6: lr 0.05 → 0.06";
  prev.trials[5].status = "RUNNING";
  ck_assert_int_eq(report_events(&prev, &cur, &text), 0);
  golden("events_reasons.txt", text);
  ck_assert_ptr_nonnull(
      strstr(text, "Trial fmnist-hb_00000 paused at iteration 3 — paused at rung 1 (t=3)\n"));
  ck_assert_ptr_nonnull(strstr(
      text, "Trial fmnist-hb_00001 stopped early by the scheduler at iteration 3: loss=0.63 — "
            "stopped at t=3: 0.63 worse than the top 1 of 3 trials at rung 1 (cutoff 0.41)\n"));
  ck_assert_ptr_nonnull(
      strstr(text, "Trial fmnist-hb_00002 resumed at iteration 5 with config {lr=0.004, "
                   "momentum=0.8} — promoted from rung 1 (top 1 of 3)\n"));
  ck_assert_ptr_nonnull(strstr(text, "Trial fmnist-hb_00004 completed after 9 iterations: loss=0.3 "
                                     "— stop rule: loss 0.3 <= 0.31\n"));
  ck_assert_ptr_nonnull(strstr(
      text, "Trial fmnist-hb_00005 at iteration 6 — exploited trial 44 at t=6: lr 0.05 → 0.06\n"));
  ck_assert_ptr_null(strstr(text, "fmnist-hb_00003"));
  free(text);
  report_state_free(&prev);
  report_state_free(&cur);
}
END_TEST

/* ctune trial: a trial's attempts (a lost worker, the lease that resumed
 * it) are in its history with its decisions, in seq order. */
START_TEST(trial_detail_attempts) {
  cJSON *t = cJSON_Parse(
      "{\"id\":15,\"experiment_id\":1,\"name\":\"x_00014\",\"status\":\"RUNNING\",\"events\":["
      "{\"seq\":40,\"time\":1795000000,\"kind\":\"paused\",\"reason\":\"paused at rung 1 (t=3)\"}],"
      "\"attempts\":[{\"seq\":5,\"time\":1795000000,\"kind\":\"leased\",\"reason\":\"attempt 1 "
      "leased to worker 1 (w1), from the start\"},{\"seq\":30,\"time\":1795000030,\"kind\":"
      "\"lease_lost\",\"reason\":\"attempt 1 on worker 1 (w1) ended at iteration 3: lease expired: "
      "its worker was lost (no heartbeat for 30 s)\"},{\"seq\":50,\"time\":1795000031,\"kind\":"
      "\"leased\",\"reason\":\"attempt 2 leased to worker 2 (w2), resuming from its checkpoint at "
      "iteration 3\"}]}");
  ck_assert_ptr_nonnull(t);
  char *text;
  /* Its error is a trial's stderr: the terminal gets text, not commands. */
  cJSON_AddStringToObject(t, "error", "trial_exit: status 1\n\x1b]0;pwned\x07\x1b[2JBoom\rBang");
  ck_assert_int_eq(report_trial_detail(t, NULL, NULL, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "Error: Boom Bang\n"));
  ck_assert_ptr_null(strstr(text, "Attribution:")); /* it never failed: no line */
  free(text);
  cJSON_AddStringToObject(t, "attribution", "machine");
  ck_assert_int_eq(report_trial_detail(t, NULL, NULL, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "Error: Boom Bang\nAttribution: machine\n"));
  ck_assert_ptr_nonnull(strstr(
      text, "Events (4, times in UTC):\n"
            "  2026-11-18 11:06:40  leased      attempt 1 leased to worker 1 (w1), from the start\n"
            "  2026-11-18 11:07:10  lease_lost  attempt 1 on worker 1 (w1) ended at iteration 3: "
            "lease expired: its worker was lost (no heartbeat for 30 s)\n"
            "  2026-11-18 11:06:40  paused      paused at rung 1 (t=3)\n"
            "  2026-11-18 11:07:11  leased      attempt 2 leased to worker 2 (w2), resuming from "
            "its checkpoint at iteration 3\n"));
  free(text);
  cJSON_Delete(t);
}
END_TEST

/* ctune trial: the detail and its events, exploits from their data. */
START_TEST(trial_detail_events) {
  cJSON *t = fixture("pbt_trial.json"), *e = fixture("pbt_experiment.json");
  cJSON *ts = fixture("pbt_trials.json");
  char *text, line[512];
  ck_assert_int_eq(report_trial_detail(t, e, ts, &text), 0);
  golden("trial_pbt.txt", text);
  ck_assert_ptr_nonnull(
      strstr(text, "Trial fmnist-pbt_00003 (id 63) of experiment 4 'fmnist-pbt': TERMINATED\n"));
  ck_assert_ptr_nonnull(strstr(text, "Reason: stop rule: training_iteration 9 >= 9\n"));
  ck_assert_ptr_nonnull(strstr(text, "Events (3, times in UTC):\n"));
  ck_assert_ptr_nonnull(
      strstr(text, "  2026-11-18 11:07:42  exploited   t=6 exploited trial 61 (fmnist-pbt_00001): "
                   "lr 0.0008 → 0.012, momentum 0.9 → 0.72\n"));
  free(text);
  /* Without the trial list: the donor by id only; without data: the reason. */
  const cJSON *ev = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "events"), 0);
  report_fmt_event(ev, NULL, line, sizeof(line));
  ck_assert_str_eq(line, "t=3 exploited trial 61: lr 0.001 → 0.0008");
  cJSON *ev2 = cJSON_Duplicate(ev, 1);
  cJSON_DeleteItemFromObject(ev2, "data");
  report_fmt_event(ev2, ts, line, sizeof(line));
  ck_assert_str_eq(line, "exploited trial 61 at t=3: lr 0.001 → 0.0008");
  cJSON_Delete(ev2);
  /* An older server: no events key, no events line. */
  cJSON_DeleteItemFromObject(t, "events");
  ck_assert_int_eq(report_trial_detail(t, NULL, NULL, &text), 0);
  ck_assert_ptr_null(strstr(text, "Events"));
  ck_assert_ptr_nonnull(strstr(text, "of experiment 4: TERMINATED\n"));
  free(text);
  cJSON_AddItemToObject(t, "events", cJSON_CreateArray());
  ck_assert_int_eq(report_trial_detail(t, NULL, NULL, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "Events: none"));
  free(text);
  ck_assert_int_eq(report_trial_detail(ts, NULL, NULL, &text), 0); /* an object all the same */
  free(text);
  cJSON *arr = cJSON_CreateArray();
  ck_assert_int_eq(report_trial_detail(arr, NULL, NULL, &text), -EINVAL);
  cJSON_Delete(arr);
  cJSON_Delete(t);
  cJSON_Delete(e);
  cJSON_Delete(ts);
}
END_TEST

START_TEST(report_json_state) {
  struct report_state s;
  load_grid(&s);
  cJSON *j = report_to_json(&s, NOW);
  ck_assert_ptr_nonnull(j);
  char *text = cJSON_Print(j);
  golden("grid_state.json", text);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "trials")), 3);
  free(text);
  cJSON_Delete(j);
  report_state_free(&s);
}
END_TEST

START_TEST(report_rejects_bad_shapes) {
  struct report_state s;
  ck_assert_int_eq(report_state_load(&s, cJSON_CreateArray(), cJSON_CreateArray(), NULL), -EINVAL);
  ck_assert_int_eq(report_state_load(&s, cJSON_CreateObject(), cJSON_CreateObject(), NULL),
                   -EINVAL);
  ck_assert_int_eq(report_state_load(&s, cJSON_CreateObject(), cJSON_Parse("[1]"), NULL), -EINVAL);
  /* An empty experiment renders without a table. */
  ck_assert_int_eq(
      report_state_load(&s, cJSON_Parse("{\"id\":3,\"name\":\"x\",\"status\":\"RUNNING\"}"),
                        cJSON_Parse("{\"trials\":[]}"), NULL),
      0);
  char *text;
  ck_assert_int_eq(report_render(&s, NOW, 80, 20, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, "Number of trials: 0 ()"));
  ck_assert_ptr_null(strstr(text, "+--"));
  free(text);
  report_state_free(&s);
}
END_TEST

START_TEST(fmt_values) {
  char buf[64];
  cJSON *v = cJSON_CreateNumber(64);
  report_fmt_value(v, buf, sizeof(buf));
  ck_assert_str_eq(buf, "64");
  cJSON_SetNumberValue(v, 0.000123456789);
  report_fmt_value(v, buf, sizeof(buf));
  ck_assert_str_eq(buf, "0.000123457");
  cJSON_Delete(v);
  v = cJSON_Parse("{\"a\":[1,2],\"b\":\"s\",\"c\":true}");
  report_fmt_params(v, buf, sizeof(buf));
  ck_assert_str_eq(buf, "a=[1,2], b=s, c=true");
  report_fmt_params(v, buf, 8); /* what does not fit is left out whole */
  ck_assert_str_eq(buf, "a=[1,2]");
  report_fmt_params(v, buf, 7);
  ck_assert_str_eq(buf, "");
  cJSON_Delete(v);
  /* A conditional space's option: its keys under the parameter's name. */
  v = cJSON_Parse("{\"lr\":0.01,\"optimizer\":{\"name\":\"adam\",\"beta1\":0.8046608490301683},"
                  "\"e\":{}}");
  report_fmt_params(v, buf, sizeof(buf));
  ck_assert_str_eq(buf, "lr=0.01, optimizer.name=adam, optimizer.beta1=0.804661, e={}");
  cJSON_Delete(v);
  ck_assert_uint_eq(text_width("… 3"), 3);
  ck_assert_uint_eq(text_prefix_bytes("…abc", 2), 4);
}
END_TEST

/* `ctune logs` prints a trial's output, not the terminal commands in it. */
START_TEST(text_strips_terminal_controls) {
  char s[] = "a\x1b[31mred\x1b[0m\x1b]0;title\x07"
             "b\x1b]8;;http://x\x1b\\c\x1b"
             "7d\x07\x08"
             "e\x7f\tf\r\ng\rh\xc2\x9b"
             "2Ji\xc3\xa9\xc2\xa0\n";
  text_strip_controls(s);
  ck_assert_str_eq(s, "aredbcde\tf\ng\nh2Ji\xc3\xa9\xc2\xa0\n");
  char cut[] = "x\x1b[3";
  text_strip_controls(cut);
  ck_assert_str_eq(cut, "x");
}
END_TEST

/* ---- export ---- */

START_TEST(export_csv_golden) {
  cJSON *trials = fixture("grid_trials.json");
  char *text;
  ck_assert_int_eq(export_csv(trials, &text), 0);
  golden("grid.csv", text);
  /* RFC 4180: a field with a comma or quote is quoted, quotes doubled. */
  ck_assert_ptr_nonnull(strstr(text, ",\"a,b \"\"q\"\"\","));
  ck_assert_ptr_nonnull(
      strstr(text, "trial_id,name,status,stopped_early,iteration,config/lr,config/opt,config/"
                   "note,training_iteration,accuracy,loss,time_total_s,error,attribution\n"));
  free(text);
  ck_assert_int_eq(export_csv(cJSON_GetObjectItem(trials, "last_seq"), &text), -EINVAL);
  cJSON_Delete(trials);
}
END_TEST

/* Trial output and config strings that a spreadsheet would run as formulas
 * are neutralised with a leading '; numbers (a negative loss) are not. */
START_TEST(export_csv_neutralises_formulas) {
  cJSON *trials =
      cJSON_Parse("{\"trials\":[{\"id\":1,\"name\":\"@x\",\"status\":\"ERROR\",\"config\":{\"a\":"
                  "\"=HYPERLINK(1)\",\"b\":\"+1\",\"c\":\"\\tz\",\"d\":\"-2,3\"},\"last_result\":{"
                  "\"loss\":-0.5},\"error\":\"=cmd|' /C calc'!A0\"}]}");
  ck_assert_ptr_nonnull(trials);
  char *text;
  ck_assert_int_eq(export_csv(trials, &text), 0);
  ck_assert_ptr_nonnull(strstr(text, ",'@x,"));
  ck_assert_ptr_nonnull(strstr(text, ",'=HYPERLINK(1),'+1,'\tz,\"'-2,3\","));
  ck_assert_ptr_nonnull(strstr(text, ",-0.5,"));
  ck_assert_ptr_nonnull(strstr(text, ",'=cmd|' /C calc'!A0,\n"));
  free(text);
  cJSON_Delete(trials);
}
END_TEST

/* export --pareto's CSV: one column per objective in the server's order,
 * exact numbers, an empty cell for null, config columns neutralised as
 * export_csv's are (a metric name cannot start a formula: names are
 * [A-Za-z0-9_./-], and '-' is guarded too). */
START_TEST(export_pareto_csv_rows) {
  cJSON *p = cJSON_Parse(
      "{\"metrics\":[\"loss\",\"acc\"],\"modes\":[\"min\",\"max\"],\"trials\":["
      "{\"trial_id\":3,\"status\":\"TERMINATED\",\"config\":{\"lr\":0.1,\"opt\":\"=SUM(1)\"},"
      "\"values\":{\"loss\":0.30000000000000004,\"acc\":-2}},"
      "{\"trial_id\":5,\"status\":\"RUNNING\",\"config\":{\"lr\":1e-5,\"wd\":\"a,b\"},"
      "\"values\":{\"loss\":1,\"acc\":null}}],\"hypervolume\":1}");
  ck_assert_ptr_nonnull(p);
  char *text;
  ck_assert_int_eq(export_pareto_csv(p, &text), 0);
  ck_assert_str_eq(text, "trial_id,status,loss,acc,config/lr,config/opt,config/wd\n"
                         "3,TERMINATED,0.30000000000000004,-2,0.1,'=SUM(1),\n"
                         "5,RUNNING,1,,1e-05,,\"a,b\"\n");
  free(text);
  ck_assert_int_eq(export_pareto_csv(cJSON_GetObjectItem(p, "trials"), &text), -EINVAL);
  ck_assert_ptr_null(text);
  cJSON_Delete(p);
}
END_TEST

START_TEST(export_json_with_results) {
  cJSON *exp = fixture("grid_experiment.json"), *trials = fixture("grid_trials.json");
  cJSON *results = cJSON_Parse(
      "{\"results\":[{\"seq\":1,\"trial_id\":10,\"result\":{\"training_iteration\":1,\"accuracy\":"
      "0.5}},"
      "{\"seq\":2,\"trial_id\":11,\"result\":{\"training_iteration\":1,\"accuracy\":0.6}},"
      "{\"seq\":3,\"trial_id\":10,\"result\":{\"training_iteration\":2,\"accuracy\":0.7}}],\"last_"
      "seq\":3}");
  char *text;
  ck_assert_int_eq(export_json(exp, trials, results, &text), 0);
  cJSON *doc = cJSON_Parse(text);
  ck_assert_ptr_nonnull(doc);
  cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "trials"), 0);
  cJSON *r = cJSON_GetObjectItem(t0, "results");
  ck_assert_int_eq(cJSON_GetArraySize(r), 2);
  ck_assert_double_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(r, 1), "accuracy")->valuedouble, 0.7);
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(
                       cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "trials"), 2), "results")),
                   0);
  ck_assert_int_eq(
      (int)cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "experiment"), "id")->valuedouble, 2);
  cJSON_Delete(doc);
  free(text);
  cJSON *arr = cJSON_CreateArray();
  ck_assert_int_eq(export_json(arr, trials, results, &text), -EINVAL);
  cJSON_Delete(arr);
  cJSON_Delete(exp);
  cJSON_Delete(trials);
  cJSON_Delete(results);
}
END_TEST

/* ---- arguments ---- */

static int parse(struct cli_args *a, char *err, const char *line) {
  char buf[512], *argv[32];
  int argc = 0;
  snprintf(buf, sizeof(buf), "%s", line);
  for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && argc < 31;
       w = strtok_r(NULL, " ", &save))
    argv[argc++] = w;
  argv[argc] = NULL;
  static char keep[512];
  /* Pointers into buf must outlive the call for the caller's checks. */
  memcpy(keep, buf, sizeof(buf));
  for (int i = 0; i < argc; i++) argv[i] = keep + (argv[i] - buf);
  return cli_args_parse(argc, argv, a, err, 256);
}

START_TEST(args_good) {
  struct cli_args a;
  char err[256];
  ck_assert_int_eq(parse(&a, err, "ctune run ex.json --cpus 2 --gpus=0 --json --resume --db x.db"),
                   0);
  ck_assert_int_eq(a.cmd, CMD_RUN);
  ck_assert_str_eq(a.target, "ex.json");
  ck_assert_int_eq(a.cpus, 2);
  ck_assert_int_eq(a.gpus, 0);
  ck_assert(a.json && a.resume);
  ck_assert_str_eq(a.db, "x.db");
  ck_assert_int_eq(parse(&a, err, "ctune run ex.json"), 0);
  ck_assert_int_eq(a.gpus, -1);
  ck_assert_int_eq(
      parse(&a, err,
            "ctune best 12 --metric acc --mode max --scope last-5-avg --server http://h:1"),
      0);
  ck_assert_int_eq(a.cmd, CMD_BEST);
  ck_assert_int_eq(a.id, 12);
  ck_assert_str_eq(a.scope, "last-5-avg");
  ck_assert_str_eq(a.server, "http://h:1");
  ck_assert_int_eq(parse(&a, err, "ctune export 3"), 0);
  ck_assert_str_eq(a.format, "csv");
  ck_assert_int_eq(parse(&a, err, "ctune status --token-file t"), 0);
  ck_assert_int_eq(parse(&a, err, "ctune"), 0);
  ck_assert_int_eq(a.cmd, CMD_HELP);
  ck_assert_int_eq(parse(&a, err, "ctune trials 4 --help"), 0);
  ck_assert_int_eq(a.cmd, CMD_HELP);
  ck_assert_int_eq(parse(&a, err, "ctune submit c.json --dry-run"), 0);
  ck_assert(a.dry_run);
  ck_assert_int_eq(parse(&a, err, "ctune submit c.json"), 0);
  ck_assert(!a.dry_run);
  ck_assert_int_eq(parse(&a, err, "ctune sample c.json"), 0);
  ck_assert(a.cmd == CMD_SUBMIT && a.dry_run);
  /* logs takes a trial id or a trial name (resolved against the server). */
  ck_assert_int_eq(parse(&a, err, "ctune logs 7"), 0);
  ck_assert_int_eq(a.id, 7);
  ck_assert_int_eq(parse(&a, err, "ctune logs quick_00003"), 0);
  ck_assert_int_eq(a.id, 0);
  ck_assert_str_eq(a.target, "quick_00003");
  /* trial takes the same: an id or a name, and --json. */
  ck_assert_int_eq(parse(&a, err, "ctune trial 9 --json"), 0);
  ck_assert(a.cmd == CMD_TRIAL && a.id == 9 && a.json);
  ck_assert_int_eq(parse(&a, err, "ctune trial fmnist-pbt_00003"), 0);
  ck_assert(a.cmd == CMD_TRIAL && a.id == 0);
}
END_TEST

START_TEST(args_bad) {
  static const struct {
    const char *line, *msg;
  } cases[] = {
      {"ctune frobnicate", "unknown command 'frobnicate'"},
      {"ctune run", "run: missing CONFIG"},
      {"ctune run a.json b.json", "run: unexpected argument 'b.json'"},
      {"ctune run a.json --server http://x", "run: unknown option '--server'"},
      {"ctune run a.json --cpus 0", "run: --cpus '0' must be a whole number from 1 to 4096"},
      {"ctune run a.json --cpus", "run: option --cpus needs a value"},
      {"ctune run a.json --json=1", "run: option --json takes no value"},
      {"ctune watch abc", "watch: EXP 'abc' must be a positive whole number"},
      {"ctune watch 0", "watch: EXP '0' must be a positive whole number"},
      {"ctune best 1 --mode up", "best: --mode 'up' must be min or max"},
      {"ctune best 1 --scope last-3-avg", "best: --scope 'last-3-avg' must be one of"},
      {"ctune best 1 --scope", "best: option --scope needs a value"},
      {"ctune export 1 --format xml", "export: --format 'xml' must be csv, json or tensorboard"},
      {"ctune status --server ftp://x", "status: --server 'ftp://x' must start with http://"},
      {"ctune logs", "logs: missing TRIAL"},
      {"ctune logs a/b",
       "logs: TRIAL 'a/b' must be a trial id (a positive whole number) or a trial name"},
      {"ctune trials quick_00003", "trials: EXP 'quick_00003' must be a positive whole number"},
      {"ctune cancel 1 --dry-run", "cancel: unknown option '--dry-run'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct cli_args a;
    char err[256];
    ck_assert_msg(parse(&a, err, cases[i].line) == -EINVAL, "accepted: %s", cases[i].line);
    ck_assert_msg(strstr(err, cases[i].msg) != NULL, "%s: got '%s'", cases[i].line, err);
  }
}
END_TEST

/* ---- config files, tokens, exit codes ---- */

START_TEST(config_errors_name_the_place) {
  char err[256];
  cJSON *doc;
  ck_assert_int_eq(config_parse("{\n  \"name\": \"x\",\n  \"num_samples\": ,\n}", "e.json", &doc,
                                err, sizeof(err)),
                   -EINVAL);
  ck_assert_msg(!strncmp(err, "e.json:3:18: not valid JSON near ', '", 36) ||
                    strstr(err, "e.json:3:"),
                "%s", err);
  ck_assert_int_eq(config_parse("[1, 2]", "e.json", &doc, err, sizeof(err)), -EINVAL);
  ck_assert_str_eq(err, "e.json: an experiment config must be a JSON object");
  ck_assert_int_eq(config_parse("{\"a\": 1", "e.json", &doc, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "e.json:1:"));
  ck_assert_int_eq(config_parse("{} x", "e.json", &doc, err, sizeof(err)), -EINVAL);
  ck_assert_int_eq(config_load("/nonexistent/cfg.json", &doc, err, sizeof(err)), -ENOENT);
  ck_assert_ptr_nonnull(strstr(err, "cannot open config /nonexistent/cfg.json"));
  ck_assert_int_eq(config_parse("{\"name\": \"fmnist asha/1\"}", "e.json", &doc, err, sizeof(err)),
                   0);
  char stem[64];
  config_file_stem(config_name(doc), stem, sizeof(stem));
  ck_assert_str_eq(stem, "fmnist_asha_1");
  cJSON_Delete(doc);
  ck_assert_int_eq(config_parse("{}", "e.json", &doc, err, sizeof(err)), 0);
  ck_assert_str_eq(config_name(doc), "experiment");
  cJSON_Delete(doc);
  config_file_stem("..", stem, sizeof(stem));
  ck_assert_str_eq(stem, "_.");
}
END_TEST

START_TEST(token_files) {
  char path[] = "/tmp/ctune-token-XXXXXX", err[256], *tok;
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "w");
  fputs("# tokens\nworker=w0rk\nadmin = s3cret\n", f);
  fclose(f);
  ck_assert_int_eq(http_read_token_file(path, &tok, err, sizeof(err)), 0);
  ck_assert_str_eq(tok, "s3cret");
  free(tok);
  f = fopen(path, "w");
  fputs("\n  plain-token  \n", f);
  fclose(f);
  ck_assert_int_eq(http_read_token_file(path, &tok, err, sizeof(err)), 0);
  ck_assert_str_eq(tok, "plain-token");
  free(tok);
  f = fopen(path, "w");
  fputs("\n\n", f);
  fclose(f);
  ck_assert_int_eq(http_read_token_file(path, &tok, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "holds no token"));
  unlink(path);
  ck_assert_int_eq(http_read_token_file(path, &tok, err, sizeof(err)), -ENOENT);
}
END_TEST

START_TEST(exit_codes) {
  ck_assert_int_eq(http_exit_code(0), CLI_EXIT_OK);
  ck_assert_int_eq(http_exit_code(HTTP_ERR_UNREACHABLE), 3);
  ck_assert_int_eq(http_exit_code(HTTP_ERR_AUTH), 4);
  ck_assert_int_eq(http_exit_code(HTTP_ERR_NOT_FOUND), 5);
  ck_assert_int_eq(http_exit_code(HTTP_ERR_REJECTED), 1);
  ck_assert_int_eq(http_exit_code(HTTP_ERR_SERVER), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("all");
  tcase_add_test(tc, report_asha_wide);
  tcase_add_test(tc, report_asha_narrow_trims_to_width);
  tcase_add_test(tc, report_all_rows);
  tcase_add_test(tc, report_infeasible);
  tcase_add_test(tc, report_grid_finished);
  tcase_add_test(tc, report_all_error_is_failed);
  tcase_add_test(tc, report_events_lines);
  tcase_add_test(tc, report_merge_changed_trials);
  tcase_add_test(tc, watch_frames_told_apart);
  tcase_add_test(tc, report_reason_column);
  tcase_add_test(tc, report_events_reasons);
  tcase_add_test(tc, report_events_first_fetch);
  tcase_add_test(tc, report_events_paused_then_stopped);
  tcase_add_test(tc, trial_detail_events);
  tcase_add_test(tc, trial_detail_attempts);
  tcase_add_test(tc, report_json_state);
  tcase_add_test(tc, report_rejects_bad_shapes);
  tcase_add_test(tc, fmt_values);
  tcase_add_test(tc, text_strips_terminal_controls);
  tcase_add_test(tc, export_csv_golden);
  tcase_add_test(tc, export_csv_neutralises_formulas);
  tcase_add_test(tc, export_pareto_csv_rows);
  tcase_add_test(tc, report_end_reason_and_ids);
  tcase_add_test(tc, export_json_with_results);
  tcase_add_test(tc, args_good);
  tcase_add_test(tc, args_bad);
  tcase_add_test(tc, config_errors_name_the_place);
  tcase_add_test(tc, token_files);
  tcase_add_test(tc, exit_codes);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
