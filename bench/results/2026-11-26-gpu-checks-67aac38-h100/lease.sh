#!/usr/bin/env bash
# Lease: the session's final build: open_targets.sh (checks, ring, added
# latency, host facts), then the rest of run_checks.sh (overlap example,
# conformance with a process per GPU).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
"$here/open_targets.sh" "$out/targets" > "$out/open_targets.log" 2>&1
echo "open_targets rc=$? ($((SECONDS-start)) s)"; cat "$out/targets/host.txt"; tail -45 "$out/open_targets.log"
echo "== overlap ($((SECONDS-start)) s)"
timeout 60 "$here/overlap_streams" --steps 20 > "$out/overlap.log" 2>&1; echo "rc=$?"; tail -3 "$out/overlap.log"
echo "== conformance, 2 processes ($((SECONDS-start)) s)"
timeout 150 python3 "$here/relayrun" -n 2 --transport nccl --timeout 140 -- \
  "$here/conformance_rank" --timeout 60 > "$out/conformance_processes_2.log" 2>&1
echo "rc=$?"; tail -2 "$out/conformance_processes_2.log"
echo "== done ($((SECONDS-start)) s)"
