#!/usr/bin/env bash
# Lease 70 (2 H200s).
# A: one-shot all_reduce in steps (RELAY_EXP_STEPS, an experiment build's
#    knob) against one step and the default (two-shot at 8 MB), 512 KB -
#    8 MB, one-shot up to 8 MB, raw NCCL beside them; 4 rounds, round 1
#    checked.
# B: all_reduce 8 B - 1 MB against raw NCCL (default and symmetric) with
#    the 256 KiB launch switch, eager after and on the caller's stream;
#    3 rounds, round 1 checked.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
RELAY_EXP_STEP_BYTES=0 RELAY_EXP_STEPS=3 timeout 150 ./ipc_kernels_test > "$work/kernels_steps3.log" 2>&1
echo "ipc_kernels_test, 3 steps: rc=$?"; tail -3 "$work/kernels_steps3.log"
run="python3 $here/relayrun -n 2 --no-prefix --timeout 300 --"
chk="-c \$([ {round} = 1 ] && echo 1 || echo 0)"
c="$here/collectives -b 512K -e 8M -f 2 -n 100 -w 5 --transport cuda_ipc --collective all_reduce --json {out}.json $chk"
os="RELAY_CUDA_IPC_ONE_SHOT_BYTES=8388608"
timeout 200 python3 -m relaybench rounds --rounds 4 --out "$work/steps" \
  "raw=$here/nccl_collectives -b 512K -e 8M -f 2 -n 100 -w 5 -c 0 -t 1 --collective all_reduce --json {out}.json" \
  "dflt=$run $c" \
  "s1=$os $run $c" \
  "s2=$os RELAY_EXP_STEP_BYTES=0 RELAY_EXP_STEPS=2 $run $c" \
  "s4=$os RELAY_EXP_STEP_BYTES=0 RELAY_EXP_STEPS=4 $run $c" > "$work/steps.log" 2>&1
echo "steps rc=$?"; tail -3 "$work/steps.log"; grep -i "wrong\|error\|fail" "$work/steps.log" | head
for ref in s1 raw; do
  python3 -m relaybench table "$work/steps" --reference "$ref" --stat median --intervals
done > "$work/steps_tables.md" 2>&1
grep -A8 "### s2 against s1\|### s4 against s1\|### dflt against s1" "$work/steps_tables.md" | cut -d'|' -f2-5
grep -A8 "against raw" "$work/steps_tables.md" | cut -d'|' -f2-5,8
c="$here/collectives -b 8 -e 1M -f 2 -n 100 -w 5 --transport cuda_ipc --collective all_reduce --json {out}.json $chk"
timeout 300 python3 -m relaybench rounds --rounds 3 --out "$work/small" \
  "raw=$here/nccl_collectives -b 8 -e 1M -f 2 -n 100 -w 5 -c 0 -t 1 --collective all_reduce --json {out}.json" \
  "raw-symmetric=$here/nccl_collectives -b 8 -e 1M -f 2 -n 100 -w 5 -c 0 -t 1 --symmetric 1 --collective all_reduce --json {out}.json" \
  "cuda_ipc=$run $c" \
  "cuda_ipc-on-stream=$run $c --cuda-stream own --stream-order on" > "$work/small.log" 2>&1
echo "small rc=$?"; tail -3 "$work/small.log"; grep -i "wrong\|error\|fail" "$work/small.log" | head
for ref in raw raw-symmetric; do
  python3 -m relaybench table "$work/small" --reference "$ref" --stat median --intervals
done > "$work/small_tables.md" 2>&1
grep -A23 "### cuda_ipc against raw\|### cuda_ipc-on-stream against raw " "$work/small_tables.md" | cut -d'|' -f2-5,9
lease_end
