"""Numbers go out exactly as they came in: result values that 15-digit
printing changes come back bit for bit, seeds (picked by the server or
given) are shown as the integer the database holds and reproduce the same
trials, and every last_seq the server prints is accepted back as since."""
import json
import os
import random
import subprocess
import time
import re
import struct
import sys

from ctune_e2e import BIN_DIR, Server, Runner, experiment, register, lease, tmpdir

# A command trainable: reports its sampled lr back, and values that 15-digit
# printing changes, as Python prints them (repr: shortest round-trip).
TRAINABLE = r"""
import json, os, random
cfg = json.loads(os.environ["CTUNE_CONFIG"])
rng = random.Random(int(os.environ["CTUNE_TRIAL_ID"]))
for it in (1, 2, 3):
    print(json.dumps({"training_iteration": it, "lr_seen": cfg["lr"],
                      "loss": rng.random() / 7, "acc": 1 - rng.random() / 3}), flush=True)
"""


def bits(x):
    return struct.pack("<d", x)


def lossy_values(n, rng):
    """Doubles whose %.15g text reads back as another double."""
    out = []
    while len(out) < n:
        v = rng.random() * 10 ** rng.randint(-8, 8)
        if float("%.15g" % v) != v:
            out.append(v)
    return out


def fence(t, wid):
    # Protocol v2: every trial-scoped write names its lease.
    return {"X-Ctune-Lease": "%d:%d" % (wid, t.get("attempt", 1))}


def test_results_round_trip_bit_for_bit():
    rng = random.Random(20261122)
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    t = lease(s, w)
    sent = []
    for it in range(1, 6):
        vals = lossy_values(4, rng)
        # repr() is Python's shortest round-trip text: what a trial prints.
        body = '{"training_iteration": %d, "loss": %s, "a": %s, "b": %s, "c": %s}' % (
            (it,) + tuple(repr(v) for v in vals))
        s.ok("POST", "/api/v1/trials/%d/results" % t["id"], body, headers=fence(t, w))
        sent.append((it, vals))
    st, raw, _ = s.get("/api/v1/trials/%d/results" % t["id"], raw=True)
    assert st == 200, (st, raw)
    got = json.loads(raw)["results"]
    assert len(got) == len(sent), got
    for (it, vals), r in zip(sent, got):
        assert r["training_iteration"] == it and isinstance(r["training_iteration"], int)
        for k, v in zip(("loss", "a", "b", "c"), vals):
            assert bits(r[k]) == bits(v), "%s: sent %r, got %r" % (k, v, r[k])
    # The same values through the trial view and the experiment's result feed.
    last = s.ok("GET", "/api/v1/trials/%d" % t["id"])["last_result"]
    assert bits(last["loss"]) == bits(sent[-1][1][0]), last
    feed = s.ok("GET", "/api/v1/experiments/1/results?since=0")["results"]
    assert [bits(x["result"]["c"]) for x in feed] == [bits(v[3]) for _, v in sent]
    s.stop()


def test_seed_shown_is_the_seed_used():
    s = Server()
    cfg = experiment(n=3)
    cfg["param_space"] = {"lr": {"type": "uniform", "lower": 0, "upper": 1}}
    # A given seed above 2^31 and near 2^53 is printed as that integer.
    cfg["seed"] = 8342818273689171
    st, raw, _ = s.request("POST", "/api/v1/experiments?dry_run=true", cfg, raw=True)
    assert st == 200 and b'"seed":8342818273689171' in raw, raw
    a = [c["lr"] for c in json.loads(raw)["trials"]]
    cfg["seed"] = 8342818273689170
    b = [c["lr"] for c in s.ok("POST", "/api/v1/experiments?dry_run=true", cfg)["trials"]]
    assert a != b
    # A server-picked seed: the seed the API shows gives the same trials.
    del cfg["seed"]
    e = s.ok("POST", "/api/v1/experiments", cfg, status=201)
    st, raw, _ = s.get("/api/v1/experiments/%d" % e["id"], raw=True)
    assert re.search(rb'"seed":\d+[,}]', raw), raw  # an integer, never 8.3e+15
    seed = json.loads(raw)["seed"]
    assert isinstance(seed, int) and 0 <= seed < 2 ** 53
    w = register(s, cpu=64)  # trials are made at lease time
    while lease(s, w):
        pass
    trials = s.ok("GET", "/api/v1/experiments/%d/trials" % e["id"])["trials"]
    assert trials
    cfg["seed"] = seed
    dry = s.ok("POST", "/api/v1/experiments?dry_run=true", cfg)["trials"]
    assert [bits(c["lr"]) for c in dry] == [bits(t["config"]["lr"]) for t in trials]
    s.stop()


def test_last_seq_round_trips():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    for since in (0, 2 ** 53 + 1, 100000000000000001, 2 ** 63 - 1):
        for path in ("results", "trials"):
            st, raw, _ = s.get("/api/v1/experiments/1/%s?since=%d" % (path, since), raw=True)
            assert st == 200, (path, since, raw)
            m = re.search(rb'"last_seq":(-?[0-9]+)[,}]', raw)
            assert m, raw  # an integer, never 1e+17
            back = m.group(1).decode()
            st, body, _ = s.get("/api/v1/experiments/1/%s?since=%s" % (path, back))
            assert st == 200, (path, back, body)
    s.stop()


def test_through_a_worker_and_a_trial():
    """The sampled config reaches the trial, and what the trial prints
    reaches the database and comes back, bit for bit."""
    s = Server()
    d = tmpdir()
    script = os.path.join(d, "trainable.py")
    with open(script, "w") as f:
        f.write(TRAINABLE)
    cfg = experiment(n=4)
    cfg["param_space"] = {"lr": {"type": "uniform", "lower": 0, "upper": 1}}
    cfg["trainable"] = {"type": "command", "argv": ["/usr/bin/python3", script]}
    e = s.ok("POST", "/api/v1/experiments", cfg, status=201)
    w = subprocess.Popen([os.path.join(BIN_DIR, "ctune-worker"), "--server",
                          "http://%s:%d" % (s.host, s.port), "--cpus", "2", "--memory-mb", "1024",
                          # tokens by default: the server made <db>.tokens, the
                          # worker registers with its worker= line
                          "--token-file", s.db + ".tokens",
                          "--work-dir", os.path.join(d, "w"), "--poll-ms", "100", "--no-cgroup"],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "w.log"), "wb"))
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if s.ok("GET", "/api/v1/experiments/%d" % e["id"])["status"] != "RUNNING":
                break
            time.sleep(0.2)
        trials = s.ok("GET", "/api/v1/experiments/%d/trials" % e["id"])["trials"]
        assert all(t["status"] == "TERMINATED" for t in trials), (
            [t["status"] for t in trials], open(os.path.join(d, "w.log")).read()[-2000:])
        for t in trials:
            rng = random.Random(t["id"])
            res = s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["results"]
            assert [r["training_iteration"] for r in res] == [1, 2, 3], res
            for r in res:
                assert bits(r["lr_seen"]) == bits(t["config"]["lr"]), (r, t["config"])
                assert bits(r["loss"]) == bits(rng.random() / 7), r
                assert bits(r["acc"]) == bits(1 - rng.random() / 3), r
    finally:
        w.terminate()
        try:
            w.wait(timeout=20)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
    s.stop()


def main():
    r = Runner()
    for fn in (test_results_round_trip_bit_for_bit, test_seed_shown_is_the_seed_used,
               test_last_seq_round_trips, test_through_a_worker_and_a_trial):
        r.run(fn)
    r.done()


if __name__ == "__main__":
    main()
