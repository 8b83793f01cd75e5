/* Unit tests of validate: defaults of a good config, and dozens of bad
 * configs each with the exact path and message it must produce. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "scheduler.h"
#include "space.h"
#include "validate.h"

#define TRAIN "\"trainable\": {\"type\": \"builtin\", \"model\": \"mlp\", \"dataset\": \"mnist\"}"

START_TEST(design_example_and_defaults) {
  const char *cfg =
      "{\"name\": \"fmnist-asha\", \"metric\": \"loss\", \"mode\": \"min\","
      " \"num_samples\": 10, \"max_concurrent_trials\": 4, \"seed\": 42,"
      " \"param_space\": {\"l1\": {\"type\": \"pow2\", \"lower\": 4, \"upper\": 256},"
      "   \"lr\": {\"type\": \"loguniform\", \"lower\": 1e-4, \"upper\": 1e-1},"
      "   \"batch_size\": {\"type\": \"choice\", \"values\": [2, 4, 8, 16]}, \"momentum\": 0.9},"
      " \"scheduler\": {\"type\": \"asha\", \"time_attr\": \"training_iteration\", \"max_t\": 10,"
      "   \"grace_period\": 1, \"reduction_factor\": 2, \"brackets\": 1},"
      " \"resources_per_trial\": {\"cpu\": 1, \"gpu\": 0},"
      " \"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": "
      "\"fashion-mnist\"}}";
  cJSON *c = cJSON_Parse(cfg);
  struct experiment_spec s;
  struct validate_error err;
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_str_eq(s.name, "fmnist-asha");
  ck_assert_str_eq(s.metric, "loss");
  ck_assert_int_eq(s.has_metric, 1);
  ck_assert_int_eq(s.mode, SPEC_MODE_MIN);
  ck_assert_int_eq(s.num_samples, 10);
  ck_assert_int_eq(s.num_trials, 10);
  ck_assert_int_eq(s.max_concurrent_trials, 4);
  ck_assert_int_eq(s.has_seed, 1);
  ck_assert(s.seed == 42);
  ck_assert_int_eq(s.max_failures, 0);
  ck_assert_int_eq(s.sched.type, SPEC_SCHED_ASHA);
  ck_assert_str_eq(s.sched.time_attr, "training_iteration");
  ck_assert(s.sched.max_t == 10 && s.sched.grace_period == 1 && s.sched.reduction_factor == 2 &&
            s.sched.brackets == 1);
  ck_assert(s.resources.cpu == 1 && s.resources.gpu == 0 && s.resources.memory_mb == 0);
  ck_assert_int_eq(s.resources.num_workers, 1);
  ck_assert_int_eq(cJSON_GetArraySize(s.param_space), 4);
  ck_assert_str_eq(cJSON_GetObjectItem(s.trainable, "model")->valuestring, "cnn");
  /* The spec owns copies: the config can go first. */
  cJSON_Delete(c);
  ck_assert_int_eq(cJSON_GetArraySize(s.param_space), 4);
  validate_spec_free(&s);
  validate_spec_free(&s); /* idempotent */
}
END_TEST

START_TEST(minimal_config_defaults) {
  cJSON *c = cJSON_Parse("{" TRAIN "}");
  struct experiment_spec s;
  ck_assert_int_eq(validate_experiment(c, &s, NULL), 0);
  ck_assert_str_eq(s.name, "experiment");
  ck_assert_int_eq(s.has_metric, 0);
  ck_assert_int_eq(s.num_samples, 1);
  ck_assert_int_eq(s.num_trials, 1);
  ck_assert_int_eq(s.max_concurrent_trials, 0);
  ck_assert_int_eq(s.has_seed, 0);
  ck_assert_int_eq(s.sched.type, SPEC_SCHED_FIFO);
  ck_assert_int_eq(s.sched.has_max_t, 0);
  ck_assert_str_eq(s.sched.time_attr, "training_iteration");
  ck_assert(s.resources.cpu == 1);
  ck_assert_int_eq(cJSON_GetArraySize(s.param_space), 0);
  validate_spec_free(&s);
  cJSON_Delete(c);

  /* Ray's ASHAScheduler defaults: max_t 100, grace 1, rf 4, brackets 1. */
  c = cJSON_Parse(
      "{\"metric\": \"acc\", \"mode\": \"max\", \"scheduler\": {\"type\": \"asha\"},"
      " \"param_space\": {\"g\": {\"grid_search\": [1, 2, 3]}}, \"num_samples\": 2,"
      " \"resources_per_trial\": {\"cpu\": 0.5, \"gpu\": 0.25, \"memory_mb\": 512,"
      " \"num_workers\": 4},"
      " \"trainable\": {\"type\": \"command\", \"argv\": [\"python3\", \"train.py\", \"{g}\"],"
      "   \"env\": {\"OMP_NUM_THREADS\": \"1\"}, \"cwd\": \"/tmp\"}}");
  ck_assert_int_eq(validate_experiment(c, &s, NULL), 0);
  ck_assert(s.sched.max_t == 100 && s.sched.grace_period == 1 && s.sched.reduction_factor == 4 &&
            s.sched.brackets == 1 && s.sched.has_max_t);
  ck_assert_int_eq(s.mode, SPEC_MODE_MAX);
  ck_assert_int_eq(s.num_trials, 6);
  ck_assert(s.resources.cpu == 0.5 && s.resources.gpu == 0.25 && s.resources.memory_mb == 512);
  ck_assert_int_eq(s.resources.num_workers, 4);
  validate_spec_free(&s);
  cJSON_Delete(c);

  c = cJSON_Parse(
      "{\"scheduler\": {\"type\": \"fifo\", \"max_t\": 5, \"time_attr\": \"epoch\"}, " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, NULL), 0);
  ck_assert(s.sched.has_max_t && s.sched.max_t == 5);
  ck_assert_str_eq(s.sched.time_attr, "epoch");
  validate_spec_free(&s);
  cJSON_Delete(c);
}
END_TEST

struct bad {
  const char *json;
  const char *path;
  const char *message;
};

#define ASHA "\"metric\": \"loss\", \"mode\": \"min\", "

static const struct bad bad_configs[] = {
    {"[]", "", "the experiment config must be a JSON object"},
    {"{\"nmae\": \"x\", " TRAIN "}", "nmae",
     "unknown field (an experiment takes name, metric, mode, num_samples, max_concurrent_trials, "
     "seed, max_failures, fail_fast, param_space, reference_point, scheduler, resources_per_trial, "
     "trainable, search_alg, points_to_evaluate, warm_start, stop, time_budget_s, "
     "constraints)"},
    {"{\"name\": \"\", " TRAIN "}", "name",
     "must be a string of 1-128 characters from A-Z a-z 0-9 _ . -"},
    {"{\"name\": \"a b\", " TRAIN "}", "name",
     "must be a string of 1-128 characters from A-Z a-z 0-9 _ . -"},
    {"{\"name\": 5, " TRAIN "}", "name",
     "must be a string of 1-128 characters from A-Z a-z 0-9 _ . -"},
    {"{\"metric\": \"loss\", " TRAIN "}", "mode", "required with metric (\"min\" or \"max\")"},
    {"{\"mode\": \"min\", " TRAIN "}", "metric", "required with mode (the result key to optimise)"},
    {"{\"metric\": \"loss\", \"mode\": \"minimize\", " TRAIN "}", "mode",
     "must be \"min\" or \"max\""},
    {"{\"reference_point\": [1], " TRAIN "}", "reference_point",
     "needs metric and mode (one reference value per objective)"},
    {"{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\", \"max\"], \"reference_point\": 1, " TRAIN
     "}",
     "reference_point", "must be a list of 2 number(s), one per metric"},
    {"{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\", \"max\"], \"reference_point\": [1, 2, "
     "3], " TRAIN "}",
     "reference_point", "has 3 entries but metric has 2: one reference value per metric"},
    {"{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\", \"max\"], \"reference_point\": [1, "
     "\"x\"], " TRAIN "}",
     "reference_point[1]", "must be a finite number (the reference value of 'b')"},
    {"{\"metric\": \"a\", \"mode\": \"min\", \"reference_point\": [1e999], " TRAIN "}",
     "reference_point[0]", "must be a finite number (the reference value of 'a')"},
    {"{\"metric\": \"lo ss\", \"mode\": \"min\", " TRAIN "}", "metric",
     "must be a string of 1-128 characters from A-Z a-z 0-9 _ . - /"},
    {"{\"num_samples\": 0, " TRAIN "}", "num_samples", "must be an integer from 1 to 100000"},
    {"{\"num_samples\": 100001, " TRAIN "}", "num_samples", "must be an integer from 1 to 100000"},
    {"{\"num_samples\": 2.5, " TRAIN "}", "num_samples", "must be an integer from 1 to 100000"},
    {"{\"num_samples\": \"10\", " TRAIN "}", "num_samples", "must be an integer from 1 to 100000"},
    {"{\"max_concurrent_trials\": -1, " TRAIN "}", "max_concurrent_trials",
     "must be an integer from 0 to 1000000000"},
    {"{\"seed\": -5, " TRAIN "}", "seed", "must be an integer from 0 to 9007199254740992"},
    {"{\"max_failures\": 1001, " TRAIN "}", "max_failures", "must be an integer from 0 to 1000"},
    {"{\"param_space\": [], " TRAIN "}", "param_space", "must be an object of parameters"},
    {"{\"param_space\": {\"lr\": {\"type\": \"loguniform\", \"lower\": 0, \"upper\": 0.1}}, " TRAIN
     "}",
     "param_space.lr.lower", "loguniform needs 0 < lower < upper"},
    {"{\"param_space\": {\"lr\": {\"type\": \"loguniform\", \"lower\": 0.1, \"upper\": "
     "0.01}}, " TRAIN "}",
     "param_space.lr.lower", "loguniform needs 0 < lower < upper"},
    {"{\"param_space\": {\"lr\": {\"type\": \"uniform\", \"lower\": 1}}, " TRAIN "}",
     "param_space.lr.upper", "required"},
    {"{\"param_space\": {\"lr\": {\"type\": \"uniform\", \"lower\": \"1\", \"upper\": 2}}, " TRAIN
     "}",
     "param_space.lr.lower", "must be a finite number"},
    {"{\"param_space\": {\"lr\": {\"type\": \"uniform\", \"lower\": 2, \"upper\": 2}}, " TRAIN "}",
     "param_space.lr.lower", "uniform needs lower < upper"},
    {"{\"param_space\": {\"lr\": {\"type\": \"uniform\", \"lower\": 0, \"upper\": 1, \"q\": "
     "2}}, " TRAIN "}",
     "param_space.lr.q", "unknown field (uniform takes type, lower, upper)"},
    {"{\"param_space\": {\"lr\": {\"type\": \"quniform\", \"lower\": 0, \"upper\": 1}}, " TRAIN "}",
     "param_space.lr.q", "required"},
    {"{\"param_space\": {\"lr\": {\"type\": \"quniform\", \"lower\": 0, \"upper\": 1, \"q\": "
     "0}}, " TRAIN "}",
     "param_space.lr.q", "quniform needs q > 0"},
    {"{\"param_space\": {\"lr\": {\"type\": \"quniform\", \"lower\": 0.1, \"upper\": 0.2, \"q\": "
     "0.3}}, " TRAIN "}",
     "param_space.lr.q", "quniform: no multiple of q lies between lower and upper"},
    {"{\"param_space\": {\"lr\": {\"type\": \"qloguniform\", \"lower\": -1, \"upper\": 1, \"q\": "
     "0.1}}, " TRAIN "}",
     "param_space.lr.lower", "qloguniform needs 0 < lower < upper"},
    {"{\"param_space\": {\"n\": {\"type\": \"randint\", \"lower\": 5, \"upper\": 5}}, " TRAIN "}",
     "param_space.n.lower", "randint needs lower < upper (upper is exclusive)"},
    {"{\"param_space\": {\"n\": {\"type\": \"randint\", \"lower\": 0.5, \"upper\": 5}}, " TRAIN "}",
     "param_space.n.lower", "must be an integer (|value| <= 2^53)"},
    {"{\"param_space\": {\"n\": {\"type\": \"lograndint\", \"lower\": 0, \"upper\": 5}}, " TRAIN
     "}",
     "param_space.n.lower", "lograndint needs 1 <= lower < upper (upper is exclusive)"},
    {"{\"param_space\": {\"n\": {\"type\": \"qrandint\", \"lower\": 1, \"upper\": 10, \"q\": "
     "0}}, " TRAIN "}",
     "param_space.n.q", "qrandint needs q > 0"},
    {"{\"param_space\": {\"n\": {\"type\": \"qrandint\", \"lower\": 10, \"upper\": 1, \"q\": "
     "1}}, " TRAIN "}",
     "param_space.n.lower", "qrandint needs lower <= upper (both inclusive)"},
    {"{\"param_space\": {\"n\": {\"type\": \"randn\", \"sd\": 0}}, " TRAIN "}", "param_space.n.sd",
     "randn needs sd > 0"},
    {"{\"param_space\": {\"n\": {\"type\": \"randn\", \"mean\": 1e308, \"sd\": 1e308}}, " TRAIN "}",
     "param_space.n.sd", "randn needs |mean| + 9 sd to be a finite double"},
    {"{\"param_space\": {\"lr\": {\"type\": \"uniform\", \"lower\": -1e308, \"upper\": "
     "1e308}}, " TRAIN "}",
     "param_space.lr.lower", "uniform needs upper - lower to be a finite double"},
    {"{\"param_space\": {\"lr\": {\"type\": \"quniform\", \"lower\": 0, \"upper\": 1, \"q\": "
     "1e-300}}, " TRAIN "}",
     "param_space.lr.q",
     "quniform: q is too small for the range (lower/q and upper/q must stay within 2^53)"},
    {"{\"param_space\": {\"n\": {\"type\": \"randn\", \"mu\": 0}}, " TRAIN "}", "param_space.n.mu",
     "unknown field (randn takes type, mean, sd)"},
    {"{\"param_space\": {\"l1\": {\"type\": \"pow2\", \"lower\": 3, \"upper\": 64}}, " TRAIN "}",
     "param_space.l1.lower", "pow2 needs lower to be a power of two >= 1"},
    {"{\"param_space\": {\"l1\": {\"type\": \"pow2\", \"lower\": 4, \"upper\": 100}}, " TRAIN "}",
     "param_space.l1.upper", "pow2 needs upper to be a power of two >= 1"},
    {"{\"param_space\": {\"l1\": {\"type\": \"pow2\", \"lower\": 64, \"upper\": 4}}, " TRAIN "}",
     "param_space.l1.lower", "pow2 needs lower <= upper (both inclusive)"},
    {"{\"param_space\": {\"bs\": {\"type\": \"choice\", \"values\": []}}, " TRAIN "}",
     "param_space.bs.values", "choice needs an array of 1 to 10000 values"},
    {"{\"param_space\": {\"bs\": {\"type\": \"choice\"}}, " TRAIN "}", "param_space.bs.values",
     "required"},
    {"{\"param_space\": {\"bs\": {\"type\": 3}}, " TRAIN "}", "param_space.bs.type",
     "must be a string naming a domain (choice, uniform, quniform, loguniform, qloguniform, "
     "randint, "
     "lograndint, qrandint, randn, pow2)"},
    {"{\"param_space\": {\"g\": {\"grid_search\": [1], \"x\": 2}}, " TRAIN "}", "param_space.g",
     "a grid_search object takes no other fields"},
    {"{\"param_space\": {\"g\": {\"grid_search\": 3}}, " TRAIN "}", "param_space.g.grid_search",
     "grid_search needs an array of 1 to 10000 values"},
    {"{\"param_space\": {\"a b\": 1}, " TRAIN "}", "param_space.a b",
     "parameter names need 1-128 characters from A-Z a-z 0-9 _ . -"},
    {"{\"param_space\": {\"opt\": {\"inner\": {\"lr\": {\"type\": \"uniform\", \"lower\": 1, "
     "\"upper\": 0}}}}, " TRAIN "}",
     "param_space.opt.inner.lr.lower", "uniform needs lower < upper"},
    {"{\"num_samples\": 50000, \"param_space\": {\"g\": {\"grid_search\": [1, 2, 3]}}, " TRAIN "}",
     "num_samples", "grid combinations (3) x num_samples (50000) exceeds 100000 trials"},
    {"{\"num_samples\": 100000, \"param_space\": {\"a\": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "
     "0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "
     "0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]}, " TRAIN "}",
     "param_space",
     "too large: 100000 trials x up to 62 values per config exceeds 5000000 values;"
     " use fewer samples or smaller constants"},
    {"{\"num_samples\": 1, \"num_samples\": 2, " TRAIN "}", "num_samples", "duplicate field"},
    {"{\"param_space\": {\"opt\": {\"lr\": 1, \"lr\": 2}}, " TRAIN "}", "param_space.opt.lr",
     "duplicate field"},
    {"{\"param_space\": {\"lr\": 0.1, \"dropout\": {\"type\": \"uniform\", \"lower\": 0, "
     "\"upper\": 1}}, " TRAIN "}",
     "param_space.dropout",
     "the builtin trainer takes no parameter 'dropout' (it takes lr, momentum, weight_decay, "
     "optimizer, "
     "batch_size, l1, l2, epochs, seed, val_fraction, drop_last, train_limit, model, dataset)"},
    {"{\"scheduler\": \"asha\", " TRAIN "}", "scheduler", "must be an object"},
    {"{\"scheduler\": {}, " TRAIN "}", "scheduler.type", "required (fifo or asha)"},
    {"{\"scheduler\": {\"type\": \"bohb\"}, " TRAIN "}", "scheduler.type",
     "must be \"fifo\", \"asha\", \"hyperband\", \"pbt\" or \"median_stopping\""},
    {"{\"scheduler\": {\"type\": \"asha\"}, " TRAIN "}", "metric",
     "required with the asha scheduler (and mode)"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"max_t\": 0}, " TRAIN "}", "scheduler.max_t",
     "must be > 0"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"max_t\": \"10\"}, " TRAIN "}",
     "scheduler.max_t", "must be a finite number"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"grace_period\": 0}, " TRAIN "}",
     "scheduler.grace_period", "must be > 0"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"max_t\": 5, \"grace_period\": 10}, " TRAIN "}",
     "scheduler.grace_period", "asha needs grace_period <= max_t"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"reduction_factor\": 1}, " TRAIN "}",
     "scheduler.reduction_factor", "must be > 1"},
    {"{" ASHA
     "\"scheduler\": {\"type\": \"asha\", \"max_t\": 1e12, \"reduction_factor\": 1.1}, " TRAIN "}",
     "scheduler.reduction_factor",
     "asha would have more than 64 milestones; raise reduction_factor or grace_period"},
    {"{" ASHA
     "\"scheduler\": {\"type\": \"asha\", \"max_t\": 1e308, \"grace_period\": 1e-308}, " TRAIN "}",
     "scheduler.reduction_factor",
     "asha would have more than 64 milestones; raise reduction_factor or grace_period"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"brackets\": 0}, " TRAIN "}",
     "scheduler.brackets", "must be an integer from 1 to 16"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"stop_last_trials\": true}, " TRAIN "}",
     "scheduler.stop_last_trials",
     "unknown field (asha takes type, time_attr, max_t, grace_period, reduction_factor, brackets, "
     "promotion)"},
    {"{" ASHA "\"scheduler\": {\"type\": \"asha\", \"promotion\": 1}, " TRAIN "}",
     "scheduler.promotion", "must be true or false"},
    {"{\"scheduler\": {\"type\": \"fifo\", \"grace_period\": 1}, " TRAIN "}",
     "scheduler.grace_period", "unknown field (fifo takes type, time_attr, max_t)"},
    {"{\"scheduler\": {\"type\": \"fifo\", \"time_attr\": \"\"}, " TRAIN "}", "scheduler.time_attr",
     "must be a string of 1-128 characters from A-Z a-z 0-9 _ . - /"},
    {"{\"resources_per_trial\": {\"cpu\": -1}, " TRAIN "}", "resources_per_trial.cpu",
     "must be from 0 to 1024"},
    {"{\"resources_per_trial\": {\"gpu\": 65}, " TRAIN "}", "resources_per_trial.gpu",
     "must be from 0 to 64"},
    {"{\"resources_per_trial\": {\"memory_mb\": 1.5}, " TRAIN "}", "resources_per_trial.memory_mb",
     "must be an integer from 0 to 1073741824"},
    {"{\"resources_per_trial\": {\"CPU\": 1}, " TRAIN "}", "resources_per_trial.CPU",
     "unknown field (resources_per_trial takes cpu, gpu, memory_mb, num_workers)"},
    {"{\"resources_per_trial\": {\"num_workers\": 0}, " TRAIN "}",
     "resources_per_trial.num_workers", "must be an integer from 1 to 64"},
    {"{\"resources_per_trial\": {\"num_workers\": 65}, " TRAIN "}",
     "resources_per_trial.num_workers", "must be an integer from 1 to 64"},
    {"{\"resources_per_trial\": {\"num_workers\": 2.5}, " TRAIN "}",
     "resources_per_trial.num_workers", "must be an integer from 1 to 64"},
    {"{\"resources_per_trial\": 4, " TRAIN "}", "resources_per_trial", "must be an object"},
    {"{}", "trainable", "required (builtin or command trainable)"},
    {"{\"trainable\": \"train.py\"}", "trainable", "must be an object"},
    {"{\"trainable\": {}}", "trainable.type", "required (builtin or command)"},
    {"{\"trainable\": {\"type\": \"function\"}}", "trainable.type",
     "must be \"builtin\" or \"command\""},
    {"{\"trainable\": {\"type\": \"builtin\", \"dataset\": \"mnist\"}}", "trainable.model",
     "required"},
    {"{\"trainable\": {\"type\": \"builtin\", \"model\": \"resnet\", \"dataset\": \"mnist\"}}",
     "trainable.model", "must be \"mlp\" or \"cnn\""},
    {"{\"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": \"imagenet\"}}",
     "trainable.dataset", "must be \"fashion-mnist\", \"mnist\" or \"cifar10\""},
    {"{\"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": \"mnist\", "
     "\"train_limit\": 0}}",
     "trainable.train_limit", "must be an integer from 1 to 1000000000"},
    {"{\"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": \"mnist\", "
     "\"test\": 1}}",
     "trainable.test", "must be true or false"},
    {"{\"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": \"mnist\", "
     "\"data_dir\": \"\"}}",
     "trainable.data_dir", "must be a non-empty string"},
    {"{\"trainable\": {\"type\": \"builtin\", \"model\": \"cnn\", \"dataset\": \"mnist\", "
     "\"argv\": [\"x\"]}}",
     "trainable.argv",
     "unknown field (a builtin trainable takes type, model, dataset, data_dir, train_limit, test, "
     "device)"},
    {"{\"trainable\": {\"type\": \"command\"}}", "trainable.argv",
     "required (the program and its arguments)"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": []}}", "trainable.argv",
     "must be an array of 1 to 256 strings"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": \"python3 train.py\"}}", "trainable.argv",
     "must be an array of 1 to 256 strings"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"\"]}}", "trainable.argv[0]",
     "must be a non-empty string (the program)"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"python3\", 5]}}", "trainable.argv[1]",
     "must be a string"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"], \"env\": {\"A\": 1}}}",
     "trainable.env.A", "must be a string"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"], \"env\": {\"1A\": \"v\"}}}",
     "trainable.env.1A", "environment names need A-Z a-z 0-9 _ and must not start with a digit"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"], \"env\": [\"A=1\"]}}",
     "trainable.env", "must be an object of at most 256 strings"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"], \"cwd\": 3}}", "trainable.cwd",
     "must be a non-empty string"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"], \"shell\": true}}",
     "trainable.shell", "unknown field (a command trainable takes type, argv, env, cwd, stdout)"},
    /* Placeholders must name a param_space key or a worker name. */
    {"{\"param_space\": {\"lr\": 0.1}, \"trainable\": {\"type\": \"command\","
     " \"argv\": [\"x\", \"{{lit}}\", \"{lr}{trial_id}\", \"--lr={lrr}\"]}}",
     "trainable.argv[3]",
     "unknown placeholder {lrr}: param_space has no key 'lrr' (a placeholder "
     "may name lr, trial_id, trial_name, experiment_id, checkpoint_dir; write {{ and }} for "
     "literal "
     "braces)"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"], \"env\": {\"A\": \"{a}\"}}}",
     "trainable.env.A",
     "unknown placeholder {a}: param_space has no key 'a' (a placeholder may "
     "name trial_id, trial_name, experiment_id, checkpoint_dir; write {{ and }} for literal "
     "braces)"},
    {"{\"fail_fast\": 1, " TRAIN "}", "fail_fast", "must be true or false"},
    {"{\"trainable\": {\"type\": \"command\", \"argv\": [\"x\"], \"stdout\": \"file\"}}",
     "trainable.stdout", "must be \"pty\" or \"pipe\""},
    /* Several objectives: metric and mode as lists of the same length. */
    {"{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\"], " TRAIN "}", "mode",
     "has 1 entries but metric has 2: one mode per metric"},
    {"{\"metric\": [\"a\", \"a\"], \"mode\": [\"min\", \"max\"], " TRAIN "}", "metric[1]",
     "'a' is already metric[0]: each objective once"},
    {"{\"metric\": [], \"mode\": [], " TRAIN "}", "metric",
     "must be a metric name or a list of 1 to 4 metric names"},
    {"{\"metric\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"mode\": [\"min\", \"min\", \"min\", "
     "\"min\", \"min\"], " TRAIN "}",
     "metric", "must be a metric name or a list of 1 to 4 metric names"},
    {"{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\", \"up\"], " TRAIN "}", "mode[1]",
     "must be \"min\" or \"max\""},
    {"{\"metric\": [\"a\", 3], \"mode\": [\"min\", \"min\"], " TRAIN "}", "metric[1]",
     "must be a string of 1-128 characters from A-Z a-z 0-9 _ . - /"},
    {"{\"metric\": [\"a\", \"b\"], \"mode\": \"min\", " TRAIN "}", "mode",
     "must be a list of \"min\"/\"max\" when metric is a list (one per metric)"},
    {"{\"metric\": \"a\", \"mode\": [\"min\"], " TRAIN "}", "metric",
     "must be a list of metric names when mode is a list (one per mode)"},
    {"{\"mode\": [\"min\"], " TRAIN "}", "metric",
     "required with mode (the result keys to optimise)"},
    /* Several objectives: fifo, asha and hyperband, not the others. */
    {"{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\", \"max\"], \"scheduler\": {\"type\": "
     "\"median_stopping\"}, " TRAIN "}",
     "scheduler.type",
     "takes a single metric: with several objectives use fifo, asha or hyperband (they rank "
     "by non-dominated sorting; median_stopping and pbt stop or exploit trials by one "
     "metric)"},
    {"{\"metric\": [\"lr_out\", \"b\"], \"mode\": [\"min\", \"max\"], \"param_space\": {\"lr\": "
     "{\"type\": \"uniform\", \"lower\": 0.1, \"upper\": 0.2}}, \"scheduler\": {\"type\": "
     "\"pbt\", \"hyperparam_mutations\": {\"lr\": {\"type\": \"uniform\", \"lower\": 0.1, "
     "\"upper\": 0.2}}}, " TRAIN "}",
     "scheduler.type",
     "takes a single metric: with several objectives use fifo, asha or hyperband (they rank "
     "by non-dominated sorting; median_stopping and pbt stop or exploit trials by one "
     "metric)"},
/* constraints (outcome constraints) */
#define CON(X) "{" ASHA "\"constraints\": " X ", " TRAIN "}"
    {CON("{}"), "constraints",
     "must be a list of 1 to 8 objects {\"metric\": NAME, \"op\": \"<=\" or \">=\", \"value\": "
     "NUMBER}"},
    {CON("[]"), "constraints",
     "must be a list of 1 to 8 objects {\"metric\": NAME, \"op\": \"<=\" or \">=\", \"value\": "
     "NUMBER}"},
    {CON("[{\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}, {\"metric\": \"m\", \"op\": \"<=\", "
         "\"value\": 1}, {\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}, {\"metric\": \"m\", "
         "\"op\": \"<=\", \"value\": 1}, {\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}, "
         "{\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}, {\"metric\": \"m\", \"op\": \"<=\", "
         "\"value\": 1}, {\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}, {\"metric\": \"m\", "
         "\"op\": \"<=\", \"value\": 1}]"),
     "constraints",
     "must be a list of 1 to 8 objects {\"metric\": NAME, \"op\": \"<=\" or \">=\", \"value\": "
     "NUMBER}"},
    {"{\"constraints\": [{\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}], " TRAIN "}", "metric",
     "required with constraints (and mode): the feasible trials are ranked by it"},
    {CON("[5]"), "constraints[0]", "must be an object {\"metric\", \"op\", \"value\"}"},
    {CON("[{\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}, {\"metric\": \"m\", \"op\": \"<=\", "
         "\"value\": 1, \"strict\": true}]"),
     "constraints[1].strict", "unknown field (a constraint takes metric, op, value)"},
    {CON("[{\"op\": \"<=\", \"value\": 1}]"), "constraints[0].metric",
     "required: the result key constrained"},
    {CON("[{\"metric\": \"gpu mem\", \"op\": \"<=\", \"value\": 1}]"), "constraints[0].metric",
     "must be a string of 1-128 characters from A-Z a-z 0-9 _ . - /"},
    {CON("[{\"metric\": \"m\", \"value\": 1}]"), "constraints[0].op", "required: \"<=\" or \">=\""},
    {CON("[{\"metric\": \"m\", \"op\": \"<=\", \"value\": 1}, {\"metric\": \"m\", \"op\": \"<\", "
         "\"value\": 1}]"),
     "constraints[1].op",
     "must be \"<=\" or \">=\" (\"<\" and \">\" differ from them only at the bound, \"==\" is "
     "never met by a measured value)"},
    {CON("[{\"metric\": \"m\", \"op\": \"==\", \"value\": 1}]"), "constraints[0].op",
     "must be \"<=\" or \">=\" (\"<\" and \">\" differ from them only at the bound, \"==\" is "
     "never met by a measured value)"},
    {CON("[{\"metric\": \"m\", \"op\": \"<=\"}]"), "constraints[0].value",
     "required: the bound, a finite number"},
    {CON("[{\"metric\": \"m\", \"op\": \"<=\", \"value\": \"2000\"}]"), "constraints[0].value",
     "must be a finite number"},
    {CON("[{\"metric\": \"m\", \"op\": \">=\", \"value\": 1e999}]"), "constraints[0].value",
     "must be a finite number"},
#undef CON
};

START_TEST(bad_config) {
  const struct bad *b = &bad_configs[_i];
  cJSON *c = cJSON_Parse(b->json);
  struct experiment_spec s;
  struct validate_error err;
  ck_assert_msg(c != NULL, "test JSON %d does not parse", _i);
  memset(&err, 0, sizeof err);
  ck_assert_int_eq(validate_experiment(c, &s, &err), -EINVAL);
  ck_assert_msg(strcmp(err.path, b->path) == 0, "case %d: path '%s', want '%s'", _i, err.path,
                b->path);
  ck_assert_msg(strcmp(err.message, b->message) == 0, "case %d: message '%s', want '%s'", _i,
                err.message, b->message);
  /* Nothing to free after a rejection. */
  ck_assert_ptr_null(s.param_space);
  ck_assert_ptr_null(s.trainable);
  cJSON_Delete(c);
}
END_TEST

START_TEST(limits_on_strings_and_depth) {
  struct experiment_spec s;
  struct validate_error err;
  /* A 5000-byte string constant. */
  char *big = malloc(6000), *deep = malloc(2000);
  strcpy(big, "{\"param_space\": {\"note\": \"");
  memset(big + strlen(big), 'a', 5000);
  strcpy(big + strlen("{\"param_space\": {\"note\": \"") + 5000, "\"}, " TRAIN "}");
  cJSON *c = cJSON_Parse(big);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(validate_experiment(c, &s, &err), -EINVAL);
  ck_assert_str_eq(err.path, "param_space.note");
  ck_assert_str_eq(err.message, "string longer than 4096 bytes");
  cJSON_Delete(c);
  /* 40 nested arrays inside a constant. */
  strcpy(deep, "{\"param_space\": {\"k\": ");
  for (int i = 0; i < 40; i++) strcat(deep, "[");
  for (int i = 0; i < 40; i++) strcat(deep, "]");
  strcat(deep, "}, " TRAIN "}");
  c = cJSON_Parse(deep);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(validate_experiment(c, &s, &err), -EINVAL);
  ck_assert_str_eq(err.message, "nested deeper than 32 levels");
  ck_assert_int_eq(strncmp(err.path, "param_space.k[0][0]", 19), 0);
  cJSON_Delete(c);
  /* 20 nested parameter objects. */
  strcpy(deep, "{\"param_space\": ");
  for (int i = 0; i < 20; i++) strcat(deep, "{\"a\": ");
  strcat(deep, "1");
  for (int i = 0; i < 20; i++) strcat(deep, "}");
  strcat(deep, ", " TRAIN "}");
  c = cJSON_Parse(deep);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(validate_experiment(c, &s, &err), -EINVAL);
  ck_assert_str_eq(err.message, "nested deeper than 16 levels");
  cJSON_Delete(c);
  free(big);
  free(deep);
}
END_TEST

static const char *const fragments[] = {
    "0",
    "1",
    "-1",
    "0.5",
    "2",
    "3",
    "4",
    "10",
    "100",
    "1e-308",
    "1e308",
    "9007199254740993",
    "-1e308",
    "1.5",
    "64",
    "\"\"",
    "\"x\"",
    "\"min\"",
    "\"max\"",
    "\"asha\"",
    "\"fifo\"",
    "\"loss\"",
    "\"builtin\"",
    "\"command\"",
    "\"cnn\"",
    "\"mnist\"",
    "null",
    "true",
    "false",
    "[]",
    "[1, 2]",
    "[\"a\"]",
    "{}",
    "{\"grid_search\": [1, 2, 3]}",
    "{\"type\": \"uniform\", \"lower\": 0, \"upper\": 1}",
    "{\"type\": \"loguniform\", \"lower\": 1e-300, \"upper\": 1e300}",
    "{\"type\": \"quniform\", \"lower\": -1e300, \"upper\": 1e300, \"q\": 1e-300}",
    "{\"type\": \"qloguniform\", \"lower\": 1e-300, \"upper\": 1e300, \"q\": 1e299}",
    "{\"type\": \"randint\", \"lower\": -9007199254740992, \"upper\": 9007199254740992}",
    "{\"type\": \"lograndint\", \"lower\": 1, \"upper\": 9007199254740992}",
    "{\"type\": \"qrandint\", \"lower\": -9007199254740992, \"upper\": 9007199254740992, \"q\": 3}",
    "{\"type\": \"pow2\", \"lower\": 1, \"upper\": 4503599627370496}",
    "{\"type\": \"randn\", \"mean\": 1e308, \"sd\": 1e308}",
    "{\"type\": \"choice\", \"values\": [null, {}, []]}",
    "{\"type\": \"asha\", \"max_t\": 1e308, \"grace_period\": 1e-300, \"reduction_factor\": 1e300}",
    "{\"type\": \"asha\", \"max_t\": 3, \"grace_period\": 3, \"reduction_factor\": 1.0000001}",
    "{\"type\": \"asha\", \"brackets\": 16, \"max_t\": 2, \"reduction_factor\": 1.5}",
    "{\"type\": \"command\", \"argv\": [\"x\"]}",
    "{\"type\": \"builtin\", \"model\": \"mlp\", \"dataset\": \"mnist\"}",
};

static const char *const fields[] = {
    "name",      "metric",       "mode",        "num_samples", "max_concurrent_trials",
    "seed",      "max_failures", "param_space", "scheduler",   "resources_per_trial",
    "trainable", "extra",
};

static int all_finite(const cJSON *v) {
  const cJSON *item;
  if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) return 0;
  cJSON_ArrayForEach(item, v) if (!all_finite(item)) return 0;
  return 1;
}

/* Random configs built from edge-case fragments: validation either accepts
 * (and then sampling, the scheduler and a result all work) or names a path
 * and a rule; it never crashes, leaks or hits undefined behaviour. */
START_TEST(random_configs_never_crash) {
  struct rng g;
  int accepted = 0, rejected = 0;
  const int nf = (int)(sizeof fragments / sizeof fragments[0]);
  rng_seed(&g, 2026);
  for (int iter = 0; iter < 6000; iter++) {
    cJSON *c = cJSON_Parse("{\"metric\": \"loss\", \"mode\": \"min\","
                           " \"trainable\": {\"type\": \"command\", \"argv\": [\"x\"]},"
                           " \"param_space\": {}, \"scheduler\": {\"type\": \"asha\"}}");
    int nmut = 1 + (int)rng_int_range(&g, 0, 4);
    for (int m = 0; m < nmut; m++) {
      const char *f = fields[rng_int_range(&g, 0, sizeof fields / sizeof fields[0])];
      cJSON *v = cJSON_Parse(fragments[rng_int_range(&g, 0, nf)]);
      cJSON *target = c;
      /* Half the time, put it one level down instead. */
      if (rng_uniform(&g) < 0.5) {
        const char *inner[] = {"param_space", "scheduler", "resources_per_trial", "trainable"};
        cJSON *o = cJSON_GetObjectItem(c, inner[rng_int_range(&g, 0, 4)]);
        const char *keys[] = {"lr",       "type", "max_t", "grace_period", "reduction_factor",
                              "brackets", "cpu",  "argv",  "model",        "time_attr"};
        if (cJSON_IsObject(o)) {
          target = o;
          f = keys[rng_int_range(&g, 0, 10)];
        }
      }
      ck_assert_ptr_nonnull(v);
      if (cJSON_GetObjectItem(target, f))
        cJSON_ReplaceItemInObject(target, f, v);
      else
        cJSON_AddItemToObject(target, f, v);
    }
    struct experiment_spec s;
    struct validate_error err;
    memset(&err, 0, sizeof err);
    int rc = validate_experiment(c, &s, &err);
    if (rc == 0) {
      struct sched *sc = NULL;
      struct sched_outcome o;
      double v = 0.5;
      cJSON *configs = NULL;
      accepted++;
      ck_assert_int_le(s.num_trials, 100000);
      if (s.num_trials <= 1000) {
        ck_assert_int_eq(space_generate(s.param_space, s.num_samples, s.seed, &configs, &err), 0);
        ck_assert_int_eq(cJSON_GetArraySize(configs), s.num_trials);
        ck_assert_msg(all_finite(configs), "iteration %d: a sampled value is not finite", iter);
        cJSON_Delete(configs);
      }
      ck_assert_int_eq(sched_create(&s.sched, s.mode, s.seed, &sc), 0);
      ck_assert_int_eq(sched_add_trial(sc, 1, iter, NULL), 0);
      ck_assert_int_eq(sched_on_result(sc, 1, 1, &v, &o), 0);
      ck_assert_int_eq(sched_on_trial_end(sc, 1, 1, 1, &v, &o), 0);
      sched_free(sc);
      validate_spec_free(&s);
    } else {
      ck_assert_int_eq(rc, -EINVAL);
      ck_assert_msg(err.message[0] != 0, "iteration %d: no message", iter);
      ck_assert_ptr_null(s.param_space);
      rejected++;
    }
    cJSON_Delete(c);
  }
  ck_assert_int_gt(accepted, 200);
  ck_assert_int_gt(rejected, 200);
}
END_TEST

/* metric and mode as lists: every objective kept in order, [0] also as
 * metric/mode; a list of one is one objective; a string stays one. */
START_TEST(several_objectives) {
  struct experiment_spec s;
  struct validate_error err;
  cJSON *c = cJSON_Parse("{\"metric\": [\"val_loss\", \"latency_ms\", \"acc\"], \"mode\": "
                         "[\"min\", \"min\", \"max\"], \"search_alg\": {\"type\": \"random\"}, "
                         "\"scheduler\": {\"type\": \"fifo\"}, " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.has_metric, 1);
  ck_assert_int_eq(s.nobjectives, 3);
  ck_assert_str_eq(s.metric, "val_loss");
  ck_assert_int_eq(s.mode, SPEC_MODE_MIN);
  ck_assert_str_eq(s.objectives[1], "latency_ms");
  ck_assert_str_eq(s.objectives[2], "acc");
  ck_assert_int_eq(s.modes[1], SPEC_MODE_MIN);
  ck_assert_int_eq(s.modes[2], SPEC_MODE_MAX);
  ck_assert_int_eq(s.has_reference_point, 0);
  validate_spec_free(&s);
  cJSON_Delete(c);
  c = cJSON_Parse("{\"metric\": [\"loss\", \"acc\"], \"mode\": [\"min\", \"max\"], "
                  "\"reference_point\": [1.1, -0.5], " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.has_reference_point, 1);
  ck_assert_double_eq(s.reference_point[0], 1.1);
  ck_assert_double_eq(s.reference_point[1], -0.5);
  validate_spec_free(&s);
  cJSON_Delete(c);
  /* asha (stopping) ranks by every objective: the scheduler gets them. */
  c = cJSON_Parse("{\"metric\": [\"loss\", \"acc\"], \"mode\": [\"min\", \"max\"], "
                  "\"scheduler\": {\"type\": \"asha\", \"promotion\": true}, " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.sched.nobjectives, 2);
  ck_assert_int_eq(s.sched.modes[0], SPEC_MODE_MIN);
  ck_assert_int_eq(s.sched.modes[1], SPEC_MODE_MAX);
  validate_spec_free(&s);
  cJSON_Delete(c);
  c = cJSON_Parse("{\"metric\": [\"loss\", \"acc\", \"ms\"], \"mode\": [\"min\", \"max\", "
                  "\"min\"], \"scheduler\": {\"type\": \"hyperband\"}, " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.sched.nobjectives, 3);
  validate_spec_free(&s);
  cJSON_Delete(c);
  /* tpe learns from every objective: the defaults for several written in. */
  c = cJSON_Parse("{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\", \"max\"], \"search_alg\": "
                  "{\"type\": \"tpe\"}, " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  const cJSON *gm = cJSON_GetObjectItemCaseSensitive(s.search_alg, "gamma_max");
  ck_assert(cJSON_IsNumber(gm) && gm->valuedouble == SPEC_NUM_SAMPLES_MAX);
  validate_spec_free(&s);
  cJSON_Delete(c);
  /* A stored warm_start trial's values: one per objective. */
  static const char *const bad_values[] = {"[1]", "[1, \"x\"]", "{\"a\": 1}"};
  for (int i = 0; i < 3; i++) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"metric\": [\"a\", \"b\"], \"mode\": [\"min\", \"max\"], \"search_alg\": "
             "{\"type\": \"tpe\"}, \"warm_start\": {\"experiment\": 1, \"trials\": [{\"config\": "
             "{}, \"value\": 1, \"values\": [1, null]}, {\"config\": {}, \"value\": 1, "
             "\"values\": %s}]}, " TRAIN "}",
             bad_values[i]);
    c = cJSON_Parse(buf);
    ck_assert_int_eq(validate_experiment_stored(c, &s, &err), -EINVAL);
    ck_assert_str_eq(err.path, "warm_start.trials[1].values");
    ck_assert_str_eq(err.message, "must be a list of 2 numbers or nulls (one per metric)");
    cJSON_Delete(c);
  }
  c = cJSON_Parse("{\"metric\": [\"acc\"], \"mode\": [\"max\"], " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.nobjectives, 1);
  ck_assert_str_eq(s.metric, "acc");
  ck_assert_int_eq(s.mode, SPEC_MODE_MAX);
  validate_spec_free(&s);
  cJSON_Delete(c);
  c = cJSON_Parse("{\"metric\": \"acc\", \"mode\": \"max\", " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.nobjectives, 1);
  ck_assert_str_eq(s.objectives[0], "acc");
  ck_assert_int_eq(s.modes[0], SPEC_MODE_MAX);
  validate_spec_free(&s);
  cJSON_Delete(c);
  c = cJSON_Parse("{" TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.nobjectives, 0);
  ck_assert_int_eq(s.has_metric, 0);
  validate_spec_free(&s);
  cJSON_Delete(c);
}
END_TEST

START_TEST(constraints_parsed) {
  struct experiment_spec s;
  struct validate_error err;
  cJSON *c = cJSON_Parse("{\"metric\": \"loss\", \"mode\": \"min\", \"constraints\": "
                         "[{\"metric\": \"gpu_mem_mb\", \"op\": \"<=\", \"value\": 2000}, "
                         "{\"metric\": \"acc\", \"op\": \">=\", \"value\": -0.5}], " TRAIN "}");
  ck_assert_int_eq(validate_experiment(c, &s, &err), 0);
  ck_assert_int_eq(s.nconstraints, 2);
  ck_assert_str_eq(s.constraints[0].metric, "gpu_mem_mb");
  ck_assert_int_eq(s.constraints[0].op, SPEC_CON_LE);
  ck_assert(s.constraints[0].value == 2000);
  ck_assert_str_eq(s.constraints[1].metric, "acc");
  ck_assert_int_eq(s.constraints[1].op, SPEC_CON_GE);
  ck_assert(s.constraints[1].value == -0.5);
  validate_spec_free(&s);
  /* The stored config reads back the same; one without constraints has none. */
  ck_assert_int_eq(validate_experiment_stored(c, &s, &err), 0);
  ck_assert_int_eq(s.nconstraints, 2);
  validate_spec_free(&s);
  cJSON_Delete(c);
  c = cJSON_Parse("{\"metric\": \"loss\", \"mode\": \"min\", " TRAIN "}");
  ck_assert_int_eq(validate_experiment_stored(c, &s, &err), 0);
  ck_assert_int_eq(s.nconstraints, 0);
  validate_spec_free(&s);
  cJSON_Delete(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("validate");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, design_example_and_defaults);
  tcase_add_test(tc, minimal_config_defaults);
  tcase_add_loop_test(tc, bad_config, 0, (int)(sizeof bad_configs / sizeof bad_configs[0]));
  tcase_add_test(tc, limits_on_strings_and_depth);
  tcase_add_test(tc, several_objectives);
  tcase_add_test(tc, constraints_parsed);
  tcase_add_test(tc, random_configs_never_crash);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
