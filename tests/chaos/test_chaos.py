#!/usr/bin/python3
"""Chaos test: a real ctune-server and two real
ctune-workers run ASHA and FIFO experiments of a deterministic command
trainable (trainable.py), and a gang experiment of it (two members, one on
each worker), while a seeded RNG injects faults of every kind:

  server   kill -9 of the server, restart on the same database and port
  worker   kill -9 of a worker, restart on its work dir
  freeze   SIGSTOP of a worker (every other time with its trials: a host
           freeze) past the lease timeout, then SIGCONT
  trial    kill -9 of a trial process (found through /proc)
  preempt  a preemption notice (SIGTERM; workers run with
           --preemption-grace-s 3): the worker must release its trials as
           preempted and exit 0 within the grace; it is started again

Then, with no help, every experiment must end, and the stored results must
be exactly what the trials' attempts produced: time values 1..n with no
duplicate and no gap, every value bit-identical to the trainable's, no
history spliced from two processes, ASHA's decisions (replayed from the
stored results in the server's order) equal to the server's, and every
stored checkpoint labelled with its content and not ahead of the results.

A freeze lasts until the server has found the worker lost and requeued
its trials, then until a later attempt of one of them has stored a newer
result elsewhere (when a slot is free within 3 s), then a random moment
more: the worker wakes up behind a lease that moved on, the case where a
stale write would splice a history. A freeze picks a worker running a
trial early in its run (its old attempt then has results to send past the
new one's).

`make test` runs 10 faults (2 of each kind, about 35 s under ASan): each
kind meets the cluster more than once, but the run stays short. The long
run of the same test, 32 faults (6 of each kind, 2 more at random, about
100 s under ASan): CTUNE_CHAOS_FAULTS=32, or `make chaos-long`. A
preempted trial counts no failure: none may end ERROR for it.

usage: test_chaos.py BIN_DIR   (or CTUNE_BIN_DIR)
environment: CTUNE_CHAOS_SEED (default 20240610), CTUNE_CHAOS_FAULTS
(default 10, at least 10: min(6, N/5) of each kind, the rest drawn at random),
CTUNE_CHAOS_KEEP=1 keeps the temp dir even when the run passes (it is always
kept when it fails).
"""
import os
import random
import re
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos_lib import (PYTHON, TRAINABLE, Cluster, Report, check_experiment,  # noqa: E402
                       log, wait_for)

SEED = int(os.environ.get("CTUNE_CHAOS_SEED", "20240610"))
NFAULTS = max(int(os.environ.get("CTUNE_CHAOS_FAULTS", "10")), 10)
KINDS = ("server", "worker", "freeze", "trial", "preempt")
PREEMPT_GRACE = 3.0  # chaos_lib starts workers with --preemption-grace-s 3
MIN_EACH = min(6, NFAULTS // len(KINDS))
LEASE_TIMEOUT = 3.0
HEARTBEAT = 0.5
MAX_T = 12
FAULT_PHASE_S = 150     # faults stop after this even if fewer were injected
END_WAIT_S = 120        # then the experiments must end on their own within this
WORKERS = ("a", "b")


def experiment_pair(c, round_no):
    common = {
        "metric": "loss", "mode": "min", "max_failures": 1000,
        "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1},
                        "y": {"type": "uniform", "lower": 0, "upper": 1}},
        "resources_per_trial": {"cpu": 0.5},
        "trainable": {"type": "command", "argv": [PYTHON, TRAINABLE, str(MAX_T)],
                      "env": {"CHAOS_LEDGER": c.ledger, "CHAOS_SLEEP": "0.2"}},
    }
    asha = dict(common, name="chaos-asha-%d" % round_no, num_samples=16,
                max_concurrent_trials=4, seed=SEED * 10 + round_no,
                scheduler={"type": "asha", "time_attr": "training_iteration", "max_t": MAX_T,
                           "grace_period": 1, "reduction_factor": 2, "brackets": 1})
    fifo = dict(common, name="chaos-fifo-%d" % round_no, num_samples=6,
                max_concurrent_trials=3, seed=SEED * 10 + 5 + round_no,
                scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": MAX_T})
    # A gang of two members, one on each worker (1.5 CPUs each of their 2).
    gang = dict(common, name="chaos-gang-%d" % round_no, num_samples=1,
                max_concurrent_trials=1, seed=SEED * 10 + 7 + round_no,
                resources_per_trial={"cpu": 1.5, "num_workers": 2},
                scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": MAX_T})
    return [c.api("POST", "/api/v1/experiments", x)["id"] for x in (asha, fifo, gang)]


def running(c, exps):
    return [e for e in exps if c.experiment(e)["status"] == "RUNNING"]


def fault_plan(rng):
    plan = [k for k in KINDS for _ in range(MIN_EACH)]
    plan += [rng.choice(KINDS) for _ in range(NFAULTS - len(plan))]
    rng.shuffle(plan)
    return plan


def worker_id(w):
    """The id the running worker process works as (its log's last
    "registered with URL as worker N" or "resuming as worker N"), or None
    before it has one."""
    ids = re.findall(r"(?:registered with \S+|resuming) as worker (\d+)", w.log())
    return int(ids[-1]) if ids else None


def leases(c):
    """{worker name: (its id, {trial id: (attempt, iteration)})}: the trials
    the server has RUNNING on each registered worker of ours."""
    ids = {worker_id(w): name for name, w in c.workers.items()}
    out = {}
    for x in c.api("GET", "/api/v1/workers")["workers"]:
        name = ids.get(x["id"])
        if name and x["status"] == "alive":
            held = {}
            for tid in x["running_trials"]:
                t = c.trial(tid)
                held[tid] = (t.get("attempt"), t.get("iteration") or 0)
            out[name] = (x["id"], held)
    return out


def await_young(c, timeout):
    """Waits (at most timeout) for workers that run a trial with most of its
    run left (leased to it and its process running there), so that a freeze
    of one leaves the trial's next attempt room to overtake it, and the
    frozen one (running on, or resumed) room to send results past the next
    attempt's. Returns {name: (worker id, leases(c)'s trials)} of those
    workers, {} at the deadline."""
    t0 = time.time()
    while True:
        c.scrape_metrics()
        young = {}
        for name, (wid, held) in leases(c).items():
            procs = set(c.trial_processes(name).values())
            if any(it <= 3 and tid in procs for tid, (_, it) in held.items()):
                young[name] = (wid, held)
        if young or time.time() - t0 >= timeout:
            return young
        time.sleep(0.1)


def await_lost(c, wid, timeout):
    """Waits until the server has found worker wid lost and taken its trials
    back (no RUNNING trial left on it); scrapes the counters meanwhile.
    Returns the seconds it took, or None at the deadline."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        c.scrape_metrics()
        ws = [x for x in c.api("GET", "/api/v1/workers")["workers"] if x["id"] == wid]
        if ws and ws[0]["status"] == "lost" and not ws[0]["running_trials"]:
            return time.time() - t0
        time.sleep(0.1)
    return None


def await_moved_on(c, held, timeout):
    """Waits until one of the trials in held ({id: (attempt, iteration)}, as
    they were when their worker froze) has a newer result stored by a later
    attempt: the frozen worker then wakes up behind a lease that moved on.
    Returns the trial id, or None at the deadline (no free slot for them
    meanwhile)."""
    t0 = time.time()
    while held and time.time() - t0 < timeout:
        c.scrape_metrics()
        for tid, (attempt, it) in held.items():
            t = c.trial(tid)
            if t.get("attempt") != attempt and (t.get("iteration") or 0) > it:
                return tid
        time.sleep(0.1)
    return None


def inject(c, rng, kind, counts, rep):
    """One fault; returns a line describing it, or None when it could not be
    injected now (no trial running; for a freeze, none early in its run)."""
    if kind == "server":
        c.scrape_metrics()
        old = c.server
        old.kill9()
        down = rng.uniform(0.1, 1.5)
        time.sleep(down)
        c.start_server()
        return "kill -9 server pid %d, down %.1f s, restarted pid %d" % (old.pid, down,
                                                                           c.server.pid)
    # A worker fault hurts most where trials run: pick among the busy ones
    # (for a freeze: among those with a trial early in its run, or none now).
    if kind == "freeze":
        young = await_young(c, 2.0)
        busy = sorted(young)
        if not busy:
            return None
    else:
        busy = [n for n in WORKERS if c.trial_processes(n)]
    name = rng.choice(busy or WORKERS)
    w = c.workers[name]
    if kind == "preempt":
        t0 = time.time()
        w.signal(signal.SIGTERM)
        try:
            rc = w.p.wait(PREEMPT_GRACE + 2)
        except Exception:
            rc = None
            rep.bad("preempt", "worker %s (pid %d) still running %.0f s after its preemption "
                    "notice (grace %.0f s)" % (name, w.pid, time.time() - t0, PREEMPT_GRACE))
            w.kill9()
        took = time.time() - t0
        if rc not in (0, None):
            rep.bad("preempt", "worker %s (pid %d) exited %d after its preemption notice"
                    % (name, w.pid, rc))
        c.start_worker(name)
        return "preemption notice to worker %s pid %d: exited %s after %.1f s, restarted pid %d" % (
            name, w.pid, rc, took, c.workers[name].pid)
    if kind == "worker":
        w.kill9()
        down = rng.uniform(0.1, 1.0)
        time.sleep(down)
        c.start_worker(name)
        return "kill -9 worker %s pid %d, down %.1f s, restarted pid %d" % (
            name, w.pid, down, c.workers[name].pid)
    if kind == "freeze":
        # Alternate, so that both kinds of freeze come in every run.
        fh, fw = counts["freeze_host"], counts["freeze_worker_only"]
        host = fh < fw if fh != fw else rng.random() < 0.5
        trials = list(c.trial_processes(name, supervisors=True)) if host else []
        # Only a registered worker can be found lost: a freeze right after
        # its restart waits for its registration first.
        wid = wait_for("worker %s to register" % name, lambda: worker_id(w), 20, step=0.05)
        held = young[name][1]
        w.signal(signal.SIGSTOP)
        for pid in trials:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass  # the trial ended between the listing and the signal
        t0 = time.time()
        lost = await_lost(c, wid, LEASE_TIMEOUT + 10)
        if lost is None:
            rep.bad("lease", "worker %s (id %d) frozen for %.0f s, yet the server has not "
                    "found it lost and taken its trials back (lease timeout %.1f s)"
                    % (name, wid, time.time() - t0, LEASE_TIMEOUT))
        moved = await_moved_on(c, held, 3.0)
        end = time.time() + rng.uniform(0.0, 0.5)
        while time.time() < end:
            c.scrape_metrics()
            time.sleep(0.1)
        frozen = time.time() - t0
        w.signal(signal.SIGCONT)
        for pid in trials:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        counts["freeze_host" if host else "freeze_worker_only"] += 1
        return ("SIGSTOP worker %s pid %d%s for %.1f s (lost after %s s; of its trials %s, %s), "
                "SIGCONT" % (name, w.pid, " and its trials %s" % trials if host else "", frozen,
                             "%.1f" % lost if lost is not None else "never", sorted(held),
                             "%d had moved on" % moved if moved else "none had moved on"))
    if kind == "trial":
        procs = c.trial_processes()
        if not procs:
            return None
        pid = rng.choice(sorted(procs))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return "kill -9 trial %d process pid %d" % (procs[pid], pid)
    raise ValueError(kind)


def main():
    rng = random.Random(SEED)
    c = Cluster("chaos", LEASE_TIMEOUT, HEARTBEAT)
    rep = Report()
    counts = {k: 0 for k in KINDS}
    counts.update(freeze_host=0, freeze_worker_only=0)
    exps = []
    hung_workers = []
    failed = True
    print("chaos seed %d (CTUNE_CHAOS_SEED), %d faults, lease timeout %.1f s, heartbeat %.1f s, "
          "temp dir %s" % (SEED, NFAULTS, LEASE_TIMEOUT, HEARTBEAT, c.tmp))
    try:
        c.start_server()
        for name in WORKERS:
            c.start_worker(name)
        round_no = 1
        exps += experiment_pair(c, round_no)
        plan = fault_plan(rng)
        t_start = time.time()
        i = 0
        while i < len(plan) and time.time() - t_start < FAULT_PHASE_S:
            gap = rng.uniform(0.3, 2.0)
            end = time.time() + gap
            while time.time() < end:
                c.scrape_metrics()
                time.sleep(0.2)
            if not running(c, exps):
                round_no += 1
                exps += experiment_pair(c, round_no)
                log("all experiments ended: submitted round %d (experiments %s)"
                    % (round_no, exps[-3:]))
                # The next fault meets the new round's trials running.
                wait_for("the trials of round %d to start" % round_no,
                         lambda: c.trial_processes(), 20, step=0.05)
            what = inject(c, rng, plan[i], counts, rep)
            if what is None:
                continue  # no trial process right now: try again after the next gap
            counts[plan[i]] += 1
            i += 1
            log("fault %d/%d %s: %s" % (i, len(plan), plan[i - 1], what))
        log("fault phase over after %.0f s: %d faults %s" % (time.time() - t_start, i, counts))

        # No more help: every experiment must end on its own.
        deadline = time.time() + END_WAIT_S
        left = running(c, exps)
        while left and time.time() < deadline:
            c.scrape_metrics()
            time.sleep(0.2)
            left = running(c, exps)
        log("wait for the end: %s after %.0f s" % (
            "all ended" if not left else "still RUNNING: %s" % left,
            END_WAIT_S - max(deadline - time.time(), 0)))
        c.scrape_metrics()
        for e in left:
            ex = c.experiment(e)
            rep.bad("stuck", "experiment %d still RUNNING %.0f s after the last fault, counts %s"
                    % (e, END_WAIT_S, ex.get("counts")))
        for e in exps:
            check_experiment(c, e, rep, MAX_T)
        # A notice to a busy worker is a preempted release the server counts.
        pre = sum(c.experiment(e).get("preemptions", {}).get("count", 0) for e in exps)
        if counts["preempt"] and not pre:
            rep.bad("preempt", "%d preemption notices, yet no experiment counts a preempted "
                    "release" % counts["preempt"])

        # Every worker drains and exits on SIGTERM; no trial process survives.
        for name, w in c.workers.items():
            w.signal(signal.SIGTERM)
        for name, w in c.workers.items():
            try:
                rc = w.p.wait(30)
                if rc != 0:
                    rep.bad("worker", "worker %s (pid %d) exited %d after SIGTERM (log %s)"
                            % (name, w.pid, rc, w.log_path))
            except Exception:
                hung_workers.append(name)
                rep.bad("worker", "worker %s (pid %d) did not exit within 30 s of SIGTERM (log %s)"
                        % (name, w.pid, w.log_path))
        # The server too stops cleanly (under ASan this is where leaks show).
        c.server.signal(signal.SIGTERM)
        try:
            rc = c.server.p.wait(20)
            if rc != 0:
                rep.bad("server", "server pid %d exited %d after SIGTERM (log %s)"
                        % (c.server.pid, rc, c.server.log_path))
        except Exception:
            rep.bad("server", "server pid %d did not exit within 20 s of SIGTERM (log %s)"
                    % (c.server.pid, c.server.log_path))
        # A trial process may outlive its worker by at most a second.
        t_exit = time.time()
        left_procs = c.trial_processes(supervisors=True)
        while left_procs and time.time() - t_exit < 1.0:
            time.sleep(0.05)
            left_procs = c.trial_processes(supervisors=True)
        if left_procs:
            rep.bad("orphan", "trial processes left after the workers exited: %s" % left_procs)
        for proc in c.all_procs:
            text = proc.log()
            for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                if bad in text:
                    rep.bad("sanitizer", "%s: %s report in %s" % (proc.name, bad, proc.log_path))

        f = rep.fig
        ack = c.metric_total("ctune_results_received_total")
        dup = c.metric_total("ctune_results_duplicate_total")
        print("\n==== chaos summary (seed %d) ====" % SEED)
        print("faults: %d in all: server kill -9 %d, worker kill -9 %d, freeze %d (host %d, "
              "worker only %d), trial kill -9 %d, preemption notice %d"
              % (sum(counts[k] for k in KINDS), counts["server"], counts["worker"],
                 counts["freeze"], counts["freeze_host"], counts["freeze_worker_only"],
                 counts["trial"], counts["preempt"]))
        print("preempted releases counted by the server: %d" % pre)
        print("experiments: %d (%d still running at the end); trials %d, trainable processes "
              "started %d (%d of them resumed from a checkpoint)"
              % (len(exps), len(left), f["trials"], f["attempts"], f["resumes"]))
        print("results: acknowledged >= %d (server counter, %d replays answered), stored %d, "
              "lost %d, duplicated %d, values not bit-exact %d (%d of them 1-2 ulp off)"
              % (ack, dup, f["results_stored"], f["results_lost"], f["results_duplicated"],
                 f["wrong_values"], f["values_off_by_ulps"]))
        print("trials: stuck %d, ERROR %d, ended early without a stop %d, spliced histories "
              "(stale writes) %d, stored after a stop %d"
              % (f["stuck_trials"], f["error_trials"], f["ended_early_without_stop"],
                 f["spliced_histories"], f["results_after_stop"]))
        print("asha mismatches %d, checkpoint label/content mismatches %d, workers hung on "
              "SIGTERM %d" % (f["asha_mismatches"], f["checkpoint_mismatches"],
                               len(hung_workers)))
        print("violations: %d" % len(rep.violations))
        print("=================================")
        rep.print_violations()
        failed = bool(rep.violations)
    except Exception:
        traceback.print_exc()
    finally:
        keep = failed or os.environ.get("CTUNE_CHAOS_KEEP") == "1"
        c.close(keep=keep)
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
