#!/usr/bin/env python3
"""Tables from bench/ab_latency.sh output: each side's median time, and
each non-MPI side's paired ratio to every Open MPI side of the same round,
with a 95% bootstrap interval.

ab_latency.sh prints each side's ratio to its first BIN; the foundation
issue's target compares relay with Open MPI. This reads the "all:" lists
(two figures a round: out of place, in place), takes each round's better
figure per side, and prints, per "=== ..." section of the input:
  - every side's median time;
  - for each non-MPI side, its ratio to each MPI side (side / MPI, paired
    by round): the median over rounds, a 95% bootstrap interval of that
    median (5,000 resamples of the rounds, seeded: the same input prints
    the same table), and in how many rounds the side was the faster;
  - the same against the faster MPI side of each round ("best"). That one
    is stricter than any single MPI side: where two MPI sides run the same
    algorithm it is the smaller of two draws of one figure, which is below
    either draw's median even when nothing differs.

Usage: bench/paired_table.py FILE   (the output of one or more
ab_latency.sh runs with `mpi` sides, each run after a "=== title" line)
"""
import re
import statistics
import sys

from intervals import median_interval


def rounds_best(figures, rounds):
    """Each round's better figure: ab_latency.sh prints two a round (out
    of place, in place), or one where the collective has no in-place form."""
    per_round = len(figures) // rounds if rounds else 2
    if per_round not in (1, 2) or per_round * rounds != len(figures):
        sys.exit(f"paired_table.py: {len(figures)} figures for {rounds} rounds")
    return [min(figures[i:i + per_round])
            for i in range(0, len(figures), per_round)]


def ratio_line(label, best, reference):
    ratios = [b / m for b, m in zip(best, reference) if m > 0]
    if not ratios:
        return f"    / {label}: no rounds"
    low, high = median_interval(ratios)
    faster = sum(r < 1 for r in ratios)
    return (f"    / {label}: median {statistics.median(ratios):.3f} "
            f"(95%: {low:.3f} to {high:.3f}), faster in {faster} of "
            f"{len(ratios)} rounds")


def main(path):
    section, sides, rounds = None, {}, 0

    def flush():
        if not sides:
            return
        mpi = [k for k in sides if k.split('@')[0] == 'mpi']
        print(f"{section}")
        for name, figures in sides.items():
            print(f"  {name}: median {statistics.median(figures):.3f} us")
        for name, figures in sides.items():
            if not mpi or name in mpi:
                continue
            best = rounds_best(figures, rounds)
            print(f"  {name}, paired by round:")
            per_mpi = {m: rounds_best(sides[m], rounds) for m in mpi}
            for m in mpi:
                print(ratio_line(m, best, per_mpi[m]))
            if len(mpi) > 1:
                fastest = [min(per_mpi[m][r] for m in mpi)
                           for r in range(len(best))]
                print(ratio_line("best MPI side of each round", best, fastest))
            print("    rounds (/ best): " + " ".join(
                f"{b / f:.2f}" for b, f in zip(best, fastest if len(mpi) > 1
                                               else per_mpi[mpi[0]])))

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
