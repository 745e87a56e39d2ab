#!/usr/bin/env bash
# Runs bench/pingpong on two loopback ranks: the sweep must print one row
# per size, --takeover one row per trial with both sides' times, and bad
# flags must give a one-line error and exit status 2 (--raw-ucx among
# them: it needs ranks launched on ucx; pingpong_raw_ucx_test runs it).
set -uo pipefail
bin="$1"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

"$bin" -b 8 -e 32K -f 8 -n 50 -w 5 >"$out" 2>&1 || fail "sweep exited $?"
# Sizes 8, 64, 512, 4096, 32768: each row has a size, a latency and a
# bandwidth (0.00 GB/s for the smallest at two decimals).
rows=$(awk '!/^#/ && NF == 3 && $2 > 0 && $3 >= 0' "$out" | wc -l)
[[ $rows == 5 ]] || fail "expected 5 sweep rows, got $rows"

# perftest's loops (posted-ahead receives, a sliding bandwidth window),
# with a window larger than the message count of the smallest run.
"$bin" -b 8 -e 32K -f 8 -n 50 -w 5 --pattern perftest --window 20 >"$out" 2>&1 ||
  fail "perftest pattern exited $?"
rows=$(awk '!/^#/ && NF == 3 && $2 > 0 && $3 >= 0' "$out" | wc -l)
[[ $rows == 5 ]] || fail "expected 5 perftest-pattern rows, got $rows"

# Buffers in System V shared-memory segments, as ucx_perftest's are.
"$bin" -b 8 -e 32K -f 8 -n 50 -w 5 --pattern perftest --memory sysv >"$out" 2>&1 ||
  fail "--memory sysv exited $?"
rows=$(awk '!/^#/ && NF == 3 && $2 > 0 && $3 >= 0' "$out" | wc -l)
[[ $rows == 5 ]] || fail "expected 5 rows with --memory sysv, got $rows"

"$bin" --takeover 3 --poll-ms 2 -e 64K >"$out" 2>&1 || fail "--takeover exited $?"
rows=$(awk '!/^#/ && NF == 3 && $2 > 0 && $3 > 0' "$out" | wc -l)
[[ $rows == 3 ]] || fail "expected 3 takeover rows, got $rows"
grep -q "65536 B message, 2 ms polling" "$out" || fail "takeover header"

for bad in "--takeover 0" "--poll-ms -1" "--window 0" "--pattern osu" "--memory gpu" "--bogus" "-b 1M -e 1K" \
           "--raw-ucx 0" "--raw-ucx 4" "--raw-ucx 4 --pattern perftest"; do
  # shellcheck disable=SC2086
  "$bin" $bad >"$out" 2>&1
  status=$?
  [[ $status == 2 ]] || fail "'$bad' exited $status, expected 2"
  [[ $(wc -l <"$out") == 1 ]] || fail "'$bad' printed more than one line"
done
echo "pingpong smoke test passed"
