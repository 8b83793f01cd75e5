"""A bad machine quarantined, with real processes (docs/server.md#quarantine):
a ctune-server at the default --quarantine-after (3), a healthy ctune-worker,
and a worker whose trials all die with a CUDA error (a simulated bad GPU:
the command trainable fails when FAKE_BAD_GPU, which only that worker
passes on, is set). The bad worker is quarantined after at most 3 failed
attempts, the healthy one finishes the experiment, no trial ends ERROR
(max_failures 0: each failure there counted nothing) and those trials are
blamed on the machine; `ctune release-worker` puts it back, and it leases
again. The in-process rules: tests/server/state/test_state_quarantine.c.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import BIN_DIR, Runner, Server, experiment, tmpdir  # noqa: E402

# A shell script: a Python interpreter's start is most of a trial's time.
TRAINABLE = r"""
if [ -n "$FAKE_BAD_GPU" ]; then
  printf 'Traceback (most recent call last):\n  File "train.py", line 4, in <module>\n' >&2
  printf 'RuntimeError: CUDA error: an illegal memory access was encountered\n' >&2
  exit 1
fi
# The good worker's trials after the first wait for the test's gate (made
# once the bad worker is quarantined), so the good worker cannot finish
# the experiment before the bad one has failed its share.
if [ "$CTUNE_TRIAL_ID" != 1 ]; then
  n=0
  while [ ! -e "@GATE@" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
fi
echo '{"training_iteration": 1, "loss": 1.0}'
echo '{"training_iteration": 2, "loss": 0.5}'
"""


def wait(what, pred, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def worker(s, d, name, env=None, args=(), cpus=1):
    log = open(os.path.join(d, name + ".log"), "wb")
    return subprocess.Popen(
        [os.path.join(BIN_DIR, "ctune-worker"), "--server", "http://%s:%d" % (s.host, s.port),
         "--cpus", str(cpus), "--token-file", s.db + ".tokens", "--name", name,
         "--work-dir", os.path.join(d, name), "--poll-ms", "50", "--no-cgroup"] + list(args),
        stdout=subprocess.DEVNULL, stderr=log, env=dict(os.environ, **(env or {})))


def trials_of(s, eid):
    return s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]


def worker_row(s, wid):
    return [w for w in s.ok("GET", "/api/v1/workers")["workers"] if w["id"] == wid][0]


def test_bad_gpu_quarantined():
    s = Server()
    d = tmpdir()
    script = os.path.join(d, "train.sh")
    with open(script, "w") as f:
        f.write(TRAINABLE.replace("@GATE@", os.path.join(d, "gate")))
    cfg = experiment("q", n=8, trainable={"type": "command", "argv": ["/bin/sh", script]},
                     resources_per_trial={"cpu": 1}, max_failures=0)
    eid = s.ok("POST", "/api/v1/experiments", cfg, status=201)["id"]
    procs = [worker(s, d, "good")]
    try:
        # Another worker succeeds first: the bad one's streak is then its own.
        wait("a trial done on the good worker",
             lambda: any(t["status"] == "TERMINATED" for t in trials_of(s, eid)))
        procs.append(worker(s, d, "bad", env={"FAKE_BAD_GPU": "1"},
                            args=["--pass-env", "FAKE_BAD_GPU"]))
        bad = wait("the bad worker registered", lambda: [w["id"] for w in s.ok("GET", "/api/v1/workers")
                                                         ["workers"] if w["name"] == "bad"])[0]
        row = wait("the bad worker quarantined",
                   lambda: (lambda w: w if w["status"] == "quarantined" else None)(worker_row(s, bad)))
        # Either rule may come first: its streak while the good one succeeds,
        # or two of its failed trials ended well on the good one.
        open(os.path.join(d, "gate"), "w").close()
        why = row["quarantine_reason"]
        assert ("failed " in why and "CUDA error" in why) or "ended well on other workers" in why, row
        wait("the experiment done", lambda: s.ok("GET", "/api/v1/experiments/%d" % eid)["status"] != "RUNNING")
        ts = trials_of(s, eid)
        assert [t["status"] for t in ts] == ["TERMINATED"] * 8, [(t["id"], t["status"], t["error"]) for t in ts]
        failed_here = []
        for t in ts:
            at = s.ok("GET", "/api/v1/trials/%d" % t["id"])["attempts"]
            failed_here += [t["id"] for a in at if a["kind"] == "failed" and a["data"]["worker_id"] == bad]
        assert 1 <= len(failed_here) <= 3, failed_here
        for tid in failed_here:
            t = s.ok("GET", "/api/v1/trials/%d" % tid)
            assert t["attribution"] == "machine" and t["num_failures"] == 0, t
        assert worker_row(s, bad)["status"] == "quarantined"

        # Back in service: the good worker leaves, the next trial goes to the bad one.
        procs[0].terminate()
        procs[0].wait(timeout=15)
        cli = subprocess.run([os.path.join(BIN_DIR, "ctune"), "release-worker", str(bad), "--server",
                              "http://%s:%d" % (s.host, s.port), "--token-file", s.db + ".tokens"],
                             capture_output=True, text=True, timeout=15)
        assert cli.returncode == 0 and "released from quarantine" in cli.stdout, (cli.stdout, cli.stderr)
        assert worker_row(s, bad)["status"] == "alive"
        st, b, _ = s.post("/api/v1/workers/%d/release-quarantine" % bad, {})
        assert st == 409 and b["error"]["code"] == "not_quarantined", (st, b)
        e2 = s.ok("POST", "/api/v1/experiments", dict(cfg, name="q2", num_samples=1), status=201)["id"]
        t2 = wait("the bad worker's lease", lambda: [t for t in trials_of(s, e2) if t["attempt"] >= 1])[0]
        leased = s.ok("GET", "/api/v1/trials/%d" % t2["id"])["attempts"][0]
        assert leased["kind"] == "leased" and leased["data"]["worker_id"] == bad, leased
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    r = Runner()
    r.run(test_bad_gpu_quarantined)
    r.done()
