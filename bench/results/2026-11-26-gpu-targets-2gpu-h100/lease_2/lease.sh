#!/usr/bin/env bash
# Lease: native reduce_scatter (and all three again) against raw NCCL from
# 32 MB with the faster raw checker; added latency for every collective.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
nvidia-smi -L > "$out/gpus.txt" 2>&1
head -2 "$out/gpus.txt"
echo "== native vs raw >= 32 MB, 2 rounds ($((SECONDS-start)) s)"
MIN_SIZE=32M STREAMS=default RING=0 timeout 300 "$here/compare_nccl.sh" "$out/native" 1G 2 \
  "reduce_scatter all_gather all_reduce" > "$out/native.log" 2>&1
echo "rc=$?"; grep "^==" "$out/native.log"
for f in "$out"/native/ratio_*.md; do echo "-- $f"; cat "$f"; done
for c in all_reduce all_gather reduce_scatter; do
  echo "== added_latency $c ($((SECONDS-start)) s)"
  timeout 40 "$here/added_latency" -n 1000 -e 64K -f 4 -r 20 --collective "$c" 2>&1 | tee "$out/added_latency_$c.log" | grep -v "^#"
done
echo "== done ($((SECONDS-start)) s)"
