#!/usr/bin/env python3
"""Gang trials across two hosts (docs/worker.md#gang-members): two workers
in network namespaces of their own, joined by a bridge on which the server
listens, each too small for all the members of a trial. A 2-member and a
4-member trial of a real PyTorch DDP script (gloo on the CPU) meet through
torchrun's variables: the allreduce works, only rank 0's results are
stored, and after a kill -9 of one member's worker mid-trial every other
member is gone within two heartbeat intervals and the trial resumes as a
whole from its checkpoint on both workers, with no result lost or
duplicated. Needs root (ip netns) and Debian's python3-torch: skips
without them."""
import atexit
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import ctune_harness  # noqa: E402
from harness import SKIP, Env, main, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"  # Debian's, with python3-torch
HB = 1.0  # heartbeat interval (s)
TAG = "cg%d" % (os.getpid() % 100000)
NET = "10.%d.%d" % (200 + os.getpid() % 50, (os.getpid() // 50) % 250)
IFACE = "gang0"


def sh(*cmd, check=True):
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=check)


def net_down():
    for ns in ("a", "b"):
        sh("ip", "netns", "del", TAG + ns, check=False)
    sh("ip", "link", "del", TAG + "br", check=False)


def net_up():
    """Two hosts: namespaces a (NET.2) and b (NET.3) on a bridge (NET.1)."""
    atexit.register(net_down)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: sys.exit(1))
    sh("ip", "link", "add", TAG + "br", "type", "bridge")
    sh("ip", "addr", "add", NET + ".1/24", "dev", TAG + "br")
    sh("ip", "link", "set", TAG + "br", "up")
    for k, ns in enumerate(("a", "b")):
        name, outer, inner = TAG + ns, TAG + ns + "0", TAG + ns + "1"
        sh("ip", "netns", "add", name)
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        sh("ip", "link", "set", inner, "netns", name)
        sh("ip", "link", "set", outer, "master", TAG + "br", "up")
        # One name on every host: gloo is told which interface to use.
        sh("ip", "-n", name, "link", "set", inner, "name", IFACE)
        sh("ip", "-n", name, "addr", "add", "%s.%d/24" % (NET, k + 2), "dev", IFACE)
        sh("ip", "-n", name, "link", "set", IFACE, "up")
        sh("ip", "-n", name, "link", "set", "lo", "up")


def usable():
    if os.geteuid() != 0:
        return "not root (ip netns)"
    try:
        sh("ip", "netns", "list")
    except (OSError, subprocess.CalledProcessError):
        return "no ip netns"
    if subprocess.run([PY, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        return "%s has no torch with gloo (python3-torch)" % PY
    return None


class HostsEnv(Env):
    """The suite's Env with the server on the bridge and each worker in its
    namespace."""

    def start_server(self, *args, **kw):
        db = os.path.join(self.tmp, "ctune.db")
        proc = ctune_harness.start_server(
            self.bin, db=db, bind=NET + ".1", args=args, log_path=os.path.join(self.tmp, "server.log"),
            text=True, new_session=True, wait=False, name="server")
        self.procs.append(proc)
        proc.await_listening()
        self.url, self.port, self.server_proc = proc.url, proc.port, proc
        self.token_file = db + ".tokens"
        self.admin_token = ctune_harness.read_tokens(self.token_file).get("admin")
        return proc

    def start_host(self, ns, cpus):
        name = "w" + ns
        cmd = ["ip", "netns", "exec", TAG + ns, os.path.join(self.bin, "ctune-worker"),
               "--server", self.url, "--name", name, "--work-dir", self.work_dir(name),
               "--poll-ms", "200", "--stop-grace-s", "2", "--token-file", self.token_file,
               "--cpus", str(cpus), "--no-cgroup"]
        proc = ctune_harness.spawn(cmd, os.path.join(self.tmp, "worker-%s-%d.log" % (name, len(self.procs))),
                                   "worker " + name, output="log", new_session=True)
        self.procs.append(proc)
        return proc


def gang_config(name, members, cpu, iters, hold=None):
    argv = [PY, os.path.join(HERE, "gang_ddp.py"), str(iters)] + ([hold] if hold else [])
    return {"name": name, "metric": "loss", "mode": "min", "num_samples": 1, "max_failures": 2,
            "param_space": {"x": {"type": "uniform", "lower": 0, "upper": 1}},
            "resources_per_trial": {"cpu": cpu, "num_workers": members},
            "trainable": {"type": "command", "argv": argv,
                          "env": {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": IFACE}}}


def check_results(env, exp, members, iters):
    t = env.trials(exp)[0]
    res = [r.get("result", r) for r in env.results(t["id"])]
    its = [r["training_iteration"] for r in res]
    assert its == list(range(1, iters + 1)), its  # none lost, none twice, rank 0's only
    for r in res:
        assert r["world"] == members and r["sum"] == members * (members + 1) / 2, r
        # DDP averaged the gradients (rank + 1) of every member.
        assert abs(r["grad"] - (members + 1) / 2) < 1e-6, r
        assert r["restored_everywhere"], r
    return t, res


def member_pids(env, trial_id):
    """The member processes of a trial (not their supervisors)."""
    mark = ("CTUNE_TRIAL_ID=%d\0" % trial_id).encode()
    found = []
    for p in env.trial_processes():
        try:
            with open("/proc/%d/environ" % p, "rb") as f, open("/proc/%d/cmdline" % p, "rb") as c:
                if mark in f.read() and c.read().startswith(PY.encode() + b"\0"):
                    found.append(p)
        except OSError:
            pass
    return found


def body(env):
    net_up()
    env.start_server("--heartbeat-interval", str(HB), "--lease-timeout", "4")
    # Each host holds 2 CPUs: neither holds all members of either trial.
    env.start_host("a", 2)
    hb = env.start_host("b", 2)
    two = env.submit(gang_config("two", 2, 2, 3))
    env.wait_experiment(two, 120)
    t, _ = check_results(env, two, 2, 3)
    assert t["status"] == "TERMINATED" and t["num_failures"] == 0, t
    # Rank 1's output is its own section of the trial's log (its last
    # upload may follow rank 0's end).
    logs = "/api/v1/trials/%d/logs" % t["id"]
    wait_for(lambda: "rank 1 of 2: iteration 3 sum 3" in env.api("GET", logs)["log"], 10,
             "rank 1's log")

    # Four members, two per host; worker b dies after the first checkpoint.
    hold = os.path.join(env.tmp, "hold")
    open(hold, "w").close()
    four = env.submit(gang_config("four", 4, 1, 4, hold))
    tid = wait_for(lambda: env.trials(four)[0]["id"], 60, "the 4-member trial")
    wait_for(lambda: env.results(tid), 120, "its first result")
    wait_for(lambda: env.trial(tid)["has_checkpoint"], 30, "its first checkpoint stored")
    on_b = set(member_pids(env, tid)) - set(p for p in member_pids(env, tid)
                                            if b"/work-wa/" in open("/proc/%d/environ" % p, "rb").read())
    assert len(member_pids(env, tid)) == 4 and len(on_b) == 2
    os.kill(hb.pid, signal.SIGKILL)
    hb.p.wait(10)
    t0 = time.monotonic()
    wait_for(lambda: not on_b & set(member_pids(env, tid)), 10, "worker b's members gone")
    gone_b = time.monotonic() - t0
    os.unlink(hold)
    wait_for(lambda: not member_pids(env, tid), 20, "every member gone")
    gone = time.monotonic() - t0
    print("after the kill: worker b's members gone in %.2f s, all in %.2f s" % (gone_b, gone))
    assert gone <= 2 * HB, gone
    env.start_host("b", 2)
    env.wait_experiment(four, 180)
    t, res = check_results(env, four, 4, 4)
    assert t["status"] == "TERMINATED" and t["attempt"] >= 2, t
    assert res[-1]["start"] >= 1, res  # the second attempt resumed from the checkpoint


if __name__ == "__main__":
    why = usable()
    if why:
        print("SKIP: " + why)
        sys.exit(SKIP)
    main("gang", body, HostsEnv)
