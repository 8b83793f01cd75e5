/* rdzv: the rendezvous ports of the gang trials whose rank 0 runs on this
 * worker (docs/worker.md#gang-members). A port is free on the machine when
 * it is chosen (the kernel's pick for a socket bound to port 0), and no two
 * running trials on the machine get the same one: the kernel may hand a
 * port out again as soon as the probe closes it, before the trial binds it,
 * so each port in use is claimed until its trial ends, here and, with a
 * claim dir, machine-wide: <run dir>/port/<port>, flock'd by its holder
 * (another worker on this machine, or this one, cannot lock it; a dead
 * worker's lock goes with it). */
#ifndef CTUNE_WORKER_RDZV_H
#define CTUNE_WORKER_RDZV_H

#include <stddef.h>

struct rdzv_ports {
  int *port; /* in use, unordered */
  int *fd;   /* each one's locked claim file, or -1 */
  size_t n, cap;
  char dir[4096]; /* the claim dir; "" none (this worker's own ports only) */
};

/* Claims ports machine-wide under run_dir/port (made if missing). 0, or a
 * negative errno (then only this worker's ports are told apart). */
int rdzv_ports_init(struct rdzv_ports *s, const char *run_dir);

/* A port the kernel reports free now (bind to port 0, read it, close), or a
 * negative errno. */
typedef int (*rdzv_probe_fn)(void *ctx);
int rdzv_probe_free_port(void *ctx);

/* Takes a port for a trial: probes until it finds one not in use here (at
 * most 64 tries), records it and returns it; -EADDRINUSE when every try
 * gave a port in use, -ENOMEM, or the probe's error. */
int rdzv_port_take(struct rdzv_ports *s, rdzv_probe_fn probe, void *ctx);
/* Gives a port back (its trial ended); one not taken is ignored. */
void rdzv_port_put(struct rdzv_ports *s, int port);
void rdzv_ports_free(struct rdzv_ports *s);

#endif
