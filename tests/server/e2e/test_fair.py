"""Fair share (docs/protocol.md#fair-share): a lease goes to
the running experiment with the smallest running/priority among those with
work to give and room (ties: the older). Two experiments submitted one after
the other share a worker from the moment the second arrives; with priority
1:2 the share is 1:2; an experiment whose trials need what the worker lacks
does not block the others; an ended experiment leaves the live list; a
restart rebuilds it (kill -9)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ctune_e2e import Runner, Server, experiment, lease, register  # noqa: E402


def submit(s, name, n, **extra):
    return s.ok("POST", "/api/v1/experiments", experiment(name=name, n=n, **extra),
                status=201)["id"]


def complete(s, tid):
    s.ok("POST", "/api/v1/trials/%d/complete" % tid, {})


def rotate(s, w, running, steps):
    """Completes the oldest running trial and leases one, `steps` times;
    returns the experiment ids leased, in order, and after each lease the
    number of running trials per experiment."""
    order, splits = [], []
    for _ in range(steps):
        complete(s, running.pop(0)["id"])
        t = lease(s, w)
        assert t is not None, "no lease with work left"
        running.append(t)
        order.append(t["experiment_id"])
        split = {}
        for r in running:
            split[r["experiment_id"]] = split.get(r["experiment_id"], 0) + 1
        splits.append(split)
    return order, splits


def test_second_experiment_shares_at_once():
    """A first takes both slots; from B's arrival on, leases alternate."""
    s = Server()
    a = submit(s, "a", 6)
    w = register(s, cpu=2)
    running = [lease(s, w), lease(s, w)]
    assert [t["experiment_id"] for t in running] == [a, a]
    b = submit(s, "b", 6)
    order, splits = rotate(s, w, running, 8)
    # Strict FIFO would give a, a, a, a and only then b.
    assert order == [b, a] * 4, order
    assert all(sp == {a: 1, b: 1} for sp in splits), splits
    s.stop()


def test_priority_two_to_one():
    """A (priority 1) holds three slots; B arrives with priority 2: from the
    second freed slot on, B holds 2 and A 1 (equal priorities would keep A
    at 2, the older winning each tie). Stored: the same after a kill -9."""
    s = Server()
    a = submit(s, "a", 24)
    w = register(s, cpu=3)
    running = [lease(s, w) for _ in range(3)]
    b = submit(s, "b", 24)
    body = s.ok("PATCH", "/api/v1/experiments/%d" % b, {"priority": 2})
    assert body["priority"] == 2, body
    order, splits = rotate(s, w, running, 9)
    assert splits[0] == {a: 2, b: 1}, splits
    assert all(sp == {a: 1, b: 2} for sp in splits[1:]), splits
    s.kill()
    s.start()
    order, splits = rotate(s, w, running, 6)
    assert all(sp == {a: 1, b: 2} for sp in splits), splits
    assert order.count(b) == 4, order
    s.stop()


def test_unfit_and_ended_experiments():
    """An older experiment whose trials need a GPU does not block a CPU
    worker; a cancelled one leaves the live list; a kill -9 restart rebuilds
    the list from the RUNNING rows and the share goes on."""
    s = Server()
    g = submit(s, "gpu", 4, resources_per_trial={"cpu": 1, "gpu": 1})
    a = submit(s, "a", 8)
    b = submit(s, "b", 8)
    c = submit(s, "c", 8)
    w = register(s, cpu=2)
    running = [lease(s, w), lease(s, w)]
    assert [t["experiment_id"] for t in running] == [a, b], running
    s.ok("POST", "/api/v1/experiments/%d/cancel" % c)
    order, splits = rotate(s, w, running, 4)
    assert set(order) == {a, b} and all(sp == {a: 1, b: 1} for sp in splits), (order, splits)
    s.kill()
    s.start()
    # After the restart the leases were kept: complete the oldest, lease.
    order, splits = rotate(s, w, running, 4)
    assert set(order) == {a, b} and all(sp == {a: 1, b: 1} for sp in splits), (order, splits)
    # The GPU experiment is served by a GPU worker, even though a and b run.
    wg = register(s, cpu=1, gpu=1, name="g")
    t = lease(s, wg)
    assert t is not None and t["experiment_id"] == g, t
    e = s.ok("GET", "/api/v1/experiments/%d" % c)
    assert e["status"] == "CANCELLED"
    s.stop()


if __name__ == "__main__":
    r = Runner()
    for fn in (test_second_experiment_shares_at_once, test_priority_two_to_one,
               test_unfit_and_ended_experiments):
        r.run(fn)
    r.done()
