#!/usr/bin/env python3
"""What a worker advertises by default is what it may really use
(docs/protocol.md#what-a-worker-advertises), checked through GET /api/v1/workers:

- started inside a cgroup v1 cpu group with a quota of 1.5 CPUs and a memory
  group limited to 300 MiB (a launcher writes its pid into cgroup.procs and
  execs the worker), it advertises cpu 1 and memory_mb 300, and logs the
  files those came from;
- restricted by taskset to one CPU, it advertises 1 and claims that CPU;
- with an inherited CUDA_VISIBLE_DEVICES=1 (and a fake NVML reporting two
  devices) it advertises 1 GPU and its trial gets CUDA_VISIBLE_DEVICES=1; an
  empty CUDA_VISIBLE_DEVICES means no GPU.

Needs root to create cgroups under /sys/fs/cgroup/{cpu,memory}; skips (77)
loudly otherwise. The groups are removed at the end."""
import os
import subprocess
import sys
import time

from harness import SKIP, TRAINABLE, Proc, command_config, main, wait_for

TAG = "ctune-test-%d" % os.getpid()
CPU_CG = "/sys/fs/cgroup/cpu/" + TAG
MEM_CG = "/sys/fs/cgroup/memory/" + TAG


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def make_cgroups():
    try:
        os.mkdir(CPU_CG)
        os.mkdir(MEM_CG)
        write(CPU_CG + "/cpu.cfs_period_us", "100000")
        write(CPU_CG + "/cpu.cfs_quota_us", "150000")
        write(MEM_CG + "/memory.limit_in_bytes", str(300 << 20))
    except OSError as e:
        remove_cgroups()
        print("SKIP: cannot create cgroup v1 groups %s and %s (%s): this test needs root "
              "and cgroup v1 cpu and memory hierarchies" % (CPU_CG, MEM_CG, e))
        sys.exit(SKIP)


def remove_cgroups():
    for d in (CPU_CG, MEM_CG):
        deadline = time.time() + 10
        while os.path.isdir(d):
            try:
                os.rmdir(d)
            except OSError:
                if time.time() > deadline:
                    print("WARNING: could not remove %s" % d)
                    break
                time.sleep(0.1)


def start(env, name, *args, extra_env=None, preexec=None, launcher=()):
    e = dict(os.environ)
    e["CTUNE_RUN_DIR"] = os.path.join(env.tmp, "run")
    e.pop("CUDA_VISIBLE_DEVICES", None)
    e.update(extra_env or {})
    log_path = os.path.join(env.tmp, "worker-%s.log" % name)
    with open(log_path, "w") as log:
        p = subprocess.Popen(list(launcher) + [
            os.path.join(env.bin, "ctune-worker"), "--server", env.url, "--name", name,
            "--work-dir", env.work_dir(name), "--poll-ms", "200", "--stop-grace-s", "3",
            "--token-file", env.token_file] + list(args),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=e,
            preexec_fn=preexec)
    proc = Proc(p, log_path, "worker " + name)
    env.procs.append(proc)
    return proc


def workers(env, n):
    def got():
        ws = {x["name"]: x for x in env.api("GET", "/api/v1/workers")["workers"]}
        return len(ws) >= n and ws
    return wait_for(got, 15, "%d workers to register" % n)


def body(env):
    fake_nvml = env.args[0] if env.args else ""
    make_cgroups()
    env.start_server()
    mask = sorted(os.sched_getaffinity(0))

    # 1. In the quota'd cgroups: a tiny launcher joins them, then execs.
    launcher = ("sh", "-c", 'echo $$ > %s/cgroup.procs && echo $$ > %s/cgroup.procs && '
                'exec "$@"' % (CPU_CG, MEM_CG), "launcher")
    quota = start(env, "quota", launcher=launcher)
    # 2. Restricted by taskset to the last CPU of the mask.
    last = mask[-1]
    pinned = start(env, "pinned", preexec=lambda: os.sched_setaffinity(0, {last}))
    ws = workers(env, 2)
    print("advertised:", {n: w["resources"] for n, w in ws.items()})
    with open("/proc/%d/cgroup" % quota.pid) as f:
        cg = f.read()
    assert (":cpu:/%s" % TAG) in cg and (":memory:/%s" % TAG) in cg, cg
    q = ws["quota"]["resources"]
    assert q["cpu"] == 1, (q, quota.log())
    assert q["memory_mb"] == 300, (q, quota.log())
    log = quota.log()
    assert "cpu.cfs_quota_us=150000 cpu.cfs_period_us=100000" in log, log
    assert "memory.limit_in_bytes=%d" % (300 << 20) in log, log
    if len(mask) >= 2:
        assert "capped by the CPU quota 1.50" in log, log
    t = ws["pinned"]["resources"]
    assert t["cpu"] == 1, (t, pinned.log())
    assert "affinity mask %d," % last in pinned.log(), pinned.log()
    assert "claimed CPU(s) %d in" % last in pinned.log(), pinned.log()
    assert t["memory_mb"] > 300, t  # not in the memory group: MemTotal

    # 3. GPUs from an inherited CUDA_VISIBLE_DEVICES, not every NVML device.
    if fake_nvml and os.path.isdir(fake_nvml):
        ld = {"LD_LIBRARY_PATH": fake_nvml}
        allg = start(env, "nvml", "--cpus", "1", extra_env=ld)
        ws = workers(env, 3)
        assert ws["nvml"]["resources"]["gpu"] == 2, (ws["nvml"], allg.log())
        os.kill(allg.pid, 15)  # only cvd1 may run the GPU trial below
        assert allg.p.wait(20) == 0, allg.log()
        one = start(env, "cvd1", "--cpus", "1", extra_env=dict(ld, CUDA_VISIBLE_DEVICES="1"))
        none = start(env, "cvd0", "--cpus", "1", extra_env=dict(ld, CUDA_VISIBLE_DEVICES=""))
        # The stopped "nvml" worker deregistered: it is gone from
        # the list, so 4 remain.
        ws = workers(env, 4)
        assert "nvml" not in ws, sorted(ws)
        assert ws["cvd1"]["resources"]["gpu"] == 1, (ws["cvd1"], one.log())
        assert ws["cvd0"]["resources"]["gpu"] == 0, (ws["cvd0"], none.log())
        assert "the inherited CUDA_VISIBLE_DEVICES=1" in one.log(), one.log()
        exp = env.submit(command_config("cvd", ["sh", TRAINABLE, "1", "0.05"],
                                        resources_per_trial={"cpu": 1, "gpu": 1}))
        env.wait_experiment(exp, 30)
        tr = env.trials(exp)[0]
        tlog = env.api("GET", "/api/v1/trials/%d/logs" % tr["id"])["log"]
        assert tr["status"] == "TERMINATED", tr
        assert "cuda=[1] gpumem=none" in tlog, tlog  # the allowed device, by its index
        print("gpu: nvml 2, CUDA_VISIBLE_DEVICES=1 -> 1 (trial got cuda=[1]), '' -> 0")
    else:
        print("note: no fake NVML given: CUDA_VISIBLE_DEVICES part not run")


try:
    main("resources", body)
finally:
    remove_cgroups()
