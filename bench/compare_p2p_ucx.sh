#!/usr/bin/env bash
# File: bench/compare_p2p_ucx.sh
#
# Point-to-point through relay's Transport interface (bench/pingpong, two
# processes under tools/relayrun, transport ucx) against UCX's own
# ucx_perftest (tag_lat, tag_bw) with the same UCX_TLS, size by size, in one
# run. Writes the raw outputs and a Markdown table to OUT_DIR (default a
# new folder under /tmp).
#
# Example:
#   bench/compare_p2p_ucx.sh
#   RELAY_UCX_TLS=tcp,self bench/compare_p2p_ucx.sh /tmp/p2p-tcp
#   SIZES="262144 4194304" ROUNDS=15 bench/compare_p2p_ucx.sh /tmp/p2p-256k
#     (only the sizes given, in bytes)
#
# ucx_perftest keeps its own buffer allocation (ucp_mem_map, SysV segments
# by Debian's UCX_ALLOC_PRIO): real pages, like pingpong's filled vectors.
# Do not set UCX_ALLOC_PRIO=heap here: perftest never writes its buffers,
# and untouched heap pages all map the kernel's zero page, so that times
# copies out of one cached page (about 25% faster at 1 MB than real
# pages).
#
# pingpong's latency loop is perftest's own (PATTERN, default perftest:
# each receive posted before waiting for the send before it), so both
# tools time the same exchange.
#
# Latency is half the round trip (both tools). Bandwidth is one-way with
# WINDOW (default 32, tag_bw's own default) messages in flight on both
# tools, in perftest's loop under PATTERN=perftest: a sliding window of
# sends, a window of posted receives, one acknowledgement at the end.
# Each figure is the median of ROUNDS (default 3)
# alternating runs.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-/tmp/relay-p2p-ucx-vs-perftest-$(date +%Y%m%d-%H%M%S)}"
tls="${RELAY_UCX_TLS:-shm,self}"
rounds="${ROUNDS:-3}"
pattern="${PATTERN:-perftest}"
window="${WINDOW:-32}"
read -r -a sizes <<<"${SIZES:-8 64 512 4096 32768 262144 1048576 4194304 16777216}"
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (tools/bootstrap.sh installs ucx-utils)" >&2; exit 1; }
mkdir -p "$out"
bazel build //bench:pingpong >&2
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
cp -f bazel-bin/bench/pingpong "$bin/"

# shellcheck source=bench/ucx_perftest_lib.sh
source bench/ucx_perftest_lib.sh  # From the repository root (cd above).

{
  echo "# Point-to-point: relay's UCX transport vs ucx_perftest"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- command: bench/compare_p2p_ucx.sh (UCX_TLS=$tls, ROUNDS=$rounds, SIZES=\"${sizes[*]}\")"
  echo "- relay: UCX_TLS=$tls tools/relayrun -n 2 -- bench/pingpong -b SIZE -e SIZE --pattern $pattern --window $window"
  echo "- UCX: ucx_perftest -t tag_lat / -t tag_bw -O $window -s SIZE (server and client, same UCX_TLS)"
  echo
  echo "Targets (multi-process issue): relay latency <= tag_lat + 0.5 us;"
  echo "relay bandwidth >= 90% of tag_bw at >= 1 MB. Medians of $rounds rounds."
  echo
  echo "| size (B) | relay latency (us) | tag_lat (us) | relay - tag_lat (us) | relay bw (GB/s) | tag_bw (GB/s) | relay/tag_bw |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
} > "$out/README.md"

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for size in "${sizes[@]}"; do
  iters=$((size >= 1048576 ? 2000 : 20000))
  # pingpong moves at most about 1 GB per size (bench/pingpong.cc): tag_lat
  # gets the round trips pingpong makes, not more.
  round_trips="$(pingpong_round_trips "$size" "$iters")"
  : > "$out/relay_$size.txt"
  : > "$out/perftest_$size.txt"
  for ((r = 1; r <= rounds; r++)); do
    UCX_TLS="$tls" tools/relayrun -n 2 --no-prefix -- "$bin/pingpong" -b "$size" -e "$size" \
      -n "$iters" --pattern "$pattern" --window "$window" | awk '!/^#/ {print $2, $3}' >> "$out/relay_$size.txt"
    lat="$(UCX_TLS="$tls" perftest_run tag_lat "$size" "$round_trips" | awk '{print $1}')"
    bw="$(UCX_TLS="$tls" perftest_run tag_bw "$size" "$iters" "$window" | awk '{print $2}')"
    echo "$lat $bw" >> "$out/perftest_$size.txt"
  done
  rl="$(awk '{print $1}' "$out/relay_$size.txt" | median)"
  rb="$(awk '{print $2}' "$out/relay_$size.txt" | median)"
  pl="$(awk '{print $1}' "$out/perftest_$size.txt" | median)"
  pb="$(awk '{print $2}' "$out/perftest_$size.txt" | median)"
  awk -v s="$size" -v rl="$rl" -v rb="$rb" -v pl="$pl" -v pb="$pb" 'BEGIN {
    printf "| %d | %.2f | %.2f | %+.2f | %.2f | %.2f | %.2f |\n", s, rl, pl, rl - pl, rb, pb, (pb > 0 ? rb / pb : 0) }' >> "$out/README.md"
  echo "== $size done" >&2
done
cat "$out/README.md"
