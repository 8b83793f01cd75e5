#!/usr/bin/env python3
"""`ctune-worker --cpus N` is a count and `--cpu-list` a list of ids, and two
workers on one machine never share a core without saying so: with two real
workers of `--cpus 1` each, the second one claims the other CPU (each runs a
trial pinned to its own CPU); a third one, with none left, warns naming the
CPU it shares and its holder; with --exclusive-cpus it refuses to start; a
worker killed with -9 leaves its CPU free again. The claims live in a run
dir of this test (CTUNE_RUN_DIR)."""
import os
import signal
import subprocess

from harness import SKIP, TRAINABLE, command_config, cpus_allowed, main, wait_for


def run(env, *args):
    p = subprocess.run([os.path.join(env.bin, "ctune-worker")] + list(args), env=env.e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=20)
    return p.returncode, p.stdout


def claimed(proc):
    def got():
        for line in proc.log().splitlines():
            if "claimed CPU(s) " in line:
                return line.split("claimed CPU(s) ")[1].split()[0]
        return None
    return wait_for(got, 10, "%s to claim its CPUs" % proc.name)


def body(env):
    mask = sorted(os.sched_getaffinity(0))
    if len(mask) < 2:
        print("SKIP: needs 2 CPUs in the affinity mask, has %r" % mask)
        raise SystemExit(SKIP)
    env.e = dict(os.environ, CTUNE_RUN_DIR=os.path.join(env.tmp, "run"))
    env.e.pop("CUDA_VISIBLE_DEVICES", None)

    # The command line says which option is which, and refuses the old mix.
    rc, out = run(env, "--help")
    assert rc == 0 and "--cpus N             a COUNT" in out and "--cpu-list LIST" in out, out
    rc, out = run(env, "--server", "http://x", "--cpus", "0-1", "--work-dir",
                  os.path.join(env.tmp, "never"))
    assert rc == 2 and "--cpus takes a count of CPUs" in out and "--cpu-list 0-1" in out, out
    rc, out = run(env, "--server", "http://x", "--cpus", "1", "--cpu-list", "0")
    assert rc == 2 and "not both" in out, out

    env.start_server()
    os.environ["CTUNE_RUN_DIR"] = env.e["CTUNE_RUN_DIR"]  # the harness's workers inherit it
    a = env.start_worker("a", "--cpus", "1")
    ca = claimed(a)
    b = env.start_worker("b", "--cpus", "1")
    cb = claimed(b)
    print("claimed: a=%s b=%s" % (ca, cb))
    assert ca != cb, (ca, cb)
    assert {ca, cb} <= {str(c) for c in mask}, (ca, cb, mask)
    for p in (a, b):
        assert "already claimed" not in p.log(), p.log()

    # Each runs one trial: each pinned to its own CPU.
    exp = env.submit(command_config("two", ["sh", TRAINABLE, "40", "0.1"], num_samples=2,
                                    max_concurrent_trials=2,
                                    scheduler={"type": "fifo", "time_attr": "training_iteration",
                                               "max_t": 3}))
    def pids():
        found = {}
        for name in ("a", "b"):
            d = os.path.join(env.work_dir(name), "trials")
            for t in os.listdir(d) if os.path.isdir(d) else []:
                try:
                    with open(os.path.join(d, t, "pid")) as f:
                        found[name] = int(f.read())
                except (OSError, ValueError):
                    pass
        return len(found) == 2 and found
    running = wait_for(pids, 20, "a trial on each worker")
    allowed = {n: cpus_allowed(p) for n, p in running.items()}
    print("trial affinity:", allowed)
    assert allowed == {"a": ca, "b": cb}, allowed
    env.wait_experiment(exp, 30)
    assert all(t["status"] == "TERMINATED" for t in env.trials(exp)), env.trials(exp)

    # A third: nothing left, it shares and says which CPU and with whom.
    c = env.start_worker("c", "--cpus", "1")
    cc = claimed(c)
    warn = wait_for(lambda: [l for l in c.log().splitlines() if "already claimed" in l], 10,
                    "the warning about a shared CPU")[0]
    print(warn)
    holder = {ca: "worker a, pid %d" % a.pid, cb: "worker b, pid %d" % b.pid}[cc]
    assert "CPU(s) %s already claimed" % cc in warn and holder in warn, warn
    assert "SHARES" in warn and "--exclusive-cpus" in warn, warn
    # ... or refuses, when told to.
    rc, out = run(env, "--server", env.url, "--name", "d", "--work-dir",
                  os.path.join(env.tmp, "work-d"), "--cpus", "1", "--exclusive-cpus")
    assert rc == 1 and "--exclusive-cpus: CPU(s) " in out and "already claimed" in out, out
    # --cpu-list names ids; a held one is shared with a warning too.
    d = env.start_worker("d", "--cpu-list", ca)
    assert claimed(d) == ca
    wait_for(lambda: "CPU(s) %s already claimed" % ca in d.log(), 10, "d's warning")

    # kill -9 of a: the kernel drops its claim, but d still uses that CPU
    # (sharers count) and b the other: nothing is free. Once c and d are
    # gone too, a new worker gets a's CPU alone.
    a.kill9()
    rc, out = run(env, "--server", env.url, "--name", "e", "--work-dir",
                  os.path.join(env.tmp, "work-e"), "--cpus", "1", "--exclusive-cpus")
    assert rc == 1 and "already claimed" in out, out
    c.kill9()
    d.kill9()
    e = env.start_worker("f", "--cpus", "1", "--exclusive-cpus")
    assert claimed(e) == ca, e.log()
    assert "already claimed" not in e.log(), e.log()

main("cpu-claims", body)
