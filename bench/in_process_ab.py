#!/usr/bin/env python3
"""Summarises an in-process A/B: lines `EXP SIZE US_0 US_1 ...`, one per
process, each the mean half round trip of policies that one process ran in
blocks taking turns (the patches in bench/results/*/in_process_ab.patch
print them from bench/pingpong). Draw each block's policy from a seeded
sequence: a fixed order (ABAB, ABBA) lined up with a periodic cost in UCX
and read 0.05 us between identical policies at 4 KB
(bench/results/2026-11-27-direct-completion/). Run a null A/B (both slots
the same policy) beside a real one to see what the harness alone reads. Per size: the median over processes of
each policy's difference from policy 0, with a 95% bootstrap interval
(bench/intervals.py), and how many processes it was faster in.

Usage: bench/in_process_ab.py FILE [NAME ...]
  NAME  labels for policies 1, 2, ... (default: policy 1, policy 2, ...)
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from intervals import median_interval  # noqa: E402


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    rows = {}
    with open(argv[1]) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 4 or fields[0] != "EXP":
                continue
            rows.setdefault(int(fields[1]), []).append(
                [float(x) for x in fields[2:]])
    if not rows:
        print(f"in_process_ab.py: no EXP lines in {argv[1]}", file=sys.stderr)
        return 1
    names = argv[2:]
    print(f"{'size (B)':>9}  {'runs':>4}  {'policy 0 (us)':>13}  "
          "policy - policy 0, median (95%), processes faster")
    for size, runs in sorted(rows.items()):
        cells = []
        for m in range(1, len(runs[0])):
            diffs = [r[m] - r[0] for r in runs]
            low, high = median_interval(diffs)
            name = names[m - 1] if m - 1 < len(names) else f"policy {m}"
            cells.append(f"{name} {statistics.median(diffs):+.3f} "
                         f"({low:+.3f} to {high:+.3f}) "
                         f"{sum(d < 0 for d in diffs)} of {len(diffs)}")
        base = statistics.median(r[0] for r in runs)
        print(f"{size:>9}  {len(runs):>4}  {base:>13.3f}  " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
