#!/usr/bin/env bash
# File: bench/small_vs_mpi.sh
#
# The foundation issue's small-message target in one command: relay's
# blocking all_reduce (float32 sum) against Open MPI's MPI_Allreduce, its
# default and its recursive doubling (coll_tuned_allreduce_algorithm 3, its
# best at these sizes), at each size and world size, in alternating rounds
# (bench/ab_latency.sh), then the table of each side's median and relay's
# paired ratio to each MPI side and to the faster MPI side of each round,
# each with a 95% bootstrap interval (`python3 -m relaybench latency`).
#
# Usage: bench/small_vs_mpi.sh [--rounds R] [--iters I] [--ranks "2 4"]
#                              [--sizes "8 64 256 1024"] [--out FILE] BIN
#   BIN        a bench/collectives build (bazel build -c opt
#              //bench:collectives; copy it out of bazel-bin if you build
#              again meanwhile)
#   --rounds R alternating rounds per size (default 30: the 2-core VMs
#              change phase between runs, and 12-16 rounds have put the
#              same build 0.1x apart from one hour to the next; 100
#              rounds, about 2.5 minutes a size on 2 ranks, give
#              intervals of about +-0.03x)
#   --iters I  timed calls per run (default 100000)
#   --out FILE the raw ab_latency.sh output (default: a file in /tmp),
#              whose "all:" lists the table is computed from
#   MPI_BIN    another build of bench/peers/mpi_collectives (default
#              bazel-bin/bench/peers/mpi_collectives)
#
# Example:
#   bazel build -c opt //bench:collectives //bench/peers:mpi_collectives
#   cp bazel-bin/bench/collectives /tmp/relay
#   bench/small_vs_mpi.sh --rounds 30 /tmp/relay
set -euo pipefail

rounds=30 iters=100000 ranks_list="2 4" sizes="8 64 256 1024" out=""
usage() { sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//; $d'; }
bin=""
while (($#)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --ranks) ranks_list="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "small_vs_mpi.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *)
      if [[ -n "$bin" ]]; then
        echo "small_vs_mpi.sh: one BIN only (got $bin and $1)" >&2; exit 2
      fi
      bin="$1"; shift ;;
  esac
done
if [[ -z "$bin" ]]; then usage >&2; exit 2; fi
if [[ ! -x "$bin" ]]; then
  echo "small_vs_mpi.sh: $bin is not an executable (bazel build -c opt //bench:collectives)" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
export MPI_BIN="${MPI_BIN:-bazel-bin/bench/peers/mpi_collectives}"
if [[ ! -x "$MPI_BIN" ]]; then
  echo "small_vs_mpi.sh: no Open MPI harness at $MPI_BIN (bazel build -c opt //bench/peers:mpi_collectives)" >&2
  exit 2
fi
out="${out:-$(mktemp /tmp/small_vs_mpi.XXXXXX)}"
: > "$out"
for ranks in $ranks_list; do
  for bytes in $sizes; do
    echo "small_vs_mpi.sh: $ranks ranks, $bytes B ($rounds rounds, $(date -u +%H:%MZ))" >&2
    echo "=== $ranks ranks, $bytes B" >> "$out"
    "$here/ab_latency.sh" --ranks "$ranks" --rounds "$rounds" --bytes "$bytes" \
      --iters "$iters" "$bin+blocking" mpi mpi@3 >> "$out" 2>/dev/null
  done
done
echo "# raw output: $out" >&2
PYTHONPATH="$here" python3 -m relaybench latency "$out"
