/* The CPU network: the layers of a model_layout wired together over one
 * parameter buffer and one gradient buffer of the same layout, with every
 * activation buffer sized once for the largest batch. */
#ifndef CTUNE_TRAINER_NET_H
#define CTUNE_TRAINER_NET_H

#include <stdint.h>

#include "backend.h"

struct net;

/* -EINVAL for a bad spec or max_batch < 1, -ENOMEM. */
int net_create(const struct model_spec *spec, int max_batch, struct net **out);
void net_destroy(struct net *n);
const struct model_layout *net_layout(const struct net *n);
/* Bytes held by the activation buffers (for the memory report). */
int64_t net_buffer_bytes(const struct net *n);

/* Forward pass on B <= max_batch images x ([B][in_dim], NCHW per image).
 * Returns the logits ([B][n_classes]), owned by the net, valid until the next
 * call. */
const float *net_forward(struct net *n, const float *params, const float *x, int B);

/* After net_forward on the same x: softmax cross-entropy against y, then the
 * backward pass writing grads (n_params floats, overwritten). *loss_sum and
 * *correct are added to. */
void net_backward(struct net *n, const float *params, const uint8_t *y, int B, float *grads,
                  double *loss_sum, int *correct);

#endif
