#!/usr/bin/env bash
# File: bench/relay_vs_raw_ucx.sh
#
# What relay's point-to-point path adds to UCX's own, measured inside the
# same processes: runs `pingpong --raw-ucx` (bench/raw_ucx.h) RUNS times
# under tools/relayrun and prints, per size, the median over the runs of
# relay's half round trip minus raw UCX's, with a 95% bootstrap interval
# (bench/relaybench). Each run alternates blocks of both sides on the
# same buffers, so the host's phase, the launcher and the pages cancel out;
# what stays apart across runs is noise, which the median over runs damps.
#
# relay's UCX progress thread is off (RELAY_UCX_PROGRESS_THREAD=0) unless
# THREAD=1: after a block of relay's round trips it lingers for 20 ms,
# waking every 100 us to poll (transports/ucx/ucx_transport.cc,
# ProgressLoop), and on 2 cores those wake-ups land on the raw side's
# blocks. Measure its own cost on relay's side apart (ab_pingpong.sh).
#
# Usage: bench/relay_vs_raw_ucx.sh [--runs N] [--block B] [--iters I]
#                                  [-b MIN] [-e MAX] [-f FACTOR] PINGPONG
#   --runs N     process pairs started, one after another (default 30)
#   --block B    round trips per block (default 32)
#   --iters I    round trips per size and side (default 8192; pingpong
#                moves at most about 1 GB per size)
#   -b, -e, -f   the sizes, as pingpong takes them (default 8, 256K, 32)
#   PINGPONG     a build of //bench:pingpong
#   UCX_TLS as set, else shm,self. THREAD=1 keeps relay's UCX progress
#   thread on; it is off by default because after relay's blocks it
#   lingers 20 ms, waking every 100 us, on the raw side's blocks.
#
# Example:
#   bazel build -c opt //bench:pingpong
#   bench/relay_vs_raw_ucx.sh --runs 40 -b 256K -e 256K bazel-bin/bench/pingpong
set -euo pipefail
cd "$(dirname "$0")/.."

runs=30 block=32 iters=8192 min=8 max=256K factor=32 bin=""
usage() { sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//; $d'; }
while (($#)); do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --block) block="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    -b) min="$2"; shift 2 ;;
    -e) max="$2"; shift 2 ;;
    -f) factor="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "relay_vs_raw_ucx.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) [[ -z $bin ]] || { echo "relay_vs_raw_ucx.sh: one PINGPONG only" >&2; exit 2; }
       bin="$1"; shift ;;
  esac
done
[[ -n $bin ]] || { usage >&2; exit 2; }
[[ -x $bin ]] || { echo "relay_vs_raw_ucx.sh: $bin is not an executable" >&2; exit 2; }
export UCX_TLS="${UCX_TLS:-shm,self}"
export RELAY_UCX_PROGRESS_THREAD="${THREAD:-0}"

rows="$(mktemp)"
trap 'rm -f "$rows"' EXIT
for ((run = 1; run <= runs; ++run)); do
  if ! out="$(tools/relayrun -n 2 --no-prefix --timeout 300 -- "$bin" -b "$min" -e "$max" \
                -f "$factor" -n "$iters" --pattern perftest --raw-ucx "$block" 2>&1)"; then
    echo "relay_vs_raw_ucx.sh: run $run failed:" >&2
    echo "$out" >&2
    exit 1
  fi
  awk '!/^#/ && NF == 4' <<< "$out" >> "$rows"
  echo "run $run of $runs done" >&2
done
echo "# $UCX_TLS, progress thread ${RELAY_UCX_PROGRESS_THREAD}, blocks of $block, $runs runs"
PYTHONPATH=bench python3 - "$rows" <<'PY'
import collections, statistics, sys
from relaybench.stats import median_interval
by_size = collections.defaultdict(list)
for line in open(sys.argv[1]):
    size, relay, raw, diff = line.split()
    by_size[int(size)].append((float(relay), float(raw), float(diff)))
print(f"# {'size (B)':>10}  {'relay (us)':>10}  {'raw (us)':>10}  "
      f"{'relay - raw, median over runs (95%)':>36}  slower runs")
for size in sorted(by_size):
    rows = by_size[size]
    diffs = [d for _, _, d in rows]
    low, high = median_interval(diffs)
    print(f"  {size:>10}  {statistics.median(r for r, _, _ in rows):>10.2f}  "
          f"{statistics.median(w for _, w, _ in rows):>10.2f}  "
          f"{statistics.median(diffs):>+14.3f} ({low:+.3f} to {high:+.3f})  "
          f"{sum(d > 0 for d in diffs)} of {len(diffs)}")
PY
