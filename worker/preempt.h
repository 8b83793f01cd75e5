/* preempt: the pure parts of a preemption notice (docs/worker.md#preemption):
 * how the grace is split between asking trials to checkpoint, stopping them
 * and delivering; whether a notice command's output means a notice; whether
 * a trial process catches the checkpoint signal (SIGUSR1: sent only to a
 * process that has a handler, since its default action kills). The watch
 * that polls a notice (preempt_watch.h) and the worker's side (worker.c,
 * worker_preempt()) use these. */
#ifndef CTUNE_WORKER_PREEMPT_H
#define CTUNE_WORKER_PREEMPT_H

#include <sys/types.h>

/* The file a trial may poll: the worker creates it in the trial's
 * checkpoint dir (CTUNE_CHECKPOINT_DIR) at the notice. */
#define PREEMPT_REQUEST_FILE "CHECKPOINT_NOW"
/* --preemption-notice without --preemption-grace-s. */
#define PREEMPT_DEFAULT_GRACE_MS 30000u
#define PREEMPT_DEFAULT_POLL_MS 5000u

struct preempt_plan {
  unsigned ask_ms; /* after the notice: a trial asked to checkpoint is stopped then at the latest */
  unsigned term_ms; /* SIGTERM -> SIGKILL for a preempted trial */
};
/* A third of the grace to checkpoint when asked, a third (at most
 * stop_grace_ms) from SIGTERM to SIGKILL, the rest for the uploads and the
 * releases. */
struct preempt_plan preempt_plan(unsigned grace_ms, unsigned stop_grace_ms);
/* The notice command's stdout, when it exited 0: a notice unless it is
 * empty or (blanks aside) FALSE/false/0 (GCE's preempted endpoint answers
 * FALSE until it is preempted). 1 or 0. */
int preempt_output_is_notice(const char *out);
/* Whether /proc/<pid>/status text says signal sig is caught (SigCgt). */
int preempt_status_catches(const char *status, int sig);
/* Reads /proc/<pid>/status: 1 when pid catches sig, 0 when not or unknown. */
int preempt_catches(pid_t pid, int sig);
/* Creates <dir>/CHECKPOINT_NOW (0644, empty). 0 or -errno. */
int preempt_request_file(const char *dir);

#endif
