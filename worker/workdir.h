/* Housekeeping of a worker's --work-dir: trial directories of ended trials
 * are removed once nothing needs them, except the most recent few, kept for
 * a person to read their logs. */
#ifndef CTUNE_WORKER_WORKDIR_H
#define CTUNE_WORKER_WORKDIR_H

/* Ended trials whose directories (logs, last checkpoint) are kept. */
#define WORKDIR_KEEP_ENDED 20

/* Says whether trial_id's directory is still needed: the trial runs on this
 * worker, or its outbox lane still holds undelivered messages (a checkpoint
 * or log upload may still read the dir). Nonzero = keep. */
typedef int (*workdir_needed_fn)(void *arg, int trial_id);

/* Removes <work_dir>/trials/<id> for every trial that needed() does not
 * claim, except the `keep` most recently modified of them. Entries that are
 * not trial ids are left alone. Returns how many were removed, or a negative
 * errno (no trials dir is 0). Call it at start (after the outbox is loaded)
 * and whenever a trial's messages have all been delivered. */
int workdir_sweep_trials(const char *work_dir, int keep, workdir_needed_fn needed, void *arg);

/* Removes a directory tree (no symlink is followed). 0 or negative errno. */
int workdir_rm_rf(const char *path);

#endif
