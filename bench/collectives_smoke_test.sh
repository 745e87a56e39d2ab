#!/usr/bin/env bash
# Runs bench/collectives the way the README does, on small sizes: every
# collective must finish with every row checked and right, and bad flags
# must give a one-line error and exit status 2.
set -uo pipefail
bin="$1"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

for ranks in 1 3 4; do
  "$bin" -b 8 -e 64K -f 8 -n 2 -w 1 --ranks "$ranks" --json "$out.json" >"$out" 2>&1 ||
    fail "all collectives on $ranks ranks exited $?"
  grep -q "Out of bounds values : 0 OK" "$out" || fail "wrong values on $ranks ranks"
  # One table per collective, each with at least one row.
  [[ $(grep -c "^# relay " "$out") == 9 ]] || fail "expected 9 collectives"
  grep -q '"collective": "all_to_all"' "$out.json" || fail "JSON lacks all_to_all"
  rm -f "$out.json"
done

"$bin" --collective all_reduce --algorithm ring --dtype bfloat16 --op avg \
  -b 1K -e 1M -f 32 -n 2 -w 1 --ranks 5 >"$out" 2>&1 || fail "bfloat16 avg ring"
grep -q "Out of bounds values : 0 OK" "$out" || fail "bfloat16 avg wrong"

# The blocking form (Communicator::RunCollective), every collective checked.
"$bin" --api blocking -b 8 -e 64K -f 8 -n 2 -w 1 --ranks 2 >"$out" 2>&1 ||
  fail "blocking calls exited $?"
grep -q "Out of bounds values : 0 OK" "$out" || fail "blocking calls wrong"
grep -q "blocking calls (RunCollective)" "$out" || fail "blocking not reported"

for bad in "-b" "--bogus 1" "--dtype float7" "--ranks 0" "-b 1M -e 1K" \
           "--root 9 --ranks 4" "--algorithm pairwise --collective all_reduce" \
           "--api sometimes"; do
  # shellcheck disable=SC2086
  "$bin" $bad >"$out" 2>&1
  status=$?
  [[ $status == 2 ]] || fail "'$bad' exited $status, want 2"
  [[ $(wc -l <"$out") == 1 ]] || fail "'$bad' printed more than one line"
done
echo "PASS"
