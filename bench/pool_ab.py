#!/usr/bin/env python3
"""Pools paired rounds from several bench/ab_pingpong.sh outputs.

Runs of ab_pingpong.sh on the 2-core build VMs differ by more than each
run's own interval (the VM changes phase between runs), so a claim rests
on the rounds of several runs together. Each argument names a file and
two of its sides; the rounds of each file are paired as the script paired
them (same round, same position), and every file's differences go into
one median with a 95% bootstrap interval (bench/intervals.py).

Usage:
    bench/pool_ab.py FILE:SIDE-BASE [FILE:SIDE-BASE ...]

Example (relay's noby build against ucx_perftest, two runs):
    bench/pool_ab.py run1.txt:noby-perftest run2.txt:noby-perftest

Prints each file's median and interval, then the pooled one.
"""
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from intervals import median_interval  # noqa: E402

SIDE = re.compile(
    r'^\s*(\S+)\s+median\s+\S+ us\s+min\s+\S+\s+rounds: ([-+\d. ]+)$', re.M)


def sides(path):
    """{side name: [round medians, in round order]} of one output."""
    with open(path) as f:
        text = f.read()
    return {m.group(1): [float(x) for x in m.group(2).split()]
            for m in SIDE.finditer(text)}


def parse(arg):
    """FILE:SIDE-BASE -> (FILE, SIDE, BASE)."""
    path, sep, pair = arg.rpartition(':')
    side, dash, base = pair.partition('-')
    if not sep or not dash or not side or not base:
        raise ValueError(f'expected FILE:SIDE-BASE, got {arg!r}')
    return path, side, base


def main(argv):
    if not argv or argv[0] in ('-h', '--help'):
        print(__doc__.strip(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    pooled = []
    for arg in argv:
        try:
            path, side, base = parse(arg)
            found = sides(path)
        except (ValueError, OSError) as e:
            print(f'pool_ab.py: {e}', file=sys.stderr)
            return 2
        missing = [s for s in (side, base) if s not in found]
        if missing:
            print(f'pool_ab.py: {path} has no side {", ".join(missing)} '
                  f'(it has {", ".join(sorted(found)) or "none"})',
                  file=sys.stderr)
            return 2
        if len(found[side]) != len(found[base]):
            print(f'pool_ab.py: {path}: {side} has {len(found[side])} rounds, '
                  f'{base} {len(found[base])}', file=sys.stderr)
            return 2
        diffs = [a - b for a, b in zip(found[side], found[base])]
        low, high = median_interval(diffs)
        print(f'{arg}: {len(diffs)} rounds, median {statistics.median(diffs):+.2f} us '
              f'(95%: {low:+.2f} to {high:+.2f})')
        pooled += diffs
    low, high = median_interval(pooled)
    print(f'pooled: {len(pooled)} rounds, median {statistics.median(pooled):+.2f} us '
          f'(95%: {low:+.2f} to {high:+.2f})')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
