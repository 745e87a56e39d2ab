#!/usr/bin/env bash
# Lease: issue 4's 2-GPU targets on whatever host comes (asked for nvidia-h200-x2).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
nvidia-smi -L > "$out/gpus.txt" 2>&1
nvidia-smi topo -m >> "$out/gpus.txt" 2>&1
cat "$out/gpus.txt" | head -3
echo "== open_targets ($((SECONDS-start)) s)"
"$here/open_targets.sh" "$out/targets" > "$out/open_targets.log" 2>&1
tail -40 "$out/open_targets.log"
echo "== native vs raw >= 32 MB, 2 rounds ($((SECONDS-start)) s)"
MIN_SIZE=32M STREAMS=default RING=0 timeout 150 "$here/compare_nccl.sh" "$out/native" 1G 2 \
  "all_reduce all_gather reduce_scatter" > "$out/native.log" 2>&1
echo "rc=$?"; tail -5 "$out/native.log"
for f in "$out"/native/ratio_*.md; do echo "-- $f"; cat "$f"; done
echo "== device_reduce ($((SECONDS-start)) s)"
timeout 60 "$here/device_reduce" -b 1M -e 1G -f 4 -n 50 > "$out/device_reduce.md" 2>&1
cat "$out/device_reduce.md"
echo "== conformance over NCCL, 2 processes ($((SECONDS-start)) s)"
timeout 120 python3 "$here/relayrun" -n 2 --transport nccl --timeout 110 -- \
  "$here/conformance_rank" --timeout 60 > "$out/conformance_processes_2.log" 2>&1
echo "rc=$?"; tail -3 "$out/conformance_processes_2.log"
echo "== done ($((SECONDS-start)) s)"
