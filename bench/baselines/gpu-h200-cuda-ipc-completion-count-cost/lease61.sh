#!/usr/bin/env bash
# Lease 61 (1 H200): does an after-stream call's skipped completion count
# save GPU time? collectives_a (eb81910) against collectives_b (the
# launcher's report_completion), 1 rank, all_reduce 8 B - 32 KB, held and
# not, 4 alternating rounds; and launch_cost's host-mapped store rows.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
timeout 120 "$here/launch_cost" > "$work/launch_cost.md" 2>&1
common="--transport cuda_ipc --ranks 1 --memory device --collective all_reduce -b 8 -e 32K -f 8 -n 300 -w 20 -c 0"
sides=()
for v in a b; do
  sides+=("$v-after=$here/collectives_$v $common --json {out}.json")
  sides+=("$v-after-held=$here/collectives_$v $common --held 1 --json {out}.json")
  sides+=("$v-on=$here/collectives_$v $common --cuda-stream own --stream-order on --json {out}.json")
  sides+=("$v-on-held=$here/collectives_$v $common --cuda-stream own --stream-order on --held 1 --json {out}.json")
done
cd "$here"
timeout 300 python3 -m relaybench rounds --rounds 4 --out "$work/ab" "${sides[@]}" > "$work/rounds.log" 2>&1
echo "rounds rc=$?"
for ref in a-after a-after-held a-on a-on-held; do
  python3 -m relaybench table "$work/ab/all_reduce" --reference "$ref" --stat median --intervals
done > "$work/tables.md" 2>&1
timeout 60 "$here/collectives_b" --transport cuda_ipc --ranks 1 --memory device --collective all_reduce -b 8 -e 1M -f 8 -n 20 -c 1 > "$work/check_after.txt" 2>&1; echo "check after rc=$?"
timeout 60 "$here/collectives_b" --transport cuda_ipc --ranks 1 --memory device --collective all_reduce -b 8 -e 1M -f 8 -n 20 -c 1 --held 1 --cuda-stream own --stream-order on > "$work/check_on_held.txt" 2>&1; echo "check on held rc=$?"
grep -A12 "host-mapped\|queued behind" "$work/launch_cost.md" | head -20
head -60 "$work/tables.md"
lease_end
