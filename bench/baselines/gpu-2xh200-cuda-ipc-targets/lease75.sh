#!/usr/bin/env bash
# Lease 75 (2 H200s): a call after the caller's stream skips its event and
# wait while that stream has finished (Finished in cuda_ipc_transport.cc).
# 1. The transport test that holds the caller's stream (own, and a
#    blocking one behind the legacy stream) with the copy behind it.
# 2. before (collectives_before, 407597f) against after (this build),
#    eager all_reduce 8 B - 1 MB on the legacy stream and on a stream of
#    the caller's own, raw NCCL beside them; 4 rounds, round 1 checked.
# 3. run_checks.sh with a GPU per rank.
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/gpu_env.sh"
lease_begin "$1"
cd "$here"
timeout 120 ./cuda_ipc_transport_test --gtest_filter='*CallsAfterABusyStream*:*StreamsStayInOrder*:*CallerStreamDestroyed*:*DestroyedStreamsCall*' > "$work/test.log" 2>&1
echo "busy-stream tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]|want" "$work/test.log" | head -12
run="python3 $here/relayrun -n 2 --no-prefix --timeout 300 --"
chk="-c \$([ {round} = 1 ] && echo 1 || echo 0)"
s="-b 8 -e 1M -f 4 -n 100 -w 5 --collective all_reduce --json {out}.json"
timeout 150 python3 -m relaybench rounds --rounds 4 --out "$work/ab" \
  "raw=$here/nccl_collectives $s -c 0 -t 1" \
  "before=$run $here/collectives_before $s --transport cuda_ipc $chk" \
  "after=$run $here/collectives $s --transport cuda_ipc $chk" \
  "before-own=$run $here/collectives_before $s --transport cuda_ipc $chk --cuda-stream own" \
  "after-own=$run $here/collectives $s --transport cuda_ipc $chk --cuda-stream own" > "$work/ab.log" 2>&1
echo "ab rc=$?"; grep -i "wrong\|error\|fail" "$work/ab.log" | head -5
for ref in before before-own raw; do
  python3 -m relaybench table "$work/ab" --reference "$ref" --stat median --intervals
done > "$work/ab_tables.md" 2>&1
grep -A14 "### after against before \|### after-own against before-own" "$work/ab_tables.md" | cut -d'|' -f2-5,9
grep -A14 "### after against raw " "$work/ab_tables.md" | cut -d'|' -f2-5,9
CHECK_LIMIT=120 timeout 400 "$here/run_checks.sh" "$work/checks" > "$work/checks.txt" 2>&1
echo "run_checks rc=$?"; grep -E "^FAIL|failed" "$work/checks.txt" | tail -8
lease_end
