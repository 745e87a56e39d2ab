#!/usr/bin/env python3
# File: bench/atomics_per_call.py
#
# Atomic read-modify-writes one collective call executes, by function:
# every lock-prefixed instruction and every xchg with a memory operand
# (x86's atomic exchange, implicitly locked). Each drains the core's store
# buffer, so on a small collective a handful of them is a measurable part
# of the time; callgrind's instruction count does not show them.
#
# Runs a bench/collectives build under callgrind with per-instruction
# counts twice (ITERS and 6 x ITERS timed calls, out of place and in
# place), disassembles every object with objdump, matches addresses, and
# divides the difference by the extra calls, which cancels start-up.
#
# Usage: bench/atomics_per_call.py [--ranks N] [--algorithm A] [--bytes B]
#                                  [--iters I] BIN
#   --ranks N      loopback ranks (default 1). With more, the waiting
#                  rank's polls are counted too, and callgrind runs one
#                  thread at a time, so a waiter polls far more often than
#                  on real cores: read the per-function lines, not the total
#   --algorithm A  default shm
#   --bytes B      default 8
#   --iters I      default 2000
#
# Example (the figures in the 2026-11-25 notes: 16 before the session's
# work, 6 after, 8 B shm all_reduce on 1 rank):
#   bazel build //bench:collectives
#   bench/atomics_per_call.py bazel-bin/bench/collectives
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ATOMIC = re.compile(r"^\s*([0-9a-f]+):\s+(lock\s+\S+|xchg\s+\S*\(%\S*)", re.M)


def profile(args, iters, path):
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--dump-instr=yes",
         "--compress-pos=no", "--compress-strings=no",
         f"--callgrind-out-file={path}", args.bin,
         "--collective", "all_reduce", "--ranks", str(args.ranks),
         "-b", str(args.bytes), "-e", str(args.bytes), "-n", str(iters),
         "-w", "10", "-c", "0", "--algorithm", args.algorithm],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def executions(path):
    """(object, address) -> (function, times executed), inclusive call
    costs left out (the line after calls= is the callee's total)."""
    counts = collections.Counter()
    function_of = {}
    obj = fn = None
    skip_next = False
    with open(path) as f:
        for line in f:
            if line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                skip_next = True
            elif line.startswith("0x"):
                if skip_next:
                    skip_next = False
                    continue
                parts = line.split()
                key = (obj, int(parts[0], 16))
                counts[key] += int(parts[2]) if len(parts) > 2 else 0
                function_of[key] = fn
    return counts, function_of


def atomic_addresses(obj, cache):
    if obj not in cache:
        cache[obj] = {}
        if obj and obj.startswith("/") and os.path.exists(obj):
            out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj],
                                 capture_output=True, text=True).stdout
            for m in ATOMIC.finditer(out):
                cache[obj][int(m.group(1), 16)] = m.group(2).split()[0] + (
                    " " + m.group(2).split()[1] if m.group(2).startswith("lock") else "")
    return cache[obj]


def atomics_by_function(path, cache):
    counts, function_of = executions(path)
    out = collections.Counter()
    for (obj, address), n in counts.items():
        instruction = atomic_addresses(obj, cache).get(address)
        if instruction and n:
            out[(function_of[(obj, address)], instruction)] += n
    return out


def main():
    p = argparse.ArgumentParser(
        description="Atomic read-modify-writes per collective call "
        "(callgrind); see the comment at the top of this file.")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--algorithm", default="shm")
    p.add_argument("--bytes", type=int, default=8)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("bin")
    args = p.parse_args()
    for tool in ("valgrind", "objdump"):
        if shutil.which(tool) is None:
            sys.exit(f"atomics_per_call.py: {tool} is not installed")
    if not os.access(args.bin, os.X_OK):
        sys.exit("atomics_per_call.py: give a bench/collectives binary")
    work = tempfile.mkdtemp()
    try:
        cache = {}
        profile(args, args.iters, os.path.join(work, "low"))
        profile(args, 6 * args.iters, os.path.join(work, "high"))
        low = atomics_by_function(os.path.join(work, "low"), cache)
        high = atomics_by_function(os.path.join(work, "high"), cache)
    finally:
        shutil.rmtree(work)
    # Each -n runs the out-of-place and the in-place loop on every rank.
    calls = 2 * 5 * args.iters * args.ranks
    total = 0.0
    rows = []
    for key in set(low) | set(high):
        per_call = (high[key] - low[key]) / calls
        total += per_call
        if per_call >= 0.05:
            rows.append((per_call, key))
    for per_call, (fn, instruction) in sorted(rows, reverse=True):
        print(f"{per_call:6.2f}  {instruction:12s} {fn[:120]}")
    print(f"{total:.2f} atomic read-modify-writes per call (all_reduce, "
          f"{args.bytes} B, {args.ranks} rank(s), {args.algorithm})")


if __name__ == "__main__":
    main()
