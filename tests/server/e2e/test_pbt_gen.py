"""PBT generations (docs/scheduling.md#pbt): an exploited trial
whose donor's checkpoint is BEHIND its own progress resumes from the donor's
iteration and reports time values it already reported before the exploit.
Those are new results of the trial's next generation, not replays of the old
ones (which would answer the stored "stop" and end the trial).

A scripted fake worker speaks REST; the exploit comes from the test-only hook
CTUNE_TEST_DECIDE (exploit at t=5 from trial 1, which stays at iteration 2).
- the new results are stored and decided afresh, the lease resumes at the
  donor's checkpoint iteration, a checkpoint may not claim to be past it
  until the new generation reports so (checkpoint_ahead);
- a repeat of a post-exploit result is still deduplicated (same decision,
  nothing stored);
- after kill -9 and a restart all of it holds, and a second exploit starts a
  third generation.
"""
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, experiment, lease, register  # noqa: E402


def put_ckpt(s, tid, it, data):
    h = {"X-Ctune-Iteration": str(it), "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
         "Content-Type": "application/octet-stream"}
    st, b, _ = s.request("PUT", "/api/v1/trials/%d/checkpoint" % tid, data, headers=h)
    return st, b


def post(s, tid, it, loss):
    st, b, _ = s.post("/api/v1/trials/%d/results" % tid,
                      {"training_iteration": it, "loss": loss})
    assert st == 200, (st, b)
    return b["decision"]


def results(s, tid):
    b = s.ok("GET", "/api/v1/trials/%d/results" % tid)
    return [(r["training_iteration"], r["loss"]) for r in b["results"]], b


def ok_ckpt(s, tid, it, data):
    st, b = put_ckpt(s, tid, it, data)
    assert st in (200, 201, 204), (st, b)


def resume(s, w, tid, donor_it):
    s.ok("POST", "/api/v1/trials/%d/complete" % tid, {})
    t = lease(s, w)
    assert t is not None and t["id"] == tid, t
    assert t["has_checkpoint"] and t["checkpoint_iteration"] == donor_it, t
    assert t["config"]["lr"] == 0.012, t
    st, data, _ = s.get("/api/v1/trials/%d/checkpoint" % tid, raw=True)
    assert st == 200 and data == b"donor@2", (st, data)
    return t


def test_exploit_from_a_donor_behind():
    # Set for the restarts too.
    os.environ["CTUNE_TEST_DECIDE"] = "exploit_at=5,donor=1,set=lr:0.012"
    try:
        donor_behind()
    finally:
        del os.environ["CTUNE_TEST_DECIDE"]


def donor_behind():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)
    w = register(s, cpu=2)
    a, b = lease(s, w), lease(s, w)
    assert (a["id"], b["id"]) == (1, 2), (a, b)
    # The donor stays at iteration 2.
    for it in (1, 2):
        assert post(s, 1, it, 0.5 - it / 10) == "continue"
    ok_ckpt(s, 1, 2, b"donor@2")
    # Trial 2 runs ahead to 5, where it is exploited.
    for it in (1, 2, 3, 4):
        assert post(s, 2, it, 1.0 + it) == "continue"
        ok_ckpt(s, 2, it, b"own@%d" % it)
    assert post(s, 2, 5, 6.0) == "stop"
    assert post(s, 2, 5, 6.0) == "stop"  # a replay in the same generation
    resume(s, w, 2, 2)
    # Its iterations continue from the donor's checkpoint: 3 is next, and no
    # checkpoint may claim to be past 2 before a result says so.
    st, body = put_ckpt(s, 2, 3, b"early")
    assert st == 409 and body["error"]["code"] == "checkpoint_ahead", (st, body)
    assert post(s, 2, 3, 0.33) == "continue"
    ok_ckpt(s, 2, 3, b"gen1@3")
    assert post(s, 2, 4, 0.34) == "continue"
    # A repeat of a post-exploit result is still deduplicated.
    assert post(s, 2, 4, 99.0) == "continue"
    ok_ckpt(s, 2, 4, b"gen1@4")
    want = [(1, 2.0), (2, 3.0), (3, 4.0), (4, 5.0), (5, 6.0), (3, 0.33), (4, 0.34)]
    got, body = results(s, 2)
    assert got == want, got
    assert body["generation"] == 1 and body["generation_start"] == 5, body

    s.restart()  # kill -9
    got, body = results(s, 2)
    assert got == want, got
    assert body["generation"] == 1 and body["generation_start"] == 5, body
    assert post(s, 2, 3, 77.0) == "continue"  # replays after the restart
    assert post(s, 2, 4, 77.0) == "continue"
    assert results(s, 2)[0] == want
    st, body = put_ckpt(s, 2, 5, b"early")
    assert st == 409 and body["error"]["code"] == "checkpoint_ahead", (st, body)
    # At 5 again it is exploited again (the donor is still at 2): a third
    # generation, from the donor's checkpoint once more.
    assert post(s, 2, 5, 0.35) == "stop"
    resume(s, w, 2, 2)
    assert post(s, 2, 3, 0.2) == "continue"
    got, body = results(s, 2)
    assert got == want + [(5, 0.35), (3, 0.2)], got
    assert body["generation"] == 2 and body["generation_start"] == 8, body
    tr = s.ok("GET", "/api/v1/trials/%d" % 2)
    assert [x["kind"] for x in tr["events"]] == ["exploited", "exploited"], tr["events"]
    assert tr["status"] == "RUNNING", tr
    s.restart()
    assert post(s, 2, 3, 1.0) == "continue"
    assert post(s, 2, 4, 0.1) == "continue"
    got, body = results(s, 2)
    assert got == want + [(5, 0.35), (3, 0.2), (4, 0.1)], got
    assert body["generation"] == 2 and body["generation_start"] == 8, body
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_exploit_from_a_donor_behind)
    r.done()
