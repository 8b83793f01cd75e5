#!/usr/bin/env python3
"""What the worker sends never waits for ever behind what cannot go, and a
final checkpoint the server cannot take for a while is not dropped
(docs/worker.md#delivery-and-backoff). Real server, real worker:

  metric      a PyTorch script (torch imported for real, the README's
              `report(val_loss=..., checkpoint=d)` with ctune.on_stop) while
              the experiment's metric is val_accuracy: each trial ends ERROR
              missing_metric within seconds of its first result, its
              checkpoint (which the server could never take: its results were
              never sent) is not uploaded at all, and neither daemon spins
              (their CPU time over the run, from /proc, is bounded). It used
              to hang with the worker PUTting that checkpoint (409
              checkpoint_ahead) about once a millisecond.
  spool       the server cannot spool checkpoint uploads (503
              spool_unavailable with Retry-After: 5, a test-build fault)
              while two trials run to their end: their final checkpoints
              are retried, as often as the server's Retry-After asks (5 s
              apart, not the worker's own 0.1 s backoff), and not dropped
              after a few quick tries as they used to be; each trial's
              stuck upload is said once in the worker's log and once as an
              "undelivered" event of the trial; once the spool works again
              both trials end TERMINATED with their last checkpoint stored.
"""
import concurrent.futures
import importlib.util
import json
import os
import sys
import time

from harness import TRAINABLE, command_config, main, wait_for
import ctune_harness

PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

TORCH_SCRIPT = r'''
import os, pathlib, sys, tempfile, time
import torch, torch.nn as nn
import ctune
ctune.on_stop()
torch.manual_seed(0)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=ctune.get_config()["lr"])
x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
d = pathlib.Path(tempfile.mkdtemp())
for epoch in range(50):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    torch.save(model.state_dict(), d / "model.pt")
    with open(os.path.join(sys.argv[1], "reported-%s" % os.environ["CTUNE_TRIAL_ID"]), "a") as f:
        f.write("%.6f\n" % time.time())
    ctune.report(val_loss=float(loss), checkpoint=d)
    time.sleep(0.05)
'''


def cpu_s(pid):
    """User + system CPU seconds of a live process, from /proc."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(env, server, worker):
    script = os.path.join(env.tmp, "train.py")
    with open(script, "w") as f:
        f.write(TORCH_SCRIPT)
    marks = os.path.join(env.tmp, "marks")
    os.mkdir(marks)
    cfg = command_config("torch", [PY, script, marks], metric="val_accuracy", mode="max",
                         param_space={"lr": {"type": "uniform", "lower": 0.01, "upper": 0.1}},
                         resources_per_trial={"cpu": 0.5})
    cfg["trainable"]["env"] = {"PYTHONPATH": os.path.join(REPO, "python")}
    cpu0 = cpu_s(server.pid), cpu_s(worker.pid)
    t0 = time.monotonic()
    exp = env.submit(cfg)
    env.wait_experiment(exp, 60)
    wall = time.monotonic() - t0
    cpu = cpu_s(server.pid) - cpu0[0], cpu_s(worker.pid) - cpu0[1]
    print("misnamed metric: experiment ended in %.1f s; CPU server %.2f s, worker %.2f s"
          % (wall, cpu[0], cpu[1]))
    log = worker.log()
    for t in env.trials(exp):
        assert t["status"] == "ERROR", t
        assert t["error"].startswith("missing_metric: result has no metric 'val_accuracy'"), t
        with open(os.path.join(marks, "reported-%d" % t["id"])) as f:
            first = float(f.read().split()[0])
        took = t["ended_at"] - first
        print("trial %d: ERROR %.2f s after its first report" % (t["id"], took))
        assert took < 8, "trial %d ended %.1f s after its first report" % (t["id"], took)
        # Its results were never sent: the server could never take its
        # checkpoint, and its fail does not wait for one.
        assert "trial %d: uploading its checkpoint" % t["id"] not in log, log[-3000:]
    # Neither daemon spins: their CPU over the whole run (a Python process
    # importing torch is most of its wall time; the spool case's retries
    # run meanwhile).
    assert cpu[0] < 2.0 and cpu[1] < 2.0, cpu


def tries(log, trial_id):
    """Times (s) of the worker's failed checkpoint uploads of a trial, from its
    debug log ("...Z ctune-worker debug trial 3: checkpoint upload failed")."""
    out = []
    for ln in log.splitlines():
        if ("debug trial %d: checkpoint upload failed" % trial_id) in ln:
            stamp = ln.split()[0]  # 2026-11-27T14:09:53.220Z
            h, m, sec = stamp[11:-1].split(":")
            out.append(int(h) * 3600 + int(m) * 60 + float(sec))
    return out


def spool(env, server, worker, fault):
    cfg = command_config("spool", ["sh", TRAINABLE, "3", "0.05"], num_samples=2,
                         resources_per_trial={"cpu": 0.5})
    exp = env.submit(cfg)
    # Both trials end while no checkpoint can be stored; each one's stuck
    # upload is said on the trial (the worker's heartbeat note).
    def noted():
        ts = env.trials(exp)
        if len(ts) < 2:
            return None
        evs = [[e for e in env.trial(t["id"])["events"] if e["kind"] == "undelivered"]
               for t in ts]
        return all(evs) and (ts, evs)
    ts, evs = wait_for(noted, 30, "an undelivered event on both trials", step=0.1)
    for t, ev in zip(ts, evs):
        print("trial %d: %s: %s" % (t["id"], ev[0]["kind"], ev[0]["reason"]))
        assert "checkpoint" in ev[0]["reason"], ev
        assert "HTTP 503 spool_unavailable" in ev[0]["reason"], ev
        assert t["status"] == "RUNNING", t  # its end waits for its checkpoint
    wait_for(lambda: worker.log().count("its final checkpoint has not been uploaded") >= 2 or
             None, 20, "the worker to say the final uploads are stuck", step=0.1)
    # Tried again (the worker used to give up after 5 tries in a few
    # milliseconds), as far apart as the server's Retry-After: 5 asks.
    wait_for(lambda: all(len(tries(worker.log(), t["id"])) >= 2 for t in ts) or None, 30,
             "2 failed tries of each trial's checkpoint upload", step=0.1)
    for t in ts:
        at = tries(worker.log(), t["id"])
        gaps = [b - a for a, b in zip(at, at[1:])]
        print("trial %d: failed tries %.2f s apart" % (t["id"], gaps[0]),
              ", ".join("%.2f" % g for g in gaps[1:]))
        assert gaps[0] >= 4.9, gaps  # Retry-After: 5, not the 0.1 s backoff
    t_fixed = time.monotonic()
    os.unlink(fault)
    env.wait_experiment(exp, 30)
    print("spool available again: experiment ended %.1f s later" % (time.monotonic() - t_fixed))
    log = worker.log()
    client = ctune_harness.JsonClient.for_url(env.url, token=env.admin_token, timeout=10,
                                              keep_alive=False)
    for t in env.trials(exp):
        assert t["status"] == "TERMINATED", t
        st, body, _ = client.request("GET", "/api/v1/trials/%d/checkpoint" % t["id"])
        assert st == 200 and body.strip() == b"3", (t["id"], st, body[:200])
        # Said once, not at each retry; one event, not one per heartbeat.
        said = [ln for ln in log.splitlines()
                if ("trial %d: its " % t["id"]) in ln and "has not been uploaded" in ln]
        assert len(said) == 1, said
        kinds = [e["kind"] for e in env.trial(t["id"])["events"]]
        assert kinds.count("undelivered") == 1, kinds
    assert "giving up" not in log and "not uploaded" not in log, log[-3000:]


def bad_note(env):
    """A heartbeat's "stuck" note that is not a short string is refused,
    naming where."""
    with open(os.path.join(env.work_dir("w"), "identity")) as f:
        ident = json.load(f)
    client = ctune_harness.JsonClient.for_url(env.url, token=ident["secret"], timeout=10,
                                              keep_alive=False)
    for note in (5, "", "x" * 513):
        st, text, _ = client.request(
            "POST", "/api/v1/workers/%d/heartbeat" % ident["id"],
            {"running": [{"id": 1, "attempt": 1, "stuck": note}]},
            headers={"Content-Type": "application/json"})
        err = json.loads(text)["error"]
        assert st == 400 and err["path"] == "running[0].stuck", (st, text)
    print("bad stuck notes: 400 at running[0].stuck (%s)" % err["message"])


def body(env):
    if not os.access(PY, os.X_OK) or importlib.util.find_spec("torch") is None:
        print("SKIP: no %s with torch" % PY)
        sys.exit(77)
    fault = os.path.join(env.tmp, "spool-fault")
    server = env.start_server("--heartbeat-interval", "0.2", "--lease-timeout", "5",
                              env=dict(os.environ, CTUNE_TEST_SPOOL_FAULT="open=13@" + fault))
    worker = env.start_worker("w", "--cpus", "2",
                              env=dict(os.environ, CTUNE_LOG_LEVEL="debug",
                                       CTUNE_TEST_WORKER_TICK_MS="100"))
    wait_for(lambda: "registered with" in worker.log(), 20, "the worker to register")
    with open(fault, "w"):
        pass
    # Side by side: the metric case uploads no checkpoint, so the spool's
    # fault does not touch it, and most of each case is waiting.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(metric, env, server, worker),
                pool.submit(spool, env, server, worker, fault)]
        for r in runs:
            r.result()
    bad_note(env)


if __name__ == "__main__":
    main("delivery", body)
