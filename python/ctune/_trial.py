"""The trainable's side: config, results, resume state and stop requests.

A trial runs with the environment of docs/protocol.md#trial-environment (CTUNE_CONFIG,
CTUNE_TRIAL_ID, CTUNE_CHECKPOINT_DIR, CTUNE_RESUME, CTUNE_START_ITERATION,
CTUNE_START_TIME_TOTAL_S, CTUNE_TIME_ATTR, CTUNE_METRIC, ...). Every function
here also works outside a trial, so a script can be run by hand."""
import copy
import json
import os
import sys
import threading
import time

from . import _checkpoint, _preempt, _stopping
from ._errors import CtuneError
from ._values import flatten


def _process_age():
    """Seconds since this process started (Linux /proc), else 0: the first
    time_this_iter_s counts from the start, imports included, as the
    worker's own filling does."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return age if 0 <= age < 86400 * 365 else 0.0
    except (OSError, ValueError, IndexError):
        return 0.0


_lock = threading.RLock()
_start_mono = time.monotonic() - _process_age()
_state = {"next": None, "last_mono": None, "start_total": None, "warned_metric": False,
          "config_note": False}
_output = None  # tests set a stream; default: the process's real stdout


def _reset(output=None):
    """Forget what was reported (tests run several 'processes' in one)."""
    global _start_mono, _output
    with _lock:
        _start_mono = time.monotonic()
        _output = output
        _state.update(next=None, last_mono=None, start_total=None, warned_metric=False,
                      config_note=False)
        _checkpoint.last_reported.update(training_iteration=None, time_total_s=None)


def _env_number(name, kind):
    v = os.environ.get(name, "")
    if v == "":
        return None
    try:
        return kind(v)
    except ValueError:
        raise CtuneError(f"{name}={v!r} is not a number", code="bad_environment") from None


def in_trial():
    """True when a ctune-worker runs this process as a trial."""
    return bool(os.environ.get("CTUNE_TRIAL_ID"))


def get_config(defaults=None):
    """The trial's config (CTUNE_CONFIG), a new dict each call. defaults:
    values for keys the config lacks; outside a trial (no CTUNE_CONFIG) the
    config is just the defaults, so a script runs by hand as it is. After
    restoring an optimizer from a checkpoint, apply_config(optimizer, config)
    puts the config's lr (and the like) back: the restored state carries the
    values it was saved with, a PBT donor's after an exploit."""
    cfg = copy.deepcopy(dict(defaults or {}))
    raw = os.environ.get("CTUNE_CONFIG")
    if raw is None:
        with _lock:
            if not _state["config_note"]:
                _state["config_note"] = True
                print("ctune: not in a trial (CTUNE_CONFIG unset): using the defaults",
                      file=sys.stderr, flush=True)
        return cfg
    try:
        trial = json.loads(raw)
    except ValueError as e:
        raise CtuneError(f"CTUNE_CONFIG is not valid JSON: {e}", code="bad_config") from None
    if not isinstance(trial, dict):
        raise CtuneError("CTUNE_CONFIG must be a JSON object", code="bad_config")
    cfg.update(trial)
    return cfg


def _same(a, b):
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def apply_config(optimizer, config=None, keys=None):
    """Puts the config's hyperparameters into an optimizer, after
    optimizer.load_state_dict(...) restored one from a checkpoint.

    A restored optimizer state carries the hyperparameters it was saved
    with: after a PBT exploit that is the donor's lr (its checkpoint), while
    the trial's config holds the explored one. Ray's PBT guide resets the
    param_groups after restoring; this does it: for each param group, every
    key of keys (default: each hyperparameter the group and the config both
    have: lr, momentum, weight_decay, betas, ...) is set from config
    (default: get_config()). When a restored value differs, one line on
    stderr (the trial's log) says so. Returns {key: (restored, config)} for
    the values it changed."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, (list, tuple)):
        raise TypeError("apply_config(optimizer): the optimizer has no param_groups list "
                        "(a torch.optim optimizer is expected)")
    if config is None:
        config = get_config()
    if keys is not None:
        keys = [keys] if isinstance(keys, str) else list(keys)
        missing = [k for k in keys if k not in config]
        if missing:
            raise CtuneError(f"apply_config: the config has no {', '.join(map(repr, missing))} "
                             f"(it has {', '.join(sorted(map(str, config)))})", code="bad_config")
    changed = {}
    for g in groups:
        names = keys if keys is not None else [k for k in g if k != "params" and k in config]
        for k in names:
            if k not in g:
                raise CtuneError(f"apply_config: the optimizer has no hyperparameter {k!r} (it "
                                 f"has {', '.join(sorted(x for x in g if x != 'params'))})",
                                 code="bad_config")
            old, new = g[k], config[k]
            if isinstance(old, tuple) and isinstance(new, list):
                new = tuple(new)  # JSON has no tuples (Adam's betas)
            if isinstance(new, bool) or not isinstance(new, (int, float, tuple)):
                if keys is None:
                    continue  # not a hyperparameter value (a name, a nested dict)
                raise CtuneError(f"apply_config: config[{k!r}] = {new!r} is not a number",
                                 code="bad_config")
            if isinstance(new, tuple) and isinstance(old, tuple) and len(new) == len(old):
                same = all(_same(a, b) for a, b in zip(old, new))
            else:
                same = _same(old, new)
            if not same:
                changed.setdefault(k, (old, new))
                g[k] = new
    for k, (old, new) in changed.items():
        print(f"ctune: the restored optimizer state had {k}={old!r} but the trial's config says "
              f"{k}={new!r} (a PBT exploit explores the config, not the checkpoint): training "
              f"goes on with {k}={new!r}", file=sys.stderr, flush=True)
    return changed


def is_resumed():
    """True when this attempt continues from a checkpoint: CTUNE_RESUME=1 in a
    trial (the worker restored checkpoint.bin); outside a trial (CTUNE_RESUME
    unset), when CTUNE_CHECKPOINT_DIR holds a checkpoint.bin."""
    r = os.environ.get("CTUNE_RESUME")
    if r is not None and r != "":
        return r == "1"
    d = os.environ.get("CTUNE_CHECKPOINT_DIR")
    return bool(d) and os.path.isfile(os.path.join(d, _checkpoint.CHECKPOINT_FILE))


def _gpu_ids(visible):
    """CUDA_VISIBLE_DEVICES as a list: ints for indices, strings for UUIDs
    (GPU-...); [] when unset or empty (a CPU trial)."""
    ids = []
    for part in (visible or "").split(","):
        part = part.strip()
        if part:
            ids.append(int(part) if part.isdigit() else part)
    return ids


def _rank():
    """This process's rank among the trial's members (torchrun's RANK; 0
    when unset: a trial of one process)."""
    return _env_number("RANK", int) or 0


class TrialContext:
    """Who and where this trial is (a snapshot of the environment).

    A trial of several member processes (num_workers, or torchrun inside a
    trial) carries torchrun's variables: world_size, rank, local_rank,
    local_world_size, node_rank, master_addr, master_port (1, 0, 0, 1, 0,
    None, None for one process). gpu_ids: this process's GPUs
    (CUDA_VISIBLE_DEVICES); gpu_mem_limit_mb: its share of each for a
    fractional gpu (CTUNE_GPU_MEM_LIMIT_MB), else None."""

    def __init__(self):
        env = os.environ
        self.world_size = _env_number("WORLD_SIZE", int) or 1
        self.rank = _rank()
        self.local_rank = _env_number("LOCAL_RANK", int) or 0
        self.local_world_size = _env_number("LOCAL_WORLD_SIZE", int) or 1
        self.node_rank = _env_number("NODE_RANK", int) or 0
        self.master_addr = env.get("MASTER_ADDR") or None
        self.master_port = _env_number("MASTER_PORT", int)
        self.gpu_ids = _gpu_ids(env.get("CUDA_VISIBLE_DEVICES"))
        self.gpu_mem_limit_mb = _env_number("CTUNE_GPU_MEM_LIMIT_MB", int)
        self.in_trial = in_trial()
        tid = env.get("CTUNE_TRIAL_ID")
        eid = env.get("CTUNE_EXPERIMENT_ID")
        self.trial_id = int(tid) if tid and tid.isdigit() else tid
        self.trial_name = env.get("CTUNE_TRIAL_NAME")
        self.experiment_id = int(eid) if eid and eid.isdigit() else eid
        self.metric = env.get("CTUNE_METRIC") or None
        self.mode = env.get("CTUNE_MODE") or None
        self.time_attr = env.get("CTUNE_TIME_ATTR") or "training_iteration"
        self.resumed = is_resumed()
        self.start_iteration, self.start_time_total_s = _resume_point()
        self.checkpoint_dir = env.get("CTUNE_CHECKPOINT_DIR")

    # Ray Train's names for the same numbers
    def get_world_size(self):
        return self.world_size

    def get_world_rank(self):
        return self.rank

    def get_local_rank(self):
        return self.local_rank

    def get_local_world_size(self):
        return self.local_world_size

    def get_node_rank(self):
        return self.node_rank

    def __repr__(self):
        return "TrialContext(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


def get_context():
    """A TrialContext: trial_id, trial_name, experiment_id, metric, mode,
    time_attr, resumed, start_iteration, start_time_total_s, checkpoint_dir,
    and the members' world_size, rank, local_rank, local_world_size,
    node_rank, master_addr, master_port, gpu_ids, gpu_mem_limit_mb."""
    return TrialContext()


def gpu_memory_fraction(total_bytes):
    """The share of a GPU of total_bytes that this trial may hold: its
    CTUNE_GPU_MEM_LIMIT_MB (set by the worker for a fractional gpu) over
    the device's memory, at most 1.0; None when the variable is unset."""
    limit = _env_number("CTUNE_GPU_MEM_LIMIT_MB", int)
    if limit is None:
        return None
    if limit <= 0 or not total_bytes or total_bytes <= 0:
        raise CtuneError(f"CTUNE_GPU_MEM_LIMIT_MB={limit} with a device of {total_bytes} bytes:"
                         " no memory share can be computed", code="bad_environment")
    return min(1.0, limit * 1024 * 1024 / float(total_bytes))


def torch_memory_fraction(device=None):
    """Holds this process's PyTorch caching allocator to the trial's memory
    share of its GPU: torch.cuda.set_per_process_memory_fraction(share,
    device), share = gpu_memory_fraction(the device's total_memory). Past
    it, PyTorch raises torch.cuda.OutOfMemoryError as if the GPU were full.
    device: default the current CUDA device. Returns the fraction applied,
    or None (nothing done) when the trial has a whole GPU (no
    CTUNE_GPU_MEM_LIMIT_MB) or no CUDA device."""
    import torch  # only here: the package itself needs no torch
    if os.environ.get("CTUNE_GPU_MEM_LIMIT_MB", "") == "" or not torch.cuda.is_available():
        return None
    if device is None:
        device = torch.cuda.current_device()
    share = gpu_memory_fraction(torch.cuda.get_device_properties(device).total_memory)
    torch.cuda.set_per_process_memory_fraction(share, device)
    return share


def _resume_point():
    """(training_iteration, time_total_s) the attempt starts from: the
    worker's CTUNE_START_ITERATION / CTUNE_START_TIME_TOTAL_S, else (an older
    worker) what the restored checkpoint's manifest recorded, else 0."""
    it = _env_number("CTUNE_START_ITERATION", int)
    total = _env_number("CTUNE_START_TIME_TOTAL_S", float)
    if (it is None or total is None) and is_resumed():
        m = _checkpoint.read_manifest(_checkpoint.checkpoint_path()) or {}
        if it is None and isinstance(m.get("training_iteration"), int):
            it = m["training_iteration"]
        if total is None and isinstance(m.get("time_total_s"), (int, float)):
            total = float(m["time_total_s"])
    return it or 0, total or 0.0


def _emit(line):
    out = _output or sys.__stdout__ or sys.stdout
    out.write(line + "\n")
    out.flush()  # a result printed is a result delivered: ASHA acts on it now


def _emit_locked(line):
    with _lock:
        _emit(line)


def report(metrics=None, /, *, checkpoint=None, **kwargs):
    """Report one result: report(loss=0.3, mean_accuracy=0.9), or
    report({"loss": 0.3}) as Ray's train.report takes it.

    Writes one JSON line to stdout and flushes it. Adds training_iteration
    (counting on from the resumed checkpoint's), time_this_iter_s,
    time_total_s (continuing across resumes) and timestamp unless given.
    NaN and infinities become null; numpy and torch scalars become numbers;
    nested dicts become "a/b" keys. checkpoint: saved with save_checkpoint
    (a folder, a file, bytes or an object) before the line is written, and
    the line names the file ("_checkpoint", which the worker takes out), so
    the worker uploads exactly this checkpoint labelled with this result.
    Returns the result as written (without "_checkpoint").

    In a trial of several members only rank 0 (RANK unset or 0) reports:
    on any other rank the line goes to stderr (the trial's log) as
    "ctune: rank N result: {...}" and checkpoint= is not saved."""
    if metrics is not None and not hasattr(metrics, "items"):
        raise TypeError("report() takes a dict of metrics and/or keyword metrics")
    rank = _rank()
    if checkpoint is None:
        # A preemption notice asked for a checkpoint: on_checkpoint_request's.
        checkpoint = _preempt.pending_state()
    merged = dict(metrics or {})
    merged.update(kwargs)
    result = flatten(merged)
    result.pop(_checkpoint.CKPT_KEY, None)  # reserved: the worker's, never a metric
    now = time.monotonic()
    with _stopping.deferred(), _lock:
        if _state["next"] is None:
            start_it, start_total = _resume_point()
            _state["next"], _state["start_total"] = start_it + 1, start_total
        if result.get("training_iteration") is None:
            result["training_iteration"] = _state["next"]
        it = result["training_iteration"]
        if isinstance(it, (int, float)) and not isinstance(it, bool):
            _state["next"] = int(it) + 1
        since = _state["last_mono"] if _state["last_mono"] is not None else _start_mono
        result.setdefault("time_this_iter_s", now - since)
        result.setdefault("time_total_s", _state["start_total"] + (now - _start_mono))
        result.setdefault("timestamp", int(time.time()))
        _state["last_mono"] = now
        metric = os.environ.get("CTUNE_METRIC")
        # Several objectives: CTUNE_METRICS lists them all, each one needed.
        several = [m for m in os.environ.get("CTUNE_METRICS", "").split(",") if m]
        # Outcome constraints: their metrics are needed as well.
        cons = [m for m in os.environ.get("CTUNE_CONSTRAINT_METRICS", "").split(",") if m]
        needed = several or ([metric] if metric else [])
        needed += [m for m in cons if m not in needed]
        missing = [m for m in needed if m not in result]
        if missing and not _state["warned_metric"]:
            _state["warned_metric"] = True
            which = ("one of the experiment's metrics " + ", ".join(needed) if len(needed) > 1
                     else "the experiment's metric")
            print(f"ctune: this result has no metric {missing[0]!r} ({which}); it "
                  f"reported: {', '.join(sorted(result))}. The worker fails the trial.",
                  file=sys.stderr, flush=True)
        line = json.dumps(result, allow_nan=False)  # refuses what cannot go, before saving
        _checkpoint.last_reported.update(training_iteration=result["training_iteration"],
                                         time_total_s=result["time_total_s"])
        if rank != 0:
            # rank 0 reports for the trial: the others' results go to the
            # log only, and their checkpoints are not saved
            print(f"ctune: rank {rank} result: {line}", file=sys.stderr, flush=True)
            return result
        if checkpoint is not None:
            # Saved first, then the line that names it: the result and its
            # checkpoint reach the worker as one line, in order.
            try:
                path, _ = _checkpoint._save(checkpoint, None)
            except BaseException:
                _emit(line)  # the result still counts; the save's error is raised
                raise
            _preempt.satisfied()
            if in_trial():  # only a worker reads it: a script run by hand prints its result
                ref = json.dumps(_checkpoint.file_ref(path))
                line = line[:-1] + (", " if result else "") + \
                    '"%s": %s}' % (_checkpoint.CKPT_KEY, ref)
        _emit(line)
    return result


def on_stop(fn=None, exit=True):
    """Handle SIGTERM, what the worker sends when the scheduler stops a trial
    or the worker drains: exit 0 at once (SystemExit, so finally blocks run),
    then call fn() on the way out (atexit; e.g. save a checkpoint; the last
    registered first; a fn that raises makes the exit status 1). A SIGTERM
    during save_checkpoint (or report(checkpoint=...)) first lets the
    checkpoint be renamed into place. exit=False only records the request:
    poll stop_requested() and leave the loop at a safe point (fn still runs
    when the process ends). Call it from the main thread. Returns fn, so it
    works as a decorator."""
    if fn is not None and not callable(fn):
        raise TypeError("on_stop(fn): fn must be callable")
    try:
        _stopping.install(fn, exit)
    except ValueError:
        raise CtuneError("on_stop() must be called from the main thread",
                         code="not_main_thread") from None
    return fn


def stop_requested():
    """True once SIGTERM arrived (after on_stop installed the handler)."""
    return _stopping.state["requested"]


def on_checkpoint_request(fn):
    """Save fn()'s return value (anything save_checkpoint takes) with the
    next report() after a checkpoint request: a worker given a preemption
    notice sends SIGUSR1 (handled from now on) and creates CHECKPOINT_NOW in
    the checkpoint dir (docs/worker.md#preemption). Call it from the main
    thread. Returns fn, so it works as a decorator."""
    if not callable(fn):
        raise TypeError("on_checkpoint_request(fn): fn must be callable")
    _preempt.set_saver(fn)
    return fn


def checkpoint_requested():
    """True once a checkpoint was requested (SIGUSR1, or CHECKPOINT_NOW in the
    checkpoint dir) and not saved since: pass checkpoint= to the next report()
    then. The first call installs the SIGUSR1 handler (from the main thread)."""
    _preempt.install()
    return _preempt.requested()
