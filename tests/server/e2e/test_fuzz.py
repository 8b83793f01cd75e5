"""Random requests (fixed seed) to every route of ctune-server: it never
answers 5xx, every JSON reply parses (valid UTF-8), and it stops cleanly
(under ASan in the sanitizer build)."""
import json
import random

from ctune_e2e import Server, Runner, experiment

VALUES = [None, True, False, 0, -1, 1, 2, 1e308, -1e308, 0.5, "x", "", [], {}, [1, 2], {"a": 1},
          "1", 2 ** 63, -2 ** 63]
PATHS = ["/api/v1/experiments", "/api/v1/experiments/1", "/api/v1/experiments/1/trials",
         "/api/v1/experiments/1/results", "/api/v1/experiments/1/best",
         "/api/v1/experiments/1/cancel", "/api/v1/trials/1", "/api/v1/trials/2/results",
         "/api/v1/trials/3/complete", "/api/v1/trials/4/fail", "/api/v1/trials/1/checkpoint",
         "/api/v1/trials/1/logs", "/api/v1/workers", "/api/v1/workers/1/heartbeat",
         "/api/v1/workers/1/lease", "/healthz", "/metrics", "/", "/api/v1/trials/99/results"]
KEYS = ["training_iteration", "loss", "name", "resources", "free", "running", "error",
        "exit_code", "reason", "cpu", "gpu", "memory_mb", "metric", "num_samples",
        "param_space", "scheduler", "trainable"]
QUERIES = ["", "?since=-5", "?since=abc", "?limit=0", "?limit=99999999999999999999",
           "?offset=-1", "?metric=", "?mode=x", "?scope=all", "?dry_run=true",
           "?metric=%22&mode=max", "?since=%ff"]


def test_random_requests():
    s = Server()
    asha = {"type": "asha", "max_t": 4, "grace_period": 1, "reduction_factor": 2}
    s.ok("POST", "/api/v1/experiments", experiment(n=5, sched=asha), status=201)
    s.ok("POST", "/api/v1/workers", {"name": "w", "resources": {"cpu": 5}})
    rng = random.Random(5)
    for i in range(1500):
        method = rng.choice(["GET", "POST", "PUT", "DELETE"])
        path = rng.choice(PATHS) + rng.choice(QUERIES)
        r = rng.random()
        if r < 0.3:
            body = json.dumps({rng.choice(KEYS): rng.choice(VALUES) for _ in range(rng.randint(0, 4))})
        elif r < 0.5:
            body = json.dumps(rng.choice(VALUES))
        elif r < 0.7:
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 50)))
        else:
            body = json.dumps({"training_iteration": rng.randint(0, 6),
                               "loss": rng.choice([None, 0.1, 5, -3])})
        headers = {"X-Ctune-Iteration": rng.choice(["1", "-1", "x", ""]),
                   "X-Ctune-Crc32": rng.choice(["00000000", "zz", "123"])}
        st, b, _ = s.request(method, path, body, headers=headers)  # parses JSON replies
        assert st < 500, (method, path, body, st, b)
        if i % 100 == 0:
            s.request("POST", "/api/v1/workers/1/lease", {})
    s.stop()


if __name__ == "__main__":
    r = Runner()
    r.run(test_random_requests)
    r.done()
