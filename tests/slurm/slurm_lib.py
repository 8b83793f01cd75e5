"""A real single-node Slurm for tests, in a temp dir: its own munge key and
munged socket, a slurm.conf on free ports (SlurmUser=root,
proctrack/linuxproc, task/affinity, select/cons_tres, NodeName=localhost
CPUs=<this machine's>), state and spool dirs under the temp dir, and
slurmctld -D / slurmd -D as child processes (no systemd). Needs root and
Debian's slurm-wlm and munge; see deploy/slurm/README.md."""
import os
import shutil
import signal
import socket
import subprocess
import time

SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def which(prog):
    for d in SBIN + tuple(os.environ.get("PATH", "").split(":")):
        p = os.path.join(d, prog)
        if d and os.access(p, os.X_OK):
            return p
    return None


def missing():
    """What this machine lacks to run the cluster, or None."""
    if os.geteuid() != 0:
        return "not root (slurmd runs jobs as root here: SlurmUser=root)"
    for prog in ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue",
                 "scancel", "sinfo"):
        if not which(prog):
            return "%s is not installed (Debian: apt-get install slurm-wlm munge)" % prog
    return None


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Cluster:
    def __init__(self, tmp, cpus=2):
        self.tmp = tmp
        self.cpus = cpus
        self.procs = []
        self.dir = os.path.join(tmp, "slurm")
        for d in ("munge", "state", "spool", "log"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        os.chmod(os.path.join(self.dir, "munge"), 0o700)
        self.sock = os.path.join(self.dir, "munge", "munge.socket")
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def log(self, name):
        try:
            with open(os.path.join(self.dir, "log", name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def logs(self):
        return "\n".join("---- %s\n%s" % (n, self.log(n)[-3000:])
                         for n in ("munged.log", "slurmctld.log", "slurmd.log"))

    def _spawn(self, argv, name):
        out = open(os.path.join(self.dir, "log", name + ".out"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                             start_new_session=True)
        out.close()
        self.procs.append(p)
        return p

    def start(self, timeout=30):
        m = os.path.join(self.dir, "munge")
        key = os.path.join(m, "munge.key")
        subprocess.run([which("mungekey"), "--create", "--keyfile", key], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        os.chmod(key, 0o600)
        # --force: the temp dir's parents (/tmp) are world-writable, which
        # munged refuses by default.
        self._spawn([which("munged"), "-F", "--force", "--key-file", key, "--socket", self.sock,
                     "--pid-file", os.path.join(m, "munged.pid"),
                     "--seed-file", os.path.join(m, "munged.seed"),
                     "--log-file", os.path.join(self.dir, "log", "munged.log")], "munged")
        deadline = time.time() + 10
        while not os.path.exists(self.sock):
            if time.time() > deadline or self.procs[-1].poll() is not None:
                raise RuntimeError("munged did not start:\n" + self.logs())
            time.sleep(0.05)
        ctld_port, slurmd_port = free_ports(2)
        d = self.dir
        with open(self.conf, "w") as f:
            f.write("""# written by tests/slurm/slurm_lib.py
ClusterName=ctunetest
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=10
SlurmdTimeout=30
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""".format(ctld=ctld_port, slurmd=slurmd_port, sock=self.sock, d=d, cpus=self.cpus))
        self._spawn([which("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld")
        self._spawn([which("slurmd"), "-D", "-N", "localhost", "-f", self.conf], "slurmd")
        deadline = time.time() + timeout
        while True:
            r = subprocess.run([which("sinfo"), "-h", "-N", "-o", "%N %T"], env=self.env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode == 0 and "localhost idle" in r.stdout:
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("%s exited %d:\n%s" % (p.args[0], p.returncode,
                                                              self.logs()))
            if time.time() > deadline:
                raise RuntimeError("the node did not become idle (sinfo: %s):\n%s" %
                                   (r.stdout.strip(), self.logs()))
            time.sleep(0.2)

    def run(self, *argv, check=True):
        r = subprocess.run([which(argv[0])] + list(argv[1:]), env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        if check and r.returncode != 0:
            raise RuntimeError("%s -> %d: %s" % (" ".join(argv), r.returncode, r.stdout))
        return r.stdout

    def stop(self):
        # slurmd first (it ends the job steps it runs), then the controller,
        # then munged; SIGKILL whatever does not stop in time.
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except OSError:
                    pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(5)
        self.procs = []

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
