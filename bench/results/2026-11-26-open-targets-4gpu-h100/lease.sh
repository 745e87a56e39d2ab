#!/usr/bin/env bash
# Lease: 4 GPUs at last. open_targets.sh (checks incl. 4-GPU conformance
# as threads, ring on 2 and 4 GPUs, ring over edges on 4, added latency on
# 2 and 4, all_to_all, p2p by size), then conformance with a process per
# GPU on 4.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
nvidia-smi -L
"$here/open_targets.sh" "$out/targets" > "$out/open_targets.log" 2>&1
echo "open_targets rc=$? ($((SECONDS-start)) s)"
cat "$out/open_targets.log" | grep -v "^\[  SKIPPED" | tail -120
echo "== conformance, 4 processes ($((SECONDS-start)) s)"
timeout 120 python3 "$here/relayrun" -n 4 --transport nccl --timeout 110 -- \
  "$here/conformance_rank" --timeout 60 > "$out/conformance_processes_4.log" 2>&1
echo "rc=$?"; tail -4 "$out/conformance_processes_4.log"
echo "== done ($((SECONDS-start)) s)"
