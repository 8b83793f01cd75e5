#!/usr/bin/env python3
"""A user's pause (docs/protocol.md#experiment-control) reaches a trial that reports
rarely at its worker's next heartbeat, not only at its next result. A real
ctune-server and ctune-worker run a command trainable that reports once
every 30 s; after its first result the experiment is paused: within a few
heartbeats the trial is sent SIGTERM (it checkpoints), the worker reports it
complete, the trial is PAUSED with its checkpoint; resumed, it goes on from
that checkpoint on the same worker."""
import time

from harness import TRAINABLE, command_config, main, wait_for

FIFO = {"type": "fifo", "time_attr": "training_iteration", "max_t": 3}


def body(env):
    env.start_server("--lease-timeout", "10", "--heartbeat-interval", "0.5")
    w = env.start_worker("w1", "--cpus", "1")
    # First result at once (sleep 0.05 s), then one every 30 s: the next
    # result would come long after the test's limits below.
    exp = env.submit(command_config("rare", ["sh", "-c", 'sh "$0" 1 0.05 && CTUNE_RESUME=1 exec sh "$0" 3 30',
                                     TRAINABLE],
                                    scheduler=FIFO))
    t = wait_for(lambda: (lambda t: (t["iteration"] or 0) >= 1 and t)(env.trials(exp)[0]), 20,
                 "the first result")
    t0 = time.time()
    env.api("POST", "/api/v1/experiments/%d/pause" % exp, {})
    t = wait_for(lambda: (lambda t: t["status"] == "PAUSED" and t)(env.trial(t["id"])), 10,
                 "the trial to pause")
    paused_s = time.time() - t0
    assert "server says stop (paused)" in w.log(), w.log()[-3000:]
    assert t["has_checkpoint"] and "paused" in (t["reason"] or ""), t
    assert not env.trial_processes()
    print("paused %.2f s after the pause (heartbeat interval 0.5 s; next result was 30 s away)"
          % paused_s)
    env.api("POST", "/api/v1/experiments/%d/resume" % exp, {})
    wait_for(lambda: env.trial(t["id"])["status"] == "RUNNING", 20, "the trial to resume")


main("pause-heartbeat", body)
