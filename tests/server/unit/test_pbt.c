/* Unit tests of server/core/pbt.c: Ray's PBT decisions (vectors from
 * gen_pbt_vectors.py), the reason sentence, restore, and the checks of the
 * scheduler object. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbt.h"
#include "rng.h"
#include "scheduler.h"
#include "validate.h"
#include "vectors.h"

static cJSON *parse(const char *s) {
  cJSON *j = cJSON_Parse(s);
  ck_assert_msg(j != NULL, "bad JSON in test: %s", s);
  return j;
}

static void params_of(const cJSON *c, struct pbt_params *p) {
  const cJSON *f;
  int i = 0;
  pbt_params_default(p);
  p->perturbation_interval = cJSON_GetObjectItem(c, "perturbation_interval")->valuedouble;
  p->burn_in_period = cJSON_GetObjectItem(c, "burn_in_period")->valuedouble;
  p->quantile_fraction = cJSON_GetObjectItem(c, "quantile_fraction")->valuedouble;
  p->resample_probability = cJSON_GetObjectItem(c, "resample_probability")->valuedouble;
  cJSON_ArrayForEach(f, cJSON_GetObjectItem(c, "perturbation_factors")) p->factors[i++] =
      f->valuedouble;
  p->nfactors = i;
  p->mutations = cJSON_GetObjectItem(c, "hyperparam_mutations");
}

/* Records kept as the server would (sched_records, in order), with the
 * trial they belong to. */
struct recs {
  cJSON *arr; /* [[trial_id, record], ...] */
};

/* A restarted server: a new pbt that replays every record so far, then
 * adds the trials that are still live with their current config. */
static struct pbt *restart(const struct pbt_params *p, enum spec_mode mode, uint64_t seed,
                           const cJSON *recs, const cJSON *trials, const cJSON *configs,
                           const cJSON *ended) {
  struct pbt *b;
  const cJSON *r, *t;
  ck_assert_int_eq(pbt_create(p, mode, seed, &b), 0);
  cJSON_ArrayForEach(r, recs) ck_assert_int_eq(
      pbt_restore(b, (int64_t)cJSON_GetArrayItem(r, 0)->valuedouble, cJSON_GetArrayItem(r, 1)), 0);
  cJSON_ArrayForEach(t, trials) {
    char key[32];
    int64_t id = (int64_t)cJSON_GetObjectItem(t, "id")->valuedouble;
    snprintf(key, sizeof key, "%lld", (long long)id);
    if (cJSON_GetObjectItem(ended, key)) continue;
    ck_assert_int_eq(pbt_add_trial(b, id, (int64_t)cJSON_GetObjectItem(t, "idx")->valuedouble,
                                   cJSON_GetObjectItem(configs, key)),
                     0);
  }
  return b;
}

/* Every decision of a Python transcription of Ray's PBT must agree: whether
 * the result was a perturbation point, exploit or not, the donor, and the
 * explored config. Run twice: uninterrupted, and restarted from the records
 * every 37 events. */
static void run_vectors(int restart_every) {
  cJSON *doc = vectors_load(PBT_RAY_VECTORS), *c;
  int decided = 0, exploits = 0, events = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
    struct pbt_params p;
    struct pbt *b;
    enum spec_mode mode = strcmp(cJSON_GetObjectItem(c, "mode")->valuestring, "max") == 0
                              ? SPEC_MODE_MAX
                              : SPEC_MODE_MIN;
    uint64_t seed = (uint64_t)cJSON_GetObjectItem(c, "seed")->valuedouble;
    cJSON *recs = cJSON_CreateArray(), *configs = cJSON_CreateObject(),
          *ended = cJSON_CreateObject(), *t, *e;
    int k = 0;
    params_of(c, &p);
    ck_assert_int_eq(pbt_create(&p, mode, seed, &b), 0);
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(c, "trials")) {
      char key[32];
      int64_t id = (int64_t)cJSON_GetObjectItem(t, "id")->valuedouble;
      snprintf(key, sizeof key, "%lld", (long long)id);
      cJSON_AddItemToObject(configs, key, cJSON_Duplicate(cJSON_GetObjectItem(t, "config"), 1));
      ck_assert_int_eq(pbt_add_trial(b, id, (int64_t)cJSON_GetObjectItem(t, "idx")->valuedouble,
                                     cJSON_GetObjectItem(t, "config")),
                       0);
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "events")) {
      const cJSON *end = cJSON_GetObjectItem(e, "end"), *v;
      struct pbt_outcome out;
      int64_t id;
      double t;
      char key[32];
      k++;
      events++;
      if (restart_every && k % restart_every == 0) {
        pbt_free(b);
        b = restart(&p, mode, seed, recs, cJSON_GetObjectItem(c, "trials"), configs, ended);
      }
      if (end) {
        snprintf(key, sizeof key, "%lld", (long long)end->valuedouble);
        ck_assert_int_eq(pbt_on_trial_end(b, (int64_t)end->valuedouble), 0);
        cJSON_AddTrueToObject(ended, key);
        continue;
      }
      id = (int64_t)cJSON_GetObjectItem(e, "trial")->valuedouble;
      snprintf(key, sizeof key, "%lld", (long long)id);
      t = cJSON_GetObjectItem(e, "t")->valuedouble;
      v = cJSON_GetObjectItem(e, "value");
      ck_assert_int_eq(pbt_on_result(b, id, t, cJSON_IsNumber(v) ? v->valuedouble : NAN, &out), 0);
      ck_assert_msg((out.record != NULL) == cJSON_IsTrue(cJSON_GetObjectItem(e, "decided")),
                    "event %d: perturbation point disagrees", k);
      ck_assert_msg(out.exploit == cJSON_IsTrue(cJSON_GetObjectItem(e, "exploit")),
                    "event %d (trial %lld t=%g): exploit %d, Ray's transcription %d", k,
                    (long long)id, t, out.exploit, cJSON_IsTrue(cJSON_GetObjectItem(e, "exploit")));
      if (out.exploit) {
        char *got = cJSON_PrintUnformatted(out.new_config);
        char *want = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "config"));
        ck_assert_int_eq(out.donor_trial_id, (int64_t)cJSON_GetObjectItem(e, "donor")->valuedouble);
        ck_assert_msg(cJSON_Compare(out.new_config, cJSON_GetObjectItem(e, "config"), 1),
                      "event %d: explored %s, Ray's transcription %s", k, got, want);
        free(got);
        free(want);
        cJSON_ReplaceItemInObject(configs, key, cJSON_Duplicate(out.new_config, 1));
        ck_assert_ptr_nonnull(strstr(out.reason, "exploited trial "));
        exploits++;
      }
      if (out.record) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)id));
        cJSON_AddItemToArray(pair, out.record);
        out.record = NULL;
        cJSON_AddItemToArray(recs, pair);
        decided++;
      }
      pbt_outcome_clear(&out);
    }
    pbt_free(b);
    cJSON_Delete(recs);
    cJSON_Delete(configs);
    cJSON_Delete(ended);
  }
  cJSON_Delete(doc);
  ck_assert_int_gt(events, 2000);
  ck_assert_int_gt(decided, 1000);
  ck_assert_int_gt(exploits, 200);
}

START_TEST(agrees_with_ray_reference) { run_vectors(0); }
END_TEST

START_TEST(restart_decides_like_uninterrupted) { run_vectors(37); }
END_TEST

static struct pbt *four(double interval, const char *mutations, cJSON **mut_out) {
  struct pbt_params p;
  struct pbt *b;
  cJSON *m = parse(mutations);
  pbt_params_default(&p);
  p.perturbation_interval = interval;
  p.resample_probability = 0;
  p.nfactors = 1;
  p.factors[0] = 1.2;
  p.mutations = m;
  ck_assert_int_eq(pbt_create(&p, SPEC_MODE_MAX, 42, &b), 0);
  for (int i = 0; i < 4; i++) {
    cJSON *c = parse("{\"lr\": 0.01, \"momentum\": 0.9, \"l1\": 64}");
    cJSON_ReplaceItemInObject(c, "lr", cJSON_CreateNumber(0.01 * (i + 1)));
    ck_assert_int_eq(pbt_add_trial(b, 7 + i, i, c), 0);
    cJSON_Delete(c);
  }
  *mut_out = m;
  return b;
}

static void result(struct pbt *b, int64_t id, double t, double v, struct pbt_outcome *out) {
  ck_assert_int_eq(pbt_on_result(b, id, t, v, out), 0);
}

/* The example: the bottom trial clones the top one, whose lr is
 * scaled by the only factor; the reason names donor, t and the change. */
START_TEST(exploit_reason_and_config) {
  cJSON *m;
  struct pbt *b =
      four(6, "{\"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1}}", &m);
  struct pbt_outcome o;
  /* Below the interval: nothing decided, nothing recorded. */
  result(b, 7, 5, 0.9, &o);
  ck_assert_ptr_null(o.record);
  ck_assert_int_eq(o.exploit, 0);
  result(b, 8, 6, 0.5, &o);
  ck_assert_ptr_nonnull(o.record); /* alone: no quantiles yet */
  ck_assert_int_eq(o.exploit, 0);
  pbt_outcome_clear(&o);
  result(b, 9, 6, 0.6, &o);
  pbt_outcome_clear(&o);
  result(b, 7, 6, 0.9, &o); /* top: its checkpoint is the one to clone */
  ck_assert_int_eq(o.exploit, 0);
  pbt_outcome_clear(&o);
  result(b, 10, 6, 0.1, &o); /* bottom of 4 (quantile 1 trial) */
  ck_assert_int_eq(o.exploit, 1);
  ck_assert_int_eq(o.donor_trial_id, 7);
  ck_assert_str_eq(o.reason, "exploited trial 7 at t=6: lr 0.01 \u2192 0.012");
  ck_assert_double_eq_tol(cJSON_GetObjectItem(o.new_config, "lr")->valuedouble, 0.012, 1e-15);
  /* The rest of the donor's config comes along. */
  ck_assert_double_eq(cJSON_GetObjectItem(o.new_config, "l1")->valuedouble, 64);
  /* The record says what to replay: the donor and the new config. */
  ck_assert_int_eq((int)cJSON_GetObjectItem(o.record, "donor")->valuedouble, 7);
  ck_assert_ptr_nonnull(cJSON_GetObjectItem(o.record, "config"));
  pbt_outcome_clear(&o);
  /* It continues from the donor's time: the next point is t=12. */
  result(b, 10, 11, 0.1, &o);
  ck_assert_ptr_null(o.record);
  result(b, 10, 12, 0.1, &o);
  ck_assert_ptr_nonnull(o.record);
  pbt_outcome_clear(&o);
  pbt_free(b);
  cJSON_Delete(m);
}
END_TEST

/* Ray skips the exploit when the donor was not in the top quantile at its
 * own last perturbation point (it saved no checkpoint then). */
START_TEST(donor_without_checkpoint_is_skipped) {
  cJSON *m;
  struct pbt *b = four(1, "{\"lr\": [0.01, 0.02, 0.03]}", &m);
  struct pbt_outcome o;
  result(b, 7, 1, 0.9, &o); /* alone: no quantile, so no checkpoint */
  pbt_outcome_clear(&o);
  result(b, 8, 1, 0.1, &o); /* bottom of 2; donor 7 has none */
  ck_assert_ptr_nonnull(o.record);
  ck_assert_int_eq(o.exploit, 0);
  pbt_outcome_clear(&o);
  pbt_free(b);
  cJSON_Delete(m);
}
END_TEST

/* Ended trials leave the quantiles; integral values stay integers. */
START_TEST(ended_trials_leave_and_ints_stay_ints) {
  cJSON *m;
  struct pbt *b = four(1, "{\"batch\": {\"type\": \"randint\", \"lower\": 8, \"upper\": 512}}", &m);
  struct pbt_outcome o;
  cJSON *c = parse("{\"batch\": 100}");
  for (int i = 0; i < 4; i++) ck_assert_int_eq(pbt_add_trial(b, 7 + i, i, c), 0);
  cJSON_Delete(c);
  result(b, 7, 1, 0.2, &o);
  pbt_outcome_clear(&o);
  result(b, 8, 1, 0.9, &o);
  pbt_outcome_clear(&o);
  ck_assert_int_eq(pbt_on_trial_end(b, 8), 0);
  result(b, 9, 1, 0.5, &o); /* 7 and 9 live: 9 is top now */
  pbt_outcome_clear(&o);
  result(b, 7, 2, 0.1, &o); /* bottom: clones 9, not the ended 8 */
  ck_assert_int_eq(o.exploit, 1);
  ck_assert_int_eq(o.donor_trial_id, 9);
  ck_assert_double_eq(cJSON_GetObjectItem(o.new_config, "batch")->valuedouble, 120);
  pbt_outcome_clear(&o);
  pbt_free(b);
  cJSON_Delete(m);
}
END_TEST

/* A list: resample_probability 0 steps to a neighbour (clamped at the ends). */
START_TEST(list_steps_to_neighbour) {
  cJSON *cfg = parse("{\"m\": 0.9, \"x\": \"keep\"}");
  cJSON *mut = parse("{\"m\": [0.5, 0.9, 0.99]}");
  double f = 1.2;
  int seen_lo = 0, seen_hi = 0;
  for (uint64_t s = 0; s < 64; s++) {
    struct rng r;
    cJSON *n;
    double v;
    rng_seed(&r, s);
    n = pbt_explore(cfg, mut, 0.0, &f, 1, &r);
    ck_assert_ptr_nonnull(n);
    v = cJSON_GetObjectItem(n, "m")->valuedouble;
    ck_assert(v == 0.5 || v == 0.99);
    seen_lo |= v == 0.5;
    seen_hi |= v == 0.99;
    ck_assert_str_eq(cJSON_GetObjectItem(n, "x")->valuestring, "keep");
    cJSON_Delete(n);
  }
  ck_assert(seen_lo && seen_hi);
  cJSON_Delete(cfg);
  cJSON_Delete(mut);
}
END_TEST

static void check_err(const char *sched, const char *ps, const char *trainable, const char *path,
                      const char *msg_part) {
  cJSON *s = parse(sched), *p = parse(ps), *t = parse(trainable);
  struct pbt_params pp;
  struct validate_error err = {{0}, {0}};
  ck_assert_int_ne(pbt_check(s, "scheduler", p, t, &pp, &err), 0);
  ck_assert_str_eq(err.path, path);
  ck_assert_msg(strstr(err.message, msg_part), "message '%s' lacks '%s'", err.message, msg_part);
  cJSON_Delete(s);
  cJSON_Delete(p);
  cJSON_Delete(t);
}

START_TEST(check_errors_name_path_and_rule) {
  const char *ps = "{\"lr\": {\"type\": \"loguniform\", \"lower\": 0.001, \"upper\": 0.1}, "
                   "\"l1\": 64, \"momentum\": 0.9}";
  const char *builtin = "{\"type\": \"builtin\"}";
  const char *cmd = "{\"type\": \"command\", \"argv\": [\"x\"]}";
  check_err("{\"type\": \"pbt\", \"hyperparam_mutations\": {\"l1\": [32, 64]}}", ps, builtin,
            "scheduler.hyperparam_mutations.l1", "model's shape");
  check_err("{\"type\": \"pbt\", \"hyperparam_mutations\": {\"wd\": [1, 2]}}", ps, cmd,
            "scheduler.hyperparam_mutations.wd", "not in param_space");
  check_err("{\"type\": \"pbt\"}", ps, cmd, "scheduler.hyperparam_mutations", "required");
  check_err("{\"type\": \"pbt\", \"hyperparam_mutations\": {}}", ps, cmd,
            "scheduler.hyperparam_mutations", "non-empty");
  check_err(
      "{\"type\": \"pbt\", \"custom_explore_fn\": \"f\", \"hyperparam_mutations\": {\"lr\": [1]}}",
      ps, cmd, "scheduler.custom_explore_fn", "not supported");
  check_err(
      "{\"type\": \"pbt\", \"quantile_fraction\": 0.6, \"hyperparam_mutations\": {\"lr\": [1]}}",
      ps, cmd, "scheduler.quantile_fraction", "0 to 0.5");
  check_err(
      "{\"type\": \"pbt\", \"perturbation_interval\": 0, \"hyperparam_mutations\": {\"lr\": [1]}}",
      ps, cmd, "scheduler.perturbation_interval", "> 0");
  check_err("{\"type\": \"pbt\", \"perturbation_factors\": [1.2, -1], \"hyperparam_mutations\": "
            "{\"lr\": [1]}}",
            ps, cmd, "scheduler.perturbation_factors[1]", "> 0");
  check_err("{\"type\": \"pbt\", \"hyperparam_mutations\": {\"lr\": {\"type\": \"loguniform\", "
            "\"lower\": 0, \"upper\": 1}}}",
            ps, cmd, "scheduler.hyperparam_mutations.lr.lower", "");
  check_err("{\"type\": \"pbt\", \"hyperparam_mutations\": {\"lr\": {\"grid_search\": [1, 2]}}}",
            ps, cmd, "scheduler.hyperparam_mutations.lr", "grid_search");
  check_err("{\"type\": \"pbt\", \"hyperparam_mutations\": {\"lr\": 0.1}}", ps, cmd,
            "scheduler.hyperparam_mutations.lr", "must be a list");
  check_err("{\"type\": \"pbt\", \"bogus\": 1, \"hyperparam_mutations\": {\"lr\": [1]}}", ps, cmd,
            "scheduler.bogus", "unknown field");
}
END_TEST

START_TEST(check_accepts_and_fills_defaults) {
  cJSON *s = parse("{\"type\": \"pbt\", \"time_attr\": \"training_iteration\", "
                   "\"perturbation_interval\": 2, \"hyperparam_mutations\": "
                   "{\"lr\": {\"type\": \"loguniform\", \"lower\": 0.001, \"upper\": 0.1}, "
                   "\"momentum\": [0.8, 0.9, 0.99]}}");
  cJSON *p = parse("{\"lr\": 0.01, \"momentum\": 0.9, \"l1\": 64}");
  cJSON *t = parse("{\"type\": \"builtin\"}");
  struct pbt_params pp;
  struct validate_error err = {{0}, {0}};
  ck_assert_int_eq(pbt_check(s, "scheduler", p, t, &pp, &err), 0);
  ck_assert_double_eq(pp.perturbation_interval, 2);
  ck_assert_double_eq(pp.quantile_fraction, 0.25);
  ck_assert_double_eq(pp.resample_probability, 0.25);
  ck_assert_int_eq(pp.nfactors, 2);
  ck_assert_double_eq(pp.factors[0], 1.2);
  ck_assert_double_eq(pp.factors[1], 0.8);
  ck_assert_ptr_eq(pp.mutations, cJSON_GetObjectItem(s, "hyperparam_mutations"));
  cJSON_Delete(s);
  cJSON_Delete(p);
  cJSON_Delete(t);
}
END_TEST

/* The server could not copy the donor's checkpoint: the exploit is undone,
 * the record says "no exploit", and a replay of the records gives the same
 * state as the live scheduler. */
START_TEST(refused_exploit_is_forgotten) {
  cJSON *m;
  struct pbt *b =
      four(6, "{\"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1}}", &m);
  struct pbt_outcome o;
  cJSON *recs = cJSON_CreateArray(), *pair, *s1, *s2;
  struct pbt *b2;
  const int ids[4] = {8, 9, 7, 10};
  const double vals[4] = {0.5, 0.6, 0.9, 0.1};
  for (int k = 0; k < 4; k++) {
    result(b, ids[k], 6, vals[k], &o);
    if (ids[k] == 10) {
      ck_assert_int_eq(o.exploit, 1);
      ck_assert_int_eq(pbt_exploit_refused(b, 10, o.record), 0);
      ck_assert_ptr_null(cJSON_GetObjectItem(o.record, "donor"));
      ck_assert_ptr_null(cJSON_GetObjectItem(o.record, "config"));
      ck_assert_double_eq(cJSON_GetObjectItem(o.record, "last_perturbation_time")->valuedouble, 6);
      ck_assert_int_eq(pbt_exploit_refused(b, 10, o.record), -ENOENT);
    }
    pair = cJSON_CreateArray();
    cJSON_AddItemToArray(pair, cJSON_CreateNumber(ids[k]));
    cJSON_AddItemToArray(pair, o.record);
    o.record = NULL;
    cJSON_AddItemToArray(recs, pair);
    pbt_outcome_clear(&o);
  }
  /* Trial 10 keeps its own config and its own time: next point at 12. */
  result(b, 10, 11, 0.1, &o);
  ck_assert_ptr_null(o.record);
  /* A restarted server: the same trials, then the records replayed. */
  cJSON_Delete(m);
  b2 = four(6, "{\"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1}}", &m);
  cJSON_ArrayForEach(pair, recs)
      ck_assert_int_eq(pbt_restore(b2, (int64_t)cJSON_GetArrayItem(pair, 0)->valuedouble,
                                   cJSON_GetArrayItem(pair, 1)),
                       0);
  ck_assert_int_eq(pbt_state_json(b, &s1), 0);
  ck_assert_int_eq(pbt_state_json(b2, &s2), 0);
  ck_assert_int_eq(cJSON_GetObjectItem(s1, "perturbations")->valueint, 0);
  ck_assert(cJSON_Compare(cJSON_GetObjectItem(s1, "trials"), cJSON_GetObjectItem(s2, "trials"), 1));
  cJSON_Delete(s1);
  cJSON_Delete(s2);
  cJSON_Delete(recs);
  cJSON_Delete(m);
  pbt_free(b);
  pbt_free(b2);
}
END_TEST

/* An exploit whose record was stored already (the server waited for the
 * donor's checkpoint, which never came) is undone by a revert record: the
 * trial has its old config and time again, and a replay of both records
 * gives the live scheduler's state. */
START_TEST(undone_exploit_is_reverted_by_a_record) {
  cJSON *m;
  struct pbt *b =
      four(6, "{\"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1}}", &m);
  struct pbt_outcome o;
  cJSON *recs = cJSON_CreateArray(), *pair, *s1, *s2, *rev = NULL;
  struct pbt *b2;
  const int ids[4] = {8, 9, 7, 10};
  const double vals[4] = {0.5, 0.6, 0.9, 0.1};
  for (int k = 0; k < 4; k++) {
    result(b, ids[k], 6, vals[k], &o);
    pair = cJSON_CreateArray();
    cJSON_AddItemToArray(pair, cJSON_CreateNumber(ids[k]));
    cJSON_AddItemToArray(pair, o.record);
    o.record = NULL;
    cJSON_AddItemToArray(recs, pair);
    pbt_outcome_clear(&o);
  }
  ck_assert_int_eq(pbt_exploit_undo(b, 10, &rev), 0);
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(rev, "revert")));
  ck_assert_double_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(rev, "config"), "lr")->valuedouble,
                      0.04);
  ck_assert_double_eq(cJSON_GetObjectItem(rev, "last_perturbation_time")->valuedouble, 6);
  ck_assert_int_eq(pbt_exploit_undo(b, 10, &s1), -ENOENT);
  pair = cJSON_CreateArray();
  cJSON_AddItemToArray(pair, cJSON_CreateNumber(10));
  cJSON_AddItemToArray(pair, rev);
  cJSON_AddItemToArray(recs, pair);
  /* Its own time again: its next point is at 12, not the donor's 6 + 6. */
  result(b, 10, 11, 0.1, &o);
  ck_assert_ptr_null(o.record);
  cJSON_Delete(m);
  b2 = four(6, "{\"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1}}", &m);
  cJSON_ArrayForEach(pair, recs)
      ck_assert_int_eq(pbt_restore(b2, (int64_t)cJSON_GetArrayItem(pair, 0)->valuedouble,
                                   cJSON_GetArrayItem(pair, 1)),
                       0);
  ck_assert_int_eq(pbt_state_json(b, &s1), 0);
  ck_assert_int_eq(pbt_state_json(b2, &s2), 0);
  ck_assert_int_eq(cJSON_GetObjectItem(s1, "perturbations")->valueint, 0);
  ck_assert_int_eq(cJSON_GetObjectItem(s2, "perturbations")->valueint, 0);
  ck_assert(cJSON_Compare(cJSON_GetObjectItem(s1, "trials"), cJSON_GetObjectItem(s2, "trials"), 1));
  cJSON_Delete(s1);
  cJSON_Delete(s2);
  cJSON_Delete(recs);
  cJSON_Delete(m);
  pbt_free(b);
  pbt_free(b2);
}
END_TEST

#define TRAIN_BUILTIN                                                                              \
  "\"trainable\": {\"type\": \"builtin\", \"model\": \"mlp\", \"dataset\": \"mnist\"}"

/* Submission: the builtin trainable's shape keys are refused with a path;
 * a search algorithm other than random is refused; metric is required. */
START_TEST(validate_pbt_experiment) {
  static const struct {
    const char *cfg, *path, *part;
  } bad[] = {
      {"{\"metric\": \"acc\", \"mode\": \"max\", \"param_space\": {\"lr\": 0.1, \"l1\": 64}, "
       "\"scheduler\": {\"type\": \"pbt\", \"hyperparam_mutations\": {\"l1\": [32, "
       "64]}}, " TRAIN_BUILTIN "}",
       "scheduler.hyperparam_mutations.l1", "model's shape"},
      {"{\"metric\": \"acc\", \"mode\": \"max\", \"param_space\": {\"lr\": 0.1, \"model\": "
       "\"mlp\"}, "
       "\"scheduler\": {\"type\": \"pbt\", \"hyperparam_mutations\": {\"model\": [\"mlp\", "
       "\"cnn\"]}}, " TRAIN_BUILTIN "}",
       "scheduler.hyperparam_mutations.model", "model's shape"},
      {"{\"param_space\": {\"lr\": 0.1}, "
       "\"scheduler\": {\"type\": \"pbt\", \"hyperparam_mutations\": {\"lr\": [0.1, "
       "0.2]}}, " TRAIN_BUILTIN "}",
       "metric", "pbt"},
      {"{\"metric\": \"acc\", \"mode\": \"max\", \"param_space\": {\"lr\": 0.1}, "
       "\"search_alg\": {\"type\": \"tpe\"}, "
       "\"scheduler\": {\"type\": \"pbt\", \"hyperparam_mutations\": {\"lr\": [0.1, "
       "0.2]}}, " TRAIN_BUILTIN "}",
       "search_alg.type", "random"},
      {"{\"metric\": \"acc\", \"mode\": \"max\", \"param_space\": {\"lr\": 0.1}, "
       "\"scheduler\": {\"type\": \"pbt\", \"time_attr\": \"a b\", \"hyperparam_mutations\": "
       "{\"lr\": [0.1]}}, " TRAIN_BUILTIN "}",
       "scheduler.time_attr", "string"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cJSON *c = parse(bad[i].cfg);
    struct experiment_spec spec;
    struct validate_error err = {{0}, {0}};
    ck_assert_int_eq(validate_experiment(c, &spec, &err), -EINVAL);
    ck_assert_str_eq(err.path, bad[i].path);
    ck_assert_msg(strstr(err.message, bad[i].part), "%zu: '%s' lacks '%s'", i, err.message,
                  bad[i].part);
    cJSON_Delete(c);
  }
}
END_TEST

/* validate -> sched_create -> results: the dispatch answers EXPLOIT with the
 * donor, the new config and the reason, and the state JSON shows it; the
 * spec's copy of the mutations may be freed before the scheduler is used. */
START_TEST(dispatch_through_scheduler) {
  cJSON *c =
      parse("{\"metric\": \"acc\", \"mode\": \"max\", \"seed\": 3, "
            "\"param_space\": {\"lr\": {\"grid_search\": [0.01, 0.02, 0.03, 0.04]}, \"l1\": 64}, "
            "\"scheduler\": {\"type\": \"pbt\", \"perturbation_interval\": 6, "
            "\"resample_probability\": 0, \"perturbation_factors\": [1.2], "
            "\"hyperparam_mutations\": {\"lr\": {\"type\": \"loguniform\", \"lower\": 0.001, "
            "\"upper\": 1}}}, " TRAIN_BUILTIN "}");
  struct experiment_spec spec;
  struct validate_error err = {{0}, {0}};
  struct sched *s;
  struct sched_outcome o;
  const double vals[4] = {0.9, 0.5, 0.6, 0.1};
  const int order[4] = {1, 2, 0, 3};
  cJSON *st;
  ck_assert_int_eq(validate_experiment(c, &spec, &err), 0);
  cJSON_Delete(c);
  ck_assert_int_eq(spec.sched.type, SPEC_SCHED_PBT);
  ck_assert_str_eq(spec.sched.time_attr, "training_iteration");
  ck_assert_int_eq(sched_create(&spec.sched, spec.mode, spec.seed, &s), 0);
  validate_spec_free(&spec);
  for (int i = 0; i < 4; i++) {
    char cfg[64];
    snprintf(cfg, sizeof cfg, "{\"lr\": %g, \"l1\": 64}", 0.01 * (i + 1));
    ck_assert_int_eq(sched_add_trial(s, 7 + i, i, cfg), 0);
  }
  double v = 0.2;
  ck_assert_int_eq(sched_on_result(s, 7, 1, NULL, &o), 0); /* no metric */
  ck_assert_int_eq(o.action, SCHED_CONTINUE);
  ck_assert_ptr_null(o.record);
  ck_assert_int_eq(sched_on_result(s, 7, 5, &v, &o), 0);
  ck_assert_ptr_null(o.record);
  for (int k = 0; k < 4; k++) {
    int i = order[k];
    ck_assert_int_eq(sched_on_result(s, 7 + i, 6, &vals[i], &o), 0);
    ck_assert_ptr_nonnull(o.record);
    if (i == 3) {
      ck_assert_int_eq(o.action, SCHED_EXPLOIT);
      ck_assert_int_eq(o.donor_trial_id, 7);
      ck_assert_str_eq(o.reason, "exploited trial 7 at t=6: lr 0.01 \u2192 0.012");
      ck_assert_double_eq(cJSON_GetObjectItem(o.new_config, "l1")->valuedouble, 64);
    } else {
      ck_assert_int_eq(o.action, SCHED_CONTINUE);
    }
    sched_outcome_clear(&o);
  }
  ck_assert_int_eq(sched_on_trial_end(s, 8, 1, 6, &vals[1], &o), 0);
  sched_outcome_clear(&o);
  ck_assert_int_eq(sched_state_json(s, &st), 0);
  ck_assert_str_eq(cJSON_GetObjectItem(st, "type")->valuestring, "pbt");
  ck_assert_int_eq(cJSON_GetObjectItem(st, "perturbations")->valueint, 1);
  cJSON_Delete(st);
  sched_free(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pbt");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, agrees_with_ray_reference);
  tcase_add_test(tc, restart_decides_like_uninterrupted);
  tcase_add_test(tc, exploit_reason_and_config);
  tcase_add_test(tc, donor_without_checkpoint_is_skipped);
  tcase_add_test(tc, ended_trials_leave_and_ints_stay_ints);
  tcase_add_test(tc, list_steps_to_neighbour);
  tcase_add_test(tc, check_errors_name_path_and_rule);
  tcase_add_test(tc, check_accepts_and_fills_defaults);
  tcase_add_test(tc, validate_pbt_experiment);
  tcase_add_test(tc, refused_exploit_is_forgotten);
  tcase_add_test(tc, undone_exploit_is_reverted_by_a_record);
  tcase_add_test(tc, dispatch_through_scheduler);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
