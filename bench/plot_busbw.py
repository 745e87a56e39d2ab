#!/usr/bin/env python3
"""busbw against size, one line per variant, as a self-contained SVG.

Usage: plot_busbw.py DIR OUT.svg COLLECTIVE...

For each collective, every DIR/<variant>_<collective>_<round>.json
(bench/report.h's JSON, or its .txt table where a cut-off run wrote no
JSON) is a variant ("raw", "relay", ...); the line is the
best out-of-place busbw per size over its rounds. One panel per collective,
log2 size axis. No plotting library needed (GPU hosts may lack one).
"""
import glob
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_rows import load_rows  # noqa: E402

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]


def series(d, collective):
    out = {}
    runs = {os.path.splitext(p)[0] for p in
            glob.glob(os.path.join(d, f"*_{collective}_*.json")) +
            glob.glob(os.path.join(d, f"*_{collective}_*.txt"))}
    for run in sorted(runs):
        m = re.match(rf"(.+)_{collective}_\d+$", os.path.basename(run))
        if not m:
            continue
        best = out.setdefault(m.group(1), {})
        for row in load_rows(run + ".json"):
            bw = row["out_of_place"]["busbw"]
            best[row["size"]] = max(best.get(row["size"], 0), bw)
    return out


def panel(x0, y0, w, h, title, data):
    parts = [f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle" '
             f'font-size="14">{title}</text>',
             f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#888"/>']
    sizes = sorted({s for v in data.values() for s in v if s > 0})
    if not sizes:
        return "".join(parts)
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1]) or 1
    top = max(max(v.values()) for v in data.values()) * 1.1 or 1
    def px(s):
        return x0 + (math.log2(s) - lo) / max(hi - lo, 1) * w
    def py(b):
        return y0 + h - b / top * h
    for k in range(0, 6):
        b = top * k / 5
        parts.append(f'<text x="{x0 - 5}" y="{py(b) + 4}" text-anchor="end" '
                     f'font-size="10">{b:.0f}</text>')
    for s in sizes[::4]:
        label = f"{s}" if s < 1024 else (f"{s >> 10}K" if s < 1 << 20 else
                                         (f"{s >> 20}M" if s < 1 << 30 else f"{s >> 30}G"))
        parts.append(f'<text x="{px(s)}" y="{y0 + h + 14}" text-anchor="middle" '
                     f'font-size="10">{label}</text>')
    for i, (name, v) in enumerate(sorted(data.items())):
        pts = " ".join(f"{px(s):.1f},{py(b):.1f}" for s, b in sorted(v.items()) if s > 0)
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>')
        parts.append(f'<text x="{x0 + 10}" y="{y0 + 16 + 14 * i}" font-size="12" '
                     f'fill="{colour}">{name}</text>')
    parts.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 30}" text-anchor="middle" '
                 f'font-size="11">size (B)</text>')
    parts.append(f'<text x="{x0 - 40}" y="{y0 + h / 2}" font-size="11" '
                 f'transform="rotate(-90 {x0 - 40} {y0 + h / 2})">busbw (GB/s)</text>')
    return "".join(parts)


def main():
    d, out, collectives = sys.argv[1], sys.argv[2], sys.argv[3:]
    w, h, pad = 420, 280, 70
    width = len(collectives) * (w + pad) + pad
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h + 2 * pad}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    for i, c in enumerate(collectives):
        svg.append(panel(pad + i * (w + pad), pad, w, h, c, series(d, c)))
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg))


if __name__ == "__main__":
    main()
