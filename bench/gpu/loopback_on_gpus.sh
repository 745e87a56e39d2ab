#!/usr/bin/env bash
# File: bench/gpu/loopback_on_gpus.sh
#
# The loopback transport on device memory (transports/loopback/
# device_messages.h: ranks as threads, one copy between GPUs per message)
# on a GPU host, from the folder bench/gpu/build.sh filled: its GPU tests,
# then relay's all_reduce on device buffers over loopback (the stream
# executor; ring and the cost model's choice) against raw NCCL's
# all_reduce on the same GPUs, on 2 GPUs and (where the host has them) 4.
# Each step is cut off at its limit; the limits add up to 345 s.
#
# Usage: loopback_on_gpus.sh OUT_DIR
# Environment: MIN_SIZE, MAX_SIZE (default 1M .. 1G, x4), LIMIT_SCALE
#   (default 1: multiply every step's time limit)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: loopback_on_gpus.sh OUT_DIR}"
mkdir -p "$out"
# shellcheck source=bench/gpu/gpu_env.sh
source "$here/gpu_env.sh"
all=$(gpu_count)
step() { timed_step "$out" "$@"; }  # name limit_s command...
nvidia-smi -L >"$out/gpus.txt" 2>&1
step device_semantics 30 "$here/loopback_device_test" \
  --gtest_filter='LoopbackDeviceTest.*'
grep -E "^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]" "$out/device_semantics.log"
for t in TwoGpus ThreeRanksSharingGpus AllGpus; do
  step "conformance_$t" 45 "$here/loopback_device_test" \
    --gtest_filter="LoopbackDeviceConformanceTest.$t"
  grep -E "cases on|^\[  (PASSED|FAILED) |FAILED \]" "$out/conformance_$t.log" | head -5
done
sweep=(-b "${MIN_SIZE:-1M}" -e "${MAX_SIZE:-1G}" -f 4 -n 10 -w 3)
for n in 2 4; do
  [ "$n" -le "$all" ] || continue
  devices=$(seq -s, 0 $((n - 1)))
  step "raw_${n}gpu" 20 env CUDA_VISIBLE_DEVICES="$devices" \
    "$here/nccl_collectives" "${sweep[@]}" -c 0 -t 1 --collective all_reduce \
    --json "$out/raw_${n}gpu.json"
  step "loopback_ring_${n}gpu" 40 env CUDA_VISIBLE_DEVICES="$devices" \
    stdbuf -oL "$here/collectives" --transport loopback --memory device --ranks "$n" \
    --algorithm ring --collective all_reduce "${sweep[@]}" -c 0 \
    --json "$out/loopback_ring_${n}gpu.json"
  # Checked, over smaller sizes: the bench's own verification of each row.
  step "loopback_auto_${n}gpu" 30 env CUDA_VISIBLE_DEVICES="$devices" \
    stdbuf -oL "$here/collectives" --transport loopback --memory device --ranks "$n" \
    --collective all_reduce -b 8 -e 16M -f 8 -n 10 -w 3 -c 1 \
    --json "$out/loopback_auto_${n}gpu.json"
done
for f in "$out"/raw_*gpu.log "$out"/loopback_*gpu.log; do
  echo "== $(basename "$f")"
  grep -E "^ +[0-9]" "$f" | awk '{print $1, $6, $8, $9, $10}'
done
