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
#                                       [--bytes B] [--iters I]
#                                       [--transport T] BIN
#   --ranks N      ranks (default 1, and at least 2 on ucx: no waiting is
#                  counted; with more, spinning waiters inflate the count)
#   --algorithm A  default direct on loopback, the build's choice on ucx
#   --transport T  loopback (default), or ucx: the ranks are processes
#                  under tools/relayrun (UCX_TLS as set, else shm,self),
#                  each under callgrind, and one rank's profile gives two
#                  figures: everything (waiting included) and the call
#                  itself (Communicator::Collective, inclusive: the path
#                  up to the request's return, which no waiting inflates)
#   --bytes B      default 8
#   --iters I      default 2000
#   --profiles DIR ucx only: keep the callgrind profiles in DIR (low.PID
#                  from the ITERS run, high.PID from the 4 x ITERS run), for
#                  a per-function split: callgrind_annotate each, subtract,
#                  divide by 6 x ITERS
#
# Example (the figure in the 2026-11-23 closing note: 5,416 before, about
# 2,700 after, 8 B all_reduce on 1 rank):
#   bazel build //bench:collectives
#   bench/instructions_per_call.sh bazel-bin/bench/collectives
set -euo pipefail

ranks=1 algorithm="" bytes=8 iters=2000 transport=loopback profiles=""
usage() { sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//; $d'; }
bin=""
while (($#)); do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --algorithm) algorithm="$2"; shift 2 ;;
    --bytes) bytes="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    --profiles) profiles="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "instructions_per_call.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) bin="$1"; shift ;;
  esac
done
[[ -x "$bin" ]] || { echo "instructions_per_call.sh: give a bench/collectives binary" >&2; usage >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions_per_call.sh: valgrind is not installed" >&2; exit 2; }

if [[ $transport == ucx ]]; then
  command -v callgrind_annotate >/dev/null || { echo "instructions_per_call.sh: callgrind_annotate is missing" >&2; exit 2; }
  export UCX_TLS="${UCX_TLS:-shm,self}"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # Prints one rank's total and Communicator::Collective's inclusive count
  # (the ranks run the same loop); $2 names the run for --profiles.
  count_ucx() {
    rm -f "$work"/cg.*
    "$(dirname "$0")/../tools/relayrun" -n "$ranks" --no-prefix -- \
      valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$bin" \
      --collective all_reduce --transport ucx -b "$bytes" -e "$bytes" \
      -n "$1" -w 10 -c 0 ${algorithm:+--algorithm "$algorithm"} >/dev/null 2>&1
    if [[ -n $profiles ]]; then
      mkdir -p "$profiles"
      for f in "$work"/cg.*; do cp "$f" "$profiles/$2.${f##*.}"; done
    fi
    local one
    one="$(ls "$work"/cg.* | head -1)"
    callgrind_annotate --inclusive=yes "$one" 2>/dev/null | awk '
      /PROGRAM TOTALS/ && !t {gsub(",", "", $1); t = $1}
      /relay::Communicator::Collective\(/ && !c {gsub(",", "", $1); c = $1}
      END {print t, c}'
  }
  (( ranks > 1 )) || ranks=2
  read -r low_total low_call <<<"$(count_ucx "$iters" low)"
  read -r high_total high_call <<<"$(count_ucx "$((4 * iters))" high)"
  calls=$((2 * 3 * iters))
  echo "$(( (high_call - low_call) / calls )) instructions per call in" \
    "Communicator::Collective, $(( (high_total - low_total) / calls )) in all" \
    "(waiting included; all_reduce, $bytes B, $ranks ranks, ucx${algorithm:+, $algorithm})"
  exit 0
fi
algorithm="${algorithm:-direct}"

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
