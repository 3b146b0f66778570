#!/usr/bin/env python3
"""Bootstrap intervals for FALCON's window-mode convergence test (§VI-B1).

Reads the raw chunk marks that `braid train falcon --evaluate` writes in window mode
(`<out>/window-runs-<condition>.csv`: variant, run, chunk, µs, server packets before) and prints
markdown tables: per condition and for the mean over the conditions, each variant's relative
score (median over runs of DQN-Off's window time / median over runs of the variant's, as
evaluate.rs computes it) with a bootstrap interval, and the packets until the score stays
≥ 0.9 with its bootstrap interval. The noise row scores DQN-Off's even runs against its odd
runs. Resampling is over runs, paired: run r of every variant uses the same network seed, so a
replicate draws run indices once per condition and uses them for every variant.

Usage: window_stats.py [--boot B] [--seed S] [--bins] FILE.csv [FILE.csv ...]
Standard library only (no numpy).
"""

import argparse
import csv
import random
import sys
from collections import defaultdict

from stats_common import median, pct

CHUNKS = 80  # 20 MB / 250 kB
SPAN = 8  # chunks per 2 MB window
CAP_S = 120.0
THRESHOLD = 0.9
WINDOWS = CHUNKS - SPAN + 1
# Coarser points for the binned curve: groups of consecutive windows (start, end exclusive).
BINS = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, 8), (8, 12), (12, 16), (16, 24),
        (24, 32), (32, 48), (48, 73)]


def load(path):
    """variant -> run -> list of (us, packets) per chunk."""
    marks = defaultdict(lambda: defaultdict(dict))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            marks[row["variant"]][int(row["run"])][int(row["chunk"])] = (
                int(row["us"]), int(row["packets_before"]))
    return marks


def window_times(chunks):
    """Per window k: (time s, packets before); as evaluate.rs's window_times."""
    out = []
    for k in range(WINDOWS):
        start = (0, 0) if k == 0 else chunks.get(k - 1)
        end = chunks.get(k + SPAN - 1)
        if start is not None and end is not None:
            out.append(((end[0] - start[0]) / 1e6, float(start[1])))
        elif start is not None:
            out.append((CAP_S, float(start[1])))
        else:
            last = max(chunks.values(), default=(0, 0))[1]
            out.append((CAP_S, float(last)))
    return out


def medians(runs, idx, bins):
    """Per point: the median over the runs `idx` of the point's time (windows summed)."""
    points = bins if bins else [(k, k + 1) for k in range(WINDOWS)]
    return [median([sum(runs[i][k][0] for k in range(a, b)) for i in idx]) for a, b in points]


def curve(ref_medians, var_medians):
    """Score per point: median(ref) / median(variant)."""
    return [r / v if v > 0 else 0.0 for r, v in zip(ref_medians, var_medians)]


def packets_axis(var_runs, bins):
    points = bins if bins else [(k, k + 1) for k in range(WINDOWS)]
    n = len(var_runs)
    return [sum(r[a][1] for r in var_runs) / n for a, _ in points]


def packets_to(packets, scores):
    """Packets before the first point from which every score is ≥ 0.9; None: never."""
    last_below = None
    for k, s in enumerate(scores):
        if s < THRESHOLD:
            last_below = k
    if last_below is None:
        return packets[0]
    if last_below + 1 == len(scores):
        return None
    return packets[last_below + 1]


def fmt_to(x):
    return "never" if x is None else f"{x:.0f}"


def summary_to(samples):
    """Median and 5-95 % of packets-to-0.9 samples (never = +inf)."""
    inf = float("inf")
    vals = [inf if s is None else s for s in samples]
    never = sum(1 for s in samples if s is None) / len(samples)
    lo, mid, hi = pct(vals, 0.05), pct(vals, 0.5), pct(vals, 0.95)
    f = lambda x: "never" if x == inf else f"{x:.0f}"
    extra = f", never in {100 * never:.0f} %" if never > 0 else ""
    return f"{f(mid)} [{f(lo)}, {f(hi)}]{extra}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--boot", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bins", action="store_true", help="score groups of windows (BINS)")
    ap.add_argument("--show", default="0,1,2,3,4,6,8,12,16,24,32,48,72")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    bins = BINS if args.bins else None
    rng = random.Random(args.seed)
    conds = []
    for path in args.files:
        marks = load(path)
        name = path.rsplit("window-runs-", 1)[-1].removesuffix(".csv")
        variants = list(marks.keys())
        runs = {v: [window_times(marks[v][r]) for r in sorted(marks[v])] for v in variants}
        n = min(len(r) for r in runs.values())
        runs = {v: r[:n] for v, r in runs.items()}
        conds.append((name, variants, runs, n))
    variants = conds[0][1]
    ref = "dqn-off"
    rows = [v for v in variants if v != ref] + ["noise"]
    show = [int(x) for x in args.show.split(",")]
    npoints = len(bins) if bins else WINDOWS
    show = [k for k in show if k < npoints] if not bins else list(range(npoints))

    def scores_for(c, idx):
        name, _, runs, n = c
        out = {}
        ref_m = medians(runs[ref], idx, bins)
        for v in rows:
            if v == "noise":
                even = [i for i in idx if i % 2 == 0]
                odd = [i for i in idx if i % 2 == 1]
                out[v] = curve(medians(runs[ref], odd, bins), medians(runs[ref], even, bins))
            else:
                out[v] = curve(ref_m, medians(runs[v], idx, bins))
        return out

    point = [scores_for(c, list(range(c[3]))) for c in conds]
    axes = [{v: packets_axis(c[2][ref if v == "noise" else v], bins) for v in rows} for c in conds]
    boot = []
    for _ in range(args.boot):
        boot.append([scores_for(c, [rng.randrange(c[3]) for _ in range(c[3])]) for c in conds])

    def mean_over(curves_per_cond, v):
        m = len(curves_per_cond)
        return [sum(c[v][k] for c in curves_per_cond) / m for k in range(npoints)]

    mean_axis = {v: [sum(a[v][k] for a in axes) / len(axes) for k in range(npoints)] for v in rows}
    print(f"runs per condition: {', '.join(f'{c[0]} {c[3]}' for c in conds)}; "
          f"{args.boot} bootstrap replicates (paired over runs), intervals 5-95 %; "
          f"{'binned windows ' + str(BINS) if bins else 'every window'}\n")
    tables = [(c[0], [p[i] for p in [point]][0], [b[i] for b in boot], axes[i])
              for i, c in enumerate(conds)]
    if len(conds) > 1:
        tables.append(("mean", None, None, mean_axis))
    for name, pt, bt, axis in tables:
        if name == "mean":
            pt = {v: mean_over(point, v) for v in rows}
            bt = [{v: mean_over(b, v) for v in rows} for b in boot]
        print(f"**{name}** (score [5 %, 95 %] at window, x = mean packets before it)\n")
        print("| variant | packets to 0.9 (point) | packets to 0.9, bootstrap median [5 %, 95 %] "
              "| packets until the 5 % bound stays ≥ 0.9 "
              "| late (median of 2nd half) | " + " | ".join(f"w{k}" for k in show) + " |")
        print("|---|---|---|---|---|" + "---|" * len(show))
        for v in rows:
            s = pt[v]
            to = packets_to(axis[v], s)
            to_boot = [packets_to(axis[v], b[v]) for b in bt]
            late = median(s[npoints // 2:])
            late_b = [median(b[v][npoints // 2:]) for b in bt]
            cells = []
            for k in show:
                kb = [b[v][k] for b in bt]
                cells.append(f"{s[k]:.2f} [{pct(kb, 0.05):.2f}, {pct(kb, 0.95):.2f}] @{axis[v][k]:.0f}")
            lower = [pct([b[v][k] for b in bt], 0.05) for k in range(npoints)]
            label = "noise (dqn-off odd/even)" if v == "noise" else v
            print(f"| {label} | {fmt_to(to)} | {summary_to(to_boot)} "
                  f"| {fmt_to(packets_to(axis[v], lower))} | {late:.3f} "
                  f"[{pct(late_b, 0.05):.3f}, {pct(late_b, 0.95):.3f}] | " + " | ".join(cells) + " |")
        # How well a point is known: the width of its 90 % interval, per row.
        print("\n90 % interval width per point (median / max over the points): " + "; ".join(
            f"{'noise' if v == 'noise' else v} "
            f"{median(ws := [pct([b[v][k] for b in bt], 0.95) - pct([b[v][k] for b in bt], 0.05) for k in range(npoints)]):.3f}"
            f" / {max(ws):.3f}" for v in rows)
            + f". Noise row points span {min(pt['noise']):.2f}-{max(pt['noise']):.2f}.\n")


if __name__ == "__main__":
    sys.exit(main())
