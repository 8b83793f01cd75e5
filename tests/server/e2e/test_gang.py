#!/usr/bin/env python3
"""On the real daemon, the worker protocol of gang trials
(docs/protocol.md#gang-trials): member leases with torchrun's ranks, the
rendezvous rank 0's worker reports before the other members start, member
heartbeats, logs per rank fenced by attempt and rank, and a member's failure
ending every member's attempt as one failure. The placement rules themselves
are tests/server/state/test_state_gang.c's."""
from ctune_e2e import Server, Runner, experiment, register, lease


def gang_of(trial):
    g = trial["gang"]
    return (g["rank"], g["world_size"], g["node_rank"], g["num_nodes"], g["local_rank"],
            g["local_world_size"], g["master_addr"], g["master_port"])


def beat(s, wid, running):
    b = s.ok("POST", "/api/v1/workers/%d/heartbeat" % wid, {"running": running})
    return sorted((x["id"], x.get("rank", 0), x["reason"]) for x in b["stop"])


def test_gang_members_rendezvous_logs_and_one_failure():
    s = Server()
    s.ok("POST", "/api/v1/experiments",
         experiment(n=1, max_failures=2, resources_per_trial={"cpu": 1, "num_workers": 3}))
    # Two workers of 2 CPUs: the three members cannot share one.
    w1, w2 = register(s, cpu=2, name="a"), register(s, cpu=2, name="b")
    t0 = lease(s, w1)
    tid = t0["id"]
    assert gang_of(t0) == (0, 3, 0, 2, 0, 2, None, None), t0["gang"]
    # The other members wait for the rendezvous; nothing else is leased.
    assert lease(s, w2) is None and lease(s, w1) is None
    rdv = "/api/v1/trials/%d/rendezvous" % tid
    st, b, _ = s.post(rdv, {"master_addr": "10.9.0.1", "master_port": 29500}, lease="2:1")
    assert st == 409 and b["error"]["code"] == "not_leased", (st, b)
    st, b, _ = s.post(rdv, {"master_addr": "10.9.0.1", "master_port": 0}, lease="1:1")
    assert st == 400, (st, b)
    s.ok("POST", rdv, {"master_addr": "10.9.0.1", "master_port": 29500}, lease="1:1")
    st, b, _ = s.post(rdv, {"master_addr": "10.9.0.1", "master_port": 29501}, lease="1:1")
    assert st == 409 and b["error"]["code"] == "rendezvous_taken", (st, b)
    t2 = lease(s, w2)
    assert gang_of(t2) == (2, 3, 1, 2, 0, 1, "10.9.0.1", 29500), t2["gang"]
    t1 = lease(s, w1)
    assert gang_of(t1) == (1, 3, 0, 2, 1, 2, "10.9.0.1", 29500), t1["gang"]
    # Heartbeats list each member with its rank: all current.
    assert beat(s, w1, [{"id": tid, "attempt": 1}, {"id": tid, "attempt": 1, "rank": 1}]) == []
    assert beat(s, w2, [{"id": tid, "attempt": 1, "rank": 2}]) == []
    # The worker list shows the trial under every worker holding a member,
    # each member with its rank and what it is charged.
    ws = {w["id"]: w for w in s.ok("GET", "/api/v1/workers")["workers"]}
    assert ws[w1]["running_trials"] == [tid] and ws[w2]["running_trials"] == [tid], ws
    assert [(m["trial_id"], m["rank"], m["cpu"]) for m in ws[w1]["gang_members"]] == [
        (tid, 0, 1), (tid, 1, 1)], ws[w1]
    assert [(m["trial_id"], m["rank"], m["cpu"]) for m in ws[w2]["gang_members"]] == [
        (tid, 2, 1)], ws[w2]
    assert ws[w1]["free"]["cpu"] == 0 and ws[w2]["free"]["cpu"] == 1, ws
    st, b, _ = s.post("/api/v1/workers/%d/heartbeat" % w2,
                      {"running": [{"id": tid, "attempt": 1, "rank": 64}]})
    assert st == 400 and b["error"]["path"] == "running[0].rank", (st, b)
    # Logs per rank, fenced by the member's own lease and rank.
    logs = "/api/v1/trials/%d/logs" % tid
    assert s.request("PUT", logs, b"rank zero\n", lease="1:1")[0] == 200
    assert s.request("PUT", logs, b"rank two\n", lease="2:1", headers={"X-Ctune-Rank": "2"})[0] == 200
    st, b, _ = s.request("PUT", logs, b"not mine\n", lease="2:1", headers={"X-Ctune-Rank": "1"})
    assert st == 409 and b["error"]["code"] == "not_leased", (st, b)
    st, b, _ = s.request("PUT", logs, b"x", lease="2:1", headers={"X-Ctune-Rank": "two"})
    assert st == 400 and b["error"]["path"] == "X-Ctune-Rank", (st, b)
    text = s.ok("GET", logs)["log"]
    assert "rank zero" in text and "--- attempt 1 rank 2 (worker %d) ---\nrank two" % w2 in text, text
    # Results come from rank 0's lease; a member's lease is not the trial's.
    assert s.post("/api/v1/trials/%d/results" % tid, {"training_iteration": 1, "loss": 0.5},
                  lease="1:1")[0] == 200
    st, b, _ = s.post("/api/v1/trials/%d/results" % tid, {"training_iteration": 2, "loss": 0.4},
                      lease="2:1")
    assert st == 409, (st, b)
    # A member fails: one failure, every member's attempt ends.
    fail = "/api/v1/trials/%d/fail" % tid
    # (Not counted at all when the attempt had reported a result first:
    # its failure's attribution is unknown, docs/scheduling.md#failures-told-apart.)
    tr = s.ok("POST", fail, {"error": "exit 1"}, lease="2:1", headers={"X-Ctune-Rank": "2"})
    nfail = tr["num_failures"]
    assert tr["status"] == "PENDING" and nfail <= 1 and "rank 2" in tr["error"], tr
    tr = s.ok("POST", fail, {"error": "exit 1"}, lease="1:1", headers={"X-Ctune-Rank": "1"})
    assert tr["num_failures"] == nfail and "rank 2" in tr["error"], tr
    assert beat(s, w1, [{"id": tid, "attempt": 1}, {"id": tid, "attempt": 1, "rank": 1}]) == [
        (tid, 0, "not_leased"), (tid, 1, "not_leased")]
    workers = s.ok("GET", "/api/v1/workers")["workers"]
    assert all(w["free"]["cpu"] == 2 and not w["running_trials"] for w in workers), workers
    # The next lease places the whole gang again, as attempt 2.
    assert lease(s, w2)["gang"]["rank"] == 0
    s.ok("POST", rdv, {"master_addr": "10.9.0.2", "master_port": 29500}, lease="2:2")
    assert lease(s, w1)["gang"]["rank"] == 2
    # A member with no room on its worker gives its lease back: the attempt
    # of all ends at once, no failure counted; another rank's is refused.
    rel = "/api/v1/trials/%d/release" % tid
    st, b, _ = s.post(rel, {}, lease="1:2", headers={"X-Ctune-Rank": "1"})
    assert st == 409 and b["error"]["code"] == "not_leased", (st, b)
    tr = s.ok("POST", rel, {}, lease="1:2", headers={"X-Ctune-Rank": "2"})
    assert tr["status"] == "PENDING" and tr["num_failures"] == nfail, tr
    assert tr["attempt"] == 2 and "rank 2" in tr["error"], tr
    workers = s.ok("GET", "/api/v1/workers")["workers"]
    assert all(w["free"]["cpu"] == 2 and not w["running_trials"] and not w["gang_members"]
               for w in workers), workers
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_gang_members_rendezvous_logs_and_one_failure)
    r.done()
