#!/usr/bin/env python3
"""ctune-worker through faults: kill -9 of the server mid-experiment (results
pile up in the worker's on-disk outbox while trials keep running), restart
on the same database and port, the workers reconnect and the experiment
completes with every printed result stored exactly once; then SIGTERM drains
a worker: its trial stops with a checkpoint, the worker releases the lease
and exits 0, and the trial resumes on another worker from that checkpoint
within seconds under a 60 s lease timeout."""
import json
import os
import time

from harness import TRAINABLE, command_config, main, result_values, wait_for

# Killed at iteration 3: the trials still run when the server comes back
# (queued and fresh results meet), then two more trials run.
ITERS = 20
PACE = "0.05"  # seconds per trainable iteration


def printed(env, worker, trial_id):
    """training_iteration of every result line the trial printed on this worker."""
    path = os.path.join(env.trial_dir(worker, trial_id), "stdout.log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l)["training_iteration"] for l in f if l.startswith("{")]


def outbox_files(env, worker):
    d = os.path.join(env.work_dir(worker), "outbox")
    return [f for f in os.listdir(d) if f.endswith(".json")] if os.path.isdir(d) else []


def body(env):
    db = os.path.join(env.tmp, "ctune.db")
    env.start_server("--lease-timeout", "15", db=db)
    port = env.port
    w1 = env.start_worker("w1", "--cpus", "1")
    w2 = env.start_worker("w2", "--cpus", "1")
    exp = env.submit(command_config(
        "server-crash", ["sh", TRAINABLE, str(ITERS), PACE], num_samples=4,
        max_concurrent_trials=2,
        scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": ITERS}))
    wait_for(lambda: any((t["iteration"] or 0) >= 3 for t in env.trials(exp)), 20, "results")

    before = {t["id"]: t["iteration"] for t in env.trials(exp)}
    env.server_proc.kill9()
    print("server killed (kill -9) with trial iterations", before)
    # Trials keep running; their results wait on disk in the outboxes.
    queued = wait_for(lambda: (lambda n: n >= 3 and n)(
        len(outbox_files(env, "w1")) + len(outbox_files(env, "w2"))), 10,
        "results queued in the outboxes while the server is down")
    print("results queued on disk during the outage:", queued)
    time.sleep(0.5)  # the outage goes on: retries back off

    env.start_server("--lease-timeout", "15", port=port, db=db)
    assert env.port == port
    env.wait_experiment(exp, 60)
    total = 0
    for t in env.trials(exp):
        assert t["status"] == "TERMINATED", t
        its = result_values(env.results(t["id"]))
        assert its == list(range(1, ITERS + 1)), "trial %d: %r" % (t["id"], its)
        lines = printed(env, "w1", t["id"]) + printed(env, "w2", t["id"])
        assert sorted(set(lines)) == its, "trial %d printed %r" % (t["id"], lines)
        total += len(its)
    wait_for(lambda: not outbox_files(env, "w1") and not outbox_files(env, "w2"), 10,
             "empty outboxes")
    print("after the restart: %d results stored, each exactly once" % total)
    assert "registering again" not in w1.log(), "the restarted server forgot worker 1"

    # SIGTERM drains: the trial stops with a checkpoint, the worker releases
    # its lease, and the trial resumes elsewhere at once. The lease timeout is
    # long (60 s) so only the release can bring it back this fast.
    env.server_proc.p.terminate()
    env.server_proc.p.wait(10)
    env.start_server("--lease-timeout", "60", port=port, db=db)
    w2.p.terminate()
    assert w2.p.wait(15) == 0, w2.log()
    drain = env.submit(command_config(
        "drain", ["sh", TRAINABLE, "15", PACE],
        scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": 15}))
    t = wait_for(lambda: (lambda t: (t["iteration"] or 0) >= 5 and t)(env.trials(drain)[0]), 20,
                 "the drain trial to reach iteration 5")
    t0 = time.time()
    w1.p.terminate()
    rc = w1.p.wait(15)
    print("worker 1 drained in %.2f s, exit %d" % (time.time() - t0, rc))
    assert rc == 0, w1.log()
    assert not env.trial_processes(), "trial processes left after the drain"
    assert "stopped by the drain" in w1.log()
    stopped_at = max(printed(env, "w1", t["id"]))
    t = env.trial(t["id"])
    print("after the drain: trial %s, %d failure(s), %.2f s after SIGTERM"
          % (t["status"], t["num_failures"], time.time() - t0))
    assert t["status"] == "PENDING" and t["num_failures"] == 0, t
    assert t.get("has_checkpoint"), t
    assert "released by worker" in env.server_proc.log(), "no release reached the server"
    w3 = env.start_worker("w3", "--cpus", "1", "--max-queued", "3")
    t1 = time.time()
    wait_for(lambda: env.trial(t["id"])["status"] == "RUNNING", 5,
             "worker 3 to lease the released trial well before the 60 s lease timeout")
    print("worker 3 resumed the trial %.2f s after it started" % (time.time() - t1))
    env.wait_experiment(drain, 40)
    t = env.trial(t["id"])
    assert t["status"] == "TERMINATED", t
    assert result_values(env.results(t["id"])) == list(range(1, 16))
    with open(os.path.join(env.trial_dir("w3", t["id"]), "stdout.log")) as f:
        head = f.readline()
    print("drained at iteration %d; worker 3 says %r" % (stopped_at, head.strip()))
    # The trainable checkpoints its last reported iteration on SIGTERM (one
    # less if the signal fell between printing a result and counting it).
    assert head.strip() in ("resumed at %d" % stopped_at, "resumed at %d" % (stopped_at - 1)), head
    assert w3.alive()

    # A server that lost its state answers 404 unknown_worker: register again.
    env.server_proc.p.terminate()
    env.server_proc.p.wait(10)
    db2 = os.path.join(env.tmp, "fresh.db")
    # A long lease timeout: the outage below must not make the worker fence
    # itself (protocol v2), so the paused trial is resumed, not stopped.
    # The same tokens (a fresh database would make new ones): the worker's
    # shared token still registers; its own secret is unknown there (401).
    tf, adm = env.token_file, env.admin_token
    env.start_server("--lease-timeout", "30", "--token-file", tf, port=port, db=db2)
    env.token_file, env.admin_token = tf, adm
    wait_for(lambda: "registering again" in w3.log(), 10, "worker 3 to register again")
    wait_for(lambda: [x for x in env.api("GET", "/api/v1/workers")["workers"]
                      if x["name"] == "w3"], 10, "worker 3 in GET /workers")

    # A full outbox (--max-queued 3) pauses the trial instead of losing results.
    paused = env.submit(command_config(
        "pause", ["sh", TRAINABLE, "15", PACE],
        scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": 15}))
    t = wait_for(lambda: (lambda t: (t["iteration"] or 0) >= 2 and t)(env.trials(paused)[0]),
                 20, "the pause trial to report")
    with open(os.path.join(env.trial_dir("w3", t["id"]), "pid")) as f:
        pid = int(f.read())
    env.server_proc.kill9()
    def group_paused():
        # Every process of the trial's group stopped: 'T', or 'D' for a shell
        # caught in vfork whose child was stopped before it could exec.
        states = []
        for d in os.listdir("/proc"):
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if d.isdigit() and int(fields[2]) == pid:
                states.append(fields[0])
        return "T" in states and all(x in "TD" for x in states)
    wait_for(group_paused, 10, "trial pid %d to be paused (SIGSTOP)" % pid)
    log = os.path.join(env.trial_dir("w3", t["id"]), "stdout.log")
    size = os.path.getsize(log)
    time.sleep(0.3)  # 6 iterations' time: a running trial would print
    assert group_paused() and os.path.getsize(log) == size, "the paused trial kept running"
    assert len(outbox_files(env, "w3")) == 3, outbox_files(env, "w3")
    print("outbox full: trial %d paused with %d results queued" % (t["id"], 3))
    env.start_server("--lease-timeout", "30", port=port, db=db2)
    env.wait_experiment(paused, 30)
    assert result_values(env.results(t["id"])) == list(range(1, 16))
    assert "outbox has room again" in w3.log()


main("faults", body)
