#!/usr/bin/env python3
"""Per-worker credentials (docs/protocol.md#worker-credentials): the worker registers with the shared
worker token, then works under the secret registration returned; it keeps
that identity in <work dir>/identity (0600), so a restarted worker delivers
its outbox as the same worker (one worker on the server, not two); a server
that no longer knows the identity (a fresh database) gets a new registration,
and the old identity's messages are dropped with a log line."""
import json
import os
import stat

from harness import TRAINABLE, command_config, main, result_values, wait_for

ITERS = 8
# The restarted worker lists no trial in its heartbeats: with heartbeats every
# 0.25 s the server requeues the dead one's trial after 0.5 s (two
# intervals), not 1.3 s.
SERVER_ARGS = ("--lease-timeout", "2", "--heartbeat-interval", "0.25")


def outbox_files(env, worker):
    d = os.path.join(env.work_dir(worker), "outbox")
    return sorted(f for f in os.listdir(d) if f.endswith(".json")) if os.path.isdir(d) else []


def body(env):
    db = os.path.join(env.tmp, "ctune.db")
    env.start_server(*SERVER_ARGS, db=db)
    port = env.port
    w = env.start_worker("a", "--cpus", "1")
    exp = env.submit(command_config(
        "creds", ["sh", TRAINABLE, str(ITERS), "0.05"],
        scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": ITERS}))
    wait_for(lambda: (env.trials(exp)[0]["iteration"] or 0) >= 2, 20, "first results")
    ident = os.path.join(env.work_dir("a"), "identity")
    assert stat.S_IMODE(os.stat(ident).st_mode) == 0o600, oct(os.stat(ident).st_mode)
    me = json.load(open(ident))
    assert me["secret"].startswith("%d." % me["id"]), me
    # the worker works under its own secret: the shared token is refused there
    env.server_proc.kill9()
    wait_for(lambda: len(outbox_files(env, "a")) >= 2, 10, "results queued on disk")
    w.kill9()
    wait_for(lambda: not env.trial_processes(), 3, "the trial to die with its worker")

    env.start_server(*SERVER_ARGS, port=port, db=db)
    w2 = env.start_worker("a", "--cpus", "1")
    wait_for(lambda: "resuming as worker %d" % me["id"] in w2.log(), 10, "the same identity")
    env.wait_experiment(exp, 40)
    t = env.trials(exp)[0]
    assert t["status"] == "TERMINATED", t
    assert result_values(env.results(t["id"])) == list(range(1, ITERS + 1))
    workers = env.api("GET", "/api/v1/workers")["workers"]
    assert [x["id"] for x in workers] == [me["id"]], workers
    print("restarted worker delivered its outbox as worker %d" % me["id"])

    # a second experiment, stopped mid-way with messages queued, then a server
    # on a fresh database: the identity is unknown there
    exp2 = env.submit(command_config(
        "creds2", ["sh", TRAINABLE, str(ITERS), "0.1"],
        scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": ITERS}))
    wait_for(lambda: (env.trials(exp2)[0]["iteration"] or 0) >= 1, 20, "results of exp 2")
    env.server_proc.kill9()
    wait_for(lambda: len(outbox_files(env, "a")) >= 1, 10, "messages queued on disk")
    w2.kill9()
    wait_for(lambda: not env.trial_processes(), 3, "the trial to die with its worker")
    env.start_server(*SERVER_ARGS, port=port, db=os.path.join(env.tmp, "fresh.db"))
    w3 = env.start_worker("a", "--cpus", "1")
    wait_for(lambda: "registered with" in w3.log(), 15, "a new registration")
    wait_for(lambda: "earlier identity" in w3.log() or "old identity" in w3.log(), 15,
             "the old identity's messages dropped with a log line")
    wait_for(lambda: not outbox_files(env, "a"), 10, "an empty outbox")
    print("fresh server: registered again, old identity's messages dropped")


main("worker_creds", body)
