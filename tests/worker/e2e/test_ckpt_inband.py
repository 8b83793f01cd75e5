#!/usr/bin/env python3
"""A result and the checkpoint taken at it are one unit on the wire
(docs/worker.md#checkpoints): a real ctune-worker runs a Python script that
calls ctune.report(loss=..., checkpoint=...) every 30 ms for 30 iterations,
faster than the 100 ms debounce of a checkpoint.bin rename. Against a fake
server that records every upload:
  - checkpoints are uploaded while the trial runs, not only when it ends (a
    rename every 30 ms restarted the debounce timer until the script ended);
  - each upload's X-Ctune-Iteration is the iteration its own manifest and
    payload say, and never past the results stored before it (the server's
    checkpoint_ahead rule);
  - the last upload is iteration 30, and no stored result carries the
    worker's "_checkpoint" key;
  - the trial's stdout log keeps each line as printed, "_checkpoint" member
    included (the log is the trial's output byte for byte)."""
import io
import os
import json
import pickle
import signal
import sys
import tarfile
import threading

from fakeserver import FakeServer, lease
from harness import main

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PY = "/usr/bin/python3"
ITERS = 30
SCRIPT = r"""
import time, ctune
for i in range(1, %d + 1):
    ctune.report(loss=1.0 / i, checkpoint={"i": i})
    time.sleep(0.03)
""" % ITERS


def manifest_and_payload(raw):
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        m = json.loads(tar.extractfile("ctune-checkpoint.json").read().decode())
        return m, pickle.loads(tar.extractfile("data.bin").read())


def body(env):
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    fake = FakeServer(heartbeat_interval_s=0.2)
    stored_at_put = []  # (label, max iteration stored before it)
    lock = threading.Lock()

    def hook(req):
        if req.what == "checkpoint" and req.method == "PUT":
            with lock:
                its = fake.stored.get(req.trial, [])
                stored_at_put.append((int(req.headers["X-Ctune-Iteration"]),
                                      max(its) if its else 0))
        return None
    fake.hook = hook
    tr = lease(1, 1, [PY, "-c", SCRIPT], max_t=ITERS)
    tr["trainable"]["env"] = {"PYTHONPATH": os.path.join(REPO, "python")}
    fake.leases.append(tr)
    env.url = fake.url
    w = env.start_worker("w", "--poll-ms", "50",
                         env=dict(os.environ, CTUNE_TEST_WORKER_TICK_MS="100", CTUNE_LOG_LEVEL="debug"))
    try:
        fake.wait(lambda r: r.what in ("complete", "fail", "release"), 30, "the trial's end")
        end = fake.find(lambda r: r.what in ("complete", "fail", "release"))[0]
        assert end.what == "complete", (end.path, end.body, w.log()[-3000:])
        results = [x for r in fake.find(lambda r: r.what == "results") for x in r.results()]
        assert [x["training_iteration"] for x in results] == list(range(1, ITERS + 1)), results
        assert not [x for x in results if "_checkpoint" in x], results
        last_result = max(r.t for r in fake.find(lambda r: r.what == "results"))
        puts = fake.find(lambda r: r.what == "checkpoint" and r.method == "PUT")
        labels = []
        for p in puts:
            label = int(p.headers["X-Ctune-Iteration"])
            m, payload = manifest_and_payload(p.raw)
            assert m["training_iteration"] == label == payload["i"], (label, m, payload)
            labels.append(label)
        for label, stored in stored_at_put:
            assert label <= stored, ("checkpoint ahead of its results", stored_at_put)
        during = [p for p in puts if p.t < last_result]
        print("%d checkpoint uploads, %d while the trial ran; labels %s"
              % (len(puts), len(during), labels))
        assert len(during) >= 2, ("uploads only at the end", labels)
        assert labels == sorted(labels) and labels[-1] == ITERS, labels
        assert not fake.errors, fake.errors
        with open(os.path.join(env.trial_dir("w", 1), "stdout.log"), "rb") as f:
            lines = [json.loads(ln) for ln in f.read().decode().splitlines()]
        named = [ln for ln in lines if set(ln.get("_checkpoint", {})) == {"ino", "size"}]
        assert len(named) == len(lines) == ITERS, lines[:3]
        os.kill(w.pid, signal.SIGTERM)  # drains against this fake server, exits 0
        rc = w.p.wait(20)
        assert rc == 0, "worker exited %d after SIGTERM:\n%s" % (rc, w.log()[-3000:])
    finally:
        fake.close()


if __name__ == "__main__":
    main("ckpt-inband", body)
