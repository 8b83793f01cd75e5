#!/usr/bin/env python3
"""Many gang trials at once on one machine never share a MASTER_PORT
(docs/worker.md#gang-members): a server and three real ctune-worker
processes on localhost sharing one run dir, twelve 2-member gangs running
at the same time. Every rank 0 binds its MASTER_PORT and holds it until all
twelve hold theirs; the ports are distinct, every bind succeeds, each
member saw its rank 0's port, and each port's machine-wide claim
(<run dir>/port/<port>) is locked while its trial runs. No torch: the
trainable is a few lines of python3."""
import fcntl
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import BIN_DIR, Runner, Server, harness, tmpdir  # noqa: E402

GANGS = 12
TRAINABLE = r"""
import json, os, socket, sys, time
out, want = sys.argv[1], int(sys.argv[2])
env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                      "CTUNE_TRIAL_NAME")}
rank, port = int(env["RANK"]), int(env["MASTER_PORT"])
rec = dict(env, pid=os.getpid())
if rank == 0:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("0.0.0.0", port))
        s.listen(1)
        rec["bind"] = "ok"
    except OSError as e:
        rec["bind"] = str(e)
    rec["t0"] = time.time()
    tmp = os.path.join(out, ".r0-%d" % os.getpid())
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.rename(tmp, os.path.join(out, "r0-%d.json" % os.getpid()))
    # Held until the test has seen every gang's rank 0 holding its port.
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(out, "go")) and time.time() < deadline:
        time.sleep(0.05)
    s.close()
    print(json.dumps({"training_iteration": 1, "loss": 0.0}), flush=True)
else:
    with open(os.path.join(out, "m-%d.json" % os.getpid()), "w") as f:
        json.dump(rec, f)
    print("rank %s of %s meets %s:%s" % (rank, env["WORLD_SIZE"], env["MASTER_ADDR"], port),
          flush=True)
"""


def locked(path):
    """Whether another process holds path's flock (the worker's claim)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_concurrent_gangs_get_distinct_ports():
    s = Server()
    d = tmpdir()
    out, run = os.path.join(d, "out"), os.path.join(d, "run")
    os.mkdir(out)
    os.mkdir(run)
    script = os.path.join(d, "trainable.py")
    with open(script, "w") as f:
        f.write(TRAINABLE)
    # 2 CPUs a worker, a quarter CPU a member: four gangs a worker.
    eid = s.ok("POST", "/api/v1/experiments",
               {"name": "gang-ports", "metric": "loss", "mode": "min", "num_samples": GANGS,
                "max_concurrent_trials": GANGS,
                "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1}},
                "resources_per_trial": {"cpu": 0.25, "num_workers": 2},
                "trainable": {"type": "command",
                              "argv": ["/usr/bin/python3", script, out, str(GANGS)]}},
               status=201)["id"]
    env = dict(os.environ, CTUNE_RUN_DIR=run)
    workers = []
    try:
        for i in range(3):
            workers.append(harness.start_worker(
                BIN_DIR, "http://%s:%d" % (s.host, s.port),
                ["--cpus", "2", "--memory-mb", "512", "--token-file", s.db + ".tokens",
                 "--name", "w%d" % i, "--advertise-addr", "127.0.0.1",
                 "--work-dir", os.path.join(d, "w%d" % i), "--poll-ms", "100", "--no-cgroup"],
                log_path=os.path.join(d, "w%d.log" % i), env=env))

        def logs():
            return "".join(w.log(tail=1500) for w in workers)

        deadline = time.time() + 40
        while len(glob.glob(os.path.join(out, "r0-*.json"))) < GANGS and time.time() < deadline:
            time.sleep(0.05)
        r0 = [json.load(open(p)) for p in glob.glob(os.path.join(out, "r0-*.json"))]
        assert len(r0) == GANGS, (len(r0), logs())
        # All twelve rank 0s hold their ports now: one machine, no port twice.
        ports = sorted(int(r["MASTER_PORT"]) for r in r0)
        assert len(set(ports)) == GANGS, ports
        assert all(r["bind"] == "ok" for r in r0), [r["bind"] for r in r0]
        assert len({r["CTUNE_TRIAL_NAME"] for r in r0}) == GANGS, r0
        for p in ports:
            assert locked(os.path.join(run, "port", str(p))), "port %d is not claimed" % p
        open(os.path.join(out, "go"), "w").close()
        while time.time() < deadline:
            e = s.ok("GET", "/api/v1/experiments/%d" % eid)
            if e["status"] != "RUNNING":
                break
            time.sleep(0.1)
        assert e["status"] == "TERMINATED", (e, logs())
        trials = s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
        assert sorted(t["status"] for t in trials) == ["TERMINATED"] * GANGS, trials
        assert all(t["num_failures"] == 0 for t in trials), trials
        # Each member met its own rank 0's port.
        port_of = {r["CTUNE_TRIAL_NAME"]: r["MASTER_PORT"] for r in r0}
        members = [json.load(open(p)) for p in glob.glob(os.path.join(out, "m-*.json"))]
        assert len(members) == GANGS, members
        assert all(m["MASTER_PORT"] == port_of[m["CTUNE_TRIAL_NAME"]] and m["RANK"] == "1"
                   for m in members), (members, port_of)
        # A finished trial's claim is given back.
        assert not any(locked(os.path.join(run, "port", str(p))) for p in ports), logs()
    finally:
        for w in workers:
            w.stop()
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_concurrent_gangs_get_distinct_ports)
    r.done()
