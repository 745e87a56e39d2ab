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


def rounds_best(figures, rounds):
    """Each round's better figure: ab_latency.sh prints two a round (out
    of place, in place), or one where the collective has no in-place form."""
    per_round = len(figures) // rounds if rounds else 2
    if per_round not in (1, 2) or per_round * rounds != len(figures):
        sys.exit(f"paired_table.py: {len(figures)} figures for {rounds} rounds")
    return [min(figures[i:i + per_round])
            for i in range(0, len(figures), per_round)]


def main(path):
    section, sides, rounds = None, {}, 0

    def flush():
        if not sides:
            return
        mpi = [k for k in sides if k.split('@')[0] == 'mpi']
        print(f"{section}")
        for name, figures in sides.items():
            best = rounds_best(figures, rounds)
            line = f"  {name}: median {statistics.median(figures):.2f} us"
            if mpi and name not in mpi:
                mpi_best = [min(rounds_best(sides[m], rounds)[r] for m in mpi)
                            for r in range(len(best))]
                ratios = [b / m for b, m in zip(best, mpi_best) if m > 0]
                line += (f", / Open MPI's best, paired: median "
                         f"{statistics.median(ratios):.2f} (rounds: "
                         + " ".join(f"{x:.2f}" for x in ratios) + ")")
            print(line)

    for raw in open(path):
        if raw.startswith('==='):
            flush()
            section, sides, rounds = raw.strip('= \n'), {}, 0
            continue
        header = re.match(r'^# .*, (\d+) rounds x ', raw)
        if header:
            rounds = int(header.group(1))
            continue
        m = re.match(r'^(\S+): median [\d.]+ us \(all: ([\d. ]+)\)', raw)
        if m:
            sides[m.group(1)] = [float(x) for x in m.group(2).split()]
    flush()


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
