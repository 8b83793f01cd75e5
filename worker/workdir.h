/* Housekeeping of a worker's --work-dir: trial directories of ended trials
 * are removed once nothing needs them, except the most recent few, kept for
 * a person to read their logs. */
#ifndef CTUNE_WORKER_WORKDIR_H
#define CTUNE_WORKER_WORKDIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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
 * (another thread may: it touches no shared state). Up to n of them
 * (at most 64) become spares first + i instead (workdir_spare_reuse; bit i
 * of *reused set for each, reused may be NULL when n is 0); every other
 * .gone.* entry is removed. Returns how many were removed, or a negative
 * errno. */
int workdir_remove_gone(const char *work_dir, unsigned first, unsigned n, uint64_t *reused);

/* Makes an ended trial's dir, <trials_fd>/name, spare number seq, when it
 * is as clean as a fresh spare once stripped: the caller's dir (group gid)
 * holding exactly stdout.log and stderr.log, each a regular file of the
 * caller's with one link and open nowhere (a write lease is granted), and
 * no extended attribute (nor ACL) nor inode flag its owner may set
 * (chattr) on any of the three. Then both logs are truncated, the modes
 * reset to a spare's (0700, 0600) and the dir renamed (never over an
 * existing name). No symlink is followed, no FIFO or device opened. The
 * caller guarantees that no process of the trial is left. 0; else a
 * negative errno (-EPERM, -ENOTEMPTY, -EAGAIN: not clean) and the dir is
 * the caller's to delete, its logs perhaps truncated. gid: the group of a
 * fresh spare's files. */
int workdir_spare_reuse(int trials_fd, const char *name, gid_t gid, unsigned seq);

/* Removes a directory tree (no symlink is followed). 0 or negative errno. */
int workdir_rm_rf(const char *path);

/* Spare trial dirs: <work dir>/trials/.spare.<n>, each a fresh 0700 dir
 * holding an empty stdout.log and stderr.log (0600), made ahead of the
 * lease that needs them so that a trial's start renames one into place
 * instead of making three files then (on an ext4 without a journal each new
 * inode scans past every inode freed in the last seconds). A spare is
 * either made fresh or an ended trial's dir proven clean and stripped
 * (workdir_spare_reuse): nothing of an ended trial's output is left. */
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
