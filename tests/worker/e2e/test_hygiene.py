#!/usr/bin/env python3
"""Process and work-dir hygiene of ctune-worker:
1. kill -9 of a worker: within a few seconds no process of its trial is left,
   not the trial, not a shell's background child, not a setsid'd double fork;
2. a trial that ends normally takes its setsid'd descendants with it;
3. a second worker on the same --work-dir refuses to start, naming the dir
   and the running worker's pid; after a kill -9 the lock is free again;
4. trial dirs of ended trials are removed once their messages are delivered
   (--keep-trial-dirs 0), at start as well as when a trial ends; a clean
   one (nothing but its two logs) becomes a spare instead, its logs empty."""
import os
import sys
import time

from harness import command_config, main, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "hygiene_trial.py")
PY = "/usr/bin/python3"
# One result carrying the inode of the trial's own dir and the time; the
# first of two (the one that makes the dir $0) after the spare for the next
# start is made (0.2 s after a start).
CLEAN = ('mkdir "$0" 2>/dev/null && sleep 0.3; '
         'echo "{\\"training_iteration\\": 1, \\"loss\\": 1, '
         '\\"ino\\": $(stat -c %i "$CTUNE_CHECKPOINT_DIR"), \\"at\\": $(date +%s.%N)}"')


def state(pid):
    """'gone', 'zombie' or the /proc state letter."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
    return "zombie" if s == "Z" else s


def dead(pid):
    return state(pid) in ("gone", "zombie")


def pids_of(env, worker, trial_id, names):
    d = env.trial_dir(worker, trial_id)
    paths = [os.path.join(d, n) for n in names]
    wait_for(lambda: all(os.path.exists(p) for p in paths), 20,
             "the trial to write the pids of %s" % ", ".join(names))
    return {n: int(open(p).read()) for n, p in zip(names, paths)}


def body(env):
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    env.start_server()
    w1 = env.start_worker("w1", "--cpus", "1")

    # 1. kill -9 of the worker: the whole trial tree goes.
    exp = env.submit(command_config("orphans", [PY, TRIAL, "0"]))
    t = wait_for(lambda: (lambda t: t["status"] == "RUNNING" and t)(env.trials(exp)[0]), 20,
                 "the trial to run")
    pids = pids_of(env, "w1", t["id"], ["pid", "sh", "bg", "dbl"])
    for name, pid in pids.items():
        assert not dead(pid), "%s %d is not running before the kill" % (name, pid)
    t0 = time.time()
    w1.kill9()
    deadline = t0 + 5
    while time.time() < deadline and not all(dead(p) for p in pids.values()):
        time.sleep(0.05)
    left = {n: (p, state(p)) for n, p in pids.items() if not dead(p)}
    assert not left, "alive %.1f s after kill -9 of the worker: %r" % (time.time() - t0, left)
    print("kill -9 of the worker: its trial's %d processes gone within %.2f s"
          % (len(pids), time.time() - t0))

    # 3a. The kernel dropped the dead worker's lock: a new one starts there.
    w1b = env.start_worker("w1", "--cpus", "1", "--keep-trial-dirs", "0")
    wait_for(lambda: "ctune-worker w1: server" in w1b.log(), 10, "the restarted worker")
    # 3b. A second worker on the same work dir refuses, naming dir and pid.
    dup = env.start_worker("w1", "--cpus", "1")
    rc = dup.p.wait(10)
    log = dup.log()
    print("second worker on the same work dir: exit %d: %s" % (rc, log.strip()))
    assert rc != 0, log
    assert env.work_dir("w1") in log and "pid %d" % w1b.pid in log, log
    assert "in use by another ctune-worker" in log, log
    assert w1b.alive()

    # 2. A trial that ends normally takes its setsid'd descendants along.
    env.api("POST", "/api/v1/experiments/%d/cancel" % exp)
    done = env.submit(command_config("escapee", [PY, TRIAL, "2"]))
    t = wait_for(lambda: (lambda t: t["status"] == "RUNNING" and t)(env.trials(done)[0]), 20,
                 "the second trial to run")
    pids = pids_of(env, "w1", t["id"], ["pid", "sh", "bg", "dbl"])
    env.wait_experiment(done, 30)
    assert env.trials(done)[0]["status"] == "TERMINATED", env.trials(done)
    wait_for(lambda: all(dead(p) for p in pids.values()), 5,
             "every descendant of the ended trial to be gone: %r"
             % {n: state(p) for n, p in pids.items()})
    print("a trial that ended left nothing behind")

    # Two clean trials one after the other (run while the dirs above go):
    # the second's start takes the spare, and the first's dir, let go then,
    # becomes the next spare.
    clean = env.submit(command_config("clean", ["sh", "-c", CLEAN, os.path.join(env.tmp, "first")],
                                      num_samples=2))

    # 4. Both trial dirs go once nothing needs them; the rest stays.
    wait_for(lambda: not os.path.exists(env.trial_dir("w1", t["id"])), 10,
             "the ended trial's dir to be removed")
    wait_for(lambda: not os.path.exists(env.trial_dir("w1", 1)), 10,
             "the killed worker's trial dir to be removed")
    env.wait_experiment(clean, 30)
    ran = {r["ino"]: r["at"] for r in (env.results(t["id"])[0] for t in env.trials(clean))}
    trials_dir = os.path.dirname(env.trial_dir("w1", 1))

    def spare():
        """A spare that is a clean trial's dir: its inode, and made before
        the trial ran (a fresh spare made since could reuse the number)."""
        sts = {n: os.lstat(os.path.join(trials_dir, n)) for n in os.listdir(trials_dir)
               if n.startswith(".spare.")}
        return [n for n, st in sts.items() if st.st_mtime < ran.get(st.st_ino, 0)]
    wait_for(spare, 10, "a clean trial's dir to become a spare")
    for log in ("stdout.log", "stderr.log"):
        assert os.path.getsize(os.path.join(trials_dir, spare()[0], log)) == 0, log
    # Swept dirs are renamed out of the way, then deleted on a thread.
    wait_for(lambda: not [n for n in os.listdir(trials_dir) if n.startswith(".gone.")], 10,
             "the swept dirs to be deleted")
    assert os.path.exists(os.path.join(env.work_dir("w1"), "worker.lock"))
    assert os.path.isdir(os.path.join(env.work_dir("w1"), "outbox"))
    print("trial dirs of ended trials removed, a clean one reused")


if __name__ == "__main__":
    main("hygiene", body)
