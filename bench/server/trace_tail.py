#!/usr/bin/env python3
"""Where the slowest requests of an ingestion run spend their time.

Reads the records a -DCTUNE_TRACE=ON ctune-server wrote to $CTUNE_TRACE_FILE
(common/trace.h) and prints, for all requests that waited for a commit and
for the slowest 1% (by the time from the previous reply on the same
connection to this reply, the closed loop's cycle, or by the server's own
time from request head to reply), the mean of each step:

  gap       previous reply on the connection -> this request's head read
            (wrk's turnaround, the socket, the HTTP thread's run-queue wait)
  body      head -> handler start (the body read)
  handler   handler start -> handler end (parse, state change, queued)
  queue     handler end -> its batch's commit start (the previous batch's
            flush, the gather)
  commit    the batch's SQLite transaction (with any WAL autocheckpoint)
  flush     the batch's fdatasync of the WAL
  settle    flush end -> this request's resume call (earlier waiters' resumes)
  resume    resume call -> MHD calls the handler again (the HTTP thread)
  send      -> the reply written and the request completed

usage: trace_tail.py TRACE_FILE [--skip-s 1] [--pct 1]
"""
import argparse
import bisect
import sys


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--skip-s", type=float, default=1.0, help="skip the run's first seconds")
    ap.add_argument("--pct", type=float, default=1.0, help="the slowest this percent")
    a = ap.parse_args()
    reqs, batches, loops = [], [], []
    for line in open(a.trace):
        f = [int(x) for x in line.split()]
        (reqs if f[0] == 1 else batches if f[0] == 2 else loops).append(f[1:])
    batches.sort(key=lambda b: b[1])
    uptos = [b[1] for b in batches]
    t_first = min(r[2] for r in reqs) + a.skip_s * 1e9
    steps = ("gap", "body", "handler", "queue", "commit", "flush", "settle", "resume", "send")
    rows = []
    for r in reqs:
        ticket, fd, head, disp, hend, committed, resumed, done, prev, tid = r[:10]
        if head < t_first or not committed or not resumed:
            continue
        i = bisect.bisect_left(uptos, ticket)
        if i == len(batches):
            continue
        b = batches[i]
        first, upto, ngroups, wake, start, cend, fend, send_, nops = b[:9]
        gap = head - prev if prev and prev < head else None
        ph = {"gap": gap, "body": disp - head, "handler": hend - disp,
              "queue": max(start - hend, 0), "commit": cend - max(start, hend),
              "flush": fend - cend if fend > cend else 0,
              "settle": committed - (fend if fend > cend else cend),
              "resume": resumed - committed, "send": done - resumed}
        ph = {k: (v / 1e6 if v is not None else None) for k, v in ph.items()}
        ph["server"] = (done - head) / 1e6
        ph["cycle"] = (done - prev) / 1e6 if gap is not None else None
        ph["batch"] = ngroups
        ph["t"] = (head - t_first) / 1e9
        ph["bstart"] = start
        ph["bend"] = send_
        rows.append(ph)
    print("%d requests traced (after the first %.1f s), %d batches, %d main-loop passes"
          % (len(rows), a.skip_s, len(batches), len(loops)))
    cyc = [r for r in rows if r["cycle"] is not None]

    def show(title, sel):
        print("%-34s n=%6d " % (title, len(sel)) +
              " ".join("%s %.3f" % (k, mean([r[k] for r in sel if r[k] is not None]))
                       for k in steps) +
              "  | server %.2f cycle %.2f batch %.1f" % (
                  mean([r["server"] for r in sel]),
                  mean([r["cycle"] for r in sel if r["cycle"] is not None]),
                  mean([r["batch"] for r in sel])))

    print("means in ms:")
    show("all", rows)
    k = max(1, int(len(cyc) * a.pct / 100))
    show("slowest %g%% by cycle" % a.pct, sorted(cyc, key=lambda r: -r["cycle"])[:k])
    k = max(1, int(len(rows) * a.pct / 100))
    slow = sorted(rows, key=lambda r: -r["server"])[:k]
    show("slowest %g%% by server time" % a.pct, slow)
    for p in (50, 90, 99, 99.9):
        print("p%-5g server %.2f ms, cycle %.2f ms, gap %.2f ms" % (
            p, pct([r["server"] for r in rows], p), pct([r["cycle"] for r in cyc], p),
            pct([r["gap"] for r in cyc], p)))
    # the main loop's passes: lock held, checkpoint time; which slow batches overlap one
    if loops:
        held = [(l[2] - l[1]) / 1e6 for l in loops]
        ck = [(l[3] - l[2]) / 1e6 for l in loops]
        wait = [(l[1] - l[0]) / 1e6 for l in loops]
        print("main loop: %d passes, model lock wait p50 %.3f max %.2f, held p50 %.3f max %.2f, "
              "checkpoint p50 %.3f p99 %.2f max %.2f ms" % (
                  len(loops), pct(wait, 50), max(wait), pct(held, 50), max(held),
                  pct(ck, 50), pct(ck, 99), max(ck)))
        spans = sorted((l[2], l[3]) for l in loops)
        starts = [s for s, _ in spans]

        def overlaps(b0, b1):
            i = bisect.bisect_right(starts, b1)
            return any(spans[j][1] > b0 for j in range(max(0, i - 3), i))

        so = mean([1.0 if overlaps(r["bstart"], r["bend"]) else 0.0 for r in slow])
        ao = mean([1.0 if overlaps(r["bstart"], r["bend"]) else 0.0 for r in rows])
        print("batches overlapping a main-loop checkpoint: all requests %.0f%%, slowest %.0f%%"
              % (ao * 100, so * 100))
    bl = [(b[4], (b[5] - b[4]) / 1e6, (b[6] - b[5]) / 1e6 if b[6] > b[5] else 0, b[2]) for b in batches]
    print("batches: commit p50 %.3f p99 %.2f max %.2f; flush p50 %.3f p99 %.2f max %.2f ms; "
          "groups p50 %d mean %.1f" % (pct([x[1] for x in bl], 50), pct([x[1] for x in bl], 99),
                                        max(x[1] for x in bl), pct([x[2] for x in bl], 50),
                                        pct([x[2] for x in bl], 99), max(x[2] for x in bl),
                                        pct([x[3] for x in bl], 50), mean([x[3] for x in bl])))
    top = sorted(bl, key=lambda x: -x[1])[:5]
    print("longest commits (ms, groups): " + ", ".join("%.1f (%d)" % (x[1], x[3]) for x in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
