#!/usr/bin/env bash
# Lease 62 (1 H200): on the caller's stream, the completion count (b)
# against a completion event (c: no kernel counts), held and not; and after
# the stream, b against c (both without the count). 1 rank, all_reduce
# 8 B - 32 KB, 5 alternating rounds.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
common="--transport cuda_ipc --ranks 1 --memory device --collective all_reduce -b 8 -e 32K -f 8 -n 300 -w 20 -c 0"
sides=()
for v in b c; do
  sides+=("$v-on=$here/collectives_$v $common --cuda-stream own --stream-order on --json {out}.json")
  sides+=("$v-on-held=$here/collectives_$v $common --cuda-stream own --stream-order on --held 1 --json {out}.json")
  sides+=("$v-after-held=$here/collectives_$v $common --held 1 --json {out}.json")
done
cd "$here"
timeout 300 python3 -m relaybench rounds --rounds 5 --out "$work/ab" "${sides[@]}" > "$work/rounds.log" 2>&1
echo "rounds rc=$?"
for ref in b-on b-on-held b-after-held; do
  python3 -m relaybench table "$work/ab" --reference "$ref" --stat median --intervals
done > "$work/tables.md" 2>&1
timeout 60 "$here/collectives_c" --transport cuda_ipc --ranks 1 --memory device --collective all_reduce -b 8 -e 1M -f 8 -n 20 -c 1 --cuda-stream own --stream-order on > "$work/check_c_on.txt" 2>&1; echo "check c on rc=$?"
lease_end
