"""Markdown tables of sides against a reference side.

`sides_table` reads a folder that rounds.run filled (DIR/<side>.r<k>[.<variant>]
.json or .txt); `latency_table` and `pooled_table` read the text that
bench/ab_latency.sh and bench/ab_pingpong.sh print.
"""
import math
import os
import re
import statistics
from collections import defaultdict

from . import rows as rows_mod
from .stats import Paired, pooled_differences

RUN_FILE = re.compile(r"^(?P<side>[^.]+)\.r(?P<round>\d+)(?:\.(?P<variant>[^.]+))?\.(json|txt)$")


def collect(out_dir):
    """{side: {round: {size: (time_us, busbw, wrong, variant, issue_us)}}}
    (issue_us NaN where the run did not report it). Where a side wrote
    several variants in a round (a peer's algorithms), each size takes the
    fastest variant of that round, and the variant's name rides along."""
    stems = defaultdict(dict)  # (side, round) -> {variant: stem}
    for name in sorted(os.listdir(out_dir)):
        m = RUN_FILE.match(name)
        if m:
            stems[(m["side"], int(m["round"]))][m["variant"] or ""] = \
                os.path.join(out_dir, name.rsplit(".", 1)[0])
    out = defaultdict(dict)
    for (side, k), variants in stems.items():
        if len(variants) > 1:
            variants.pop("", None)  # The variants' own files are the runs.
        per_size = {}
        for variant, stem in variants.items():
            for size, row in rows_mod.load(stem).items():
                t, bw, issue = rows_mod.best_with_issue(row)
                if math.isnan(t):
                    continue
                fig = (t, bw, rows_mod.wrong(row), variant, issue)
                if size not in per_size or t < per_size[size][0]:
                    per_size[size] = fig
        out[side][k] = per_size
    return out


def _figure(values, stat, larger_is_better):
    if stat == "best":
        return max(values) if larger_is_better else min(values)
    return statistics.median(values)


def sides_table(out_dir, reference=None, stat="median", intervals=False, side=None):
    """(markdown, wrong_elements): one table per side against `reference`
    (default: the first side the folder's rounds.txt names, else the first
    by name), or, given `side`, that side against each other one. stat:
    "median" over rounds, or "best" (lowest time, highest busbw). Ratios are
    side / reference, paired by round for the median."""
    data = collect(out_dir)
    if not data:
        raise ValueError(f"{out_dir} holds no runs (<side>.r<k>.json or .txt)")
    order = side_order(out_dir, data)
    for name in (reference, side):
        if name is not None and name not in data:
            raise ValueError(f"no side {name!r} in {out_dir} (it has {', '.join(order)})")
    if side is not None:
        pairs = [(side, r) for r in order if r != side]
    else:
        reference = reference or order[0]
        pairs = [(s, reference) for s in order if s != reference]
    lines = []
    wrong_total = sum(f[2] for s in order for per in data[s].values() for f in per.values())
    for side, reference in pairs:
        ref_rounds = data[reference]
        rounds = sorted(set(data[side]) & set(ref_rounds))
        sizes = sorted(set.intersection(*[set(data[side][k]) & set(ref_rounds[k])
                                          for k in rounds])) if rounds else []
        # The host's time per call, where the side's runs report it.
        host = any(not math.isnan(data[side][k][s][4]) for k in rounds for s in sizes)
        lines.append(f"### {side} against {reference} ({stat} of {len(rounds)} rounds)\n")
        lines.append(f"| size (B) | {reference} us | {side} us | time {side}/{reference} | "
                     f"{reference} busbw | {side} busbw | busbw {side}/{reference} |"
                     + (f" {side} host us |" if host else ""))
        lines.append("|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if host else ""))
        for size in sizes:
            a = [ref_rounds[k][size] for k in rounds]
            b = [data[side][k][size] for k in rounds]
            ta, tb = _figure([f[0] for f in a], stat, False), _figure([f[0] for f in b], stat, False)
            ba, bb = _figure([f[1] for f in a], stat, True), _figure([f[1] for f in b], stat, True)
            if stat == "median":
                paired = Paired([f[0] for f in b], [f[0] for f in a])
                ratio = f"{paired.median():.3f}"
                if intervals and len(paired.ratios) > 1:
                    low, high = paired.interval()
                    ratio += f" ({low:.2f}-{high:.2f})"
            else:
                ratio = f"{tb / ta:.3f}" if ta > 0 else "n/a"
            bw_ratio = f"{bb / ba:.3f}" if ba > 0 else "n/a"
            ta_s = f"{ta:.2f}" + _variant_note(a)
            tb_s = f"{tb:.2f}" + _variant_note(b)
            row = f"| {size} | {ta_s} | {tb_s} | {ratio} | {ba:.2f} | {bb:.2f} | {bw_ratio} |"
            if host:
                issues = [f[4] for f in b if not math.isnan(f[4])]
                row += f" {_figure(issues, stat, False):.2f} |" if issues else " n/a |"
            lines.append(row)
        lines.append("")
    lines.append(f"wrong elements, all sides: {wrong_total}")
    return "\n".join(lines) + "\n", wrong_total


def _variant_note(figures):
    """The variant (a peer's algorithm) that won most rounds, if any."""
    names = [f[3] for f in figures if f[3]]
    return f" ({max(set(names), key=names.count)})" if names else ""


def side_order(out_dir, data):
    """The sides in the order rounds.txt names them, then the others by name."""
    named = []
    try:
        with open(os.path.join(out_dir, "rounds.txt")) as f:
            named = [l.split()[1].rstrip(":") for l in f if l.startswith("side ")]
    except OSError:
        pass
    return [s for s in named if s in data] + sorted(s for s in data if s not in named)


# bench/ab_latency.sh output: a "=== title" line per section, a header
# "# ..., R rounds x ...", and "NAME: median X us (all: F F ...)" per side,
# two figures a round (out of place, in place) or one.
_LATENCY_HEADER = re.compile(r"^# .*, (\d+) rounds x ")
_LATENCY_SIDE = re.compile(r"^(\S+): median [\d.]+ us \(all: ([\d. ]+)\)")


def _rounds_best(figures, rounds):
    per_round = len(figures) // rounds if rounds else 2
    if per_round not in (1, 2) or per_round * rounds != len(figures):
        raise ValueError(f"{len(figures)} figures for {rounds} rounds")
    return [min(figures[i:i + per_round]) for i in range(0, len(figures), per_round)]


def latency_table(path):
    """Per section of ab_latency.sh output: each side's median time and each
    non-MPI side's paired ratio to every MPI side (a side named mpi@...)
    and to the faster MPI side of each round."""
    out, section, sides, rounds = [], None, {}, 0

    def flush():
        if not sides:
            return
        mpi = [k for k in sides if k.split("@")[0] == "mpi"]
        out.append(f"{section}")
        for name, figures in sides.items():
            out.append(f"  {name}: median {statistics.median(figures):.3f} us")
        per_mpi = {m: _rounds_best(sides[m], rounds) for m in mpi}
        for name, figures in sides.items():
            if not mpi or name in mpi:
                continue
            best = _rounds_best(figures, rounds)
            out.append(f"  {name}, paired by round:")
            for m in mpi:
                out.append(f"    / {m}: {Paired(best, per_mpi[m]).describe()}")
            if len(mpi) > 1:
                fastest = [min(per_mpi[m][r] for m in mpi) for r in range(len(best))]
                out.append(f"    / best MPI side of each round: "
                           f"{Paired(best, fastest).describe()}")

    with open(path) as f:
        for raw in f:
            if raw.startswith("==="):
                flush()
                section, sides, rounds = raw.strip("= \n"), {}, 0
                continue
            header = _LATENCY_HEADER.match(raw)
            if header:
                rounds = int(header.group(1))
                continue
            m = _LATENCY_SIDE.match(raw)
            if m:
                sides[m.group(1)] = [float(x) for x in m.group(2).split()]
    flush()
    return "\n".join(out) + "\n"


# bench/ab_pingpong.sh output: "NAME median X us min Y [context switches
# (median) N] rounds: F F ...".
_PINGPONG_SIDE = re.compile(
    r"^\s*(\S+)\s+median\s+\S+ us\s+min\s+\S+.*?rounds: ([-+\d. ]+)$", re.M)


def pingpong_sides(path):
    with open(path) as f:
        text = f.read()
    return {m.group(1): [float(x) for x in m.group(2).split()]
            for m in _PINGPONG_SIDE.finditer(text)}


def pooled_table(specs):
    """specs: [(path, side, base)]. Each file's median difference side - base
    over its paired rounds, then all files' rounds pooled."""
    out, pairs = [], []
    for path, side, base in specs:
        found = pingpong_sides(path)
        missing = [s for s in (side, base) if s not in found]
        if missing:
            raise ValueError(f"{path} has no side {', '.join(missing)} "
                             f"(it has {', '.join(sorted(found)) or 'none'})")
        if len(found[side]) != len(found[base]):
            raise ValueError(f"{path}: {side} has {len(found[side])} rounds, "
                             f"{base} {len(found[base])}")
        med, low, high, n = pooled_differences([(found[side], found[base])])
        out.append(f"{path}:{side}-{base}: {n} rounds, median {med:+.2f} us "
                   f"(95%: {low:+.2f} to {high:+.2f})")
        pairs.append((found[side], found[base]))
    med, low, high, n = pooled_differences(pairs)
    out.append(f"pooled: {n} rounds, median {med:+.2f} us (95%: {low:+.2f} to {high:+.2f})")
    return "\n".join(out) + "\n"
