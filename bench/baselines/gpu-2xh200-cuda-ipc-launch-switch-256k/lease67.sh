#!/usr/bin/env bash
# Lease 67 (2 H200s): with the completion count gone, does the 8 KiB switch
# to dependent launches still pay? cuda_ipc eager by default against
# RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=1 MiB and 64 MiB (graph relaunches up
# to there), all_reduce 4 KB - 8 MB, 100 calls a size, 3 rounds.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
MIN_SIZE=4K STREAMS=" " RING=0 WINDOW=0 COPY=0 ITERS=100 \
  CUDA_IPC_VARIANTS="g1m:RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=1048576 g64m:RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=67108864" \
  timeout 400 ./compare_nccl.sh "$work/ar" 8M 3 all_reduce > "$work/ar.log" 2>&1
echo "compare rc=$?"
PYTHONPATH=. python3 -m relaybench table "$work/ar/all_reduce" --reference cuda_ipc --stat median --intervals > "$work/ar_tables.md" 2>&1
for s in cuda_ipc-g1m cuda_ipc-g64m raw; do
  grep -A16 "### $s against cuda_ipc " "$work/ar_tables.md" | cut -d'|' -f2-5,9
done
lease_end
