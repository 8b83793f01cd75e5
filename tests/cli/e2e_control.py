#!/usr/bin/env python3
"""`ctune pause|resume|extend|edit|stop|delete` against a real
ctune-server; a scripted worker (REST) holds a lease so that the controls act
on running trials. Usage: e2e_control.py BIN_DIR."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server", "e2e"))
from ctune_e2e import Runner, Server, lease, register, report  # noqa: E402

BIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.environ.get("CTUNE_BIN_DIR", "")


def cfg(name, n):
    return {"name": name, "metric": "loss", "mode": "min", "num_samples": n, "seed": 1,
            "param_space": {"lr": {"type": "uniform", "lower": 0, "upper": 1}},
            "scheduler": {"type": "fifo", "max_t": 3}, "resources_per_trial": {"cpu": 1},
            "trainable": {"type": "command", "argv": ["true"]}}


def ctune(s, *args):
    p = subprocess.run([os.path.join(BIN, "ctune")] + list(args) +
                       ["--server", "http://%s:%d" % (s.host, s.port),
                        "--token-file", s.db + ".tokens"],
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_cli_controls():
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", cfg("cli", 2), status=201)["id"]
    w = register(s, cpu=2)
    t = lease(s, w)
    assert report(s, t["id"], training_iteration=1, loss=0.5) == "continue"

    rc, out, err = ctune(s, "pause", str(eid))
    assert rc == 0 and "paused" in out and "PAUSED" in out, (rc, out, err)
    rc, out, err = ctune(s, "status")
    assert rc == 0 and "PAUSED" in out, (rc, out, err)
    assert report(s, t["id"], training_iteration=2, loss=0.4) == "stop"
    rc, out, err = ctune(s, "pause", str(eid))
    assert rc == 1 and "PAUSED" in err, (rc, out, err)
    rc, out, err = ctune(s, "resume", str(eid), "--json")
    assert rc == 0 and json.loads(out)["status"] == "RUNNING", (rc, out, err)

    rc, out, err = ctune(s, "edit", str(eid), "--priority", "2", "--notes", "lr sweep",
                         "--tag", "a", "--tag", "b", "--max-concurrent", "1", "--json")
    e = json.loads(out)
    assert rc == 0 and e["priority"] == 2 and e["tags"] == ["a", "b"], (rc, out, err)
    assert e["notes"] == "lr sweep" and e["max_concurrent_trials"] == 1, e
    rc, out, err = ctune(s, "extend", str(eid), "--num-samples", "4")
    assert rc == 0 and "extended" in out, (rc, out, err)
    assert s.ok("GET", "/api/v1/experiments/%d" % eid)["num_trials"] == 4
    rc, out, err = ctune(s, "extend", str(eid), "--num-samples", "1")
    assert rc == 1 and "num_samples" in err, (rc, out, err)
    rc, out, err = ctune(s, "extend", str(eid))
    assert rc == 2 and "--num-samples" in err, (rc, out, err)

    # stop by name; the trial keeps its results
    rc, out, err = ctune(s, "stop", t["name"])
    assert rc == 0 and "trial %d stopped" % t["id"] in out, (rc, out, err)
    tj = s.ok("GET", "/api/v1/trials/%d" % t["id"])
    assert tj["status"] == "TERMINATED" and tj["reason"] == "stopped by user", tj

    # delete: refused while a trial runs, --force goes ahead
    t2 = lease(s, w)
    assert t2 and t2["experiment_id"] == eid, t2
    rc, out, err = ctune(s, "delete", str(eid))
    assert rc == 1 and "force" in err, (rc, out, err)
    rc, out, err = ctune(s, "delete", str(eid), "--force")
    assert rc == 0 and "deleted" in out, (rc, out, err)
    rc, out, err = ctune(s, "pause", str(eid))
    assert rc == 5 and "not found" in err, (rc, out, err)
    out = subprocess.run([os.path.join(BIN, "ctune"), "--help"], capture_output=True,
                         text=True, timeout=10).stdout
    for word in ("pause EXP", "resume EXP", "extend EXP", "edit EXP", "stop TRIAL",
                 "delete EXP"):
        assert word in out, word


if __name__ == "__main__":
    run = Runner()
    run.run(test_cli_controls)
    run.done()
