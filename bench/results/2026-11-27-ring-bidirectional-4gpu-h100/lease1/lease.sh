#!/usr/bin/env bash
# Lease: the bidirectional ring on 4 GPUs. GPU checks first (conformance
# over NCCL with a process per GPU runs the ring on device buffers), then
# relay's ring (both ways, depth 2 and 4; one way, depth 2) against native
# all_reduce, 32 MB - 1 GB, two rounds.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$out/host.txt" 2>&1; cat "$out/host.txt"
timeout 300 "$here/run_checks.sh" "$out/checks" > "$out/checks.log" 2>&1
echo "checks rc=$? ($((SECONDS-start)) s)"; grep -E "PASS|FAIL|failed" "$out/checks.log" | tail -12
CHECK=0 ONE_WAY=1 MIN_SIZE=32M DEPTHS="2 4" timeout 240 "$here/ring_over_nccl.sh" "$out/ring" 2 > "$out/ring.log" 2>&1
echo "ring rc=$? ($((SECONDS-start)) s)"
cat "$out/ring/ratio_all_reduce.md"
echo "== done ($((SECONDS-start)) s)"
