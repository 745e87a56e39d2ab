"""Reading bench/report.h output: the nccl-tests rows every harness writes
(bench/collectives, bench/peers/*), one per size, each with an out-of-place
and an in-place side of time_us, algbw, busbw and wrong elements.

A run writes a text table as it goes and its JSON at the end; a run cut off
(a time limit on a GPU host) leaves only the table, so rows are read from
the text where the JSON is missing.
"""
import json
import os

TEXT_COLUMNS = 13


def _rows_from_text(path):
    rows = []
    with open(path) as f:
        for line in f:
            cols = line.split()
            if line.startswith("#") or len(cols) != TEXT_COLUMNS:
                continue
            try:
                def side(k):
                    return {"time_us": float(cols[k]), "algbw": float(cols[k + 1]),
                            "busbw": float(cols[k + 2]), "wrong": int(cols[k + 3])}
                rows.append({"size": int(cols[0]), "out_of_place": side(5),
                             "in_place": side(9)})
            except ValueError:
                continue  # A line of another table with as many words.
    return rows


def load(path):
    """{size: row} of one run: PATH.json, or PATH.txt where the JSON is
    missing (PATH may name either, or neither extension)."""
    stem = path[:-5] if path.endswith(".json") else (
        path[:-4] if path.endswith(".txt") else path)
    if os.path.exists(stem + ".json"):
        with open(stem + ".json") as f:
            doc = json.load(f)
        runs = doc["runs"] if "runs" in doc else [doc]
        return {row["size"]: row for run in runs for row in run["rows"]}
    if os.path.exists(stem + ".txt"):
        return {row["size"]: row for row in _rows_from_text(stem + ".txt")}
    raise FileNotFoundError(f"no {stem}.json or {stem}.txt")


def _valid(half):
    return bool(half) and half.get("time_us") not in (None, 0) and half["time_us"] > 0


def best_of(row):
    """The better of out-of-place and in-place: (time_us, busbw). A side a
    collective does not have (in-place all_to_all) is left out."""
    t, bw, _ = best_with_issue(row)
    return t, bw


def best_with_issue(row):
    """best_of, and the host's time to start each call of that half
    (issue_us: a stream-ordered run's calls are queued, so this is the
    host's share of the time per call; NaN where the run did not say)."""
    halves = [h for h in (row.get("out_of_place"), row.get("in_place")) if _valid(h)]
    if not halves:
        return float("nan"), float("nan"), float("nan")
    best = min(halves, key=lambda h: h["time_us"])
    issue = best.get("issue_us")
    return (best["time_us"], best["busbw"],
            float(issue) if issue is not None and issue >= 0 else float("nan"))


def wrong(row):
    """Wrong elements the run found in either half (-1, unchecked, counts 0)."""
    return sum(max(h.get("wrong") or 0, 0)
               for h in (row.get("out_of_place"), row.get("in_place")) if h)
