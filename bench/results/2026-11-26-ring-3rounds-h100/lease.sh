#!/usr/bin/env bash
# Lease: relay's ring against native all_reduce on 2 GPUs, 64 MB - 1 GB,
# three rounds (open_targets.sh runs one), for the 256 MB verdict.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$out/host.txt" 2>&1; cat "$out/host.txt"
CHECK=0 MIN_SIZE=64M DEPTHS=2 timeout 400 "$here/ring_over_nccl.sh" "$out/ring" 3 > "$out/ring.log" 2>&1
echo "rc=$? ($((SECONDS-start)) s)"
cat "$out/ring/ratio_all_reduce.md"
echo "== done ($((SECONDS-start)) s)"
