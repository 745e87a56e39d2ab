#!/usr/bin/env bash
# File: bench/compare_allreduce.sh
#
# The foundation issue's comparison, in one run: relay's all_reduce on the
# loopback transport against Open MPI's MPI_Allreduce (its default and every
# tuned algorithm, to find its best per size), float32 sum, 8 B to 64 MB, for
# 2 and 4 ranks on this machine. Writes the raw outputs and a Markdown table
# of ratios to OUT_DIR (default bench/results/<date>-allreduce-vs-mpi).
#
# Example:
#   bench/compare_allreduce.sh                 # full run, a few minutes
#   NP="2" ITERS=10 ROUNDS=1 bench/compare_allreduce.sh /tmp/quick
#   MAX_BYTES=1K ITERS=20000 WARMUP=2000 bench/compare_allreduce.sh /tmp/small
#       # small messages only, timed over enough calls to reach steady state
#       # (2,000 calls of 0.4 us end within FastNow's 10 ms calibration and
#       # before waits settle; Open MPI too reads 0.42 us there, 0.24 here)
#   MIN_BYTES=1M bench/compare_allreduce.sh /tmp/large   # 1 MB to 64 MB
#
# The machines are noisy: relay and Open MPI run alternately, ROUNDS times
# (default 3), and the table takes each side's median per size.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-bench/results/$(date +%Y-%m-%d)-allreduce-vs-mpi}"
nps="${NP:-2 4}"
iters="${ITERS:-20}"
min_bytes="${MIN_BYTES:-8}"
max_bytes="${MAX_BYTES:-64M}"
warmup="${WARMUP:-5}"
rounds="${ROUNDS:-3}"
sweep=(-b "$min_bytes" -e "$max_bytes" -f 2 -n "$iters" -w "$warmup")
mkdir -p "$out"

bazel build //bench:collectives //bench/peers:mpi_collectives >&2
relay_bin="$(mktemp)"
cp -f bazel-bin/bench/collectives "$relay_bin"
chmod +x "$relay_bin"
trap 'rm -f "$relay_bin"' EXIT

{
  echo "# all_reduce: relay loopback vs Open MPI"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- command: bench/compare_allreduce.sh (NP=\"$nps\" ITERS=$iters WARMUP=$warmup ROUNDS=$rounds MIN_BYTES=$min_bytes MAX_BYTES=$max_bytes)"
  echo "- relay: bench/collectives --collective all_reduce ${sweep[*]}"
  echo "- Open MPI: bench/peers/run_mpi_allreduce.sh --best ${sweep[*]} (algorithm 0 = default rules)"
  echo
  echo "Each figure is the median over the rounds of the better of out-of-place"
  echo "and in-place. Open MPI's \"best\" is, per size, its best tuned algorithm"
  echo "(coll_tuned_allreduce_algorithm 0-6; 0 = its default decision rules)."
} > "$out/README.md"

for np in $nps; do
  for ((r = 1; r <= rounds; r++)); do
    echo "== round $r: relay, $np ranks" >&2
    "$relay_bin" --collective all_reduce --ranks "$np" "${sweep[@]}" \
      --json "$out/relay_np${np}_r$r.json" > "$out/relay_np${np}_r$r.txt"
    echo "== round $r: Open MPI, $np processes" >&2
    bench/peers/run_mpi_allreduce.sh --best --np "$np" "${sweep[@]}" \
      --json "$out/mpi_np${np}_r$r.json" > "$out/mpi_np${np}_r$r.txt"
  done
  {
    echo
    echo "## $np ranks"
    echo
    bench/compare_allreduce.py --relay "$out"/relay_np${np}_r*.json \
      --mpi "$out"/mpi_np${np}_r*.alg*.json
  } >> "$out/README.md"
done
cat "$out/README.md"
