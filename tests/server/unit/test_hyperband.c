/* Unit tests of hyperband: Ray's bracket sizes, pausing at a rung until it
 * is complete, halving, resuming the top 1/eta, an error completing a rung,
 * WAIT, agreement with a Python transcription of Ray's HyperBandScheduler
 * (gen_hyperband_vectors.py), and restore from records == uninterrupted. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hyperband.h"
#include "scheduler.h"
#include "validate.h"
#include "vectors.h"

/* Trial ids differ from creation indices, as in the server. */
static int64_t id_of(int64_t idx) { return 1000 + 7 * idx; }

static struct hyperband *make(double max_t, double eta, enum spec_mode mode, int64_t n) {
  struct hyperband *h;
  ck_assert_int_eq(hb_create(max_t, eta, mode, n, &h), 0);
  return h;
}

static void add(struct hyperband *h, int64_t idx) {
  ck_assert_int_eq(hb_add_trial(h, id_of(idx), idx), 0);
}

static enum hb_action result(struct hyperband *h, int64_t idx, double t, double v,
                             struct hb_outcome *o) {
  ck_assert_int_eq(hb_on_result(h, id_of(idx), t, v, o), 0);
  return o->action;
}

/* max_t 81, eta 3: Ray's band of 5 brackets, n = 5, 8, 15, 34, 81 trials
 * starting at r = 81, 27, 9, 3, 1; the 144th trial opens a second band.
 * (150 trials: a last bracket of 2 of its 8, as Ray's partial bracket) */
START_TEST(brackets_as_ray) {
  struct hyperband *h = make(81, 3, SPEC_MODE_MAX, 150);
  static const int n0[] = {5, 8, 15, 34, 81}, r0[] = {81, 27, 9, 3, 1};
  cJSON *st, *b;
  int64_t idx = 0;
  ck_assert_int_eq(hb_state_json(h, &st), 0);
  ck_assert_int_eq(cJSON_GetObjectItem(st, "s_max_1")->valueint, 5);
  b = cJSON_GetObjectItem(st, "brackets");
  ck_assert_int_eq(cJSON_GetArraySize(b), 7); /* 143 + 5 + 2 */
  for (int i = 0; i < 5; i++) {
    cJSON *x = cJSON_GetArrayItem(b, i);
    ck_assert_int_eq(cJSON_GetObjectItem(x, "trials")->valueint, n0[i]);
    ck_assert_int_eq(cJSON_GetObjectItem(x, "rung_t")->valueint, r0[i]);
    ck_assert_int_eq(cJSON_GetObjectItem(x, "halvings_left")->valueint, i);
    for (int k = 0; k < n0[i]; k++) ck_assert_int_eq(hb_bracket_of(h, idx++), i);
  }
  ck_assert_int_eq(idx, 143);
  ck_assert_int_eq(hb_bracket_of(h, 143), 5);
  ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(b, 5), "band")->valueint, 1);
  ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(b, 5), "trials")->valueint, 5);
  ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(b, 6), "trials")->valueint, 2);
  ck_assert_int_eq(hb_bracket_of(h, 148), 6);
  ck_assert_int_eq(hb_bracket_of(h, 150), -EINVAL);
  cJSON_Delete(st);
  hb_free(h);
}
END_TEST

/* max_t 9, eta 3: bracket 0 = trials 0-2 (run to 9), bracket 1 = trials 3-7
 * (rung at 3, then the top 2 run to 9). */
START_TEST(pause_until_rung_complete_then_top_continue) {
  struct hyperband *h = make(9, 3, SPEC_MODE_MAX, 8);
  struct hb_outcome o;
  struct hb_choice c;
  static const double v[] = {0.5, 0.9, 0.1, 0.3};
  for (int i = 0; i < 3; i++) add(h, i); /* running, no result yet */
  for (int i = 3; i < 7; i++) {
    ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &c), 0);
    ck_assert_int_eq(c.kind, HB_NEW);
    add(h, i);
    ck_assert_int_eq(result(h, i, 1, v[i - 3], &o), HB_CONTINUE);
    hb_outcome_clear(&o);
    ck_assert_int_eq(result(h, i, 3, v[i - 3], &o), HB_PAUSE);
    ck_assert_ptr_nonnull(strstr(o.reason, "paused at t=3"));
    ck_assert_ptr_nonnull(o.record);
    hb_outcome_clear(&o);
  }
  /* trial 7 is still to be created: the rung is not complete */
  ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, HB_NEW);
  add(h, 7);
  ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, HB_WAIT);
  /* the last one completes the rung with the best value: it and trial 4
   * (0.9) are the top 2 of 5; 3, 5 and 6 are stopped */
  ck_assert_int_eq(result(h, 7, 3, 1.5, &o), HB_CONTINUE);
  ck_assert_ptr_nonnull(strstr(o.reason, "top 2 of 5"));
  ck_assert_uint_eq(o.nready, 1);
  ck_assert_int_eq(o.ready[0], id_of(4));
  ck_assert_uint_eq(o.nstopped, 3);
  ck_assert_int_eq(o.stopped[0].trial_id, id_of(5));
  ck_assert_int_eq(o.stopped[1].trial_id, id_of(6));
  ck_assert_int_eq(o.stopped[2].trial_id, id_of(3));
  ck_assert_ptr_nonnull(strstr(o.stopped[0].reason, "rank 5 of 5"));
  hb_outcome_clear(&o);
  ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, HB_RESUME);
  ck_assert_int_eq(c.trial_id, id_of(4));
  ck_assert_str_eq(c.reason, "promoted from t=3 in bracket 1 (top 2 of 5)");
  ck_assert_ptr_nonnull(c.record);
  cJSON_Delete(c.record);
  /* taken: nothing else may start */
  ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, HB_WAIT);
  /* the resumed trial continues from its checkpoint (t=4 onward); at
   * max_t (the last rung) each stops */
  ck_assert_int_eq(result(h, 4, 4, 1, &o), HB_CONTINUE);
  hb_outcome_clear(&o);
  ck_assert_int_eq(result(h, 4, 9, 1, &o), HB_STOP);
  ck_assert_int_eq(o.stopped_early, 0);
  hb_outcome_clear(&o);
  ck_assert_int_eq(hb_on_trial_end(h, id_of(4), &o), 0);
  hb_outcome_clear(&o);
  ck_assert_int_eq(result(h, 7, 9, 2, &o), HB_STOP);
  ck_assert_ptr_nonnull(strstr(o.reason, "finished"));
  hb_outcome_clear(&o);
  /* a stopped trial's late result changes nothing */
  ck_assert_int_eq(result(h, 3, 4, 9, &o), HB_STOP);
  ck_assert_ptr_null(o.record);
  hb_outcome_clear(&o);
  hb_free(h);
}
END_TEST

static int not_resumable(void *ctx, int64_t trial_id) {
  (void)ctx;
  (void)trial_id;
  return 0;
}

/* A trial that errors before the rung completes it for the others (Ray's
 * on_trial_remove); NaN ranks last. */
START_TEST(error_completes_rung) {
  struct hyperband *h = make(9, 3, SPEC_MODE_MIN, 8);
  struct hb_outcome o;
  struct hb_choice c;
  static const double v[] = {0.5, NAN, 0.1, 0.3};
  for (int i = 0; i < 8; i++) add(h, i);
  for (int i = 3; i < 7; i++) {
    ck_assert_int_eq(result(h, i, 3, v[i - 3], &o), HB_PAUSE);
    hb_outcome_clear(&o);
  }
  ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, HB_WAIT);
  ck_assert_int_eq(hb_on_trial_end(h, id_of(7), &o), 0);
  ck_assert_ptr_nonnull(o.record);
  ck_assert_uint_eq(o.nready, 2); /* min mode: 0.1 and 0.3 */
  ck_assert_int_eq(o.ready[0], id_of(6));
  ck_assert_int_eq(o.ready[1], id_of(5));
  ck_assert_uint_eq(o.nstopped, 2);
  ck_assert_int_eq(o.stopped[0].trial_id, id_of(4)); /* NaN: last */
  ck_assert_int_eq(o.stopped[1].trial_id, id_of(3));
  hb_outcome_clear(&o);
  /* ending again, or ending a stopped trial, is a no-op */
  ck_assert_int_eq(hb_on_trial_end(h, id_of(7), &o), 0);
  ck_assert_ptr_null(o.record);
  ck_assert_int_eq(hb_on_trial_end(h, id_of(3), &o), 0);
  ck_assert_ptr_null(o.record);
  /* still pause-pending (its lease has not ended): skipped, not taken */
  ck_assert_int_eq(hb_choose(h, 0, not_resumable, NULL, &c), 0);
  ck_assert_int_eq(c.kind, HB_WAIT);
  ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &c), 0);
  ck_assert_int_eq(c.kind, HB_RESUME);
  ck_assert_int_eq(c.trial_id, id_of(5));
  cJSON_Delete(c.record);
  hb_free(h);
}
END_TEST

START_TEST(errors) {
  struct hyperband *h;
  struct hb_outcome o;
  ck_assert_int_eq(hb_create(0.5, 3, SPEC_MODE_MAX, 10, &h), -EINVAL);
  ck_assert_int_eq(hb_create(9, 1, SPEC_MODE_MAX, 10, &h), -EINVAL);
  ck_assert_int_eq(hb_create(9, 3, SPEC_MODE_MAX, 0, &h), -EINVAL);
  ck_assert_int_eq(hb_create(1e9, 1.01, SPEC_MODE_MAX, 10, &h), -EINVAL);
  h = make(9, 3, SPEC_MODE_MAX, 4);
  ck_assert_int_eq(hb_add_trial(h, 5, 4), -EINVAL);
  ck_assert_int_eq(hb_add_trial(h, 5, 0), 0);
  ck_assert_int_eq(hb_add_trial(h, 5, 0), 0);
  ck_assert_int_eq(hb_add_trial(h, 5, 1), -EINVAL);
  ck_assert_int_eq(hb_add_trial(h, 6, 0), -EINVAL);
  ck_assert_int_eq(hb_on_result(h, 99, 1, 1, &o), -ENOENT);
  ck_assert_int_eq(hb_on_result(h, 5, NAN, 1, &o), -EINVAL);
  ck_assert_int_eq(hb_on_trial_end(h, 99, &o), -ENOENT);
  cJSON *bad = cJSON_Parse("{\"e\":\"resume\",\"idx\":0}");
  ck_assert_int_eq(hb_restore(h, 5, bad), -EINVAL); /* not paused */
  cJSON_Delete(bad);
  bad = cJSON_Parse("{\"e\":\"what\",\"idx\":0}");
  ck_assert_int_eq(hb_restore(h, 5, bad), -EINVAL);
  cJSON_Delete(bad);
  hb_free(h);
}
END_TEST

/* validate: Ray's defaults, the plan copied for the bracket layout, errors
 * with path and rule; sched dispatches to the module. */
static int check(const char *sched, struct experiment_spec *sp, struct validate_error *err) {
  char buf[1024];
  cJSON *c;
  int rc;
  snprintf(buf, sizeof buf,
           "{\"metric\": \"loss\", \"mode\": \"min\", \"num_samples\": 20, \"scheduler\": %s,"
           " \"trainable\": {\"type\": \"builtin\", \"model\": \"mlp\", \"dataset\": \"mnist\"}}",
           sched);
  c = cJSON_Parse(buf);
  ck_assert_ptr_nonnull(c);
  memset(sp, 0, sizeof *sp);
  rc = validate_experiment(c, sp, err);
  cJSON_Delete(c);
  return rc;
}

START_TEST(validation_and_dispatch) {
  struct experiment_spec sp;
  struct validate_error err;
  struct sched *s;
  struct sched_outcome o;
  struct sched_choice ch;
  double v = 0.5;
  cJSON *st;
  static const struct {
    const char *sched, *path, *msg;
  } bad[] = {
      {"{\"type\": \"hyperband\", \"grace_period\": 1}", "scheduler.grace_period", "unknown"},
      {"{\"type\": \"hyperband\", \"max_t\": 0.5}", "scheduler.max_t", ">= 1"},
      {"{\"type\": \"hyperband\", \"reduction_factor\": 1}", "scheduler.reduction_factor", "> 1"},
      {"{\"type\": \"hyperband\", \"max_t\": 1e12, \"reduction_factor\": 1.5}",
       "scheduler.reduction_factor", "brackets"},
  };
  ck_assert_int_eq(check("{\"type\": \"hyperband\"}", &sp, &err), 0);
  ck_assert_int_eq(sp.sched.type, SPEC_SCHED_HYPERBAND);
  ck_assert(sp.sched.max_t == 81 && sp.sched.reduction_factor == 3);
  ck_assert_int_eq(sp.sched.num_trials, 20);
  ck_assert_str_eq(sp.sched.time_attr, "training_iteration");
  ck_assert_int_eq(sched_create(&sp.sched, sp.mode, 1, &s), 0);
  ck_assert_int_eq(sched_bracket_for(s, 5), 1);
  ck_assert_int_eq(sched_add_trial(s, 50, 0, NULL), 0);
  ck_assert_int_eq(sched_on_result(s, 50, 81, &v, &o), 0); /* bracket 0: r = 81 */
  ck_assert_int_eq(o.action, SCHED_STOP);
  ck_assert_ptr_nonnull(o.record);
  sched_outcome_clear(&o);
  ck_assert_int_eq(sched_choose(s, 1, NULL, NULL, &ch), 0);
  ck_assert_int_eq(ch.kind, SCHED_CHOOSE_NEW);
  ck_assert_int_eq(sched_state_json(s, &st), 0);
  ck_assert_str_eq(cJSON_GetObjectItem(st, "type")->valuestring, "hyperband");
  ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(st, "brackets")), 3);
  cJSON_Delete(st);
  sched_free(s);
  validate_spec_free(&sp);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    ck_assert_int_ne(check(bad[i].sched, &sp, &err), 0);
    ck_assert_str_eq(err.path, bad[i].path);
    ck_assert_msg(strstr(err.message, bad[i].msg), "case %zu: %s", i, err.message);
    validate_spec_free(&sp);
  }
}
END_TEST

/* --- the transcription's vectors --- */

static double num_or_special(const cJSON *v) {
  if (cJSON_IsString(v))
    return strcmp(v->valuestring, "nan") == 0   ? NAN
           : strcmp(v->valuestring, "inf") == 0 ? INFINITY
                                                : -INFINITY;
  return v->valuedouble;
}

struct rec {
  int64_t trial_id;
  char *json;
};

struct log {
  struct rec *r;
  size_t n;
};

static void log_add(struct log *l, int64_t id, cJSON *record) {
  if (!record) return;
  l->r = realloc(l->r, (l->n + 1) * sizeof *l->r);
  ck_assert_ptr_nonnull(l->r);
  l->r[l->n].trial_id = id;
  l->r[l->n].json = cJSON_PrintUnformatted(record);
  ck_assert_ptr_nonnull(l->r[l->n].json);
  l->n++;
}

static void log_free(struct log *l) {
  for (size_t i = 0; i < l->n; i++) free(l->r[i].json);
  free(l->r);
}

/* A restarted server: a fresh scheduler, the trials it loads (in any
 * order: here newest first), then every record in order. */
/* The case's objectives: 1 for a string mode, else the list's length,
 * each mode into modes. */
static int case_modes(const cJSON *c, enum spec_mode *modes) {
  const cJSON *mode = cJSON_GetObjectItem(c, "mode"), *m;
  int k = 0;
  if (!cJSON_IsArray(mode)) {
    modes[0] = strcmp(mode->valuestring, "max") == 0 ? SPEC_MODE_MAX : SPEC_MODE_MIN;
    return 1;
  }
  cJSON_ArrayForEach(m, mode) {
    modes[k++] = strcmp(m->valuestring, "max") == 0 ? SPEC_MODE_MAX : SPEC_MODE_MIN;
  }
  return k;
}

static struct hyperband *restart(const cJSON *c, enum spec_mode mode, int64_t created,
                                 const struct log *l) {
  enum spec_mode modes[SPEC_MAX_OBJECTIVES];
  int k = case_modes(c, modes);
  struct hyperband *h = make(cJSON_GetObjectItem(c, "max_t")->valuedouble,
                             cJSON_GetObjectItem(c, "reduction_factor")->valuedouble, mode,
                             (int64_t)cJSON_GetObjectItem(c, "num_trials")->valuedouble);
  if (k > 1) ck_assert_int_eq(hb_objectives(h, k, modes), 0);
  for (int64_t i = created - 1; i >= 0; i--) add(h, i);
  for (size_t i = 0; i < l->n; i++) {
    cJSON *r = cJSON_Parse(l->r[i].json);
    ck_assert_int_eq(hb_restore(h, l->r[i].trial_id, r), 0);
    cJSON_Delete(r);
  }
  return h;
}

static void check_ids(const cJSON *want, const int64_t *got, size_t n, const char *what, int k) {
  ck_assert_msg((size_t)cJSON_GetArraySize(want) == n, "event %d: %zu %s, Ray %d", k, n, what,
                cJSON_GetArraySize(want));
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == id_of((int64_t)cJSON_GetArrayItem(want, (int)i)->valuedouble),
                  "event %d: %s[%zu] differs", k, what, i);
}

static void check_outcome(const struct hb_outcome *o, const cJSON *stopped, const cJSON *ready,
                          int k) {
  int64_t ids[512];
  ck_assert(o->nstopped < 512);
  for (size_t i = 0; i < o->nstopped; i++) ids[i] = o->stopped[i].trial_id;
  check_ids(stopped, ids, o->nstopped, "stopped", k);
  check_ids(ready, o->ready, o->nready, "ready", k);
}

/* Several objectives through the sched layer (max_t 3, eta 3: bracket 1
 * holds idx 2-4 from t=1): the halving keeps the top of the non-dominated
 * order and says where each stopped trial ranked. */
START_TEST(sched_several_objectives) {
  struct sched_params p;
  struct sched *s;
  struct sched_outcome o;
  const double v[3][2] = {{0.5, 2}, {0.6, 5}, {0.2, 4}}; /* (loss, size), both min */
  memset(&p, 0, sizeof p);
  p.type = SPEC_SCHED_HYPERBAND;
  p.has_max_t = 1;
  p.max_t = 3;
  p.reduction_factor = 3;
  p.num_trials = 5;
  p.nobjectives = 2;
  snprintf(p.time_attr, sizeof p.time_attr, "training_iteration");
  ck_assert_int_eq(sched_create(&p, SPEC_MODE_MIN, 1, &s), 0);
  for (int i = 2; i < 5; i++) {
    ck_assert_int_eq(sched_add_trial(s, 10 + i, i, NULL), 0);
    ck_assert_int_eq(sched_on_result(s, 10 + i, 1, v[i - 2], &o), 0);
    if (i < 4) {
      ck_assert_int_eq(o.action, SCHED_PAUSE);
      sched_outcome_clear(&o);
    }
  }
  /* (0.2, 4) first (least loss), (0.5, 2) on its front, (0.6, 5) behind. */
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_uint_eq(o.nended, 2);
  ck_assert_int_eq(o.ended[0].trial_id, 13);
  ck_assert_str_eq(o.ended[0].reason,
                   "stopped at t=1: rank 3 of 3 in bracket 1 at t=1 in "
                   "non-dominated order (front 2 of 2), only the top 1 continue");
  ck_assert_int_eq(o.ended[1].trial_id, 12);
  ck_assert_str_eq(o.ended[1].reason,
                   "stopped at t=1: rank 2 of 3 in bracket 1 at t=1 in "
                   "non-dominated order (front 1 of 2), only the top 1 continue");
  sched_outcome_clear(&o);
  sched_free(s);
}
END_TEST

START_TEST(agrees_with_ray_reference) {
  cJSON *doc = vectors_load(HYPERBAND_RAY_VECTORS), *c;
  int results = 0, pauses = 0, resumes = 0, restarts = 0, others = 0, mo_results = 0, mo_stops = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
    enum spec_mode modes[SPEC_MAX_OBJECTIVES] = {SPEC_MODE_MIN}, m;
    int nobj = case_modes(c, modes);
    const char *mode = nobj > 1 ? "several objectives" : modes[0] == SPEC_MODE_MAX ? "max" : "min";
    m = modes[0];
    struct hyperband *h = restart(c, m, 0, &(struct log){0});
    struct log l = {0};
    int64_t created = 0;
    cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
      const char *op = cJSON_GetArrayItem(e, 0)->valuestring;
      struct hb_outcome o;
      /* every 41st event, continue on a restarted copy */
      if (k % 41 == 40) {
        hb_free(h);
        h = restart(c, m, created, &l);
        restarts++;
      }
      if (strcmp(op, "choose") == 0) {
        const char *want = cJSON_GetArrayItem(e, 1)->valuestring;
        int64_t idx = (int64_t)cJSON_GetArrayItem(e, 2)->valuedouble;
        struct hb_choice ch;
        ck_assert_int_eq(hb_choose(h, 1, NULL, NULL, &ch), 0);
        if (strcmp(want, "new") == 0) {
          ck_assert_msg(ch.kind == HB_NEW, "event %d: choice %d, want new", k, ch.kind);
          ck_assert_int_eq(idx, created);
          add(h, created++);
        } else if (strcmp(want, "resume") == 0) {
          ck_assert_msg(ch.kind == HB_RESUME && ch.trial_id == id_of(idx),
                        "event %d: choice %d/%lld, want resume %lld", k, ch.kind,
                        (long long)ch.trial_id, (long long)id_of(idx));
          log_add(&l, ch.trial_id, ch.record);
          cJSON_Delete(ch.record);
          resumes++;
        } else {
          ck_assert_msg(ch.kind == HB_WAIT, "event %d: choice %d, want wait", k, ch.kind);
        }
      } else if (strcmp(op, "end") == 0) {
        int64_t idx = (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble;
        ck_assert_int_eq(hb_on_trial_end(h, id_of(idx), &o), 0);
        check_outcome(&o, cJSON_GetArrayItem(e, 2), cJSON_GetArrayItem(e, 3), k);
        others += (int)(o.nstopped + o.nready);
        log_add(&l, id_of(idx), o.record);
        hb_outcome_clear(&o);
      } else {
        int64_t idx = (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble;
        double t = cJSON_GetArrayItem(e, 2)->valuedouble;
        const cJSON *jv = cJSON_GetArrayItem(e, 3);
        const char *want = cJSON_GetArrayItem(e, 4)->valuestring;
        enum hb_action a;
        if (nobj > 1) {
          double vs[SPEC_MAX_OBJECTIVES];
          for (int j = 0; j < nobj; j++) vs[j] = num_or_special(cJSON_GetArrayItem(jv, j));
          ck_assert_int_eq(hb_on_result_mo(h, id_of(idx), t, vs, &o), 0);
          a = o.action;
          mo_results++;
          mo_stops += (int)o.nstopped + (a == HB_STOP && o.stopped_early);
        } else {
          a = result(h, idx, t, num_or_special(jv), &o);
        }
        enum hb_action w = strcmp(want, "stop") == 0    ? HB_STOP
                           : strcmp(want, "pause") == 0 ? HB_PAUSE
                                                        : HB_CONTINUE;
        ck_assert_msg(a == w, "%s case, event %d: action %d, Ray says %s", mode, k, a, want);
        check_outcome(&o, cJSON_GetArrayItem(e, 5), cJSON_GetArrayItem(e, 6), k);
        others += (int)(o.nstopped + o.nready);
        log_add(&l, id_of(idx), o.record);
        hb_outcome_clear(&o);
        results++;
        pauses += a == HB_PAUSE;
      }
      k++;
    }
    hb_free(h);
    log_free(&l);
  }
  ck_assert_int_gt(results, 2000);
  ck_assert_int_gt(pauses, 200);
  ck_assert_int_gt(resumes, 100);
  ck_assert_int_gt(others, 300);
  ck_assert_int_gt(restarts, 50);
  /* MO-HyperBand: three cases of two and three objectives. */
  ck_assert_int_gt(mo_results, 1500);
  ck_assert_int_gt(mo_stops, 100);
  cJSON_Delete(doc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("hyperband");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, brackets_as_ray);
  tcase_add_test(tc, pause_until_rung_complete_then_top_continue);
  tcase_add_test(tc, error_completes_rung);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, validation_and_dispatch);
  tcase_add_test(tc, sched_several_objectives);
  tcase_add_test(tc, agrees_with_ray_reference);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
