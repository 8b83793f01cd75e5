#!/usr/bin/env python3
"""A relative --work-dir is resolved once, at start: a command trainable whose
cwd is elsewhere still finds its CTUNE_CHECKPOINT_DIR (a relative one would
point into the trainable's own cwd), and the worker's files stay under the
directory the user named. Trial dirs after the first come from the
spares the worker makes ahead of their leases, under that directory too."""
import os
import re
import subprocess

from harness import Proc, main, result_values, wait_for

SCRIPT = ('test -d "$CTUNE_CHECKPOINT_DIR" || { echo "no dir $CTUNE_CHECKPOINT_DIR" >&2; exit 9; }; '
          'echo saved > "$CTUNE_CHECKPOINT_DIR/checkpoint.bin" || exit 8; '
          'echo \'{"training_iteration": 1, "loss": 0.5}\'')


def body(env):
    env.start_server()
    log_path = os.path.join(env.tmp, "worker-rel.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen([os.path.join(env.bin, "ctune-worker"), "--server", env.url,
                              "--name", "rel", "--work-dir", "rel-work", "--poll-ms", "200",
                              # tokens by default: the worker token registers it
                              "--token-file", env.token_file],
                             cwd=env.tmp, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, CTUNE_LOG_LEVEL="debug"),
                             start_new_session=True)
    env.procs.append(Proc(p, log_path, "worker rel"))
    def run_one(name):
        exp = env.submit({"name": name, "metric": "loss", "mode": "min", "num_samples": 1,
                          "param_space": {"x": 1},
                          "scheduler": {"type": "fifo", "time_attr": "training_iteration"},
                          "resources_per_trial": {"cpu": 1},
                          "trainable": {"type": "command", "cwd": "/",
                                        "argv": ["sh", "-c", SCRIPT]}})
        env.wait_experiment(exp, 30)
        (t,) = env.trials(exp)
        assert t["status"] == "TERMINATED", t
        assert result_values(env.results(t["id"])) == [1]
        ck = os.path.join(env.tmp, "rel-work", "trials", str(t["id"]), "checkpoint.bin")
        assert os.path.isfile(ck), "no checkpoint at %s" % ck
        with open(os.path.join(os.path.dirname(ck), "stdout.log")) as f:
            assert '"loss": 0.5' in f.read(), "trial %d's stdout.log" % t["id"]
        return t["id"]

    trials = os.path.join(env.tmp, "rel-work", "trials")
    first = run_one("relwork")
    assert not os.path.exists("/rel-work"), "the worker wrote into the trainable's cwd"
    # The first trial's dir is made at its lease; its start has a spare made
    # (on a thread, a moment later), which the next trial's lease takes.
    wait_for(lambda: any(n.startswith(".spare.") for n in os.listdir(trials)), 10,
             "a spare trial dir")
    second = run_one("relwork2")
    with open(log_path) as f:
        log = f.read()
    spared = re.findall(r"trial (\d+): dir made, [0-9.]+ ms on the loop( \(a spare\))?", log)
    assert dict(spared) == {str(first): "", str(second): " (a spare)"}, spared


main("workdir", body)
