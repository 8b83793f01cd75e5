#!/usr/bin/env python3
"""deploy/slurm/ctune-workers.sbatch on a real single-node Slurm (slurm_lib:
its own munged, slurmctld -D and slurmd -D in a temp dir): sbatch
--ntasks=2 --cpus-per-task=1 starts one ctune-worker per task; each
registers with the CPUs Slurm bound its task to (cpu 1, on distinct CPUs
that make up the job's allocation); an experiment of a command trainable
runs to the end on them (every trial TERMINATED); scancel makes the workers
drain and exit, taking its SIGTERM as a preemption notice; everything is torn down. Skips (77) when not root or when
slurm-wlm/munge are missing (deploy/slurm/README.md says what it needs)."""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "worker", "e2e"))
import slurm_lib  # noqa: E402
from harness import SKIP, TRAINABLE, command_config, main, wait_for  # noqa: E402

SBATCH = os.path.join(ROOT, "deploy", "slurm", "ctune-workers.sbatch")


def worker_pids(job):
    """{task: pid} of the ctune-worker processes of this job."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"ctune-worker") and b"--name" in argv:
            name = argv[argv.index(b"--name") + 1].decode()
            m = re.fullmatch(r"slurm-%s-(\d+)" % job, name)
            if m:
                found[int(m.group(1))] = int(d)
    return found


def mask_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return None


def body(env):
    why = slurm_lib.missing()
    if why:
        print("SKIP: the Slurm e2e test cannot run: %s" % why)
        sys.exit(SKIP)
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        print("SKIP: the Slurm e2e test needs 2 CPUs, this process has %d" % cpus)
        sys.exit(SKIP)
    t0 = time.time()
    cluster = slurm_lib.Cluster(env.tmp, cpus=2)
    env.cluster = cluster
    cluster.start()
    print("slurm up in %.1f s" % (time.time() - t0))
    env.start_server()

    run_env = dict(cluster.env, CTUNE_SERVER=env.url, CTUNE_TOKEN_FILE=env.token_file,
                   CTUNE_WORKER=os.path.abspath(os.path.join(env.bin, "ctune-worker")),
                   CTUNE_WORK_BASE=os.path.join(env.tmp, "work"),
                   CTUNE_RUN_DIR=os.path.join(env.tmp, "run"),
                   CTUNE_WORKER_ARGS="--poll-ms 200 --stop-grace-s 3")
    run_env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run([slurm_lib.which("sbatch"), "--parsable", "--ntasks=2",
                        "--cpus-per-task=1", "--output=" + os.path.join(env.tmp, "job-%j.out"),
                        SBATCH], env=run_env, cwd=env.tmp, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=30)
    assert r.returncode == 0, r.stdout
    job = r.stdout.strip().split(";")[0]
    env.job = job
    print("job", job)

    def job_out():
        try:
            with open(os.path.join(env.tmp, "job-%s.out" % job), errors="replace") as f:
                return f.read()
        except OSError:
            return ""
    env.job_out = job_out

    def registered():
        assert "srun: error" not in job_out(), job_out()
        ws = {w["name"]: w for w in env.api("GET", "/api/v1/workers")["workers"]
              if w["name"].startswith("slurm-%s-" % job)}
        return len(ws) == 2 and ws
    ws = wait_for(registered, 30, "the two Slurm-launched workers to register")
    print("registered:", {n: w["resources"] for n, w in ws.items()})

    # Each worker offers what Slurm allocated to its task: 1 CPU, the one
    # its task is bound to; together they are the job's CPUs.
    pids = wait_for(lambda: (lambda p: len(p) == 2 and p)(worker_pids(job)), 10,
                    "the worker processes")
    masks = {t: mask_of(p) for t, p in pids.items()}
    detail = cluster.run("scontrol", "show", "job", "-d", job)
    m = re.search(r"CPU_IDs=(\S+)", detail)
    print("task masks:", masks, "job CPU_IDs:", m and m.group(1))
    for t in (0, 1):
        res = ws["slurm-%s-%d" % (job, t)]["resources"]
        assert res["cpu"] == 1, (t, res, job_out())
        assert re.fullmatch(r"\d+", masks[t]), masks
    assert masks[0] != masks[1], masks
    if m:
        ids = set()
        for part in m.group(1).split(","):
            a, _, b = part.partition("-")
            ids |= {str(i) for i in range(int(a), int(b or a) + 1)}
        assert set(masks.values()) == ids, (masks, ids)
    for t in (0, 1):
        wait_for(lambda: "claimed CPU(s) %s in" % masks[t] in job_out(), 10,
                 "task %d's claim in the job output" % t)
    out = job_out()
    assert "already claimed" not in out, out

    # An experiment to the end on the Slurm-launched workers.
    exp = env.submit(command_config("on-slurm", ["sh", TRAINABLE, "3", "0.1"], num_samples=4,
                                    max_concurrent_trials=2))
    env.wait_experiment(exp, 40)
    trials = env.trials(exp)
    print("trials:", [(t["id"], t["status"]) for t in trials])
    assert len(trials) == 4 and all(t["status"] == "TERMINATED" for t in trials), trials

    # scancel: Slurm's SIGTERM makes each worker drain and exit.
    cluster.run("scancel", job)
    wait_for(lambda: not worker_pids(job), 20, "the workers to exit after scancel")
    wait_for(lambda: job not in cluster.run("squeue", "-h", "-o", "%i", check=False), 20,
             "the job to leave the queue")
    out = job_out()
    assert out.count("drained: exiting") == 2, out
    # The script's workers take Slurm's SIGTERM as a preemption notice.
    assert out.count("preemption notice (SIGTERM)") == 2, out
    for bad in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert bad not in out, out

    # Without a binding (srun --cpu-bind=none, as under TaskPlugin=task/none)
    # each task's mask is the whole node: the script passes --cpus
    # $SLURM_CPUS_PER_TASK and the two workers claim distinct CPUs; --mem
    # is shared by the node's tasks.
    r = subprocess.run([slurm_lib.which("sbatch"), "--parsable", "--ntasks=2",
                        "--cpus-per-task=1", "--mem=400",
                        "--output=" + os.path.join(env.tmp, "job-%j.out"), SBATCH],
                       env=dict(run_env, SLURM_CPU_BIND="none"), cwd=env.tmp,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    assert r.returncode == 0, r.stdout
    job = env.job = r.stdout.strip().split(";")[0]
    ws = wait_for(registered, 30, "the two unbound workers to register")
    print("unbound, --mem=400:", {n: w["resources"] for n, w in ws.items()})
    pids = wait_for(lambda: (lambda p: len(p) == 2 and p)(worker_pids(job)), 10,
                    "the worker processes")
    masks = {t: mask_of(p) for t, p in pids.items()}
    assert masks[0] == masks[1] == "0-1", masks
    for w in ws.values():
        assert w["resources"]["cpu"] == 1 and w["resources"]["memory_mb"] == 200, (ws, job_out())
    # (slurmstepd forwards the tasks' output with a lag)
    claims = wait_for(lambda: (lambda c: len(c) == 2 and c)(
        sorted(re.findall(r"claimed CPU\(s\) (\d+) in", job_out()))), 10, "both claims logged")
    out = job_out()
    assert claims == ["0", "1"], out
    assert "already claimed" not in out, out
    cluster.run("scancel", job)
    wait_for(lambda: not worker_pids(job), 20, "the workers to exit after scancel")
    print("done in %.1f s" % (time.time() - t0))


def body_with_logs(env):
    env.cluster = None
    try:
        body(env)
    except BaseException:
        if getattr(env, "job_out", None):
            print("---- job output\n" + env.job_out()[-4000:])
        if env.cluster:
            print(env.cluster.logs())
        raise
    finally:
        if env.cluster:
            if getattr(env, "job", None):
                env.cluster.run("scancel", env.job, check=False)
                deadline = time.time() + 10
                while worker_pids(env.job) and time.time() < deadline:
                    time.sleep(0.1)
            env.cluster.cleanup()


main("slurm", body_with_logs)
