#!/usr/bin/env bash
# Lease 68 (2 H200s): RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES 8 KiB (the old
# default) against 256 KiB, eager after and on the caller's stream, with
# raw NCCL beside them; all_reduce 4 KB - 1 MB, 100 calls a size, 4 rounds.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
run="python3 $here/relayrun -n 2 --no-prefix --timeout 300 --"
c="$here/collectives -b 4K -e 1M -f 2 -n 100 -w 5 --transport cuda_ipc --collective all_reduce --json {out}.json -c \$([ {round} = 1 ] && echo 1 || echo 0)"
on="--cuda-stream own --stream-order on"
timeout 400 python3 -m relaybench rounds --rounds 4 --out "$work/ab" \
  "raw=$here/nccl_collectives -b 4K -e 1M -f 2 -n 100 -w 5 -c 0 -t 1 --collective all_reduce --json {out}.json" \
  "after-8k=RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=8192 $run $c" \
  "after-256k=RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=262144 $run $c" \
  "on-8k=RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=8192 $run $c $on" \
  "on-256k=RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES=262144 $run $c $on" > "$work/rounds.log" 2>&1
echo "rounds rc=$?"; tail -3 "$work/rounds.log"
for ref in after-8k on-8k raw; do
  python3 -m relaybench table "$work/ab" --reference "$ref" --stat median --intervals
done > "$work/tables.md" 2>&1
grep -A14 "### after-256k against after-8k\|### on-256k against on-8k" "$work/tables.md" | cut -d'|' -f2-5,9
lease_end
