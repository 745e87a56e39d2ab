#!/usr/bin/env bash
# File: bench/compare_allreduce_ucx.sh
#
# The multi-process issue's comparison, in one run: relay's all_reduce with
# ranks as processes over UCX shared memory (UCX_TLS=shm,self, started by
# tools/relayrun) against Open MPI's MPI_Allreduce (every tuned algorithm,
# best per size) and Gloo's all_reduce (every algorithm, best per size),
# float32 sum, 8 B to 64 MB, 2 and 4 processes. Writes raw outputs and a
# Markdown table of ratios to OUT_DIR (default
# bench/results/<date>-allreduce-ucx-vs-mpi-gloo).
#
# Example:
#   bench/compare_allreduce_ucx.sh
#   NP="2" ITERS=10 ROUNDS=1 bench/compare_allreduce_ucx.sh /tmp/quick
#   MAX_BYTES=1K ITERS=20000 WARMUP=2000 GLOO_ALGS= bench/compare_allreduce_ucx.sh /tmp/small
#     (the small-message target alone: 8 B - 1 KB, enough calls to reach
#     steady state on both sides, Gloo left out)
#   MIN_BYTES=1M bench/compare_allreduce_ucx.sh /tmp/large
#     (the bandwidth target alone: 1 MB - 64 MB)
#
# The three run alternately, ROUNDS times (default 3); the table takes each
# side's median per size. Gloo's bcube is left out by default: Debian's Gloo
# (git 2022-05-18) aborts with "Connection closed by peer" in bcube at 4
# processes from 256 KB (GLOO_ALGS adds it back).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-bench/results/$(date +%Y-%m-%d)-allreduce-ucx-vs-mpi-gloo}"
nps="${NP:-2 4}"
iters="${ITERS:-20}"
warmup="${WARMUP:-5}"
rounds="${ROUNDS:-3}"
tls="${RELAY_UCX_TLS:-shm,self}"
gloo_algs="${GLOO_ALGS-ring ring_chunked halving_doubling}"
min_bytes="${MIN_BYTES:-8}"
max_bytes="${MAX_BYTES:-64M}"
sweep=(-b "$min_bytes" -e "$max_bytes" -f 2 -n "$iters" -w "$warmup")
mkdir -p "$out"

bazel build //bench:collectives //bench/peers:mpi_collectives //bench/peers:gloo_allreduce >&2
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
cp -f bazel-bin/bench/collectives bazel-bin/bench/peers/gloo_allreduce "$bin/"

{
  echo "# all_reduce: relay over UCX (processes) vs Open MPI vs Gloo"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- command: bench/compare_allreduce_ucx.sh (NP=\"$nps\" ITERS=$iters WARMUP=$warmup ROUNDS=$rounds MIN_BYTES=$min_bytes MAX_BYTES=$max_bytes GLOO_ALGS=\"$gloo_algs\", UCX_TLS=$tls)"
  echo "- relay: UCX_TLS=$tls tools/relayrun -n N -- bench/collectives --collective all_reduce ${sweep[*]}"
  echo "- Open MPI: bench/peers/run_mpi_allreduce.sh --best ${sweep[*]} (algorithms 0-6, 0 = default rules)"
  echo "- Gloo: tools/relayrun -n N -- bench/peers/gloo_allreduce --algorithm A ${sweep[*]} for A in: $gloo_algs"
  echo
  echo "Each figure is the median over the rounds of the better of out-of-place"
  echo "and in-place; for Open MPI and Gloo, of their best algorithm at that size."
} > "$out/README.md"

for np in $nps; do
  for ((r = 1; r <= rounds; r++)); do
    echo "== round $r: relay (ucx), $np processes" >&2
    UCX_TLS="$tls" tools/relayrun -n "$np" --no-prefix -- "$bin/collectives" \
      --collective all_reduce --transport ucx "${sweep[@]}" \
      --json "$out/relay_np${np}_r$r.json" > "$out/relay_np${np}_r$r.txt"
    echo "== round $r: Open MPI, $np processes" >&2
    bench/peers/run_mpi_allreduce.sh --best --np "$np" "${sweep[@]}" \
      --json "$out/mpi_np${np}_r$r.json" > "$out/mpi_np${np}_r$r.txt"
    for alg in $gloo_algs; do
      echo "== round $r: Gloo $alg, $np processes" >&2
      # Debian's Gloo sometimes aborts on this box ("Connection closed by
      # peer"); a failed run is noted and left out, not fatal.
      if ! tools/relayrun -n "$np" --no-prefix -- "$bin/gloo_allreduce" \
        --algorithm "$alg" "${sweep[@]}" \
        --json "$out/gloo_np${np}_r$r.gloo-$alg.json" \
        > "$out/gloo_np${np}_r$r.gloo-$alg.txt" 2>&1; then
        echo "Gloo $alg, $np processes, round $r failed; left out." >> "$out/failed_runs.txt"
        rm -f "$out/gloo_np${np}_r$r.gloo-$alg.json"
      fi
    done
  done
  {
    echo
    echo "## $np processes"
    echo
    gloo_json=("$out"/gloo_np${np}_r*.gloo-*.json)
    [[ -e "${gloo_json[0]}" ]] || gloo_json=()
    bench/compare_allreduce_peers.py --relay "$out"/relay_np${np}_r*.json \
      --mpi "$out"/mpi_np${np}_r*.alg*.json \
      ${gloo_json[0]:+--gloo "${gloo_json[@]}"}
  } >> "$out/README.md"
done
cat "$out/README.md"
