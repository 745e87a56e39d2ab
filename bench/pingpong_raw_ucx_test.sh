#!/usr/bin/env bash
# bench/pingpong --raw-ucx on two processes over UCX shared memory (under
# tools/relayrun): one row per size with relay's and raw UCX's half round
# trips, both positive, and their difference, which must be what the row's
# two figures give (to the rounding of three decimals against two).
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
BIN="$(runfile bench/pingpong)"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }

UCX_TLS=shm,self RELAY_UCX_PROGRESS_THREAD=0 "$RELAYRUN" -n 2 --timeout 120 -- \
  "$BIN" -b 8 -e 64K -f 8 -n 200 -w 10 --pattern perftest --raw-ucx 8 >"$out" 2>&1 ||
  fail "pingpong --raw-ucx exited $?"
grep -q "relay - raw" "$out" || fail "no header"
# Sizes 8, 64, 512, 4096, 32768 (the last a rendezvous message).
rows=$(awk '!/#/ && NF == 5 && $3 > 0 && $4 > 0 {
              d = $3 - $4 - $5; if (d < 0) d = -d; if (d <= 0.011) print }' "$out" | wc -l)
[[ $rows == 5 ]] || fail "expected 5 rows of size, relay, raw, difference; got $rows"
echo "pingpong --raw-ucx test passed"
