#!/usr/bin/env bash
# Lease: native all_reduce, all_gather, reduce_scatter through relay against
# raw NCCL on every GPU of the host, from 32 MB, 2 rounds (round 1 checked).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
nvidia-smi -L | tee "$out/gpus.txt"
MIN_SIZE=32M STREAMS=default RING=0 timeout 330 "$here/compare_nccl.sh" "$out/native" 1G 2 \
  "all_reduce reduce_scatter all_gather" > "$out/native.log" 2>&1
echo "rc=$? ($((SECONDS-start)) s)"; grep "^==" "$out/native.log"
for f in "$out"/native/ratio_*.md; do echo "-- $f"; cat "$f"; done
echo "== done ($((SECONDS-start)) s)"
