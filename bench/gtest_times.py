#!/usr/bin/env python3
"""Where a GoogleTest binary's time goes: sums the "[       OK ] NAME (N ms)"
lines of its output by suite, or by suite and a part of the test's name.

For trimming slow suites (CI runs every test three times, once under
ThreadSanitizer). Example, the loopback conformance suite under tsan, by
world size and element count (the figures behind the large section's
tsan sizes in testing/conformance.cc):

    bazel build --config=tsan //transports/loopback:loopback_conformance_test
    TSAN_OPTIONS=halt_on_error=1 \\
      bazel-bin/transports/loopback/loopback_conformance_test > tsan.log 2>&1
    bench/gtest_times.py tsan.log --key '_n[0-9]+_c[0-9]+'

Usage: gtest_times.py LOG [--key REGEX] [--top N]
  --key REGEX  also group by the first match of REGEX in each test's name
               (tests without a match go under "-")
  --top N      print the N largest groups (default 30)
"""
import argparse
import collections
import re
import sys

OK_LINE = re.compile(r"^\[       OK \] (\S+) \((\d+) ms\)")


def main():
    parser = argparse.ArgumentParser(
        description="Sums a GoogleTest log's test times by suite and key.")
    parser.add_argument("log")
    parser.add_argument("--key", help="regex over each test's name")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    try:
        key = re.compile(args.key) if args.key else None
    except re.error as e:
        sys.exit(f"gtest_times.py: --key: {e}")
    try:
        lines = open(args.log, errors="replace").read().splitlines()
    except OSError as e:
        sys.exit(f"gtest_times.py: {e}")
    ms = collections.Counter()
    cases = collections.Counter()
    total = 0
    for line in lines:
        m = OK_LINE.match(line)
        if not m:
            continue
        name, took = m.group(1), int(m.group(2))
        group = [name.split(".")[0]]
        if key:
            found = key.search(name)
            group.append(found.group(0) if found else "-")
        ms[tuple(group)] += took
        cases[tuple(group)] += 1
        total += took
    if not cases:
        sys.exit(f"gtest_times.py: no passed tests with times in {args.log}")
    print(f"{total / 1000:.1f} s in {sum(cases.values())} passed tests")
    print(f"{'seconds':>9} {'tests':>6}  group")
    for group, took in ms.most_common(args.top):
        print(f"{took / 1000:9.1f} {cases[group]:6d}  {' '.join(group)}")


if __name__ == "__main__":
    main()
