/* state_internal: helpers shared by state.c, state_ops.c and state_load.c
 * (not for the API handlers). */
#ifndef CTUNE_STATE_INTERNAL_H
#define CTUNE_STATE_INTERNAL_H

#include <stdint.h>

#include "state.h"

/* Index of s in names[0..n), or -1. */
int state_status_parse(const char *const *names, int n, const char *s);
char *state_strdup_or_null(const char *s);
/* Grows an array of pointers so that it holds `need` entries. -ENOMEM. */
int state_grow(void ***arr, int64_t *cap, int64_t need);
void state_trial_free(struct srv_trial *t);
void state_experiment_free(struct srv_experiment *e);

/* Bounded memory (state_compact.c): the 011 columns of t's row. */
void state_trial_summary_row(const struct srv_trial *t, struct store_trial_row *row);

/* The op that stores a new experiment with all its trials. */
struct exp_op;
struct exp_op *state_exp_op_make(const struct srv_experiment *e, struct srv_trial *const *trials,
                                 int64_t n);
int state_exp_op_enqueue(struct server *s, struct exp_op *op, uint64_t *ticket);
void state_exp_op_free(void *op);

#endif
