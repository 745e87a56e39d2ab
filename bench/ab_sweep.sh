#!/usr/bin/env bash
# File: bench/ab_sweep.sh
#
# Compares two or more builds of bench/collectives over a size sweep of
# all_reduce, in alternating rounds, and prints each size's median busbw
# per build (the better of out-of-place and in-place, median over rounds)
# and each build's ratio to the first. ab_latency.sh's counterpart for
# bandwidth: a before/after figure on a noisy machine needs both builds
# run minute by minute, not one after the other.
#
# Usage: bench/ab_sweep.sh [--ranks N] [--rounds R] [--transport T]
#                          [--min B] [--max B] [--iters I] BIN BIN...
#   --ranks N       ranks (default 2): threads on loopback, processes
#                   started by tools/relayrun on ucx
#   --transport T   ucx (default; UCX_TLS as set, else shm,self) or loopback
#   --rounds R      alternating rounds (default 3)
#   --min B, --max B  the sweep, doubling (default 1M to 64M)
#   --iters I       timed calls per size (default 20; warm-up I/4 + 1)
#
# Example (the build before a change against the current one):
#   git stash; bazel build //bench:collectives; cp bazel-bin/bench/collectives /tmp/before
#   git stash pop; bazel build //bench:collectives
#   bench/ab_sweep.sh --ranks 4 /tmp/before bazel-bin/bench/collectives
set -euo pipefail

ranks=2 rounds=3 transport=ucx min=1M max=64M iters=20
usage() { sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//; $d'; }
bins=()
while (($#)); do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --transport) transport="$2"; shift 2 ;;
    --min) min="$2"; shift 2 ;;
    --max) max="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "ab_sweep.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
if ((${#bins[@]} < 1)); then usage >&2; exit 2; fi
launch=()
case "$transport" in
  loopback) ;;
  ucx)
    export UCX_TLS="${UCX_TLS:-shm,self}"
    launch=("$(dirname "$0")/../tools/relayrun" -n "$ranks" --no-prefix --) ;;
  *) echo "ab_sweep.sh: --transport is loopback or ucx, not $transport" >&2; exit 2 ;;
esac
for b in "${bins[@]}"; do
  [[ -x "$b" ]] || { echo "ab_sweep.sh: $b is not an executable" >&2; exit 2; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for i in "${!bins[@]}"; do
    "${launch[@]}" "${bins[$i]}" --collective all_reduce \
      --transport "$transport" $([[ $transport == loopback ]] && echo --ranks "$ranks") \
      -b "$min" -e "$max" -f 2 -n "$iters" -w "$((iters / 4 + 1))" \
      --json "$work/bin${i}_r$r.json" > /dev/null || {
      echo "ab_sweep.sh: ${bins[$i]} failed" >&2; exit 1; }
  done
  echo "round $r/$rounds done" >&2
done
tls=""
[[ $transport == ucx ]] && tls=", UCX_TLS=$UCX_TLS"
echo "# all_reduce busbw (GB/s), $ranks ranks ($transport$tls), $rounds rounds, $min-$max, $iters calls per size"
BENCH_DIR="$(cd "$(dirname "$0")" && pwd)" python3 - "$work" "${bins[@]}" <<'PY'
import glob, os, sys
sys.path.insert(0, os.environ["BENCH_DIR"])
from allreduce_rows import medians
work, bins = sys.argv[1], sys.argv[2:]
per_bin = [medians(sorted(glob.glob(f"{work}/bin{i}_r*.json"))) for i in range(len(bins))]
head = "| size (B) | " + " | ".join(bins) + " | " + " | ".join(f"{b} / first" for b in bins[1:]) + " |"
print(head)
print("|" + "---:|" * (1 + 2 * len(bins) - 1))
for size in sorted(per_bin[0]):
    bw = [m[size][1] if size in m else float("nan") for m in per_bin]
    ratios = [f"{x / bw[0]:.2f}" for x in bw[1:]]
    print(f"| {size} | " + " | ".join(f"{x:.3f}" for x in bw) + " | " + " | ".join(ratios) + " |")
PY
