#!/usr/bin/env python3
"""Per-trial limits beyond whole CPUs: fractional GPU requests packed onto
one device with a memory cap (CTUNE_GPU_MEM_LIMIT_MB), whole-GPU requests on
a device of their own, fractional CPU requests sharing one pinned CPU, and
memory_mb enforced as RLIMIT_AS for CPU trials (the worker runs with
--no-cgroup so the test means the same on every machine). GPUs are declared
with --gpus: the command trainable never touches them, it only reports what
the worker gave it."""
import os
import re

from harness import TRAINABLE, command_config, cpus_allowed, main, wait_for


def env_line(env, worker, trial_id):
    path = os.path.join(env.trial_dir(worker, trial_id), "stdout.log")
    def read():
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("pid="):
                        return dict(kv.split("=", 1) for kv in line.split())
        except OSError:
            return None
    return wait_for(read, 10, "trial %d's environment line" % trial_id)


def body(env):
    env.start_server()
    w = env.start_worker("w1", "--cpus", "2", "--gpus", "2", "--gpu-mem-mb", "1000",
                         "--memory-mb", "4000", "--no-cgroup")
    sched = {"type": "fifo", "time_attr": "training_iteration", "max_t": 40}
    frac = env.submit(command_config("fractional", ["sh", TRAINABLE, "40", "0.1"], num_samples=2,
                                     max_concurrent_trials=2, scheduler=sched,
                                     resources_per_trial={"cpu": 0.5, "gpu": 0.5}))
    whole = env.submit(command_config("whole", ["sh", TRAINABLE, "40", "0.1"], scheduler=sched,
                                      resources_per_trial={"cpu": 1, "gpu": 1}))
    running = wait_for(lambda: (lambda r: len(r) == 3 and r)(
        [t for e in (frac, whole) for t in env.trials(e) if t["status"] == "RUNNING"]),
        20, "three concurrent trials")
    info = {}
    for t in running:
        e = env_line(env, "w1", t["id"])
        info[t["id"]] = (t["experiment_id"], e["cuda"], e["gpumem"],
                         cpus_allowed(int(e["pid"])))
    print("trial -> (experiment, CUDA_VISIBLE_DEVICES, gpu mem cap, cpus):", info)
    fr = [v for v in info.values() if v[0] == frac]
    wh = [v for v in info.values() if v[0] == whole][0]
    assert fr[0][1] == fr[1][1] and fr[0][1] in ("[0]", "[1]"), "halves not packed: %r" % fr
    assert all(v[2] == "500" for v in fr), fr
    assert fr[0][3] == fr[1][3], "cpu 0.5 trials should share one CPU: %r" % fr
    assert wh[1] in ("[0]", "[1]") and wh[1] != fr[0][1], "whole GPU not exclusive: %r" % info
    assert wh[2] == "none" and wh[3] != fr[0][3], info
    env.api("POST", "/api/v1/experiments/%d/cancel" % frac, {})
    env.api("POST", "/api/v1/experiments/%d/cancel" % whole, {})
    wait_for(lambda: not env.trial_processes(), 15, "cancelled trials to stop")

    # memory_mb for a CPU trial: RLIMIT_AS, so a 600 MiB allocation fails.
    mem = env.submit(command_config(
        "memory", ["sh", "-c", "grep 'Max address space' /proc/$$/limits; "
                   "exec /usr/bin/python3 -c 'bytearray(600 << 20)'"],
        resources_per_trial={"cpu": 1, "memory_mb": 300}))
    env.wait_experiment(mem, 20)
    t = env.trials(mem)[0]
    log = env.api("GET", "/api/v1/trials/%d/logs" % t["id"])["log"]
    limit = re.search(r"Max address space\s+(\d+)", log)
    print("memory trial:", t["status"], t["exit_code"], "limit", limit and limit.group(1))
    assert limit and int(limit.group(1)) == 300 << 20, log
    assert t["status"] == "ERROR" and "MemoryError" in t["error"], t
    # The error names the limit that was hit, and how it was enforced.
    assert t["error"].startswith("out_of_memory: out of memory: the trial is limited to "
                                 "memory_mb 300 (RLIMIT_AS)"), t
    assert w.alive()


main("limits", body)
