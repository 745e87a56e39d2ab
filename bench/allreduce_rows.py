"""Reading all_reduce rows from the benchmarks' JSON files, for the comparison
scripts beside this file (compare_allreduce.py, compare_allreduce_peers.py).

Every harness writes the nccl-tests rows through //bench:report; these take
each size's better of out-of-place and in-place and the median over rounds.
"""
import json
import statistics
from collections import defaultdict


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


def medians(paths):
    """size -> (median time, median busbw) over the files."""
    times, bws = defaultdict(list), defaultdict(list)
    for path in paths:
        for size, row in rows(path).items():
            t, b = best_of(row)
            times[size].append(t)
            bws[size].append(b)
    return {s: (statistics.median(times[s]), statistics.median(bws[s]))
            for s in times}
