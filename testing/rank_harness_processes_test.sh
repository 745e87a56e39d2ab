#!/usr/bin/env bash
# RunRanks under a launcher: testing/rank_harness_test run whole on two
# ranks by tools/relayrun, each process one rank over the job's store. Both
# must pass, and rank 0 must see two processes (not two threads).
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
TEST_BIN="$(runfile testing/rank_harness_test)"

# Both ranks would remove the one premature-exit file bazel names; neither
# needs it.
unset TEST_PREMATURE_EXIT_FILE
out="$("$RELAYRUN" -n 2 --timeout 120 -- "$TEST_BIN" 2>&1)"
rc=$?
echo "$out"
if grep -q "no UCX in this build" <<<"$out"; then
  echo "SKIP: no UCX in this build"
  exit 0
fi
[[ $rc == 0 ]] || { echo "FAIL: relayrun exited $rc"; exit 1; }
grep -q "ranks as processes" <<<"$out" || { echo "FAIL: rank 0 did not see two processes"; exit 1; }
echo "PASS"
