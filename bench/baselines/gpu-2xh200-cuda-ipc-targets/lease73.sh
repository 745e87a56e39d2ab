#!/usr/bin/env bash
# Lease 73 (2 H200s): all_reduce 256 KB - 8 MB against raw NCCL (default
# and symmetric) with one-shot to 8 MiB, eager, on the caller's stream and
# replayed from a graph, 3 rounds, round 1 checked; then all_reduce 32 MB -
# 1 GB against raw NCCL, into windows, and the GPU-to-GPU copy ceiling
# (compare_nccl.sh), 2 rounds.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
run="python3 $here/relayrun -n 2 --no-prefix --timeout 300 --"
chk="-c \$([ {round} = 1 ] && echo 1 || echo 0)"
s="-b 256K -e 8M -f 2 -n 100 -w 5 --collective all_reduce --json {out}.json"
timeout 150 python3 -m relaybench rounds --rounds 3 --out "$work/mid" \
  "raw=$here/nccl_collectives $s -c 0 -t 1" \
  "raw-symmetric=$here/nccl_collectives $s -c 0 -t 1 --symmetric 1" \
  "cuda_ipc=$run $here/collectives $s --transport cuda_ipc $chk" \
  "cuda_ipc-on-stream=$run $here/collectives $s --transport cuda_ipc $chk --cuda-stream own --stream-order on" \
  "cuda_ipc-graph=$run $here/collectives $s --transport cuda_ipc -c 0 --api graph" \
  > "$work/mid.log" 2>&1
echo "mid rc=$?"; grep -i "wrong\|error\|fail" "$work/mid.log" | head -5
for ref in raw raw-symmetric; do
  python3 -m relaybench table "$work/mid" --reference "$ref" --stat median --intervals
done > "$work/mid_tables.md" 2>&1
grep -A10 "### cuda_ipc.* against raw" "$work/mid_tables.md" | cut -d'|' -f2-8
MIN_SIZE=32M STREAMS=" " RING=0 timeout 330 ./compare_nccl.sh "$work/big" 1G 2 all_reduce > "$work/big.log" 2>&1
echo "big rc=$?"
head -30 "$work/big/ratio_all_reduce_vs_copy.md" 2>/dev/null
head -20 "$work/big/ratio_all_reduce.md" 2>/dev/null
lease_end
