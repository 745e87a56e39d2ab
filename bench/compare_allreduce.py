#!/usr/bin/env python3
"""Sets relay's all_reduce beside Open MPI's, size by size, as ratios.

Reads the JSON files written by bench/collectives (--json) and by
bench/peers/mpi_collectives (one file per Open MPI algorithm, from
run_mpi_allreduce.sh --best --json) and prints a Markdown table: relay's
time and busbw, Open MPI's default and best algorithm, and the ratios the
foundation issue targets (busbw relay / best MPI; time relay / default MPI).

Usage: compare_allreduce.py RELAY.json MPI_ALG0.json [MPI_ALG1.json ...]
"""
import json
import sys


def rows(path):
    with open(path) as f:
        doc = json.load(f)
    runs = doc["runs"] if "runs" in doc else [doc]
    out = {}
    for run in runs:
        if run["collective"] != "all_reduce":
            continue
        for row in run["rows"]:
            out[row["size"]] = row
    return out


def best_of(row):
    """The better of out-of-place and in-place: (time_us, busbw)."""
    cands = [row["out_of_place"]]
    if row.get("in_place") and row["in_place"].get("time_us"):
        cands.append(row["in_place"])
    best = min(cands, key=lambda c: c["time_us"])
    return best["time_us"], best["busbw"]


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    relay = rows(argv[1])
    mpi = [(p, rows(p)) for p in argv[2:]]
    default = mpi[0][1]
    print("| size (B) | relay time (us) | MPI default time (us) | time ratio "
          "relay/MPI | relay busbw (GB/s) | MPI best busbw (GB/s) | MPI best "
          "algorithm | busbw ratio relay/best |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    for size in sorted(relay):
        if size not in default:
            continue
        rt, rb = best_of(relay[size])
        dt, _ = best_of(default[size])
        best_b, best_name = 0.0, "-"
        for path, table in mpi:
            if size in table:
                _, b = best_of(table[size])
                if b > best_b:
                    best_b, best_name = b, path.rsplit(".alg", 1)[-1].split(".")[0]
        ratio = rb / best_b if best_b > 0 else float("nan")
        print(f"| {size} | {rt:.2f} | {dt:.2f} | {rt / dt:.2f} | {rb:.3f} | "
              f"{best_b:.3f} | {best_name} | {ratio:.2f} |")


if __name__ == "__main__":
    main(sys.argv)
