#!/usr/bin/env python3
"""--token-file: against a server started with --token-file (admin= and
worker= lines) the worker authenticates with the same file (it takes the
worker= line) and runs a trial; a worker without the token is refused,
says so, and runs nothing."""
import os
import urllib.request

from harness import TRAINABLE, command_config, main, wait_for


def body(env):
    tokens = os.path.join(env.tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("admin=adm-secret-0123456789\nworker=wrk-secret-0123456789\n")
    os.chmod(tokens, 0o600)  # the server refuses a token file others may read
    env.start_server("--token-file", tokens)
    admin = {"Authorization": "Bearer adm-secret-0123456789", "Content-Type": "application/json"}

    def api(method, path, body=None):
        import json
        req = urllib.request.Request(env.url + path, method=method, headers=admin,
                                     data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    bad = env.start_worker("nokey")
    wait_for(lambda: "cannot register" in bad.log(), 10, "the refused worker to say so")
    print("refused:", [l for l in bad.log().splitlines() if "cannot register" in l][0][-160:])
    good = env.start_worker("keyed", "--token-file", tokens)
    exp = api("POST", "/api/v1/experiments",
              command_config("auth", ["sh", TRAINABLE, "3", "0.05"]))["id"]
    t = wait_for(lambda: (lambda t: t["status"] == "TERMINATED" and t)(
        api("GET", "/api/v1/experiments/%d/trials" % exp)["trials"][0]), 20, "the trial to finish")
    assert t["iteration"] == 3, t
    log = api("GET", "/api/v1/trials/%d/logs" % t["id"])["log"]
    assert "trial=%d" % t["id"] in log, log
    workers = api("GET", "/api/v1/workers")["workers"]
    assert [x["name"] for x in workers] == ["keyed"], workers
    assert good.alive() and bad.alive()


main("auth", body)
