#!/usr/bin/env python3
"""The outbox outlives its worker: with the server down, results pile up on
disk; the worker is then killed (kill -9, its trial dies with it); a new
worker started on the same work dir delivers what the dead one left, the
trial resumes from its checkpoint, and every result is stored exactly once."""
import os

from harness import TRAINABLE, command_config, main, result_values, wait_for

ITERS = 12
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
        "restart", ["sh", TRAINABLE, str(ITERS), "0.05"],
        scheduler={"type": "fifo", "time_attr": "training_iteration", "max_t": ITERS}))
    wait_for(lambda: (env.trials(exp)[0]["iteration"] or 0) >= 2, 20, "first results")
    env.server_proc.kill9()
    wait_for(lambda: len(outbox_files(env, "a")) >= 3, 10, "results queued on disk")
    w.kill9()
    wait_for(lambda: not env.trial_processes(), 3, "the trial to die with its worker")
    left = outbox_files(env, "a")
    print("worker killed with %d message(s) in its outbox" % len(left))

    env.start_server(*SERVER_ARGS, port=port, db=db)
    w2 = env.start_worker("a", "--cpus", "1")
    wait_for(lambda: "undelivered message(s) from an earlier run" in w2.log(), 10,
             "the new worker to find the outbox")
    env.wait_experiment(exp, 40)
    t = env.trials(exp)[0]
    assert t["status"] == "TERMINATED", t
    assert result_values(env.results(t["id"])) == list(range(1, ITERS + 1))
    wait_for(lambda: not outbox_files(env, "a"), 10, "an empty outbox")
    print("all %d results stored once; outbox empty" % ITERS)


main("restart", body)
