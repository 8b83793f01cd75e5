/* A trial of several member processes (torchrun's variables, which the
 * worker sets on each member): who this process is, and the tiny TCP
 * rendezvous on MASTER_ADDR:MASTER_PORT through which rank 0 hands its NCCL
 * unique id to every other member. */
#ifndef CTUNE_TRAINER_DIST_H
#define CTUNE_TRAINER_DIST_H

#include <stddef.h>

struct dist {
  int world_size; /* 1: this process alone (WORLD_SIZE unset or 1) */
  int rank;
  char addr[256]; /* MASTER_ADDR */
  char port[8];   /* MASTER_PORT, checked to be 1..65535 */
};

/* Reads WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT from the environment.
 * 0, or -EINVAL with a sentence naming the variable and its value in err. */
int dist_from_env(struct dist *d, char *err, size_t errlen);

/* Rank 0 listens on MASTER_PORT, takes one connection from each other rank
 * and sends it the len bytes of blob; every other rank connects to
 * MASTER_ADDR:MASTER_PORT (again until rank 0 listens) and reads them into
 * blob. Everything waits at most timeout_ms in all. 0, or a negative errno
 * with the sentence in err (-ETIMEDOUT: a member did not come in time). */
int dist_share(const struct dist *d, void *blob, size_t len, int timeout_ms, char *err,
               size_t errlen);

#endif
