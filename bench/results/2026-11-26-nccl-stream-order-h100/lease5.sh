#!/usr/bin/env bash
# StreamOrder::kOnStream on a GPU host: the NCCL tests (with the new
# OnStreamOrdersLaterWorkOnThatStream), then the time relay adds to small
# all_reduces against raw NCCL with and without it, on 2 and 4 GPUs.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
nvidia-smi -L >"$out/gpus.txt" 2>&1
timed_step "$out" nccl_transport_test 70 "$here/nccl_transport_test"
grep -E "OnStream|^\[  (PASSED|FAILED) |FAILED \]" "$out/nccl_transport_test.log" | head -8
v="relay-own-stream relay-on-stream relay relay-on-legacy"
timed_step "$out" latency_2gpu 190 env CUDA_VISIBLE_DEVICES=0,1 FACTOR=4 VARIANTS="$v" \
  "$here/nccl_latency.sh" "$out/latency_2gpu" 5 all_reduce
timed_step "$out" latency_4gpu 190 env FACTOR=4 VARIANTS="$v" \
  "$here/nccl_latency.sh" "$out/latency_4gpu" 4 all_reduce
for n in 2 4; do cat "$out/latency_${n}gpu/added_all_reduce.md" 2>/dev/null | head -60; done
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
