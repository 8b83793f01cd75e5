#!/usr/bin/python3
"""Chaos test: a real ctune-server and two real
ctune-workers run ASHA and FIFO experiments of a deterministic command
trainable (trainable.py) while a seeded RNG injects faults of every kind:

  server   kill -9 of the server, restart on the same database and port
  worker   kill -9 of a worker, restart on its work dir
  freeze   SIGSTOP of a worker (half the time with its trials: a host
           freeze) past the lease timeout, then SIGCONT
  trial    kill -9 of a trial process (found through /proc)

Then, with no help, every experiment must end, and the stored results must
be exactly what the trials' attempts produced: time values 1..n with no
duplicate and no gap, every value bit-identical to the trainable's, no
history spliced from two processes, ASHA's decisions (replayed from the
stored results in the server's order) equal to the server's, and every
stored checkpoint labelled with its content and not ahead of the results.

usage: test_chaos.py BIN_DIR   (or CTUNE_BIN_DIR)
environment: CTUNE_CHAOS_SEED (default 20240610), CTUNE_CHAOS_FAULTS
(default 32, at least 6 of each kind), CTUNE_CHAOS_KEEP=1 keeps the temp dir
even when the run passes (it is always kept when it fails).
"""
import os
import random
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos_lib import (PYTHON, TRAINABLE, Cluster, Report, check_experiment,  # noqa: E402
                       log)

SEED = int(os.environ.get("CTUNE_CHAOS_SEED", "20240610"))
NFAULTS = max(int(os.environ.get("CTUNE_CHAOS_FAULTS", "32")), 24)
KINDS = ("server", "worker", "freeze", "trial")
MIN_EACH = 6
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
    return [c.api("POST", "/api/v1/experiments", x)["id"] for x in (asha, fifo)]


def running(c, exps):
    return [e for e in exps if c.experiment(e)["status"] == "RUNNING"]


def fault_plan(rng):
    plan = [k for k in KINDS for _ in range(MIN_EACH)]
    plan += [rng.choice(KINDS) for _ in range(NFAULTS - len(plan))]
    rng.shuffle(plan)
    return plan


def inject(c, rng, kind, counts):
    """One fault; returns a line describing it, or None when it could not be
    injected now (no trial running)."""
    if kind == "server":
        c.scrape_metrics()
        old = c.server
        old.kill9()
        down = rng.uniform(0.1, 1.5)
        time.sleep(down)
        c.start_server()
        return "kill -9 server pid %d, down %.1f s, restarted pid %d" % (old.pid, down,
                                                                           c.server.pid)
    # A worker fault hurts most where trials run: pick among the busy ones.
    busy = [n for n in WORKERS if c.trial_processes(n)]
    name = rng.choice(busy or WORKERS)
    w = c.workers[name]
    if kind == "worker":
        w.kill9()
        down = rng.uniform(0.1, 1.0)
        time.sleep(down)
        c.start_worker(name)
        return "kill -9 worker %s pid %d, down %.1f s, restarted pid %d" % (
            name, w.pid, down, c.workers[name].pid)
    if kind == "freeze":
        host = rng.random() < 0.5
        trials = list(c.trial_processes(name, supervisors=True)) if host else []
        w.signal(signal.SIGSTOP)
        for pid in trials:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass  # the trial ended between the listing and the signal
        frozen = LEASE_TIMEOUT + rng.uniform(0.5, 2.0)
        end = time.time() + frozen
        while time.time() < end:
            c.scrape_metrics()
            time.sleep(0.25)
        w.signal(signal.SIGCONT)
        for pid in trials:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        counts["freeze_host" if host else "freeze_worker_only"] += 1
        return "SIGSTOP worker %s pid %d%s for %.1f s, SIGCONT" % (
            name, w.pid, " and its trials %s" % trials if host else "", frozen)
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
                    % (round_no, exps[-2:]))
                time.sleep(1.0)
            what = inject(c, rng, plan[i], counts)
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
            time.sleep(0.5)
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
        time.sleep(1.0)
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
              "worker only %d), trial kill -9 %d"
              % (sum(counts[k] for k in KINDS), counts["server"], counts["worker"],
                 counts["freeze"], counts["freeze_host"], counts["freeze_worker_only"],
                 counts["trial"]))
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
