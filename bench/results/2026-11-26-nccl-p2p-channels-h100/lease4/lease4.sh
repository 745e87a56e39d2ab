#!/usr/bin/env bash
# Two rounds of p2p_channels.sh with the defaults, then loopback on device
# memory with the reductions' default grid (16) against a full one (0).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
for r in 1 2; do CHANNELS=64 EXTRA="" "$here/p2p_channels.sh" "$out/round$r"; done
source "$here/gpu_env.sh"
for n in 2 4; do
  for b in 16 0; do
    echo "== loopback device ring, $n GPUs, RELAY_STREAM_REDUCE_BLOCKS=$b"
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) RELAY_STREAM_REDUCE_BLOCKS=$b timeout 40 \
      "$here/collectives" --transport loopback --memory device --ranks $n --algorithm ring \
      --collective all_reduce -b 64M -e 1G -f 4 -n 10 -w 3 -c 0 \
      >"$out/loopback_${n}gpu_b$b.txt" 2>&1
    grep -E "^ +[0-9]" "$out/loopback_${n}gpu_b$b.txt" | awk '{print $1, $6, $8}'
  done
done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
