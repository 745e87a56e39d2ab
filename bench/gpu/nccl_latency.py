#!/usr/bin/env python3
"""Time relay adds to small NCCL collectives, from nccl_latency.sh's rounds.

Usage: nccl_latency.py [--against REF] COLLECTIVE DIR ROUNDS VARIANT...

Reads DIR/raw_<c>_<k>.json and DIR/<variant>_<c>_<k>.json for k = 1..ROUNDS
and prints a Markdown table per variant: for each size, the median over
rounds of raw NCCL's and the variant's time per call (out of place and in
place), and the median and range of the per-round differences; then the
same for the host's time to issue a call (issue_us), where the JSON has
it. Rounds ran one after the other, so round k of each side saw the same
state of the machine; the median difference is the figure to quote. --against REF
compares with another variant's rounds instead of raw NCCL's (REF=baseline:
a change's effect, measured alternating with it).
"""
import os
import statistics
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]
from report_rows import load_rows  # noqa: E402


def times(path_pattern, rounds, side, field="time_us"):
    """{size: [field of round 1, ..., round R]} for one side of the table
    (rows without the field, such as older JSON without issue_us, are left
    out)."""
    out = {}
    for k in range(1, rounds + 1):
        for row in load_rows(path_pattern % k):
            if row.get(side) and field in row[side]:
                out.setdefault(row["size"], []).append(row[side][field])
    return out


def print_table(c, d, rounds, ref, ref_name, v, side, field, what):
    raw = times(f"{d}/{ref}_{c}_%d.json", rounds, side, field)
    relay = times(f"{d}/{v}_{c}_%d.json", rounds, side, field)
    sizes = sorted(set(raw) & set(relay))
    if not sizes:
        return
    print(f"### {c}, {side.replace('_', ' ')}: {v} vs {ref_name} "
          f"(medians of {rounds} rounds, {what})\n")
    print(f"| size (B) | {ref} | {v} | added (median) | added (range) |")
    print("|---:|---:|---:|---:|---:|")
    worst = None
    for size in sizes:
        a, b = raw[size], relay[size]
        diffs = [y - x for x, y in zip(a, b)]
        added = statistics.median(diffs)
        worst = added if worst is None else max(worst, added)
        print(f"| {size} | {statistics.median(a):.2f} | "
              f"{statistics.median(b):.2f} | {added:+.2f} | "
              f"{min(diffs):+.2f} .. {max(diffs):+.2f} |")
    print(f"\nlargest median added time: {worst:+.2f} us\n")


def main():
    args = sys.argv[1:]
    ref, ref_name = "raw", "raw NCCL"
    if args[:1] == ["--against"]:
        ref = ref_name = args[1]
        args = args[2:]
    c, d, rounds, variants = args[0], args[1], int(args[2]), args[3:]
    # time_us: the time per call of a queued loop, GPU included. issue_us:
    # the host's own time to issue a call, which is all relay adds wherever
    # the host keeps ahead of the GPU (absent from older JSON).
    for field, what in (("time_us", "us per call"),
                        ("issue_us", "host us to issue a call")):
        for side in ("out_of_place", "in_place"):
            for v in variants:
                print_table(c, d, rounds, ref, ref_name, v, side, field, what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
