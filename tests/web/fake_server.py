#!/usr/bin/env python3
"""A contract-shaped stand-in for ctune-server (HACKING.md's REST shapes), in memory.

Only for developing the dashboard without the daemon (`--demo N` fills it with
a running experiment); the browser tests always drive the real ctune-server.
"""
import argparse
import json
import math
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse, parse_qs

TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
         ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon"}


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.seq = 0
        self.experiments = {}
        self.trials = {}
        self.results = []          # (seq, trial_id, result)
        self.workers = {}
        self.logs = {}
        self.events = {}           # trial id -> [event] (issue 13: GET /trials/{id} "events")

    def bump(self):
        self.seq += 1
        return self.seq

    def create(self, cfg, rng):
        eid = len(self.experiments) + 1
        sched = dict(cfg.get("scheduler") or {"type": "fifo"})
        if sched.get("type") == "asha":
            gp, rf, mt = sched.get("grace_period", 1), sched.get("reduction_factor", 2), sched.get("max_t", 10)
            ms, t = [], gp
            while t <= mt:  # grace * rf^k up to max_t, as the server does
                ms.append({"t": t, "recorded": 0, "cutoff": None, "values": []})
                t *= rf
            sched["brackets"] = [{"index": 0, "stopped": 0, "milestones": ms}]
        exp = {"id": eid, "name": cfg.get("name", "exp%d" % eid), "status": "RUNNING",
               "metric": cfg.get("metric", "loss"), "mode": cfg.get("mode", "min"),
               "created_at": time.time(), "ended_at": None, "config": cfg, "scheduler": sched}
        self.experiments[eid] = exp
        for i in range(cfg.get("num_samples", 1)):
            conf = {}
            for k, v in (cfg.get("param_space") or {}).items():
                if isinstance(v, dict) and v.get("type") == "loguniform":
                    conf[k] = math.exp(rng.uniform(math.log(v["lower"]), math.log(v["upper"])))
                elif isinstance(v, dict) and v.get("type") == "choice":
                    conf[k] = rng.choice(v["values"])
                elif isinstance(v, dict) and v.get("type") == "pow2":
                    lo, hi = int(math.log2(v["lower"])), int(math.log2(v["upper"]))
                    conf[k] = 2 ** rng.randint(lo, hi)
                elif isinstance(v, dict) and "lower" in v:
                    conf[k] = rng.uniform(v["lower"], v["upper"])
                else:
                    conf[k] = v
            tid = len(self.trials) + 1
            self.trials[tid] = {"id": tid, "experiment_id": eid, "name": "%s_%05d" % (exp["name"], i),
                                "status": "PENDING", "stopped_early": False, "config": conf,
                                "resources": {"cpu": 1, "gpu": 0, "memory_mb": 0}, "iteration": 0,
                                "last_result": None, "error": None, "exit_code": None,
                                "num_failures": 0, "worker_id": None, "pending_reason": None,
                                "reason": None,
                                "created_at": time.time(), "started_at": None, "ended_at": None,
                                "updated_seq": self.bump()}
        return eid

    def exp_view(self, exp):
        ts = [t for t in self.trials.values() if t["experiment_id"] == exp["id"]]
        counts = {s: 0 for s in ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR")}
        best = None
        sign = 1 if exp["mode"] == "min" else -1
        for t in ts:
            counts[t["status"]] += 1
            v = (t["last_result"] or {}).get(exp["metric"])
            if isinstance(v, (int, float)) and (best is None or sign * v < sign * best["value"]):
                best = {"trial_id": t["id"], "value": v}
        sched = json.loads(json.dumps(exp["scheduler"]))
        for b in sched.get("brackets", []) if isinstance(sched.get("brackets"), list) else []:
            for m in b["milestones"]:
                m.pop("values", None)
        sa = (exp["config"].get("search_alg") or {}).get("type", "random")
        out = dict(exp, counts=counts, num_trials=exp.get("planned", len(ts)), num_created=len(ts),
                   best=best, scheduler=sched, search_alg=sa)
        return out

    def decide(self, tid, status, reason, kind, data=None, **extra):
        """A scheduler decision as issue 13's contract stores it: the trial's
        reason and status, and one trial_events row."""
        t = self.trials[tid]
        t.update(status=status, reason=reason, updated_seq=self.bump(), **extra)
        self.events.setdefault(tid, []).append(
            {"seq": self.bump(), "trial_id": tid, "experiment_id": t["experiment_id"],
             "time": time.time(), "kind": kind, "reason": reason, "data": data})

    def finish_check(self, eid):
        exp = self.experiments[eid]
        if all(t["status"] in ("TERMINATED", "ERROR") for t in self.trials.values()
               if t["experiment_id"] == eid) and exp["status"] == "RUNNING":
            exp["status"], exp["ended_at"] = "TERMINATED", time.time()

    def report(self, tid, res):
        t = self.trials[tid]
        exp = self.experiments[t["experiment_id"]]
        if exp["status"] == "CANCELLED":
            return "stop"
        it = res.get("training_iteration", 0)
        s = self.bump()
        self.results.append((s, tid, res))
        t.update(iteration=it, last_result=res, updated_seq=s)
        decision = "continue"
        sched = exp["scheduler"]
        if sched.get("type") == "asha":
            sign = -1 if exp["mode"] == "min" else 1
            v = sign * res.get(exp["metric"], float("nan"))
            for m in reversed(sched["brackets"][0]["milestones"]):
                if it >= m["t"] and m.get("trial_%d" % tid) is None:
                    vals = sorted(m["values"])
                    if vals:
                        q = (1 - 1 / sched.get("reduction_factor", 2)) * (len(vals) - 1)
                        lo = int(math.floor(q))
                        hi = min(lo + 1, len(vals) - 1)
                        cut = vals[lo] + (vals[hi] - vals[lo]) * (q - lo)
                        if v < cut:
                            decision = "stop"
                    m["values"].append(v)
                    m["trial_%d" % tid] = True
                    m["recorded"] = len(m["values"])
                    vs = sorted(m["values"])
                    q = (1 - 1 / sched.get("reduction_factor", 2)) * (len(vs) - 1)
                    lo = int(math.floor(q))
                    hi = min(lo + 1, len(vs) - 1)
                    m["cutoff"] = sign * (vs[lo] + (vs[hi] - vs[lo]) * (q - lo))
                    break
            if decision == "stop":
                sched["brackets"][0]["stopped"] += 1
            if it >= sched.get("max_t", 10):
                decision = "stop"
        return decision


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None
    web_dir = vendor_dir = token = None

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def err(self, code, c, msg):
        self.send_json(code, {"error": {"code": c, "message": msg, "path": self.path}})

    def static(self, root, rel):
        path = os.path.realpath(os.path.join(root, rel))
        if not path.startswith(os.path.realpath(root)) or not os.path.isfile(path):
            return self.err(404, "not_found", "no such file: " + rel)
        data = open(path, "rb").read()
        self.send_response(200)
        self.send_header("Content-Type", TYPES.get(os.path.splitext(path)[1], "application/octet-stream"))
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return raw

    def route(self, method):
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        p = [x for x in u.path.split("/") if x]
        raw = self.body() if method in ("POST", "PUT") else b""
        if p[:2] == ["api", "v1"] and self.token and \
                self.headers.get("Authorization") != "Bearer " + self.token:
            return self.err(401, "unauthorized", "missing or wrong bearer token")
        st = self.state
        if method == "GET" and (not p or p[0] != "api" and p[0] != "vendor"):
            return self.static(self.web_dir, "/".join(p) or "index.html")
        if method == "GET" and p[0] == "vendor":
            return self.static(self.vendor_dir, "/".join(p[1:]))
        p = p[2:]
        with st.lock:
            if p == ["experiments"] and method == "GET":
                return self.send_json(200, {"experiments": [st.exp_view(e) for e in st.experiments.values()]})
            if p == ["experiments"] and method == "POST":
                eid = st.create(json.loads(raw), random.Random(1))
                return self.send_json(201, {"id": eid})
            if len(p) >= 2 and p[0] == "experiments":
                exp = st.experiments.get(int(p[1]))
                if not exp:
                    return self.err(404, "not_found", "no experiment " + p[1])
                if len(p) == 2:
                    return self.send_json(200, st.exp_view(exp))
                since, limit = int(q.get("since", 0)), int(q.get("limit", 10 ** 9))
                if p[2] == "trials":
                    ts = [t for t in st.trials.values() if t["experiment_id"] == exp["id"] and t["updated_seq"] > since]
                    return self.send_json(200, {"trials": ts[:limit], "last_seq": st.seq})
                if p[2] == "results":
                    rs = [{"seq": s, "trial_id": t, "result": r} for s, t, r in st.results
                          if s > since and st.trials[t]["experiment_id"] == exp["id"]][:limit]
                    return self.send_json(200, {"results": rs, "last_seq": rs[-1]["seq"] if rs and len(rs) == limit else st.seq})
                if p[2] == "cancel" and method == "POST":
                    exp["status"], exp["ended_at"] = "CANCELLED", time.time()
                    for t in st.trials.values():
                        if t["experiment_id"] == exp["id"] and t["status"] in ("PENDING", "RUNNING"):
                            t.update(status="TERMINATED", updated_seq=st.bump(), ended_at=time.time())
                    return self.send_json(200, st.exp_view(exp))
            if len(p) >= 2 and p[0] == "trials":
                t = st.trials.get(int(p[1]))
                if not t:
                    return self.err(404, "not_found", "no trial " + p[1])
                if len(p) == 2:
                    return self.send_json(200, dict(t, events=st.events.get(t["id"], [])))
                if p[2] == "results" and method == "GET":
                    return self.send_json(200, {"results": [r for s, i, r in st.results if i == t["id"]]})
                if p[2] == "results":
                    return self.send_json(200, {"decision": st.report(t["id"], json.loads(raw))})
                if p[2] == "logs" and method == "GET":
                    return self.send_json(200, {"trial_id": t["id"], "log": st.logs.get(t["id"], "")})
                if p[2] == "logs":
                    st.logs[t["id"]] = raw.decode()
                    return self.send_json(200, {})
                if p[2] in ("complete", "fail"):
                    body = json.loads(raw or b"{}")
                    t.update(status="TERMINATED" if p[2] == "complete" else "ERROR",
                             ended_at=time.time(), updated_seq=st.bump(),
                             error=body.get("error"), exit_code=body.get("exit_code"))
                    st.finish_check(t["experiment_id"])
                    return self.send_json(200, {})
            if p == ["workers"] and method == "GET":
                return self.send_json(200, {"workers": list(st.workers.values())})
            if p == ["workers"]:
                b = json.loads(raw)
                wid = len(st.workers) + 1
                st.workers[wid] = {"id": wid, "name": b["name"], "resources": b["resources"],
                                   "free": dict(b["resources"]), "running_trials": [],
                                   "last_heartbeat": time.time(), "status": "alive"}
                return self.send_json(201, {"id": wid, "heartbeat_interval_s": 5, "lease_timeout_s": 30})
            if len(p) == 3 and p[0] == "workers" and p[2] == "lease":
                w = st.workers[int(p[1])]
                for t in st.trials.values():
                    if t["status"] == "PENDING" and st.experiments[t["experiment_id"]]["status"] == "RUNNING":
                        t.update(status="RUNNING", worker_id=w["id"], started_at=time.time(), updated_seq=st.bump())
                        w["running_trials"].append(t["id"])
                        return self.send_json(200, {"trial": t})
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if len(p) == 3 and p[0] == "workers" and p[2] == "heartbeat":
                st.workers[int(p[1])]["last_heartbeat"] = time.time()
                return self.send_json(200, {"stop": []})
        return self.err(404, "not_found", "no route " + u.path)

    def do_GET(self):
        if urlparse(self.path).path == "/api/v1/events":
            return self.events()
        self.route("GET")

    def events(self):
        """GET /api/v1/events (issue 14), coarse: one "trial" event per change
        of the fake's counter (the dashboard only uses an event as "fetch
        now"), ids = the counter, Last-Event-ID honoured, keepalives."""
        st = self.state
        try:
            last = int(self.headers.get("Last-Event-ID") or parse_qs(urlparse(self.path).query).get("since", ["-1"])[0])
        except ValueError:
            return self.err(400, "invalid_header", "Last-Event-ID must be an integer")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.close_connection = True
        quiet = time.time()
        try:
            while True:
                with st.lock:
                    seq = st.seq
                if last < 0:
                    last = seq
                if seq > last:
                    last = seq
                    self.wfile.write(b"id: %d\nevent: trial\ndata: {}\n\n" % seq)
                    self.wfile.flush()
                    quiet = time.time()
                elif time.time() - quiet > 15:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    quiet = time.time()
                time.sleep(0.2)
        except OSError:
            return

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")


def demo(st, n, iters):
    """Fills the fake with an experiment and keeps a few trials running."""
    cfg = {"name": "fmnist-asha", "metric": "loss", "mode": "min", "num_samples": n,
           "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
                           "l1": {"type": "pow2", "lower": 4, "upper": 256},
                           "batch_size": {"type": "choice", "values": [16, 32, 64]},
                           "momentum": 0.9},
           "scheduler": {"type": "asha", "time_attr": "training_iteration", "max_t": iters,
                         "grace_period": 1, "reduction_factor": 2, "brackets": 1},
           "trainable": {"type": "builtin", "model": "cnn", "dataset": "fashion-mnist"}}
    rng = random.Random(7)
    with st.lock:
        eid = st.create(cfg, rng)
        st.workers[1] = {"id": 1, "name": "gpu-box", "resources": {"cpu": 8, "gpu": 2, "memory_mb": 32000},
                         "free": {"cpu": 6, "gpu": 2, "memory_mb": 30000}, "running_trials": [],
                         "last_heartbeat": time.time(), "status": "alive"}
        ids = [t["id"] for t in st.trials.values() if t["experiment_id"] == eid]
        for tid in ids[: max(1, n - 3)]:
            t = st.trials[tid]
            t.update(status="RUNNING", worker_id=1, started_at=time.time())
            base = 0.3 + rng.random() * 1.5
            for it in range(1, iters + 1):
                loss = base * math.exp(-0.15 * it) + rng.random() * 0.02
                if st.report(tid, {"training_iteration": it, "loss": loss, "accuracy": 1 - loss / 3}) == "stop":
                    t.update(stopped_early=it < iters)
                    break
            t.update(status="TERMINATED", ended_at=time.time())
        if len(ids) > 2:
            st.trials[ids[1]].update(status="ERROR", error="loss is NaN at iteration 3", exit_code=5)
            st.logs[ids[1]] = "epoch 1 loss 0.9\nepoch 2 loss 3.1\nerror: diverged\n"
        for tid in ids[-3:]:
            st.trials[tid].update(status="RUNNING", worker_id=1, started_at=time.time())
            st.workers[1]["running_trials"].append(tid)
        st.trials[ids[-1]].update(status="PENDING", worker_id=None,
                                  pending_reason="needs cpu 64 but the largest worker has 8")


def decisions(st):
    """Issue 13's visible decisions: a HyperBand experiment with paused,
    promoted and stopped trials (9 planned, 6 created), and a PBT experiment
    whose trial 3 exploited trial 1 twice. Returns {role: trial id}."""
    rng = random.Random(3)
    hb = {"name": "fmnist-hb", "metric": "loss", "mode": "min", "num_samples": 6,
          "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
                          "momentum": {"type": "uniform", "lower": 0.5, "upper": 0.99}},
          "scheduler": {"type": "hyperband", "time_attr": "training_iteration", "max_t": 9,
                        "reduction_factor": 3},
          "trainable": {"type": "builtin", "model": "mlp", "dataset": "fashion-mnist"}}
    pbt = {"name": "fmnist-pbt", "metric": "loss", "mode": "min", "num_samples": 4,
           "param_space": {"lr": {"type": "loguniform", "lower": 1e-3, "upper": 1e-1},
                           "momentum": {"type": "uniform", "lower": 0.5, "upper": 0.99}},
           "search_alg": {"type": "random"},
           "scheduler": {"type": "pbt", "time_attr": "training_iteration", "perturbation_interval": 3,
                         "quantile_fraction": 0.25, "resample_probability": 0.25},
           "trainable": {"type": "builtin", "model": "mlp", "dataset": "fashion-mnist"}}
    roles = {}
    with st.lock:
        e1 = st.create(hb, rng)
        st.experiments[e1]["planned"] = 9
        ids = [t["id"] for t in st.trials.values() if t["experiment_id"] == e1]
        for i, tid in enumerate(ids):
            t = st.trials[tid]
            t.update(status="RUNNING", worker_id=1, started_at=time.time())
            for it in range(1, (3 if i < 4 else 1) + 1):
                st.report(tid, {"training_iteration": it, "loss": 1.0 - 0.1 * it - 0.02 * i})
        a, b, c, d, e, f = ids
        st.decide(a, "PAUSED", "paused at rung 1 (t=3)", "paused", worker_id=None)
        st.decide(b, "PAUSED", "paused at rung 1 (t=3)", "paused", worker_id=None)
        st.decide(c, "TERMINATED", "stopped at t=3: 0.96 worse than the top 1 of 3 trials at rung 1 "
                  "(cutoff 0.64)", "stopped", stopped_early=True, worker_id=None, ended_at=time.time())
        st.decide(d, "PAUSED", "paused at rung 1 (t=3)", "paused")
        st.decide(d, "RUNNING", "promoted from rung 1 (top 1 of 3)", "promoted")
        st.trials[e].update(status="PENDING", worker_id=None)
        st.trials[f].update(status="PENDING", worker_id=None)
        roles.update(hb_exp=e1, paused=a, stopped=c, promoted=d)

        e2 = st.create(pbt, rng)
        ids = [t["id"] for t in st.trials.values() if t["experiment_id"] == e2]
        for i, tid in enumerate(ids):
            st.trials[tid].update(status="RUNNING", worker_id=1, started_at=time.time(),
                                  config={"lr": [0.002, 0.01, 0.05, 0.001][i], "momentum": 0.9})
            for it in range(1, 7):
                st.report(tid, {"training_iteration": it, "loss": 0.9 - 0.05 * it + 0.1 * (i == 3)})
        donor, low = ids[1], ids[3]
        old = dict(st.trials[low]["config"])
        mid = {"lr": 0.0008, "momentum": 0.9}
        st.decide(low, "RUNNING", "exploited trial %d at t=3: lr 0.001 → 0.0008" % donor, "exploited",
                  {"donor": donor, "t": 3, "old_config": old, "new_config": mid}, config=mid)
        new = {"lr": 0.012, "momentum": 0.72}
        st.decide(low, "RUNNING", "exploited trial %d at t=6: lr 0.0008 → 0.012, momentum 0.9 → 0.72" % donor,
                  "exploited", {"donor": donor, "t": 6, "old_config": mid, "new_config": new}, config=new)
        roles.update(pbt_exp=e2, donor=donor, exploited=low)
        if 1 not in st.workers:
            st.workers[1] = {"id": 1, "name": "box", "resources": {"cpu": 8, "gpu": 0, "memory_mb": 8000},
                             "free": {"cpu": 2, "gpu": 0, "memory_mb": 8000}, "running_trials": [],
                             "last_heartbeat": time.time(), "status": "alive"}
    return roles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--web-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "web"))
    ap.add_argument("--vendor-dir", default="/usr/share/javascript")
    ap.add_argument("--token")
    ap.add_argument("--demo", type=int, default=0, help="trials in a generated experiment")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--decisions", action="store_true",
                    help="fill it with issue 13's decisions: a HyperBand and a PBT experiment")
    a = ap.parse_args()
    Handler.state = State()
    Handler.web_dir, Handler.vendor_dir, Handler.token = a.web_dir, a.vendor_dir, a.token
    if a.demo:
        demo(Handler.state, a.demo, a.iters)
    roles = decisions(Handler.state) if a.decisions else None
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print("listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    if roles:
        print("decisions: " + json.dumps(roles), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
