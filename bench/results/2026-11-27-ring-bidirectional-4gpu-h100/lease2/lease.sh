#!/usr/bin/env bash
# Lease: the bidirectional ring on 4 GPUs, from 4 MiB blocks each way (the
# engine's threshold), three rounds against the one-way ring and native
# all_reduce, 32 MB - 1 GB; conformance over NCCL with a process per GPU
# first. Everything lands in one archive (a lease returns 8 files).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
timeout 120 python3 "$here/relayrun" -n 4 --transport nccl --timeout 110 -- \
  "$here/conformance_rank" --timeout 60 > "$work/conformance_processes_4.log" 2>&1
echo "conformance rc=$? ($((SECONDS-start)) s)"; tail -4 "$work/conformance_processes_4.log"
CHECK=0 ONE_WAY=1 MIN_SIZE=32M DEPTHS=2 timeout 300 "$here/ring_over_nccl.sh" "$work/ring" 3 > "$work/ring.log" 2>&1
echo "ring rc=$? ($((SECONDS-start)) s)"
cat "$work/ring/ratio_all_reduce.md"
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
