#!/usr/bin/env python3
"""The classic search side by side: ctune (`ctune run`, the README's
`make demo`: examples/fashion_mnist_asha.json) against Ray Tune 2.x with
PyTorch on the same cores, the same search and the same model.

Both run 10 trials (--trials) of the tutorial cnn on Fashion-MNIST (conv 5x5
-> 6, pool, conv 5x5 -> 16, pool, fc l1, fc l2, fc 10; SGD with momentum
0.9), sampled from the demo's space (l1, l2: pow2 4..256; lr loguniform
1e-4..1e-1; batch_size choice 2/4/8/16), with ASHA (training_iteration,
max_t 10 (--epochs), grace period 1, reduction factor 2, one bracket), one
CPU per trial on --cpus CPUs (2), metric validation loss (min). The PyTorch
trainer does what ctune-train does: pixels (p/255 - 0.5)/0.5, the training
file shuffled once from the seed and split 80/20 (train/validation), the
order reshuffled every epoch, one thread, validation and the 10,000 test
images evaluated after every epoch, a checkpoint saved every epoch (the
worker gives ctune-train a checkpoint directory; the tutorial does the same).
Ray samples with BasicVariantGenerator(random_state=--seed), ctune with the
experiment's seed (42); every trial trains with seed 0 on both sides (the
worker passes ctune-train no seed: its default, 0).

Each run does both, alternating which goes first (run 1: ctune first), and
times each end to end (start of `ctune run` / of the Ray driver's python,
Ray's start-up included, to its exit). The best trial is the one with the
lowest last validation loss; its validation and test accuracy are printed.
The output is markdown, ready for bench/RESULTS.md: one row per run, then
the medians over the runs and the ratio Ray / ctune of the median times.

Usage: bench_classic.py [--build build] [--runs 1] [--trials 10]
                        [--epochs 10] [--train-limit 0] [--cpus 2]
                        [--seed 42] [--ray-python /work/venv-ray/bin/python]
A smoke: --trials 2 --epochs 2 --train-limit 2000.
Ray runs in a venv that sees Debian's PyTorch:
  /usr/bin/python3 -m venv --system-site-packages /work/venv-ray
  /work/venv-ray/bin/pip install "ray[tune]"
"""
import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEMO = os.path.join(ROOT, "examples", "fashion_mnist_asha.json")
DATA_DIR = "/usr/share/datasets/fashion-mnist"
DEFAULT_RAY_PY = "/work/venv-ray/bin/python"

# ---------- the PyTorch side (runs inside the Ray venv: --ray-worker) ----------


def read_idx(path, count=0):
    """A gzipped IDX file of unsigned bytes (images or labels): the first
    `count` items (0: all) as a numpy array."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[:4], "big")
    ndim = magic & 0xff
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    return arr[:count] if count else arr


def load_split(data_dir, train_limit, seed):
    """ctune-train's data: normalised, the training file shuffled once from
    the seed and split 80/20 into training and validation; the test file."""
    import numpy as np
    import torch

    def norm(x):
        return (torch.from_numpy(x.astype(np.float32)).div_(255.0).sub_(0.5).div_(0.5)
                .view(-1, 1, 28, 28))

    x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"), train_limit)
    y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"), train_limit)
    perm = np.random.default_rng(seed).permutation(len(x))
    n_train = int(len(x) * 0.8)
    tr, va = perm[:n_train], perm[n_train:]
    xt = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"))
    yt = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"))
    lab = lambda a: torch.from_numpy(a.astype(np.int64))  # noqa: E731
    return ((norm(x[tr]), lab(y[tr])), (norm(x[va]), lab(y[va])), (norm(xt), lab(yt)))


def example():
    """examples/pytorch/train_fmnist.py, whose Net (the tutorial's cnn on
    1x28x28, ctune-train's cnn) and evaluate() this trainer uses."""
    sys.path[:0] = [os.path.join(ROOT, "examples", "pytorch"), os.path.join(ROOT, "python")]
    import train_fmnist as ex
    return ex


def train_fmnist(config):
    import torch
    import torch.nn.functional as F
    from ray import tune
    ex = example()
    torch.set_num_threads(1)
    torch.manual_seed(config["trial_seed"])
    (x, y), (xv, yv), (xt, yt) = load_split(config["data_dir"], config["train_limit"],
                                            config["split_seed"])
    net = ex.Net(config["l1"], config["l2"])
    opt = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=config["momentum"])
    gen = torch.Generator().manual_seed(config["trial_seed"])
    batch = config["batch_size"]
    for epoch in range(config["epochs"]):
        order = torch.randperm(len(x), generator=gen)
        running = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            opt.zero_grad()
            loss = F.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
            running += loss.item() * len(idx)
        val_loss, val_acc = ex.evaluate(net, xv, yv)
        _, test_acc = ex.evaluate(net, xt, yt)
        with tempfile.TemporaryDirectory() as d:
            torch.save({"net": net.state_dict(), "optimizer": opt.state_dict(),
                        "epoch": epoch + 1}, os.path.join(d, "checkpoint.pt"))
            tune.report({"loss": val_loss, "accuracy": val_acc, "test_accuracy": test_acc,
                         "train_loss": running / len(order)},
                        checkpoint=tune.Checkpoint.from_directory(d))


def ray_worker(args):
    """The Ray Tune side: prints one JSON line with the best trial."""
    import numpy as np
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    demo = json.load(open(DEMO))
    sp = demo["param_space"]

    def pow2(dom):
        # ctune's pow2: uniform over the exponents; a choice, so that
        # random_state seeds it (sample_from's np.random would not be).
        lo, hi = int(np.log2(dom["lower"])), int(np.log2(dom["upper"]))
        return tune.choice([2 ** e for e in range(lo, hi + 1)])

    space = {"l1": pow2(sp["l1"]), "l2": pow2(sp["l2"]),
             "lr": tune.loguniform(sp["lr"]["lower"], sp["lr"]["upper"]),
             "batch_size": tune.choice(sp["batch_size"]["values"]),
             "momentum": sp["momentum"], "epochs": args.epochs,
             "train_limit": args.train_limit, "data_dir": DATA_DIR, "split_seed": 0,
             "trial_seed": 0}
    sched = demo["scheduler"]
    # Ray waits a fixed 30 s for its raylet to register; on a loaded machine
    # that can run out: try again (the time counts as Ray's start-up).
    for attempt in range(1, 4):
        try:
            ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            break
        except Exception as e:  # noqa: BLE001 (Ray raises a bare Exception)
            print(f"ray.init attempt {attempt} failed: {e}", file=sys.stderr, flush=True)
            ray.shutdown()
            if attempt == 3:
                raise
    storage = tempfile.mkdtemp(prefix="ray-classic-")
    try:
        tuner = tune.Tuner(
            tune.with_resources(train_fmnist, {"cpu": demo["resources_per_trial"]["cpu"]}),
            param_space=space,
            tune_config=tune.TuneConfig(
                metric=demo["metric"], mode=demo["mode"], num_samples=args.trials,
                scheduler=ASHAScheduler(time_attr=sched["time_attr"], max_t=args.epochs,
                                        grace_period=sched["grace_period"],
                                        reduction_factor=sched["reduction_factor"],
                                        brackets=sched["brackets"]),
                search_alg=BasicVariantGenerator(random_state=args.seed)),
            run_config=tune.RunConfig(storage_path=storage, verbose=0))
        results = tuner.fit()
        best = results.get_best_result(metric=demo["metric"], mode=demo["mode"], scope="last")
        m = best.metrics
        cfg = {k: best.config[k] for k in ("l1", "l2", "lr", "batch_size")}
        print(json.dumps({"accuracy": m["accuracy"], "test_accuracy": m["test_accuracy"],
                          "loss": m["loss"], "iterations": m["training_iteration"],
                          "config": cfg, "trials": len(results), "init_attempts": attempt,
                          "errors": sum(1 for r in results if r.error)}), flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)

# ---------- the driver ----------


def run_ctune(args, work):
    """`ctune run` on the demo's experiment (trials, epochs and train_limit
    changed when asked): (wall s, best dict)."""
    exp = json.load(open(DEMO))
    exp["name"] = "classic-bench"
    exp["num_samples"] = args.trials
    exp["scheduler"]["max_t"] = args.epochs
    if args.train_limit:
        exp["trainable"]["train_limit"] = args.train_limit
    path = os.path.join(work, "classic.json")
    with open(path, "w") as f:
        json.dump(exp, f)
    ctune = os.path.abspath(os.path.join(args.build, "bin", "ctune"))
    t0 = time.monotonic()
    p = subprocess.run([ctune, "run", path, "--json", "--cpus", str(args.cpus)], cwd=work,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=args.timeout)
    wall = time.monotonic() - t0
    best = None
    for line in p.stdout.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "best_trial" in obj:
            best = obj["best_trial"]
    if p.returncode or not best:
        sys.exit(f"bench_classic: ctune run exited {p.returncode} without a best trial:\n"
                 f"{p.stderr[-2000:]}")
    r = best["last_result"]
    cfg = {k: best["config"][k] for k in ("l1", "l2", "lr", "batch_size")}
    return wall, {"accuracy": r["accuracy"], "test_accuracy": r["test_accuracy"],
                  "loss": r["loss"], "iterations": r["training_iteration"], "config": cfg}


def run_ray(args, work):
    """The Ray driver in its venv: (wall s, best dict)."""
    cmd = [args.ray_python, os.path.abspath(__file__), "--ray-worker", "--trials",
           str(args.trials), "--epochs", str(args.epochs), "--train-limit",
           str(args.train_limit), "--cpus", str(args.cpus), "--seed", str(args.seed)]
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", RAY_USAGE_STATS_ENABLED="0",
               TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1", OMP_NUM_THREADS="1",
               RAY_AIR_NEW_OUTPUT="0")
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env, timeout=args.timeout)
    wall = time.monotonic() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        sys.exit(f"bench_classic: the Ray run exited {p.returncode}:\n{p.stderr[-3000:]}")
    best = json.loads(lines[-1])
    if best.get("errors"):
        sys.exit(f"bench_classic: {best['errors']} Ray trials failed:\n{p.stderr[-3000:]}")
    if best.get("init_attempts", 1) > 1:
        print(f"Ray needed {best['init_attempts']} ray.init attempts (raylet start-up "
              "timed out under load)", file=sys.stderr, flush=True)
    return wall, best


def versions(args):
    out = subprocess.run([args.ray_python, "-c", "import ray, torch; print(ray.__version__, "
                          "torch.__version__)"], stdout=subprocess.PIPE, text=True)
    ray_v, torch_v = (out.stdout.split() + ["?", "?"])[:2]
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            stdout=subprocess.PIPE, text=True).stdout.strip() or "?"
    return ray_v, torch_v, commit


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def fmt_cfg(c):
    return f"l1 {c['l1']}, l2 {c['l2']}, lr {c['lr']:.2g}, batch {c['batch_size']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="ctune's build directory (bin/ctune)")
    ap.add_argument("--runs", type=int, default=1, help="side-by-side runs (median of N)")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=10, help="ASHA's max_t")
    ap.add_argument("--train-limit", type=int, default=0,
                    help="the first N training images (0: all 60,000)")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42, help="Ray's sampling seed")
    ap.add_argument("--ray-python", default=DEFAULT_RAY_PY)
    ap.add_argument("--timeout", type=int, default=3600, help="per run and side (s)")
    ap.add_argument("--ray-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ray_worker:
        ray_worker(args)
        return 0
    if not os.access(os.path.join(args.build, "bin", "ctune"), os.X_OK):
        sys.exit(f"bench_classic: {args.build}/bin/ctune not found (make build first)")
    if not os.access(args.ray_python, os.X_OK):
        sys.exit(f"bench_classic: {args.ray_python} not found; make the venv as the "
                 "script's help says")
    ray_v, torch_v, commit = versions(args)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()
    rows, loads = [], [load0[0]]
    for i in range(args.runs):
        order = ("ctune", "ray") if i % 2 == 0 else ("ray", "ctune")
        res = {}
        for side in order:
            work = tempfile.mkdtemp(prefix=f"classic-{side}-")
            try:
                res[side] = run_ctune(args, work) if side == "ctune" else run_ray(args, work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            loads.append(os.getloadavg()[0])
        rows.append((order, res))
        print(f"run {i + 1}: ctune {res['ctune'][0]:.1f} s, Ray {res['ray'][0]:.1f} s",
              file=sys.stderr, flush=True)

    shape = (f"{args.trials} trials, ASHA max_t {args.epochs}, "
             f"{'all 60,000' if not args.train_limit else f'the first {args.train_limit}'}"
             f" training images (80/20 split), {args.cpus} CPUs, one per trial")
    print(f"The classic search, ctune against Ray Tune {ray_v} + PyTorch {torch_v}: {shape}. "
          f"`bench/ray/bench_classic.py --runs {args.runs}"
          + (f" --trials {args.trials}" if args.trials != 10 else "")
          + (f" --epochs {args.epochs}" if args.epochs != 10 else "")
          + (f" --train-limit {args.train_limit}" if args.train_limit else "")
          + f"`, commit {commit}, started {started}; {os.cpu_count()} vCPUs ({cpu_name()}); "
          f"load average {min(loads):.1f}-{max(loads):.1f} (1-minute, sampled before and "
          f"after each side). Wall time end to end; best trial = lowest last validation loss.")
    print()
    print("| run | first | ctune s | ctune val / test acc | Ray s | Ray val / test acc | Ray / ctune |")
    print("|---|---|---|---|---|---|---|")
    for i, (order, res) in enumerate(rows):
        (cw, cb), (rw, rb) = res["ctune"], res["ray"]
        print(f"| {i + 1} | {order[0]} | {cw:.1f} | {cb['accuracy']:.3f} / {cb['test_accuracy']:.3f} "
              f"| {rw:.1f} | {rb['accuracy']:.3f} / {rb['test_accuracy']:.3f} | {rw / cw:.2f}x |")
    med = lambda side, f: statistics.median(f(r[1][side]) for r in rows)  # noqa: E731
    cw, rw = med("ctune", lambda x: x[0]), med("ray", lambda x: x[0])
    print(f"| median | | {cw:.1f} | {med('ctune', lambda x: x[1]['accuracy']):.3f} / "
          f"{med('ctune', lambda x: x[1]['test_accuracy']):.3f} | {rw:.1f} | "
          f"{med('ray', lambda x: x[1]['accuracy']):.3f} / "
          f"{med('ray', lambda x: x[1]['test_accuracy']):.3f} | **{rw / cw:.2f}x** |")
    print()
    for i, (_, res) in enumerate(rows):
        print(f"Run {i + 1} best trials: ctune {fmt_cfg(res['ctune'][1]['config'])} "
              f"({res['ctune'][1]['iterations']} epochs); Ray {fmt_cfg(res['ray'][1]['config'])} "
              f"({res['ray'][1]['iterations']} epochs)."
              + (f" Ray's ray.init succeeded at attempt {res['ray'][1]['init_attempts']} "
                 "(its raylet's 30 s start-up wait ran out under load)."
                 if res['ray'][1].get("init_attempts", 1) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
