#!/usr/bin/env python3
"""Per-size ratios of relay's NCCL transport to raw NCCL, from compare_nccl.sh.

Usage: compare_nccl.py COLLECTIVE DIR ROUNDS VARIANT...

Reads DIR/raw_<c>_<k>.json and DIR/<variant>_<c>_<k>.json for rounds k = 1..ROUNDS
(bench/report.h's JSON; where a run was cut off before writing its JSON, the
rows its .txt table printed) and prints a Markdown table per size: the best
(lowest) out-of-place time of each side over the rounds, the time relay adds,
both busbws and their ratio. Best-of-rounds on both sides, so a noisy round
on either does not decide the ratio. Exits 1 if any row was wrong.
"""
import os
import sys

# report_rows.py sits in bench/ in the repository and beside this script in
# the folder bench/gpu/build.sh fills.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]
from report_rows import load_rows  # noqa: E402


def best_rows(path_pattern, rounds):
    best = {}
    wrong = 0
    for k in range(1, rounds + 1):
        for row in load_rows(path_pattern % k):
            oop = row["out_of_place"]
            wrong += max(oop["wrong"] or 0, 0)
            if row.get("in_place"):
                wrong += max(row["in_place"]["wrong"] or 0, 0)
            size = row["size"]
            if size not in best or oop["time_us"] < best[size]["time_us"]:
                best[size] = oop
    return best, wrong


def main():
    c, d, rounds, variants = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    raw, wrong = best_rows(f"{d}/raw_{c}_%d.json", rounds)
    for variant in variants:
        relay, relay_wrong = best_rows(f"{d}/{variant}_{c}_%d.json", rounds)
        wrong += relay_wrong
        print(f"### {c}: {variant} vs raw NCCL (best of {rounds} rounds, out of place)\n")
        print(f"| size (B) | raw us | {variant} us | added us | raw busbw | "
              f"{variant} busbw | ratio |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for size in sorted(set(raw) & set(relay)):
            a, b = raw[size], relay[size]
            ratio = b["busbw"] / a["busbw"] if a["busbw"] > 0 else float("nan")
            print(f"| {size} | {a['time_us']:.2f} | {b['time_us']:.2f} | "
                  f"{b['time_us'] - a['time_us']:+.2f} | {a['busbw']:.2f} | "
                  f"{b['busbw']:.2f} | {ratio:.3f} |")
        print(f"\nwrong elements in {variant}: {relay_wrong}\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
