#!/usr/bin/env bash
# Aligned block partitions on a GPU host: the NCCL and loopback GPU tests
# (conformance on device buffers), then relay's ring over NCCL on 2 GPUs at
# depths 2 and 3, one round, 256 MB - 1 GB.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
timed_step "$out" nccl_transport_test 60 "$here/nccl_transport_test"
grep -E "^\[  (PASSED|FAILED) |FAILED \]" "$out/nccl_transport_test.log" | head -5
timed_step "$out" loopback_device_test 30 "$here/loopback_device_test"
grep -E "^\[  (PASSED|FAILED) |FAILED \]" "$out/loopback_device_test.log" | head -5
timed_step "$out" ring_2gpu_depths 70 env CUDA_VISIBLE_DEVICES=0,1 CHECK=0 \
  MIN_SIZE=256M DEPTHS="2 3" "$here/ring_over_nccl.sh" "$out/ring_2gpu_depths" 1
grep -E "^###|^\| [0-9]" "$out/ring_2gpu_depths/ratio_all_reduce.md" | cut -c1-100
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
