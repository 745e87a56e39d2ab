#!/usr/bin/env python3
"""Tables from bench/ab_latency.sh output: each side's median time, and
each side's paired ratio to the best Open MPI side of the same round.

ab_latency.sh prints each side's ratio to its first BIN; a comparison
against Open MPI's best algorithm needs the ratio to whichever MPI side is
faster in each round. This reads the "all:" lists (two figures a round:
out of place, in place), takes each round's better figure per side, and
prints, per "=== ..." section of the input, every side's median and its
median over rounds of (side / fastest MPI side of that round).

Usage: bench/paired_table.py FILE   (the output of one or more
ab_latency.sh runs with `mpi` sides, each run after a "=== title" line)
"""
import re
import statistics
import sys


def rounds_best(figures):
    pairs = [figures[i:i + 2] for i in range(0, len(figures), 2)]
    return [min(p) for p in pairs]


def main(path):
    section, sides = None, {}

    def flush():
        if not sides:
            return
        mpi = [k for k in sides if k.split('@')[0] == 'mpi']
        print(f"{section}")
        for name, figures in sides.items():
            best = rounds_best(figures)
            line = f"  {name}: median {statistics.median(figures):.2f} us"
            if mpi and name not in mpi:
                mpi_best = [min(rounds_best(sides[m])[r] for m in mpi)
                            for r in range(len(best))]
                ratios = [b / m for b, m in zip(best, mpi_best) if m > 0]
                line += (f", / Open MPI's best, paired: median "
                         f"{statistics.median(ratios):.2f} (rounds: "
                         + " ".join(f"{x:.2f}" for x in ratios) + ")")
            print(line)

    for raw in open(path):
        if raw.startswith('==='):
            flush()
            section, sides = raw.strip('= \n'), {}
            continue
        m = re.match(r'^(\S+): median [\d.]+ us \(all: ([\d. ]+)\)', raw)
        if m:
            sides[m.group(1)] = [float(x) for x in m.group(2).split()]
    flush()


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
