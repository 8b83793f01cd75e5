"""Shared by test_isolation.py and test_run_as.py: a server with a token file
(admin and worker tokens), the admin API, and trial waits."""
import json
import os

from harness import ctune_harness, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
TRIAL = os.path.join(HERE, "isolation_trial.py")
PY = "/usr/bin/python3"
ADMIN = "adm-iso-0123456789abcdef"
WORKER = "wrk-iso-0123456789abcdef"


def start_authed_server(env):
    """Starts the server with a token file; returns the file's path."""
    tokens = os.path.join(env.tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("admin=%s\nworker=%s\n" % (ADMIN, WORKER))
    os.chmod(tokens, 0o600)
    env.start_server("--token-file", tokens)
    return tokens


def api(env, method, path, body=None, ok=(200, 201, 204), raw=False):
    client = ctune_harness.JsonClient.for_url(env.url, token=ADMIN, timeout=10, keep_alive=False)
    status, data, _ = client.request(method, path, body,
                                     headers={"Content-Type": "application/json"})
    if ok and status not in ok:
        raise AssertionError("%s %s -> %d %s" % (method, path, status, data[:300]))
    if raw:
        return status, data
    return json.loads(data) if data else None


def submit(env, cfg):
    return api(env, "POST", "/api/v1/experiments", cfg)["id"]


def first_trial(env, exp):
    return api(env, "GET", "/api/v1/experiments/%d/trials" % exp)["trials"][0]


def wait_ended(env, exp, timeout=30):
    """The experiment's first trial once it is TERMINATED or ERROR."""
    return wait_for(lambda: (lambda t: t["status"] in ("TERMINATED", "ERROR") and t)(
        first_trial(env, exp)), timeout, "experiment %d's trial to end" % exp)


def read_seen(env, worker, trial_id):
    path = os.path.join(env.trial_dir(worker, trial_id), "seen.json")
    wait_for(lambda: os.path.exists(path), 20, "the trial to write " + path)
    with open(path) as f:
        return json.load(f)
