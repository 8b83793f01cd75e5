/* harness: the server's state layer in-process, wired as server/main.c
 * wires the daemon (store_open > state_init > state_load > commit_start >
 * state_repair), over a fresh SQLite file in a temp dir, with time as an
 * input (tests/lib/fake_clock.h) and no HTTP. A test holds the model lock
 * from h_open to h_close, as a request holds it; h_sync hands what was
 * queued to the commit thread and waits until it is in SQLite.
 *
 * Helpers do what the API handlers do around the state calls (submit
 * through the real validator, lease = touch + state_lease + persist,
 * heartbeat = mark the listed trials + state_reconcile_worker, complete =
 * TE_COMPLETE with the trial's lease, results = TE_RESULTS), so a test
 * reads like the protocol and asserts on the model; h_query reads SQLite. */
#ifndef CTUNE_TEST_STATE_HARNESS_H
#define CTUNE_TEST_STATE_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "fake_clock.h"
#include "state.h"

/* The daemon's defaults (server/api/opts.c). */
#define H_LEASE_TIMEOUT_S 30.0
#define H_HEARTBEAT_S 5.0
#define H_LEASE_MS 30000ull /* lease_timeout_s in ms */
#define H_GRACE_MS 10000ull /* two heartbeat intervals */

struct harness {
  char dir[256];
  char db[300];
  int started;
  struct server s;
};

/* A fresh temp dir and database; the clock back at FAKE_CLOCK_START_MS. */
void h_open(struct harness *h);
/* Stops (writes drained, model freed, store closed) and removes the files. */
void h_close(struct harness *h);
/* A restart on the same database file: stop, then start again (a fresh
 * state_load, then state_repair, as main.c does). */
void h_restart(struct harness *h);
/* Closes the open group and waits until every group handed over so far is
 * committed; fails the test if any commit failed. */
void h_sync(struct harness *h);

/* An experiment config as JSON text: name, num_samples n, seed 7, one
 * loguniform parameter, a command trainable, then `extra` (more top-level
 * members, "" or starting with a comma). Written into buf (cap bytes). */
const char *h_cfg(char *buf, size_t cap, const char *name, int n, const char *extra);
/* Submits an experiment from JSON text through validate_experiment (the
 * API's validator) and state_add_experiment. A config without "seed" gets
 * seed 1 (the API draws one). Fails the test on any error. */
struct srv_experiment *h_submit(struct harness *h, const char *json);
/* A worker with these resources (workers_register). */
struct srv_worker *h_worker(struct harness *h, const char *name, double cpu, double gpu,
                            int64_t memory_mb);
/* The lease call of a worker that says it has everything free: touch,
 * state_lease, and the trial's row queued (api_worker_lease). NULL: none. */
struct srv_trial *h_lease(struct harness *h, struct srv_worker *w);
/* The same with what the worker says is free. */
struct srv_trial *h_lease_free(struct harness *h, struct srv_worker *w, double cpu, double gpu,
                               int64_t memory_mb, int has_memory);
/* A v2 heartbeat of w listing trials[0..n) at their current attempts
 * (workers_heartbeat, as api_worker_heartbeat): each
 * listed trial leased to w has its lease renewed (a paused experiment's is
 * told to pause, decide_pause_lease); then state_reconcile_worker. Returns
 * how many unlisted trials were requeued. */
int h_heartbeat(struct harness *h, struct srv_worker *w, struct srv_trial *const *trials, int n);
/* The lease that holds t completes it: state_trial_event TE_COMPLETE with
 * that lease (fence CURRENT), as api_trial_complete. */
void h_complete(struct harness *h, struct srv_trial *t);
/* EE_CANCEL with reason; returns how many unfinished trials it stopped, or
 * the negative error. */
int64_t h_cancel(struct harness *h, struct srv_experiment *e, const char *reason);
/* One result of t under its current lease, through state_trial_event
 * TE_RESULTS as api_trial_report sends it (the scheduler decides, stop
 * rules and the budget apply): fails the test unless it is accepted, and
 * returns the decision, 'c' (continue) or 's' (stop). */
char h_result(struct harness *h, struct srv_trial *t, double time_value, const char *json);
/* A batch of n results (time values tvs, JSON texts jsons) under lease l
 * (NULL: the trial's current lease): state_trial_event TE_RESULTS. Returns
 * its rc; dec (n chars) gets the decisions; *out (may be NULL) the event's
 * outputs (fence, why, replayed; its in-pointers cleared). */
int h_results(struct harness *h, struct srv_trial *t, const struct lease_token *l, int n,
              const double *tvs, const char *const *jsons, char *dec, struct trial_event_args *out);
/* A checkpoint upload of t at iteration under its current lease, as
 * api_checkpoint_put queues it after its checks (the bytes into SQLite, the
 * trial's has_checkpoint / checkpoint_iteration, its row, the PBT exploits
 * waiting for it: decide_checkpoint_stored). */
void h_checkpoint(struct harness *h, struct srv_trial *t, int64_t iteration, const char *data);
/* The daemon's timer tick at now (state_expire_leases), with the clock
 * moved there first. */
void h_tick(struct harness *h, uint64_t now_ms);
/* The first tick after the daemon stood still since its previous tick (a
 * SIGSTOP, a VM pause): the clock jumps to now_ms and the timer runs, with
 * nothing in between. */
void h_stall(struct harness *h, uint64_t now_ms);

/* The model as text (experiments, trials, workers, live list): what a
 * reload or a restart must give back. Cold experiments are warmed first.
 * Returns a malloc'd string. */
char *h_snapshot(struct harness *h);
/* Runs one SQL statement on the database file with a connection of its own
 * (h must be stopped: between h_stop_only and h_start_only). */
void h_sql(struct harness *h, const char *sql);
/* The two halves of h_restart, for a test that edits the file between. */
void h_stop_only(struct harness *h);
void h_start_only(struct harness *h);

/* Runs a query on a read-only connection of its own (the server may run:
 * h_sync first for what was queued) and returns the rows as text, one line
 * each, columns joined by '|', NULL as "-" (malloc'd). */
char *h_query(struct harness *h, const char *sql);

/* Counts e's trials in status st by scanning them (the counts array is
 * checked against it). */
int64_t h_count(const struct srv_experiment *e, enum trial_status st);

#endif
