#!/usr/bin/env python3
"""Trials apart from their worker (docs/protocol.md#trial-environment), as any user:
1. a trial's environment holds what its config's `env` and the CTUNE_*
   protocol give it plus the documented base (PATH, HOME, LANG, ...), never
   the worker's CTUNE_TOKEN, its token file or any other variable of the
   worker's environment (unless --pass-env names it);
2. trial dirs are 0700, its logs 0600, the worker's outbox 0700 and lock 0600;
3. a trial that replaces checkpoint.bin by a symlink to a secret file
   outside its dir does not get that file uploaded: the worker refuses it,
   says so in its log, and the server has no checkpoint for the trial;
4. --trainables builtin: a command trial fails at once with reason
   bad_config and an error naming the flag; --allow-command: a program not
   on the list fails the same way, one on it (found through PATH) runs."""
import os
import stat
import sys

from harness import command_config, main, wait_for
from isolation_lib import (PY, TRIAL, WORKER, api, read_seen, start_authed_server, submit,
                           wait_ended)

SECRET = "secret-token-in-the-workers-env-42"


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def body(env):
    if not os.access(PY, os.X_OK):
        print("SKIP: no %s" % PY)
        sys.exit(77)
    tokens = start_authed_server(env)
    wenv = dict(os.environ, CTUNE_TOKEN=SECRET, MY_CLOUD_KEY="hunter2",
                LD_PRELOAD_NOT_REALLY="x", PASSED_ON="yes", LANG="C.UTF-8")
    w = env.start_worker("w1", "--token-file", tokens, "--pass-env", "PASSED_ON", env=wenv)

    # 1. The environment.
    cfg = command_config("env", [PY, TRIAL, "env"])
    cfg["trainable"]["env"] = {"FROM_CONFIG": "cfg-value"}
    exp = submit(env, cfg)
    t = wait_ended(env, exp)
    assert t["status"] == "TERMINATED", t
    seen = read_seen(env, "w1", t["id"])
    tenv = seen["env"]
    print("trial environment:", sorted(tenv))
    assert "CTUNE_TOKEN" not in tenv and "MY_CLOUD_KEY" not in tenv, tenv
    assert "LD_PRELOAD_NOT_REALLY" not in tenv, tenv
    for k, v in tenv.items():
        assert SECRET not in v and WORKER not in v and tokens not in v, (k, v)
    assert tenv["FROM_CONFIG"] == "cfg-value", tenv
    assert tenv["PASSED_ON"] == "yes", tenv
    assert tenv["LANG"] == "C.UTF-8", tenv
    assert tenv["CTUNE_TRIAL_ID"] == str(t["id"]), tenv
    assert tenv["CTUNE_CHECKPOINT_DIR"] == env.trial_dir("w1", t["id"]), tenv
    assert tenv["PATH"], tenv
    allowed = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
               "CTUNE_LOG_LEVEL", "CUDA_DEVICE_ORDER", "PASSED_ON", "FROM_CONFIG",
               "CTUNE_CONFIG", "CTUNE_TRIAL_ID", "CTUNE_CHECKPOINT_DIR", "CTUNE_RESUME",
               "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "CTUNE_GPU_MEM_LIMIT_MB", "PWD", "SHLVL", "_",
               # the trial's identity and starting point, Python unbuffered
               "CTUNE_TRIAL_NAME", "CTUNE_EXPERIMENT_ID", "CTUNE_TIME_ATTR", "CTUNE_METRIC",
               "CTUNE_MODE", "CTUNE_START_ITERATION", "CTUNE_START_TIME_TOTAL_S",
               "PYTHONUNBUFFERED"}
    extra = [k for k in tenv if k not in allowed and not k.startswith("LC_")]
    assert not extra, "variables the trial should not see: %s" % extra
    if os.geteuid() == 0:  # a root worker without --run-as says so, once
        assert w.log().count("running as root without --run-as") == 1, w.log()
    # The worker's own environment really held them (the test means something).
    with open("/proc/%d/environ" % w.pid, "rb") as f:
        assert SECRET.encode() in f.read()

    # 2. Modes.
    d = env.trial_dir("w1", t["id"])
    wd = env.work_dir("w1")
    assert mode(d) == 0o700, oct(mode(d))
    for name in ("stdout.log", "stderr.log"):
        assert mode(os.path.join(d, name)) == 0o600, (name, oct(mode(os.path.join(d, name))))
    assert "trial output line" in open(os.path.join(d, "stdout.log")).read()
    assert mode(os.path.join(wd, "outbox")) == 0o700, oct(mode(os.path.join(wd, "outbox")))
    assert mode(os.path.join(wd, "worker.lock")) == 0o600, oct(mode(os.path.join(wd, "worker.lock")))
    for root, dirs, files in os.walk(os.path.join(wd, "outbox")):
        for f in files:
            p = os.path.join(root, f)
            assert mode(p) & 0o077 == 0, (p, oct(mode(p)))

    # 3. A checkpoint that is a symlink to a secret outside the trial dir.
    secret = os.path.join(env.tmp, "secret.txt")
    with open(secret, "w") as f:
        f.write("TOP-SECRET-CONTENT " * 10)
    exp = submit(env, command_config("link", [PY, TRIAL, "link", secret]))
    t = wait_ended(env, exp)
    assert t["status"] == "TERMINATED", t
    wait_for(lambda: "refusing to read it" in w.log(), 10, "the worker to refuse the symlink")
    assert os.path.islink(os.path.join(env.trial_dir("w1", t["id"]), "checkpoint.bin"))
    status, data = api(env, "GET", "/api/v1/trials/%d/checkpoint" % t["id"], ok=None, raw=True)
    assert b"TOP-SECRET" not in data, data[:100]
    assert status == 404, (status, data[:200])
    print("refused:", [l for l in w.log().splitlines() if "refusing" in l][0][-160:])
    env.finish_workers()

    # 4. --trainables builtin refuses command trials at once.
    w2 = env.start_worker("w2", "--token-file", tokens, "--trainables", "builtin")
    exp = submit(env, command_config("refused", [PY, TRIAL, "env"], max_failures=0))
    t = wait_ended(env, exp)
    assert t["status"] == "ERROR", t
    assert "does not run command trainables" in (t["error"] or ""), t
    assert "--trainables" in t["error"], t
    assert not os.path.exists(os.path.join(env.trial_dir("w2", t["id"]), "seen.json"))
    env.finish_workers()
    assert "bad_config" in w2.log() or "cannot start" in w2.log(), w2.log()[-2000:]

    # --allow-command: sh is not on the list; python3 through PATH is.
    env.start_worker("w3", "--token-file", tokens, "--allow-command", PY)
    exp = submit(env, command_config("not-listed", ["sh", "-c", "echo hi"], max_failures=0))
    t = wait_ended(env, exp)
    assert t["status"] == "ERROR" and "not allowed" in (t["error"] or ""), t
    # (the trial's PATH decides which python3 that is: the worker's PATH may
    # find another one first, which is then refused too)
    cfg = command_config("listed", ["python3", TRIAL, "env"])
    cfg["trainable"]["env"] = {"PATH": os.path.dirname(PY) + ":/bin"}
    exp = submit(env, cfg)
    t = wait_ended(env, exp)
    assert t["status"] == "TERMINATED", t
    assert read_seen(env, "w3", t["id"])["uid"] == os.getuid()


main("isolation", body)
