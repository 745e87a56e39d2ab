#!/usr/bin/env bash
# relay's ring over NCCL on 2 GPUs at depths 2, 3 and 4 (defaults
# otherwise), two rounds, 128 MB - 1 GB.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
timed_step "$out" ring_2gpu_depths 200 env CUDA_VISIBLE_DEVICES=0,1 CHECK=0 \
  MIN_SIZE=128M DEPTHS="2 3 4" "$here/ring_over_nccl.sh" "$out/ring_2gpu_depths" 2
grep -E "^###|^\| [0-9]" "$out/ring_2gpu_depths/ratio_all_reduce.md" | cut -c1-100
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
