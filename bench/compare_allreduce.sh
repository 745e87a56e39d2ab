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
#   NP="2" ITERS=10 bench/compare_allreduce.sh /tmp/quick
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-bench/results/$(date +%Y-%m-%d)-allreduce-vs-mpi}"
nps="${NP:-2 4}"
iters="${ITERS:-20}"
warmup="${WARMUP:-5}"
sweep=(-b 8 -e 64M -f 2 -n "$iters" -w "$warmup")
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
  echo "- command: bench/compare_allreduce.sh (NP=\"$nps\" ITERS=$iters WARMUP=$warmup)"
  echo "- relay: bench/collectives --collective all_reduce ${sweep[*]}"
  echo "- Open MPI: bench/peers/run_mpi_allreduce.sh --best ${sweep[*]} (algorithm 0 = default rules)"
  echo
  echo "Time is the better of out-of-place and in-place, busbw likewise."
} > "$out/README.md"

for np in $nps; do
  echo "== relay, $np ranks" >&2
  "$relay_bin" --collective all_reduce --ranks "$np" "${sweep[@]}" \
    --json "$out/relay_np$np.json" | tee "$out/relay_np$np.txt" >&2
  echo "== Open MPI, $np processes" >&2
  bench/peers/run_mpi_allreduce.sh --best --np "$np" "${sweep[@]}" \
    --json "$out/mpi_np$np.json" > "$out/mpi_np$np.txt"
  {
    echo
    echo "## $np ranks"
    echo
    bench/compare_allreduce.py "$out/relay_np$np.json" \
      $(ls "$out"/mpi_np$np.alg*.json | sort -t g -k 3 -n)
  } >> "$out/README.md"
done
cat "$out/README.md"
