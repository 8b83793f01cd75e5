#!/usr/bin/python3
"""Chaos scenario "stale worker after SIGCONT": a trial runs on worker A;
A and its trial are SIGSTOPped past the lease timeout; the trial is leased
again to worker B, which advances further and uploads a newer checkpoint;
then A and its trial get SIGCONT. A's trainable runs 2x faster than B's and
A wakes up with results, a checkpoint or a `complete` of the old lease, so
without fencing its results would overtake B's and be stored, its older
checkpoint would replace B's, and its `complete` would end the trial while B
still runs it. With protocol v2 (docs/protocol.md#leases-and-fencing) every write of
A's old lease is refused (409 not_leased): the stored results are 1..n with
no value from A past B's resume point, the stored checkpoint stays B's, and
the experiment ends correctly with B's run.

The two scenarios (A's trial frozen with it, or running on) run at once,
each with its own server and workers; each watches from A's SIGCONT until
A is done (its log says how its attempt ended, no trial process is left and
its outbox is empty) and B has ended the experiment, so every write A sends
is made while the check looks. B's 20 iterations of 0.2 s leave it running
about 2.5 s past A's SIGCONT; A needs well under 1 s to send what it holds.

usage: test_stale_worker.py BIN_DIR   (or CTUNE_BIN_DIR)
       test_stale_worker.py BIN_DIR --scenario host|worker   (one of them)
"""
import os
import re
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos_lib import (PYTHON, TRAINABLE, Cluster, Report, check_experiment,  # noqa: E402
                       log, read_ledger, wait_for)

LEASE_TIMEOUT = 2.0
ITERS = 20
A_SLEEP = "0.1"   # s per iteration: A's trial runs 2x faster than B's
B_SLEEP = "0.2"
SETTLE_S = 30     # A done and the experiment ended after SIGCONT within this


def worker_id(c, name):
    for w in c.api("GET", "/api/v1/workers")["workers"]:
        if w["name"] == name:
            return w["id"]
    return None


def scenario(host_freeze):
    """One run; returns True when it held. host_freeze: A's trial is frozen
    with A (it resumes mid-run on SIGCONT); otherwise only A is frozen and its
    trial runs to the end meanwhile, so A wakes up with every later result,
    the last checkpoint and a `complete` queued."""
    label = "worker and trial frozen" if host_freeze else "worker frozen, trial ran on"
    print("==== scenario: %s ====" % label)
    c = Cluster("stale", LEASE_TIMEOUT, 0.4)
    rep = Report()
    failed = True
    try:
        c.start_server()
        c.start_worker("a", cpus=1, env_extra={"CHAOS_SLEEP": A_SLEEP})
        eid = c.api("POST", "/api/v1/experiments", {
            "name": "stale", "metric": "loss", "mode": "min", "num_samples": 1, "seed": 7,
            "max_failures": 5,
            "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1},
                            "y": {"type": "uniform", "lower": 0, "upper": 1}},
            "scheduler": {"type": "fifo", "time_attr": "training_iteration"},
            "resources_per_trial": {"cpu": 1},
            "trainable": {"type": "command", "argv": [PYTHON, TRAINABLE, str(ITERS)],
                          "env": {"CHAOS_LEDGER": c.ledger}}})["id"]
        tid = wait_for("the trial", lambda: c.trials(eid), 10)[0]["id"]

        # Phase 1: A runs the trial until results and a checkpoint are stored.
        wait_for("4 results and a checkpoint from A",
                 lambda: (c.trial(tid)["iteration"] or 0) >= 4 and c.checkpoint(tid), 30)
        wa = worker_id(c, "a")
        a_trials = list(c.trial_processes("a"))
        assert a_trials, "no trial process under worker A"
        a_tree = list(c.trial_processes("a", supervisors=True))
        c.workers["a"].signal(signal.SIGSTOP)
        for pid in (a_tree if host_freeze else []):
            os.kill(pid, signal.SIGSTOP)
        a_last = max([int(args[0]) for pid, ev, args in read_ledger(c, tid)
                      if ev == "result" and pid in a_trials] or [0])
        log("froze worker A (id %s) and its trial %s at iteration %d" % (wa, a_trials, a_last))

        # Phase 2: the lease expires, B takes the trial over and goes further.
        c.start_worker("b", cpus=1, env_extra={"CHAOS_SLEEP": B_SLEEP})
        wait_for("the trial to be leased to B",
                 lambda: (lambda t: t["status"] == "RUNNING" and t["worker_id"] not in
                          (None, wa))(c.trial(tid)), 30)
        # What A stored while it held the lease; anything else from A is stale.
        a_stored = {r["training_iteration"] for r in c.trial_results(tid)}
        b_trials = wait_for("B's trial process", lambda: list(c.trial_processes("b")), 10)
        b_start = wait_for("B's trial to start", lambda: [int(args[0]) for pid, ev, args in
                                                         read_ledger(c, tid) if ev == "start"
                                                         and pid in b_trials], 10)[0]
        ck_b = wait_for("a newer checkpoint from B",
                        lambda: (lambda ck: ck and ck[1].get("pid") in b_trials and
                                 ck[1]["iteration"] > a_last and ck)(c.checkpoint(tid)), 30)
        log("B (trial %s) resumed at %d, its checkpoint %d is stored; SIGCONT A"
            % (b_trials, b_start, ck_b[1]["iteration"]))

        # Phase 3: A wakes up. Nothing it sends may be stored. Watched until A
        # has sent all it had (its attempt ended, no trial process, an empty
        # outbox) and B has ended the experiment.
        for pid in (a_tree if host_freeze else []):
            os.kill(pid, signal.SIGCONT)
        c.workers["a"].signal(signal.SIGCONT)
        t_cont = time.time()
        best_ck = ck_b[1]["iteration"]
        seen = set()
        a_done = ex = None
        outbox = os.path.join(c.work_dir("a"), "outbox")
        # The worker's line for the end of an attempt (worker_queue_trial_end):
        # after it, what the attempt sends is in the outbox until delivered or
        # refused.
        a_ended = re.compile(r"trial %d (\(attempt \d+\) )?(stopped|finished|failed)" % tid)
        while time.time() - t_cont < SETTLE_S:
            if a_done is None and a_ended.search(c.workers["a"].log()) and \
                    not c.trial_processes("a", supervisors=True) and \
                    not [f for f in os.listdir(outbox) if ".json" in f]:
                a_done = time.time() - t_cont
                log("A is done %.1f s after SIGCONT (B's trial %s)"
                    % (a_done, "still running" if c.trial_processes("b") else "ended"))
            if ex is None:
                e = c.experiment(eid)
                ex = e if e["status"] != "RUNNING" else None
            if a_done is not None and ex:
                break
            ck = c.checkpoint(tid)
            tr = c.trial(tid)
            if ck and ck[1].get("pid") in a_trials and "stale" not in seen:
                seen.add("stale")
                rep.bad("checkpoint", "A's checkpoint (iteration %s, pid %s) replaced B's "
                        "(iteration %d) after SIGCONT" % (ck[1]["iteration"], ck[1]["pid"],
                                                            best_ck))
            if ck and ck[1]["iteration"] < best_ck and "back" not in seen:
                seen.add("back")
                rep.bad("checkpoint", "stored checkpoint went back from %d to %s"
                        % (best_ck, ck[1]["iteration"]))
            if ck:
                best_ck = ck[1]["iteration"]
            b_alive = [p for p in b_trials if p in c.trial_processes("b")]
            if tr["status"] != "RUNNING" and b_alive and "complete" not in seen:
                seen.add("complete")
                rep.bad("complete", "trial %d is %s at iteration %s while B's process %s still "
                        "runs it (A's complete/fail accepted)" % (tid, tr["status"],
                                                                  tr["iteration"], b_alive))
            time.sleep(0.1)
        if a_done is None:
            rep.bad("stuck", "A still has trial processes %s or queued messages %s %.0f s after "
                    "SIGCONT" % (c.trial_processes("a", supervisors=True), os.listdir(outbox),
                                 SETTLE_S))
        if ex is None:
            raise AssertionError("the experiment is still RUNNING %.0f s after SIGCONT" % SETTLE_S)
        log("the experiment ended %s %.1f s after SIGCONT" % (ex["status"], time.time() - t_cont))

        # The experiment ends with B's run; the stored history is A's up to
        # B's resume point and B's after it.
        check_experiment(c, eid, rep, ITERS)
        rows = c.trial_results(tid)
        foreign = [(r["training_iteration"], r.get("pid")) for r in rows
                   if r["training_iteration"] not in a_stored and r.get("pid") not in b_trials]
        if foreign:
            rep.bad("stale", "results stored after the lease moved to B (resumed at %d), from "
                    "other processes than B's %s: (t, pid) %s" % (b_start, b_trials, foreign))
        ck = c.checkpoint(tid)
        if not ck or ck[1].get("pid") not in b_trials or ck[1]["iteration"] != ITERS:
            rep.bad("checkpoint", "the final stored checkpoint is %s, not B's iteration %d"
                    % (ck, ITERS))
        if ex["status"] != "TERMINATED":
            rep.bad("experiment", "experiment ended %s" % ex["status"])
        for name in ("a", "b"):
            w = c.workers[name]
            w.signal(signal.SIGTERM)
            try:
                rc = w.p.wait(20)
                if rc != 0:
                    rep.bad("worker", "worker %s exited %d after SIGTERM" % (name, rc))
            except Exception:
                rep.bad("worker", "worker %s did not exit within 20 s of SIGTERM" % name)
        rep.print_violations()
        failed = bool(rep.violations)
    except Exception:
        traceback.print_exc()
    finally:
        if failed:
            for w in c.workers.values():
                print("---- last lines of %s (%s)" % (w.name, w.log_path))
                print("\n".join(w.log().splitlines()[-15:]))
        c.close(keep=failed or os.environ.get("CTUNE_CHAOS_KEEP") == "1")
    print("scenario %s: %s" % (label, "FAIL" if failed else "PASS"))
    return not failed


SCENARIOS = {"host": True, "worker": False}


def main():
    if "--scenario" in sys.argv:
        # A SIGTERM from the parent still runs the scenario's cleanup.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        which = sys.argv[sys.argv.index("--scenario") + 1]
        sys.exit(0 if scenario(host_freeze=SCENARIOS[which]) else 1)
    # Both at once: each spends most of its time waiting (a lease timeout,
    # B's run), and neither shares a process, port or directory with the other.
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")
    procs = [(which, subprocess.Popen([sys.executable, os.path.abspath(__file__), bin_dir,
                                       "--scenario", which], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
             for which in SCENARIOS]
    rcs = []
    for which, p in procs:
        try:
            out, _ = p.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            p.terminate()
            try:
                out, _ = p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            out += b"\nscenario %s: stopped after 150 s\n" % which.encode()
        sys.stdout.write(out.decode(errors="replace"))
        sys.stdout.flush()
        rcs.append(p.returncode)
    if all(rc == 77 for rc in rcs):
        sys.exit(77)  # not built
    print("PASS" if not any(rcs) else "FAIL")
    sys.exit(1 if any(rcs) else 0)

if __name__ == "__main__":
    main()
