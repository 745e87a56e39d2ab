#!/usr/bin/env bash
# File: bench/gpu/p2p_by_size.sh
#
# NCCL's point-to-point bandwidth by message size, which bounds relay's
# ring over NCCL (one ncclGroup of a send and a receive per step and lane,
# of S / (ranks x lanes) bytes): NCCL's own ring exchange (nccl_collectives
# --collective sendrecv, unchecked) over 8 MB - 1 GB on 2 and 4 GPUs; then
# relay's ring all_reduce on 4 GPUs at pipeline depths 1 and 2 (larger
# messages against overlap), reductions capped at 16 blocks. About 100 s.
# From the folder bench/gpu/build.sh filled.
#
# On 4 H100s (2026-11-26) NCCL's point-to-point ran at 113-162 GB/s up to
# 128 MB messages and 299 at 256 MB, because NCCL gives one send at most
# (point-to-point channels) / (ranks) of its channels (relay's NCCL
# transport now has a communicator of its own with 64 for point-to-point,
# RELAY_NCCL_P2P_CHANNELS). P2P_ENVS reruns the 4-GPU ring
# exchange and relay's ring under each of NCCL's channel settings listed
# (about 55 s each), and NCCL_DEBUG=INFO logs of one 64 MB exchange show
# the channels NCCL chose (p2p_debug.log).
#
# Usage: p2p_by_size.sh OUT_DIR
# Environment: P2P_ENVS, space-separated VAR=VALUE settings (default:
#   none); e.g. "NCCL_MIN_P2P_NCHANNELS=64 NCCL_P2P_NVL_CHUNKSIZE=131072",
#   the two that moved it (bench/results/2026-11-26-nccl-p2p-channels-h100)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: p2p_by_size.sh OUT_DIR}"
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
echo "== NCCL's channels for a 64 MB exchange on 4 GPUs: p2p_debug.log"
CUDA_VISIBLE_DEVICES=0,1,2,3 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P \
  timeout 20 "$here/nccl_collectives" -b 64M -e 64M -n 2 -w 1 -c 0 -t 1 \
  --collective sendrecv >"$out/p2p_debug.log" 2>&1
grep -iE "channel|p2p" "$out/p2p_debug.log" | head -5
for setting in ${P2P_ENVS:-}; do
  name=$(tr '=' '_' <<<"$setting")
  echo "== $setting: NCCL sendrecv, 4 GPUs: bytes, us, GB/s"
  env CUDA_VISIBLE_DEVICES=0,1,2,3 "$setting" timeout 25 "$here/nccl_collectives" \
    -b 8M -e 1G -f 2 -n 10 -w 3 -c 0 -t 1 --collective sendrecv \
    --json "$out/sendrecv_4gpu_$name.json" >"$out/sendrecv_4gpu_$name.log" 2>&1
  grep -E "^ +[0-9]" "$out/sendrecv_4gpu_$name.log" | awk '{print $1, $6, $7}'
  echo "== $setting: relay ring all_reduce, 4 GPUs, depth 2, 16 blocks: bytes, us, busbw"
  env CUDA_VISIBLE_DEVICES=0,1,2,3 "$setting" RELAY_STREAM_REDUCE_BLOCKS=16 \
    timeout 30 "$here/collectives" --transport nccl --ranks 4 --algorithm ring \
    --collective all_reduce -b 256M -e 1G -f 2 -n 10 -w 3 -c 0 \
    --json "$out/ring4_d2_b16_$name.json" >"$out/ring4_d2_b16_$name.log" 2>&1
  grep -E "^ +[0-9]" "$out/ring4_d2_b16_$name.log" | awk '{print $1, $6, $8}'
done
