#!/usr/bin/env bash
# Lease 64 (1 H200): the GPU's time per eager call (--held 1) after and on
# the caller's stream, the caller's stream being the legacy default stream
# or one of the caller's own; 1 rank, all_reduce 8 B - 32 KB, 4 rounds.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
common="$here/collectives --transport cuda_ipc --ranks 1 --memory device --collective all_reduce -b 8 -e 32K -f 8 -n 300 -w 20 -c 0 --held 1"
cd "$here"
timeout 200 python3 -m relaybench rounds --rounds 4 --out "$work/ab" \
  "after-legacy=$common --json {out}.json" \
  "after-own=$common --cuda-stream own --json {out}.json" \
  "on-own=$common --cuda-stream own --stream-order on --json {out}.json" \
  "on-legacy=$common --stream-order on --json {out}.json" > "$work/rounds.log" 2>&1
echo "rounds rc=$?"
python3 -m relaybench table "$work/ab" --reference after-legacy --stat median --intervals > "$work/tables.md" 2>&1
cat "$work/tables.md"
lease_end
