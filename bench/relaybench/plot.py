"""busbw and time against size, one line per side, as a self-contained SVG
(no plotting library: GPU hosts and CI boxes may lack one).

One row of two panels (busbw, time; log2 size axis, log time axis) per
folder that rounds.run filled; each side's line is its median over rounds.
"""
import math
import os
import statistics

from .tables import collect, side_order

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f"]
WIDTH, HEIGHT, PAD = 420, 260, 70


def _series(out_dir):
    data = collect(out_dir)
    series = {}
    for side in side_order(out_dir, data):
        per_size = {}
        for per in data[side].values():
            for size, fig in per.items():
                per_size.setdefault(size, []).append(fig)
        series[side] = {s: (statistics.median(f[0] for f in figs),
                            statistics.median(f[1] for f in figs))
                        for s, figs in per_size.items() if s > 0}
    return series


def _size_label(s):
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if s >= 1 << shift:
            return f"{s >> shift}{unit}"
    return str(s)


def _panel(x0, y0, title, series, index, ylabel, log_y):
    parts = [f'<text x="{x0 + WIDTH / 2}" y="{y0 - 8}" text-anchor="middle" '
             f'font-size="14">{title}</text>',
             f'<rect x="{x0}" y="{y0}" width="{WIDTH}" height="{HEIGHT}" '
             f'fill="none" stroke="#888"/>']
    points = [(s, v[index]) for line in series.values() for s, v in line.items()
              if v[index] > 0]
    if not points:
        return "".join(parts)
    sizes = sorted({s for s, _ in points})
    lo_x, hi_x = math.log2(sizes[0]), math.log2(sizes[-1])
    values = [v for _, v in points]
    if log_y:
        lo_y, hi_y = math.log10(min(values)), math.log10(max(values))
        hi_y = max(hi_y, lo_y + 1e-9)
    else:
        lo_y, hi_y = 0.0, max(values) * 1.1

    def px(s):
        return x0 + (math.log2(s) - lo_x) / max(hi_x - lo_x, 1) * WIDTH

    def py(v):
        y = math.log10(v) if log_y else v
        return y0 + HEIGHT - (y - lo_y) / (hi_y - lo_y) * HEIGHT

    for k in range(6):
        y = lo_y + (hi_y - lo_y) * k / 5
        v = 10 ** y if log_y else y
        label = f"{v:.3g}" if log_y else f"{v:.0f}"
        parts.append(f'<text x="{x0 - 5}" y="{py(v) + 4:.1f}" text-anchor="end" '
                     f'font-size="10">{label}</text>')
    step = max(1, len(sizes) // 7)
    for s in sizes[::step]:
        parts.append(f'<text x="{px(s):.1f}" y="{y0 + HEIGHT + 14}" '
                     f'text-anchor="middle" font-size="10">{_size_label(s)}</text>')
    for i, (name, line) in enumerate(series.items()):
        pts = " ".join(f"{px(s):.1f},{py(v[index]):.1f}"
                       for s, v in sorted(line.items()) if v[index] > 0)
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{pts}"/>')
        parts.append(f'<text x="{x0 + 10}" y="{y0 + 16 + 14 * i}" font-size="12" '
                     f'fill="{colour}">{name}</text>')
    parts.append(f'<text x="{x0 + WIDTH / 2}" y="{y0 + HEIGHT + 30}" '
                 f'text-anchor="middle" font-size="11">size (B)</text>')
    parts.append(f'<text x="{x0 - 45}" y="{y0 + HEIGHT / 2}" font-size="11" '
                 f'transform="rotate(-90 {x0 - 45} {y0 + HEIGHT / 2})">{ylabel}</text>')
    return "".join(parts)


def svg(out_dirs):
    """The SVG text: a row of panels per folder, titled with its name."""
    width = 2 * (WIDTH + PAD) + PAD
    height = len(out_dirs) * (HEIGHT + PAD) + PAD
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" font-family="sans-serif">'
             f'<rect width="100%" height="100%" fill="white"/>']
    for row, d in enumerate(out_dirs):
        series = _series(d)
        title = os.path.basename(os.path.normpath(d))
        y0 = PAD + row * (HEIGHT + PAD)
        parts.append(_panel(PAD, y0, f"{title}: busbw", series, 1, "busbw (GB/s)", False))
        parts.append(_panel(2 * PAD + WIDTH, y0, f"{title}: time", series, 0,
                            "time (us)", True))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
