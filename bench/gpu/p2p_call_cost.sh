#!/usr/bin/env bash
# File: bench/gpu/p2p_call_cost.sh
#
# What one call of NCCL's point-to-point API costs, against which relay's
# ring over NCCL (one ncclGroup of a send and a receive per step and lane)
# is bounded: NCCL's own ring exchange (nccl_collectives --collective
# sendrecv, unchecked) over 8 MB - 1 GB on 2 and 4 GPUs, whose times fit
# t(m) = a + m / B; then relay's ring all_reduce on 4 GPUs at pipeline
# depths 1 and 2 (fewer, larger calls against overlap), reductions capped
# at 16 blocks. About 100 s. From the folder bench/gpu/build.sh filled.
#
# Usage: p2p_call_cost.sh OUT_DIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: p2p_call_cost.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
for n in 2 4; do
  [ "$n" -le "$(gpu_count)" ] || continue
  d=$(seq -s, 0 $((n - 1)))
  echo "== NCCL sendrecv ring exchange, $n GPUs: bytes, us, GB/s"
  CUDA_VISIBLE_DEVICES=$d timeout 25 "$here/nccl_collectives" -b 8M -e 1G -f 2 \
    -n 10 -w 3 -c 0 -t 1 --collective sendrecv \
    --json "$out/sendrecv_${n}gpu.json" >"$out/sendrecv_${n}gpu.log" 2>&1
  grep -E "^ +[0-9]" "$out/sendrecv_${n}gpu.log" | awk '{print $1, $6, $7}'
done
[ "$(gpu_count)" -ge 4 ] || exit 0
for depth in 1 2; do
  echo "== relay ring all_reduce over NCCL, 4 GPUs, depth $depth, 16 blocks: bytes, us, busbw"
  CUDA_VISIBLE_DEVICES=0,1,2,3 RELAY_PIPELINE_DEPTH=$depth RELAY_STREAM_REDUCE_BLOCKS=16 \
    timeout 30 "$here/collectives" --transport nccl --ranks 4 --algorithm ring \
    --collective all_reduce -b 256M -e 1G -f 2 -n 10 -w 3 -c 0 \
    --json "$out/ring4_d${depth}_b16.json" >"$out/ring4_d${depth}_b16.log" 2>&1
  grep -E "^ +[0-9]" "$out/ring4_d${depth}_b16.log" | awk '{print $1, $6, $8}'
done
