#!/usr/bin/env python3
"""ctune-worker's side of protocol v2 against the real ctune-server:

  utf8     a trial crashes with a multi-byte character cut by the 16 KiB
           stderr tail and an invalid byte in its last lines: its fail is
           accepted (sent as valid UTF-8) and the experiment ends.
  fence    the server is frozen (SIGSTOP) for longer than its lease timeout:
           the worker fences itself (SIGTERMs its trial, which checkpoints),
           and after SIGCONT leases again; the trial resumes from its
           checkpoint and the experiment ends with every result stored once.
  relase   the worker is frozen past the lease timeout (SIGSTOP, SIGCONT):
           the same trial is leased to it again (attempt 2), and SIGTERM then
           drains and exits 0."""
import concurrent.futures
import copy
import os
import re
import signal
import sys
import time

from harness import TRAINABLE, command_config, main, result_values, wait_for

FIFO = {"type": "fifo", "time_attr": "training_iteration"}
LEASE_TIMEOUT = "2"
PACE = "0.05"  # seconds per trainable iteration
# The fence trial runs at least 3 s, past the fence (2 s after the freeze at
# result 3); resumed, it reports at 0.01 s a result.
FENCE_ITERS = 30
FENCE_ARGV = ["sh", TRAINABLE, str(FENCE_ITERS), "0.1", "0", "0.01"]

CRASH = ("import sys; sys.stderr.buffer.write(b'x' + 'é'.encode() * 10000 + "
         "b'\\n\\xff\\xfe bad byte\\n'); sys.stderr.flush(); sys.exit(3)")


def utf8(env, w):
    exp = env.submit(command_config("utf8", [sys.executable, "-c", CRASH]))
    env.wait_experiment(exp, 30)
    t = env.trials(exp)[0]
    assert t["status"] == "ERROR" and t["exit_code"] == 3, t
    assert "bad byte" in t["error"] and "\ufffd" in t["error"], repr(t["error"][-200:])
    print("utf8: fail accepted (%d chars of error, cut character replaced); experiment %s"
          % (len(t["error"]), env.experiment(exp)["status"]))


def fence(env, w):
    exp = env.submit(command_config("fence", FENCE_ARGV,
                                    scheduler=dict(FIFO, max_t=FENCE_ITERS)))
    t = wait_for(lambda: (lambda t: (t["iteration"] or 0) >= 3 and t)(env.trials(exp)[0]), 20,
                 "results")
    os.kill(env.server_proc.pid, signal.SIGSTOP)
    t0 = time.time()
    try:
        wait_for(lambda: "self-fencing" in w.log(), 10, "the worker to fence itself")
        fenced = time.time() - t0
        wait_for(lambda: not env.trial_processes("w1"), 10, "the trial to stop")
    finally:
        os.kill(env.server_proc.pid, signal.SIGCONT)
    wait_for(lambda: "leasing again" in w.log(), 20, "heartbeats to get through again")
    env.wait_experiment(exp, 60)
    t = env.trial(t["id"])
    assert t["status"] == "TERMINATED", t
    assert result_values(env.results(t["id"])) == list(range(1, FENCE_ITERS + 1))
    with open(os.path.join(env.trial_dir("w1", t["id"]), "stdout.log")) as f:
        resumed = [l.strip() for l in f if l.startswith("resumed at")]
    assert resumed, "the trial did not resume from its checkpoint"
    print("fence: trial stopped %.1f s after the server froze (lease timeout %s s); %s; "
          "%d results stored once" % (fenced, LEASE_TIMEOUT, resumed[0], FENCE_ITERS))


def relase(env, w):
    exp = env.submit(command_config("relase", ["sh", TRAINABLE, "1200", PACE],
                                    scheduler=dict(FIFO, max_t=1200)))
    t = wait_for(lambda: (lambda t: (t["iteration"] or 0) >= 3 and t)(env.trials(exp)[0]), 20,
                 "results")
    os.kill(w.pid, signal.SIGSTOP)
    try:
        # Frozen until the server has given up on the lease.
        requeued = re.compile(r"trial %d \(worker \d+, attempt 1\): .*back to PENDING" % t["id"])
        wait_for(lambda: requeued.search(env.server_proc.log()), 20,
                 "the server to requeue the frozen worker's trial")
    finally:
        os.kill(w.pid, signal.SIGCONT)
    wait_for(lambda: "trial %d: leased (attempt 2)" % t["id"] in w.log(), 20,
             "the same trial leased again to this worker")
    wait_for(lambda: (env.trial(t["id"])["iteration"] or 0) > 0 and
             "trial %d running" % t["id"] in w.log().split("leased (attempt 2)")[-1], 20,
             "attempt 2 to run")
    os.kill(w.pid, signal.SIGTERM)
    t0 = time.time()
    rc = w.p.wait(20)
    assert rc == 0, w.log()[-3000:]
    assert not env.trial_processes("w2")
    t = env.trial(t["id"])
    assert t["status"] == "PENDING", t
    print("relase: re-leased trial drained in %.2f s; trial %s" % (time.time() - t0, t["status"]))


def server_and_worker(env, name):
    env.start_server("--lease-timeout", LEASE_TIMEOUT, "--heartbeat-interval", "0.5",
                     db=os.path.join(env.tmp, name + ".db"))
    return env.start_worker(name, "--cpus", "1", "--poll-ms", "50")


def body(env):
    # fence freezes the server, relase the worker: relase has a server and a
    # worker of its own (env2: the same temp dir and process list, its own
    # server) and runs beside utf8 and fence.
    env2 = copy.copy(env)
    w = server_and_worker(env, "w1")
    w2 = server_and_worker(env2, "w2")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        other = pool.submit(relase, env2, w2)
        try:
            utf8(env, w)
            fence(env, w)
        finally:
            other.result()  # re-raises its failure


main("protocol-v2-real", body)
