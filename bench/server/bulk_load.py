#!/usr/bin/env python3
"""Bulk path for the scale benchmark (bench_scale.py): fills a ctune-server
database with experiments, trials and results directly through SQLite, in
minutes instead of the hours the REST API would take for 10,000,000 results.

The database must be one that ctune-server created and migrated: start the
server on it once and stop it with SIGTERM before loading, and load while no
server has it open:

    ctune-server --db /tmp/big.db --port 0 --no-auth &   # wait for "listening on"
    kill -TERM %1; wait
    python3 bench/server/bulk_load.py /tmp/big.db                 # full scale
    python3 bench/server/bulk_load.py /tmp/small.db --scale 0.01   # a dry run

What it writes (full scale; --scale F multiplies every count, at least 2
experiments and 1 result per trial):

  experiments  1,000, all RUNNING: metric loss, mode min, random search over
               lr (loguniform) and batch_size (choice), fifo, command trainable
               ["true"], 1 cpu a trial; num_samples = the trials made + 100
               (--margin), so each one is live with work left (a lease makes a
               new trial). The validator allows at most 100,000 samples: the
               heavy experiment has num_samples 100,000 and its last 100
               trials PENDING instead (made, never leased)
  trials       1,000,000, TERMINATED (but those 100): experiment 1 (the
               heavy one) has 100,000, the other 999 share 900,000; names,
               configs, idx, times and updated_seq as the server writes them
  results      10,000,000 over the ended trials (10 a trial, 11 for the
               first 1,000: the 100 PENDING ones have none; t =
               training_iteration 1..n, decision continue, gen 0), data like
               a real trial's report: {"loss", "accuracy",
               "training_iteration", "time_total_s", "time_this_iter_s",
               "timestamp"}

Every change number (experiments' and trials' updated_seq, results' seq) comes
from one increasing counter, as the server's does: per trial, its creation
number, then its results, then its end. The meta 'seq' row is moved past
them all, so the server never hands out a number twice.

The summary columns of migration 011 (created_seq, res_known, nres, ...;
ARCHITECTURE.md#bounded-memory) are left at their defaults (res_known = 0: the
server computes them at its first start and writes them back), unless
--with-summaries is given, which writes them exactly (res_known = 1). A
database whose schema has no such columns (an older server made it) is loaded
without them, silently.

One transaction per ~100,000 rows (executemany), PRAGMA synchronous=OFF during
the load, a WAL checkpoint at the end (the file alone is the database, ready
to copy). Deterministic: the same arguments give the same rows.

usage: bulk_load.py DB [--scale F] [--experiments N] [--trials N]
                       [--results-per-trial N] [--heavy-trials N]
                       [--with-summaries] [--margin M] [--seed S]
"""
import argparse
import json
import math
import random
import sqlite3
import sys
import time

BATCH = 100_000
MARGIN = 100  # num_samples beyond the trials made (default): work left for leases
PARAM_SPACE = {"lr": {"type": "loguniform", "lower": 1e-4, "upper": 0.1},
               "batch_size": {"type": "choice", "values": [16, 32, 64, 128]}}


NUM_SAMPLES_MAX = 100_000  # the validator's limit (SPEC_NUM_SAMPLES_MAX)


def shape(scale, experiments=None, trials=None, results=None, heavy=None, margin=MARGIN):
    """The plan: {"counts": trials per experiment, "pending": how many of
    them (the last ones) stay PENDING, "num_samples", "per"/"extra": results
    per ended trial (the first `extra` ended trials get one more),
    "results": the total}. num_samples is the trials made + margin, at most
    NUM_SAMPLES_MAX: where that cap leaves no work (the heavy experiment at
    full scale), the last `margin` trials are PENDING instead, so every
    experiment is live with work left either way."""
    n_exp = experiments or max(2, int(round(1000 * scale)))
    n_trials = trials or max(n_exp, int(round(1_000_000 * scale)))
    heavy_n = heavy if heavy is not None else max(1, int(round(100_000 * scale)))
    heavy_n = min(heavy_n, n_trials - (n_exp - 1), NUM_SAMPLES_MAX)
    rest = n_trials - heavy_n
    base, extra = divmod(rest, n_exp - 1)
    counts = [heavy_n] + [base + (1 if i < extra else 0) for i in range(n_exp - 1)]
    num_samples = [min(NUM_SAMPLES_MAX, n + margin) for n in counts]
    pending = [min(n, n + margin - ns) for n, ns in zip(counts, num_samples)]
    ended = n_trials - sum(pending)
    if results:
        total = results * ended
    else:
        total = max(ended, int(round(10_000_000 * scale)))
    per, extra = divmod(total, ended) if ended else (0, 0)
    return {"experiments": n_exp, "counts": counts, "pending": pending,
            "num_samples": num_samples, "trials": n_trials, "results": total,
            "per": per, "extra": extra}


def exp_config(i, num_samples, seed):
    return {"name": "bulk-%04d" % i, "metric": "loss", "mode": "min",
            "num_samples": num_samples, "seed": seed,
            "param_space": PARAM_SPACE,
            "scheduler": {"type": "fifo"},
            "resources_per_trial": {"cpu": 1, "gpu": 0},
            "trainable": {"type": "command", "argv": ["true"]}}


def columns(db, table):
    return {r[1] for r in db.execute("PRAGMA table_info(%s)" % table)}


def fmt(x):
    return repr(float(x))


def scores(vals):
    """The 011 scores of one trial's metric values in report order
    (ARCHITECTURE.md#bounded-memory, as best.c scores them)."""
    def win(w):
        v = vals[-w:]
        if not v or any(not math.isfinite(x) for x in v):
            return None
        return sum(v) / len(v)
    fin = [x for x in vals if math.isfinite(x)]
    last = vals[-1] if vals and math.isfinite(vals[-1]) else None
    return (last, win(len(vals)), win(5), win(10),
            min(fin) if fin else None, max(fin) if fin else None)


def load(path, scale=1.0, experiments=None, trials=None, results=None, heavy=None,
         with_summaries=False, seed=1, progress=print, margin=MARGIN):
    plan = shape(scale, experiments, trials, results, heavy, margin)
    n_exp, counts = plan["experiments"], plan["counts"]
    extra_left = plan["extra"]
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-262144")
    if not columns(db, "experiments") or not columns(db, "meta"):
        raise SystemExit("%s: no ctune-server schema (start ctune-server --db %s once first)"
                         % (path, path))
    if db.execute("SELECT count(*) FROM experiments").fetchone()[0]:
        raise SystemExit("%s already holds experiments: load into a fresh database" % path)
    tcols = columns(db, "trials")
    summ = with_summaries and {"created_seq", "res_known", "nres", "first_seq", "last_seq",
                               "last_t", "score_last", "score_avg", "score_last5",
                               "score_last10", "score_min", "score_max"} <= tcols
    if with_summaries and not summ:
        progress("bulk: no migration-011 summary columns in this schema: left out")
    seq = db.execute("SELECT value FROM meta WHERE key='seq'").fetchone()
    seq = seq[0] if seq else 0
    rng = random.Random(seed)
    tcolnames = ["id", "experiment_id", "idx", "name", "status", "stopped_early", "config",
                 "bracket", "num_failures", "attempt", "created_at", "started_at",
                 "ended_at", "updated_seq", "generation"]
    if summ:
        tcolnames += ["created_seq", "res_known", "nres", "first_seq", "last_seq", "last_t",
                      "score_last", "score_avg", "score_last5", "score_last10",
                      "score_min", "score_max"]
    trial_sql = "INSERT INTO trials(%s) VALUES(%s)" % (",".join(tcolnames),
                                                       ",".join("?" * len(tcolnames)))
    res_sql = ("INSERT INTO results(seq,trial_id,experiment_id,t,decision,data,gen) "
               "VALUES(?,?,?,?,'continue',?,0)")
    exp_sql = ("INSERT INTO experiments(id,name,status,config,seed,created_at,updated_seq) "
               "VALUES(?,?,'RUNNING',?,?,?,?)")
    t_start = time.time()
    now = time.time()
    # Pretend it all ran over the last days: one second of wall time per
    # trial, spread so the newest trial ends just before now.
    clock = now - sum(counts) * 0.2 - 3600
    total_trials = sum(counts)
    tid = 0
    trows, rrows = [], []
    nres_done = 0

    def flush(final=False):
        nonlocal trows, rrows
        if not trows and not rrows:
            return
        db.execute("BEGIN")
        if trows:
            db.executemany(trial_sql, trows)
        if rrows:
            db.executemany(res_sql, rrows)
        db.execute("COMMIT")
        trows, rrows = [], []

    last_report = time.time()
    for i in range(n_exp):
        eid = i + 1
        cfg = exp_config(eid, plan["num_samples"][i], 1000 + eid)
        first_pending = counts[i] - plan["pending"][i]
        seq += 1
        db.execute("BEGIN")
        db.execute(exp_sql, (eid, cfg["name"], json.dumps(cfg, separators=(",", ":")),
                             cfg["seed"], clock, seq))
        db.execute("COMMIT")
        name = cfg["name"]
        quality = 0.2 + 0.6 * rng.random()  # how good this experiment's trials get
        for idx in range(counts[i]):
            tid += 1
            lr = math.exp(rng.uniform(math.log(1e-4), math.log(0.1)))
            bs = rng.choice((16, 32, 64, 128))
            tconfig = '{"lr":%s,"batch_size":%d}' % (fmt(lr), bs)
            created = clock
            created_seq = seq = seq + 1
            if idx >= first_pending:
                # made, never leased: work left where num_samples is capped
                row = [tid, eid, idx, "%s_%05d" % (name, idx), "PENDING", 0, tconfig, 0, 0, 0,
                       created, None, None, created_seq, 0]
                if summ:
                    row += [created_seq, 1, 0, 0, 0, None, None, None, None, None, None, None]
                trows.append(row)
                continue
            per = plan["per"] + (1 if extra_left > 0 else 0)
            extra_left -= 1
            base = quality + 0.5 * rng.random()
            rate = 0.75 + 0.2 * rng.random()
            tt = 0.0
            vals = []
            first = seq + 1
            for k in range(1, per + 1):
                loss = base * rate ** k + 0.01 * rng.random()
                step = 0.05 + 0.1 * rng.random()
                tt += step
                seq += 1
                vals.append(loss)
                data = ('{"loss":%s,"accuracy":%s,"training_iteration":%d,"time_total_s":%s,'
                        '"time_this_iter_s":%s,"timestamp":%d}'
                        % (fmt(loss), fmt(1 - loss / 2), k, fmt(tt), fmt(step),
                           int(created + 1 + tt)))
                rrows.append((seq, tid, eid, float(k), data))
            seq += 1
            started = created + 0.5
            ended = started + tt + 0.5
            row = [tid, eid, idx, "%s_%05d" % (name, idx), "TERMINATED", 0, tconfig, 0, 0, 1,
                   created, started, ended, seq, 0]
            if summ:
                row += [created_seq, 1, per, first if per else 0, seq - 1 if per else 0,
                        float(per) if per else None, *scores(vals)]
            trows.append(row)
            nres_done += per
            clock += 0.2
            if len(rrows) + len(trows) >= BATCH:
                flush()
                if time.time() - last_report >= 10:
                    last_report = time.time()
                    progress("bulk: %d/%d trials, %d results, %.0f s" %
                             (tid, total_trials, nres_done, time.time() - t_start))
    flush()
    db.execute("BEGIN")
    n = db.execute("UPDATE meta SET value=max(value,?) WHERE key='seq'", (seq,)).rowcount
    if not n:
        db.execute("INSERT INTO meta(key,value) VALUES('seq',?)", (seq,))
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    dt = time.time() - t_start
    progress("bulk: %d experiments, %d trials (heaviest %d, %d PENDING), %d results, seq %d: "
             "%.1f s%s" % (n_exp, total_trials, counts[0], sum(plan["pending"]), nres_done, seq, dt,
                " (with summaries)" if summ else ""))
    return {"experiments": n_exp, "trials": total_trials, "heavy_trials": counts[0],
            "pending": sum(plan["pending"]),
            "results": nres_done, "seq": seq, "seconds": dt, "summaries": bool(summ)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies every count (default 1.0: 1,000 / 1,000,000 / 10,000,000)")
    ap.add_argument("--experiments", type=int, help="overrides the scaled count")
    ap.add_argument("--trials", type=int, help="all trials, overrides the scaled count")
    ap.add_argument("--results-per-trial", type=int, help="overrides (default 10)")
    ap.add_argument("--heavy-trials", type=int, help="trials of experiment 1 (default 10%%)")
    ap.add_argument("--with-summaries", action="store_true",
                    help="write the migration-011 summary columns (res_known = 1)")
    ap.add_argument("--margin", type=int, default=MARGIN,
                    help="num_samples = trials made + MARGIN (default %d)" % MARGIN)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    load(a.db, a.scale, a.experiments, a.trials, a.results_per_trial, a.heavy_trials,
         a.with_summaries, a.seed, progress=lambda s: print(s, flush=True), margin=a.margin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
