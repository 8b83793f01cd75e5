#!/usr/bin/env python3
"""A trial's start does not block the worker: its supervisor's report of the
trial's pid is a loop event (docs/worker.md#faults). With the test
hook TESTHOOK_SUPERVISE_REPORT (HACKING.md) the supervisor of a chosen trial
holds its report, dies before it, or reports garbage.

1. overlap: two slots; trial 2's supervisor holds its report. Meanwhile
   trial 1's result is delivered, trial 1 completes, and trial 3 is leased
   and runs; then trial 2 reports and completes too. (A worker that waits
   for the report inside its loop serves nothing for 10 s.)
2. faults: trial 4's supervisor dies (SIGKILL) before its report, trial 5's
   reports garbage: each fails as a failed start (exec_failed) with a
   message naming its supervisor; trial 6 then runs normally.
3. the spawner (docs/worker.md, "The spawner") killed by SIGKILL while
   trial 7 runs: the worker logs it, trial 7 completes, trial 8 starts
   through a new spawner.
4. drain while spawning: trial 9's supervisor holds its report when the
   worker is SIGTERMed; once the report comes the trial is stopped and
   released (PENDING again), the worker exits 0, and no process is left.
"""
import os
import re
import signal
import time

from harness import command_config, main, wait_for

TRIAL = r"""
d=$1
: > "$d/started-$CTUNE_TRIAL_ID"
if [ -p "$d/go-$CTUNE_TRIAL_ID" ]; then timeout 20 cat "$d/go-$CTUNE_TRIAL_ID" > /dev/null; fi
echo '{"training_iteration": 1, "loss": 1.0}'
"""


def body(env):
    marks = os.path.join(env.tmp, "marks")
    hooks = os.path.join(env.tmp, "hooks")
    os.mkdir(marks)
    os.mkdir(hooks)
    script = os.path.join(env.tmp, "trial.sh")
    with open(script, "w") as f:
        f.write(TRIAL)

    def hook(tid, word):
        with open(os.path.join(hooks, str(tid)), "w") as f:
            f.write(word)

    def started(tid):
        return os.path.exists(os.path.join(marks, "started-%d" % tid))

    env.start_server()
    w = env.start_worker("a", "--cpus", "2",
                         env=dict(os.environ, CTUNE_TEST_SUPERVISE_REPORT=hooks))

    # 1. Trial 2's report held while trial 1 ends and trial 3 starts.
    os.mkfifo(os.path.join(marks, "go-1"))
    hook(2, "hold")
    exp = env.submit(command_config("overlap", ["sh", script, marks], num_samples=3,
                                    max_concurrent_trials=2))
    wait_for(lambda: started(1) and started(2), 20, "trials 1 and 2 to be forked")
    assert env.trial(2)["status"] == "RUNNING", env.trial(2)
    t0 = time.monotonic()
    with open(os.path.join(marks, "go-1"), "w") as f:
        f.write("go\n")
    # Within the supervisor's 10 s report deadline, with room for ASan.
    wait_for(lambda: started(3), 7, "trial 3 to start while trial 2's report is held")
    t1 = env.trial(1)
    print("trial 1 %s, trial 3 started %.2f s after trial 1 was let go, trial 2's report held"
          % (t1["status"], time.monotonic() - t0))
    assert len(env.results(1)) == 1, env.results(1)
    assert os.path.exists(os.path.join(hooks, "2")), "the hold ended early"
    assert "trial 2 running" not in w.log(), w.log()[-3000:]
    os.unlink(os.path.join(hooks, "2"))
    e = env.wait_experiment(exp, 20)
    sts = {t["id"]: t["status"] for t in env.trials(exp)}
    assert sts == {1: "TERMINATED", 2: "TERMINATED", 3: "TERMINATED"}, (e, sts)

    # 2. A supervisor that dies before its report, one that reports garbage.
    hook(4, "die")
    hook(5, "garbage")
    exp = env.submit(command_config("faults", ["sh", script, marks], num_samples=3,
                                    max_concurrent_trials=1))
    env.wait_experiment(exp, 20)
    trials = {t["id"]: t for t in env.trials(exp)}
    for tid, says in ((4, "ended before reporting the trial's pid"),
                      (5, "reported something other than the trial's pid")):
        t = env.trial(tid)
        print("trial %d: %s %r" % (tid, t["status"], t["error"]))
        assert t["status"] == "ERROR" and t["error"].startswith("exec_failed"), t
        assert "the trial's supervisor (pid " in t["error"] and says in t["error"], t
    assert trials[6]["status"] == "TERMINATED" and len(env.results(6)) == 1, trials[6]
    assert not started(4), "trial 4 ran without a supervisor"

    # 3. The spawner killed (SIGKILL) while trial 7 runs: trial 7 runs on
    #    and completes, and trial 8 starts through a new spawner.
    first = re.findall(r"spawner: pid (\d+) starts", w.log())
    assert len(first) == 1, w.log()[-3000:]
    os.mkfifo(os.path.join(marks, "go-7"))
    exp = env.submit(command_config("spawner", ["sh", script, marks], num_samples=2,
                                    max_concurrent_trials=1))
    wait_for(lambda: started(7), 20, "trial 7 to start")
    os.kill(int(first[0]), signal.SIGKILL)
    # Seen as the end of its socket or as its exit, whichever comes first.
    wait_for(lambda: "error spawner (pid %s) " % first[0] in w.log(), 10,
             "the worker to see its spawner's death")
    with open(os.path.join(marks, "go-7"), "w") as f:
        f.write("go\n")
    env.wait_experiment(exp, 20)
    sts = {t["id"]: t["status"] for t in env.trials(exp)}
    assert sts == {7: "TERMINATED", 8: "TERMINATED"}, sts
    assert len(env.results(7)) == 1 and len(env.results(8)) == 1
    assert len(re.findall(r"spawner: pid (\d+) starts", w.log())) == 2, w.log()[-3000:]

    # 4. SIGTERM while trial 9's report is held: stopped once it comes.
    os.mkfifo(os.path.join(marks, "go-9"))  # never written: only a stop ends it
    hook(9, "hold")
    exp = env.submit(command_config("drain", ["sh", script, marks]))
    wait_for(lambda: started(9), 20, "trial 9 to be forked")
    os.kill(w.pid, signal.SIGTERM)
    wait_for(lambda: "draining" in w.log(), 10, "the worker to drain")
    assert "trial 9 running" not in w.log(), w.log()[-3000:]
    os.unlink(os.path.join(hooks, "9"))
    rc = w.p.wait(20)
    assert rc == 0, "worker exited %d:\n%s" % (rc, w.log()[-3000:])
    log = w.log()
    assert "trial 9 running" in log and "trial 9 (attempt 1) stopped by the drain" in log, \
        log[-3000:]
    t = env.trial(wait_for(lambda: env.trials(exp), 5, "trial 9")[0]["id"])
    assert t["status"] == "PENDING", t
    wait_for(lambda: not env.trial_processes(), 5, "trial 9's processes to be gone")


main("spawn", body)
