/* rung: what both ASHA variants (asha.c stops, asha_promo.c pauses and
 * promotes) share, so that they plan brackets, draw a trial's bracket and
 * find a trial's state the same way: the milestones of a bracket, the
 * bracket draw, a doubling array, and a table of per-trial slots in arrival
 * order found through an idmap. What a rung records differs (sorted values
 * for a percentile; ranked trials for a promotion) and stays with each
 * variant. Pure: no I/O, clock or globals. */
#ifndef CTUNE_RUNG_H
#define CTUNE_RUNG_H

#include <stddef.h>
#include <stdint.h>

#include "idmap.h"
#include "spec.h"

/* Milestone k of bracket s: grace * rf^(k+s). */
double rung_t(double grace, double rf, int s, int k);

/* Ray's milestone count of bracket s, int(log(max_t / grace) / log(rf) -
 * s + 1), truncated toward zero as Python's int() and 0 when negative.
 * -EINVAL when it is more than SPEC_ASHA_MAX_MILESTONES (or NaN). */
int rung_ray_count(double max_t, double grace, double rf, int s, int *n);

/* The pausing rungs of bracket s: the milestones below max_t (one at max_t
 * or past it is the end, not a pause), at most SPEC_ASHA_MAX_MILESTONES. */
int rung_pause_count(double max_t, double grace, double rf, int s);

/* The bracket draw's seed for an experiment seed: one constant, so both
 * variants draw the same brackets from the same seed. */
uint64_t rung_bracket_seed(uint64_t seed);

/* The bracket of the idx-th trial (0-based creation order) among nb
 * brackets, bracket s drawn with probability proportional to e^n[s]: a pure
 * function of (bracket_seed, idx), so a restart draws the same one. */
int rung_bracket_draw(uint64_t bracket_seed, const int *n, int nb, int64_t idx);

/* Doubles an array of *cap elements of size bytes (to `first` when *cap is
 * 0): amortized O(1) appends, and an array costs what it holds. Returns the
 * reallocated array with *cap updated, or NULL (out of memory or size
 * overflow) with arr and *cap unchanged. */
void *rung_grow(void *arr, size_t *cap, size_t size, size_t first);

/* Per-trial slots of the caller's own type (size bytes each), in arrival
 * order. A zeroed table with size set is empty: rung_slots_init. */
struct rung_slots {
  unsigned char *v; /* n of cap slots */
  size_t size, n, cap;
  struct idmap ids; /* trial id -> slot index */
};

void rung_slots_init(struct rung_slots *t, size_t size);
void rung_slots_free(struct rung_slots *t);
/* Bytes the table holds beyond its struct: the slots' and id map's capacity. */
size_t rung_slots_mem_bytes(const struct rung_slots *t);
/* The trial's slot, or NULL when it has none. */
void *rung_slot_find(const struct rung_slots *t, int64_t id);
/* Finds the trial's slot or appends a zeroed one (*created = 1; the caller
 * fills it). 0 or -ENOMEM (table unchanged). */
int rung_slot_get(struct rung_slots *t, int64_t id, void **out, int *created);

/* Several objectives at one rung (MOASHA, as Syne Tune's NonDominatedPriority
 * ranks them): n points of k finite objectives, row-major, each already
 * flipped so that smaller is better. The order is the non-dominated sort's
 * (pareto_front(), peeled front by front); inside a front an epsilon-net:
 * first the point with the least first objective, then each time the point
 * whose least Euclidean distance to those already placed is the largest.
 * Ties go to the earlier point (the lower index: arrival order at the rung).
 * The fronts take O(n log n) for two objectives (sorted), a peel for more.
 * Sets pos[i] to point i's 0-based position in that order and front[i] to
 * its 0-based front; *nfronts to how many fronts there are. 0, -EINVAL (k
 * outside 1..SPEC_MAX_OBJECTIVES) or -ENOMEM. */
int rung_mo_order(const double *x, size_t n, int k, size_t *pos, int *front, int *nfronts);

/* Only point of's place in rung_mo_order()'s order (*pos, 0-based) and
 * front (*front), and *nfronts: the epsilon-net runs in of's front alone.
 * For a new point's decision; -EINVAL when of >= n, -ENOMEM. */
int rung_mo_rank(const double *x, size_t n, int k, size_t of, size_t *pos, int *front,
                 int *nfronts);

/* The objectives of params (1, or its nobjectives up to
 * SPEC_MAX_OBJECTIVES) and, for each, flip[j]: +1 when it is minimised, -1
 * when maximised (mode is the single metric's), so that flipped values are
 * "smaller is better" as rung_mo_order() takes them. */
int rung_mo_flips(const struct sched_params *params, enum spec_mode mode, double *flip);

/* How many of n ranked points continue when position p stops if
 * p / n > 1 / rf (Syne Tune's and Ray's "top 1/rf" test, in the same float
 * steps). */
size_t rung_mo_keep(size_t n, double rf);

#endif
