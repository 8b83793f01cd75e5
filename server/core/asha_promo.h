/* asha_promo: the promotion variant of Asynchronous Successive Halving (Li et
 * al., "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020,
 * Algorithm 2 "get_job"), for trials created on demand. A trial pauses at
 * each rung it reaches; when a slot frees, apromo_choose looks from the top
 * rung down for a paused trial in the top floor(n_k / eta) of its rung that
 * was not promoted yet and resumes it; else a new trial. Every change is a
 * record that apromo_restore replays, so a restarted server decides exactly
 * as one that never stopped. Pure: no I/O, clock or globals.
 * tests/server/unit/gen_asha_promo_vectors.py transcribes the paper's
 * algorithm; docs/scheduling.md#asha-with-promotion has the details. */
#ifndef CTUNE_ASHA_PROMO_H
#define CTUNE_ASHA_PROMO_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>
#include "spec.h"

struct apromo;

enum apromo_action { APROMO_CONTINUE = 0, APROMO_PAUSE = 1, APROMO_STOP = 2 };
enum apromo_stop_why { APROMO_MAX_T = 1, APROMO_NONFINITE = 2 };

struct apromo_outcome {
  enum apromo_action action;
  enum apromo_stop_why why; /* STOP */
  int bracket;
  int rung;      /* PAUSE / NONFINITE: the rung index (0 = lowest) */
  double rung_t; /* its t */
  int64_t rank;  /* PAUSE: 1-based rank at the rung when recorded */
  int64_t n;     /* values recorded at the rung (this one included) */
  cJSON *record; /* NULL or the change to persist (caller owns) */
  /* PAUSE with several objectives: the 0-based front of how many (the
   * rank is the position in the non-dominated order, rung_mo_order()). */
  int front, nfronts;
};

struct apromo_choice {
  int found; /* 1: resume trial_id */
  int64_t trial_id;
  int bracket, rung; /* promoted from (bracket, rung) */
  double rung_t, next_t;
  int64_t top, n; /* it was in the top `top` = floor(n / eta) of n */
  cJSON *record;  /* found: the change to persist (caller owns) */
};

typedef int (*apromo_resumable_fn)(void *ctx, int64_t trial_id);

/* params: type asha, promotion 1, valid (validate checks). */
int apromo_create(const struct sched_params *params, enum spec_mode mode, uint64_t seed,
                  struct apromo **out);
void apromo_free(struct apromo *a);
/* Bytes the state holds (asha_mem_bytes' counterpart). 0 for NULL. */
size_t apromo_mem_bytes(const struct apromo *a);

int apromo_num_brackets(const struct apromo *a);
/* Pausing rungs of bracket b: grace_period * eta^(k+b) < max_t. */
int apromo_num_rungs(const struct apromo *a, int bracket);
double apromo_rung_t(const struct apromo *a, int bracket, int k);
/* The bracket of the idx-th trial: the stopping variant's draw (same seed,
 * same brackets). */
int apromo_bracket_for(const struct apromo *a, int64_t idx);

/* The trial exists (created, or at load not ended). Idempotent; -EINVAL for
 * a bad bracket or one that contradicts its restored records. */
int apromo_add_trial(struct apromo *a, int64_t trial_id, int bracket);

/* One result; value NaN for a missing, null or non-finite metric (the
 * caller skips results without the metric). A trial reaching its next rung
 * records its value there and pauses (non-finite: stops); reaching max_t
 * stops. -ENOENT: unknown trial. */
int apromo_on_result(struct apromo *a, int64_t trial_id, double t, double value,
                     struct apromo_outcome *out);
/* apromo_on_result with several objectives (params' nobjectives values in
 * their own signs, NaN for null): a rung ranks its finite vectors by
 * rung_mo_order() (non-dominated sort, epsilon-net within a front, ties by
 * arrival), non-finite ones last; choose promotes from that order's top
 * floor(n/eta). With one objective it is apromo_on_result. */
int apromo_on_result_mo(struct apromo *a, int64_t trial_id, double t, const double *values,
                        struct apromo_outcome *out);
/* The trial ended: never promoted after this. Its values stay counted. */
int apromo_on_trial_end(struct apromo *a, int64_t trial_id);

/* get_job: the first promotable trial from the top rung down (brackets in
 * order), ranked best first within the rung's top floor(n/eta) (ties: the
 * earlier record first). resumable (may be NULL) skips trials the server
 * cannot resume now. A found choice is taken: persist its record. */
int apromo_choose(struct apromo *a, apromo_resumable_fn resumable, void *ctx,
                  struct apromo_choice *out);

/* Replays one record (from an outcome or a choice) in the original order. */
int apromo_restore(struct apromo *a, int64_t trial_id, const cJSON *record);

/* [{"index", "rungs": [{"t", "recorded", "paused", "promoted"}]}] */
int apromo_state_json(const struct apromo *a, cJSON **out);

#endif
