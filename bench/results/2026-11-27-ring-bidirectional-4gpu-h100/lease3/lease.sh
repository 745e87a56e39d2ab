#!/usr/bin/env bash
# Lease: what else moves the bidirectional ring on 4 GPUs: NCCL's NVLink
# point-to-point chunk at 128 KB (NCCL_P2P_NVL_CHUNKSIZE, process-wide, so
# relay leaves it to the user) and the ring-edge communicators
# (RELAY_NCCL_RING_EDGES=1, clockwise messages only), against the default
# and the one-way ring, 128 MB - 1 GB, two rounds. One archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
CHECK=0 ONE_WAY=1 MIN_SIZE=128M DEPTHS=2 \
  ENV_VARIANTS="chunk128k:NCCL_P2P_NVL_CHUNKSIZE=131072 edges:RELAY_NCCL_RING_EDGES=1 edgeschunk:RELAY_NCCL_RING_EDGES=1,NCCL_P2P_NVL_CHUNKSIZE=131072" \
  timeout 420 "$here/ring_over_nccl.sh" "$work/ring" 2 > "$work/ring.log" 2>&1
echo "ring rc=$? ($((SECONDS-start)) s)"
cat "$work/ring/ratio_all_reduce.md" | grep -E "^###|^\| [0-9]"
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
