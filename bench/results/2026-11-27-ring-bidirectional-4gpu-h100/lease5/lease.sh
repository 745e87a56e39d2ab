#!/usr/bin/env bash
# Lease: the bidirectional ring's pipeline depth on 4 GPUs: 1 lane (each
# step's reduction in line, messages twice as large) against 2 (the
# default) and 3, 64 MB - 1 GB, two rounds. One archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
CHECK=0 MIN_SIZE=64M DEPTHS="2 1 3" timeout 400 "$here/ring_over_nccl.sh" "$work/ring" 2 > "$work/ring.log" 2>&1
echo "ring rc=$? ($((SECONDS-start)) s)"
grep -E "^###|^\| [0-9]" "$work/ring/ratio_all_reduce.md"
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
