"""A client for ctune-server's REST API v1 (schema/openapi.yaml), urllib only.

Finds its server and token as the `ctune` CLI does (docs/cli.md): url, else
CTUNE_SERVER, else http://127.0.0.1:8470; token, else token_file, else
CTUNE_TOKEN, else (a loopback server) ctune.db.tokens in the current folder,
the file ctune-server writes beside its default database."""
import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib

from ._errors import CtuneError

DEFAULT_SERVER = "http://127.0.0.1:8470"
FINISHED = ("TERMINATED", "CANCELLED")
SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")


def read_token_file(path):
    """The admin token of a token file: the `admin=` line of the server's own
    file, else the first line that is not `worker=` (a file holding the token
    alone). As the CLI reads it (cli/http.c)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise CtuneError(f"cannot read token file {path}: {e.strerror}", code="bad_token_file",
                         path=path) from None
    admin = first = None
    for line in lines:
        t = line.strip()
        if not t or t.startswith("#"):
            continue
        key = t[:6].rstrip("=: \t")
        if t.startswith("admin") and len(t) > 5 and t[5] in "=: \t":
            admin = t[5:].strip().lstrip("=:").strip()
        elif key == "worker" and len(t) > 6 and t[6] in "=: \t":
            continue
        elif first is None:
            first = t
    tok = admin or first
    if not tok:
        raise CtuneError(f"token file {path} holds no token (expected a line 'admin=<token>' or "
                         f"the token alone)", code="bad_token_file", path=path)
    return tok


def _is_loopback(url):
    host = urllib.parse.urlsplit(url).hostname or ""
    return host.startswith("127.") or host in ("localhost", "::1")


class Client:
    """client = ctune.Client(url=None, token=None, ca_file=None, token_file=None,
    timeout=30). Every method raises ctune.CtuneError on failure (.status,
    .code, .message, .path). Experiments are named by id or by name (the
    newest with that name); trials by id or by name (e.g. "quick_00002")."""

    def __init__(self, url=None, token=None, ca_file=None, token_file=None, timeout=30.0):
        url = url or os.environ.get("CTUNE_SERVER") or DEFAULT_SERVER
        if not url.startswith(("http://", "https://")):
            raise CtuneError(f"server URL {url!r} must start with http:// or https://",
                             code="bad_url", path=url)
        self.url = url.rstrip("/")
        if token is None and token_file:
            token = read_token_file(token_file)
        if token is None:
            token = os.environ.get("CTUNE_TOKEN") or None
        # The server's default --db here; its token file is named after the
        # database file itself (a symlinked ctune.db: beside the real one).
        local = os.path.realpath("ctune.db") + ".tokens"
        if token is None and _is_loopback(self.url) and os.access(local, os.R_OK):
            token = read_token_file(local)
        self.token = token
        self.timeout = timeout
        ca_file = ca_file or os.environ.get("CTUNE_CA_FILE") or None
        self._ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None
        # Never follow redirects or proxies: a token goes only to this server.
        handlers = [urllib.request.ProxyHandler({})]
        if self._ssl is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self._ssl))
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self):
        return f"ctune.Client({self.url!r})"

    # -- transport ------------------------------------------------------

    def _request(self, method, path, body=None, query=None, raw=False):
        url = self.url + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                payload = resp.read()
                if raw:
                    return payload, resp.headers
        except urllib.error.HTTPError as e:
            raise self._http_error(e, path) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, ssl.SSLError):
                raise CtuneError(f"TLS with {self.url} failed ({reason}); pass ca_file= (or set "
                                 f"CTUNE_CA_FILE) with the CA that signed the server's "
                                 f"certificate", code="tls", path=path) from None
            raise CtuneError(f"cannot reach the ctune server at {self.url} ({reason}); start "
                             f"ctune-server there or set CTUNE_SERVER", code="unreachable",
                             path=path) from None
        if not payload:
            return None
        try:
            return json.loads(payload)
        except ValueError:
            raise CtuneError(f"the server's answer to {method} {path} is not JSON",
                             code="bad_response", path=path) from None

    def _http_error(self, e, path):
        body = b""
        try:
            body = e.read()
        except OSError:
            pass
        code, message, where = None, None, path
        try:
            err = json.loads(body)["error"]
            code, message = err.get("code"), err.get("message")
            where = err.get("path") or path
        except (ValueError, KeyError, TypeError, AttributeError):
            message = body.decode("utf-8", "replace").strip()[:500] or e.reason
        if e.code == 401 and not self.token:
            message = (f"{message}: no token given; pass token= or token_file=, or set "
                       f"CTUNE_TOKEN to the admin token (the admin= line of <db>.tokens)")
        return CtuneError(message or f"HTTP {e.code}", status=e.code, code=code, path=where)

    # -- experiments ----------------------------------------------------

    def health(self):
        """GET /healthz: {"status": "ok", ...}."""
        return self._request("GET", "/healthz")

    def submit(self, config):
        """Submit an experiment config (a dict, or the path of a JSON file);
        returns the new experiment's id."""
        return self._request("POST", "/api/v1/experiments", body=_load_config(config))["id"]

    def sample(self, config):
        """Validate a config and return the trial configs it would create
        (the server's dry run: nothing is stored)."""
        return self._request("POST", "/api/v1/experiments", body=_load_config(config),
                             query={"dry_run": "true"})["trials"]

    def _get_all(self, path, key):
        """Every item of a paged list (the server answers pages of `limit`
        items and a `next_cursor`, null on the last page)."""
        items, query = [], {"limit": 10000}
        while True:
            page = self._request("GET", path, query=query)
            items.extend(page[key])
            cursor = page.get("next_cursor")
            if not cursor:
                return items
            query = {"limit": 10000, "cursor": cursor}

    def experiments(self):
        """Every experiment (dicts as GET /api/v1/experiments lists them)."""
        return self._get_all("/api/v1/experiments", "experiments")

    def experiment_id(self, experiment):
        """An experiment's id from its id or its name (the newest by that name)."""
        if isinstance(experiment, dict):
            experiment = experiment["id"]
        if isinstance(experiment, int) and not isinstance(experiment, bool):
            return experiment
        if isinstance(experiment, str) and experiment.isdigit():
            return int(experiment)
        if isinstance(experiment, str):
            found = [e for e in self.experiments() if e.get("name") == experiment]
            if found:
                return max(found, key=lambda e: e["id"])["id"]
            raise CtuneError(f"no experiment named {experiment!r}", status=404,
                             code="not_found", path="/api/v1/experiments")
        raise TypeError("an experiment is an id (int) or a name (str)")

    def experiment(self, experiment):
        """One experiment: status, counts, config, scheduler state, best."""
        return self._request("GET", f"/api/v1/experiments/{self.experiment_id(experiment)}")

    def trials(self, experiment):
        """The experiment's trials, in creation order."""
        return self._get_all(f"/api/v1/experiments/{self.experiment_id(experiment)}/trials",
                             "trials")

    def best(self, experiment, metric=None, mode=None, scope="last"):
        """The best trial, {"trial_id", "metric", "mode", "scope", "value",
        "trial"} ("feasible": true too when the experiment has outcome
        constraints: only feasible trials are picked, under the same scope).
        scope: last (default), avg, last-5-avg, last-10-avg, all.
        A metric other than the experiment's needs its mode (as `ctune best`
        refuses to guess: the experiment's mode may be the wrong way round)."""
        if scope not in SCOPES:
            raise CtuneError(f"scope {scope!r} is not one of {', '.join(SCOPES)}",
                             code="bad_scope", path="scope")
        if mode not in (None, "min", "max"):
            raise CtuneError(f"mode {mode!r} is not min or max", code="bad_mode", path="mode")
        eid = self.experiment_id(experiment)
        if metric is not None and mode is None:
            exp = self.experiment(eid)
            own = exp.get("metric")
            # Several objectives: each one has its own mode.
            if metric not in (exp.get("metrics") or [own]):
                raise CtuneError(f"metric {metric!r} is not the experiment's metric ({own!r}): "
                                 f"say mode='min' or mode='max'", code="mode_required",
                                 path="mode")
        return self._request("GET", f"/api/v1/experiments/{eid}/best",
                             query={"metric": metric, "mode": mode, "scope": scope})

    def pareto(self, experiment, scope="last"):
        """The Pareto front of an experiment with several objectives:
        {"experiment_id", "metrics", "modes", "scope", "trials": [{"trial_id",
        "status", "config", "values": {metric: value}}], "reference_point",
        "hypervolume", "hypervolume_history", ...}, the trials no other
        dominates (best() refuses such an experiment unless given a metric)
        and the hypervolume they cover. With outcome constraints only feasible
        trials are on it (each row has "feasible": true) and "infeasible"
        counts the scored trials left out. scope as for best()."""
        if scope not in SCOPES:
            raise CtuneError(f"scope {scope!r} is not one of {', '.join(SCOPES)}",
                             code="bad_scope", path="scope")
        eid = self.experiment_id(experiment)
        return self._request("GET", f"/api/v1/experiments/{eid}/pareto", query={"scope": scope})

    def cancel(self, experiment):
        """Cancel an experiment (its unfinished trials end); returns it."""
        return self._request("POST", f"/api/v1/experiments/{self.experiment_id(experiment)}/cancel",
                             body={})

    def wait(self, experiment, timeout=None, poll_s=1.0):
        """Poll until the experiment is TERMINATED or CANCELLED; returns it.
        timeout (seconds): CtuneError code "timeout" when it passes."""
        eid = self.experiment_id(experiment)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            exp = self.experiment(eid)
            if exp.get("status") in FINISHED:
                return exp
            if deadline is not None and time.monotonic() >= deadline:
                raise CtuneError(f"experiment {eid} still {exp.get('status')} after {timeout} s",
                                 code="timeout", path=f"/api/v1/experiments/{eid}")
            time.sleep(poll_s)

    def experiment_results(self, experiment, since=0):
        """Every result of the experiment after change number since, in
        order: [{"seq", "trial_id", "result"}] (paged through)."""
        eid = self.experiment_id(experiment)
        out = []
        while True:
            page = self._request("GET", f"/api/v1/experiments/{eid}/results",
                                 query={"since": since, "limit": 10000})
            rows = page.get("results", [])
            out.extend(rows)
            last = page.get("last_seq", since)
            if not rows or last <= since:
                return out
            since = last

    # -- trials ---------------------------------------------------------

    def trial_id(self, trial):
        """A trial's id from its id or its name ("<experiment name>_00003")."""
        if isinstance(trial, dict):
            trial = trial["id"]
        if isinstance(trial, int) and not isinstance(trial, bool):
            return trial
        if isinstance(trial, str) and trial.isdigit():
            return int(trial)
        if not isinstance(trial, str):
            raise TypeError("a trial is an id (int) or a name (str)")
        exp_name = trial.rsplit("_", 1)[0]
        for e in sorted(self.experiments(), key=lambda e: -e["id"]):
            if e.get("name") != exp_name:
                continue
            for t in self.trials(e["id"]):
                if t.get("name") == trial:
                    return t["id"]
        raise CtuneError(f"no trial named {trial!r}", status=404, code="not_found",
                         path="/api/v1/trials")

    def trial(self, trial):
        """One trial: status, config, last result, error, ..."""
        return self._request("GET", f"/api/v1/trials/{self.trial_id(trial)}")

    def results(self, trial):
        """The trial's results in order (flat dicts, as the trial reported
        them; NaN came back as None)."""
        return self._get_all(f"/api/v1/trials/{self.trial_id(trial)}/results", "results")

    def logs(self, trial):
        """The tail of the trial's stdout and stderr (at most 256 KiB)."""
        return self._request("GET", f"/api/v1/trials/{self.trial_id(trial)}/logs")["log"]

    def download_checkpoint(self, trial, dest):
        """Fetch the trial's stored checkpoint into dest (a file path, or a
        folder: dest/checkpoint-<trial id>.bin), check its CRC-32, and return
        {"path", "iteration", "size"}. ctune.load_checkpoint(file=path)
        unpacks one that ctune.save_checkpoint wrote."""
        tid = self.trial_id(trial)
        path = f"/api/v1/trials/{tid}/checkpoint"
        data, headers = self._request("GET", path, raw=True)
        want = headers.get("X-Ctune-Crc32")
        if want is not None and int(want, 16) != zlib.crc32(data) & 0xFFFFFFFF:
            raise CtuneError(f"checkpoint of trial {tid} arrived damaged (CRC-32 mismatch)",
                             code="bad_crc", path=path)
        target = os.fspath(dest)
        if os.path.isdir(target):
            target = os.path.join(target, f"checkpoint-{tid}.bin")
        tmp = target + ".part"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
        it = headers.get("X-Ctune-Iteration")
        return {"path": target, "iteration": int(it) if it is not None else None,
                "size": len(data)}

    def workers(self):
        """Registered workers: resources, free, running trials, status."""
        return self._get_all("/api/v1/workers", "workers")

    # -- pandas ---------------------------------------------------------

    def to_dataframe(self, experiment, kind="trials"):
        """A pandas DataFrame of the experiment. kind="trials": one row per
        trial (id, name, status, iteration, config/<key>, <last result
        metrics>); kind="results": one row per result (trial_id, trial_name,
        seq, <metrics>). Needs pandas (the rest of the client does not)."""
        try:
            import pandas
        except ImportError:
            raise ImportError("ctune.Client.to_dataframe() needs pandas, which is not "
                              "installed: pip install pandas (or apt install python3-pandas); "
                              "the rest of ctune works without it") from None
        if kind == "trials":
            rows = []
            for t in self.trials(experiment):
                row = {k: t.get(k) for k in ("id", "name", "status", "stopped_early",
                                             "iteration", "error", "attribution",
                                             "num_failures")}
                row.update({f"config/{k}": v for k, v in (t.get("config") or {}).items()})
                row.update(t.get("last_result") or {})
                rows.append(row)
        elif kind == "results":
            names = {t["id"]: t.get("name") for t in self.trials(experiment)}
            rows = []
            for r in self.experiment_results(experiment):
                row = {"trial_id": r.get("trial_id"), "trial_name": names.get(r.get("trial_id")),
                       "seq": r.get("seq")}
                row.update(r.get("result") or {})
                rows.append(row)
        else:
            raise CtuneError(f"kind {kind!r} is not 'trials' or 'results'", code="bad_kind",
                             path="kind")
        return pandas.DataFrame.from_records(rows)


def _load_config(config):
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise CtuneError(f"cannot read config {path}: {e.strerror}", code="bad_config",
                             path=path) from None
        try:
            config = json.loads(text)
        except ValueError as e:
            raise CtuneError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})",
                             code="bad_config", path=path) from None
    if not isinstance(config, dict):
        raise CtuneError("an experiment config must be a JSON object (a dict)", code="bad_config")
    return config
