#!/usr/bin/env python3
"""Sets relay's all_reduce beside Open MPI's, size by size, as ratios.

Reads the JSON files written by bench/collectives (--json) and by
bench/peers/mpi_collectives (one file per Open MPI algorithm and round, from
run_mpi_allreduce.sh --best --json, named *.algK.json) and prints a Markdown
table: relay's time and busbw, Open MPI's default and best algorithm, and the
ratios the foundation issue targets (busbw relay / best MPI; time relay /
default MPI). Every figure is the median over rounds of the better of
out-of-place and in-place.

Usage: compare_allreduce.py --relay R1.json [R2.json ...]
                            --mpi M_r1.alg0.json [M_r1.alg1.json ...]
"""
import re
import sys
from collections import defaultdict

from allreduce_rows import medians


def main(argv):
    if "--relay" not in argv or "--mpi" not in argv:
        sys.exit(__doc__)
    i, j = argv.index("--relay"), argv.index("--mpi")
    relay_paths = argv[i + 1:j] if i < j else argv[i + 1:]
    mpi_paths = argv[j + 1:] if j > i else argv[j + 1:i]
    relay = medians(relay_paths)
    by_alg = defaultdict(list)
    for p in mpi_paths:
        m = re.search(r"\.alg(\d+)\.json$", p)
        by_alg[int(m.group(1)) if m else 0].append(p)
    mpi = {alg: medians(paths) for alg, paths in sorted(by_alg.items())}
    default = mpi.get(0, next(iter(mpi.values())))
    print("| size (B) | relay time (us) | MPI default time (us) | time "
          "relay/MPI | relay busbw (GB/s) | MPI best busbw (GB/s) | MPI best "
          "alg | busbw relay/best |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in sorted(relay):
        if size not in default:
            continue
        rt, rb = relay[size]
        dt, _ = default[size]
        best_b, best_alg = max((table[size][1], alg)
                               for alg, table in mpi.items() if size in table)
        ratio = rb / best_b if best_b > 0 else float("nan")
        print(f"| {size} | {rt:.2f} | {dt:.2f} | {rt / dt:.2f} | {rb:.3f} | "
              f"{best_b:.3f} | {best_alg} | {ratio:.2f} |")


if __name__ == "__main__":
    main(sys.argv)
