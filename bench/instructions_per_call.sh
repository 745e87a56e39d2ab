#!/usr/bin/env bash
# File: bench/instructions_per_call.sh
#
# Instructions one collective call costs, counted by valgrind's callgrind:
# deterministic, so a change's effect shows on a machine too noisy to time
# it. Runs a bench/collectives build twice (ITERS and 6 x ITERS timed calls,
# out of place and in place) and divides the difference by the extra calls,
# which cancels start-up and teardown.
#
# Usage: bench/instructions_per_call.sh [--ranks N] [--algorithm A]
#                                       [--bytes B] [--iters I] BIN
#   --ranks N      loopback ranks (default 1: no waiting is counted; with
#                  more, spinning waiters inflate the count)
#   --algorithm A  default direct
#   --bytes B      default 8
#   --iters I      default 2000
#
# Example (the figure in the 2026-11-23 closing note: 5,416 before, about
# 2,700 after, 8 B all_reduce on 1 rank):
#   bazel build //bench:collectives
#   bench/instructions_per_call.sh bazel-bin/bench/collectives
set -euo pipefail

ranks=1 algorithm=direct bytes=8 iters=2000
usage() { sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//; $d'; }
bin=""
while (($#)); do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --algorithm) algorithm="$2"; shift 2 ;;
    --bytes) bytes="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "instructions_per_call.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) bin="$1"; shift ;;
  esac
done
[[ -x "$bin" ]] || { echo "instructions_per_call.sh: give a bench/collectives binary" >&2; usage >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions_per_call.sh: valgrind is not installed" >&2; exit 2; }

count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" \
    --collective all_reduce --ranks "$ranks" -b "$bytes" -e "$bytes" \
    -n "$1" -w 10 -c 0 --algorithm "$algorithm" 2>&1 |
    awk '/Collected/{print $4}'
}
low=$(count "$iters")
high=$(count "$((6 * iters))")
# Each -n runs the out-of-place and the in-place loop.
echo "$(( (high - low) / (2 * 5 * iters) )) instructions per call" \
  "(all_reduce, $bytes B, $ranks ranks, $algorithm)"
