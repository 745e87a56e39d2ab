#!/usr/bin/env bash
# Lease 77 (2 H200s): all_reduce float32 8 B - 128 KB replayed from a CUDA
# graph (collectives --api graph) against raw NCCL eager, 3 rounds, at
# d3d8f39 (issue 40's graph target: 8 B in 2.5 us or less).
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
run="python3 $here/relayrun -n 2 --no-prefix --timeout 300 --"
s="-b 8 -e 128K -f 2 -n 100 -w 5 --collective all_reduce --json {out}.json"
timeout 150 python3 -m relaybench rounds --rounds 3 --out "$work/graph" \
  "raw=$here/nccl_collectives $s -c 0 -t 1" \
  "cuda_ipc-graph=$run $here/collectives $s --transport cuda_ipc -c 0 --api graph" \
  > "$work/graph.log" 2>&1
echo "graph rc=$?"
python3 -m relaybench table "$work/graph" --reference raw --stat median --intervals \
  > "$work/graph_tables.md" 2>&1
cut -d'|' -f2-5 "$work/graph_tables.md" | head -24
lease_end
