#!/usr/bin/env bash
# Sub-communicators over UCX made and destroyed at each rank's own time
# (testing/teardown_rank), over TCP and over shared memory, with ranks
# leaving in rank order and in reverse, small and rendezvous-sized messages:
# every rank must finish, and a clean teardown must print nothing from UCX
# (no "UCX ERROR ... error during flush" while endpoints close).
set -uo pipefail

lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-relay}/testing/runfiles.sh"
[[ -e "$lib" ]] || lib="$(dirname "$0")/../../testing/runfiles.sh"
# shellcheck source=testing/runfiles.sh
source "$lib"
RELAYRUN="$(runfile tools/relayrun)"
RANK_BIN="$(runfile testing/teardown_rank)"
failures=0

for tls in tcp,self shm,self; do
  for n in 2 3; do
    for order in "" --reverse; do
      for count in 1000 300000; do
        what="UCX_TLS=$tls, $n ranks, count $count${order:+, $order}"
        out="$(UCX_TLS=$tls "$RELAYRUN" -n "$n" --transport ucx --timeout 120 -- \
          "$RANK_BIN" --count "$count" $order 2>&1)"
        rc=$?
        if [[ $rc != 0 || "$(grep -c ": ok$" <<<"$out")" != "$n" ]]; then
          echo "FAIL: $what (relayrun exit $rc):"
          tail -n 20 <<<"$out" | sed 's/^/    /'
          failures=$((failures + 1))
        elif grep -q "UCX  *ERROR" <<<"$out"; then
          echo "FAIL: $what: UCX printed errors on a clean teardown:"
          grep "UCX  *ERROR" <<<"$out" | head -n 5 | sed 's/^/    /'
          failures=$((failures + 1))
        else
          echo "ok: $what"
        fi
      done
    done
  done
done
echo "$failures failure(s)"
((failures == 0))
