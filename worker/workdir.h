/* Housekeeping of a worker's --work-dir: trial directories of ended trials
 * are removed once nothing needs them, except the most recent few, kept for
 * a person to read their logs. */
#ifndef CTUNE_WORKER_WORKDIR_H
#define CTUNE_WORKER_WORKDIR_H

#include <stddef.h>

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
int workdir_sweep_trials(const char *work_dir, int keep, workdir_needed_fn needed, void *arg,
                         unsigned *gone);
/* With gone (not NULL), workdir_sweep_trials renames each dir it removes to
 * <work dir>/trials/.gone.<(*gone)++> instead, for this to remove later
 * (another thread may: it touches no shared state). Removes every .gone.*
 * entry; returns how many, or a negative errno. */
int workdir_remove_gone(const char *work_dir);

/* Removes a directory tree (no symlink is followed). 0 or negative errno. */
int workdir_rm_rf(const char *path);

/* Spare trial dirs: <work dir>/trials/.spare.<n>, each a fresh 0700 dir
 * holding an empty stdout.log and stderr.log (0600), made ahead of the
 * lease that needs them so that a trial's start renames one into place
 * instead of making three files then (on an ext4 without a journal each new
 * inode scans past every inode freed in the last seconds). A spare was never
 * any trial's: nothing of an ended trial is reused. */
struct workdir_spares {
  char *trials;  /* <work dir>/trials */
  unsigned *seq; /* the ready spares' numbers (a stack) */
  size_t n, cap;
  unsigned next; /* the next number to give out */
  int off;       /* renames that refuse to replace nothing are unsupported here */
};

/* Adopts the spares an earlier run left (only those still exactly as made:
 * the dir and both logs the caller's, modes 0700 and 0600, the logs empty,
 * single-linked regular files, nothing else inside); removes any other
 * .spare.* entry. 0 or a negative errno (no trials dir yet is 0). */
int workdir_spares_open(struct workdir_spares *s, const char *work_dir);
/* Frees the list; the spares stay on disk for the next start. */
void workdir_spares_close(struct workdir_spares *s);
/* Makes spare number seq under trials (touches no shared state: callable
 * from another thread). 0 or a negative errno (then nothing is left). */
int workdir_spare_make(const char *trials, unsigned seq);
/* Lists a spare made with workdir_spare_make. 0 or -ENOMEM. */
int workdir_spares_add(struct workdir_spares *s, unsigned seq);
/* Renames a spare to dir, which must not exist. 0; -ENOENT when there is
 * no spare; -EEXIST when dir exists (the spare stays listed); another
 * negative errno when the rename failed. */
int workdir_spare_take(struct workdir_spares *s, const char *dir);

#endif
