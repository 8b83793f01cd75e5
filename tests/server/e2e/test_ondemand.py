"""Trials created on demand (ARCHITECTURE.md#trials-made-on-demand): two
experiments leased in turn get interleaved trial ids and every read (trials,
best, cancel, restart) still works; a database whose trials were all made at
submission (older versions) loads and runs; a TPE experiment killed with -9
and restarted suggests what an uninterrupted server suggests for the same
observations; points_to_evaluate come first; warm_start's trials are stored
in the new experiment's config; a dry run says what is decided later."""
import json
import math
import os
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import BIN_DIR, Runner, Server, experiment, lease, register, report, tmpdir  # noqa: E402

TRAIN = {"type": "command", "argv": ["true"]}


def complete(s, tid):
    return s.ok("POST", "/api/v1/trials/%d/complete" % tid, {})


def trials_of(s, eid):
    return s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]


def test_interleaved_ids_and_every_read():
    s = Server()
    a = s.ok("POST", "/api/v1/experiments", experiment(name="a", n=3, max_concurrent_trials=1),
             status=201)["id"]
    b = s.ok("POST", "/api/v1/experiments", experiment(name="b", n=3, max_concurrent_trials=1),
             status=201)["id"]
    dry_a = s.ok("POST", "/api/v1/experiments?dry_run=true", experiment(name="a", n=3))["trials"]
    w = register(s, cpu=8)
    got = []
    for k in range(2):
        ta, tb = lease(s, w), lease(s, w)
        assert (ta["experiment_id"], tb["experiment_id"]) == (a, b)
        got += [ta["id"], tb["id"]]
        report(s, ta["id"], training_iteration=1, loss=1.0 - k)
        report(s, tb["id"], training_iteration=1, loss=5.0)
        complete(s, ta["id"])
        complete(s, tb["id"])
    assert got == [1, 2, 3, 4]
    ids_a = [t["id"] for t in trials_of(s, a)]
    assert ids_a == [1, 3], ids_a
    assert [t["name"] for t in trials_of(s, a)] == ["a_00000", "a_00001"]
    assert [t["config"] for t in trials_of(s, a)] == dry_a[:2]
    best = s.ok("GET", "/api/v1/experiments/%d/best" % a)
    assert best["trial_id"] == 3 and best["value"] == 0.0
    assert s.ok("GET", "/api/v1/experiments/%d/best" % b)["trial"]["experiment_id"] == b
    # b: its third trial runs, then b is cancelled; a goes on after a restart
    tb = lease(s, w)
    assert tb["experiment_id"] == a and tb["id"] == 5  # a first, in id order
    tb2 = lease(s, w)
    assert tb2["experiment_id"] == b and tb2["id"] == 6
    e = s.ok("POST", "/api/v1/experiments/%d/cancel" % b)
    assert e["status"] == "CANCELLED" and e["num_created"] == 3 and e["counts"]["TERMINATED"] == 3
    s.kill()
    s.start()
    ea = s.ok("GET", "/api/v1/experiments/%d" % a)
    assert ea["num_created"] == 3 and ea["counts"]["RUNNING"] == 1 and ea["status"] == "RUNNING"
    assert [t["id"] for t in trials_of(s, a)] == [1, 3, 5]
    assert [t["config"] for t in trials_of(s, a)] == dry_a
    assert s.ok("GET", "/api/v1/experiments/%d" % b)["status"] == "CANCELLED"
    s.leases[5] = "%d:1" % w
    report(s, 5, training_iteration=1, loss=3.0)
    complete(s, 5)
    ea = s.ok("GET", "/api/v1/experiments/%d" % a)
    assert ea["status"] == "TERMINATED" and ea["counts"]["TERMINATED"] == 3
    assert lease(s, w) is None
    s.stop()


def test_old_database_with_trials_made_at_submission():
    """Older versions stored every trial at submission: they load as made."""
    s = Server(args=["--no-auth"])
    cfg = experiment(name="old", n=3)
    dry = s.ok("POST", "/api/v1/experiments?dry_run=true", cfg)
    s.stop()
    c = sqlite3.connect(s.db)
    c.execute("INSERT INTO experiments(id,name,status,config,seed,created_at,updated_seq) "
              "VALUES(1,'old','RUNNING',?,7,1.0,1)", (json.dumps(cfg),))
    for i, conf in enumerate(dry["trials"]):
        c.execute("INSERT INTO trials(id,experiment_id,idx,name,status,stopped_early,config,"
                  "bracket,num_failures,attempt,created_at,updated_seq) "
                  "VALUES(?,1,?,?,'PENDING',0,?,0,0,0,1.0,?)",
                  (i + 1, i, "old_%05d" % i, json.dumps(conf), 2 + i))
    c.commit()
    c.close()
    s.start()
    e = s.ok("GET", "/api/v1/experiments/1")
    assert e["num_trials"] == 3 and e["num_created"] == 3 and e["counts"]["PENDING"] == 3
    w = register(s)
    for i in range(3):
        t = lease(s, w)
        assert t["id"] == i + 1 and t["config"] == dry["trials"][i]
        report(s, t["id"], training_iteration=1, loss=i)
        complete(s, t["id"])
    assert lease(s, w) is None
    # a new experiment's trials come after the old ids
    s.ok("POST", "/api/v1/experiments", experiment(name="new", n=1), status=201)
    assert lease(s, w)["id"] == 4
    assert s.ok("GET", "/api/v1/experiments/1")["status"] == "TERMINATED"
    s.stop()


def loss_of(cfg):
    return (cfg["x"] - 1.5) ** 2 + (0 if cfg["k"] == "b" else 2) + abs(math.log10(cfg["lr"]) + 2)


TPE_CFG = {"name": "tpe", "metric": "loss", "mode": "min", "num_samples": 9, "seed": 5,
           "max_concurrent_trials": 1,
           "search_alg": {"type": "tpe", "n_startup_trials": 4},
           "param_space": {"x": {"type": "uniform", "lower": -5, "upper": 5},
                           "k": {"type": "choice", "values": ["a", "b", "c"]},
                           "lr": {"type": "loguniform", "lower": 1e-4, "upper": 1}},
           "trainable": TRAIN}


def run_trials(s, w, n):
    """Leases n trials one after the other, each reports loss_of(config)."""
    out = []
    for _ in range(n):
        t = lease(s, w)
        report(s, t["id"], training_iteration=1, loss=loss_of(t["config"]))
        complete(s, t["id"])
        out.append(t["config"])
    return out


def test_tpe_restart_suggests_what_an_uninterrupted_server_does():
    # uninterrupted
    u = Server()
    dry = u.ok("POST", "/api/v1/experiments?dry_run=true", TPE_CFG)
    assert dry["search_alg"] == "tpe" and dry["decided_later"] == 5 and len(dry["trials"]) == 4
    u.ok("POST", "/api/v1/experiments", TPE_CFG, status=201)
    wu = register(u)
    ref = run_trials(u, wu, 9)
    assert ref[:4] == dry["trials"]
    u.stop()
    # the same, killed -9 after six trials (and one running)
    s = Server()
    s.ok("POST", "/api/v1/experiments", TPE_CFG, status=201)
    w = register(s)
    got = run_trials(s, w, 6)
    t = lease(s, w)
    got.append(t["config"])
    report(s, t["id"], training_iteration=1, loss=loss_of(t["config"]))
    s.kill()
    s.start()
    s.leases[t["id"]] = "%d:1" % w
    complete(s, t["id"])
    got += run_trials(s, w, 2)
    assert got == ref, (got, ref)
    # the later ones are the model's, not the random draws of the same seed
    rnd = dict(TPE_CFG, search_alg={"type": "random"})
    draws = s.ok("POST", "/api/v1/experiments?dry_run=true", rnd)["trials"]
    assert draws[:4] == ref[:4]
    assert all(c not in draws for c in ref[4:])
    e = s.ok("GET", "/api/v1/experiments/1")
    assert e["status"] == "TERMINATED" and e["search_alg"] == "tpe" and e["num_created"] == 9
    s.stop()


def test_points_to_evaluate_and_warm_start():
    s = Server()
    cfg = dict(TPE_CFG, points_to_evaluate=[{"x": 1.5, "k": "b"}, {"lr": 0.01}])
    st, b, _ = s.post("/api/v1/experiments", dict(cfg, points_to_evaluate=[{"y": 1}]))
    assert st == 400 and b["error"]["path"] == "points_to_evaluate[0].y", b
    eid = s.ok("POST", "/api/v1/experiments", cfg, status=201)["id"]
    w = register(s)
    first = run_trials(s, w, 5)
    rnd = s.ok("POST", "/api/v1/experiments?dry_run=true",
               dict(TPE_CFG, search_alg={"type": "random"}))["trials"]
    assert first[0] == dict(rnd[0], x=1.5, k="b") and first[1] == dict(rnd[1], lr=0.01)
    assert first[2:4] == rnd[2:4]
    # a failed trial too: warm start keeps it, with no value
    t = lease(s, w)
    s.ok("POST", "/api/v1/trials/%d/fail" % t["id"], {"error": "boom"})
    s.ok("POST", "/api/v1/experiments/%d/cancel" % eid)
    st, b, _ = s.post("/api/v1/experiments", dict(TPE_CFG, warm_start={"experiment": 9}))
    assert st == 400 and b["error"]["path"] == "warm_start.experiment", b
    st, b, _ = s.post("/api/v1/experiments", dict(TPE_CFG, search_alg={"type": "random"},
                                                  warm_start={"experiment": eid}))
    assert st == 400 and b["error"]["path"] == "warm_start", b
    warm = s.ok("POST", "/api/v1/experiments", dict(TPE_CFG, warm_start={"experiment": eid}),
                status=201)["id"]
    stored = s.ok("GET", "/api/v1/experiments/%d" % warm)["config"]["warm_start"]
    assert stored["experiment"] == eid and len(stored["trials"]) == 6
    assert [x["config"] for x in stored["trials"][:5]] == first
    assert [x["value"] for x in stored["trials"]] == [loss_of(c) for c in first] + [None]
    # five finished with a value >= n_startup_trials 4: the first is the model's
    t = lease(s, w)
    assert t["experiment_id"] == warm and t["config"] != rnd[0]
    # a restart rebuilds it from the stored config alone (the source
    # experiment's trials are not read again): the same second config
    t2 = lease(s, w, free={"cpu": 4})
    assert t2 is None  # max_concurrent_trials 1
    complete(s, t["id"])
    nxt = lease(s, w)["config"]
    s.kill()
    s.start()
    s.leases.clear()
    # the leased trial goes back to PENDING when its lease expires; compare
    # with the config the restarted server holds for it
    tr = trials_of(s, warm)
    assert tr[1]["config"] == nxt and tr[0]["config"] == t["config"]
    s.ok("POST", "/api/v1/experiments/%d/cancel" % warm)
    s.stop()


def test_several_objectives_tpe():
    """tpe with two objectives: accepted with the defaults for several
    written in, a point to evaluate first, the model's configs after the
    startup, and a warm start that stores every objective's value."""
    s = Server()
    cfg = dict(TPE_CFG, metric=["loss", "lat"], mode=["min", "max"], num_samples=6,
               points_to_evaluate=[{"x": 1.5, "k": "b"}])
    eid = s.ok("POST", "/api/v1/experiments", cfg, status=201)["id"]
    sa = s.ok("GET", "/api/v1/experiments/%d" % eid)["config"]["search_alg"]
    assert sa["gamma_max"] == 100000 and sa["below_weights"] == "hypervolume", sa
    w = register(s)
    got = []
    for _ in range(5):
        t = lease(s, w)
        report(s, t["id"], training_iteration=1, loss=loss_of(t["config"]), lat=t["config"]["x"])
        complete(s, t["id"])
        got.append(t["config"])
    rnd = s.ok("POST", "/api/v1/experiments?dry_run=true",
               dict(cfg, search_alg={"type": "random"}))["trials"]
    assert got[0] == dict(rnd[0], x=1.5, k="b") and got[1:4] == rnd[1:4]
    assert got[4] != rnd[4]  # four finished with both objectives: the model's
    s.ok("POST", "/api/v1/experiments/%d/cancel" % eid)
    warm = s.ok("POST", "/api/v1/experiments",
                dict(cfg, points_to_evaluate=[], warm_start={"experiment": eid}), status=201)["id"]
    stored = s.ok("GET", "/api/v1/experiments/%d" % warm)["config"]["warm_start"]["trials"]
    assert [x["values"] for x in stored] == [[loss_of(c), c["x"]] for c in got], stored
    assert lease(s, w)["config"] != rnd[0]
    s.stop()


def test_cli_sample_says_what_is_decided_later():
    """ctune sample (the server's own code, no server) lists the random
    startup of a tpe search and says how many trials come later."""
    s = Server()
    path = os.path.join(tmpdir(), "tpe.json")
    with open(path, "w") as f:
        json.dump(TPE_CFG, f)
    exe = os.path.join(BIN_DIR, "ctune")
    out = subprocess.run([exe, "sample", path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
    assert ("would create 9 trials (nothing stored); 4 known in advance, 5 decided later by "
            "tpe from the results so far:") in out.stdout, out.stdout
    assert out.stdout.count("x=") == 4, out.stdout
    js = subprocess.run([exe, "sample", path, "--json"], capture_output=True, text=True,
                        timeout=30)
    local = json.loads(js.stdout)
    remote = s.ok("POST", "/api/v1/experiments?dry_run=true", TPE_CFG)
    assert local == remote, (local, remote)
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for fn in (test_interleaved_ids_and_every_read, test_old_database_with_trials_made_at_submission,
               test_tpe_restart_suggests_what_an_uninterrupted_server_does,
               test_points_to_evaluate_and_warm_start, test_several_objectives_tpe,
               test_cli_sample_says_what_is_decided_later):
        r.run(fn)
    r.done()
