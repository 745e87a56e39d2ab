"""Rows of one bench/report.h run, for the comparison and plot scripts.

A run writes a text table as it goes and its JSON at the end; a run cut off
(a time limit on a GPU host) leaves only the table, so its rows are read
from the text where the JSON is missing.
"""
import json
import os


def rows_from_text(path):
    """The rows a bench/report.h text table printed."""
    rows = []
    with open(path) as f:
        for line in f:
            cols = line.split()
            if line.startswith("#") or len(cols) != 13:
                continue
            def side(k):
                return {"time_us": float(cols[k]), "algbw": float(cols[k + 1]),
                        "busbw": float(cols[k + 2]), "wrong": int(cols[k + 3])}
            rows.append({"size": int(cols[0]), "out_of_place": side(5),
                         "in_place": side(9)})
    return rows


def load_rows(path_json):
    """The rows of PATH.json, or of PATH.txt where the JSON was not written."""
    if os.path.exists(path_json):
        with open(path_json) as f:
            return json.load(f)["runs"][0]["rows"]
    return rows_from_text(path_json[: -len(".json")] + ".txt")
