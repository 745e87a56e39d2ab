#!/usr/bin/env bash
# Lease: with the ring edges on, the ring goes one way again (the NCCL
# transport reports forward_ring_links). Conformance with 4 processes with
# every neighbour message on the edges, then the ring with and without
# edges against native, 256 MB - 1 GB, two rounds. One archive back.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; mkdir -p "$out"
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
source "$here/gpu_env.sh"
start=$SECONDS
{ nvidia-smi -L; lscpu | grep -E "Model name"; } > "$work/host.txt" 2>&1; cat "$work/host.txt"
RELAY_NCCL_RING_EDGES=1 RELAY_NCCL_RING_EDGE_BYTES=0 timeout 150 python3 "$here/relayrun" -n 4 \
  --transport nccl --timeout 140 -- "$here/conformance_rank" --timeout 60 \
  > "$work/conformance_processes_4_edges.log" 2>&1
echo "conformance (edges) rc=$? ($((SECONDS-start)) s)"; tail -4 "$work/conformance_processes_4_edges.log"
CHECK=0 MIN_SIZE=256M DEPTHS=2 ENV_VARIANTS="edges:RELAY_NCCL_RING_EDGES=1" \
  timeout 300 "$here/ring_over_nccl.sh" "$work/ring" 2 > "$work/ring.log" 2>&1
echo "ring rc=$? ($((SECONDS-start)) s)"
grep -E "^###|^\| [0-9]" "$work/ring/ratio_all_reduce.md"
tar czf "$out/lease.tgz" -C "$work" .
echo "== done ($((SECONDS-start)) s)"
