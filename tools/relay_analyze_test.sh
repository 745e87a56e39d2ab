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

# Whether VERDICT says rank 2 never entered all_reduce #K and names each of
# the others, as waiting in it or (on a loaded machine, whose timeouts fire
# apart) as having failed in it: "rank 2 never entered all_reduce #4; ranks
# 0-1,3 wait in it since 21:33:12" or "...; ranks 1,3 wait in it since
# 21:33:12; rank 0 failed in it".
stall_named() {  # VERDICT K
  python3 - "$1" "$2" <<'PY'
import re, sys
verdict, at = sys.argv[1], sys.argv[2]
head = f"rank 2 never entered all_reduce #{at}; "
if not verdict.startswith(head):
    sys.exit(1)
named = []
for part in verdict[len(head):].split("; "):
    m = re.fullmatch(r"ranks? ([0-9,-]+) (waits? in it since [0-9:]+|failed in it)", part)
    if not m:
        sys.exit(1)
    for piece in m.group(1).split(","):
        lo, _, hi = piece.partition("-")
        named += range(int(lo), int(hi or lo) + 1)
sys.exit(0 if sorted(named) == [0, 1, 3] else 1)
PY
}

for at in 0 3 7; do
  d="$tmp/stall$at"; mkdir -p "$d"
  "$scenario" --dir "$d" --stall 2 --at "$at" >"$d/out.txt" || fail "stall scenario at $at: $(cat "$d/out.txt")"
  verdict="$(python3 "$analyze" "$d" | head -1)"
  echo "stall at $at: $verdict"
  stall_named "$verdict" "$at" || fail "stall at $at: wrong verdict"
done

# The same stall, read from the records SIGUSR1 wrote while the ranks hung.
d="$tmp/signal"; mkdir -p "$d"
"$scenario" --dir "$d" --stall 2 --at 4 --signal 1 >"$d/out.txt" || fail "signal scenario: $(cat "$d/out.txt")"
verdict="$(python3 "$analyze" "$d" | head -1)"
echo "stall at 4, records from SIGUSR1: $verdict"
stall_named "$verdict" 4 || fail "signal: wrong verdict"
grep -q '"reason": "signal SIGUSR1"' "$d/relay_flight_rank0.json" || fail "signal: not the signal's record"

# The README's idiom: Wait, return on DeadlineExceeded, no Abort. The
# communicators destroyed with the collective pending write the records
# (there were none: "no flight records found").
d="$tmp/noabort"; mkdir -p "$d"
"$scenario" --dir "$d" --stall 2 --at 3 --no-abort 1 >"$d/out.txt" || fail "no-abort scenario: $(cat "$d/out.txt")"
verdict="$(python3 "$analyze" "$d" | head -1)"
echo "stall at 3, no abort: $verdict"
[[ "$verdict" == "rank 2 never entered all_reduce #3;"* ]] ||
  fail "no-abort: wrong verdict"

# A mismatch caught by the fingerprint check is named, with both calls (it
# read "no collective is pending").
d="$tmp/mismatch"; mkdir -p "$d"
"$scenario" --dir "$d" --mismatch 2 --at 5 >"$d/out.txt" || fail "mismatch scenario: $(cat "$d/out.txt")"
verdict="$(python3 "$analyze" "$d" | head -1)"
echo "mismatch at 5: $verdict"
[[ "$verdict" == "ranks disagree on all_reduce #5: "*"rank 2 called all_reduce(float32 x 500, sum)"* ]] ||
  fail "mismatch: wrong verdict"

for op in 0 13 40; do
  d="$tmp/kill$op"; mkdir -p "$d"
  "$scenario" --dir "$d" --kill 1 --at-op "$op" >"$d/out.txt" || fail "kill scenario at op $op: $(cat "$d/out.txt")"
  verdict="$(python3 "$analyze" "$d" | head -1)"
  echo "kill at op $op: $verdict"
  [[ "$verdict" == *"rank 1 was lost"* ]] || fail "kill at op $op: wrong verdict"
done
# Bad input is refused with exit status 2 and a message naming the problem,
# never a traceback (tools/relay_analyze_fuzz.py fuzzes the same reader).
refused() {  # NAME EXPECTED-MESSAGE-PART JSON...
  local name="$1" want="$2"; shift 2
  local d="$tmp/bad-$name"; mkdir -p "$d"
  local r=0
  for doc in "$@"; do printf '%s' "$doc" >"$d/relay_flight_rank$r.json"; r=$((r + 1)); done
  local rc=0
  python3 "$analyze" "$d" >"$d/out.txt" 2>"$d/err.txt" || rc=$?
  echo "bad input ($name): exit $rc: $(cat "$d/err.txt")"
  ((rc == 2)) || fail "$name: exit status $rc, not 2"
  grep -q "$want" "$d/err.txt" || fail "$name: message lacks '$want'"
  ! grep -q Traceback "$d/err.txt" || fail "$name: traceback"
}
ok='{"rank": 0, "size": 2, "reason": "", "entries": []}'
refused not-json "not JSON" '{"rank": 0,'
refused not-object "not a JSON object" '[1, 2]'
refused no-entries '"entries" is missing' '{"rank": 0, "size": 2}'
refused huge-world "not a world size" '{"rank": 0, "size": 1099511627776, "entries": []}'
refused rank-outside "outside a job" '{"rank": 5, "size": 2, "entries": []}'
refused bad-state '"state" is not one of' \
  '{"rank": 0, "size": 1, "entries": [{"sequence": 0, "kind": "barrier", "state": "lost", "code": "OK", "message": "", "queued": "t"}]}'
refused two-of-rank-0 "a second record for rank 0" "$ok" "$ok"
refused two-jobs "different sizes" "$ok" '{"rank": 1, "size": 3, "entries": []}'
echo PASS
