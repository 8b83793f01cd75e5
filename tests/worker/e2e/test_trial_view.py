#!/usr/bin/env python3
"""A trial cannot act as its worker (supervise_private_view): it cannot read
the worker's identity (id + secret), token file, outbox or lock, nor another
trial's dir, neither by path nor through /proc/<pid>/root of the worker or
its supervisors; so a forged final checkpoint for another experiment's
ended trial cannot even be tried, and the victim's stored checkpoint stays
as it was. The worker says at start how trials are kept apart. Four ways
(needs root to set up; skips otherwise):
1. the worker as an unprivileged user, trials as that same user (the
   systemd unit's DynamicUser, `ctune run`): a user namespace per trial;
2. a root worker with --run-as nobody: the same, made after the drop;
3. a root worker with --run-as nobody where no user namespace can be made
   (no_userns.py): a mount namespace made as root, the same refusals;
4. an unprivileged worker where no user namespace can be made: the worker
   says loudly at start that trials can act as it, and they can (the
   trial reads the identity and its forged upload is taken): what
   docs/worker.md says of that case."""
import json
import os
import pwd
import shutil
import sys

from harness import Proc, command_config, ctune_harness, main, wait_for
from isolation_lib import PY, api, start_authed_server, submit, wait_ended

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "view_trial.py")
NO_USERNS = os.path.join(HERE, "no_userns.py")


def scenario(env, name, worker_args, as_user, tokens, wrap=None, says="user"):
    """One worker (as_user: started as that user; wrap: no_userns.py's
    arguments), started from a cwd that only root may enter (as a root
    worker often is: the trials' user could not make its view there)."""
    wd = env.work_dir(name)
    # CPU claims in a run dir of the test's own, not /tmp/ctune-<uid>.
    run = os.path.join(env.tmp, "run-" + name)
    os.makedirs(run)
    cwd = os.path.join(env.tmp, "cwd-" + name)
    os.makedirs(cwd)
    os.chmod(cwd, 0o700 if not as_user else 0o755)
    if as_user:
        # The worker's own user runs it, with a token file of its own.
        for d in (run, cwd):
            os.chown(d, as_user.pw_uid, as_user.pw_gid)
        os.makedirs(wd)
        os.chown(wd, as_user.pw_uid, as_user.pw_gid)
        own = os.path.join(env.tmp, "tokens-" + name)
        shutil.copy(tokens, own)
        os.chown(own, as_user.pw_uid, as_user.pw_gid)
        tokens = own
    prefix = ["env", "-C", cwd]
    if wrap:
        prefix += ["/usr/bin/python3", NO_USERNS] + wrap
    elif as_user:
        prefix += ["setpriv", "--reuid=%d" % as_user.pw_uid, "--regid=%d" % as_user.pw_gid,
                   "--clear-groups"]
    cmd = prefix + [os.path.abspath(os.path.join(env.bin, "ctune-worker")), "--server", env.url, "--name", name,
                    "--work-dir", wd, "--poll-ms", "200", "--stop-grace-s", "3",
                    "--token-file", tokens] + worker_args
    w = ctune_harness.spawn(cmd, os.path.join(env.tmp, "worker-%s.log" % name),
                            "worker " + name, output="log", new_session=True,
                            env=dict(os.environ, CTUNE_RUN_DIR=run))
    env.procs.append(w)
    wait_for(lambda: "trials see only their own dir" in w.log() or "TRIALS CAN ACT" in w.log(),
             10, "the worker to say how trials are kept apart")
    want = {"user": "(a user and mount namespace each)",
            "mount": "(a mount namespace each, made as root; no user namespace: ",
            "none": "error TRIALS CAN ACT AS THIS WORKER: no private view"}[says]
    assert want in w.log(), w.log()[-3000:]

    victim = wait_ended(env, submit(env, command_config("victim", [PY, TRIAL, "victim"])))
    assert victim["status"] == "TERMINATED", victim
    path = "/api/v1/trials/%d/checkpoint" % victim["id"]
    wait_for(lambda: api(env, "GET", path, ok=None, raw=True)[0] == 200, 10,
             "the victim's checkpoint")
    spec = {"server": env.url, "work_dir": wd, "token_file": tokens, "victim": victim["id"]}
    evil = wait_ended(env, submit(env, command_config(
        "evil", [PY, TRIAL, "evil", json.dumps(spec)])))
    assert evil["status"] == "TERMINATED", evil
    with open(os.path.join(env.trial_dir(name, evil["id"]), "seen.json")) as f:
        seen = json.load(f)
    print("%s: trial uid %d refused %s" % (name, seen["uid"], sorted(seen["refused"])))
    got = seen["got"]
    st, data = api(env, "GET", path, ok=None, raw=True)
    if says == "none":  # as the worker said: the trial acts as the worker
        assert "identity" in got and got["forged upload"] == 200, seen
        assert data == b"POISONED-CHECKPOINT", data[:100]
        env.finish_workers()
        return
    # The victim's stored checkpoint is the one its own trial saved.
    assert (st, data) == (200, b"VICTIM-CHECKPOINT"), (st, data[:100], got.get("forged upload"))
    # It sees its own dir under trials/, and nothing else of the work dir;
    # the token file reads empty (an empty file covers it).
    # (a mount namespace made as root: trials/ is the cover's 0711 dir)
    assert got.pop("trials", None) == [str(evil["id"])] or (
        says == "mount" and "trials" in seen["refused"]), seen
    if "token file" in got:
        assert got.pop("token file") == "", seen
    else:
        assert "token file" in seen["refused"], seen
    assert not got, "the trial read what it must not: %s" % got
    for what in ("identity", "identity via ..", "identity via cwd", "outbox", "worker.lock",
                 "victim dir", "victim checkpoint", "victim checkpoint via cwd"):
        assert what in seen["refused"], (what, seen)
    assert any(k.startswith("/proc/") for k in seen["refused"]), seen  # it did try
    env.finish_workers()


def body(env):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP: needs root (to start a worker as another user) and setpriv")
        sys.exit(77)
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        print("SKIP: no user 'nobody'")
        sys.exit(77)
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    os.chmod(env.tmp, 0o711)  # nobody reaches its work dir and the trial script
    tokens = start_authed_server(env)
    scenario(env, "unprivileged", [], nobody, tokens)
    scenario(env, "run-as", ["--run-as", "nobody"], None, tokens)
    scenario(env, "mount-only", ["--run-as", "nobody"], None, tokens, wrap=["root", "--mount"],
             says="mount")
    scenario(env, "no-userns", [], nobody, tokens, wrap=["nobody"], says="none")


main("trial-view", body)
