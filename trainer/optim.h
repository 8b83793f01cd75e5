/* Optimiser updates over the flat parameter buffer, and parameter
 * initialisation; both pure and backend-independent (the CUDA backend runs
 * the same per-element math from ops_math.h). */
#ifndef CTUNE_TRAINER_OPTIM_H
#define CTUNE_TRAINER_OPTIM_H

#include <stdint.h>

#include "backend.h"
#include "splitmix.h"

/* One step over n parameters. state holds optim_state_per_param(kind) * n
 * floats (SGD: velocity; Adam: m then v). step is the 1-based step number
 * (used by Adam's bias correction). */
void optim_step(const struct optim_spec *o, float *params, float *state, const float *grads,
                int64_t n, int64_t step);

/* PyTorch's default init for Linear and Conv2d: weights and biases uniform in
 * +-1/sqrt(fan_in). Draws from r in layout order. */
void optim_init_params(const struct model_layout *L, struct splitmix *r, float *params);

#endif
