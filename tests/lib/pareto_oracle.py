"""An independent Pareto oracle for the tests of /pareto and the dashboard's
Pareto view, written from the definitions (not from server/core): points
are lists of objective values in their own directions (modes "min"/"max");
None or a non-finite value puts a point out of every front and rank."""
import itertools
import math


def finite(p):
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in p)


def minimised(p, modes):
    return [-x if m == "max" else x for x, m in zip(p, modes)]


def dominates(a, b, modes):
    a, b = minimised(a, modes), minimised(b, modes)
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def front_of(points, modes):
    """{key: point} -> the all-finite points no other all-finite point dominates."""
    ok = {t: p for t, p in points.items() if finite(p)}
    return {t: p for t, p in ok.items() if not any(dominates(q, p, modes) for q in ok.values())}


def ranks(points, modes):
    """{key: point} -> {key: non-dominated sorting rank (1: the front), None
    for a point not all finite}, by peeling one front at a time."""
    left = {t: p for t, p in points.items() if finite(p)}
    out, r = {t: None for t in points}, 1
    while left:
        layer = [t for t, p in left.items() if not any(dominates(q, p, modes) for q in left.values())]
        for t in layer:
            out[t] = r
            del left[t]
        r += 1
    return out


def derived_ref(front, modes):
    """The front's nadir moved 10% of its range (10% of max(|nadir|, 1) when
    the range is 0) in the worse direction, in the objectives' own units."""
    ref = []
    for j, m in enumerate(modes):
        xs = [minimised(p, modes)[j] for p in front.values()]
        worst, best = max(xs), min(xs)
        r = worst + 0.1 * (worst - best if worst > best else max(abs(worst), 1.0))
        ref.append(-r if m == "max" else r)
    return ref


def hypervolume(points, ref, modes):
    """Inclusion-exclusion over every subset of the all-finite points strictly
    better than ref on every objective (a dozen points at most)."""
    r = minimised(ref, modes)
    pts = [minimised(p, modes) for p in points if finite(p)]
    pts = [p for p in pts if all(x < y for x, y in zip(p, r))]
    total = 0.0
    for size in range(1, len(pts) + 1):
        for sub in itertools.combinations(pts, size):
            vol = 1.0
            for j in range(len(r)):
                vol *= r[j] - max(p[j] for p in sub)
            total += vol if size % 2 else -vol
    return total


def history(points, order, ref, modes):
    """[(trials counted, hypervolume)] each time the volume of the first
    trials in order (keys; those without a point count nothing) grew."""
    out, prev = [], 0.0
    for i in range(len(order)):
        v = hypervolume([points[t] for t in order[:i + 1] if t in points], ref, modes)
        if v > prev + 1e-12:
            out.append((i + 1, v))
        prev = v
    return out
