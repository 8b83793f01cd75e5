#!/usr/bin/env python3
"""A contract-shaped stand-in for ctune-server (the REST shapes of
docs/protocol.md#rest-api-v1), in memory.

Only for developing the dashboard without the daemon (`--demo N` fills it with
a running experiment); the browser tests always drive the real ctune-server.
"""
import argparse
import json
import math
import os
import random
import re
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse, parse_qs


def server_csp():
    """The real server's Content-Security-Policy, read from its one source
    (server/api/static_path.c), so the fake serves the dashboard under the
    same rules: a page the real server's browser would refuse fails here."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "server", "api",
                       "static_path.c")
    with open(src) as f:
        text = f.read()
    head = text.index('{"Content-Security-Policy",') + len('{"Content-Security-Policy",')
    body = text[head:text.index("}", head)]
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body))


CSP = server_csp()

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
        self.events = {}           # trial id -> [event] (GET /trials/{id} "events")
        self.attempts = {}         # trial id -> [event] (GET /trials/{id} "attempts")

    def bump(self):
        self.seq += 1
        return self.seq

    def create(self, cfg, rng):
        eid = max(self.experiments, default=0) + 1  # ids are never reused, even after a delete
        sched = dict(cfg.get("scheduler") or {"type": "fifo"})
        if sched.get("type") == "asha":
            gp, rf, mt = sched.get("grace_period", 1), sched.get("reduction_factor", 2), sched.get("max_t", 10)
            ms, t = [], gp
            while t <= mt:  # grace * rf^k up to max_t, as the server does
                ms.append({"t": t, "recorded": 0, "cutoff": None, "values": []})
                t *= rf
            sched["brackets"] = [{"index": 0, "stopped": 0, "milestones": ms}]
        exp = {"id": eid, "name": cfg.get("name", "exp%d" % eid), "status": "RUNNING",
               "priority": cfg.get("priority", 1), "notes": cfg.get("notes", ""), "tags": list(cfg.get("tags", [])),
               "max_concurrent_trials": cfg.get("max_concurrent_trials", 0),
               "metric": cfg.get("metric", "loss"), "mode": cfg.get("mode", "min"),
               "created_at": time.time(), "ended_at": None, "config": cfg, "scheduler": sched}
        self.experiments[eid] = exp
        self.add_trials(exp, 0, cfg.get("num_samples", 1), rng)
        return eid

    def add_trials(self, exp, first, n, rng):
        cfg, eid = exp["config"], exp["id"]
        for i in range(first, first + n):
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
            tid = max(self.trials, default=0) + 1
            self.trials[tid] = {"id": tid, "experiment_id": eid, "name": "%s_%05d" % (exp["name"], i),
                                "status": "PENDING", "stopped_early": False, "config": conf,
                                "resources": {"cpu": 1, "gpu": 0, "memory_mb": 0}, "iteration": 0,
                                "last_result": None, "error": None, "exit_code": None,
                                "num_failures": 0, "worker_id": None, "pending_reason": None,
                                "reason": None,
                                "created_at": time.time(), "started_at": None, "ended_at": None,
                                "updated_seq": self.bump()}

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
        """A scheduler decision as the contract stores it
        (docs/protocol.md#decisions-and-trial-events): the trial's
        reason and status, and one trial_events row."""
        t = self.trials[tid]
        t.update(status=status, reason=reason, updated_seq=self.bump(), **extra)
        self.events.setdefault(tid, []).append(
            {"seq": self.bump(), "trial_id": tid, "experiment_id": t["experiment_id"],
             "time": time.time(), "kind": kind, "reason": reason, "data": data})

    # The controls, as docs/protocol.md#experiment-control states them (a fake: trials
    # pause at once instead of at their next result).
    def control(self, exp, action, body, query):
        """(status, payload) of POST pause|resume, PATCH and DELETE."""
        live = [t for t in self.trials.values() if t["experiment_id"] == exp["id"]]
        if action == "pause":
            if exp["status"] not in ("RUNNING", "PAUSED"):
                return 409, ("not_running", "experiment %d is %s: only a running experiment pauses" % (exp["id"], exp["status"]))
            exp["status"] = "PAUSED"
            for t in live:
                if t["status"] == "RUNNING":
                    self.decide(t["id"], "PAUSED", "paused by user", "paused", worker_id=None)
            return 200, self.exp_view(exp)
        if action == "resume":
            if exp["status"] not in ("RUNNING", "PAUSED"):
                return 409, ("not_paused", "experiment %d is %s: only a paused experiment resumes" % (exp["id"], exp["status"]))
            exp["status"] = "RUNNING"
            for t in live:
                if t["status"] == "PAUSED":
                    self.decide(t["id"], "PENDING", "resumed by user", "resumed")
            return 200, self.exp_view(exp)
        if action == "patch":
            if not isinstance(body, dict):
                return 400, ("invalid", "the body must be a JSON object", "")
            allowed = {"num_samples", "max_concurrent_trials", "priority", "notes", "tags", "scheduler"}
            for k in body:
                if k not in allowed:
                    return 400, ("invalid", "%s cannot be changed" % k, k)
            cfg, sched = exp["config"], exp["scheduler"]
            n_now = cfg.get("num_samples", 1)
            num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
            if "num_samples" in body and (not isinstance(body["num_samples"], int) or body["num_samples"] < n_now):
                return 400, ("invalid", "num_samples must be an integer >= %d (only up)" % n_now, "num_samples")
            if "max_concurrent_trials" in body and (not isinstance(body["max_concurrent_trials"], int)
                                                    or body["max_concurrent_trials"] < 0):
                return 400, ("invalid", "max_concurrent_trials must be an integer >= 0", "max_concurrent_trials")
            if "priority" in body and (not num(body["priority"]) or body["priority"] <= 0):
                return 400, ("invalid", "priority must be a number > 0", "priority")
            if "notes" in body and (not isinstance(body["notes"], str) or len(body["notes"]) > 4096):
                return 400, ("invalid", "notes must be a string of at most 4096 characters", "notes")
            if "tags" in body:
                tags = body["tags"]
                if not isinstance(tags, list) or len(tags) > 32:
                    return 400, ("invalid", "tags must be an array of at most 32 strings", "tags")
                for i, t in enumerate(tags):
                    if not isinstance(t, str) or not 1 <= len(t) <= 64:
                        return 400, ("invalid", "tags[%d] must be a string of 1 to 64 characters" % i, "tags[%d]" % i)
            mt = None
            if "scheduler" in body:
                sb = body["scheduler"]
                if not isinstance(sb, dict) or set(sb) - {"max_t"}:
                    return 400, ("invalid", "only scheduler.max_t can be changed", "scheduler")
                mt = sb.get("max_t")
                if not num(mt) or "max_t" not in sched or mt < sched["max_t"]:
                    return 400, ("invalid", "scheduler.max_t must be a number >= %s (only up)" % sched.get("max_t"),
                                 "scheduler.max_t")
            for k in ("max_concurrent_trials", "priority", "notes", "tags"):
                if k in body:
                    exp[k] = body[k]
            grew = False
            if "num_samples" in body and body["num_samples"] > n_now:
                self.add_trials(exp, n_now, body["num_samples"] - n_now, random.Random(exp["id"]))
                cfg["num_samples"] = body["num_samples"]
                grew = True
            if mt is not None and mt > sched["max_t"]:
                sched["max_t"] = cfg.setdefault("scheduler", {})["max_t"] = mt
                grew = True
            if grew and exp["status"] == "TERMINATED":
                exp["status"], exp["ended_at"] = "RUNNING", None
            self.bump()
            return 200, self.exp_view(exp)
        if action == "delete":
            running = [t for t in live if t["status"] == "RUNNING"]
            if running and query.get("force") != "1":
                return 409, ("running", "experiment %d has %d running trial%s: stop them first or delete with force=1"
                             % (exp["id"], len(running), "" if len(running) == 1 else "s"))
            ids = {t["id"] for t in live}
            for tid in ids:
                del self.trials[tid]
                self.events.pop(tid, None)
                self.logs.pop(tid, None)
            self.results = [r for r in self.results if r[1] not in ids]
            del self.experiments[exp["id"]]
            self.bump()
            return 200, {"id": exp["id"], "deleted": True}
        raise ValueError(action)

    def stop_trial(self, t):
        if t["status"] not in ("RUNNING", "PAUSED", "PENDING"):
            return 409, ("not_live", "trial %d is %s already" % (t["id"], t["status"]))
        self.decide(t["id"], "TERMINATED", "stopped by user", "stopped", worker_id=None, ended_at=time.time())
        self.finish_check(t["experiment_id"])
        return 200, dict(t, events=self.events.get(t["id"], []))

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
    viewer_token = None      # a read-only token: GETs only, as the server's viewer
    role_header = True       # X-Ctune-Role on authenticated replies (--no-role-header: an older server)
    requests = []            # the state-changing API requests, for the tests (GET /__fake/requests)
    page_delay = 0.0         # --page-delay: seconds before each later page of a trial list
    pages_released = threading.Event()  # set by GET /__fake/release-pages: no more delay
    streams = 0              # event streams open now (GET /__fake/streams)

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        if getattr(self, "role", None) and self.role_header:
            self.send_header("X-Ctune-Role", self.role)
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
        self.send_header("Content-Security-Policy", CSP)
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
        raw = self.body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
        self.role = None
        if p == ["__fake", "requests"]:
            return self.send_json(200, {"requests": Handler.requests})
        if p == ["__fake", "streams"]:
            return self.send_json(200, {"open": Handler.streams})
        if p[:2] == ["api", "v1"] and method in ("POST", "PATCH", "DELETE"):
            # The server's cross-site rules (auth_head.c): a same-site Origin,
            # and JSON bodies only.
            origin = self.headers.get("Origin")
            host = self.headers.get("Host")
            if (origin and origin.split("://", 1)[-1] != host) or self.headers.get("Sec-Fetch-Site") == "cross-site":
                return self.err(403, "bad_origin", "cross-site request refused (Origin '%s')" % origin)
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if raw and ctype != "application/json":
                return self.err(415, "unsupported_media_type", "%s takes Content-Type: application/json" % u.path)
        if p[:2] == ["api", "v1"] and self.token:
            auth = self.headers.get("Authorization")
            if auth == "Bearer " + self.token:
                self.role = "admin"
            elif self.viewer_token and auth == "Bearer " + self.viewer_token:
                self.role = "viewer"
            else:
                return self.err(401, "unauthorized", "missing or wrong bearer token")
            if self.role == "viewer" and method != "GET":
                return self.err(403, "forbidden", "a viewer token cannot call %s %s" % (method, u.path))
        if p[:2] == ["api", "v1"] and method in ("POST", "PATCH", "DELETE"):
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode(errors="replace")
            Handler.requests.append({"method": method, "path": u.path, "query": u.query, "body": parsed,
                                     "content_type": self.headers.get("Content-Type"),
                                     "origin": self.headers.get("Origin")})
        st = self.state
        if method == "GET" and (not p or p[0] != "api" and p[0] != "vendor"):
            return self.static(self.web_dir, "/".join(p) or "index.html")
        if method == "GET" and p[0] == "vendor":
            return self.static(self.vendor_dir, "/".join(p[1:]))
        p = p[2:]
        with st.lock:
            if p == ["experiments"] and method == "GET":
                qt, tag = q.get("q", "").lower(), q.get("tag")
                es = [e for e in st.experiments.values()
                      if (not qt or qt in e["name"].lower() or qt in e["notes"].lower()
                          or any(qt in t.lower() for t in e["tags"]))
                      and (not tag or tag in e["tags"])]
                return self.send_json(200, {"experiments": [st.exp_view(e) for e in es]})
            if p == ["experiments"] and method == "POST":
                eid = st.create(json.loads(raw), random.Random(1))
                return self.send_json(201, {"id": eid})
            if len(p) >= 2 and p[0] == "experiments":
                exp = st.experiments.get(int(p[1]))
                if not exp:
                    return self.err(404, "not_found", "no experiment " + p[1])
                ctl = ("patch" if method == "PATCH" and len(p) == 2 else "delete" if method == "DELETE" and len(p) == 2
                       else p[2] if method == "POST" and len(p) == 3 and p[2] in ("pause", "resume") else None)
                if ctl:
                    code, out = st.control(exp, ctl, json.loads(raw) if raw else {}, q)
                    if code != 200:
                        return self.send_json(code, {"error": {"code": out[0], "message": out[1],
                                                               "path": out[2] if len(out) > 2 else u.path}})
                    return self.send_json(200, out)
                if len(p) == 2:
                    return self.send_json(200, st.exp_view(exp))
                since, limit = int(q.get("since", 0)), int(q.get("limit", 10 ** 9))
                if p[2] == "trials" and "since" not in q:
                    # Pages as the server's: 1000 by default, in
                    # creation order; the cursor is the index after the page.
                    ts = [t for t in st.trials.values() if t["experiment_id"] == exp["id"]]
                    first, limit = int(q.get("cursor", 0)), int(q.get("limit", 1000))
                    end = min(len(ts), first + limit)
                    return self.send_json(200, {"trials": ts[first:end], "last_seq": st.seq, "total": len(ts),
                                                "next_cursor": str(end) if end < len(ts) else None})
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
                    return self.send_json(200, dict(t, events=st.events.get(t["id"], []),
                                                    attempts=st.attempts.get(t["id"], [])))
                if p[2] == "stop" and method == "POST":
                    code, out = st.stop_trial(t)
                    if code != 200:
                        return self.send_json(code, {"error": {"code": out[0], "message": out[1], "path": u.path}})
                    return self.send_json(200, out)
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
                        t.update(status="RUNNING", worker_id=w["id"], started_at=time.time(), updated_seq=st.bump(),
                                 attempt=t.get("attempt", 0) + 1)
                        w["running_trials"].append(t["id"])
                        return self.send_json(200, {"trial": t})
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if len(p) == 3 and p[0] == "workers" and p[2] == "release-quarantine" and method == "POST":
                w = st.workers.get(int(p[1]))
                if not w:
                    return self.err(404, "unknown_worker", "worker %s is not registered" % p[1])
                if w["status"] != "quarantined":
                    return self.err(409, "not_quarantined", "worker %s is not quarantined" % p[1])
                w.update(status="alive", quarantine_reason=None)
                return self.send_json(200, w)
            if len(p) == 3 and p[0] == "workers" and p[2] == "heartbeat":
                st.workers[int(p[1])]["last_heartbeat"] = time.time()
                return self.send_json(200, {"stop": []})
        return self.err(404, "not_found", "no route " + u.path)

    def do_GET(self):
        u = urlparse(self.path)
        if u.path == "/api/v1/events":
            return self.events()
        if u.path == "/__fake/release-pages":
            self.pages_released.set()
            return self.send_json(200, {"released": True})
        if self.page_delay and u.path.endswith("/trials") and "cursor=" in u.query:
            # --page-delay: the later pages of a trial list come slowly (the
            # page must show the first one meanwhile), or as soon as a test
            # that has checked that says so. Outside the lock.
            self.pages_released.wait(self.page_delay)
        self.route("GET")

    def events(self):
        """GET /api/v1/events, coarse: one "trial" event per change
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
        with self.state.lock:
            Handler.streams += 1
        try:
            while True:
                # The browser closed it (the page left): stop at once, so
                # /__fake/streams counts the streams a browser really holds.
                if select.select([self.connection], [], [], 0)[0] and \
                        not self.connection.recv(1, socket.MSG_PEEK):
                    return
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
        finally:
            with self.state.lock:
                Handler.streams -= 1

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_PATCH(self):
        self.route("PATCH")

    def do_DELETE(self):
        self.route("DELETE")


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
    """Visible decisions: a HyperBand experiment with paused,
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


def outcomes(st):
    """Outcomes: an experiment whose every trial ended in ERROR, and one
    whose lowest loss is an ERROR trial's beside a good trial, that trial's
    history of attempts (a lost worker, a resume) mixed with a decision.
    Returns {role: id}."""
    rng = random.Random(9)
    cfg = {"metric": "loss", "mode": "min", "num_samples": 2,
           "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
           "scheduler": {"type": "fifo"}, "trainable": {"type": "command", "argv": ["python3", "train.py"]}}
    roles = {}
    with st.lock:
        ea = st.create(dict(cfg, name="all-crash"), rng)
        for tid in [t["id"] for t in st.trials.values() if t["experiment_id"] == ea]:
            st.trials[tid].update(status="RUNNING", started_at=time.time())
            st.report(tid, {"training_iteration": 1, "loss": 0.3})
            st.trials[tid].update(status="ERROR", ended_at=time.time(), exit_code=1, num_failures=1,
                                  error="trial_exit: your program exited with status 1\nRuntimeError: boom")
        st.finish_check(ea)
        eb = st.create(dict(cfg, name="mixed"), rng)
        bad, good = [t["id"] for t in st.trials.values() if t["experiment_id"] == eb]
        for tid, loss in ((bad, 0.1), (good, 0.5)):
            st.trials[tid].update(status="RUNNING", started_at=time.time())
            st.report(tid, {"training_iteration": 1, "loss": loss})
        st.trials[bad].update(status="ERROR", ended_at=time.time(), exit_code=1,
                              error="trial_exit: your program exited with status 1")
        st.trials[good].update(status="TERMINATED", ended_at=time.time())
        # Outcome constraints: the failed one also violated one, by 400.
        st.trials[bad].update(feasible=False, violation=400)
        st.trials[good].update(feasible=True, violation=0)
        st.finish_check(eb)
        now = time.time()

        def att(seq, kind, reason, attempt, wid, it):
            return {"seq": seq, "trial_id": good, "experiment_id": eb, "time": now, "kind": kind,
                    "reason": reason, "data": {"attempt": attempt, "worker_id": wid, "iteration": it}}
        st.attempts[good] = [
            att(st.bump(), "leased", "attempt 1 leased to worker 1 (w1), from the start", 1, 1, None),
            att(st.bump(), "lease_lost", "attempt 1 on worker 1 (w1) ended at iteration 3: lease expired: "
                "its worker was lost (no heartbeat for 30 s)", 1, 1, 3)]
        st.events[good] = [{"seq": st.bump(), "trial_id": good, "experiment_id": eb, "time": now,
                            "kind": "stop_rule", "reason": "stop rule: loss 0.5 <= 0.5", "data": None}]
        st.attempts[good].append(att(st.bump(), "leased", "attempt 2 leased to worker 2 (w2), resuming "
                                     "from its checkpoint at iteration 3", 2, 2, 3))
        # Preemptions (not failures) and the work they lost.
        st.experiments[eb]["preemptions"] = {"count": 2, "lost_iterations": 3, "lost_seconds": 4.5}
        roles.update(all_error_exp=ea, mixed_exp=eb, error_trial=bad, good_trial=good)
    return roles


def failures(st):
    """Failures told apart: an experiment of 12 trials over lr and batch
    where the 4 with the highest lr end in ERROR with one error (config),
    3 others failed once with a CUDA error on a worker now quarantined
    (machine) and ended well elsewhere, the rest ended well; that worker.
    Returns {role: id}."""
    rng = random.Random(4)
    cfg = {"name": "flaky", "metric": "loss", "mode": "min", "num_samples": 12,
           "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1},
                           "batch": {"type": "choice", "values": [16, 64]}},
           "scheduler": {"type": "fifo"}, "trainable": {"type": "command", "argv": ["python3", "train.py"]}}
    with st.lock:
        eid = st.create(cfg, rng)
        ids = sorted((t["id"] for t in st.trials.values() if t["experiment_id"] == eid),
                     key=lambda i: st.trials[i]["config"]["lr"])
        for tid in ids:
            st.trials[tid].update(status="RUNNING", started_at=time.time())
            st.report(tid, {"training_iteration": 1, "loss": 0.5})
            st.trials[tid].update(status="TERMINATED", ended_at=time.time())
        for k, tid in enumerate(ids[-4:]):
            st.trials[tid].update(status="ERROR", attribution="config", num_failures=1,
                                  error="internal: loss exploded at step %d" % (10 + k),
                                  error_signature="internal: loss exploded at step N")
        for tid in ids[:3]:
            st.trials[tid].update(attribution="machine",
                                  error="trial_exit: your program exited with status 1\n"
                                        "RuntimeError: CUDA error: an illegal memory access (device 0x%x)" % tid,
                                  error_signature="trial_exit: RuntimeError: CUDA error: an illegal "
                                                  "memory access (device 0xN)")
        st.finish_check(eid)
        st.workers[1] = {"id": 1, "name": "good-box", "resources": {"cpu": 8, "gpu": 1, "memory_mb": 8000},
                         "free": {"cpu": 8, "gpu": 1, "memory_mb": 8000}, "running_trials": [],
                         "last_heartbeat": time.time(), "status": "alive", "quarantine_reason": None}
        st.workers[2] = {"id": 2, "name": "bad-gpu", "resources": {"cpu": 8, "gpu": 1, "memory_mb": 8000},
                         "free": {"cpu": 8, "gpu": 1, "memory_mb": 8000}, "running_trials": [],
                         "last_heartbeat": time.time(), "status": "quarantined",
                         "quarantine_reason": "failed 3 trials in a row (the last: trial_exit: RuntimeError: "
                                              "CUDA error: an illegal memory access (device 0xN)) while "
                                              "worker 1 (good-box) succeeded"}
    return {"failures_exp": eid, "config_trials": ids[-4:], "machine_trials": ids[:3], "bad_worker": 2}


def control(st):
    """The controls: a running ASHA experiment (two trials running,
    one done, one pending; tagged, with notes) and a finished one.
    Returns {role: id}."""
    rng = random.Random(5)
    a = {"name": "ctl-asha", "metric": "loss", "mode": "min", "num_samples": 4, "max_concurrent_trials": 4,
         "tags": ["baseline", "cnn"], "notes": "first try with the CNN",
         "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
         "scheduler": {"type": "asha", "time_attr": "training_iteration", "max_t": 8,
                       "grace_period": 1, "reduction_factor": 2, "brackets": 1},
         "trainable": {"type": "command", "argv": ["true"]}}
    b = {"name": "ctl-sweep", "metric": "loss", "mode": "min", "num_samples": 2,
         "tags": ["lr-sweep"], "notes": "a sweep over the learning rate",
         "param_space": {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 1e-1}},
         "scheduler": {"type": "fifo"}, "trainable": {"type": "command", "argv": ["true"]}}
    with st.lock:
        ea = st.create(a, rng)
        ids = [t["id"] for t in st.trials.values() if t["experiment_id"] == ea]
        for i, tid in enumerate(ids[:3]):
            st.trials[tid].update(status="RUNNING", worker_id=1, started_at=time.time())
            for it in (1, 2):
                st.report(tid, {"training_iteration": it, "loss": 0.9 - 0.1 * it - 0.05 * i})
        st.trials[ids[2]].update(status="TERMINATED", ended_at=time.time(), worker_id=None)
        eb = st.create(b, rng)
        for tid in [t["id"] for t in st.trials.values() if t["experiment_id"] == eb]:
            st.trials[tid].update(status="RUNNING", started_at=time.time())
            st.report(tid, {"training_iteration": 1, "loss": 0.5})
            st.trials[tid].update(status="TERMINATED", ended_at=time.time())
        st.finish_check(eb)
        st.workers[1] = {"id": 1, "name": "box", "resources": {"cpu": 8, "gpu": 0, "memory_mb": 8000},
                         "free": {"cpu": 6, "gpu": 0, "memory_mb": 8000}, "running_trials": ids[:2],
                         "last_heartbeat": time.time(), "status": "alive"}
    return {"running_exp": ea, "finished_exp": eb, "run1": ids[0], "run2": ids[1], "done": ids[2], "pending": ids[3]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--web-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "web"))
    ap.add_argument("--vendor-dir", default="/usr/share/javascript")
    ap.add_argument("--token")
    ap.add_argument("--demo", type=int, default=0, help="trials in a generated experiment")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--page-delay", type=float, default=0.0,
                    help="seconds before answering each trial-list page after the first "
                         "(GET /__fake/release-pages ends the wait at once, for good)")
    ap.add_argument("--decisions", action="store_true",
                    help="fill it with scheduler decisions: a HyperBand and a PBT experiment")
    ap.add_argument("--control", action="store_true",
                    help="fill it for the controls: a running and a finished experiment")
    ap.add_argument("--outcomes", action="store_true",
                    help="fill it with outcomes: an all-ERROR experiment, a mixed one, attempts, "
                         "failures told apart and a quarantined worker")
    ap.add_argument("--viewer-token", help="a read-only token (GETs only; the server's viewer=)")
    ap.add_argument("--no-role-header", action="store_true",
                    help="send no X-Ctune-Role (as a server that predates it)")
    a = ap.parse_args()
    Handler.state = State()
    Handler.web_dir, Handler.vendor_dir, Handler.token = a.web_dir, a.vendor_dir, a.token
    Handler.viewer_token, Handler.role_header = a.viewer_token, not a.no_role_header
    Handler.page_delay = a.page_delay
    if a.demo:
        demo(Handler.state, a.demo, a.iters)
    roles = decisions(Handler.state) if a.decisions else None
    if a.control:
        roles = control(Handler.state)
    if a.outcomes:
        roles = outcomes(Handler.state)
        roles.update(failures(Handler.state))
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print("listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    if roles:
        print(("control: " if a.control else "outcomes: " if a.outcomes else "decisions: ")
              + json.dumps(roles), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
