#!/usr/bin/env python3
"""Bootstrap intervals for FALCON's stress test (§VI-B2).

Reads `<out>/stress-runs-<file>.csv` (variant, run, download, start s, download time s) that
`braid train falcon --evaluate` writes for a scenario file with changes, and prints one
markdown row per variant: downloads, median download time, relative score (median DQN-Off
download time / the variant's, as evaluate.rs computes it) with a 5-95 % bootstrap interval.
Downloads are resampled with replacement, each variant's independently (the variants' downloads
start at different times, so they are not paired).

Usage: stress_stats.py [--boot B] [--seed S] FILE.csv [FILE.csv ...]
Standard library only.
"""

import argparse
import csv
import random
from collections import defaultdict

from stats_common import median, pct


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print("| file | variant | runs | downloads | median download s | relative score [5 %, 95 %] |")
    print("|---|---|---|---|---|---|")
    for path in args.files:
        fcts = defaultdict(list)
        runs = defaultdict(set)
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                fcts[row["variant"]].append(float(row["fct_s"]))
                runs[row["variant"]].add(row["run"])
        name = path.rsplit("stress-runs-", 1)[-1].removesuffix(".csv")
        ref = fcts["dqn-off"]
        ref_boot = [median([rng.choice(ref) for _ in ref]) for _ in range(args.boot)]
        for variant, values in fcts.items():
            m = median(values)
            boot = [rb / median([rng.choice(values) for _ in values]) for rb in ref_boot]
            print(f"| {name} | {variant} | {len(runs[variant])} | {len(values)} | {m:.4f} | "
                  f"{median(ref) / m:.3f} [{pct(boot, 0.05):.3f}, {pct(boot, 0.95):.3f}] |")


if __name__ == "__main__":
    main()
