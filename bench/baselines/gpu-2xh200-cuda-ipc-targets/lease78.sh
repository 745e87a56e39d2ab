#!/usr/bin/env bash
# Lease 78 (2 H200s): relay's NCCL transport (native path, ranks as
# threads) against raw NCCL, all_reduce float32 8 B - 8 MB, after the
# caller's stream and on it (kOnStream), 3 rounds, round 1 checked, at
# d3d8f39.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
chk="-c \$([ {round} = 1 ] && echo 1 || echo 0)"
s="-b 8 -e 8M -f 2 -n 100 -w 5 --collective all_reduce --json {out}.json"
timeout 200 python3 -m relaybench rounds --rounds 3 --out "$work/nccl" \
  "raw=$here/nccl_collectives $s -c 0 -t 1" \
  "relay=$here/collectives $s --transport nccl --ranks 2 $chk" \
  "relay-on-stream=$here/collectives $s --transport nccl --ranks 2 $chk --cuda-stream own --stream-order on" \
  > "$work/nccl.log" 2>&1
echo "nccl rc=$?"; grep -i "wrong\|error\|fail" "$work/nccl.log" | head -5
python3 -m relaybench table "$work/nccl" --reference raw --stat median --intervals \
  > "$work/nccl_tables.md" 2>&1
cut -d'|' -f2-5,9 "$work/nccl_tables.md" | head -60
lease_end
