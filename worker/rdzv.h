/* rdzv: the rendezvous ports of the gang trials whose rank 0 runs on this
 * worker (docs/worker.md#gang-members). A port is free on the machine when
 * it is chosen (the kernel's pick for a socket bound to port 0), and the
 * worker never gives one to two of its running trials: the kernel may hand
 * a port out again as soon as the probe closes it, before the trial binds
 * it, so the ports in use are kept here until their trial ends. */
#ifndef CTUNE_WORKER_RDZV_H
#define CTUNE_WORKER_RDZV_H

#include <stddef.h>

struct rdzv_ports {
  int *port; /* in use, unordered */
  size_t n, cap;
};

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
