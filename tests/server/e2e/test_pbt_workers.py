"""PBT with a real ctune-worker: 4 trials of a command trainable
that keeps its iteration, lr and its lineage (the trials whose checkpoint it
continues) in its checkpoint. An exploited trial resumes from its donor's
checkpoint: its next iteration is the donor checkpoint's + 1 (not 1), the
checkpoint it read names the donor, its lr is the explored one, and GET
trial shows the exploit in "events".

The better the lr, the SLOWER the trainable runs: the donors (the best
trials) are behind the trials that clone them, so an exploited trial goes
back to an older iteration and reports iterations it had already reported
(its next generation: new results, not replays of its old ones).
The test requires at least one such exploit.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import BIN_DIR, Runner, Server, tmpdir  # noqa: E402
from test_pbt import pbt_cfg  # noqa: E402


TRAINABLE = r"""
import json, math, os, sys, time
cfg = json.loads(os.environ["CTUNE_CONFIG"])
tid = int(os.environ["CTUNE_TRIAL_ID"])
ck = os.path.join(os.environ["CTUNE_CHECKPOINT_DIR"], "checkpoint.bin")
state = {"iteration": 0, "lr": cfg["lr"], "lineage": [tid]}
came_from = None
if os.environ.get("CTUNE_RESUME") == "1":
    with open(ck) as f:
        state = json.load(f)
    came_from = {"trial": state["lineage"][-1], "iteration": state["iteration"]}
    if state["lineage"][-1] != tid:
        state["lineage"].append(tid)
acc = 0.0
for it in range(state["iteration"] + 1, 11):
    # the better the lr, the slower: donors are behind the trials that
    # clone them
    time.sleep(max(0.05, 0.3 - 0.08 * abs(math.log10(cfg["lr"]) + 2.0)))
    acc = -abs(math.log10(cfg["lr"]) + 2.0) + 0.01 * it
    r = {"training_iteration": it, "acc": acc, "lr": cfg["lr"]}
    if came_from:
        r["resumed_from_trial"] = came_from["trial"]
        r["resumed_from_iteration"] = came_from["iteration"]
        came_from = None
    state.update(iteration=it, lr=cfg["lr"])
    with open(ck + ".tmp", "w") as f:
        json.dump(state, f)
    os.rename(ck + ".tmp", ck)
    print(json.dumps(r), flush=True)
"""


def test_pbt_real_workers():
    s = Server()
    d = tmpdir()
    script = os.path.join(d, "trainable.py")
    with open(script, "w") as f:
        f.write(TRAINABLE)
    eid = s.ok("POST", "/api/v1/experiments", pbt_cfg(script), status=201)["id"]
    log = os.path.join(d, "w.log")
    w = subprocess.Popen(
        [os.path.join(BIN_DIR, "ctune-worker"), "--server", "http://%s:%d" % (s.host, s.port),
         "--cpus", "2", "--memory-mb", "1024", "--token-file", s.db + ".tokens", "--name", "w",
         "--work-dir", os.path.join(d, "w"), "--poll-ms", "100", "--no-cgroup"],
        stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            e = s.ok("GET", "/api/v1/experiments/%d" % eid)
            if e["status"] != "RUNNING":
                break
            time.sleep(0.2)
        wlog = open(log, errors="replace").read()[-3000:]
        assert e["status"] == "TERMINATED", (e, wlog)
        trials = s.ok("GET", "/api/v1/experiments/%d/trials" % eid)["trials"]
        assert [t["status"] for t in trials] == ["TERMINATED"] * 4, (trials, wlog)
        exploits = behind = 0
        for t in trials:
            tr = s.ok("GET", "/api/v1/trials/%d" % t["id"])
            res = s.ok("GET", "/api/v1/trials/%d/results" % t["id"])["results"]
            evs = [x for x in tr["events"] if x["kind"] == "exploited"]
            resumed = [r for r in res if "resumed_from_trial" in r]
            # every exploit shows as one resume from the donor's checkpoint,
            # except one that came when the donor's checkpoint was already at
            # the last iteration (10): the trial resumes from it with nothing
            # left to run, so it reports nothing more and ends with the new
            # config but the old config's last result. Only the last exploit
            # can be that one; which exploits happen depends on the order
            # the results arrive in.
            dangling = len(evs) - len(resumed)
            assert dangling in (0, 1), (tr["events"], res)
            if dangling:
                last = evs.pop()
                exploits += 1
                assert tr["config"]["lr"] == last["data"]["new_config"]["lr"], (tr, last)
                assert res[-1]["lr"] == last["data"]["old_config"]["lr"], (res[-1], last)
            else:
                assert tr["config"]["lr"] == res[-1]["lr"], (tr["config"], res[-1])
            for ev, r in zip(evs, resumed):
                exploits += 1
                donor = ev["data"]["donor"]
                assert ev["reason"].startswith("exploited trial %d at t=" % donor), ev
                assert r["resumed_from_trial"] == donor, (ev, r)
                # iterations continue from the donor's checkpoint
                assert r["training_iteration"] == r["resumed_from_iteration"] + 1 > 1, r
                assert r["lr"] == ev["data"]["new_config"]["lr"], (ev, r)
                if r["resumed_from_iteration"] < ev["data"]["t"]:
                    behind += 1  # it reports iterations it had reported before
            assert res[-1]["training_iteration"] == 10, res
        assert exploits >= 1, "no trial was exploited"
        assert behind >= 1, "no trial was exploited from a donor behind it"
        st = s.ok("GET", "/api/v1/experiments/%d" % eid)["scheduler"]
        assert st["type"] == "pbt" and st["perturbations"] == exploits, (st, [s.ok("GET", "/api/v1/trials/%d" % t["id"])["events"] for t in trials])
    finally:
        w.terminate()
        try:
            w.wait(timeout=20)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_pbt_real_workers)
    r.done()
