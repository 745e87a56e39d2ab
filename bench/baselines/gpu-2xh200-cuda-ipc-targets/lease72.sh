#!/usr/bin/env bash
# Lease 72 (2 H200s): all_gather and reduce_scatter against raw NCCL
# (default and symmetric), 8 B - 8 MB, 3 rounds, round 1 checked; then
# all_gather and reduce_scatter 32 MB - 1 GB against raw NCCL, 2 rounds.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
run="python3 $here/relayrun -n 2 --no-prefix --timeout 300 --"
chk="-c \$([ {round} = 1 ] && echo 1 || echo 0)"
for coll in all_gather reduce_scatter; do
  s="-b 8 -e 8M -f 2 -n 100 -w 5 --collective $coll --json {out}.json"
  timeout 140 python3 -m relaybench rounds --rounds 3 --out "$work/$coll" \
    "raw=$here/nccl_collectives $s -c 0 -t 1" \
    "raw-symmetric=$here/nccl_collectives $s -c 0 -t 1 --symmetric 1" \
    "cuda_ipc=$run $here/collectives $s --transport cuda_ipc $chk" > "$work/$coll.log" 2>&1
  echo "$coll small rc=$?"; grep -i "wrong\|error\|fail" "$work/$coll.log" | head -5
  for ref in raw raw-symmetric; do
    python3 -m relaybench table "$work/$coll" --reference "$ref" --stat median --intervals
  done > "$work/${coll}_tables.md" 2>&1
  grep -A25 "### cuda_ipc against raw " "$work/${coll}_tables.md" | cut -d'|' -f2-8
  s="-b 32M -e 1G -f 2 -n 20 -w 3 --collective $coll --json {out}.json"
  timeout 150 python3 -m relaybench rounds --rounds 2 --out "$work/${coll}_big" \
    "raw=$here/nccl_collectives $s -c 0 -t 1" \
    "cuda_ipc=$run $here/collectives $s --transport cuda_ipc -c 0" > "$work/${coll}_big.log" 2>&1
  echo "$coll big rc=$?"
  python3 -m relaybench table "$work/${coll}_big" --reference raw --stat median \
    > "$work/${coll}_big_tables.md" 2>&1
  grep -A10 "### cuda_ipc against raw" "$work/${coll}_big_tables.md" | cut -d'|' -f2-8
done
lease_end
