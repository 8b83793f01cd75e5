/* spec: the plain structs a validated experiment config becomes; shared by
 * validate (which fills them), space, asha, sched and best (which read them);
 * and how a check names what it rejected (struct validate_error, spec.c). */
#ifndef CTUNE_SPEC_H
#define CTUNE_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>

#define SPEC_NAME_MAX 128           /* names, metric, time_attr: 1..128 chars */
#define SPEC_NUM_SAMPLES_MAX 100000 /* also the cap on grid product x num_samples */
#define SPEC_ASHA_MAX_MILESTONES 64 /* per bracket */
#define SPEC_ASHA_MAX_BRACKETS 16
#define SPEC_MAX_OBJECTIVES 4  /* metric/mode as lists: 1..4 entries */
#define SPEC_MAX_CONSTRAINTS 8 /* "constraints": 1..8 entries */

enum spec_mode { SPEC_MODE_MIN = 0, SPEC_MODE_MAX = 1 };
enum spec_sched_type {
  SPEC_SCHED_FIFO = 0,
  SPEC_SCHED_ASHA = 1,
  SPEC_SCHED_HYPERBAND = 2 /* hyperband.c */,
  SPEC_SCHED_PBT = 3 /* pbt.c */,
  SPEC_SCHED_MEDIAN = 4 /* median.c: median_stopping */
};

#define SPEC_PBT_MAX_FACTORS 16

/* pbt (server/core/pbt.h): Ray's PopulationBasedTraining options. */
struct pbt_params {
  double perturbation_interval;         /* > 0; Ray's default 60 */
  double burn_in_period;                /* >= 0; default 0 */
  double quantile_fraction;             /* [0, 0.5]; default 0.25 */
  double resample_probability;          /* [0, 1]; default 0.25 */
  int nfactors;                         /* 1..SPEC_PBT_MAX_FACTORS; default 2 */
  double factors[SPEC_PBT_MAX_FACTORS]; /* default 1.2, 0.8 */
  /* hyperparam_mutations. In an experiment_spec: its own copy, freed by
   * validate_spec_free; pbt_create copies it again. */
  cJSON *mutations;
};

/* median_stopping (server/core/median.h): Ray's MedianStoppingRule options. */
struct median_params {
  double grace_period;          /* >= 0; Ray's default 60 */
  int64_t min_samples_required; /* >= 1; default 3 */
  double min_time_slice;        /* >= 0; default 0 (accepted, see the docs) */
  int hard_stop;                /* default 1; 0: pause instead of stop */
};

struct sched_params {
  enum spec_sched_type type;
  char time_attr[SPEC_NAME_MAX + 1]; /* default "training_iteration" */
  int has_max_t;                     /* fifo: 0 unless given; asha: always 1 */
  double max_t;                      /* asha default 100 */
  double grace_period;               /* asha default 1 */
  double reduction_factor;           /* asha default 4 */
  int brackets;                      /* asha default 1 */
  int promotion;                     /* asha: the promotion variant (asha_promo.c) */
  int64_t num_trials;                /* hyperband: the experiment's plan (validate copies it) */
  /* The experiment's objectives (validate copies them): 1 for a single
   * metric (or none); with several, asha and hyperband rank by them
   * (docs/scheduling.md#several-objectives) and a result's value is an
   * array of nobjectives values in modes[j]'s sign. */
  int nobjectives;
  enum spec_mode modes[SPEC_MAX_OBJECTIVES];
  struct pbt_params pbt;       /* type pbt */
  struct median_params median; /* type median_stopping */
};

/* One outcome constraint (docs/scheduling.md#outcome-constraints): a
 * trial is feasible when its value of metric is <= (SPEC_CON_LE) or >=
 * (SPEC_CON_GE) value. */
enum spec_con_op { SPEC_CON_LE = 0, SPEC_CON_GE = 1 };
struct spec_constraint {
  char metric[SPEC_NAME_MAX + 1];
  enum spec_con_op op;
  double value; /* finite */
};

struct spec_resources {
  double cpu;        /* default 1; fractional allowed */
  double gpu;        /* default 0; fractional allowed */
  int64_t memory_mb; /* default 0 = no limit */
  /* Member processes of one trial (a gang), each with the three above;
   * default 1: a trial is one process. */
  int64_t num_workers;
};

#define SPEC_GANG_MAX 64 /* the most members a gang trial may have */

struct experiment_spec {
  char name[SPEC_NAME_MAX + 1];   /* default "experiment" */
  int has_metric;                 /* metric and mode are given together */
  char metric[SPEC_NAME_MAX + 1]; /* the first objective (the only one for most uses) */
  enum spec_mode mode;
  /* Every objective, metric/mode included as [0]: 1 for a string metric,
   * the list's length for a list (0 without a metric). fifo, asha and
   * hyperband take more than one, with random/grid/tpe search
   * (docs/scheduling.md#several-objectives). */
  int nobjectives;
  char objectives[SPEC_MAX_OBJECTIVES][SPEC_NAME_MAX + 1];
  enum spec_mode modes[SPEC_MAX_OBJECTIVES];
  /* "constraints" (0 when absent): server/core/constraint.h. */
  int nconstraints;
  struct spec_constraint constraints[SPEC_MAX_CONSTRAINTS];
  int64_t num_samples;           /* default 1 */
  int64_t num_trials;            /* grid product x num_samples */
  int64_t max_concurrent_trials; /* 0 = unlimited */
  int has_seed;                  /* no seed: the daemon picks one and stores it */
  uint64_t seed;
  /* "reference_point": the hypervolume's corner, one value per objective in
   * its own units (hypervolume.h); derived from the trials when absent. */
  int has_reference_point;
  double reference_point[SPEC_MAX_OBJECTIVES];
  int64_t max_failures; /* default 0 */
  int fail_fast;        /* the first trial ERROR for good cancels the experiment */
  struct sched_params sched;
  struct spec_resources resources;
  cJSON *param_space; /* owned copy; {} when absent */
  cJSON *trainable;   /* owned copy, validated */
  /* The searcher's options (owned copies or NULL):
   * {"type": "random"|"tpe", ...}, [partial configs],
   * {"experiment": ID, "trials": [{"config", "value"}]} (trials: filled
   * by the server at submission). */
  cJSON *search_alg;
  cJSON *points_to_evaluate;
  cJSON *warm_start;
  /* Stop rules, checked after the scheduler: the "stop" dict (owned
   * copy or NULL) and "time_budget_s" (0 = none). */
  cJSON *stop;
  double time_budget_s;
};

/* Where and why a config was rejected: path like "param_space.lr.lower",
 * message like "loguniform needs 0 < lower < upper". */
struct validate_error {
  char path[256];
  char message[512];
};

/* Fills err (printf-style message); err may be NULL. Every module that
 * checks part of a config (validate, space, pbt, median, tpe, searcher)
 * names what is wrong with it. */
void spec_error_set(struct validate_error *err, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* dst = base + sep + key (just key when base is empty; no separator when
 * sep is 0), cut to fit size: the path of a field inside its parent. */
void spec_path_join(char *dst, size_t size, const char *base, char sep, const char *key);

/* Reading the fields of one config object at path (a wrong field's path is
 * path.key), for validate and for each scheduler's own check. The getters
 * return 1 when the field is present and right, 0 when it is absent, and
 * -EINVAL with err filled when it is wrong. */
/* A name-like string (1..SPEC_NAME_MAX of A-Z a-z 0-9 _ . -, and / when
 * allow_slash), copied into dst (SPEC_NAME_MAX + 1 bytes). */
/* 1 when s is such a name, else 0. */
int spec_name_ok(const char *s, int allow_slash);
int spec_get_name(const cJSON *obj, const char *path, const char *key, int allow_slash, char *dst,
                  struct validate_error *err);
/* An integer in [lo, hi]. */
int spec_get_int(const cJSON *obj, const char *path, const char *key, double lo, double hi,
                 int64_t *dst, struct validate_error *err);
/* A finite number; range checks are the caller's. */
int spec_get_number(const cJSON *obj, const char *path, const char *key, double *dst,
                    struct validate_error *err);
/* 0, or -EINVAL naming the first key of obj not in allowed (NULL-terminated):
 * "unknown field (WHAT takes a, b, ...)". */
int spec_check_keys(const cJSON *obj, const char *path, const char *what,
                    const char *const *allowed, struct validate_error *err);
/* Fills err with path.key and msg; returns -EINVAL. */
int spec_fail_at(struct validate_error *err, const char *path, const char *key, const char *msg);

#endif
