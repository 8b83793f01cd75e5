/* tpe_mo: what the TPE searcher needs for several objectives (Optuna's
 * MOTPE, optuna/samplers/_tpe/sampler.py, v5.0): the split of finished trials into the "below"
 * (good) and "above" groups by non-dominated rank, the last rank that does not fit whole cut by
 * greedy hypervolume subset selection. Every value here is a loss: minimised (the caller negates
 * maximised objectives). Pure: no I/O, no global state. */
#ifndef CTUNE_TPE_MO_H
#define CTUNE_TPE_MO_H

#include <stddef.h>

/* Optuna 5.0's _split_complete_trials_multi_objective: marks below[i] = 1
 * for the n_below (clipped to n) points of loss (n x d, finite) it keeps:
 * whole non-dominated ranks from the first while they fit, then, from the
 * first rank that does not fit whole, the points a greedy hypervolume
 * subset selection picks (reference point: the rank's worst coordinate
 * times 1.1, or 0.9 where it is negative; equal points counted once, the
 * later copies taken first-come when too few distinct ones remain). Ties
 * between equal contributions go to the lexicographically smallest point,
 * then the smaller index, as Optuna's (which works on np.unique's lexsorted
 * rows). Depends only on the rows, not on anything else. 0, -EINVAL or
 * -ENOMEM. */
int tpe_mo_split(const double *loss, size_t n, int d, size_t n_below, unsigned char *below);

/* Optuna 4's weights of the below group (removed in 5.0): each point on
 * its front weighs its share of the front's hypervolume (what is lost
 * without it), scaled so the largest is 1; the others weigh 1e-12. */
int tpe_mo_weights(const double *loss, size_t n, int d, double *w);

#endif
