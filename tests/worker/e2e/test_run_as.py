#!/usr/bin/env python3
"""ctune-worker --run-as USER (needs root; skips otherwise): a command trial
runs as that user (uid, gid, no root group), with that user's HOME; its
trial dir (0700) and logs (0600) belong to it, and the worker's outbox and
lock stay the worker's (0700/0600). A worker not started as root refuses
--run-as, and --run-as root is refused."""
import os
import pwd
import stat
import subprocess
import sys

from harness import command_config, main
from isolation_lib import PY, TRIAL, read_seen, start_authed_server, submit, wait_ended


def body(env):
    if os.geteuid() != 0:
        print("SKIP: --run-as needs the test to run as root")
        sys.exit(77)
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        print("SKIP: no user 'nobody'")
        sys.exit(77)
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    # The trial's user must get through every parent of the work dir.
    os.chmod(env.tmp, 0o711)
    tokens = start_authed_server(env)
    w = env.start_worker("w1", "--token-file", tokens, "--run-as", "nobody")
    exp = submit(env, command_config("as-nobody", [PY, TRIAL, "env"]))
    t = wait_ended(env, exp)
    assert t["status"] == "TERMINATED", t
    seen = read_seen(env, "w1", t["id"])
    print("trial ran as uid %d gid %d groups %s, HOME %s" % (
        seen["uid"], seen["gid"], seen["groups"], seen["env"].get("HOME")))
    assert seen["uid"] == user.pw_uid and seen["euid"] == user.pw_uid, seen
    assert seen["gid"] == user.pw_gid, seen
    assert 0 not in seen["groups"], seen
    assert seen["env"]["HOME"] == user.pw_dir, seen["env"]
    assert seen["env"]["USER"] == "nobody", seen["env"]
    d = env.trial_dir("w1", t["id"])
    st = os.lstat(d)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (user.pw_uid, 0o700), (st.st_uid, oct(st.st_mode))
    for name in ("stdout.log", "stderr.log", "seen.json"):
        st = os.lstat(os.path.join(d, name))
        assert st.st_uid == user.pw_uid and stat.S_IMODE(st.st_mode) == 0o600, (
            name, st.st_uid, oct(st.st_mode))
    wd = env.work_dir("w1")
    for name, want in (("outbox", 0o700), ("worker.lock", 0o600)):
        st = os.lstat(os.path.join(wd, name))
        assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == want, (name, st.st_uid,
                                                                      oct(st.st_mode))
    assert "running as root without --run-as" not in w.log(), w.log()
    assert "trials run as user nobody" in w.log(), w.log()

    # Refused setups: --run-as root, and --run-as by a worker that is not root.
    worker = os.path.join(env.bin, "ctune-worker")
    r = subprocess.run([worker, "--server", env.url, "--run-as", "root",
                        "--work-dir", os.path.join(env.tmp, "w-root")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "unprivileged" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run([worker, "--server", env.url, "--run-as", "nobody",
                        "--work-dir", os.path.join(env.tmp, "w-user")],
                       capture_output=True, text=True, timeout=10,
                       preexec_fn=lambda: (os.setgid(user.pw_gid), os.setuid(user.pw_uid)))
    assert r.returncode == 2 and "needs a worker started as root" in r.stderr, (
        r.returncode, r.stderr)


main("run-as", body)
