#!/usr/bin/env python3
"""On the real daemon: submission checks of argv/env/cwd placeholders
(docs/protocol.md#submission-checks) and "fail_fast"
(docs/protocol.md#fail-fast): the first trial that
ends ERROR for good cancels the experiment, end_reason says why, it is
committed with the trial's end, and a restart keeps it."""
import os
import signal

from ctune_e2e import Server, Runner, experiment, register, lease, heartbeat


def command(argv, env=None, cwd=None, **extra):
    tr = {"type": "command", "argv": argv}
    if env is not None:
        tr["env"] = env
    if cwd is not None:
        tr["cwd"] = cwd
    return experiment(n=2, trainable=tr, **extra)


def test_placeholders_checked_at_submission():
    s = Server()
    # A typo: 400 at the argv element, naming it and the names it may use.
    st, b, _ = s.post("/api/v1/experiments", command(["python3", "train.py", "--lr={lrr}"]))
    assert st == 400 and b["error"]["code"] == "invalid_config", (st, b)
    assert b["error"]["path"] == "trainable.argv[2]", b
    msg = b["error"]["message"]
    assert "{lrr}" in msg and "lr" in msg and "trial_id" in msg and "checkpoint_dir" in msg, msg
    st, b, _ = s.post("/api/v1/experiments", command(["true"], env={"LR": "{nope}"}))
    assert st == 400 and b["error"]["path"] == "trainable.env.LR" and "{nope}" in b["error"]["message"], b
    st, b, _ = s.post("/api/v1/experiments", command(["true"], cwd="/tmp/{experiment}"))
    assert st == 400 and b["error"]["path"] == "trainable.cwd", b
    # What the worker fills in, literal braces and JSON text are fine.
    ok = command(["sh", "-c", "echo '{\"a\": 1}' {{x}} {lr} {trial_id} {trial_name}",
                  "{experiment_id}", "{checkpoint_dir}", "{ not one }"],
                 env={"LR": "{lr}"}, cwd="/tmp")
    b = s.ok("POST", "/api/v1/experiments?dry_run=true", ok)
    assert b["num_trials"] == 2, b
    # Builtin trainables take no placeholders: nothing to check.
    s.stop()


def fail(s, tid, msg):
    return s.ok("POST", "/api/v1/trials/%d/fail" % tid, {"error": msg, "exit_code": 3})


def test_fail_fast_cancels_and_survives_restart():
    s = Server()
    s.ok("POST", "/api/v1/experiments",
         experiment(n=4, fail_fast=True, max_failures=1, sched={"type": "fifo"}), status=201)
    w = register(s, cpu=2)
    t1, t2 = lease(s, w), lease(s, w)
    # A failure with a retry left is not the end of the trial.
    fail(s, t1["id"], "boom 1")
    e = s.ok("GET", "/api/v1/experiments/1")
    assert e["status"] == "RUNNING" and e["end_reason"] is None, e
    t1 = lease(s, w)
    assert t1["id"] == 1, t1
    tr = fail(s, t1["id"], "boom 2")
    assert tr["status"] == "ERROR", tr
    e = s.ok("GET", "/api/v1/experiments/1")
    assert e["status"] == "CANCELLED", e
    assert e["end_reason"] == "fail_fast: trial 1 (e_00000) failed: boom 2", e
    # Trials are made at lease time: the two made end, the two never made
    # never will be.
    assert e["counts"]["ERROR"] == 1 and e["counts"]["TERMINATED"] == 1, e
    assert e["num_created"] == 2, e
    # The running trial is stopped as by a cancel; nothing more is leased.
    stops = heartbeat(s, w, [(t2["id"], t2["attempt"])])
    assert [x[0] for x in stops] == [t2["id"]], stops
    assert lease(s, w) is None
    s.restart()
    e = s.ok("GET", "/api/v1/experiments/1")
    assert e["status"] == "CANCELLED" and e["end_reason"].startswith("fail_fast: trial 1 "), e
    # Without fail_fast a failed trial does not end the experiment, and a
    # user's cancel says so.
    s.ok("POST", "/api/v1/experiments", experiment(n=2, sched={"type": "fifo"}), status=201)
    t = lease(s, w)
    fail(s, t["id"], "boom")
    e = s.ok("GET", "/api/v1/experiments/2")
    assert e["status"] == "RUNNING" and e["end_reason"] is None, e
    e = s.ok("POST", "/api/v1/experiments/2/cancel", {})
    assert e["status"] == "CANCELLED" and e["end_reason"] == "cancelled by user", e
    st, b, _ = s.post("/api/v1/experiments", experiment(fail_fast="yes"))
    assert st == 400 and b["error"]["path"] == "fail_fast", b
    s.stop()


def test_fail_fast_commits_with_the_trial_end():
    """The store's test hook SIGKILLs the server right after the commit that
    ends a trial: the cancel and its reason must be in that commit."""
    old = os.environ.pop("CTUNE_TEST_FAULT", None)
    os.environ["CTUNE_TEST_FAULT"] = "kill_after_trial_end=1"
    try:
        s = Server()
    finally:
        os.environ.pop("CTUNE_TEST_FAULT", None)
        if old is not None:
            os.environ["CTUNE_TEST_FAULT"] = old
    s.ok("POST", "/api/v1/experiments", experiment(n=3, fail_fast=True, sched={"type": "fifo"}),
         status=201)
    w = register(s, cpu=1)
    t = lease(s, w)
    try:
        s.post("/api/v1/trials/%d/fail" % t["id"], {"error": "exploded"})
    except Exception:
        pass  # the server died before (or while) answering
    s.proc.wait(timeout=10)
    assert s.proc.returncode == -signal.SIGKILL, s.proc.returncode
    s.restart()
    e = s.ok("GET", "/api/v1/experiments/1")
    assert e["status"] == "CANCELLED", e
    assert e["end_reason"] == "fail_fast: trial 1 (e_00000) failed: exploded", e
    assert e["counts"]["ERROR"] == 1 and e["num_created"] == 1, e
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_placeholders_checked_at_submission)
    r.run(test_fail_fast_cancels_and_survives_restart)
    r.run(test_fail_fast_commits_with_the_trial_end)
    r.done()
