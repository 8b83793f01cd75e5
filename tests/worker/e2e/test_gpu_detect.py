#!/usr/bin/env python3
"""GPU discovery at run time: with a libnvidia-ml.so.1 on the library path
(a fake one reporting two 8 GiB devices) the worker registers 2 GPUs and caps
a half-GPU trial at 4096 MiB; without one it registers 0 and says so."""
import os

from harness import TRAINABLE, command_config, main, wait_for


def body(env):
    fake_dir = env.args[0]
    env.start_server()
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = fake_dir + (":" + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else "")
    w = env.start_worker("gpu", "--cpus", "1", env=e)
    plain = env.start_worker("plain", "--cpus", "1")
    def by_name():
        ws = {x["name"]: x for x in env.api("GET", "/api/v1/workers")["workers"]}
        return len(ws) == 2 and ws
    ws = wait_for(by_name, 10, "both workers to register")
    print("registered:", {n: x["resources"] for n, x in ws.items()})
    assert ws["gpu"]["resources"]["gpu"] == 2, ws
    assert ws["plain"]["resources"]["gpu"] == 0, ws
    assert "no NVIDIA driver found" in plain.log()
    exp = env.submit(command_config("half-gpu", ["sh", TRAINABLE, "2", "0.05"],
                                    resources_per_trial={"cpu": 1, "gpu": 0.5}))
    env.wait_experiment(exp, 20)
    t = env.trials(exp)[0]
    log = env.api("GET", "/api/v1/trials/%d/logs" % t["id"])["log"]
    assert t["status"] == "TERMINATED", t
    assert "cuda=[0] gpumem=4096" in log, log
    assert w.alive()


main("gpu", body)
