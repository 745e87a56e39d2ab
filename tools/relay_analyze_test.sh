#!/usr/bin/env bash
# tools/relay_analyze on the flight records of real failures
# (testing/flight_scenario): it must name the rank that never entered the
# collective (stall) and the rank that was lost (kill).
set -euo pipefail
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../testing/runfiles.sh"
source "$lib"
scenario="$(runfile testing/flight_scenario)"
analyze="$(runfile tools/relay_analyze)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for at in 0 3 7; do
  d="$tmp/stall$at"; mkdir -p "$d"
  "$scenario" --dir "$d" --stall 2 --at "$at" >"$d/out.txt" || fail "stall scenario at $at: $(cat "$d/out.txt")"
  verdict="$(python3 "$analyze" "$d" | head -1)"
  echo "stall at $at: $verdict"
  [[ "$verdict" == "rank 2 never entered all_reduce #$at; ranks 0-1,3 wait in it since"* ]] ||
    fail "stall at $at: wrong verdict"
done

# The same stall, read from the records SIGUSR1 wrote while the ranks hung.
d="$tmp/signal"; mkdir -p "$d"
"$scenario" --dir "$d" --stall 2 --at 4 --signal 1 >"$d/out.txt" || fail "signal scenario: $(cat "$d/out.txt")"
verdict="$(python3 "$analyze" "$d" | head -1)"
echo "stall at 4, records from SIGUSR1: $verdict"
[[ "$verdict" == "rank 2 never entered all_reduce #4; ranks 0-1,3 wait in it since"* ]] ||
  fail "signal: wrong verdict"
grep -q '"reason": "signal SIGUSR1"' "$d/relay_flight_rank0.json" || fail "signal: not the signal's record"

for op in 0 13 40; do
  d="$tmp/kill$op"; mkdir -p "$d"
  "$scenario" --dir "$d" --kill 1 --at-op "$op" >"$d/out.txt" || fail "kill scenario at op $op: $(cat "$d/out.txt")"
  verdict="$(python3 "$analyze" "$d" | head -1)"
  echo "kill at op $op: $verdict"
  [[ "$verdict" == *"rank 1 was lost"* ]] || fail "kill at op $op: wrong verdict"
done
echo PASS
