"""Command line: PYTHONPATH=bench python3 -m relaybench COMMAND ...

  rounds --out DIR [--rounds R] [--keep-going] NAME=COMMAND...
      run the sides in alternating rounds (see relaybench/rounds.py)
  table DIR [--reference NAME | --side NAME] [--stat median|best] [--intervals]
      one Markdown table per side against the reference (or of the side
      against each other one); exits 1 if any run found wrong elements
  plot OUT.svg DIR...
      busbw and time against size, a row of panels per folder
  latency FILE
      paired ratios from bench/ab_latency.sh output
  pool FILE:SIDE-BASE...
      pooled paired differences from bench/ab_pingpong.sh output
"""
import argparse
import sys

from . import plot, rounds, tables


def main(argv):
    parser = argparse.ArgumentParser(prog="relaybench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("rounds", help="run sides in alternating rounds")
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep-going", action="store_true",
                   help="note a failed run in failed_runs.txt and go on")
    p.add_argument("sides", nargs="+", metavar="NAME=COMMAND")
    p = sub.add_parser("table", help="tables of sides against a reference")
    p.add_argument("dir")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--reference", help="every side against this one (default: the first)")
    group.add_argument("--side", help="this side against every other one")
    p.add_argument("--stat", choices=("median", "best"), default="median")
    p.add_argument("--intervals", action="store_true",
                   help="95%% bootstrap interval of each paired time ratio")
    p = sub.add_parser("plot", help="busbw and time against size as SVG")
    p.add_argument("svg")
    p.add_argument("dirs", nargs="+")
    p = sub.add_parser("latency", help="paired ratios of ab_latency.sh output")
    p.add_argument("file")
    p = sub.add_parser("pool", help="pooled differences of ab_pingpong.sh output")
    p.add_argument("specs", nargs="+", metavar="FILE:SIDE-BASE")
    args = parser.parse_args(argv)

    try:
        if args.command == "rounds":
            if args.rounds < 1:
                raise ValueError("--rounds must be at least 1")
            sides = [rounds.parse_side(s) for s in args.sides]
            if len({n for n, _ in sides}) != len(sides):
                raise ValueError("two sides share a name")
            failed = rounds.run(sides, args.rounds, args.out, args.keep_going)
            return 1 if failed and not args.keep_going else 0
        if args.command == "table":
            text, wrong = tables.sides_table(args.dir, args.reference, args.stat,
                                             args.intervals, args.side)
            sys.stdout.write(text)
            return 1 if wrong else 0
        if args.command == "plot":
            with open(args.svg, "w") as f:
                f.write(plot.svg(args.dirs))
            return 0
        if args.command == "latency":
            sys.stdout.write(tables.latency_table(args.file))
            return 0
        specs = []
        for spec in args.specs:
            path, sep, pair = spec.rpartition(":")
            side, dash, base = pair.partition("-")
            if not sep or not dash or not side or not base:
                raise ValueError(f"expected FILE:SIDE-BASE, got {spec!r}")
            specs.append((path, side, base))
        sys.stdout.write(tables.pooled_table(specs))
        return 0
    except (ValueError, OSError, RuntimeError) as e:
        print(f"relaybench {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
