#!/usr/bin/env python3
"""Sets relay's all_reduce beside Open MPI's and Gloo's, size by size.

Reads JSON files written with --json by bench/collectives (relay), by
bench/peers/mpi_collectives (one file per Open MPI algorithm and round, named
*.algK.json) and by bench/peers/gloo_allreduce (one per Gloo algorithm and
round, named *.gloo-NAME.json), and prints a Markdown table with each side's
median over rounds of the better of out-of-place and in-place, the best
algorithm per size for the peers, and the multi-process issue's ratios:
busbw relay / best MPI, busbw relay / best Gloo, time relay / best MPI.

Usage: compare_allreduce_peers.py --relay R*.json --mpi M*.algK.json
                                  [--gloo G*.gloo-NAME.json]
"""
import re
import sys
from collections import defaultdict

from allreduce_rows import medians


def grouped(paths, pattern):
    """Algorithm name -> {size: (time, busbw)}, from file names."""
    by_alg = defaultdict(list)
    for p in paths:
        m = re.search(pattern, p)
        by_alg[m.group(1) if m else "default"].append(p)
    return {alg: medians(ps) for alg, ps in sorted(by_alg.items())}


def best(algs, size):
    """(best busbw, its algorithm, best time, its algorithm) at `size`."""
    cands = [(t[size], alg) for alg, t in algs.items() if size in t]
    if not cands:
        return None
    (bt, ba) = max(cands, key=lambda c: c[0][1])
    (tt, ta) = min(cands, key=lambda c: c[0][0])
    return bt[1], ba, tt[0], ta


def args_after(argv, flag, flags):
    if flag not in argv:
        return []
    i = argv.index(flag) + 1
    out = []
    while i < len(argv) and argv[i] not in flags:
        out.append(argv[i])
        i += 1
    return out


def main(argv):
    flags = ("--relay", "--mpi", "--gloo")
    relay_paths = args_after(argv, "--relay", flags)
    mpi_paths = args_after(argv, "--mpi", flags)
    gloo_paths = args_after(argv, "--gloo", flags)
    if not relay_paths or not mpi_paths:
        sys.exit(__doc__)
    relay = medians(relay_paths)
    mpi = grouped(mpi_paths, r"\.alg(\d+)\.json$")
    gloo = grouped(gloo_paths, r"\.gloo-([a-z_]+)\.json$") if gloo_paths else {}
    print("| size (B) | relay time (us) | MPI best time (us) | time relay/MPI "
          "| relay busbw (GB/s) | MPI best busbw (alg) | busbw relay/MPI "
          "| Gloo best busbw (alg) | busbw relay/Gloo |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sorted(relay):
        m = best(mpi, size)
        if m is None:
            continue
        rt, rb = relay[size]
        mb, ma, mt, _ = m
        g = best(gloo, size) if gloo else None
        gcols = (f"{g[0]:.3f} ({g[1]}) | {rb / g[0]:.2f}" if g and g[0] > 0
                 else "n/a | n/a")
        print(f"| {size} | {rt:.2f} | {mt:.2f} | {rt / mt:.2f} | {rb:.3f} | "
              f"{mb:.3f} ({ma}) | {rb / mb if mb > 0 else float('nan'):.2f} | "
              f"{gcols} |")


if __name__ == "__main__":
    main(sys.argv)
