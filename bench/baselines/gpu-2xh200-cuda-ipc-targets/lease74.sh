#!/usr/bin/env bash
# Lease 74 (2 H200s): all_reduce bfloat16 8 B - 8 MB against raw NCCL
# (default and symmetric), eager after and on the caller's stream, 3
# rounds, round 1 checked (issue 40's targets name float32 and bfloat16).
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
run="python3 $here/relayrun -n 2 --no-prefix --timeout 300 --"
chk="-c \$([ {round} = 1 ] && echo 1 || echo 0)"
s="-b 8 -e 8M -f 2 -n 100 -w 5 --collective all_reduce --dtype bfloat16 --json {out}.json"
timeout 200 python3 -m relaybench rounds --rounds 3 --out "$work/bf16" \
  "raw=$here/nccl_collectives $s -c 0 -t 1" \
  "raw-symmetric=$here/nccl_collectives $s -c 0 -t 1 --symmetric 1" \
  "cuda_ipc=$run $here/collectives $s --transport cuda_ipc $chk" \
  "cuda_ipc-on-stream=$run $here/collectives $s --transport cuda_ipc $chk --cuda-stream own --stream-order on" \
  > "$work/bf16.log" 2>&1
echo "bf16 rc=$?"; grep -i "wrong\|error\|fail" "$work/bf16.log" | head -5
for ref in raw raw-symmetric; do
  python3 -m relaybench table "$work/bf16" --reference "$ref" --stat median --intervals
done > "$work/bf16_tables.md" 2>&1
grep -A25 "### cuda_ipc against raw \|### cuda_ipc-on-stream against raw \|### cuda_ipc against raw-symmetric" "$work/bf16_tables.md" | cut -d'|' -f2-5,8
lease_end
