"""ctune-server over real HTTP: experiments, worker protocol, ASHA decisions,
best, cancel, limits, validation, incremental reads, static files."""
import json
import math
import os
import zlib

from ctune_e2e import Server, Runner, experiment, heartbeat, register, lease, report, tmpdir

ASHA = {"type": "asha", "max_t": 10, "grace_period": 1, "reduction_factor": 2, "brackets": 1}


def test_submit_dry_run_list_get():
    s = Server()
    st, b, _ = s.post("/api/v1/experiments?dry_run=true", experiment(n=3))
    assert st == 200 and b["dry_run"] and b["num_trials"] == 3 and len(b["trials"]) == 3
    assert all(1e-4 <= t["lr"] < 1e-1 for t in b["trials"])
    st, bad, _ = s.post("/api/v1/experiments?dry_run=maybe", experiment(n=3))
    assert st == 400 and bad["error"]["path"] == "dry_run"
    # a dry run stores nothing
    assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
    # the same seed gives the same configs when submitted for real
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=3), status=201)["id"]
    # trials are made at lease time: none yet, three planned
    e = s.ok("GET", "/api/v1/experiments/%d" % eid)
    assert e["status"] == "RUNNING" and e["num_trials"] == 3 and e["num_created"] == 0
    assert e["counts"]["PENDING"] == 0 and e["search_alg"] == "random"
    assert s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"] == []
    w = register(s, cpu=4)
    assert [lease(s, w)["id"] for _ in range(3)] == [1, 2, 3]
    assert lease(s, w) is None
    trials = s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
    assert [t["config"] for t in trials] == b["trials"]
    assert [t["name"] for t in trials] == ["e_00000", "e_00001", "e_00002"]
    e = s.ok("GET", "/api/v1/experiments/%d" % eid)
    assert e["num_created"] == 3 and e["counts"]["RUNNING"] == 3
    assert e["config"]["num_samples"] == 3 and e["metric"] == "loss" and e["mode"] == "min"
    assert e["scheduler"]["type"] == "fifo"
    assert s.ok("GET", "/api/v1/experiments")["experiments"][0]["id"] == eid
    st, b, _ = s.get("/api/v1/experiments/99")
    assert st == 404 and b["error"]["code"] == "not_found"
    st, b, _ = s.get("/api/v1/trials/99")
    assert st == 404 and "trial 99" in b["error"]["message"]
    s.stop()


def test_validation_errors_change_nothing():
    s = Server()
    bad = [
        (experiment(bogus=1), "bogus"),
        (dict(experiment(), param_space={"lr": {"type": "loguniform", "lower": 0, "upper": 1}}),
         "param_space.lr"),
        (dict(experiment(), num_samples=-1), "num_samples"),
    ]
    for cfg, path in bad:
        st, b, _ = s.post("/api/v1/experiments", cfg)
        assert st == 400, (st, b)
        assert b["error"]["code"] == "invalid_config" and b["error"]["path"].startswith(path), b
        assert b["error"]["message"].startswith(b["error"]["path"])
    st, b, _ = s.post("/api/v1/experiments", "{not json")
    assert st == 400 and b["error"]["code"] == "invalid_json"
    st, b, _ = s.post("/api/v1/experiments", "[1,2]")
    assert st == 400 and b["error"]["code"] == "invalid_json"
    st, b, _ = s.post("/api/v1/experiments", b'{"name": "caf\xe9"}')
    assert st == 400 and "UTF-8" in b["error"]["message"], b
    assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
    # bad worker bodies, bad results: 400 and nothing stored
    st, b, _ = s.post("/api/v1/workers", {"name": "w", "resources": {"cpu": -1}})
    assert st == 400 and b["error"]["path"] == "resources"
    assert s.ok("GET", "/api/v1/workers")["workers"] == []
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)["id"]
    w = register(s)
    t = lease(s, w)
    for body, path in [({"loss": 1}, "training_iteration"),
                       ({"training_iteration": 1, "loss": "x"}, "loss"),
                       ({"training_iteration": -1}, "training_iteration")]:
        st, b, _ = s.post("/api/v1/trials/%d/results" % t["id"], body)
        assert st == 400 and b["error"]["path"] == path, (body, b)
    assert s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["results"] == []
    assert s.ok("GET", "/api/v1/experiments/%d/results" % eid)["results"] == []
    st, b, h = s.request("DELETE", "/api/v1/experiments")
    assert st == 405 and b["error"]["code"] == "method_not_allowed"
    assert h["allow"] == "GET, POST", h
    s.stop()


def test_body_limit_413():
    s = Server()
    big = json.dumps(experiment(name="x" * (1024 * 1024 + 10)))
    st, b, _ = s.post("/api/v1/experiments", big)
    assert st == 413 and b["error"]["code"] == "payload_too_large", (st, b)
    assert s.ok("GET", "/api/v1/experiments")["experiments"] == []
    # a huge declared length is answered before any of the body is read
    import socket
    c = socket.create_connection((s.host, s.port))
    c.sendall(b"POST /api/v1/experiments HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nAuthorization: Bearer " + s.token.encode() +
              b"\r\nContent-Length: 1000000000\r\n\r\n")
    c.settimeout(10)
    reply = b""
    while b"payload_too_large" not in reply:
        chunk = c.recv(4096)
        if not chunk:
            break
        reply += chunk
    c.close()
    assert reply.startswith(b"HTTP/1.1 413") and b"payload_too_large" in reply, reply
    s.stop()


def test_lease_report_complete_order_and_accounting():
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments", experiment(n=3, resources_per_trial={"cpu": 2}),
               status=201)["id"]
    w = register(s, cpu=4)
    a = lease(s, w)
    b = lease(s, w)
    assert (a["id"], b["id"]) == (1, 2)  # creation order
    assert a["experiment_id"] == eid and a["start_iteration"] == 0 and a["attempt"] == 1
    assert a["trainable"]["type"] == "command" and a["resources"]["cpu"] == 2
    assert a["time_attr"] == "training_iteration" and a["metric"] == "loss"
    # the worker says it has room, the server knows it has not
    assert lease(s, w, free={"cpu": 8}) is None
    workers = s.ok("GET", "/api/v1/workers")["workers"]
    assert workers[0]["free"]["cpu"] == 0 and sorted(workers[0]["running_trials"]) == [1, 2]
    assert workers[0]["status"] == "alive"
    # the third trial is made when there is room for it
    st, _, _ = s.get("/api/v1/trials/3")
    assert st == 404 and s.ok("GET", "/api/v1/experiments/%d" % eid)["num_created"] == 2
    assert report(s, 1, training_iteration=1, loss=0.5) == "continue"
    assert report(s, 1, training_iteration=2, loss=0.4) == "continue"
    # idempotent: the same time value is stored once and answers the same
    assert report(s, 1, training_iteration=2, loss=0.4) == "continue"
    assert report(s, 1, training_iteration=1, loss=0.5) == "continue"  # an older one again
    res = s.ok("GET", "/api/v1/trials/1/results")["results"]
    assert res == [{"training_iteration": 1, "loss": 0.5}, {"training_iteration": 2, "loss": 0.4}]
    t = s.ok("POST", "/api/v1/trials/1/complete", {})
    assert t["status"] == "TERMINATED" and not t["stopped_early"] and t["iteration"] == 2
    assert t["last_result"] == {"training_iteration": 2, "loss": 0.4}
    # complete again is harmless; results after the end answer stop, unstored
    s.ok("POST", "/api/v1/trials/1/complete", {})
    assert report(s, 1, training_iteration=3, loss=0.1) == "stop"
    assert len(s.ok("GET", "/api/v1/trials/1/results")["results"]) == 2
    c = lease(s, w)
    assert c["id"] == 3
    # heartbeat: the worker still runs 1 (ended) → told to stop it
    assert heartbeat(s, w, [(1, 1), (2, 1), (3, 1)]) == [(1, 1, "ended")]
    st, b, _ = s.post("/api/v1/workers/99/heartbeat", {"running": []})
    assert st == 404 and b["error"]["code"] == "unknown_worker"
    s.ok("POST", "/api/v1/trials/2/complete", {})
    s.ok("POST", "/api/v1/trials/3/complete", {})
    e = s.ok("GET", "/api/v1/experiments/%d" % eid)
    assert e["status"] == "TERMINATED" and e["ended_at"] and e["counts"]["TERMINATED"] == 3
    s.stop()


def test_fail_and_retry():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1, max_failures=1), status=201)
    w = register(s)
    t = lease(s, w)
    report(s, t["id"], training_iteration=1, loss=1.0)
    tr = s.ok("POST", "/api/v1/trials/1/fail", {"error": "boom", "exit_code": 5, "reason": "diverged"})
    assert tr["status"] == "PENDING" and tr["num_failures"] == 1 and tr["exit_code"] == 5
    t2 = lease(s, w)
    assert t2["id"] == 1 and t2["attempt"] == 2 and t2["start_iteration"] == 1
    tr = s.ok("POST", "/api/v1/trials/1/fail", {"error": "boom again", "exit_code": 5})
    assert tr["status"] == "ERROR" and tr["num_failures"] == 2 and "boom again" in tr["error"]
    assert s.ok("GET", "/api/v1/experiments/1")["status"] == "TERMINATED"
    st, b, _ = s.post("/api/v1/trials/1/fail", {"exit_code": "x"})
    assert st == 400 and b["error"]["path"] == "exit_code"
    s.stop()


def test_asha_worked_example():
    s = Server()
    eid = s.ok("POST", "/api/v1/experiments",
               experiment(n=3, metric="score", mode="max", sched=ASHA), status=201)["id"]
    w = register(s, cpu=3)
    a, b, c = lease(s, w), lease(s, w), lease(s, w)

    def cutoff():
        sch = s.ok("GET", "/api/v1/experiments/%d" % eid)["scheduler"]
        return sch["brackets"][0]["milestones"][0]["cutoff"]

    assert report(s, a["id"], training_iteration=1, score=2) == "continue"
    assert report(s, b["id"], training_iteration=1, score=4) == "continue"
    assert cutoff() == 3.0
    assert report(s, c["id"], training_iteration=1, score=1) == "stop"
    assert cutoff() == 2.0
    tc = s.ok("GET", "/api/v1/trials/%d" % c["id"])
    assert tc["status"] == "TERMINATED" and tc["stopped_early"]
    # re-post: the stored decision
    assert report(s, c["id"], training_iteration=1, score=1) == "stop"
    # max_t reached: stop, not early
    assert report(s, a["id"], training_iteration=10, score=9) == "stop"
    ta = s.ok("GET", "/api/v1/trials/%d" % a["id"])
    assert ta["status"] == "TERMINATED" and not ta["stopped_early"]
    # a NaN (null) metric at a milestone stops the trial
    assert report(s, b["id"], training_iteration=2, score=None) == "stop"
    assert s.ok("GET", "/api/v1/experiments/%d" % eid)["status"] == "TERMINATED"
    s.stop()


def test_max_concurrent_and_pending_reason():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=3, max_concurrent_trials=1), status=201)
    # trials are made at lease time: the experiment says why none runs
    b = s.ok("GET", "/api/v1/experiments/1")
    assert b["pending_reason"] == "no worker is connected"
    w = register(s, cpu=8)
    assert lease(s, w)["id"] == 1
    assert lease(s, w) is None
    b = s.ok("GET", "/api/v1/experiments/1")
    assert b["pending_reason"] == "max_concurrent_trials (1) reached" and b["num_created"] == 1
    s.ok("POST", "/api/v1/trials/1/complete", {})
    assert lease(s, w)["id"] == 2
    # an experiment no worker can fit says so
    s.ok("POST", "/api/v1/experiments",
         experiment(name="big", n=1, resources_per_trial={"cpu": 64}), status=201)
    big = s.ok("GET", "/api/v1/experiments/2")
    assert big["pending_reason"] == "needs cpu 64 but the largest worker has 8", big
    # a lease that finds the room makes and leases the trial; an ended
    # experiment has no reason
    assert lease(s, register(s, cpu=64, name="big"))["experiment_id"] == 2
    assert s.ok("GET", "/api/v1/experiments/2")["pending_reason"] is None
    s.stop()


def test_best_scopes():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=3), status=201)
    w = register(s, cpu=3)
    for _ in range(3):
        lease(s, w)
    series = {1: [5, 1, 4], 2: [3, 3, 3], 3: [2, 9, float("nan")]}
    for tid, vals in series.items():
        for i, v in enumerate(vals):
            report(s, tid, training_iteration=i + 1, loss=None if math.isnan(v) else v,
                   acc=-v if not math.isnan(v) else -100)
    def best(q=""):
        return s.ok("GET", "/api/v1/experiments/1/best" + q)
    assert best()["trial_id"] == 2 and best()["value"] == 3  # last; trial 3's last is NaN
    assert best("?scope=all")["trial_id"] == 1 and best("?scope=all")["value"] == 1
    assert best("?scope=avg")["trial_id"] == 2
    assert best("?scope=last&mode=max")["trial_id"] == 1
    # another metric: read from the store
    b = best("?metric=acc&mode=max&scope=all")
    assert b["trial_id"] == 1 and b["value"] == -1 and b["metric"] == "acc"
    st, b, _ = s.get("/api/v1/experiments/1/best?metric=nothing")
    assert st == 404 and b["error"]["code"] == "no_result" and "nothing" in b["error"]["message"]
    st, b, _ = s.get("/api/v1/experiments/1/best?scope=median")
    assert st == 400 and b["error"]["path"] == "scope"
    assert s.ok("GET", "/api/v1/experiments/1")["best"] == {"trial_id": 2, "value": 3}
    # results with more keys than the in-memory key table: read from SQLite
    s.ok("POST", "/api/v1/experiments", experiment(name="wide", n=2), status=201)
    w2 = register(s, cpu=2)
    t4, t5 = lease(s, w2), lease(s, w2)
    for t, base in ((t4, 1.0), (t5, 2.0)):
        wide = {"training_iteration": 1, "loss": base}
        wide.update({"k%02d" % i: base + i for i in range(40)})
        report(s, t["id"], **wide)
    b = s.ok("GET", "/api/v1/experiments/2/best?metric=k39&mode=max")
    assert b["trial_id"] == t5["id"] and b["value"] == 41.0, b
    b = s.ok("GET", "/api/v1/experiments/2/best?metric=k05")
    assert b["trial_id"] == t4["id"] and b["value"] == 6.0, b
    s.stop()


def test_cancel():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=3), status=201)
    w = register(s)
    t = lease(s, w)
    e = s.ok("POST", "/api/v1/experiments/1/cancel")
    # the one trial made is ended; the two never made never will be
    assert e["status"] == "CANCELLED" and e["counts"]["TERMINATED"] == 1
    assert e["num_created"] == 1 and e["num_trials"] == 3
    assert report(s, t["id"], training_iteration=1, loss=1) == "stop"
    assert heartbeat(s, w, [(t["id"], t["attempt"])]) == [(t["id"], t["attempt"], "cancelled")]
    assert lease(s, w) is None
    st, b, _ = s.post("/api/v1/experiments/1/cancel")
    assert st == 409
    s.stop()


def test_checkpoint_and_logs():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    w = register(s)
    t = lease(s, w)
    data = os.urandom(70000)
    crc = "%08x" % (zlib.crc32(data) & 0xffffffff)
    path = "/api/v1/trials/%d/checkpoint" % t["id"]
    for i in (1, 2, 3):  # a checkpoint is never past the stored results
        report(s, t["id"], training_iteration=i, loss=1.0)
    st, b, _ = s.request("GET", path)
    assert st == 404
    st, b, _ = s.request("PUT", path, data, {"X-Ctune-Iteration": "3", "X-Ctune-Crc32": "%08x" % ((int(crc, 16) + 1) & 0xffffffff)})
    assert st == 400 and b["error"]["code"] == "bad_crc"
    st, b, _ = s.request("GET", path)
    assert st == 404  # the corrupt upload changed nothing
    st, b, _ = s.request("PUT", path, data, {"X-Ctune-Iteration": "3"})
    assert st == 400 and b["error"]["path"] == "X-Ctune-Crc32"
    s.ok("PUT", path, data, headers={"X-Ctune-Iteration": "3", "X-Ctune-Crc32": crc})
    st, body, h = s.request("GET", path, raw=True)
    assert st == 200 and body == data and h["x-ctune-iteration"] == "3" and h["x-ctune-crc32"] == crc
    s.ok("PUT", "/api/v1/trials/1/logs", b"bin\xff\x00ary\n", headers={"Content-Type": "text/plain"})
    assert s.ok("GET", "/api/v1/trials/1/logs") == {"trial_id": 1, "log": "bin??ary\n"}
    s.ok("PUT", "/api/v1/trials/1/logs", b"line 1\nline 2\n", headers={"Content-Type": "text/plain"})
    assert s.ok("GET", "/api/v1/trials/1/logs") == {"trial_id": 1, "log": "line 1\nline 2\n"}
    st, b, _ = s.request("PUT", "/api/v1/trials/1/logs", b"x" * (256 * 1024 + 1))
    assert st == 413
    s.stop()
    # the checkpoint cap
    s = Server(args=["--max-checkpoint-mb", "1"])
    s.ok("POST", "/api/v1/experiments", experiment(n=1), status=201)
    lease(s, register(s))
    big = b"z" * (1024 * 1024 + 1)
    st, b, _ = s.request("PUT", "/api/v1/trials/1/checkpoint", big,
                         {"X-Ctune-Iteration": "1", "X-Ctune-Crc32": "%08x" % zlib.crc32(big)})
    assert st == 413 and b["error"]["code"] == "payload_too_large"
    assert s.request("GET", "/api/v1/trials/1/checkpoint")[0] == 404
    s.stop()


def test_incremental_endpoints():
    s = Server()
    s.ok("POST", "/api/v1/experiments", experiment(n=3), status=201)
    w = register(s, cpu=3)
    first = s.ok("GET", "/api/v1/experiments/1/trials")
    seq0 = first["last_seq"]
    assert len(first["trials"]) == 0  # made at lease time
    assert s.ok("GET", "/api/v1/experiments/1/trials?since=%d" % seq0)["trials"] == []
    lease(s, w)
    ch = s.ok("GET", "/api/v1/experiments/1/trials?since=%d" % seq0)
    assert [t["id"] for t in ch["trials"]] == [1] and ch["last_seq"] > seq0
    report(s, 1, training_iteration=1, loss=1.0)
    report(s, 1, training_iteration=2, loss=0.5)
    r = s.ok("GET", "/api/v1/experiments/1/results?since=0")
    assert [x["result"]["training_iteration"] for x in r["results"]] == [1, 2]
    assert r["results"][0]["trial_id"] == 1 and r["last_seq"] == r["results"][1]["seq"]
    r1 = s.ok("GET", "/api/v1/experiments/1/results?since=0&limit=1")
    assert len(r1["results"]) == 1 and r1["last_seq"] == r1["results"][0]["seq"]
    r2 = s.ok("GET", "/api/v1/experiments/1/results?since=%d" % r1["last_seq"])
    assert [x["result"]["training_iteration"] for x in r2["results"]] == [2]
    assert s.ok("GET", "/api/v1/experiments/1/results?since=%d" % r["last_seq"])["results"] == []
    ch2 = s.ok("GET", "/api/v1/experiments/1/trials?since=%d" % ch["last_seq"])
    assert [t["id"] for t in ch2["trials"]] == [1]
    lease(s, w)
    lease(s, w)
    page = s.ok("GET", "/api/v1/experiments/1/trials?limit=2&offset=1")
    assert [t["id"] for t in page["trials"]] == [2, 3]
    st, b, _ = s.get("/api/v1/experiments/1/trials?limit=zero")
    assert st == 400 and b["error"]["path"] == "limit"
    s.stop()


def test_static_files_and_traversal():
    web = tmpdir()
    vendor = tmpdir()
    os.makedirs(os.path.join(web, "js"))
    os.makedirs(os.path.join(vendor, "chart.js"))
    open(os.path.join(web, "index.html"), "w").write("<!doctype html><title>ctune</title>")
    open(os.path.join(web, "js", "app.js"), "w").write("export const x = 1;")
    open(os.path.join(web, "style.css"), "w").write("body{}")
    open(os.path.join(vendor, "chart.js", "chart.umd.js"), "w").write("/* chart */")
    secret = os.path.join(os.path.dirname(web), "secret.txt")
    open(secret, "w").write("secret")
    try:
        s = Server(args=["--web-dir", web, "--vendor-dir", vendor])
        st, body, h = s.get("/", raw=True)
        assert st == 200 and b"ctune" in body and h["content-type"].startswith("text/html")
        assert "etag" in h and "last-modified" in h
        st, body, h2 = s.get("/", raw=True, headers={"If-None-Match": h["etag"]})
        assert st == 304
        st, body, h = s.get("/js/app.js", raw=True)
        assert st == 200 and h["content-type"].startswith("text/javascript")
        st, body, h = s.get("/style.css", raw=True)
        assert h["content-type"].startswith("text/css")
        st, body, h = s.get("/vendor/chart.js/chart.umd.js", raw=True)
        assert st == 200 and body == b"/* chart */"
        st, b, h = s.get("/missing.js")
        assert st == 404 and b["error"]["code"] == "not_found"
        for evil in ["/../secret.txt", "/js/../../secret.txt", "/%2e%2e/secret.txt",
                     "/vendor/../../secret.txt", "/vendor/%2e%2e/%2e%2e/secret.txt", "/js//app.js"]:
            st, b, _ = s.get(evil)
            assert st in (400, 404), (evil, st)
            assert b"secret" != b and "error" in b, (evil, b)
        s.stop()
    finally:
        os.unlink(secret)


def test_metrics_and_healthz():
    s = Server()
    assert s.ok("GET", "/healthz")["status"] == "ok"
    s.ok("POST", "/api/v1/experiments", experiment(n=2), status=201)
    w = register(s)
    lease(s, w)
    report(s, 1, training_iteration=1, loss=1)
    st, body, h = s.get("/metrics", raw=True)
    text = body.decode()
    assert st == 200 and h["content-type"].startswith("text/plain")
    # the second trial is made at its lease: nothing PENDING yet
    assert 'ctune_trials{status="PENDING"} 0' in text and 'ctune_trials{status="RUNNING"} 1' in text
    assert "ctune_results_received_total 1" in text
    assert 'ctune_http_request_duration_seconds_bucket{le="+Inf"}' in text
    s.stop()


def test_spot_label_kept_across_a_restart():
    # A worker registers once; after a server restart it only heartbeats, so
    # its spot label must come back from SQLite (docs/scheduling.md#spot-workers).
    s = Server()
    spot = s.ok("POST", "/api/v1/workers", {"name": "spot", "resources": {"cpu": 1},
                                            "labels": {"spot": True}}, status=201)["id"]
    ondemand = register(s, cpu=1, name="ondemand")
    s.restart()
    labels = {w["id"]: w["labels"]["spot"] for w in s.ok("GET", "/api/v1/workers")["workers"]}
    assert labels == {spot: True, ondemand: False}, labels
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            r.run(fn)
    r.done()
