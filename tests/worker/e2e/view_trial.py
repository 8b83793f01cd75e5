#!/usr/bin/env python3
"""Trial for test_trial_view.py.
usage: view_trial.py victim      print a result, then save checkpoint.bin
                                 (VICTIM-CHECKPOINT), and exit 0
       view_trial.py evil SPEC   SPEC (JSON: server, work_dir, token_file,
                                 victim): try to read what a trial must not
                                 (the worker's identity, token file, outbox
                                 and lock, another trial's dir, and the same
                                 through /proc/<pid>/root of the worker and
                                 its supervisors); with any worker secret
                                 found, PUT a forged final checkpoint for the
                                 victim. Writes what it got to
                                 <ckpt dir>/seen.json, prints one result."""
import http.client
import json
import os
import sys
import urllib.parse
import zlib

d = os.environ["CTUNE_CHECKPOINT_DIR"]


def result():
    print(json.dumps({"training_iteration": 1, "loss": 0.5}), flush=True)


if sys.argv[1] == "victim":
    result()
    with open(os.path.join(d, "checkpoint.bin.tmp"), "wb") as f:
        f.write(b"VICTIM-CHECKPOINT")
    os.rename(os.path.join(d, "checkpoint.bin.tmp"), os.path.join(d, "checkpoint.bin"))
    sys.exit(0)

spec = json.loads(sys.argv[2])
wd = spec["work_dir"]
got, refused = {}, {}


def attempt(name, fn):
    try:
        got[name] = fn()
    except OSError as e:
        refused[name] = "%s: %s" % (e.__class__.__name__, e.strerror)


def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


attempt("identity", lambda: read(os.path.join(wd, "identity")))
attempt("identity via ..", lambda: read(os.path.join(d, "..", "..", "identity")))
attempt("identity via cwd", lambda: read(os.path.join("..", "..", "identity")))
attempt("token file", lambda: read(spec["token_file"]))
attempt("outbox", lambda: os.listdir(os.path.join(wd, "outbox")))
attempt("worker.lock", lambda: read(os.path.join(wd, "worker.lock")))
attempt("victim dir", lambda: os.listdir(os.path.join(wd, "trials", str(spec["victim"]))))
attempt("victim checkpoint",
        lambda: read(os.path.join(wd, "trials", str(spec["victim"]), "checkpoint.bin")))
attempt("victim checkpoint via cwd",
        lambda: read(os.path.join("..", str(spec["victim"]), "checkpoint.bin")))
# What the trial may list of trials/: its own dir only.
attempt("trials", lambda: sorted(os.listdir(os.path.join(wd, "trials"))))
# The worker and the supervisors see the work dir: their /proc/<pid>/root.
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        cmdline = read("/proc/%s/cmdline" % pid)
    except OSError:
        continue
    if "ctune-worker" not in cmdline:
        continue
    attempt("/proc/%s/root identity" % pid,
            lambda: read("/proc/%s/root%s/identity" % (pid, wd)))
    attempt("/proc/%s/environ" % pid, lambda: read("/proc/%s/environ" % pid))

secret = wid = None
for k, v in got.items():
    if "identity" in k:
        ident = json.loads(v)
        secret, wid = ident["secret"], ident["id"]
if secret:
    data = b"POISONED-CHECKPOINT"
    u = urllib.parse.urlparse(spec["server"])
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("PUT", "/api/v1/trials/%d/checkpoint" % spec["victim"], data,
              {"Authorization": "Bearer " + secret, "X-Ctune-Lease": "%d:1" % wid,
               "X-Ctune-Iteration": "1", "X-Ctune-Crc32": "%08x" % zlib.crc32(data),
               "Content-Type": "application/octet-stream"})
    got["forged upload"] = c.getresponse().status
with open(os.path.join(d, "seen.json.tmp"), "w") as f:
    json.dump({"got": got, "refused": refused, "uid": os.getuid()}, f)
os.rename(os.path.join(d, "seen.json.tmp"), os.path.join(d, "seen.json"))
result()
