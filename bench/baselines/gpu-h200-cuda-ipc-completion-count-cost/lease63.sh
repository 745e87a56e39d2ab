#!/usr/bin/env bash
# Lease 63 (1 H200): run_checks.sh with the completion count gone, then
# collectives_prev (2edc692: the count on the caller's stream only) against
# collectives (no count), 1 rank, all_reduce 8 B - 32 KB, 4 rounds.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
CHECK_LIMIT=200 timeout 420 "$here/run_checks.sh" "$work/checks" > "$work/checks.txt" 2>&1
echo "checks rc=$?"; grep -E "^(PASS|FAIL)" "$work/checks.txt" | sed -n '1,60p'; tail -2 "$work/checks.txt"
common="--transport cuda_ipc --ranks 1 --memory device --collective all_reduce -b 8 -e 32K -f 8 -n 300 -w 20 -c 0"
sides=()
for v in prev now; do
  bin="$here/collectives"; [ $v = prev ] && bin="$here/collectives_prev"
  sides+=("$v-on=$bin $common --cuda-stream own --stream-order on --json {out}.json")
  sides+=("$v-on-held=$bin $common --cuda-stream own --stream-order on --held 1 --json {out}.json")
  sides+=("$v-after-held=$bin $common --held 1 --json {out}.json")
done
cd "$here"
timeout 120 python3 -m relaybench rounds --rounds 4 --out "$work/ab" "${sides[@]}" > "$work/rounds.log" 2>&1
echo "rounds rc=$?"
for ref in prev-on prev-on-held prev-after-held; do
  python3 -m relaybench table "$work/ab" --reference "$ref" --stat median --intervals
done > "$work/tables.md" 2>&1
lease_end
